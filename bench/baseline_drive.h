// The loops of the hand-written baselines that are the same on every
// engine: threads that send a fixed number of messages, and threads that
// drain a filled queue. Each engine gives a worker (one connection of its
// own per thread) with
//   Status status() const;        whether it connected
//   Status Insert(int n);         stores n messages in one transaction
//   Result<long> Take(int n);     takes and deletes up to n messages in one
//                                 transaction (delete on claim); how many

#ifndef SQLQ_BENCH_BASELINE_DRIVE_H_
#define SQLQ_BENCH_BASELINE_DRIVE_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "bench/baseline_sqlite.h"
#include "sqlq/status.h"

namespace sqlq::bench {

// Runs `body(worker)` on `threads` threads, each with a worker of its own
// made by `make()`; returns the first failure.
template <class Make, class Body>
Status OnThreads(int threads, Make make, Body body) {
  std::mutex mu;
  Status failure;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      auto w = make();
      Status s = w.status();
      if (s.ok()) s = body(w);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (failure.ok()) failure = s;
      }
    });
  }
  for (auto& t : pool) t.join();
  return failure;
}

inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

// `threads` workers made by `make()` store `total` messages in calls of
// `batch` (the last call may be shorter).
template <class Make>
Result<BaselineResult> DriveSends(long total, int threads, int batch,
                                  Make make) {
  std::atomic<long> next{0};
  const auto start = std::chrono::steady_clock::now();
  Status s = OnThreads(threads, make, [&](auto& w) {
    for (;;) {
      const long first = next.fetch_add(batch);
      if (first >= total) return Status::Ok();
      Status st =
          w.Insert(static_cast<int>(std::min<long>(batch, total - first)));
      if (!st.ok()) {
        next = total;  // the others stop too
        return st;
      }
    }
  });
  if (!s.ok()) return s;
  return BaselineResult{.seconds = SecondsSince(start), .messages = total};
}

// Fills the queue with `total` messages (not timed), then `threads` workers
// take up to `per_claim` at a time until it is empty.
template <class Make>
Result<BaselineResult> DriveDrain(long total, int threads, int per_claim,
                                  Make make) {
  {
    auto filler = make();
    Status s = filler.status();
    for (long left = total; s.ok() && left > 0; left -= 1000) {
      s = filler.Insert(static_cast<int>(std::min<long>(1000, left)));
    }
    if (!s.ok()) return s;
  }
  std::atomic<long> done{0};
  const auto start = std::chrono::steady_clock::now();
  Status s = OnThreads(threads, make, [&](auto& w) {
    for (;;) {
      auto n = w.Take(per_claim);
      if (!n.ok()) return n.status();
      if (*n == 0) return Status::Ok();  // empty: no one adds any more
      done += *n;
    }
  });
  if (!s.ok()) return s;
  if (done != total) {
    return Status::Internal("baseline: the drain did not take every message");
  }
  return BaselineResult{.seconds = SecondsSince(start), .messages = total};
}

}  // namespace sqlq::bench

#endif  // SQLQ_BENCH_BASELINE_DRIVE_H_
