// The C++ job runner (sqlq/job_runner.h) on every engine: handlers routed
// by kind across queues, the unknown-kind policy, snoozes, a hung handler
// cut off at its timeout, and the live-worker report. The runner keeps
// time on the steady clock and leases on the store's, so these tests use a
// store on the engine's own clock, and wait for what they look for (a
// handler's signal, a message's state) rather than for a time.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <latch>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "sqlq/job_runner.h"
#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "sqlq/workers.h"
#include "tests/conformance/engine_fixture.h"

namespace sqlq::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// What the handlers saw, and a way to wait for it.
class Seen {
 public:
  void Add(std::string what) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      items_.push_back(std::move(what));
    }
    cv_.notify_all();
  }
  // Waits until `n` items came (false after 60 s).
  bool WaitFor(std::size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, seconds(60), [&] { return items_.size() >= n; });
  }
  std::vector<std::string> items() {
    std::lock_guard<std::mutex> lock(mu_);
    return items_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> items_;
};

// Whether `done` holds within 60 s: for what only the store shows (a
// message's state after the runner's nack).
bool Eventually(const std::function<bool()>& done) {
  const auto end = std::chrono::steady_clock::now() + seconds(60);
  while (!done()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

class JobRunnerConformance : public EngineTest {
 protected:
  void SetUp() override {
    EngineTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    live_ = OpenOrFail(db_->url());
    ASSERT_NE(live_, nullptr);
  }
  void TearDown() override {
    live_.reset();
    EngineTest::TearDown();
  }

  WorkQueue MakeQueue(const std::string& name, const QueueOptions& o = {}) {
    auto q = live_->CreateQueue(name, o);
    EXPECT_TRUE(q.ok()) << q.status().ToString();
    return std::move(*q);
  }

  // Quick retries: the tests wait for the next attempt, not for a backoff.
  static QueueOptions Quick(int max_attempts = 5) {
    return {.max_attempts = max_attempts,
            .backoff_base = milliseconds(1),
            .backoff_max = milliseconds(1)};
  }

  bool Listed(const std::string& id) {
    auto list = live_->ListWorkers();
    EXPECT_TRUE(list.ok()) << list.status().ToString();
    if (!list.ok()) return false;
    return std::any_of(list->begin(), list->end(),
                       [&](const WorkerInfo& w) { return w.report.id == id; });
  }

  // A store on the engine's clock, for the runner.
  std::unique_ptr<Store> live_;
};

TEST_P(JobRunnerConformance, EachKindGoesToItsHandlerAcrossTwoQueues) {
  WorkQueue mail = MakeQueue("mail");
  WorkQueue bills = MakeQueue("bills");
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK(mail.Send({.payload = "mail", .kind = "email.send"}));
  }
  ASSERT_OK(bills.Send({.payload = "bills", .kind = "billing/invoice"}));
  ASSERT_OK(bills.Send({.payload = "bills", .kind = "billing/invoice"}));
  ASSERT_OK(bills.Send({.payload = "bills", .kind = "email.send"}));

  JobRunner runner(*live_, {mail, bills}, {.concurrency = 2});
  Seen seen;
  std::mutex mu;
  std::vector<std::string> holders;  // the worker of each leased message
  auto handler = [&](std::string name) {
    return [&, name](const ClaimedMessage& m, std::stop_token) {
      WorkQueue q = m.payload == "mail" ? mail : bills;
      auto info = q.Get(m.id);
      {
        std::lock_guard<std::mutex> lock(mu);
        holders.push_back(info.ok() ? info->worker : info.status().ToString());
      }
      seen.Add(name + " " + m.kind + " " + m.payload);
      return JobOutcome::Complete();
    };
  };
  ASSERT_OK(runner.Handle("email.send", handler("mailer")));
  ASSERT_OK(runner.Handle("billing/invoice", handler("biller")));
  ASSERT_OK(runner.Start());
  ASSERT_TRUE(seen.WaitFor(6));
  ASSERT_OK(runner.Stop());

  auto items = seen.items();
  std::sort(items.begin(), items.end());
  EXPECT_EQ(items, (std::vector<std::string>{
                       "biller billing/invoice bills",
                       "biller billing/invoice bills",
                       "mailer email.send bills",
                       "mailer email.send mail",
                       "mailer email.send mail",
                       "mailer email.send mail",
                   }));
  // The claims carried the runner's id.
  for (const std::string& h : holders) EXPECT_EQ(h, runner.id());
  // Every ack went through by Stop.
  EXPECT_EQ(Count(mail), 0);
  EXPECT_EQ(Count(bills), 0);
  auto stats = mail.Stats();
  ASSERT_OK(stats);
  EXPECT_EQ(stats->acks, 3);
  EXPECT_EQ(runner.stats().completed, 6);
  EXPECT_EQ(runner.stats().errors, 0) << runner.stats().last_error.ToString();
}

TEST_P(JobRunnerConformance, AnUnknownKindIsRetriedThenDeadLetteredNotLost) {
  WorkQueue q = MakeQueue("jobs", Quick(/*max_attempts=*/2));
  ASSERT_OK_AND_ASSIGN(SendResult fax,
                       q.Send({.payload = "f", .kind = "fax.send"}));
  ASSERT_OK_AND_ASSIGN(SendResult plain, q.Send({.payload = "p"}));

  JobRunner runner(*live_, {q});
  Seen seen;
  ASSERT_OK(runner.Handle("email.send",
                          [&](const ClaimedMessage& m, std::stop_token) {
                            seen.Add(m.payload);
                            return JobOutcome::Complete();
                          }));
  ASSERT_OK(runner.Start());
  auto dead = [&](std::int64_t id) {
    auto info = q.Get(id);
    return info.ok() && info->state == MessageState::kDead;
  };
  ASSERT_TRUE(Eventually([&] { return dead(fax.id) && dead(plain.id); }));
  ASSERT_OK(runner.Stop());

  EXPECT_TRUE(seen.items().empty());
  for (auto [id, error] :
       {std::pair{fax.id, "no handler for kind 'fax.send'"},
        std::pair{plain.id, "no handler for messages without a kind"}}) {
    ASSERT_OK_AND_ASSIGN(MessageInfo info, q.Get(id));
    EXPECT_EQ(info.attempts, 2);
    ASSERT_EQ(info.errors.size(), 2u);
    EXPECT_EQ(info.errors[0].error, error);
    EXPECT_EQ(info.errors[1].error, error);
  }
  EXPECT_EQ(runner.stats().failed, 2);
  EXPECT_EQ(runner.stats().dead, 2);
}

TEST_P(JobRunnerConformance, ASnoozedJobKeepsItsAttempt) {
  WorkQueue q = MakeQueue("jobs", Quick());
  ASSERT_OK_AND_ASSIGN(SendResult sent,
                       q.Send({.payload = "x", .kind = "later"}));
  JobRunner runner(*live_, {q});
  Seen seen;
  ASSERT_OK(runner.Handle("later", [&](const ClaimedMessage& m,
                                       std::stop_token) {
    const bool first = seen.items().empty();
    seen.Add(std::to_string(m.attempt));
    return first ? JobOutcome::Snooze(milliseconds(1)) : JobOutcome::Complete();
  }));
  ASSERT_OK(runner.Start());
  ASSERT_TRUE(seen.WaitFor(2));
  ASSERT_OK(runner.Stop());
  EXPECT_EQ(seen.items(), (std::vector<std::string>{"1", "1"}));
  EXPECT_EQ(q.Get(sent.id).status().code(), Code::kNotFound);  // acked
  EXPECT_EQ(runner.stats().snoozed, 1);
  EXPECT_EQ(runner.stats().completed, 1);
  EXPECT_EQ(runner.stats().failed, 0);
}

// Request and reply: the handler's result is what the sender awaits.
TEST_P(JobRunnerConformance, AHandlersResultIsWhatTheSenderAwaits) {
  WorkQueue q = MakeQueue("jobs", Quick());
  ASSERT_OK_AND_ASSIGN(SendResult sent,
                       q.Send({.payload = "2+2", .kind = "sum"}));
  JobRunner runner(*live_, {q});
  Status progress;
  ASSERT_OK(runner.Handle("sum", [&](const ClaimedMessage& m, std::stop_token) {
    progress = q.Progress(m.receipt, 50, "adding");
    return JobOutcome::Complete("4");
  }));
  ASSERT_OK(runner.Start());
  ASSERT_OK_AND_ASSIGN(JobResult r, q.ReadResult(sent.id, seconds(60)));
  ASSERT_OK(runner.Stop());
  EXPECT_OK(progress);
  EXPECT_EQ(r.state, JobState::kCompleted);
  EXPECT_EQ(r.result, "4");
  EXPECT_EQ(r.progress, 50);
  EXPECT_EQ(r.note, "adding");
  EXPECT_EQ(runner.stats().completed, 1);
}

TEST_P(JobRunnerConformance, OutcomesAndThrowsAreNacksWithTheirErrors) {
  QueueOptions o = Quick();
  o.archive = true;
  WorkQueue q = MakeQueue("jobs", o);
  ASSERT_OK_AND_ASSIGN(SendResult thrown,
                       q.Send({.payload = "t", .kind = "throw"}));
  ASSERT_OK_AND_ASSIGN(SendResult later,
                       q.Send({.payload = "r", .kind = "retry"}));
  ASSERT_OK_AND_ASSIGN(SendResult dead,
                       q.Send({.payload = "d", .kind = "dead"}));
  JobRunner runner(*live_, {q});
  Seen seen;
  ASSERT_OK(runner.Handle(
      "throw", [&](const ClaimedMessage& m, std::stop_token) -> JobOutcome {
        seen.Add("throw");
        if (m.attempt == 1) throw std::runtime_error("boom");
        return JobOutcome::Complete();
      }));
  ASSERT_OK(
      runner.Handle("retry", [&](const ClaimedMessage& m, std::stop_token) {
        seen.Add("retry");
        return m.attempt == 1 ? JobOutcome::Retry({}, milliseconds(1))
                              : JobOutcome::Complete();
      }));
  ASSERT_OK(runner.Handle("dead", [&](const ClaimedMessage&, std::stop_token) {
    seen.Add("dead");
    return JobOutcome::Dead("card declined");
  }));
  ASSERT_OK(runner.Start());
  ASSERT_TRUE(seen.WaitFor(5));
  ASSERT_TRUE(Eventually([&] {
    auto a = q.Get(thrown.id), b = q.Get(later.id);
    return a.ok() && a->state == MessageState::kArchived && b.ok() &&
           b->state == MessageState::kArchived;
  }));
  ASSERT_OK(runner.Stop());
  ASSERT_OK_AND_ASSIGN(MessageInfo t, q.Get(thrown.id));
  ASSERT_EQ(t.errors.size(), 1u);
  EXPECT_EQ(t.errors[0].error, "boom");
  ASSERT_OK_AND_ASSIGN(MessageInfo r, q.Get(later.id));
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].error, "retry after 1 ms");
  ASSERT_OK_AND_ASSIGN(MessageInfo d, q.Get(dead.id));
  EXPECT_EQ(d.state, MessageState::kDead);
  EXPECT_EQ(d.attempts, 1);
  EXPECT_EQ(d.last_error, "card declined");
  EXPECT_EQ(runner.stats().failed, 2);
  EXPECT_EQ(runner.stats().dead, 1);
  EXPECT_EQ(runner.stats().completed, 2);
}

