#include "bench/bench.h"

#include <fmt/format.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "bench/baseline.h"
#include "bench/baseline_postgres.h"
#include "bench/server_bench.h"
#include "bench/stats.h"
#include "sqlq/store.h"
#include "sqlq/worker.h"
#include "wire/duration.h"
#include "wire/printer.h"

namespace sqlq::bench {

namespace {

struct Config {
  std::string db;  // empty: a fresh SQLite file in a temp dir
  std::vector<std::string> workloads;
  int runs = 3;
  long messages = 0;  // 0: per-workload default
  int threads = 0;    // 0: per-workload default
  int producers = 4;
  int consumers = 4;
  int batch = 100;      // send-batch and mixed producers
  int claim_max = 100;  // mixed consumers
  // drain-1 and workers: how a consumer that holds one message takes the
  // next: "each" (Ack, then Claim: two commits), "next" (AckAndClaim: one)
  // or "worker" (a Worker prefetching `prefetch`: one per `prefetch`).
  // Empty: each for drain-1, next for workers.
  std::string ack;
  // --ack-flush off: sqlq's workloads run on a store opened with
  // ack_flush=off in its URL (acks that do not wait for the disk); the
  // hand-written queues are not concerned.
  bool acks_unflushed = false;
  int prefetch = 10;
  std::string work = "0ms";  // workers: time a consumer holds each message
  long max_backlog = 0;      // mixed: 0 means 4 x consumers x claim_max
  long groups = 1000;        // ring-push
  int subscribers = 10;      // publish: queues subscribed to its topic
  long backlog = 1000000;    // drain-deep: messages waiting before it drains
  std::string duration = "10s";
  std::size_t payload = 100;
  bool json = false;
  std::string report_every;  // mixed: empty means no interval reports
  bool hold_snapshot = false;
  // --scorecard: the fixed set of workloads of Scorecard(), each beside its
  // yardstick, and a table of the ratios.
  bool scorecard = false;
  // Set while the runs of a workload are measured with a snapshot held
  // open elsewhere: "+snapshot" in labels and reports; for workers-open,
  // "@25%" and so on.
  std::string variant;
  // workers-open: the rate producers are paced at, in messages a second.
  double open_rate = 0;
  // rate-limited: the queue's rate limit, claims a second, and its bucket
  // (0: the default, a second's worth).
  double rate_limit = 200;
  int rate_burst = 0;
};

struct RunResult {
  double seconds = 0;
  long messages = 0;
  double rate() const { return seconds > 0 ? messages / seconds : 0; }
  double p50_us = -1, p99_us = -1, p999_us = -1;
  std::size_t transactions = 0;
  // workers-open: the rate the producers were paced at.
  double offered = 0;
};

// Shows progress on a terminal; silent otherwise.
class Progress {
 public:
  explicit Progress(std::string label)
      : label_(std::move(label)), tty_(isatty(2) != 0) {}
  void Show(long done, long total) {
    if (!tty_) return;
    auto now = SteadyClock::now();
    if (now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    if (total > 0) {
      std::cerr << fmt::format("\r{}: {}/{} messages   ", label_, done, total);
    } else {
      std::cerr << fmt::format("\r{}: {} messages   ", label_, done);
    }
  }
  void Done() {
    if (tty_) std::cerr << "\r" << std::string(60, ' ') << "\r";
  }

 private:
  std::string label_;
  bool tty_;
  SteadyClock::time_point last_{};
};

std::string Payload(std::size_t size) { return std::string(size, 'x'); }

// Makes `total` units of work from `threads` threads, `per_call` units per
// call of `call(n)`; stops at the first failure.
Result<RunResult> RunCalls(long total, int threads, int per_call,
                           const std::string& label,
                           const std::function<Status(long n)>& call) {
  std::atomic<long> next{0};
  std::atomic<long> done{0};
  std::mutex mu;
  Status failure;
  Progress progress(label);
  auto start = SteadyClock::now();
  // When the last call returned: the progress loop below may still sleep
  // then, which must not count (a short run would look up to 50 ms longer).
  std::atomic<SteadyClock::rep> end{0};
  auto finish = [&] {
    const auto now = SteadyClock::now().time_since_epoch().count();
    auto seen = end.load();
    while (seen < now && !end.compare_exchange_weak(seen, now)) {
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (;;) {
        long first = next.fetch_add(per_call);
        if (first >= total) return finish();
        long n = std::min<long>(per_call, total - first);
        Status s = call(n);
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          failure = s;
          next = total;
          return;
        }
        done += n;
      }
    });
  }
  while (done < total && next < total) {
    progress.Show(done, total);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& t : pool) t.join();
  progress.Done();
  if (!failure.ok()) return failure;
  const SteadyClock::time_point ended{SteadyClock::duration(end.load())};
  return RunResult{.seconds = Seconds(ended - start), .messages = total};
}

// Sends `total` messages from `threads` threads, `per_call` per call.
Result<RunResult> RunSend(WorkQueue q, long total, int threads, int per_call,
                          std::size_t payload, const std::string& label) {
  const std::vector<Message> batch(per_call,
                                   Message{.payload = Payload(payload)});
  return RunCalls(total, threads, per_call, label, [&](long n) {
    if (n == 1) return q.Send(batch[0]).status();
    return q.SendBatch(std::span<const Message>(batch.data(), n)).status();
  });
}

// send-keyed: sends `total` messages one a call from `threads` threads,
// each with a dedup key of its own (what checking for a duplicate costs).
Result<RunResult> RunSendKeyed(WorkQueue q, long total, int threads,
                               std::size_t payload, const std::string& label) {
  std::atomic<long> counter{0};
  const std::string body = Payload(payload);
  return RunCalls(total, threads, 1, label, [&](long) {
    return q
        .Send(
            {.payload = body, .dedup_key = "key-" + std::to_string(counter++)})
        .status();
  });
}

// Sends `total` messages in batches of 1000 from two threads, spread over
// `groups` groups in turn (message k in group-(k mod groups)).
Result<RunResult> FillGroups(WorkQueue q, long total, long groups,
                             std::size_t payload, const std::string& label) {
  std::atomic<long> counter{0};
  const std::string body = Payload(payload);
  return RunCalls(total, 2, 1000, label, [&](long n) {
    std::vector<Message> batch;
    batch.reserve(static_cast<std::size_t>(n));
    for (long i = 0; i < n; ++i) {
      const long k = counter++;
      batch.push_back(
          {.payload = body, .group = "group-" + std::to_string(k % groups)});
    }
    return q.SendBatch(batch).status();
  });
}

// Pushes to `groups` groups (round robin over a per-thread random start) of
// a ring with capacity 10: after the first 10 pushes of a group every push
// also evicts one entry.
Result<RunResult> RunRingPush(Store& store, const std::string& name,
                              const Config& c, const std::string& label) {
  (void)store.DropRing(name);
  auto ring = store.CreateRing(name, {.capacity = 10});
  if (!ring.ok()) return ring.status();
  const long groups = c.groups;
  const std::string body = Payload(c.payload);
  std::atomic<long> counter{0};
  auto r =
      RunCalls(c.messages ? c.messages : 50000, c.threads ? c.threads : 8, 1,
               label, [&](long) {
                 long g = (counter++ * 7919) % groups;
                 return ring->Push("group-" + std::to_string(g), body).status();
               });
  Status dropped = store.DropRing(name);
  if (r.ok() && !dropped.ok()) return dropped;
  return r;
}

// Serves a pool of 1000 items one at a time from concurrent callers.
Result<RunResult> RunRotationNext(Store& store, const std::string& name,
                                  const Config& c, const std::string& label) {
  (void)store.DropRotation(name);
  auto rot = store.CreateRotation(name, {});
  if (!rot.ok()) return rot.status();
  for (int i = 0; i < 1000; ++i) {
    Status s = rot->Add("item-" + std::to_string(i), Payload(c.payload));
    if (!s.ok()) return s;
  }
  auto r = RunCalls(c.messages ? c.messages : 20000, c.threads ? c.threads : 8,
                    1, label, [&](long) {
                      auto got = rot->Next(1);
                      if (got.ok() && got->size() != 1) {
                        return Status::Internal("next(1) served nothing");
                      }
                      return got.status();
                    });
  Status dropped = store.DropRotation(name);
  if (r.ok() && !dropped.ok()) return dropped;
  return r;
}

// Publishes one message a call to a topic that `c.subscribers` queues
// subscribe to, from --threads callers (default 4): each publish stores one
// message in every queue, and counts as that many (so its rate is comparable
// with send-batch at --batch equal to the subscribers).
Result<RunResult> RunPublish(Store& store, const std::string& name,
                             const Config& c, const std::string& label) {
  const int n = c.subscribers;
  std::vector<std::string> queues;
  auto drop = [&] {
    Status s = store.DropTopic(name);
    if (s.code() == Code::kNotFound) s = Status::Ok();
    for (const std::string& q : queues) {
      Status d = store.DropQueue(q);
      if (s.ok() && !d.ok()) s = d;
    }
    return s;
  };
  (void)store.DropTopic(name);
  Status s = store.CreateTopic(name);
  for (int i = 0; s.ok() && i < n; ++i) {
    queues.push_back(fmt::format("{}_{}", name, i));
    (void)store.DropQueue(queues.back());
    auto q =
        store.CreateQueue(queues.back(), {.lease = std::chrono::minutes(5)});
    s = q.status();
    if (s.ok()) s = store.Subscribe(name, queues.back()).status();
  }
  if (!s.ok()) {
    (void)drop();
    return s;
  }
  const long publishes =
      std::max<long>(1, (c.messages ? c.messages : 200000) / n);
  const Message message{.payload = Payload(c.payload)};
  auto r =
      RunCalls(publishes * n, c.threads ? c.threads : 4, n, label, [&](long) {
        auto sent = store.Publish(name, message);
        if (sent.ok() && sent->size() != static_cast<std::size_t>(n)) {
          return Status::Internal(fmt::format(
              "a publish reached {} of {} queues", sent->size(), n));
        }
        return sent.status();
      });
  Status dropped = drop();
  if (r.ok() && !dropped.ok()) return dropped;
  return r;
}

// Claims (up to 10 at a time, waiting) and acks with `threads` consumers
// for `d` from a queue rate-limited to `rate` claims a second: the rate it
// held, the first burst included (RunResult::offered is `rate`).
Result<RunResult> RunRateLimited(WorkQueue q, int threads, double rate,
                                 Duration d, const std::string& label) {
  std::atomic<long> claimed{0};
  std::mutex mu;
  Status failure;
  Progress progress(label);
  const auto start = SteadyClock::now();
  const auto end = start + d;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      while (SteadyClock::now() < end) {
        auto r = q.Claim({.max = 10, .wait = std::chrono::milliseconds(200)});
        Status s = r.status();
        // Counted when claimed within the run: the rate over d.
        if (s.ok() && SteadyClock::now() <= end) {
          claimed += static_cast<long>(r->size());
        }
        if (s.ok() && !r->empty()) {
          std::vector<std::string> receipts;
          for (auto& m : *r) receipts.push_back(std::move(m.receipt));
          s = q.AckBatch(receipts).status();
        }
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          failure = s;
          return;
        }
      }
    });
  }
  while (SteadyClock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    progress.Show(static_cast<long>(Seconds(SteadyClock::now() - start)),
                  static_cast<long>(Seconds(d)));
  }
  for (auto& t : pool) t.join();
  progress.Done();
  if (!failure.ok()) return failure;
  RunResult r;
  r.seconds = Seconds(d);
  r.messages = claimed.load();
  r.offered = rate;
  return r;
}

