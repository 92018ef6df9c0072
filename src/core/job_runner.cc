// JobRunner (include/sqlq/job_runner.h): handler threads that claim through
// sqlq::Worker, a monitor thread that extends the leases of running jobs
// and cuts them off at their timeouts, and a reporter thread.

#include "sqlq/job_runner.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "core/columns.h"
#include "core/engine.h"
#include "core/periodic_thread.h"
#include "core/validate.h"
#include "sqlq/store.h"
#include "sqlq/text.h"
#include "sqlq/worker.h"
#include "sqlq/workers.h"

namespace sqlq {

namespace {

using SteadyClock = std::chrono::steady_clock;

constexpr int kMaxConcurrency = 1000;
constexpr Duration kMinReportTtl = std::chrono::seconds(1);
constexpr Duration kMaxReportTtl = std::chrono::hours(1);
constexpr std::size_t kMaxName = 255;
// After a failed claim, extension or report: the first retry, and the
// longest wait between retries.
constexpr Duration kRetryFirst = std::chrono::milliseconds(50);
constexpr Duration kRetryMax = std::chrono::seconds(5);

Duration RetryDelay(int failures) {
  Duration d = kRetryFirst;
  for (int i = 0; i < failures && d < kRetryMax; ++i) d *= 2;
  return std::min(d, kRetryMax);
}

Status CheckRange(std::string_view what, Duration d, Duration lo, Duration hi) {
  if (d < lo || d > hi) {
    return Status::InvalidArgument(
        fmt::format("job runner: {} {}ms is out of range [{}ms, {}ms]", what,
                    d.count(), lo.count(), hi.count()));
  }
  return Status::Ok();
}

std::string NoHandlerText(const std::string& kind) {
  return kind.empty() ? "no handler for messages without a kind"
                      : fmt::format("no handler for kind '{}'", kind);
}

Timestamp SystemNow() {
  return std::chrono::time_point_cast<std::chrono::microseconds>(
      std::chrono::system_clock::now());
}

}  // namespace

JobOutcome JobOutcome::Complete() { return JobOutcome(); }

JobOutcome JobOutcome::Complete(std::string result, Duration ttl) {
  JobOutcome o;
  o.ack_ = {.result = std::move(result), .result_ttl = ttl};
  return o;
}

JobOutcome JobOutcome::Retry(std::string error, std::optional<Duration> delay) {
  JobOutcome o;
  o.complete_ = false;
  if (error.empty()) {
    error = delay ? fmt::format("retry after {} ms", delay->count())
                  : "retry requested by the handler";
  }
  o.nack_ = {
      .delay = delay, .error = std::move(error), .action = NackAction::kRetry};
  return o;
}

JobOutcome JobOutcome::Dead(std::string error) {
  JobOutcome o;
  o.complete_ = false;
  o.nack_ = {.error = std::move(error), .action = NackAction::kDead};
  return o;
}

JobOutcome JobOutcome::Snooze(Duration delay) {
  JobOutcome o;
  o.complete_ = false;
  o.nack_ = {.delay = delay, .action = NackAction::kSnooze};
  return o;
}

// A job in a handler's hands, shared by its handler thread and the monitor.
struct RunningJob {
  std::size_t queue = 0;  // index into State::queues
  std::int64_t id = 0;
  std::string receipt;
  Timestamp since;    // claimed, by this machine's clock
  Duration lease{0};  // kept by extensions
  SteadyClock::time_point next_extend;
  std::optional<Duration> timeout;
  SteadyClock::time_point timeout_at = SteadyClock::time_point::max();
  std::stop_source stop;
  // Guarded by State::mu: the monitor failed it at its timeout (the
  // handler's outcome is then dropped); its lease was lost (no more
  // extensions).
  bool timed_out = false;
  bool lost = false;
};

struct JobRunner::State {
  struct Entry {
    JobHandler handler;
    HandlerOptions options;
  };

  State(Store& s, std::vector<WorkQueue> q, JobRunnerOptions o)
      : store(s),
        queues(std::move(q)),
        options(std::move(o)),
        id(NewWorkerId()) {}

  Store& store;
  std::vector<WorkQueue> queues;  // not changed after Start
  const JobRunnerOptions options;
  const std::string id;
  std::map<std::string, Entry, std::less<>> handlers;  // "*" the default
  std::vector<Duration> leases;                        // each queue's, at Start
  Timestamp started_at;