// A handler that ignores its stop token is cut off at its timeout: the
// attempt fails then ("timeout after N ms"), while the handler still runs,
// and the message comes back once, to another thread. The lease is shorter
// than the timeout, so the runner must extend it meanwhile, or the message
// would come back at the lease's end instead.
TEST_P(JobRunnerConformance,
       AHungHandlerIsCutOffAtItsTimeoutAndRedeliveredOnce) {
  WorkQueue q = MakeQueue("jobs", {.max_attempts = 5,
                                   .lease = seconds(1),
                                   .backoff_base = milliseconds(1),
                                   .backoff_max = milliseconds(1),
                                   .archive = true});
  ASSERT_OK_AND_ASSIGN(SendResult sent,
                       q.Send({.payload = "x", .kind = "slow"}));
  JobRunner runner(*live_, {q}, {.concurrency = 2});
  Seen seen;
  std::latch release(1);
  std::atomic<bool> told_to_stop = false;
  ASSERT_OK(runner.Handle("slow",
                          [&](const ClaimedMessage& m, std::stop_token stop) {
                            seen.Add(std::to_string(m.attempt));
                            if (m.attempt == 1) {
                              release.wait();  // deaf to `stop`
                              told_to_stop = stop.stop_requested();
                            }
                            return JobOutcome::Complete();
                          },
                          {.timeout = milliseconds(2500)}));
  const auto started = std::chrono::steady_clock::now();
  ASSERT_OK(runner.Start());
  ASSERT_TRUE(seen.WaitFor(2));  // the second delivery, the first still hung
  EXPECT_GE(MsSince(started), 2500);
  release.count_down();
  ASSERT_OK(runner.Stop());
  // Counted once Stop returns: the runner counts a timeout after its nack
  // commits, which may be after the second delivery began.
  EXPECT_EQ(runner.stats().timed_out, 1);

  EXPECT_TRUE(told_to_stop);
  EXPECT_EQ(seen.items(), (std::vector<std::string>{"1", "2"}));
  ASSERT_OK_AND_ASSIGN(QueueStats stats, q.Stats());
  EXPECT_EQ(stats.claims, 2);
  EXPECT_EQ(stats.nacks, 1);
  EXPECT_EQ(stats.acks, 1);  // the hung handler's late Complete was dropped
  EXPECT_EQ(stats.expirations, 0);
  ASSERT_OK_AND_ASSIGN(MessageInfo info, q.Get(sent.id));
  EXPECT_EQ(info.state, MessageState::kArchived);
  EXPECT_EQ(info.attempts, 2);
  ASSERT_EQ(info.errors.size(), 1u);
  EXPECT_EQ(info.errors[0].error, "timeout after 2500 ms");
  EXPECT_EQ(runner.stats().completed, 1);
  EXPECT_EQ(runner.stats().failed, 1);
}

