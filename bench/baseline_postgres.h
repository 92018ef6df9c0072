// What the benchmark reads of PostgreSQL besides its baseline
// (baseline.h): the queue table's tuples, for --report-every, and a
// snapshot held open, for --hold-snapshot.

#ifndef SQLQ_BENCH_BASELINE_POSTGRES_H_
#define SQLQ_BENCH_BASELINE_POSTGRES_H_

#include <memory>
#include <string>

#include "sqlq/status.h"

namespace sqlq::bench {

// Live and dead tuples of `table` as the server's statistics have them
// (pg_stat_user_tables; they lag by up to a second or so).
struct PgTupleCounts {
  long live = 0, dead = 0;
};
Result<PgTupleCounts> PgTuples(const std::string& url,
                               const std::string& table);

// Another session holding a REPEATABLE READ snapshot open for as long as
// this object lives: what a long report or a forgotten transaction does to
// a queue table (vacuum cannot remove rows deleted after it began).
class PgSnapshotHolder {
 public:
  static Result<std::unique_ptr<PgSnapshotHolder>> Open(const std::string& url);
  ~PgSnapshotHolder();
  PgSnapshotHolder(const PgSnapshotHolder&) = delete;
  PgSnapshotHolder& operator=(const PgSnapshotHolder&) = delete;

 private:
  explicit PgSnapshotHolder(void* conn) : conn_(conn) {}
  void* conn_;  // PGconn*
};

}  // namespace sqlq::bench

#endif  // SQLQ_BENCH_BASELINE_POSTGRES_H_
