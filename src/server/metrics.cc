#include "server/metrics.h"

#include <dirent.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace sqlq::server {

namespace {

// Label values escape backslash, quote and newline.
std::string Escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// The process_* families of Prometheus' client libraries, read from
// /proc/self and getrusage/getrlimit. A figure that cannot be read is left
// out rather than reported as 0.
void RenderProcess(std::string& out) {
  auto family = [&](const char* name, const char* type, const char* help,
                    double value) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n", name, help, type);
    // Whole numbers as integers: 2000000000, not 2e+09.
    if (value == static_cast<double>(static_cast<std::int64_t>(value))) {
      out += fmt::format("{} {}\n", name, static_cast<std::int64_t>(value));
    } else {
      out += fmt::format("{} {}\n", name, value);
    }
  };
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) == 0) {
    auto seconds = [](const timeval& t) {
      return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6;
    };
    family("process_cpu_seconds_total", "counter",
           "Total user and system CPU time spent in seconds.",
           seconds(ru.ru_utime) + seconds(ru.ru_stime));
  }
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  std::ifstream statm("/proc/self/statm");
  double size_pages = 0, resident_pages = 0;
  if (statm >> size_pages >> resident_pages) {
    family("process_virtual_memory_bytes", "gauge",
           "Virtual memory size in bytes.", size_pages * page);
    family("process_resident_memory_bytes", "gauge",
           "Resident memory size in bytes.", resident_pages * page);
  }
  if (DIR* fds = ::opendir("/proc/self/fd")) {
    std::int64_t n = 0;
    while (const dirent* e = ::readdir(fds)) n += e->d_name[0] != '.';
    ::closedir(fds);
    family("process_open_fds", "gauge", "Number of open file descriptors.",
           static_cast<double>(n - 1));  // less the one reading the list
  }
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    family("process_max_fds", "gauge",
           "Maximum number of open file descriptors.",
           static_cast<double>(rl.rlim_cur));
  }
  // The start: clock ticks after boot (field 22 of /proc/self/stat, counted
  // after the command's parenthesis, which may hold spaces), plus the
  // boot's time (btime of /proc/stat).
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), {});
  const std::size_t paren = stat.rfind(')');
  std::istringstream fields(
      paren == std::string::npos ? "" : stat.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && (fields >> field); ++i) {
  }
  std::ifstream boot("/proc/stat");
  double btime = -1;
  for (std::string key; boot >> key;) {
    if (key == "btime") {
      boot >> btime;
      break;
    }
    boot.ignore(1 << 20, '\n');
  }
  const long ticks = ::sysconf(_SC_CLK_TCK);
  if (fields && btime >= 0 && ticks > 0) {
    family("process_start_time_seconds", "gauge",
           "Start time of the process since unix epoch in seconds.",
           btime + std::stod(field) / static_cast<double>(ticks));
  }
}

}  // namespace

void Metrics::ObserveRequest(const std::string& route, unsigned status,
                             double seconds) {
  std::string cls = fmt::format("{}xx", status / 100);
  std::lock_guard<std::mutex> lock(mu_);
  requests_[{route, cls}].Observe(kBuckets, seconds);
}

void Metrics::Histogram::Observe(const std::array<double, 12>& bounds,
                                 double seconds) {
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    if (seconds <= bounds[i]) ++buckets[i];
  }
  ++count;
  sum += seconds;
}

void Metrics::Histogram::Render(std::string& out, std::string_view name,
                                const std::string& labels,
                                const std::array<double, 12>& bounds) const {
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels,
                       bounds[i], buckets[i]);
  }
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, count);
  out += fmt::format("{}_sum{{{}}} {}\n", name, labels, sum);
  out += fmt::format("{}_count{{{}}} {}\n", name, labels, count);
}

Metrics::JobSeries& Metrics::Series(std::string_view queue,
                                    std::string_view kind) {
  std::pair<std::string, std::string> key(queue, kind);
  auto it = jobs_.find(key);
  if (it != jobs_.end()) return it->second;
  if (jobs_.size() >= kMaxJobSeries) key.second = "_other";
  return jobs_[std::move(key)];
}