// Claims and acks until the queue is empty. With `ack_next`, a consumer
// that claimed one message acks it and claims the next in one call.
// A graph of jobs run to completion: `total` jobs in layers of `width`,
// each job of a layer after the first waiting for two of the layer before
// (the one above it and its neighbour); `dependent` false sends the same
// jobs without dependencies, for the same work with none. The whole graph
// is sent (a layer a call), then `threads` consumers ack each job with
// their next claim, waiting while nothing is ready, until every job is
// done. The time is from the first send to the last ack.
Result<RunResult> RunDag(WorkQueue q, long total, int width, int threads,
                         bool dependent, std::size_t payload_size,
                         const std::string& label) {
  width = std::max(1, std::min(width, 1000));  // a send's batch limit
  const std::string payload = Payload(payload_size);
  const auto start = SteadyClock::now();
  std::vector<std::int64_t> above;
  for (long sent = 0; sent < total;) {
    const int n = static_cast<int>(std::min<long>(width, total - sent));
    std::vector<Message> layer(n, Message{.payload = payload});
    if (dependent && !above.empty()) {
      for (int i = 0; i < n; ++i) {
        const std::size_t k = static_cast<std::size_t>(i) % above.size();
        layer[i].depends_on = {above[k], above[(k + 1) % above.size()]};
        if (layer[i].depends_on[0] == layer[i].depends_on[1]) {
          layer[i].depends_on.pop_back();
        }
      }
    }
    auto ids = q.SendBatch(layer);
    if (!ids.ok()) return ids.status();
    above.clear();
    for (const SendResult& r : *ids) above.push_back(r.id);
    sent += n;
  }
  std::atomic<long> done{0};
  std::mutex mu;
  Status failure;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      std::optional<std::string> receipt;
      while (done < total) {
        auto r =
            receipt ? q.AckAndClaim(*receipt, {.max = 1, .wait = Duration(100)})
                    : q.Claim({.max = 1, .wait = Duration(100)});
        if (receipt) ++done;
        receipt.reset();
        if (!r.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          failure = r.status();
          done = total;  // the others stop too
          return;
        }
        if (!r->empty()) receipt = std::move(r->front().receipt);
      }
      if (receipt) (void)q.Ack(*receipt);
    });
  }
  Progress progress(label);
  while (done < total) {
    progress.Show(done, total);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (auto& t : pool) t.join();
  progress.Done();
  if (!failure.ok()) return failure;
  return RunResult{.seconds = Seconds(SteadyClock::now() - start),
                   .messages = total};
}

