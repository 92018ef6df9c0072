// JobRunner: a worker process's job runtime on the library, as the Python
// and Node.js workers are over HTTP (docs/semantics.md, "The job runner",
// "Jobs" and "Live workers").
//
//   sqlq::JobRunner runner(*store, {*emails, *reports}, {.concurrency = 8});
//   runner.Handle("email.send", [](const sqlq::ClaimedMessage& m,
//                                  std::stop_token stop) {
//     if (!Send(m.payload)) return sqlq::JobOutcome::Retry("smtp down");
//     return sqlq::JobOutcome::Complete();
//   });
//   runner.Start();  ... runner.Stop();
//
// - Handlers by kind (Message::kind); "*" takes every other kind and the
//   messages without one. A message no handler takes gets the
//   unknown-kind policy: a failed attempt (the default), a snooze, or a
//   dead letter at once.
// - `concurrency` threads, each running one job at a time, claim from the
//   runner's queues in turn (one sqlq::Worker per queue and thread, with
//   prefetch 1: the ack of a job goes into the transaction of the next
//   claim). Idle threads wait for a send (WorkQueue::Subscribe), not by
//   polling.
// - While a handler runs its lease is extended each time half of it has
//   passed. At the job's timeout (the handler's, else the runner's, or the
//   message's own when shorter) the runner stops extending, requests the
//   handler's stop token and fails the attempt with "timeout after N ms"
//   at once, whether or not the handler stops; what the handler returns
//   afterwards is dropped. Its thread is the handler's until it returns.
// - The runner reports itself as a live worker (Store::ReportWorker) at
//   Start and every report_ttl / 3, and removes its report at Stop; its
//   claims carry its id.
//
// Thread-safety: Handle before Start, from one thread. Start, Stop and
// the accessors may be called from any thread. The Store must outlive the
// runner.

#ifndef SQLQ_JOB_RUNNER_H_
#define SQLQ_JOB_RUNNER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "sqlq/queue.h"
#include "sqlq/status.h"

namespace sqlq {

class Store;

// What a handler makes of its job.
class JobOutcome {
 public:
  // Done: acked (with the thread's next claim).
  static JobOutcome Complete();
  // Done with a result, kept with the ack for WorkQueue::ReadResult for
  // `ttl` (AckOptions): acked at once, in its own commit.
  static JobOutcome Complete(std::string result,
                             Duration ttl = std::chrono::hours(24));
  // A failed attempt: retried after `delay` (the queue's backoff when
  // unset), a dead letter on its last attempt. `error` (empty: "retry
  // after N ms", or "retry requested by the handler") goes into the
  // message's error history.
  static JobOutcome Retry(std::string error = {},
                          std::optional<Duration> delay = std::nullopt);
  // A failure no retry can mend: a dead letter now, `error` its last error.
  static JobOutcome Dead(std::string error);
  // Not now: claimable again after `delay`, its attempt given back
  // (NackAction::kSnooze; after kMaxSnoozes a snooze is a failed attempt).
  static JobOutcome Snooze(Duration delay);

  bool complete() const { return complete_; }
  // Complete's result and its ttl (unset: none).
  const AckOptions& ack() const { return ack_; }
  // The nack of any outcome but Complete.
  const NackOptions& nack() const { return nack_; }

 private:
  bool complete_ = true;
  AckOptions ack_;
  NackOptions nack_;
};

// A handler: runs the job `message` and says what became of it. Throwing
// is a failed attempt with the exception's what() as its error. `stop` is
// requested at the job's timeout and when the runner stops: a long
// handler looks at it and returns.
using JobHandler =
    std::function<JobOutcome(const ClaimedMessage& message, std::stop_token)>;

struct HandlerOptions {
  // The longest the handler may run on one job (1ms..12h); the runner's
  // timeout when unset. A message's own timeout, when shorter, wins.
  std::optional<Duration> timeout;
};

// What becomes of a message no handler takes.
enum class UnknownKind {
  // A failed attempt, "no handler for kind 'fax.send'" (or "no handler for
  // messages without a kind"): retried, then a dead letter; never lost.
  kFail,
  // Snoozed for unknown_kind_delay, its attempt not counted: for a rolling
  // deploy in which newer workers know the kind.
  kSnooze,
  // A dead letter at once, with the same error as kFail.
  kDead,
};

struct JobRunnerOptions {
  // Handler threads: jobs run at once at most (1..1000).
  int concurrency = 1;
  // The lease of each claim (1ms..12h); each queue's own when unset. A job
  // with a shorter timeout is leased (and extended) for its timeout.
  std::optional<Duration> lease;
  // Every handler's timeout unless its HandlerOptions name one (1ms..12h);
  // unset: none but the messages' own.
  std::optional<Duration> timeout;
  UnknownKind unknown_kind = UnknownKind::kFail;
  Duration unknown_kind_delay = std::chrono::seconds(30);  // 0..365 days
  // What the live-worker report calls the runner (at most 255 bytes of
  // UTF-8); "host:pid" when empty.
  std::string name;
  // Report as a live worker (the claims carry id() either way).
  bool report = true;
  Duration report_ttl = std::chrono::seconds(30);  // 1s..1h
};

// Counts since Start, each taken once its store operation returned (a
// redelivery can be seen before the nack that allowed it is counted); all
// final once Stop returns.
struct JobRunnerStats {
  std::int64_t completed = 0;  // acked
  std::int64_t failed = 0;     // failed attempts: retry, throw, timeout
  std::int64_t dead = 0;       // dead-lettered by an outcome or the policy
  std::int64_t snoozed = 0;
  std::int64_t timed_out = 0;  // failed at their timeout (also in failed)
  // Outcomes the store refused: the lease had run out and the message went
  // to another consumer (or was deleted, cancelled).
  std::int64_t lost = 0;
  // Claims, acks, nacks, extensions and reports that failed for another
  // reason (the database unreachable), and the last of them.
  std::int64_t errors = 0;
  Status last_error;
};

class JobRunner {
 public:
  // Over `queues` (1..kMaxWorkerQueues queues of `store`, distinct names).
  // Options are checked by Start.
  JobRunner(Store& store, std::vector<WorkQueue> queues,
            JobRunnerOptions options = {});
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;
  // Stop().
  ~JobRunner();

  // The handler of jobs of `kind` ("*": of every kind no other handler
  // takes, and of messages without one). Before Start. kInvalidArgument
  // for a malformed kind, a kind already handled, an empty handler or a
  // timeout out of range; kFailedPrecondition once started.
  Status Handle(std::string_view kind, JobHandler handler,
                HandlerOptions options = {});

  // Reports the runner as a live worker (when options.report; a failed
  // first report is returned and nothing starts) and starts its threads.
  // kInvalidArgument for bad options or no handler at all;
  // kFailedPrecondition when started before.
  Status Start();
  // Claims nothing more, requests the stop token of every running job,
  // waits for their handlers (their leases still extended) and settles
  // their outcomes, gives back what was claimed and not started, and
  // removes the live-worker report. Idempotent. Returns the first error
  // of the acks still pending or of the removal.
  Status Stop();

  // "host:pid:random": the live-worker id, and the `worker` of each claim.
  const std::string& id() const;
  bool running() const;
  JobRunnerStats stats() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace sqlq

#endif  // SQLQ_JOB_RUNNER_H_