void Metrics::JobsStarted(std::string_view queue,
                          std::span<const ClaimedMessage> messages) {
  if (messages.empty()) return;
  const auto at = std::chrono::steady_clock::now();
  const Timestamp now = std::chrono::time_point_cast<std::chrono::microseconds>(
      std::chrono::system_clock::now());
  std::lock_guard<std::mutex> lock(mu_);
  if (started_.size() + messages.size() > kMaxStartedJobs) {
    // Forget the older half: those whose leases ran out long ago.
    const std::uint64_t keep_from = started_seq_ - started_.size() / 2;
    std::erase_if(started_,
                  [&](const auto& e) { return e.second.seq < keep_from; });
  }
  for (const ClaimedMessage& m : messages) {
    JobSeries& s = Series(queue, m.kind);
    if (m.attempt == 1) {
      const auto waited = std::chrono::duration<double>(now - m.enqueued_at);
      s.wait.Observe(kJobBuckets, std::max(0.0, waited.count()));
    }
    started_[m.receipt] = {std::string(queue), m.kind, at, ++started_seq_};
  }
}

void Metrics::JobFinished(std::string_view queue, const std::string& receipt,
                          std::string_view outcome) {
  const auto at = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = started_.find(receipt);
  if (it == started_.end()) {
    ++Series(queue, "").outcomes[std::string(outcome)];
    return;
  }
  JobSeries& s = Series(it->second.queue, it->second.kind);
  s.run.Observe(kJobBuckets,
                std::chrono::duration<double>(at - it->second.at).count());
  ++s.outcomes[std::string(outcome)];
  started_.erase(it);
}

namespace {

// One metric family per field of a kind's stats: `label` names the thing
// (queue="emails").
template <typename Stats>
struct Family {
  const char* name;
  const char* type;
  const char* help;
  std::int64_t Stats::*field;
};

template <typename Stats, std::size_t N>
void RenderFamilies(std::string& out, const char* label,
                    const Family<Stats> (&families)[N],
                    const std::vector<Stats>& all) {
  for (const Family<Stats>& f : families) {
    out +=
        fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n", f.name, f.help, f.type);
    for (const Stats& s : all) {
      out += fmt::format("{}{{{}=\"{}\"}} {}\n", f.name, label, Escape(s.name),
                         s.*(f.field));
    }
  }
}

}  // namespace