  mutable std::mutex mu;
  bool started = false;  // guarded by mu
  bool stopping = false;
  bool stopped = false;
  JobRunnerStats stats;
  std::list<std::shared_ptr<RunningJob>> jobs;
  std::condition_variable monitor_cv;  // a job came, or the end
  bool monitor_stop = false;

  // One per handler thread: its wake-ups.
  struct Slot {
    std::mutex mu;
    std::condition_variable cv;
    bool signalled = false;  // a subscription fired, or the runner stops
  };
  std::vector<std::unique_ptr<Slot>> slots;
  std::vector<std::thread> threads;
  std::thread monitor;
  std::unique_ptr<core::PeriodicThread> reporter;
  Status close_error;  // guarded by mu: the first error of a Worker::Close

  Status CheckOptions() const;
  const Entry* Route(const std::string& kind) const;
  void Count(std::int64_t JobRunnerStats::*field, std::int64_t n = 1) {
    std::lock_guard<std::mutex> lock(mu);
    stats.*field += n;
  }
  void CountError(const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    ++stats.errors;
    stats.last_error = s;
  }
  // Counts a nack's outcome, or its failure (`nacked` its result).
  void CountNack(const Result<NackOutcome>& nacked);

  void HandlerThread(std::size_t index);
  // Runs `m` of queue `k` with worker `w`, and settles its outcome.
  void Run(std::size_t k, Worker& w, ClaimedMessage m);
  void MonitorThread();
  WorkerReport Report();
  std::chrono::steady_clock::duration ReportPass();
};

Status JobRunner::State::CheckOptions() const {
  const JobRunnerOptions& o = options;
  if (o.concurrency < 1 || o.concurrency > kMaxConcurrency) {
    return Status::InvalidArgument(
        fmt::format("job runner: concurrency {} is out of range [1, {}]",
                    o.concurrency, kMaxConcurrency));
  }
  if (queues.empty() || queues.size() > kMaxWorkerQueues) {
    return Status::InvalidArgument(
        fmt::format("job runner: give 1 to {} queues, not {}", kMaxWorkerQueues,
                    queues.size()));
  }
  std::set<std::string> names;
  for (const WorkQueue& q : queues) {
    if (!names.insert(q.name()).second) {
      return Status::InvalidArgument(
          fmt::format("job runner: queue '{}' is given twice", q.name()));
    }
  }
  Status s;
  if (o.lease) s = CheckRange("lease", *o.lease, Duration(1), kMaxLease);
  if (s.ok() && o.timeout) {
    s = CheckRange("timeout", *o.timeout, Duration(1), kMaxLease);
  }
  if (s.ok()) {
    s = CheckRange("unknown_kind_delay", o.unknown_kind_delay, Duration(0),
                   kMaxDelay);
  }
  if (s.ok()) {
    s = CheckRange("report_ttl", o.report_ttl, kMinReportTtl, kMaxReportTtl);
  }
  if (!s.ok()) return s;
  if (o.name.size() > kMaxName || !IsUtf8(o.name)) {
    return Status::InvalidArgument(fmt::format(
        "job runner: name must be at most {} bytes of UTF-8", kMaxName));
  }
  if (handlers.empty()) {
    return Status::InvalidArgument(
        "job runner: no handler (Handle a kind, or \"*\" for every kind)");
  }
  return Status::Ok();
}

const JobRunner::State::Entry* JobRunner::State::Route(
    const std::string& kind) const {
  if (!kind.empty()) {
    auto it = handlers.find(kind);
    if (it != handlers.end()) return &it->second;
  }
  auto it = handlers.find("*");
  return it == handlers.end() ? nullptr : &it->second;
}

void JobRunner::State::CountNack(const Result<NackOutcome>& nacked) {
  if (!nacked.ok()) {
    if (core::IsCleanFailure(nacked.status())) {
      Count(&JobRunnerStats::lost);
    } else {
      CountError(nacked.status());
    }
    return;
  }
  switch (*nacked) {
    case NackOutcome::kRetry:
      Count(&JobRunnerStats::failed);
      break;
    case NackOutcome::kDead:
      Count(&JobRunnerStats::dead);
      break;
    case NackOutcome::kSnoozed:
      Count(&JobRunnerStats::snoozed);
      break;
  }
}

void JobRunner::State::Run(std::size_t k, Worker& w, ClaimedMessage m) {
  const Entry* entry = Route(m.kind);
  if (entry == nullptr) {
    NackOptions nack{.error = NoHandlerText(m.kind)};
    if (options.unknown_kind == UnknownKind::kSnooze) {
      nack = {.delay = options.unknown_kind_delay,
              .action = NackAction::kSnooze};
    } else if (options.unknown_kind == UnknownKind::kDead) {
      nack.action = NackAction::kDead;
    }
    CountNack(w.Fail(m, nack));
    return;
  }
  auto job = std::make_shared<RunningJob>();
  job->queue = k;
  job->id = m.id;
  job->receipt = m.receipt;
  job->since = SystemNow();
  // A claim leases a job for at most its own timeout: kept at that.
  job->lease = leases[k];
  if (m.timeout) job->lease = std::min(job->lease, *m.timeout);
  job->timeout =
      entry->options.timeout ? entry->options.timeout : options.timeout;
  if (m.timeout) {
    job->timeout =
        job->timeout ? std::min(*job->timeout, *m.timeout) : *m.timeout;
  }
  const auto start = SteadyClock::now();
  job->next_extend = start + job->lease / 2;
  if (job->timeout) job->timeout_at = start + *job->timeout;
  bool stopped_first = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    stopped_first = stopping;
    if (!stopping) jobs.push_back(job);
  }
  if (stopped_first) {
    // Claimed as the runner stopped: given back unworked, its attempt not
    // counted.
    CountNack(w.Fail(m, {.delay = Duration(0), .action = NackAction::kSnooze}));
    return;
  }
  monitor_cv.notify_all();