// The message's own timeout wins when shorter than the handler's.
TEST_P(JobRunnerConformance, TheMessagesOwnTimeoutCutsItOff) {
  WorkQueue q = MakeQueue("jobs", Quick(/*max_attempts=*/1));
  ASSERT_OK_AND_ASSIGN(
      SendResult sent,
      q.Send({.payload = "x", .kind = "slow", .timeout = milliseconds(200)}));
  JobRunner runner(*live_, {q}, {.timeout = seconds(60)});
  Seen seen;
  ASSERT_OK(
      runner.Handle("slow", [&](const ClaimedMessage&, std::stop_token stop) {
        std::mutex mu;
        std::condition_variable_any cv;
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, stop, [] { return false; });  // until told to stop
        seen.Add("stopped");
        return JobOutcome::Complete();
      }));
  ASSERT_OK(runner.Start());
  ASSERT_TRUE(seen.WaitFor(1));
  ASSERT_TRUE(Eventually([&] {
    auto info = q.Get(sent.id);
    return info.ok() && info->state == MessageState::kDead;
  }));
  ASSERT_OK(runner.Stop());
  ASSERT_OK_AND_ASSIGN(MessageInfo info, q.Get(sent.id));
  EXPECT_EQ(info.last_error, "timeout after 200 ms");
}

