// The queue a user writes by hand on SQLite, measured in the same run as
// sqlq so that docs/benchmarks.md can quote ratios rather than absolute
// figures from a noisy machine. It does what a careful hand-written queue
// does — WAL, synchronous=FULL, a busy timeout, one connection per thread,
// BEGIN IMMEDIATE around select-then-lease — and nothing sqlq adds (merged
// commits, deferred counters, prepared-statement reuse across callers).

#ifndef SQLQ_BENCH_BASELINE_SQLITE_H_
#define SQLQ_BENCH_BASELINE_SQLITE_H_

#include <chrono>
#include <string>

#include "sqlq/status.h"

namespace sqlq::bench {

struct BaselineResult {
  double seconds = 0;
  long messages = 0;
};

// `threads` threads insert `total` messages, `batch` per BEGIN IMMEDIATE
// ... COMMIT (a batch of 1, baseline-send-1: one autocommitted INSERT).
Result<BaselineResult> BaselineSendBatch(const std::string& path, long total,
                                         int threads, int batch,
                                         std::size_t payload);

// Fills the queue with `total` messages, then `threads` threads take up to
// `per_claim` at a time, deleting them as they take them (one autocommitted
// DELETE ... RETURNING: no lease), until it is empty.
Result<BaselineResult> BaselineDrain(const std::string& path, long total,
                                     int threads, int per_claim,
                                     std::size_t payload);

// `producers` insert batches of `batch` in a transaction; `consumers` lease
// up to `claim_max` in BEGIN IMMEDIATE ... COMMIT and delete them; for
// `duration`. Returns the messages deleted within the window.
Result<BaselineResult> BaselineMixed(const std::string& path, int producers,
                                     int consumers, int batch, int claim_max,
                                     long max_backlog,
                                     std::chrono::milliseconds duration,
                                     std::size_t payload);

}  // namespace sqlq::bench

#endif  // SQLQ_BENCH_BASELINE_SQLITE_H_