  std::optional<JobOutcome> outcome;
  try {
    outcome = entry->handler(m, job->stop.get_token());
  } catch (const std::exception& e) {
    const char* what = e.what();
    outcome = JobOutcome::Retry(
        what != nullptr && *what != '\0' ? what : "handler threw an exception");
  } catch (...) {
    outcome = JobOutcome::Retry("handler threw an exception");
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    jobs.remove(job);
    // Failed at its timeout meanwhile: the outcome is dropped.
    if (job->timed_out) return;
  }
  if (!outcome->complete()) {
    CountNack(w.Fail(m, outcome->nack()));
    return;
  }
  if (outcome->ack().result) {
    // A result goes with its own ack, now (a deferred ack carries none).
    Status acked = queues[k].Ack(m.receipt, outcome->ack());
    if (!acked.ok()) {
      CountError(acked);
      return;
    }
    Count(&JobRunnerStats::completed);
    return;
  }
  Status done = w.Done(m);
  if (!done.ok()) {
    CountError(done);
    return;
  }
  Count(&JobRunnerStats::completed);
  // With several queues the ack goes now, so that the next claim can be
  // of the next queue; with one it goes with the next claim.
  if (queues.size() > 1) {
    const std::int64_t refused = w.refused_acks();
    Status s = w.Flush();
    if (!s.ok() && w.refused_acks() == refused) CountError(s);
  }
}