// Drains the queue: until it is empty, or (`stop_at` > 0) once that many
// have been taken.
Result<RunResult> RunDrain(WorkQueue q, long total, int threads, int per_claim,
                           const std::string& ack, int prefetch,
                           const std::string& label, long stop_at = 0) {
  const bool ack_next = ack == "next";
  std::atomic<long> done{0};
  std::mutex mu;
  Status failure;
  Progress progress(label);
  auto start = SteadyClock::now();
  std::vector<std::thread> pool;
  auto fail = [&](const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    failure = s;
  };
  for (int t = 0; t < threads; ++t) {
    if (ack == "worker") {
      // One message at a time from a Worker's prefetched claims.
      pool.emplace_back([&] {
        Worker w(q, {.prefetch = prefetch});
        for (;;) {
          auto m = w.Next();
          if (!m.ok()) return fail(m.status());
          if (!m->has_value()) break;
          Status s = w.Done(**m);
          if (!s.ok()) return fail(s);
          ++done;
        }
        Status s = w.Close();
        if (!s.ok()) fail(s);
      });
      continue;
    }
    pool.emplace_back([&] {
      std::vector<std::string> receipts;
      Result<std::vector<ClaimedMessage>> r = q.Claim({.max = per_claim});
      for (;;) {
        Status s = r.status();
        if (s.ok() && r->empty()) return;
        if (s.ok()) {
          receipts.clear();
          for (auto& m : *r) receipts.push_back(std::move(m.receipt));
          if (receipts.size() == 1 && ack_next) {
            r = q.AckAndClaim(receipts[0], {.max = per_claim});
            s = r.status();
          } else if (receipts.size() == 1 && ack == "nack") {
            // The failure path: a failed attempt, retried at once the
            // first time and dead-lettered the second (the queue allows
            // two attempts, without backoff).
            auto n = q.Nack(receipts[0], {.error = "bench"});
            s = n.status();
          } else if (receipts.size() == 1) {
            s = q.Ack(receipts[0]);
          } else {
            auto acked = q.AckBatch(receipts);
            s = acked.status();
            if (s.ok()) {
              for (auto& one : *acked) {
                if (!one.ok()) s = one;
              }
            }
          }
        }
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          failure = s;
          return;
        }
        done += static_cast<long>(receipts.size());
        if (stop_at > 0 && done >= stop_at) return;
        if (receipts.size() != 1 || !ack_next) r = q.Claim({.max = per_claim});
      }
    });
  }
  std::atomic<bool> finished{false};
  std::thread shower([&] {
    while (!finished) {
      progress.Show(done, total);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  for (auto& t : pool) t.join();
  // Before the progress thread is joined: it may be asleep.
  const auto ended = SteadyClock::now();
  finished = true;
  shower.join();
  progress.Done();
  if (!failure.ok()) return failure;
  return RunResult{.seconds = Seconds(ended - start), .messages = done};
}

// Pages through a deep queue (ListMessages), one page after another from
// one thread, and times each page: `pages` pages of 100 with no filter, or
// (`filtered`) as many filtered by a header no message has, each of which
// reads the most a page reads (10,000 messages) to find nothing.
// messages = pages.
Result<RunResult> RunListDeep(WorkQueue& q, long pages, bool filtered,
                              const std::string& label) {
  std::vector<double> latencies;
  const auto start = SteadyClock::now();
  {
    ListMessagesOptions o{.limit = 100};
    if (filtered) {
      o.filter.header = std::pair<std::string, std::string>("tag", "none");
    }
    Progress progress(label + (filtered ? " (filtered)" : " (pages)"));
    for (long i = 0; i < pages; ++i) {
      const auto t0 = SteadyClock::now();
      auto page = q.ListMessages(o);
      if (!page.ok()) return page.status();
      latencies.push_back(Seconds(SteadyClock::now() - t0) * 1e6);
      if (!filtered && page->messages.size() != 100) {
        return Status::Internal("list-deep: a page came back short");
      }
      o.cursor = page->next_cursor;
      if (o.cursor.empty()) {
        return Status::Internal("list-deep: the queue ended early");
      }
      progress.Show(i + 1, pages);
    }
    progress.Done();
  }
  RunResult r{.seconds = Seconds(SteadyClock::now() - start),
              .messages = pages};
  r.p50_us = Percentile(latencies, 0.50);
  r.p99_us = Percentile(latencies, 0.99);
  r.p999_us = Percentile(latencies, 0.999);
  return r;
}

// Prints, every --report-every, the rate acked during that interval and,
// on PostgreSQL, the live and dead tuples of the queue table: whether a long
// run holds up (issue 3: first minute against last minute, dead tuples
// flat). Silent when --report-every is not given.
class IntervalReporter {
 public:
  IntervalReporter(const Config& c, std::string workload, int run,
                   std::string table, const std::atomic<long>& counter)
      : c_(c),
        workload_(std::move(workload) + c.variant),
        run_(run),
        table_(std::move(table)),
        counter_(counter) {
    if (c.report_every.empty()) return;
    auto every = wire::ParseDuration(c.report_every);
    if (!every.ok() || every->count() <= 0) return;
    every_ = *every;
    thread_ = std::thread([this] { Loop(); });
  }
  ~IntervalReporter() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    const auto start = SteadyClock::now();
    auto last_time = start;
    long last = counter_;
    for (int n = 1;; ++n) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (cv_.wait_until(lock, start + n * every_, [&] { return stop_; })) {
          return;
        }
      }
      const auto now = SteadyClock::now();
      const long count = counter_;
      const double rate = (count - last) / Seconds(now - last_time);
      last = count;
      last_time = now;
      nlohmann::ordered_json row = {{"bench", "interval"},
                                    {"workload", workload_},
                                    {"run", run_ + 1},
                                    {"t_s", std::lround(Seconds(now - start))},
                                    {"msgs_per_s", std::lround(rate)}};
      std::string tuples;
      if (c_.db.rfind("postgres", 0) == 0) {
        auto t = PgTuples(c_.db, table_);
        if (t.ok()) {
          row["live_tuples"] = t->live;
          row["dead_tuples"] = t->dead;
          tuples = fmt::format("; {}: {} live, {} dead tuples", table_, t->live,
                               t->dead);
        }
      }
      std::lock_guard<std::mutex> lock(PrintMutex());
      if (c_.json) {
        std::cout << row.dump() << std::endl;
      } else {
        std::cout << fmt::format("{} run {} at {}s: {} msgs/s{}", workload_,
                                 run_ + 1, row["t_s"].get<long>(),
                                 std::lround(rate), tuples)
                  << std::endl;
      }
    }
  }
  static std::mutex& PrintMutex() {
    static std::mutex mu;
    return mu;
  }

  const Config& c_;
  const std::string workload_;
  const int run_;
  const std::string table_;
  const std::atomic<long>& counter_;
  Duration every_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

// The shared state of a load that runs for a fixed time (mixed, workers):
// producer and consumer threads, a first failure that stops them all, the
// count of messages acked, and the latencies the consumers saw.
class TimedLoad {
 public:
  std::atomic<bool> stop{false};
  std::atomic<long> acked{0};
  std::atomic<long> sent{0};
  std::vector<std::thread> pool;

