// The queue a user writes by hand on PostgreSQL, measured in the same run as
// sqlq (issue 3): one table; producers INSERT; consumers take and finish
// work in one statement,
//   DELETE FROM t WHERE id IN (SELECT id FROM t ORDER BY id LIMIT n
//                              FOR UPDATE SKIP LOCKED) RETURNING id, payload
// autocommitted, one connection per thread, synchronous_commit as the server
// has it. It has no leases, retries or dead letters: it is the fast, fragile
// thing sqlq is compared with.

#ifndef SQLQ_BENCH_BASELINE_POSTGRES_H_
#define SQLQ_BENCH_BASELINE_POSTGRES_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "bench/baseline_sqlite.h"
#include "sqlq/status.h"

namespace sqlq::bench {

// `table` is created (and dropped afterwards); it must be a plain
// identifier chosen by the bench, never user input.
// `threads` connections insert `total` messages, `batch` per autocommitted
// INSERT (baseline-send-1: one row each).
Result<BaselineResult> PgBaselineSendBatch(const std::string& url,
                                           const std::string& table, long total,
                                           int threads, int batch,
                                           std::size_t payload);

// Fills `table` with `total` messages, then `threads` connections take up
// to `per_claim` at a time with the DELETE above until it is empty.
Result<BaselineResult> PgBaselineDrain(const std::string& url,
                                       const std::string& table, long total,
                                       int threads, int per_claim,
                                       std::size_t payload);

// `acked`, when given, counts the messages taken as they go (for interval
// reports); otherwise a counter of its own.
Result<BaselineResult> PgBaselineMixed(const std::string& url,
                                       const std::string& table, int producers,
                                       int consumers, int batch, int claim_max,
                                       long max_backlog,
                                       std::chrono::milliseconds duration,
                                       std::size_t payload,
                                       std::atomic<long>* acked = nullptr);

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
