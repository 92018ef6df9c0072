// What the dashboard shows of the store, and /metrics: every queue, ring,
// rotation and schedule with its counts (a "picture"), read at most once
// per Options::fresh however many pages and scrapers ask, and each queue's
// history over the last hour — its depth and its send, claim, ack and
// dead-letter rates every Options::step — kept in this process's memory
// (a restart starts the history afresh; docs/dashboard.md). And both as
// the native API shows them (OverviewJson, HistoryJson).

#ifndef SQLQ_SERVER_OVERVIEW_H_
#define SQLQ_SERVER_OVERVIEW_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/auth.h"
#include "server/metrics.h"
#include "server/reply.h"
#include "sqlq/schedule.h"
#include "sqlq/store.h"

namespace sqlq::core {
class PeriodicThread;
}

namespace sqlq::server {

// The rates of a queue, per second: sends, claims, acks, dead letters.
using Rates = std::array<double, 4>;

// The store at one moment.
struct Picture {
  std::chrono::steady_clock::time_point taken;
  Timestamp at;  // the same moment by the wall clock
  // Every queue, its settings beside its counts (same order, by name), and
  // its rates since the picture before (0 for a queue new since).
  std::vector<QueueInfo> infos;
  Metrics::Figures figures;  // queues, rings, rotations
  std::vector<Rates> rates;
  std::vector<ScheduleInfo> schedules;
  std::vector<TopicInfo> topics;
};

// A queue at one step of its history.
struct HistoryPoint {
  Timestamp at;
  std::int64_t ready = 0, delayed = 0, leased = 0, dead = 0;
  Rates rates{};  // over the step before
};

class Overview {
 public:
  struct Options {
    std::chrono::steady_clock::duration fresh = std::chrono::seconds(1);
    std::chrono::steady_clock::duration step = std::chrono::seconds(10);
    std::size_t points = 360;  // an hour of steps
    // The points of every queue together, at most: past points x queues,
    // each queue keeps its newest max_points / queues (at least one).
    // A point takes about 80 bytes.
    std::size_t max_points = 1'000'000;
    // The steady clock, for tests.
    std::function<std::chrono::steady_clock::time_point()> now = [] {
      return std::chrono::steady_clock::now();
    };
  };
  Overview(Store& store, Options options);
  explicit Overview(Store& store) : Overview(store, Options()) {}
  ~Overview();
  Overview(const Overview&) = delete;
  Overview& operator=(const Overview&) = delete;

  // The latest picture: the last one while it is younger than `fresh`,
  // else a new one. Callers that ask together share one reading.
  Result<std::shared_ptr<const Picture>> Latest();
  // A picture begun after this call (for /metrics, whose scrapers expect
  // the store as it is), which pages asking next share, and so do callers
  // waiting while it is taken.
  Result<std::shared_ptr<const Picture>> Read();

  // Takes a new picture and adds a point to every queue's history (its
  // rates over the time since the last point).
  Status Sample();
  // Samples every `step` on a thread of its own until destroyed.
  void StartSampling();

  // A queue's history, oldest first: empty for a queue not seen yet.
  std::vector<HistoryPoint> History(const std::string& name) const;
  const Options& options() const { return options_; }

 private:
  Result<std::shared_ptr<const Picture>> Take();
  // The latest picture if it began at `after` or later, else a new one.
  Result<std::shared_ptr<const Picture>> Begun(
      std::chrono::steady_clock::time_point after);

  Store& store_;
  const Options options_;
  std::mutex take_mu_;  // one reading at a time
  mutable std::mutex mu_;
  std::shared_ptr<const Picture> latest_;  // guarded by mu_
  struct Series {
    std::deque<HistoryPoint> points;
    std::array<std::int64_t, 4> counters{};
    std::chrono::steady_clock::time_point taken;
  };
  std::unordered_map<std::string, Series> history_;  // guarded by mu_
  std::unique_ptr<core::PeriodicThread> sampler_;    // last: it uses the rest
};

// GET /v1/overview: what `picture` holds that `who` may see (everything
// when nullptr), each object with what `who` may do with it ("can"), and
// the server's own figures (`server_gauges`) for those who may read
// /metrics.
Json OverviewJson(const Picture& picture, const TokenEntry* who,
                  const std::function<Metrics::Gauges()>& server_gauges);

// GET /v1/queues/{name}/history: the queue's points and their step.
Json HistoryJson(const Overview& overview, const std::string& name);

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_OVERVIEW_H_
