// Live workers: each worker process reports itself to the store while it
// runs (who it is, where, which queues and kinds it serves, the jobs in its
// hands), so that anyone can see which workers are up and what they hold
// (docs/semantics.md, "Live workers"). The Python and Node.js workers report
// themselves over HTTP (PUT /v1/workers/{id}); Store::ReportWorker is how a
// program on the library does (sqlq::JobRunner reports itself so).
//
// A report lives for its `ttl` from when the store received it: a worker
// reports again well within it (every ttl / 3), and one that stops
// reporting (killed, frozen, cut off) drops out of the list when its last
// report runs out. RemoveWorker is the goodbye of one that stops cleanly.

#ifndef SQLQ_WORKERS_H_
#define SQLQ_WORKERS_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "sqlq/queue.h"

namespace sqlq {

// A job in a worker's hands: its queue, its message id, and since when.
struct WorkerJob {
  std::string queue;
  std::int64_t id = 0;
  Timestamp since;
};

// What a worker says of itself. Limits (kInvalidArgument beyond them): id
// 1..128 bytes of ASCII letters, digits and '_', '-', '.', ':', '/'; name and
// host at most 255 bytes of UTF-8 each; at most kMaxWorkerQueues queues
// (queue names) and as many kinds (Message::kind); at most kMaxWorkerJobs
// jobs; concurrency 0..1,000,000; ttl 1 s..1 h.
struct WorkerReport {
  // Unique per process and run (the clients use host, pid and a random
  // part): a report replaces the last one with the same id.
  std::string id;
  // What people call it ("mailer", "billing-worker").
  std::string name;
  std::string host;
  std::int64_t pid = 0;
  std::vector<std::string> queues;
  std::vector<std::string> kinds;
  // Jobs it runs at once at most.
  int concurrency = 1;
  std::vector<WorkerJob> jobs;
  Timestamp started_at;
  Duration ttl = std::chrono::seconds(30);
};
inline constexpr std::size_t kMaxWorkerQueues = 256;
inline constexpr std::size_t kMaxWorkerJobs = 10000;

// This machine's host name as a report carries it (at most 255 bytes).
std::string WorkerHost();
// A new worker id, "host:pid:random" as the clients make them: unique per
// process and run, within the limits of WorkerReport::id (the host name's
// characters outside them become '-').
std::string NewWorkerId();

// A live worker as Store::ListWorkers shows it: its last report, when the
// store received it, and when it runs out unless renewed.
struct WorkerInfo {
  WorkerReport report;
  Timestamp last_seen;
  Timestamp expires_at;
};

}  // namespace sqlq

#endif  // SQLQ_WORKERS_H_
