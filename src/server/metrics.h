// What /metrics reports, in the Prometheus text format (0.0.4): request
// latency histograms per route and status class, the gauges and counters
// the server and its queues give, sqlq_build_info, and the process_*
// figures every Prometheus client library exports (read from /proc/self).
// Queue figures are read from the store at scrape time (QueueStats), so
// every server on one database reports the same totals. Names follow
// Prometheus' rules: base units in the name (_seconds, _bytes), _total on
// counters and only there (docs/server.md, "Metrics").
//
// Thread-safe.

#ifndef SQLQ_SERVER_METRICS_H_
#define SQLQ_SERVER_METRICS_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sqlq/queue.h"
#include "sqlq/ring.h"
#include "sqlq/rotation.h"

namespace sqlq::server {

class Metrics {
 public:
  // sqlq_build_info's labels.
  struct BuildInfo {
    std::string version;  // "0.1.0"
    std::string engine;   // "sqlite", "postgres", "mysql"
  };
  Metrics() = default;
  explicit Metrics(BuildInfo build) : build_(std::move(build)) {}

  static constexpr std::array<double, 12> kBuckets = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,   0.1,   0.25,   0.5,   1.0,  5.0};

  void ObserveRequest(const std::string& route, unsigned status,
                      double seconds);

  // Jobs, per queue and kind (docs/server.md, "Metrics"): a claim this
  // server handed out starts each of its messages (its wait, from send to
  // first claim, observed on attempt 1); an ack or nack through this server
  // finishes one, by its receipt: its run time (from its claim, when this
  // server handed it out) and its outcome counted. A message handed out by
  // another server is counted under the kind "" and has no run time.
  static constexpr std::array<double, 12> kJobBuckets = {
      0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 300, 1800, 3600};
  // The wait is measured by this machine's clock (the store's may differ
  // by their skew).
  void JobsStarted(std::string_view queue,
                   std::span<const ClaimedMessage> messages);
  // `outcome`: "completed", "retry", "dead", "snoozed".
  void JobFinished(std::string_view queue, const std::string& receipt,
                   std::string_view outcome);
  // How many claimed jobs it remembers for their run time; the oldest
  // half is forgotten when full (their leases ran out, or they were
  // finished through another server).
  static constexpr std::size_t kMaxStartedJobs = 100000;
  // Series (queue, kind) it keeps apart; beyond, a new kind counts as
  // "_other".
  static constexpr std::size_t kMaxJobSeries = 1000;

  struct Gauges {
    std::int64_t connections = 0;
    std::int64_t waiting_consumers = 0;
    std::int64_t requests_in_flight = 0;
    // Wake-ups delivered to parked claims by sends (a send of n messages
    // delivers at most n): the thundering-herd check.
    std::int64_t claim_wakeups = 0;
    // 1 while this server holds the database's scheduler lease.
    std::int64_t scheduler_leader = 0;
  };
  // What the store holds, each list in the order to print.
  struct Figures {
    std::vector<QueueStats> queues;
    std::vector<RingStats> rings;
    std::vector<RotationStats> rotations;
    // The claims waiting per queue name in every process of the database
    // that reports them (Store::WaitingConsumers); none when unread.
    std::map<std::string, std::int64_t> waiting;
    // The queue's claims waiting: 0 for one without any.
    std::int64_t WaitingFor(const std::string& queue) const {
      const auto w = waiting.find(queue);
      return w == waiting.end() ? 0 : w->second;
    }
  };
  std::string Render(const Figures& figures, const Gauges& gauges) const;

 private:
  BuildInfo build_;
  // A histogram over `bounds` (kBuckets or kJobBuckets: both 12 long).
  struct Histogram {
    std::array<std::uint64_t, kBuckets.size()> buckets{};
    std::uint64_t count = 0;
    double sum = 0;
    void Observe(const std::array<double, 12>& bounds, double seconds);
    // Its _bucket, _sum and _count lines for the family `name`.
    void Render(std::string& out, std::string_view name,
                const std::string& labels,
                const std::array<double, 12>& bounds) const;
  };
  mutable std::mutex mu_;
  // (route, status class "2xx") -> histogram
  std::map<std::pair<std::string, std::string>, Histogram> requests_;

  struct JobSeries {
    Histogram wait, run;  // over kJobBuckets
    std::map<std::string, std::uint64_t, std::less<>> outcomes;
  };
  struct Started {
    std::string queue, kind;
    std::chrono::steady_clock::time_point at;
    std::uint64_t seq = 0;
  };
  // The series of (queue, kind); mu_ held.
  JobSeries& Series(std::string_view queue, std::string_view kind);
  std::map<std::pair<std::string, std::string>, JobSeries> jobs_;
  std::unordered_map<std::string, Started> started_;
  std::uint64_t started_seq_ = 0;
};

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_METRICS_H_