void JobRunner::State::HandlerThread(std::size_t index) {
  Slot& slot = *slots[index];
  const std::size_t n = queues.size();
  std::vector<std::unique_ptr<Worker>> workers;
  std::vector<std::unique_ptr<ReadySubscription>> subs;
  std::vector<std::int64_t> refused(n, 0);
  for (std::size_t k = 0; k < n; ++k) {
    workers.push_back(std::make_unique<Worker>(
        queues[k],
        WorkerOptions{.prefetch = 1, .lease = options.lease, .worker = id}));
    // Subscribed before the first claim: no send is missed in between.
    subs.push_back(queues[k].Subscribe([&slot] {
      {
        std::lock_guard<std::mutex> lock(slot.mu);
        slot.signalled = true;
      }
      slot.cv.notify_all();
    }));
  }
  // Acks a Done message's worker refused since the last look: lost.
  auto count_refused = [&](std::size_t k) {
    const std::int64_t now = workers[k]->refused_acks();
    if (now == refused[k]) return;
    std::lock_guard<std::mutex> lock(mu);
    stats.lost += now - refused[k];
    stats.completed -= now - refused[k];
    refused[k] = now;
  };
  auto stopping_now = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return stopping;
  };

  std::size_t first = index % n;  // threads begin at different queues
  int failures = 0;
  std::vector<ClaimNote> notes(n);
  while (!stopping_now()) {
    {
      std::lock_guard<std::mutex> lock(slot.mu);
      slot.signalled = false;
    }
    bool ran = false, failed = false;
    for (std::size_t i = 0; i < n && !ran; ++i) {
      const std::size_t k = (first + i) % n;
      subs[k]->TakeSignal();
      auto next = workers[k]->Next(Duration(0), &notes[k]);
      count_refused(k);
      if (!next.ok()) {
        CountError(next.status());
        failed = true;
        continue;
      }
      if (!next->has_value()) continue;
      ran = true;
      Run(k, *workers[k], std::move(**next));
      count_refused(k);
      // One queue: the next claim carries the ack. Several: the next
      // claim looks at the next queue first, so that none starves.
      first = (k + 1) % n;
    }
    if (ran) {
      failures = 0;
      continue;
    }
    auto until = SteadyClock::now() + std::chrono::seconds(1);
    if (failed) {
      until = SteadyClock::now() + RetryDelay(failures++);
    } else {
      failures = 0;
      for (std::size_t k = 0; k < n; ++k) {
        auto at = queues[k].NextLook(&notes[k]);
        if (at.ok()) {
          until = std::min(until, *at);
        } else {
          CountError(at.status());
        }
      }
    }
    std::unique_lock<std::mutex> lock(slot.mu);
    // (Stop sets `signalled` too, but a round may have cleared it since.)
    slot.cv.wait_until(lock, until,
                       [&] { return slot.signalled || stopping_now(); });
  }
  for (std::size_t k = 0; k < n; ++k) {
    Status s = workers[k]->Close();
    count_refused(k);
    if (!s.ok() && !core::IsCleanFailure(s)) {
      std::lock_guard<std::mutex> lock(mu);
      if (close_error.ok()) close_error = s;
    }
  }
  subs.clear();
}

void JobRunner::State::MonitorThread() {
  std::unique_lock<std::mutex> lock(mu);
  while (!monitor_stop) {
    const auto now = SteadyClock::now();
    auto next = SteadyClock::time_point::max();
    std::vector<std::shared_ptr<RunningJob>> extend, late;
    for (const auto& job : jobs) {
      if (job->timed_out) continue;
      if (job->timeout_at <= now) {
        job->timed_out = true;  // its outcome is dropped from now on
        late.push_back(job);
        continue;
      }
      next = std::min(next, job->timeout_at);
      if (job->lost) continue;
      if (job->next_extend <= now) {
        extend.push_back(job);
      } else {
        next = std::min(next, job->next_extend);
      }
    }
    if (extend.empty() && late.empty()) {
      if (next == SteadyClock::time_point::max()) {
        monitor_cv.wait(lock);
      } else {
        monitor_cv.wait_until(lock, next);
      }
      continue;
    }
    lock.unlock();
    for (const auto& job : late) {
      job->stop.request_stop();
      auto nacked = queues[job->queue].Nack(
          job->receipt,
          {.error = fmt::format("timeout after {} ms", job->timeout->count())});
      CountNack(nacked);
      if (nacked.ok()) Count(&JobRunnerStats::timed_out);
    }
    for (const auto& job : extend) {
      auto until = queues[job->queue].Extend(job->receipt, job->lease);
      std::lock_guard<std::mutex> relock(mu);
      if (until.ok()) {
        job->next_extend = SteadyClock::now() + job->lease / 2;
      } else if (core::IsCleanFailure(until.status())) {
        job->lost = true;  // gone to another consumer: its outcome is refused
      } else {
        ++stats.errors;
        stats.last_error = until.status();
        job->next_extend =
            SteadyClock::now() +
            std::min<SteadyClock::duration>(job->lease / 10, kRetryFirst * 10);
      }
    }
    lock.lock();
  }
}

WorkerReport JobRunner::State::Report() {
  WorkerReport r{.id = id,
                 .name = options.name.empty()
                             ? fmt::format("{}-{}", WorkerHost(), getpid())
                             : options.name,
                 .host = WorkerHost(),
                 .pid = getpid(),
                 .concurrency = options.concurrency,
                 .started_at = started_at,
                 .ttl = options.report_ttl};
  if (r.name.size() > kMaxName) r.name = fmt::format("{}", getpid());
  for (const WorkQueue& q : queues) r.queues.push_back(q.name());
  for (const auto& [kind, entry] : handlers) {
    if (kind != "*") r.kinds.push_back(kind);
  }
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& job : jobs) {
    if (job->timed_out || job->lost || r.jobs.size() >= kMaxWorkerJobs) {
      continue;
    }
    r.jobs.push_back({.queue = queues[job->queue].name(),
                      .id = job->id,
                      .since = job->since});
  }
  return r;
}