  void Fail(const Status& s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.ok()) failure_ = s;
    stop = true;
  }
  // A consumer's latencies, handed in once as it ends.
  void Keep(const std::vector<double>& mine) {
    std::lock_guard<std::mutex> lock(mu_);
    latencies_.insert(latencies_.end(), mine.begin(), mine.end());
  }
  // Lets the threads of `pool` run for `duration` from `start`, stops them
  // and reports what was acked within the window, with the latencies.
  Result<RunResult> Window(SteadyClock::time_point start, Duration duration,
                           const std::string& label) {
    Progress progress(label);
    const auto deadline = start + duration;
    while (SteadyClock::now() < deadline && !stop) {
      progress.Show(acked, 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const long in_window = acked;
    const auto elapsed = SteadyClock::now() - start;
    stop = true;
    for (auto& t : pool) t.join();
    progress.Done();
    if (!failure_.ok()) return failure_;
    RunResult r{.seconds = Seconds(elapsed), .messages = in_window};
    r.p50_us = Percentile(latencies_, 0.50);
    r.p99_us = Percentile(latencies_, 0.99);
    r.p999_us = Percentile(latencies_, 0.999);
    return r;
  }

 private:
  std::mutex mu_;
  Status failure_;  // guarded by mu_
  std::vector<double> latencies_;
};

// Producers and consumers at once for `duration`; end-to-end rate is what
// the consumers acked within the window; latency is send-call to claim
// return, carried in the payload.
Result<RunResult> RunMixed(WorkQueue q, const Config& c, Duration duration,
                           const std::string& label, int run) {
  TimedLoad load;
  IntervalReporter reporter(c, "mixed", run, "sqlq_messages", load.acked);
  // Producers hold back while this many messages wait: an open-loop
  // producer would grow the queue without end and the latency with it.
  const long max_backlog =
      c.max_backlog > 0 ? c.max_backlog : 4L * c.consumers * c.claim_max;
  const auto start = SteadyClock::now();
  for (int p = 0; p < c.producers; ++p) {
    load.pool.emplace_back([&] {
      std::vector<Message> batch(c.batch);
      while (!load.stop) {
        if (load.sent - load.acked > max_backlog) {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
          continue;
        }
        const std::string stamp = StampedPayload(NowNs(), c.payload);
        for (auto& m : batch) m.payload = stamp;
        Status s = q.SendBatch(batch).status();
        if (!s.ok()) return load.Fail(s);
        load.sent += static_cast<long>(batch.size());
      }
    });
  }
  for (int k = 0; k < c.consumers; ++k) {
    load.pool.emplace_back([&] {
      std::vector<double> mine;
      std::vector<std::string> receipts;
      while (!load.stop) {
        auto r = q.Claim(
            {.max = c.claim_max, .wait = std::chrono::milliseconds(100)});
        if (!r.ok()) return load.Fail(r.status());
        const auto got = NowNs();
        receipts.clear();
        for (auto& m : *r) {
          mine.push_back(MicrosSince(m.payload, got));
          receipts.push_back(std::move(m.receipt));
        }
        if (receipts.empty()) continue;
        auto a = q.AckBatch(receipts);
        if (!a.ok()) return load.Fail(a.status());
        load.acked += static_cast<long>(receipts.size());
      }
      load.Keep(mine);
    });
  }
  return load.Window(start, duration, label);
}

// Single-job workers for `duration`: c.producers threads each send one
// message per call, c.consumers threads each claim one message, hold it for
// c.work and ack it (with c.ack "next", the ack and the next claim are one
// call). End-to-end rate is what the consumers acked within the window;
// latency is from the send (closed loop: the send call; open loop: the time
// the schedule gave the send, so that a late producer does not hide a
// backlog) to the claim's return.
//
// `rate` 0 is a closed loop: producers send as fast as they can while at
// most max_backlog messages wait. A positive `rate` is an open loop:
// producers are paced to send `rate` messages a second in all, whatever
// the consumers do.
Result<RunResult> RunWorkers(WorkQueue q, const Config& c, Duration duration,
                             Duration work, const std::string& ack, double rate,
                             const std::string& label) {
  const bool ack_next = ack == "next";
  TimedLoad load;
  const long max_backlog = c.max_backlog > 0 ? c.max_backlog : 4L * c.consumers;
  const auto start = SteadyClock::now();
  const std::int64_t start_ns = NowNs();
  for (int p = 0; p < c.producers; ++p) {
    load.pool.emplace_back([&, p] {
      Message m;
      for (long i = 0; !load.stop; ++i) {
        std::int64_t stamp = 0;
        if (rate > 0) {
          // This producer's i-th send is the (i * P + p)-th of the whole
          // schedule.
          stamp = start_ns +
                  static_cast<std::int64_t>(
                      1e9 * static_cast<double>(i * c.producers + p) / rate);
          const auto at =
              SteadyClock::time_point(std::chrono::nanoseconds(stamp));
          if (SteadyClock::now() < at) std::this_thread::sleep_until(at);
          if (load.stop) break;
        } else {
          if (load.sent - load.acked > max_backlog) {
            std::this_thread::sleep_for(std::chrono::microseconds(100));
            continue;
          }
          stamp = NowNs();
        }
        m.payload = StampedPayload(stamp, c.payload);
        Status s = q.Send(m).status();
        if (!s.ok()) return load.Fail(s);
        ++load.sent;
      }
    });
  }
  // The work of one message: its latency, then the work time.
  auto take = [&](const ClaimedMessage& m, std::vector<double>& mine) {
    mine.push_back(MicrosSince(m.payload, NowNs()));
    if (work.count() > 0) std::this_thread::sleep_for(work);
  };
  for (int k = 0; k < c.consumers; ++k) {
    if (ack == "worker") {
      // A Worker: finished messages are counted at Done; their acks go
      // with the next claim.
      load.pool.emplace_back([&] {
        std::vector<double> mine;
        Worker w(q, {.prefetch = c.prefetch});
        while (!load.stop) {
          auto m = w.Next(std::chrono::milliseconds(100));
          if (!m.ok()) return load.Fail(m.status());
          if (!m->has_value()) continue;
          take(**m, mine);
          Status s = w.Done(**m);
          if (!s.ok()) return load.Fail(s);
          ++load.acked;
        }
        Status s = w.Close();
        if (!s.ok()) return load.Fail(s);
        load.Keep(mine);
      });
      continue;
    }
    load.pool.emplace_back([&] {
      std::vector<double> mine;
      const ClaimOptions one{.max = 1, .wait = std::chrono::milliseconds(100)};
      std::optional<std::string> held;
      while (!load.stop) {
        Result<std::vector<ClaimedMessage>> r =
            held && ack_next ? q.AckAndClaim(*held, one) : q.Claim(one);
        if (!r.ok()) return load.Fail(r.status());
        if (held && ack_next) ++load.acked;
        held.reset();
        if (r->empty()) continue;
        ClaimedMessage& m = r->front();
        take(m, mine);
        if (ack_next) {
          held = std::move(m.receipt);
          continue;
        }
        Status s = q.Ack(m.receipt);
        if (!s.ok()) return load.Fail(s);
        ++load.acked;
      }
      // A message still held is acked, outside the window.
      if (held) (void)q.Ack(*held);
      load.Keep(mine);
    });
  }
  auto r = load.Window(start, duration, label);
  if (r.ok()) r->offered = rate;
  return r;
}

// The hand-written queue of the store's engine: on a server engine `table`
// in the store's database, on SQLite a file of its own beside the store's
// (`sqlite_path`).
Result<std::unique_ptr<Baseline>> BaselineOf(const std::string& url,
                                             const std::string& sqlite_path,
                                             const std::string& table,
                                             const Config& c, int run) {
  if (url.rfind("postgres", 0) == 0) return PgBaseline(url, table, c.payload);
  if (url.rfind("mysql://", 0) == 0 || url.rfind("mariadb://", 0) == 0) {
    return MysqlBaseline(url, table, c.payload);
  }
  return SqliteBaseline(
      fmt::format("{}.baseline-{}-{}", sqlite_path, getpid(), run), c.payload);
}

// Runs a hand-written baseline workload with the defaults of the sqlq
// workload of the same name.
Result<RunResult> RunBaseline(const std::string& url,
                              const std::string& sqlite_path,
                              const std::string& workload, const Config& c,
                              int run) {
  const std::string table =
      fmt::format("sqlq_bench_baseline_{}_{}", getpid(), run);
  auto baseline = BaselineOf(url, sqlite_path, table, c, run);
  if (!baseline.ok()) return baseline.status();
  Baseline& b = **baseline;
  Result<BaselineResult> r = Status::Internal("unknown workload");
  if (workload == "baseline-send-1") {
    r = b.Send(c.messages ? c.messages : 20000, c.threads ? c.threads : 8, 1);
  } else if (workload == "baseline-send-batch") {
    r = b.Send(c.messages ? c.messages : 500000, c.threads ? c.threads : 4,
               c.batch);
  } else if (workload == "baseline-drain-1" ||
             workload == "baseline-drain-10") {
    r = b.Drain(c.messages ? c.messages : 50000, c.threads ? c.threads : 4,
                workload == "baseline-drain-1" ? 1 : 10);
  } else {
    auto d = wire::ParseDuration(c.duration);
    if (!d.ok()) return d.status();
    std::atomic<long> acked{0};
    IntervalReporter reporter(c, workload, run, table, acked);
    r = b.Mixed(
        {.producers = c.producers,
         .consumers = c.consumers,
         .batch = c.batch,
         .claim_max = c.claim_max,
         .max_backlog =
             c.max_backlog > 0 ? c.max_backlog : 4L * c.consumers * c.claim_max,
         .duration = *d},
        acked);
  }
  if (!r.ok()) return r.status();
  return RunResult{.seconds = r->seconds, .messages = r->messages};
}

Result<RunResult> RunOnce(Store& store, const std::string& workload,
                          const Config& c, int run) {
  std::string label = fmt::format("{}{} run {}", workload, c.variant, run + 1);
  if (workload == "publish") {
    return RunPublish(store, fmt::format("bench_{}_{}_pb", getpid(), run), c,
                      label);
  }
  if (workload == "ring-push" || workload == "rotation-next") {
    std::string name = fmt::format("bench_{}_{}_{}", getpid(), run,
                                   workload == "ring-push" ? "rp" : "rn");
    return workload == "ring-push" ? RunRingPush(store, name, c, label)
                                   : RunRotationNext(store, name, c, label);
  }
  std::string qname = fmt::format("bench_{}_{}_{}", getpid(), run,
                                  workload == "send-1"             ? "s1"
                                  : workload == "send-keyed"       ? "sk"
                                  : workload == "send-batch"       ? "sb"
                                  : workload == "drain-1"          ? "d1"
                                  : workload == "drain-10"         ? "d10"
                                  : workload == "workers"          ? "wk"
                                  : workload == "workers-open"     ? "wo"
                                  : workload == "list-deep"        ? "ld"
                                  : workload == "drain-deep"       ? "dd"
                                  : workload == "list-deep-filter" ? "lf"
                                  : workload == "drain-ordered"    ? "do"
                                  : workload == "drain-fair"       ? "df"
                                  : workload == "drain-limited"    ? "dl"
                                  : workload == "rate-limited"     ? "rl"
                                  : workload == "dag"              ? "dg"
                                  : workload == "dag-flat"         ? "dz"
                                                                   : "mx");
  (void)store.DropQueue(qname);
  QueueOptions qo{.lease = std::chrono::minutes(5),
                  .groups = workload == "drain-ordered" ? GroupMode::kOrdered
                            : workload == "drain-fair"  ? GroupMode::kFair
                                                        : GroupMode::kNone};
  // drain-limited: a limit that never binds, for what counting costs.
  if (workload == "drain-limited") qo.max_leased = kMaxLeasedLimit;
  // --ack nack: each message fails twice (retried at once, then dead).
  if (c.ack == "nack") {
    qo.max_attempts = 2;
    qo.backoff_base = qo.backoff_max = Duration(0);
  }
  if (workload == "rate-limited") {
    qo.rate_limit = c.rate_limit;
    if (c.rate_burst > 0) qo.rate_burst = c.rate_burst;
  }
  auto q = store.CreateQueue(qname, qo);
  if (!q.ok()) return q.status();
  Result<RunResult> r = Status::Internal("unknown workload");
  if (workload == "send-1") {
    r = RunSend(*q, c.messages ? c.messages : 20000, c.threads ? c.threads : 8,
                1, c.payload, label);
  } else if (workload == "send-keyed") {
    r = RunSendKeyed(*q, c.messages ? c.messages : 20000,
                     c.threads ? c.threads : 8, c.payload, label);
  } else if (workload == "send-batch") {
    r = RunSend(*q, c.messages ? c.messages : 500000, c.threads ? c.threads : 4,
                c.batch, c.payload, label);
  } else if (workload == "rate-limited") {
    auto d = wire::ParseDuration(c.duration);
    if (!d.ok()) return d.status();
    // More than the run can take, so that the limit is all that holds it.
    const long total =
        static_cast<long>(c.rate_limit * Seconds(*d) * 1.2) + 100;
    auto fill = RunSend(*q, total, 2, 1000, c.payload, label + " (fill)");
    if (!fill.ok()) return fill.status();
    r = RunRateLimited(*q, c.threads ? c.threads : 4, c.rate_limit, *d, label);
  } else if (workload == "drain-1" || workload == "drain-10" ||
             workload == "drain-limited") {
    long total = c.messages ? c.messages : 50000;
    auto fill = RunSend(*q, total, 2, 1000, c.payload, label + " (fill)");
    if (!fill.ok()) return fill.status();
    const bool one = workload != "drain-10";
    r = RunDrain(*q, total, c.threads ? c.threads : 4, one ? 1 : 10,
                 one ? c.ack : "", c.prefetch, label);
  } else if (workload == "drain-ordered" || workload == "drain-fair") {
    // drain-1 on a queue whose messages are spread over --groups groups.
    long total = c.messages ? c.messages : 50000;
    auto fill = FillGroups(*q, total, c.groups, c.payload, label + " (fill)");
    if (!fill.ok()) return fill.status();
    r = RunDrain(*q, total, c.threads ? c.threads : 4, 1, c.ack, c.prefetch,
                 label);
  } else if (workload == "workers" || workload == "workers-open") {
    auto d = wire::ParseDuration(c.duration);
    if (!d.ok()) return d.status();
    auto work = wire::ParseDuration(c.work);
    if (!work.ok()) return work.status();
    r = RunWorkers(*q, c, *d, *work, c.ack.empty() ? "next" : c.ack,
                   workload == "workers" ? 0 : c.open_rate, label);
  } else if (workload == "drain-deep") {
    // drain-10 of --messages (default 10,000) from a queue of --backlog
    // (default 1,000,000): what a claim costs with a deep queue behind it.
    const long take = c.messages ? c.messages : 10000;
    const long total = std::max(c.backlog, take);
    auto fill = RunSend(*q, total, 2, 1000, c.payload, label + " (fill)");
    if (!fill.ok()) return fill.status();
    r = RunDrain(*q, take, c.threads ? c.threads : 4, 10, "", c.prefetch, label,
                 take);
  } else if (workload == "list-deep" || workload == "list-deep-filter") {
    // A deep queue: --messages (default 1,000,000), then 50 pages (a
    // filtered page reads 10,000 messages: 50 of them walk half a
    // million).
    long total = c.messages ? c.messages : 1000000;
    auto fill = RunSend(*q, total, 2, 1000, c.payload, label + " (fill)");
    if (!fill.ok()) return fill.status();
    r = RunListDeep(*q, std::min<long>(50, total / 10000),
                    workload == "list-deep-filter", label);
  } else if (workload == "dag" || workload == "dag-flat") {
    r = RunDag(*q, c.messages ? c.messages : 10000, c.batch,
               c.threads ? c.threads : 4, workload == "dag", c.payload, label);
  } else if (workload == "mixed") {
    auto d = wire::ParseDuration(c.duration);
    if (!d.ok()) return d.status();
    r = RunMixed(*q, c, *d, label, run);
  }
  Status dropped = store.DropQueue(qname);
  if (r.ok() && !dropped.ok()) return dropped;
  return r;
}

// The URL as printed: a password in it (scheme://user:secret@host) is
// replaced by ***, so benchmark output can be pasted into docs and issues.
std::string Redacted(const std::string& url) {
  auto scheme = url.find("://");
  auto at = url.find('@');
  if (scheme == std::string::npos || at == std::string::npos || at < scheme) {
    return url;
  }
  auto colon = url.find(':', scheme + 3);
  if (colon == std::string::npos || colon > at) return url;
  return url.substr(0, colon + 1) + "***" + url.substr(at);
}

// One line of --scorecard: a workload of sqlq's and its yardstick, each
// with the settings it runs with and the name it is reported under (a
// yardstick shared by several lines runs once).
struct ScoreLine {
  std::string label;
  struct Side {
    std::string workload, name;
    Config config;
  } sqlq, yardstick;
};

// The scorecard: the single-caller paths against the hand-written queue,
// the multi-caller ones against sqlq alone where no hand-written queue
// compares. `servers`: P = 32 workers a side on PostgreSQL and MariaDB, 4
// on SQLite. Counts are each line's own unless --messages sets them all;
// --duration times mixed and workers.
std::vector<ScoreLine> Scorecard(const Config& c, bool servers) {
  // Lines measured with acks that do not wait for the disk (--ack-flush
  // off) where the engine offers them (not MariaDB, which refuses them).
  auto unflushed = [](Config x) {
    x.acks_unflushed = true;
    return x;
  };
  const int p = servers ? 32 : 4;
  auto with = [&](long messages, int threads, auto&& set) {
    Config out = c;
    out.workloads.clear();
    out.ack.clear();  // each line says how it acks
    out.messages = c.messages > 0 ? c.messages : messages;
    out.threads = threads;
    set(out);
    return out;
  };
  auto plain = [](Config&) {};
  auto batch = [](int n) { return [n](Config& x) { x.batch = n; }; };
  auto ack = [](const char* how) { return [how](Config& x) { x.ack = how; }; };
  auto pairs = [](int producers, int consumers, int per_send, int claim) {
    return [=](Config& x) {
      x.producers = producers;
      x.consumers = consumers;
      x.batch = per_send;
      x.claim_max = claim;
    };
  };
  const Config drain = with(5000, 1, plain);
  const ScoreLine::Side by_hand_drain{"baseline-drain-1", "baseline-drain-1",
                                      drain};
  // drain-10 of 10,000: the yardstick of the backlog line too. Not run
  // again beside the deep drain: a run after a fill of a million rows pays
  // for the server's writing them out (MariaDB's drain-10 fell from 5,253
  // to 3,490 msgs/s that way), which would flatter the deep drain.
  const ScoreLine::Side drain_10{"drain-10", "drain-10", with(10000, 1, plain)};
  const ScoreLine::Side by_hand_mixed{"baseline-mixed", "baseline-mixed 2+2",
                                      with(0, 0, pairs(2, 2, 1, 1))};
  return {
      {"send-1",
       {"send-1", "send-1", with(5000, 1, plain)},
       {"baseline-send-1", "baseline-send-1", with(5000, 1, plain)}},
      {"send-100 (batches of 100)",
       {"send-batch", "send-100", with(200000, 1, batch(100))},
       {"baseline-send-batch", "baseline-send-100",
        with(200000, 1, batch(100))}},
      {"drain-1, claim then ack",
       {"drain-1", "drain-1", with(5000, 1, ack("each"))},
       by_hand_drain},
      {"drain-1, ack with the next claim",
       {"drain-1", "drain-1 --ack next", with(5000, 1, ack("next"))},
       by_hand_drain},
      {fmt::format("drain-1, Worker (prefetch {})", c.prefetch),
       {"drain-1", "drain-1 --ack worker", with(5000, 1, ack("worker"))},
       by_hand_drain},
      {"drain-1, claim then ack, ack_flush=off",
       {"drain-1", "drain-1 ack_flush=off",
        unflushed(with(5000, 1, ack("each")))},
       by_hand_drain},
      {"drain-10",
       drain_10,
       {"baseline-drain-10", "baseline-drain-10", with(10000, 1, plain)}},
      {"drain-10, ack_flush=off",
       {"drain-10", "drain-10 ack_flush=off", unflushed(with(10000, 1, plain))},
       {"baseline-drain-10", "baseline-drain-10", with(10000, 1, plain)}},
      {fmt::format("drain-10 of 10,000 from a backlog of {}, vs from 10,000",
                   c.backlog),
       {"drain-deep", "drain-deep", with(10000, 1, plain)},
       drain_10},
      {"mixed, 2 producers + 2 consumers of one",
       {"mixed", "mixed 2+2", with(0, 0, pairs(2, 2, 1, 1))},
       by_hand_mixed},
      {"mixed, 2 + 2, ack_flush=off",
       {"mixed", "mixed 2+2 ack_flush=off",
        unflushed(with(0, 0, pairs(2, 2, 1, 1)))},
       by_hand_mixed},
      // The same load with the consumers taking the next message with
      // their ack (a Worker's way; `workers` with --ack next).
      {"mixed, 2 + 2, ack with the next claim",
       {"workers", "workers 2+2 --ack next",
        with(0, 0,
             [&](Config& x) {
               pairs(2, 2, 1, 1)(x);
               x.ack = "next";
             })},
       by_hand_mixed},
      {"send-batch, 4 callers of 100",
       {"send-batch", "send-batch x4", with(200000, 4, batch(100))},
       {"baseline-send-batch", "baseline-send-batch x4",
        with(200000, 4, batch(100))}},
      {fmt::format("workers {0}+{0}, vs the same {0} senders alone", p),
       {"workers", fmt::format("workers {0}+{0}", p),
        with(0, 0, pairs(p, p, 1, 1))},
       {"send-1", fmt::format("send-1 x{}", p), with(20000, p, plain)}},
      {fmt::format("publish to {} queues, vs a send of as many (4 callers)",
                   c.subscribers),
       {"publish", "publish", with(30000, 4, plain)},
       {"send-batch", fmt::format("send-batch of {} x4", c.subscribers),
        with(30000, 4, batch(c.subscribers))}},
  };
}

int Run(Config c) {
  const std::vector<std::string> all = {"baseline-send-1",
                                        "send-1",
                                        "baseline-send-batch",
                                        "send-batch",
                                        "baseline-drain-1",
                                        "drain-1",
                                        "baseline-drain-10",
                                        "drain-10",
                                        "baseline-mixed",
                                        "mixed",
                                        "workers",
                                        "workers-open",
                                        "ring-push",
                                        "rotation-next"};
  // Not in "all": filling a queue of a million messages takes a while;
  // the grouped drains are compared with drain-1 at the same --threads.
  const std::vector<std::string> also = {
      "list-deep",  "list-deep-filter", "drain-ordered", "drain-deep",
      "drain-fair", "drain-limited",    "rate-limited",  "dag",
      "dag-flat",   "publish",          "send-keyed"};
  wire::Printer out(c.json);
  if (c.scorecard && !c.workloads.empty()) {
    return out.Fail(Status::InvalidArgument(
        "--scorecard runs its own workloads: give no --workload with it"));
  }
  if (c.workloads.empty() || std::find(c.workloads.begin(), c.workloads.end(),
                                       "all") != c.workloads.end()) {
    c.workloads = all;
  }
  for (const auto& w : c.workloads) {
    if (std::find(all.begin(), all.end(), w) == all.end() &&
        std::find(also.begin(), also.end(), w) == also.end()) {
      std::string names;
      for (const auto* list : {&all, &also}) {
        for (const std::string& name : *list) names += name + ", ";
      }
      return out.Fail(Status::InvalidArgument(
          fmt::format("unknown workload '{}': choose from {}all", w, names)));
    }
  }
  if (c.runs < 1 || c.runs > 100 || c.batch < 1 || c.batch > 10000 ||
      c.claim_max < 1 || c.claim_max > 1000 || c.producers < 1 ||
      c.consumers < 1 || c.threads < 0 || c.messages < 0 || c.groups < 1 ||
      c.subscribers < 1 || c.subscribers > 1000 || c.backlog < 1 ||
      c.backlog > 100000000) {
    return out.Fail(Status::InvalidArgument(
        "bench: --runs 1..100, --batch 1..10000, --claim-max 1..1000, "
        "--subscribers 1..1000, --backlog 1..100000000, "
        "--producers/--consumers/--groups >= 1"));
  }
  if (!c.ack.empty() && c.ack != "each" && c.ack != "next" &&
      c.ack != "worker" && c.ack != "nack") {
    return out.Fail(Status::InvalidArgument(fmt::format(
        "--ack '{}': give each (ack, then claim), next (ack and claim the "
        "next in one call), worker (a Worker prefetching --prefetch) or "
        "nack (the failure path)",
        c.ack)));
  }
  if (c.prefetch < 1 || c.prefetch > 1000) {
    return out.Fail(Status::InvalidArgument(
        fmt::format("--prefetch {}: give 1..1000", c.prefetch)));
  }
  if (auto work = wire::ParseDuration(c.work);
      !work.ok() || work->count() < 0) {
    return out.Fail(Status::InvalidArgument(fmt::format(
        "--work '{}': give a duration such as 0ms, 5ms or 1s", c.work)));
  }
  if (!c.report_every.empty()) {
    auto every = wire::ParseDuration(c.report_every);
    if (!every.ok() || every->count() <= 0) {
      return out.Fail(Status::InvalidArgument(fmt::format(
          "--report-every '{}': give a positive duration such as 30s or 1m",
          c.report_every)));
    }
  }
  std::filesystem::path tmp;
  std::string url = c.db;
  if (url.empty()) {
    char tmpl[] = "/tmp/sqlq-bench-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      return out.Fail(Status::Unavailable("cannot create a temp directory"));
    }
    tmp = tmpl;
    url = "sqlite:" + (tmp / "bench.db").string();
  }
  std::string fsync_dir = tmp.empty() ? "." : tmp.string();
  std::string sqlite_path;  // for the baseline; empty on other engines
  if (url.rfind("sqlite:", 0) == 0) {
    sqlite_path = url.substr(7);
    sqlite_path = sqlite_path.substr(0, sqlite_path.find('?'));
    if (sqlite_path.rfind("//", 0) == 0) sqlite_path.erase(0, 2);
    auto p = std::filesystem::path(sqlite_path).parent_path();
    if (!p.empty()) fsync_dir = p.string();
  }
  double fsync_rate = MeasureFsyncRate(fsync_dir, 1.0);
  int code = 0;
  {
    auto store = Store::Open(url);
    if (!store.ok()) return out.Fail(store.status());
    // The store of the workloads run with acks that do not wait for the
    // disk (Config::acks_unflushed), opened at its first use.
    std::unique_ptr<Store> unflushed;
    auto store_for = [&](const Config& rc) -> Result<Store*> {
      if (!rc.acks_unflushed) return store->get();
      if (!unflushed) {
        auto s =
            Store::Open(url + (url.find('?') == std::string::npos ? "?" : "&") +
                        "ack_flush=off");
        if (!s.ok()) return s.status();
        unflushed = std::move(*s);
      }
      return unflushed.get();
    };
    out.Say({{"bench", "environment"},
             {"db", Redacted(url)},
             {"fsync_per_s", std::lround(fsync_rate)},
             {"cores", std::thread::hardware_concurrency()},
             {"runs", c.runs}},
            fmt::format("database {}; fsync rate {:.0f}/s; {} cores; median "
                        "of {} runs",
                        Redacted(url), fsync_rate,
                        std::thread::hardware_concurrency(), c.runs));
    out.Columns({"workload", "msgs_per_s", "vs_baseline", "vs_clean", "p50_us",
                 "p99_us", "p999_us", "ops_per_commit", "runs"});
    std::map<std::string, double> medians;
    const bool postgres = url.rfind("postgres", 0) == 0;
    const bool mysql =
        url.rfind("mysql://", 0) == 0 || url.rfind("mariadb://", 0) == 0;
    // What the runs of one workload gathered, reported once they are done.
    struct Runs {
      std::string w;
      bool held = false;
      double load = 0;
      Config rc;
      std::vector<double> rates, p50, p99, p999;
      std::size_t tx = 0, ops = 0;
    };
    std::map<std::string, Runs> gathered;
    // Prepares workload `w` to be measured under `name`; with `held`, while
    // another session holds a snapshot open (--hold-snapshot), reported as
    // "w+snapshot" beside the clean median measured just before.
    // workers-open runs at `load` (a fraction) of the median rate of
    // workers. A scorecard's line passes its own settings (`with`) and the
    // name it is reported under (`as`).
    auto prepare = [&](const std::string& w, bool held, double load = 0,
                       const Config* with = nullptr,
                       const std::string& as = "") -> std::string {
      Config rc = with != nullptr ? *with : c;
      rc.db = url;
      rc.variant = held ? "+snapshot" : "";
      if (load > 0) {
        rc.variant = fmt::format("@{}%", std::lround(100 * load));
        rc.open_rate = load * medians["workers"];
      }
      const std::string name = as.empty() ? w + rc.variant : as;
      gathered[name] = Runs{.w = w, .held = held, .load = load, .rc = rc};
      return name;
    };
    // One run of the workload prepared as `name`; false (and `code` set) if
    // it failed.
    auto run_one = [&](const std::string& name, int run) {
      Runs& g = gathered[name];
      const bool baseline = g.w.rfind("baseline-", 0) == 0;
      std::unique_ptr<PgSnapshotHolder> holder;
      if (g.held) {
        auto h = PgSnapshotHolder::Open(url);
        if (!h.ok()) {
          code = out.Fail(h.status().WithContext("bench " + name));
          return false;
        }
        holder = std::move(*h);
      }
      auto mine = store_for(g.rc);
      if (!mine.ok()) {
        code = out.Fail(mine.status().WithContext("bench " + name));
        return false;
      }
      Store& s = **mine;
      std::size_t tx0 = s.TEST_write_transactions();
      std::size_t ops0 = s.TEST_write_operations();
      auto r = baseline ? RunBaseline(url, sqlite_path, g.w, g.rc, run)
                        : RunOnce(s, g.w, g.rc, run);
      if (!r.ok()) {
        code = out.Fail(r.status().WithContext("bench " + name));
        return false;
      }
      g.tx += s.TEST_write_transactions() - tx0;
      g.ops += s.TEST_write_operations() - ops0;
      g.rates.push_back(r->rate());
      if (r->p50_us >= 0) {
        g.p50.push_back(r->p50_us);
        g.p99.push_back(r->p99_us);
      }
      if (r->p999_us >= 0) g.p999.push_back(r->p999_us);
      return true;
    };
    // The row of the workload prepared as `name`, once its runs are done.
    auto report = [&](const std::string& name) {
      const Runs& g = gathered[name];
      const std::string& w = g.w;
      const Config& rc = g.rc;
      const bool baseline = w.rfind("baseline-", 0) == 0;
      nlohmann::ordered_json row = {{"bench", name}, {"workload", name}};
      AddRates(row, g.rates);
      medians[name] = Median(g.rates);
      // sqlq's rate over the hand-written queue's, same run, same machine.
      const std::string base = "baseline-" + name;
      if (!baseline && medians.count(base) && medians[base] > 0) {
        row["vs_baseline"] =
            std::round(100 * medians[name] / medians[base]) / 100;
      }
      // With a snapshot held: the rate over the clean one measured before.
      if (g.held && medians.count(w) && medians[w] > 0) {
        row["vs_clean"] = std::round(100 * medians[name] / medians[w]) / 100;
      }
      if (!baseline) {
        row["ops_per_commit"] =
            g.tx ? std::round(10.0 * static_cast<double>(g.ops) / g.tx) / 10
                 : 0.0;
      }
      AddLatencies(row, g.p50, g.p99);
      if (!g.p999.empty()) row["p999_us"] = std::lround(Median(g.p999));
      if (g.load > 0) row["offered_msgs_per_s"] = std::lround(rc.open_rate);
      if (w == "rate-limited") {
        row["rate_limit"] = c.rate_limit;
        if (c.rate_burst > 0) row["rate_burst"] = c.rate_burst;
        row["vs_limit"] =
            std::round(1000 * medians[name] / c.rate_limit) / 1000;
        row["duration"] = c.duration;
      }
      if (w == "drain-1" || w.rfind("workers", 0) == 0) {
        row["ack"] = w == "drain-1" ? (rc.ack.empty() ? "each" : rc.ack)
                                    : (rc.ack.empty() ? "next" : rc.ack);
        if (rc.ack == "worker") row["prefetch"] = rc.prefetch;
      }
      if (w.rfind("workers", 0) == 0) {
        row["producers"] = rc.producers;
        row["consumers"] = rc.consumers;
        row["work"] = rc.work;
      }
      out.Row(row);
      if (c.json) std::cout.flush();
    };
    // Measures workload `w` c.runs times and reports it.
    auto measure = [&](const std::string& w, bool held, double load = 0) {
      const std::string name = prepare(w, held, load);
      for (int run = 0; run < c.runs; ++run) {
        if (!run_one(name, run)) return;
      }
      report(name);
    };
    if (c.scorecard) {
      const std::vector<ScoreLine> lines = Scorecard(c, postgres || mysql);
      // Lines the engine cannot run (MariaDB refuses ack_flush=off).
      auto skipped = [&](const ScoreLine& line) {
        return mysql && line.sqlq.config.acks_unflushed;
      };
      // A line's two sides take turns, run by run, so that a machine
      // whose speed drifts (its fsync rate moves by half within minutes
      // here) moves both alike rather than the ratio.
      for (const ScoreLine& line : lines) {
        if (skipped(line)) continue;
        std::vector<std::string> sides;
        for (const ScoreLine::Side* side : {&line.yardstick, &line.sqlq}) {
          if (gathered.count(side->name)) continue;  // a shared yardstick
          sides.push_back(
              prepare(side->workload, false, 0, &side->config, side->name));
        }
        for (int run = 0; run < c.runs && code == 0; ++run) {
          for (const std::string& name : sides) {
            if (!run_one(name, run)) break;
          }
        }
        if (code != 0) break;
        for (const std::string& name : sides) report(name);
      }
      out.Flush();
      if (code == 0) {
        out.Say({{"bench", "scorecard"}},
                "\nsqlq beside its yardstick (the hand-written queue, or "
                "sqlq's own senders alone), medians:");
        out.Columns({"scorecard", "sqlq", "msgs_per_s", "yardstick",
                     "yardstick_msgs_per_s", "ratio"});
        for (const ScoreLine& line : lines) {
          if (skipped(line)) {
            out.Row({{"bench", "scorecard"},
                     {"scorecard", line.label},
                     {"sqlq", line.sqlq.name},
                     {"yardstick", line.yardstick.name},
                     {"skipped", "MariaDB refuses ack_flush=off"}});
            continue;
          }
          const double mine = medians[line.sqlq.name];
          const double theirs = medians[line.yardstick.name];
          out.Row({{"bench", "scorecard"},
                   {"scorecard", line.label},
                   {"sqlq", line.sqlq.name},
                   {"msgs_per_s", std::lround(mine)},
                   {"yardstick", line.yardstick.name},
                   {"yardstick_msgs_per_s", std::lround(theirs)},
                   {"ratio",
                    theirs > 0 ? std::round(100 * mine / theirs) / 100 : 0.0}});
        }
      }
    }
    for (const auto& w : c.workloads) {
      if (c.scorecard) break;
      const bool baseline = w.rfind("baseline-", 0) == 0;
      if (baseline && sqlite_path.empty() && !postgres && !mysql) continue;
      if (w == "workers-open") {
        // Paced at fractions of the closed-loop maximum of this run.
        if (!medians.count("workers")) measure("workers", false);
        if (code != 0) break;
        for (double load : {0.25, 0.5, 0.9}) {
          measure(w, false, load);
          if (code != 0) break;
        }
        if (code != 0) break;
        continue;
      }
      measure(w, false);
      if (code != 0) break;
      if (c.hold_snapshot && postgres &&
          (w == "mixed" || w == "baseline-mixed")) {
        measure(w, true);
        if (code != 0) break;
      }
    }
    out.Flush();
  }
  if (!tmp.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);
  }
  return code;
}

}  // namespace

