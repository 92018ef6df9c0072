// Live workers (sqlq/workers.h): checked, encoded into the row of
// sqlq_workers that holds each worker's last report, and read back.
//
// A report's fields but its id go into one JSON text column (`info`): no
// query looks into them, and a new field needs no migration. Times are in
// microseconds since the epoch, as every table keeps them.

#include "sqlq/workers.h"

#include <fmt/format.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/columns.h"
#include "core/receipt.h"
#include "core/rows.h"
#include "core/store_impl.h"
#include "core/validate.h"
#include "sqlq/store.h"
#include "sqlq/text.h"

namespace sqlq::core {

namespace {

// Reports that ran out are deleted (by the next report of any worker) this
// long after: a worker that comes back within it is the same row again.
constexpr Micros kForgetAfter = std::chrono::hours(1);
constexpr std::size_t kMaxWorkerText = 255;
constexpr Duration kMinWorkerTtl = std::chrono::seconds(1);
constexpr Duration kMaxWorkerTtl = std::chrono::hours(1);

Status CheckText(std::string_view what, std::string_view text) {
  if (text.size() > kMaxWorkerText || !IsUtf8(text) ||
      text.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument(fmt::format(
        "worker {} must be at most {} bytes of UTF-8 without NUL bytes", what,
        kMaxWorkerText));
  }
  return Status::Ok();
}

Status ValidateWorkerId(std::string_view id) {
  if (id.empty()) return Status::InvalidArgument("a worker needs an id");
  return ValidateToken("worker id", id, kMaxKind);
}

Status ValidateReport(const WorkerReport& r) {
  Status s = ValidateWorkerId(r.id);
  if (!s.ok()) return s;
  s = CheckText("name", r.name);
  if (!s.ok()) return s;
  s = CheckText("host", r.host);
  if (!s.ok()) return s;
  if (r.queues.size() > kMaxWorkerQueues || r.kinds.size() > kMaxWorkerQueues) {
    return Status::InvalidArgument(
        fmt::format("a worker names at most {} queues and {} kinds",
                    kMaxWorkerQueues, kMaxWorkerQueues));
  }
  for (const std::string& q : r.queues) {
    s = ValidateName("queue", q);
    if (!s.ok()) return s;
  }
  for (const std::string& k : r.kinds) {
    if (k.empty()) return Status::InvalidArgument("a worker's kind is empty");
    s = ValidateKind(k);
    if (!s.ok()) return s;
  }
  if (r.jobs.size() > kMaxWorkerJobs) {
    return Status::InvalidArgument(
        fmt::format("{} jobs are more than the {} a report holds",
                    r.jobs.size(), kMaxWorkerJobs));
  }
  for (const WorkerJob& j : r.jobs) {
    s = ValidateName("queue", j.queue);
    if (!s.ok()) return s;
    if (j.id <= 0) {
      return Status::InvalidArgument(
          fmt::format("job id {} is not positive", j.id));
    }
  }
  if (r.concurrency < 0 || r.concurrency > 1000000) {
    return Status::InvalidArgument(fmt::format(
        "worker concurrency {} is out of range [0, 1000000]", r.concurrency));
  }
  if (r.pid < 0) {
    return Status::InvalidArgument(
        fmt::format("worker pid {} is negative", r.pid));
  }
  if (r.ttl < kMinWorkerTtl || r.ttl > kMaxWorkerTtl) {
    return Status::InvalidArgument(fmt::format(
        "worker ttl {}ms is out of range [{}ms, {}ms]", r.ttl.count(),
        kMinWorkerTtl.count(), kMaxWorkerTtl.count()));
  }
  return Status::Ok();
}

std::string EncodeInfo(const WorkerReport& r) {
  nlohmann::json jobs = nlohmann::json::array();
  for (const WorkerJob& j : r.jobs) {
    jobs.push_back({{"queue", j.queue}, {"id", j.id}, {"since", Us(j.since)}});
  }
  nlohmann::json info = {{"name", r.name},
                         {"host", r.host},
                         {"pid", r.pid},
                         {"queues", r.queues},
                         {"kinds", r.kinds},
                         {"concurrency", r.concurrency},
                         {"jobs", std::move(jobs)},
                         {"started", Us(r.started_at)},
                         {"ttl", Us(r.ttl)}};
  return info.dump();
}

// What can be read of a row (one written by hand yields its id and times).
WorkerInfo DecodeWorker(WorkerRecord row) {
  WorkerInfo w;
  w.report.id = std::move(row.id);
  w.last_seen = FromUs(row.seen_us);
  w.expires_at = FromUs(row.expires_us);
  auto j = nlohmann::json::parse(row.info, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return w;
  WorkerReport& r = w.report;
  r.name = j.value("name", "");
  r.host = j.value("host", "");
  r.pid = j.value("pid", std::int64_t{0});
  r.queues = j.value("queues", std::vector<std::string>{});
  r.kinds = j.value("kinds", std::vector<std::string>{});
  r.concurrency = j.value("concurrency", 0);
  r.started_at = FromUs(j.value("started", std::int64_t{0}));
  r.ttl = DurationFromUs(j.value("ttl", std::int64_t{0}));
  for (const auto& job : j.value("jobs", nlohmann::json::array())) {
    if (!job.is_object()) continue;
    r.jobs.push_back({.queue = job.value("queue", ""),
                      .id = job.value("id", std::int64_t{0}),
                      .since = FromUs(job.value("since", std::int64_t{0}))});
  }
  return w;
}

}  // namespace

}  // namespace sqlq::core

namespace sqlq {

std::string WorkerHost() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  std::string out(host);
  // A report takes UTF-8 only: a host name in another encoding is left out.
  return IsUtf8(out) ? out : std::string();
}

std::string NewWorkerId() {
  std::string host = WorkerHost().substr(0, 96);
  for (char& c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                    c == '.' || c == ':' || c == '/';
    if (!ok) c = '-';
  }
  if (host.empty()) host = "host";
  return fmt::format("{}:{}:{:08x}", host, getpid(),
                     static_cast<std::uint32_t>(core::NewLeaseToken()));
}

Status Store::ReportWorker(const WorkerReport& report) {
  Status s = core::ValidateReport(report);
  if (!s.ok()) return s;
  const std::string info = core::EncodeInfo(report);
  return core::MergedWrite<bool>(
             *impl_,
             [&](core::WorkerOps& e, core::Conn& c) -> Result<bool> {
               Status r =
                   e.ReportWorker(c, {.id = report.id,
                                      .info = info,
                                      .ttl = core::Micros(report.ttl),
                                      .forget_after = core::kForgetAfter});
               if (!r.ok()) return r;
               return true;
             })
      .status();
}

Result<bool> Store::RemoveWorker(std::string_view id) {
  Status s = core::ValidateWorkerId(id);
  if (!s.ok()) return s;
  return core::MergedWrite<bool>(
      *impl_,
      [&](core::WorkerOps& e, core::Conn& c) { return e.RemoveWorker(c, id); });
}

Result<std::vector<WorkerInfo>> Store::ListWorkers() {
  auto rows = core::SnapshotRead<std::vector<core::WorkerRecord>>(
      *impl_,
      [](core::WorkerOps& e, core::Conn& c) { return e.ListWorkers(c); });
  if (!rows.ok()) return rows.status();
  std::vector<WorkerInfo> out;
  out.reserve(rows->size());
  for (auto& r : *rows) out.push_back(core::DecodeWorker(std::move(r)));
  return out;
}

}  // namespace sqlq