std::chrono::steady_clock::duration JobRunner::State::ReportPass() {
  const Duration every = options.report_ttl / 3;
  Status s = store.ReportWorker(Report());
  if (s.ok()) return every;
  CountError(s);
  return std::min(every, kRetryFirst * 20);
}

JobRunner::JobRunner(Store& store, std::vector<WorkQueue> queues,
                     JobRunnerOptions options)
    : state_(std::make_unique<State>(store, std::move(queues),
                                     std::move(options))) {}

JobRunner::~JobRunner() { (void)Stop(); }

const std::string& JobRunner::id() const { return state_->id; }

bool JobRunner::running() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->started && !state_->stopped;
}

JobRunnerStats JobRunner::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->stats;
}

Status JobRunner::Handle(std::string_view kind, JobHandler handler,
                         HandlerOptions options) {
  State& st = *state_;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    if (st.started) {
      return Status::FailedPrecondition(
          "job runner: handlers are registered before Start");
    }
  }
  if (kind != "*") {
    if (kind.empty()) {
      return Status::InvalidArgument(
          "job runner: a handler needs a kind (\"*\" for every kind)");
    }
    Status s = core::ValidateKind(kind);
    if (!s.ok()) return s.WithContext("job runner");
  }
  if (!handler) {
    return Status::InvalidArgument(
        fmt::format("job runner: the handler of '{}' is empty", kind));
  }
  if (options.timeout) {
    Status s =
        CheckRange("handler timeout", *options.timeout, Duration(1), kMaxLease);
    if (!s.ok()) return s;
  }
  if (st.handlers.contains(kind)) {
    return Status::InvalidArgument(
        fmt::format("job runner: kind '{}' has a handler already", kind));
  }
  st.handlers.emplace(std::string(kind),
                      State::Entry{std::move(handler), options});
  return Status::Ok();
}

Status JobRunner::Start() {
  State& st = *state_;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    if (st.started) {
      return Status::FailedPrecondition("job runner: started already");
    }
  }
  Status s = st.CheckOptions();
  if (!s.ok()) return s;
  st.leases.clear();
  for (const WorkQueue& q : st.queues) {
    st.leases.push_back(st.options.lease.value_or(q.options().lease));
  }
  st.started_at = SystemNow();
  if (st.options.report) {
    s = st.store.ReportWorker(st.Report());
    if (!s.ok()) return s;
  }
  {
    std::lock_guard<std::mutex> lock(st.mu);
    st.started = true;
  }
  st.monitor = std::thread([&st] { st.MonitorThread(); });
  for (int i = 0; i < st.options.concurrency; ++i) {
    st.slots.push_back(std::make_unique<State::Slot>());
  }
  for (int i = 0; i < st.options.concurrency; ++i) {
    st.threads.emplace_back(
        [&st, i] { st.HandlerThread(static_cast<std::size_t>(i)); });
  }
  if (st.options.report) {
    // Reported just now: the thread's first pass waits a period.
    st.reporter = std::make_unique<core::PeriodicThread>(
        [&st] { return st.ReportPass(); }, st.options.report_ttl / 3);
  }
  return Status::Ok();
}

Status JobRunner::Stop() {
  State& st = *state_;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    if (!st.started || st.stopping) return Status::Ok();
    st.stopping = true;
    for (const auto& job : st.jobs) job->stop.request_stop();
  }
  for (const auto& slot : st.slots) {
    {
      std::lock_guard<std::mutex> lock(slot->mu);
      slot->signalled = true;
    }
    slot->cv.notify_all();
  }
  // The handlers finish with their leases still extended.
  for (std::thread& t : st.threads) t.join();
  {
    std::lock_guard<std::mutex> lock(st.mu);
    st.monitor_stop = true;
  }
  st.monitor_cv.notify_all();
  st.monitor.join();
  st.reporter.reset();
  Status s;
  if (st.options.report) {
    auto removed = st.store.RemoveWorker(st.id);
    if (!removed.ok()) s = removed.status();
  }
  std::lock_guard<std::mutex> lock(st.mu);
  st.stopped = true;
  return st.close_error.ok() ? s : st.close_error;
}

}  // namespace sqlq