int Main(int argc, char** argv) {
  Config c;
  CLI::App app{
      "sqlq-bench: measure sqlq's throughput and latency (default: a fresh "
      "temporary SQLite database; --db to measure another; --server for a "
      "running sqlq serve). `sqlq bench ...` runs this program. See "
      "docs/benchmarks.md.",
      "sqlq-bench"};
  app.add_option("--db", c.db,
                 "Database URL to measure, also $SQLQ_DB (default: a fresh "
                 "temporary SQLite database, deleted afterwards)")
      ->envname("SQLQ_DB");
  app.add_flag("--json", c.json, "Print one JSON object per line");
  app.add_option(
      "--workload", c.workloads,
      "send-1, send-batch, drain-1, drain-10, mixed, workers, workers-open, "
      "ring-push, rotation-next, list-deep, list-deep-filter, drain-deep "
      "(drain-10 of --messages, default 10,000, from a queue of --backlog), "
      "drain-ordered, "
      "drain-fair (drain-1 on a queue of --groups groups, ordered or fair), "
      "drain-limited (drain-1 on a queue with a max_leased that never "
      "binds), send-keyed (send-1 with a dedup key of its own on each "
      "message), rate-limited (claims for --duration from a queue limited to "
      "--rate-limit claims a second: the rate it held), dag (--messages "
      "jobs, default 10,000, in layers of --batch, each waiting for two of "
      "the layer before, run to completion by --threads consumers), "
      "dag-flat (the same jobs without dependencies), publish (one message "
      "a call to a topic with --subscribers queues, default 10, counted as "
      "one message a queue: compare send-batch with --batch equal to it) "
      "(these not in all); "
      "baseline-send-1, "
      "baseline-send-batch, "
      "baseline-drain-1, "
      "baseline-drain-10, baseline-mixed (the same on a hand-written "
      "SQLite, PostgreSQL or MariaDB queue, with its defaults and "
      "--threads); or all (repeatable; default all). With --server: "
      "http-send-batch, http-mixed, http-workers, http-wake, http-idle, "
      "all, and http-attack (a client's round trips with and without six "
      "kinds of attackers; not in all)");
  app.add_option("--runs", c.runs,
                 "Runs per workload; the median is "
                 "reported (default 3)");
  app.add_option("--messages", c.messages,
                 "Messages per run (default: 20000 send-1, 500000 "
                 "send-batch, 50000 drain)");
  app.add_option("--threads", c.threads,
                 "Concurrent callers (default: 8 send-1, 4 send-batch, 4 "
                 "drain)");
  app.add_option("--producers", c.producers,
                 "mixed, workers: producers (default 4)");
  app.add_option("--consumers", c.consumers,
                 "mixed, workers: consumers (default 4)");
  app.add_option("--batch", c.batch,
                 "Messages per send call in send-batch and mixed (default "
                 "100)");
  app.add_option("--claim-max", c.claim_max,
                 "mixed: messages per claim (default 100)");
  app.add_option(
      "--duration", c.duration,
      "mixed, workers, workers-open, rate-limited: run time (default 10s)");
  app.add_option_function<std::string>(
         "--ack-flush",
         [&c](const std::string& v) {
           if (v != "on" && v != "off") {
             throw CLI::ValidationError("--ack-flush", "give on or off");
           }
           c.acks_unflushed = v == "off";
         },
         "off: sqlq's workloads run on a store with ack_flush=off in its "
         "URL (acks that do not wait for the disk; SQLite and PostgreSQL); "
         "the hand-written queues are unchanged. Default on")
      ->type_name("on|off");
  app.add_option("--ack", c.ack,
                 "drain-1, workers: how a consumer holding one message "
                 "takes the next: each (ack, then claim; default for "
                 "drain-1), next (ack and claim the next in one call; "
                 "default for workers), worker (a Worker that prefetches "
                 "--prefetch and acks with its next claim) or nack (drain-1: "
                 "each message nacked twice, retried then dead-lettered: "
                 "the failure path; each nack counts as a message)");
  app.add_option("--prefetch", c.prefetch,
                 "--ack worker: messages each Worker claims at once "
                 "(default 10)");
  app.add_option("--work", c.work,
                 "workers: time each consumer holds a message before its "
                 "ack (default 0ms)");
  app.add_option("--max-backlog", c.max_backlog,
                 "mixed, workers: producers pause while this many messages "
                 "wait (default 4 x consumers x claim-max; workers: 4 x "
                 "consumers)");
  app.add_option("--payload", c.payload, "Payload bytes (default 100)");
  app.add_option("--report-every", c.report_every,
                 "mixed, baseline-mixed: print the rate of each interval of "
                 "this length (e.g. 1m) and, on PostgreSQL, the queue "
                 "table's dead tuples");
  app.add_flag("--scorecard", c.scorecard,
               "Run the fixed set of workloads that docs/benchmarks.md opens "
               "with, each beside its yardstick (the hand-written queue, or "
               "sqlq's own senders alone), and print their ratios; --runs, "
               "--duration, --payload, --prefetch, --subscribers and "
               "--messages (every line's count) apply");
  app.add_flag("--hold-snapshot", c.hold_snapshot,
               "PostgreSQL: after the clean runs of mixed and "
               "baseline-mixed, run them again while another session holds "
               "a REPEATABLE READ snapshot open (vacuum then cannot remove "
               "dead rows); reports vs_clean");
  app.add_option("--rate-limit", c.rate_limit,
                 "rate-limited: the queue's limit, claims a second (default "
                 "200)");
  app.add_option("--rate-burst", c.rate_burst,
                 "rate-limited: the queue's bucket (default a second's "
                 "worth)");
  app.add_option("--groups", c.groups,
                 "ring-push: groups pushed to; drain-ordered, drain-fair: "
                 "groups the messages are spread over (default 1000)");
  app.add_option("--subscribers", c.subscribers,
                 "publish: queues subscribed to the topic (default 10)");
  app.add_option("--backlog", c.backlog,
                 "drain-deep: messages waiting in the queue before the drain "
                 "(default 1000000)");
  // --server: HTTP workloads against a running sqlq serve (server_bench.h).
  ServerBenchConfig sc;
  app.add_option(
      "--server", sc.url,
      "Measure a running `sqlq serve` at http://127.0.0.1:PORT "
      "instead (workloads http-send-batch, http-mixed, http-workers, "
      "http-wake, http-idle)");
  app.add_option("--token", sc.token,
                 "--server: bearer token (admin, send and claim)");
  app.add_option("--server-pid", sc.server_pid,
                 "--server: the server's process id, for its RSS in "
                 "http-idle and its CPU time per request (cpu_us_per_req)");
  app.add_option("--connections", sc.connections,
                 "--server: connections sending in http-send-batch "
                 "(default 8)");
  app.add_option("--wake-samples", sc.wake_samples,
                 "--server: sends measured in http-wake (default 200); "
                 "http-attack measures five times as many round trips in "
                 "each phase");
  app.add_option("--idle-connections", sc.idle_connections,
                 "--server: connections held in http-idle (default 10000)");
  app.add_option("--attack", sc.attacks,
                 "--server: the attackers of http-attack (repeatable: "
                 "slowloris, polls, flood, oversized, chunked, nested; "
                 "default all)");
  app.add_option("--attack-server", sc.attack_url,
                 "--server: http-attack's control: aim the attackers at "
                 "this other sqlq serve (http://127.0.0.1:PORT) while the "
                 "client's round trips go to --server; shows what the "
                 "attack load on the machine costs, apart from the server");
  app.add_flag("--beanstalkd", sc.beanstalkd,
               "--server: also run the same work against a beanstalkd that "
               "the bench starts (binlog on, fsync every write)");
  app.add_flag("--sqs", sc.sqs,
               "--server: also run the same work through the server's SQS "
               "endpoint (JSON protocol; at most 10 messages a request, as "
               "SQS allows)");
  app.add_option("--sqs-key", sc.sqs_key,
                 "--sqs: the access key ID:SECRET to sign with, for a "
                 "server with a token file (admin, send and claim)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // One line, as sqlq prints a command line that does not parse.
    if (c.json) {
      nlohmann::ordered_json err = {
          {"error", {{"code", "usage"}, {"message", e.what()}}}};
      std::cerr << err.dump(-1, ' ', false,
                            nlohmann::ordered_json::error_handler_t::replace)
                << '\n';
    } else {
      std::cerr << "sqlq-bench: " << e.what() << " (see 'sqlq-bench --help')\n";
    }
    return wire::kExitUsage;
  }
  if (sc.url.empty()) return Run(c);
  ServerBenchConfig s = sc;
  s.workloads = c.workloads;
  s.runs = c.runs;
  s.messages = c.messages;
  s.producers = c.producers;
  s.consumers = c.consumers;
  s.batch = c.batch;
  s.claim_max = c.claim_max;
  s.max_backlog = c.max_backlog;
  s.duration = c.duration;
  s.payload = c.payload;
  s.json = c.json;
  return RunServerBench(std::move(s));
}

}  // namespace sqlq::bench
