// The loops of the hand-written baselines that are the same on every
// engine: threads that send a fixed number of messages, threads that drain
// a filled queue, and producers beside consumers for a fixed time. Each
// engine gives a worker (one connection of its own per thread) with
//   Status status() const;        whether it connected
//   Status Insert(int n);         stores n messages in one transaction
//   Result<long> Take(int n);     takes and finishes up to n messages (on
//                                 the server engines: deletes them in one
//                                 transaction, delete on claim); how many

#ifndef SQLQ_BENCH_BASELINE_DRIVE_H_
#define SQLQ_BENCH_BASELINE_DRIVE_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "bench/baseline.h"
#include "bench/stats.h"
#include "sqlq/status.h"

namespace sqlq::bench {

// Runs `body(worker)` with a worker made by `make()` if it connected.
template <class Make, class Body>
Status WithWorker(Make make, Body body) {
  auto w = make();
  Status s = w.status();
  return s.ok() ? body(w) : s;
}

// Runs `body(worker)` on `threads` threads, each with a worker of its own
// made by `make()`; returns the first failure.
template <class Make, class Body>
Status OnWorkers(int threads, Make make, Body body) {
  return OnThreads(threads, [&](int) { return WithWorker(make, body); });
}

// `threads` workers made by `make()` store `total` messages in calls of
// `batch` (the last call may be shorter).
template <class Make>
Result<BaselineResult> DriveSends(long total, int threads, int batch,
                                  Make make) {
  std::atomic<long> next{0};
  const auto start = std::chrono::steady_clock::now();
  Status s = OnWorkers(threads, make, [&](auto& w) {
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
  Status s = OnWorkers(threads, make, [&](auto& w) {
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

// Producers made by `make()` and consumers made by `make_consumer()` (which
// may be `make`) run `load`; `done` counts what the consumers took as they
// go (from 0). The rate is what they took within the window.
template <class Make, class MakeConsumer>
Result<BaselineResult> DriveMixed(const MixedLoad& load, Make make,
                                  MakeConsumer make_consumer,
                                  std::atomic<long>& done) {
  std::atomic<bool> stop{false};
  std::atomic<long> sent{0};
  done = 0;
  long in_window = 0;
  double seconds = 0;
  const auto start = SteadyClock::now();
  std::thread window([&] {
    const auto deadline = start + load.duration;
    while (SteadyClock::now() < deadline && !stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    in_window = done;
    seconds = SecondsSince(start);
    stop = true;
  });
  auto produce = [&](auto& w) -> Status {
    while (!stop) {
      if (sent - done > load.max_backlog) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        continue;
      }
      Status s = w.Insert(load.batch);
      if (!s.ok()) return s;
      sent += load.batch;
    }
    return Status::Ok();
  };
  auto consume = [&](auto& w) -> Status {
    while (!stop) {
      auto n = w.Take(load.claim_max);
      if (!n.ok()) return n.status();
      if (*n == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      done += *n;
    }
    return Status::Ok();
  };
  Status s = OnThreads(load.producers + load.consumers, [&](int i) {
    Status st = i < load.producers ? WithWorker(make, produce)
                                   : WithWorker(make_consumer, consume);
    if (!st.ok()) stop = true;
    return st;
  });
  stop = true;
  window.join();
  if (!s.ok()) return s;
  return BaselineResult{.seconds = seconds, .messages = in_window};
}

// A Baseline from an engine's parts: `Status Setup()` (a fresh, empty
// queue), `void Teardown()` (gone again), and `MakeWorker()` and
// `MakeConsumer()`, which make one thread's worker (the consumers of a
// mixed load are MakeConsumer's, everything else MakeWorker's).
template <class Parts>
class DrivenBaseline final : public Baseline {
 public:
  explicit DrivenBaseline(Parts parts) : parts_(std::move(parts)) {}

  Result<BaselineResult> Send(long total, int threads, int batch) override {
    return Around([&] { return DriveSends(total, threads, batch, Worker()); });
  }
  Result<BaselineResult> Drain(long total, int threads,
                               int per_claim) override {
    return Around(
        [&] { return DriveDrain(total, threads, per_claim, Worker()); });
  }
  Result<BaselineResult> Mixed(const MixedLoad& load,
                               std::atomic<long>& done) override {
    return Around([&] {
      return DriveMixed(
          load, Worker(), [this] { return parts_.MakeConsumer(); }, done);
    });
  }

 private:
  auto Worker() {
    return [this] { return parts_.MakeWorker(); };
  }
  template <class Drive>
  Result<BaselineResult> Around(Drive drive) {
    Status s = parts_.Setup();
    if (!s.ok()) return s;
    auto r = drive();
    parts_.Teardown();
    return r;
  }

  Parts parts_;
};

}  // namespace sqlq::bench

#endif  // SQLQ_BENCH_BASELINE_DRIVE_H_