TEST_P(JobRunnerConformance, ItIsAListedWorkerWhileItRunsAndGoneAfterStop) {
  WorkQueue q = MakeQueue("jobs");
  ASSERT_OK_AND_ASSIGN(SendResult sent,
                       q.Send({.payload = "x", .kind = "long"}));
  JobRunner runner(
      *live_, {q},
      {.concurrency = 3, .name = "reporter", .report_ttl = seconds(3)});
  Seen seen;
  ASSERT_OK(
      runner.Handle("long", [&](const ClaimedMessage&, std::stop_token stop) {
        seen.Add("started");
        std::mutex mu;
        std::condition_variable_any cv;
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, stop, [] { return false; });  // until the runner stops
        return JobOutcome::Complete();
      }));
  ASSERT_OK(runner.Handle("*", [](const ClaimedMessage&, std::stop_token) {
    return JobOutcome::Complete();
  }));
  EXPECT_FALSE(Listed(runner.id()));
  ASSERT_OK(runner.Start());
  ASSERT_TRUE(Listed(runner.id()));  // reported by Start
  auto list = live_->ListWorkers();
  ASSERT_OK(list);
  ASSERT_EQ(list->size(), 1u);
  const WorkerReport& r = list->front().report;
  EXPECT_EQ(r.name, "reporter");
  EXPECT_EQ(r.queues, std::vector<std::string>{"jobs"});
  EXPECT_EQ(r.kinds, std::vector<std::string>{"long"});
  EXPECT_EQ(r.concurrency, 3);
  EXPECT_EQ(r.ttl, seconds(3));
  // A later report (every ttl / 3) names the job in its hands.
  ASSERT_TRUE(seen.WaitFor(1));
  ASSERT_TRUE(Eventually([&] {
    auto l = live_->ListWorkers();
    return l.ok() && l->size() == 1 && l->front().report.jobs.size() == 1 &&
           l->front().report.jobs[0].id == sent.id;
  }));
  ASSERT_OK(runner.Stop());  // requests the handler's stop token
  EXPECT_FALSE(Listed(runner.id()));
  EXPECT_EQ(Count(q), 0);  // its Complete was acked
  EXPECT_FALSE(runner.running());
}

