// WriteBatcher: merges concurrent write operations of one process into one
// transaction and one commit (group commit).
//
// Throughput of a durable queue is bounded by commits (one fsync each). When
// several threads write at once, the first becomes the leader: it takes every
// operation queued so far, runs them in one transaction, commits once and
// hands each caller its own status. Callers that arrived meanwhile wait; the
// next of them leads the next group. With no contention the leader is the
// only caller and runs at once, so merging adds no latency.
// An operation that fails cleanly (engine.h, "Clean failures") wrote nothing
// and does not disturb the others; any other failure aborts the group and
// every member that had succeeded gets that error.
// The scheme follows LevelDB's writer queue; see docs/architecture.md.
//
// Thread-safe.

#ifndef SQLQ_CORE_WRITE_BATCHER_H_
#define SQLQ_CORE_WRITE_BATCHER_H_

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

#include "core/engine.h"

namespace sqlq::core {

class WriteBatcher {
 public:
  // At most `max_group` operations share one transaction, which bounds how
  // long a transaction holds the engine's write lock.
  explicit WriteBatcher(Engine& engine, std::size_t max_group = 512);

  // Runs `op` inside a write transaction, possibly shared with other
  // callers', and returns once that transaction committed or failed.
  // Returns op's own error, or the commit's error when op succeeded but the
  // commit failed (then nothing op wrote is stored).
  Status Run(const std::function<Status(Conn&)>& op);

  // Number of transactions committed and operations run; for benchmarks.
  std::size_t TEST_transactions() const;
  std::size_t TEST_operations() const;

 private:
  struct Writer {
    const std::function<Status(Conn&)>* op;
    Status status;
    bool done = false;
    std::condition_variable cv;
  };

  void RunGroup(const std::vector<Writer*>& group);

  Engine& engine_;
  const std::size_t max_group_;
  mutable std::mutex mu_;
  std::deque<Writer*> queue_;  // guarded by mu_
  bool leading_ = false;       // guarded by mu_; a leader is running groups
  // Estimate of callers writing concurrently; guarded by mu_.
  std::size_t expected_ = 1;
  std::condition_variable arrivals_;  // a caller queued while leading_
  static constexpr std::chrono::microseconds kCommitDelay{150};
  std::size_t transactions_ = 0;
  std::size_t operations_ = 0;
};

}  // namespace sqlq::core

#endif  // SQLQ_CORE_WRITE_BATCHER_H_
