// The queue a user writes by hand, on each engine, measured in the same run
// as sqlq so that docs/benchmarks.md can quote ratios rather than absolute
// figures from a noisy machine (the baseline-* workloads). Each does what a
// careful hand-written queue does on its engine and nothing sqlq adds
// (merged commits, deferred counters, leases on the server engines):
//
// - SQLite (baseline_sqlite.cc): WAL, synchronous=FULL, a busy timeout, one
//   connection per thread; BEGIN IMMEDIATE around select-then-lease.
// - PostgreSQL (baseline_postgres.cc, issue 3): producers INSERT; consumers
//   take and finish work in one autocommitted statement,
//     DELETE FROM t WHERE id IN (SELECT id FROM t ORDER BY id LIMIT n
//                                FOR UPDATE SKIP LOCKED) RETURNING id, payload
// - MariaDB/MySQL (baseline_mysql.cc, issue 4): one InnoDB table; producers
//   one multi-row INSERT per batch; consumers START TRANSACTION; SELECT ...
//   ORDER BY id LIMIT n FOR UPDATE SKIP LOCKED; DELETE ... WHERE id IN
//   (...); COMMIT, with prepared statements.
//
// The server engines' baselines have no leases, retries or dead letters:
// they are the fast, fragile thing sqlq is compared with.

#ifndef SQLQ_BENCH_BASELINE_H_
#define SQLQ_BENCH_BASELINE_H_

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "sqlq/status.h"

namespace sqlq::bench {

struct BaselineResult {
  double seconds = 0;
  long messages = 0;
};

// What a mixed load runs: `producers` insert `batch` at a time, pausing
// while more than `max_backlog` wait; `consumers` take up to `claim_max` at
// a time; for `duration`.
struct MixedLoad {
  int producers = 4, consumers = 4, batch = 100, claim_max = 100;
  long max_backlog = 0;
  std::chrono::milliseconds duration{0};
};

// One hand-written queue, made afresh for each call and removed after it.
class Baseline {
 public:
  virtual ~Baseline() = default;
  // `threads` connections store `total` messages, `batch` per transaction
  // (a batch of 1, baseline-send-1: one autocommitted INSERT).
  virtual Result<BaselineResult> Send(long total, int threads, int batch) = 0;
  // Fills the queue with `total` messages (not timed), then `threads`
  // connections take up to `per_claim` at a time, deleting what they take
  // (no lease: a crash loses it), until it is empty.
  virtual Result<BaselineResult> Drain(long total, int threads,
                                       int per_claim) = 0;
  // Producers and consumers for `load.duration`; `done` counts what the
  // consumers took as they go. The rate is what they took in the window.
  virtual Result<BaselineResult> Mixed(const MixedLoad& load,
                                       std::atomic<long>& done) = 0;
};

// The baseline in the file `path` (and its -wal and -shm).
std::unique_ptr<Baseline> SqliteBaseline(const std::string& path,
                                         std::size_t payload);
// The baseline in `table` of the database at `url` (mysql:// or
// mariadb:// for MariaDB/MySQL), created and dropped around each call;
// `table` must be a plain identifier chosen by the bench, never user input.
// A sqlq built without the engine refuses it, as Store::Open does.
Result<std::unique_ptr<Baseline>> PgBaseline(const std::string& url,
                                             const std::string& table,
                                             std::size_t payload);
Result<std::unique_ptr<Baseline>> MysqlBaseline(const std::string& url,
                                                const std::string& table,
                                                std::size_t payload);

}  // namespace sqlq::bench

#endif  // SQLQ_BENCH_BASELINE_H_