std::string Metrics::Render(const Figures& figures,
                            const Gauges& gauges) const {
  const std::vector<QueueStats>& queues = figures.queues;
  std::string out;
  auto gauge = [&](const char* name, const char* help, std::int64_t v) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} gauge\n{0} {2}\n", name,
                       help, v);
  };
  out += fmt::format(
      "# HELP sqlq_build_info The sqlq that serves: its version and the "
      "engine of its database; always 1.\n# TYPE sqlq_build_info gauge\n"
      "sqlq_build_info{{version=\"{}\",engine=\"{}\"}} 1\n",
      Escape(build_.version), Escape(build_.engine));
  RenderProcess(out);
  gauge("sqlq_server_connections", "Open client connections.",
        gauges.connections);
  gauge("sqlq_server_waiting_consumers",
        "Long-poll claims parked waiting for messages.",
        gauges.waiting_consumers);
  gauge("sqlq_server_requests_in_flight", "Requests being handled.",
        gauges.requests_in_flight);
  gauge("sqlq_server_scheduler_leader",
        "1 while this server holds the scheduler lease and sends the ticks "
        "of schedules.",
        gauges.scheduler_leader);
  out += fmt::format(
      "# HELP sqlq_server_claim_wakeups_total Wake-ups delivered to parked "
      "claims.\n# TYPE sqlq_server_claim_wakeups_total counter\n"
      "sqlq_server_claim_wakeups_total {}\n",
      gauges.claim_wakeups);

  static const Family<QueueStats> kQueue[] = {
      {"sqlq_queue_ready", "gauge", "Messages claimable now.",
       &QueueStats::ready},
      {"sqlq_queue_delayed", "gauge",
       "Messages waiting for a delay or backoff.", &QueueStats::delayed},
      {"sqlq_queue_leased", "gauge", "Messages held under a live lease.",
       &QueueStats::leased},
      {"sqlq_queue_waiting", "gauge",
       "Messages waiting for the messages they depend on.",
       &QueueStats::waiting},
      {"sqlq_queue_dead", "gauge", "Dead letters.", &QueueStats::dead},
      {"sqlq_queue_archived", "gauge", "Archived messages.",
       &QueueStats::archived},
      {"sqlq_queue_sends_total", "counter", "Messages sent.",
       &QueueStats::sends},
      {"sqlq_queue_claims_total", "counter", "Messages handed out by claims.",
       &QueueStats::claims},
      {"sqlq_queue_acks_total", "counter", "Messages acked.",
       &QueueStats::acks},
      {"sqlq_queue_nacks_total", "counter", "Messages nacked.",
       &QueueStats::nacks},
      {"sqlq_queue_expirations_total", "counter",
       "Leases that ran out before an ack.", &QueueStats::expirations},
      {"sqlq_queue_dead_lettered_total", "counter",
       "Messages that became dead letters.", &QueueStats::dead_lettered},
      {"sqlq_queue_expired_total", "counter",
       "Jobs not started by their expiry, dead-lettered or dropped.",
       &QueueStats::expired},
  };
  RenderFamilies(out, "queue", kQueue, queues);
  out +=
      "# HELP sqlq_queue_waiting_consumers Claims waiting for messages in "
      "every process of the database that reports them.\n"
      "# TYPE sqlq_queue_waiting_consumers gauge\n";
  for (const QueueStats& s : queues) {
    out += fmt::format("sqlq_queue_waiting_consumers{{queue=\"{}\"}} {}\n",
                       Escape(s.name), figures.WaitingFor(s.name));
  }
  static const Family<RingStats> kRing[] = {
      {"sqlq_ring_capacity", "gauge", "Entries each group keeps.",
       &RingStats::capacity},
      {"sqlq_ring_groups", "gauge", "Groups holding entries.",
       &RingStats::groups},
      {"sqlq_ring_entries", "gauge", "Entries over all groups.",
       &RingStats::entries},
      {"sqlq_ring_pushes_total", "counter", "Entries pushed.",
       &RingStats::pushes},
  };
  RenderFamilies(out, "ring", kRing, figures.rings);
  static const Family<RotationStats> kRotation[] = {
      {"sqlq_rotation_items", "gauge", "Items in the pool.",
       &RotationStats::items},
      {"sqlq_rotation_parked", "gauge", "Items parked after failures.",
       &RotationStats::parked},
      {"sqlq_rotation_serves_total", "counter", "Items handed out by next.",
       &RotationStats::serves},
  };
  RenderFamilies(out, "rotation", kRotation, figures.rotations);
  out +=
      "# HELP sqlq_queue_paused 1 while the queue is paused (claims get "
      "nothing).\n# TYPE sqlq_queue_paused gauge\n";
  for (const QueueStats& q : queues) {
    out += fmt::format("sqlq_queue_paused{{queue=\"{}\"}} {}\n", Escape(q.name),
                       q.paused ? 1 : 0);
  }
  out +=
      "# HELP sqlq_queue_oldest_ready_age_seconds How long the oldest ready "
      "message has waited.\n# TYPE sqlq_queue_oldest_ready_age_seconds "
      "gauge\n";
  for (const QueueStats& q : queues) {
    out += fmt::format(
        "sqlq_queue_oldest_ready_age_seconds{{queue=\"{}\"}} "
        "{}\n",
        Escape(q.name), q.oldest_ready_age.count() / 1000.0);
  }

  std::lock_guard<std::mutex> lock(mu_);
  auto job_labels = [](const std::pair<std::string, std::string>& key) {
    return fmt::format("queue=\"{}\",kind=\"{}\"", Escape(key.first),
                       Escape(key.second));
  };
  out +=
      "# HELP sqlq_job_wait_seconds Time from a message's send to its first "
      "claim through this server, per queue and kind.\n"
      "# TYPE sqlq_job_wait_seconds histogram\n";
  for (const auto& [key, s] : jobs_) {
    if (s.wait.count > 0) {
      s.wait.Render(out, "sqlq_job_wait_seconds", job_labels(key), kJobBuckets);
    }
  }
  out +=
      "# HELP sqlq_job_run_seconds Time from a claim through this server to "
      "the ack or nack of its message through this server, per queue and "
      "kind.\n# TYPE sqlq_job_run_seconds histogram\n";
  for (const auto& [key, s] : jobs_) {
    if (s.run.count > 0) {
      s.run.Render(out, "sqlq_job_run_seconds", job_labels(key), kJobBuckets);
    }
  }
  out +=
      "# HELP sqlq_job_outcomes_total Acks and nacks through this server, "
      "per queue, kind and outcome (completed, retry, dead, snoozed).\n"
      "# TYPE sqlq_job_outcomes_total counter\n";
  for (const auto& [key, s] : jobs_) {
    for (const auto& [outcome, n] : s.outcomes) {
      out += fmt::format("sqlq_job_outcomes_total{{{},outcome=\"{}\"}} {}\n",
                         job_labels(key), outcome, n);
    }
  }

  out +=
      "# HELP sqlq_http_request_duration_seconds Time from a request's "
      "headers to its reply, per route and status class.\n"
      "# TYPE sqlq_http_request_duration_seconds histogram\n";
  for (const auto& [key, h] : requests_) {
    std::string labels = fmt::format("route=\"{}\",status=\"{}\"",
                                     Escape(key.first), key.second);
    h.Render(out, "sqlq_http_request_duration_seconds", labels, kBuckets);
  }
  return out;
}

}  // namespace sqlq::server