TEST_P(JobRunnerConformance, BadOptionsAreRefused) {
  WorkQueue q = MakeQueue("jobs");
  auto noop = [](const ClaimedMessage&, std::stop_token) {
    return JobOutcome::Complete();
  };
  {
    JobRunner runner(*live_, {q});
    EXPECT_CODE(runner.Start(), Code::kInvalidArgument);  // no handler
    EXPECT_CODE(runner.Handle("a b", noop), Code::kInvalidArgument);
    EXPECT_CODE(runner.Handle("", noop), Code::kInvalidArgument);
    EXPECT_CODE(runner.Handle("x", nullptr), Code::kInvalidArgument);
    EXPECT_CODE(runner.Handle("x", noop, {.timeout = milliseconds(0)}),
                Code::kInvalidArgument);
    ASSERT_OK(runner.Handle("x", noop));
    EXPECT_CODE(runner.Handle("x", noop), Code::kInvalidArgument);
  }
  const std::vector<JobRunnerOptions> bad = {
      {.concurrency = 0},
      {.concurrency = 1001},
      {.lease = milliseconds(0)},
      {.timeout = std::chrono::hours(13)},
      {.unknown_kind_delay = milliseconds(-1)},
      {.report_ttl = milliseconds(999)},
      {.name = std::string(256, 'n')},
  };
  for (const JobRunnerOptions& o : bad) {
    JobRunner runner(*live_, {q}, o);
    ASSERT_OK(runner.Handle("x", noop));
    EXPECT_CODE(runner.Start(), Code::kInvalidArgument);
    EXPECT_FALSE(runner.running());
  }
  {
    JobRunner twice(*live_, {q, q});
    ASSERT_OK(twice.Handle("x", noop));
    EXPECT_CODE(twice.Start(), Code::kInvalidArgument);
    JobRunner none(*live_, {});
    ASSERT_OK(none.Handle("x", noop));
    EXPECT_CODE(none.Start(), Code::kInvalidArgument);
  }
  JobRunner runner(*live_, {q});
  ASSERT_OK(runner.Handle("x", noop));
  ASSERT_OK(runner.Start());
  EXPECT_CODE(runner.Handle("y", noop), Code::kFailedPrecondition);
  EXPECT_CODE(runner.Start(), Code::kFailedPrecondition);
  ASSERT_OK(runner.Stop());
  EXPECT_FALSE(Listed(runner.id()));
}

INSTANTIATE_TEST_SUITE_P(Engines, JobRunnerConformance,
                         ::testing::ValuesIn(Engines()), EngineName);

}  // namespace
}  // namespace sqlq::test
