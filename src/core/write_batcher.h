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
// Engines whose writers do not exclude each other (PostgreSQL) allow several
// groups at once (Engine::write_groups()): up to that many leaders run
// their groups side by side, each in its own transaction on its own
// connection, so that callers do not queue behind one commit's round trips
// while the server could run several; the server merges their WAL flushes.
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
  // long a transaction holds the engine's write lock. At most `max_leaders`
  // groups run at once (>= 1; 1 serialises all transactions, as SQLite's
  // single writer needs anyway).
  explicit WriteBatcher(Engine& engine, std::size_t max_group = 512,
                        int max_leaders = 1);

  // Runs `op` inside a write transaction, possibly shared with other
  // callers', and returns once that transaction committed or failed.
  // Returns op's own error, or the commit's error when op succeeded but the
  // commit failed (then nothing op wrote is stored).
  Status Run(const std::function<Status(Conn&)>& op);

  // Number of transactions committed and operations run; for benchmarks.
  std::size_t TEST_transactions() const;
  std::size_t TEST_operations() const;
  // Most leaders seen running at once.
  int TEST_peak_leaders() const;

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
  const int max_leaders_;
  mutable std::mutex mu_;
  // Callers not yet taken into a group; guarded by mu_. A leader pops its
  // group from the front when it takes it.
  std::deque<Writer*> queue_;
  int leaders_ = 0;  // guarded by mu_; leaders running groups now
  int peak_leaders_ = 0;
  // Estimate of callers writing concurrently; guarded by mu_.
  std::size_t expected_ = 1;
  std::condition_variable arrivals_;  // a caller queued while leaders_ > 0
  static constexpr std::chrono::microseconds kCommitDelay{150};
  std::size_t transactions_ = 0;
  std::size_t operations_ = 0;
};

}  // namespace sqlq::core

#endif  // SQLQ_CORE_WRITE_BATCHER_H_
