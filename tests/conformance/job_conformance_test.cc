// Conformance of what a job carries and what its handler can decide
// (docs/semantics.md, "Jobs"): a kind that follows the message everywhere,
// and the nack actions beyond a plain failed attempt: dead-letter now,
// and snooze without spending the attempt, bounded. Every engine runs it
// unchanged, on a ManualClock.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "sqlq/workers.h"
#include "tests/conformance/engine_fixture.h"

namespace sqlq::test {
namespace {

using std::chrono::hours;
using std::chrono::seconds;

class JobConformance : public EngineTest {
 protected:
  WorkQueue MakeQueue(const std::string& name, const QueueOptions& o = {}) {
    auto q = store_->CreateQueue(name, o);
    EXPECT_TRUE(q.ok()) << q.status().ToString();
    return std::move(*q);
  }
};

TEST_P(JobConformance, TheKindFollowsTheMessageEverywhere) {
  WorkQueue q = MakeQueue(
      "jobs", {.max_attempts = 1, .archive = true, .dead_letter_queue = "dlq"});
  WorkQueue dlq = MakeQueue("dlq", {.max_attempts = 1});
  ASSERT_OK(q.Send(
      {.payload = "a", .headers = {{"tenant", "acme"}}, .kind = "email.send"}));
  ASSERT_OK(q.Send({.payload = "b", .kind = "billing/invoice"}));
  ASSERT_OK(q.Send({.payload = "c"}));

  EXPECT_EQ(Count(q, {.kind = "email.send"}), 1);
  EXPECT_EQ(Count(q, {.kind = "billing/invoice"}), 1);
  EXPECT_EQ(Count(q, {.kind = "nothing"}), 0);
  // The kind is its own field, never one of the headers.
  EXPECT_EQ(Count(q, {.header = std::pair("tenant", "acme")}), 1);

  ASSERT_OK_AND_ASSIGN(auto claimed, q.Claim({.max = 3}));
  ASSERT_EQ(claimed.size(), 3u);
  EXPECT_EQ(claimed[0].kind, "email.send");
  EXPECT_EQ(claimed[0].headers, (Headers{{"tenant", "acme"}}));
  EXPECT_EQ(claimed[1].kind, "billing/invoice");
  EXPECT_TRUE(claimed[1].headers.empty());
  EXPECT_EQ(claimed[2].kind, "");

  ASSERT_OK_AND_ASSIGN(MessageInfo got, q.Get(claimed[0].id));
  EXPECT_EQ(got.kind, "email.send");
  EXPECT_EQ(got.headers, (Headers{{"tenant", "acme"}}));

  // Acked into the archive, and failed into the dead-letter queue, whose
  // own dead letters keep it too.
  ASSERT_OK(q.Ack(claimed[0].receipt));
  ASSERT_OK_AND_ASSIGN(auto archived, q.ListArchive());
  ASSERT_EQ(archived.size(), 1u);
  EXPECT_EQ(archived[0].kind, "email.send");
  EXPECT_EQ(archived[0].headers, (Headers{{"tenant", "acme"}}));
  EXPECT_EQ(Count(q, {.state = MessageState::kArchived, .kind = "email.send"}),
            1);

  ASSERT_OK(q.Nack(claimed[1].receipt, {.error = "no printer"}));
  ClaimedMessage moved = ClaimOne(dlq);
  EXPECT_EQ(moved.id, claimed[1].id);
  EXPECT_EQ(moved.kind, "billing/invoice");
  ASSERT_OK(dlq.Nack(moved.receipt, {.action = NackAction::kDead}));
  ASSERT_OK_AND_ASSIGN(auto dead, dlq.ListDead());
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].kind, "billing/invoice");
  EXPECT_TRUE(dead[0].headers.empty());
  EXPECT_EQ(
      Count(dlq, {.state = MessageState::kDead, .kind = "billing/invoice"}), 1);
  ASSERT_OK_AND_ASSIGN(MessageInfo dead_info, dlq.Get(moved.id));
  EXPECT_EQ(dead_info.state, MessageState::kDead);
  EXPECT_EQ(dead_info.kind, "billing/invoice");
}

TEST_P(JobConformance, BadKindsAreRefusedAndNothingIsStored) {
  WorkQueue q = MakeQueue("jobs");
  EXPECT_CODE(q.Send({.payload = "x", .kind = "has space"}),
              Code::kInvalidArgument);
  EXPECT_CODE(q.Send({.payload = "x", .kind = std::string(kMaxKind + 1, 'k')}),
              Code::kInvalidArgument);
  EXPECT_CODE(q.Send({.payload = "x", .kind = "caf\xc3\xa9"}),
              Code::kInvalidArgument);
  // The key the kind is kept under is sqlq's, not a header to set.
  EXPECT_CODE(q.Send({.payload = "x", .headers = {{"sqlq:kind", "forged"}}}),
              Code::kInvalidArgument);
  std::vector<Message> batch = {{.payload = "ok", .kind = "fine"},
                                {.payload = "bad", .kind = "not fine"}};
  EXPECT_CODE(q.SendBatch(batch), Code::kInvalidArgument);
  EXPECT_CODE(q.CountMessages({.kind = ""}), Code::kInvalidArgument);
  EXPECT_CODE(q.CountMessages({.kind = "a b"}), Code::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.sends, 0);
  EXPECT_TRUE(NothingReady(q));
  ASSERT_OK(q.Send({.payload = "x", .kind = std::string(kMaxKind, 'k')}));
  EXPECT_EQ(ClaimOne(q).kind, std::string(kMaxKind, 'k'));
}

TEST_P(JobConformance, DeadActionDeadLettersNowWhateverAttemptsAreLeft) {
  WorkQueue q = MakeQueue("jobs", {.max_attempts = 5});
  ASSERT_OK_AND_ASSIGN(SendResult a, q.Send({.payload = "a"}));
  ASSERT_OK_AND_ASSIGN(SendResult b, q.Send({.payload = "b"}));
  ClaimedMessage ma = ClaimOne(q);
  ClaimedMessage mb = ClaimOne(q);
  ASSERT_OK_AND_ASSIGN(NackOutcome out,
                       q.Nack(ma.receipt, {.error = "cancelled: user deleted",
                                           .action = NackAction::kDead}));
  EXPECT_EQ(out, NackOutcome::kDead);
  ASSERT_OK_AND_ASSIGN(out, q.Nack(mb.receipt, {.action = NackAction::kDead}));
  EXPECT_EQ(out, NackOutcome::kDead);
  ASSERT_OK_AND_ASSIGN(MessageInfo ia, q.Get(a.id));
  EXPECT_EQ(ia.state, MessageState::kDead);
  EXPECT_EQ(ia.attempts, 1);
  EXPECT_EQ(ia.last_error, "cancelled: user deleted");
  ASSERT_EQ(ia.errors.size(), 1u);
  EXPECT_EQ(ia.errors[0].error, "cancelled: user deleted");
  ASSERT_OK_AND_ASSIGN(MessageInfo ib, q.Get(b.id));
  EXPECT_EQ(ib.state, MessageState::kDead);
  EXPECT_EQ(ib.last_error, "failed permanently at attempt 1");
  // The fencing rules hold: the receipt is spent (its message gone from
  // the queue).
  EXPECT_CODE(q.Nack(ma.receipt, {.action = NackAction::kDead}),
              Code::kNotFound);
  EXPECT_TRUE(NothingReady(q));
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.dead, 2);
  EXPECT_EQ(st.dead_lettered, 2);
}

TEST_P(JobConformance, ASnoozedJobKeepsItsAttemptAndComesBackAfterTheDelay) {
  WorkQueue q = MakeQueue("jobs", {.max_attempts = 2});
  ASSERT_OK_AND_ASSIGN(SendResult s, q.Send({.payload = "later"}));
  ClaimedMessage m = ClaimOne(q);
  EXPECT_EQ(m.attempt, 1);
  ASSERT_OK_AND_ASSIGN(NackOutcome out,
                       q.Nack(m.receipt, {.delay = seconds(10),
                                          .error = "ignored",
                                          .action = NackAction::kSnooze}));
  EXPECT_EQ(out, NackOutcome::kSnoozed);
  // Spent receipt, and not back before its time.
  EXPECT_CODE(q.Ack(m.receipt), Code::kFailedPrecondition);
  EXPECT_TRUE(NothingReady(q));
  ASSERT_OK_AND_ASSIGN(MessageInfo info, q.Get(s.id));
  EXPECT_EQ(info.state, MessageState::kDelayed);
  EXPECT_EQ(info.snoozes, 1);
  EXPECT_EQ(info.attempts, 0);
  EXPECT_TRUE(info.errors.empty());
  EXPECT_EQ(info.last_error, "");

  clock_->Advance(seconds(10));
  // Snoozed many times, it stays at its first attempt, and a snooze without
  // a delay makes it ready at once.
  for (int i = 0; i < 3; ++i) {
    m = ClaimOne(q);
    EXPECT_EQ(m.attempt, 1);
    ASSERT_OK(q.Nack(m.receipt, {.action = NackAction::kSnooze}));
  }
  m = ClaimOne(q);
  EXPECT_EQ(m.attempt, 1);
  ASSERT_OK_AND_ASSIGN(out, q.Nack(m.receipt, {.error = "real failure"}));
  EXPECT_EQ(out, NackOutcome::kRetry);
  clock_->Advance(hours(1));
  m = ClaimOne(q);
  EXPECT_EQ(m.attempt, 2);
  ASSERT_OK(q.Ack(m.receipt));
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.nacks, 1);  // snoozes are not failures
  EXPECT_EQ(st.acks, 1);
}

TEST_P(JobConformance, SnoozesBeyondTheBoundSpendAttemptsUntilTheJobDies) {
  WorkQueue q = MakeQueue("jobs", {.max_attempts = 2});
  ASSERT_OK_AND_ASSIGN(SendResult s, q.Send({.payload = "forever"}));
  const NackOptions snooze = {.delay = Duration(0),
                              .action = NackAction::kSnooze};
  for (int i = 0; i < kMaxSnoozes; ++i) {
    ClaimedMessage m = ClaimOne(q);
    ASSERT_EQ(m.attempt, 1) << "snooze " << i;
    ASSERT_OK_AND_ASSIGN(NackOutcome out, q.Nack(m.receipt, snooze));
    ASSERT_EQ(out, NackOutcome::kSnoozed) << "snooze " << i;
  }
  // The next snooze is a failed attempt, and says why.
  ClaimedMessage m = ClaimOne(q);
  EXPECT_EQ(m.attempt, 1);
  ASSERT_OK_AND_ASSIGN(NackOutcome out, q.Nack(m.receipt, snooze));
  EXPECT_EQ(out, NackOutcome::kRetry);
  ASSERT_OK_AND_ASSIGN(MessageInfo info, q.Get(s.id));
  EXPECT_EQ(info.snoozes, kMaxSnoozes);
  EXPECT_EQ(info.attempts, 1);
  const std::string why = "snoozed " + std::to_string(kMaxSnoozes) + " times";
  EXPECT_EQ(info.last_error, why);
  ASSERT_EQ(info.errors.size(), 1u);
  EXPECT_EQ(info.errors[0].error, why);
  m = ClaimOne(q);
  EXPECT_EQ(m.attempt, 2);
  // On its last attempt it dies, with the snoozes as its last error.
  ASSERT_OK_AND_ASSIGN(out, q.Nack(m.receipt, snooze));
  EXPECT_EQ(out, NackOutcome::kDead);
  EXPECT_TRUE(NothingReady(q));
  ASSERT_OK_AND_ASSIGN(auto dead, q.ListDead());
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].id, s.id);
  EXPECT_EQ(dead[0].last_error, why);
  // A stale receipt is refused by a snooze too, and changes nothing.
  EXPECT_CODE(q.Nack(m.receipt, snooze), Code::kNotFound);
}

TEST_P(JobConformance, AJobsTimeoutBoundsItsLease) {
  WorkQueue q = MakeQueue("jobs", {.lease = seconds(30)});
  ASSERT_OK(q.Send({.payload = "quick",
                    .kind = "thumb",
                    .timeout = seconds(5),
                    .expire_after = hours(1)}));
  ASSERT_OK(q.Send({.payload = "plain"}));
  ASSERT_OK_AND_ASSIGN(auto claimed, q.Claim({.max = 2}));
  ASSERT_EQ(claimed.size(), 2u);
  const Timestamp now = clock_->Now();
  EXPECT_EQ(claimed[0].timeout, seconds(5));
  EXPECT_EQ(claimed[0].expire_after, hours(1));
  EXPECT_EQ(claimed[0].kind, "thumb");
  EXPECT_TRUE(claimed[0].headers.empty());
  EXPECT_EQ(claimed[0].lease_expires_at, now + seconds(5));
  EXPECT_FALSE(claimed[1].timeout);
  EXPECT_EQ(claimed[1].lease_expires_at, now + seconds(30));
  // A worker that froze loses it at its timeout, not at the queue's lease.
  clock_->Advance(seconds(6));
  ClaimedMessage again = ClaimOne(q);
  EXPECT_EQ(again.id, claimed[0].id);
  EXPECT_EQ(again.attempt, 2);
  ASSERT_OK_AND_ASSIGN(MessageInfo info, q.Get(again.id));
  EXPECT_EQ(info.timeout, seconds(5));
  EXPECT_EQ(info.expire_after, hours(1));
  ASSERT_EQ(info.errors.size(), 1u);
  EXPECT_EQ(info.errors[0].error, "lease expired");
  // A claim with a shorter lease than the timeout keeps its own.
  ASSERT_OK(q.Nack(again.receipt, {.delay = Duration(0)}));
  ASSERT_OK_AND_ASSIGN(claimed, q.Claim({.lease = seconds(2)}));
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0].lease_expires_at, clock_->Now() + seconds(2));
}

TEST_P(JobConformance, AJobNotStartedBeforeItExpiresIsDeadLetteredUnrun) {
  WorkQueue q = MakeQueue("jobs", {.max_attempts = 3});
  ASSERT_OK_AND_ASSIGN(SendResult stale, q.Send({.payload = "stale",
                                                 .expire_after = seconds(10)}));
  ASSERT_OK_AND_ASSIGN(SendResult fresh,
                       q.Send({.payload = "fresh", .expire_after = hours(1)}));
  ASSERT_OK_AND_ASSIGN(
      SendResult started,
      q.Send({.payload = "started", .expire_after = seconds(10)}));
  // "started" begins in time, fails, and is retried after its deadline:
  // it started, so it runs again.
  ASSERT_OK_AND_ASSIGN(auto first, q.Claim({.max = 3}));
  ASSERT_EQ(first.size(), 3u);
  for (const ClaimedMessage& m : first) {
    if (m.id != started.id) {
      ASSERT_OK(q.Nack(m.receipt, {.action = NackAction::kSnooze}));
    } else {
      ASSERT_OK(q.Nack(m.receipt, {.delay = seconds(20), .error = "busy"}));
    }
  }
  clock_->Advance(seconds(30));
  ASSERT_OK_AND_ASSIGN(auto claimed, q.Claim({.max = 10}));
  std::vector<std::int64_t> ids;
  for (const ClaimedMessage& m : claimed) ids.push_back(m.id);
  EXPECT_EQ(ids, (std::vector<std::int64_t>{fresh.id, started.id}));
  ASSERT_OK_AND_ASSIGN(MessageInfo dead, q.Get(stale.id));
  EXPECT_EQ(dead.state, MessageState::kDead);
  EXPECT_EQ(dead.last_error, "expired: not started within 10000 ms");
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.dead, 1);
  EXPECT_EQ(st.dead_lettered, 1);
  EXPECT_EQ(st.leased, 2);
  // Counted as expired too; the two that started in time are not.
  EXPECT_EQ(st.expired, 1);
}

// expired, dead_lettered, nacks, acks, dead, archived.
std::vector<std::int64_t> ExpiryCounts(const QueueStats& s) {
  return {s.expired, s.dead_lettered, s.nacks, s.acks, s.dead, s.archived};
}

TEST_P(JobConformance, AnExpiredJobToDropIsDeletedUnrunAndCounted) {
  WorkQueue q = MakeQueue(
      "jobs", {.max_attempts = 3, .archive = true, .unique_for = hours(1)});
  ASSERT_OK_AND_ASSIGN(SendResult stale,
                       q.Send({.payload = "stale",
                               .dedup_key = "report-7",
                               .expire_after = seconds(10),
                               .on_expiry = ExpiryAction::kDrop}));
  ASSERT_OK_AND_ASSIGN(SendResult buried,
                       q.Send({.payload = "buried",
                               .expire_after = seconds(10),
                               .on_expiry = ExpiryAction::kDeadLetter}));
  ASSERT_OK_AND_ASSIGN(SendResult fresh,
                       q.Send({.payload = "fresh",
                               .expire_after = hours(1),
                               .on_expiry = ExpiryAction::kDrop}));
  ASSERT_OK_AND_ASSIGN(MessageInfo waiting, q.Get(stale.id));
  EXPECT_EQ(waiting.on_expiry, ExpiryAction::kDrop);
  clock_->Advance(seconds(30));

  // Only the one still in time is handed out, with its action.
  ASSERT_OK_AND_ASSIGN(auto claimed, q.Claim({.max = 10}));
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0].id, fresh.id);
  EXPECT_EQ(claimed[0].on_expiry, ExpiryAction::kDrop);
  // The dropped one is gone: not in the queue, the dead letters or the
  // archive; the other expired one is a dead letter.
  EXPECT_CODE(q.Get(stale.id), Code::kNotFound);
  EXPECT_EQ(Count(q, {.state = MessageState::kDead}), 1);
  ASSERT_OK_AND_ASSIGN(MessageInfo dead, q.Get(buried.id));
  EXPECT_EQ(dead.state, MessageState::kDead);
  EXPECT_EQ(Count(q, {.state = MessageState::kArchived}), 0);
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(ExpiryCounts(st), (std::vector<std::int64_t>{2, 1, 1, 0, 1, 0}));
  // Its dedup key is held as an ack's is, for the queue's window.
  ASSERT_OK_AND_ASSIGN(SendResult again,
                       q.Send({.payload = "stale", .dedup_key = "report-7"}));
  EXPECT_TRUE(again.duplicate);
  EXPECT_EQ(again.id, stale.id);

  // The one claimed in time runs as any job: acked, archived, not expired.
  ASSERT_OK(q.Ack(claimed[0].receipt));
  ASSERT_OK_AND_ASSIGN(st, q.Stats());
  EXPECT_EQ(ExpiryCounts(st), (std::vector<std::int64_t>{2, 1, 1, 1, 1, 1}));
  ASSERT_OK_AND_ASSIGN(auto rest, q.Claim({.max = 10}));
  EXPECT_TRUE(rest.empty());

  // A queue without a dedup window or archive drops it the same way.
  WorkQueue plain = MakeQueue("plain");
  ASSERT_OK_AND_ASSIGN(SendResult gone,
                       plain.Send({.payload = "late",
                                   .dedup_key = "k",
                                   .expire_after = seconds(10),
                                   .on_expiry = ExpiryAction::kDrop}));
  clock_->Advance(seconds(30));
  ASSERT_OK_AND_ASSIGN(auto none, plain.Claim({.max = 10}));
  EXPECT_TRUE(none.empty());
  EXPECT_CODE(plain.Get(gone.id), Code::kNotFound);
  ASSERT_OK_AND_ASSIGN(st, plain.Stats());
  EXPECT_EQ(ExpiryCounts(st), (std::vector<std::int64_t>{1, 0, 0, 0, 0, 0}));
  // No window: its key is free again at once.
  ASSERT_OK_AND_ASSIGN(SendResult anew,
                       plain.Send({.payload = "again", .dedup_key = "k"}));
  EXPECT_FALSE(anew.duplicate);
}

TEST_P(JobConformance, BadJobLimitsAreRefused) {
  WorkQueue q = MakeQueue("jobs");
  EXPECT_CODE(q.Send({.payload = "x", .timeout = Duration(0)}),
              Code::kInvalidArgument);
  EXPECT_CODE(q.Send({.payload = "x", .timeout = hours(13)}),
              Code::kInvalidArgument);
  EXPECT_CODE(q.Send({.payload = "x", .expire_after = Duration(0)}),
              Code::kInvalidArgument);
  // It could never start: expired before it is ready.
  EXPECT_CODE(
      q.Send({.payload = "x", .delay = hours(1), .expire_after = seconds(10)}),
      Code::kInvalidArgument);
  EXPECT_CODE(q.Send({.payload = "x",
                      .run_at = clock_->Now() + hours(1),
                      .expire_after = seconds(10)}),
              Code::kInvalidArgument);
  // Dropping at an expiry it does not have.
  EXPECT_CODE(q.Send({.payload = "x", .on_expiry = ExpiryAction::kDrop}),
              Code::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.sends, 0);
}

TEST_P(JobConformance, AJobsOwnRetryPolicyReplacesTheQueues) {
  WorkQueue q = MakeQueue("jobs", {.max_attempts = 5,
                                   .backoff_base = seconds(1),
                                   .backoff_max = seconds(1)});
  ASSERT_OK_AND_ASSIGN(SendResult a, q.Send({.payload = "a",
                                             .max_attempts = 2,
                                             .backoff_base = seconds(10),
                                             .backoff_max = seconds(60)}));
  ASSERT_OK_AND_ASSIGN(MessageInfo info, q.Get(a.id));
  EXPECT_EQ(info.max_attempts, 2);
  EXPECT_EQ(info.backoff_base, seconds(10));
  EXPECT_EQ(info.backoff_max, seconds(60));
  EXPECT_TRUE(info.headers.empty());

  // Its own backoff after the first failure: 10 s, less a jitter of at
  // most half (5..10 s), not the queue's 1 s.
  ClaimedMessage m = ClaimOne(q);
  EXPECT_EQ(m.max_attempts, 2);
  ASSERT_OK_AND_ASSIGN(NackOutcome first, q.Nack(m.receipt, {.error = "x"}));
  EXPECT_EQ(first, NackOutcome::kRetry);
  clock_->Advance(seconds(4));
  EXPECT_TRUE(NothingReady(q));
  clock_->Advance(seconds(6));
  m = ClaimOne(q);
  EXPECT_EQ(m.attempt, 2);
  // Its own attempts: dead after two, where the queue allows five.
  ASSERT_OK_AND_ASSIGN(NackOutcome second, q.Nack(m.receipt));
  EXPECT_EQ(second, NackOutcome::kDead);
  ASSERT_OK_AND_ASSIGN(info, q.Get(a.id));
  EXPECT_EQ(info.state, MessageState::kDead);
  EXPECT_EQ(info.last_error, "failed attempt 2 of 2");

  // A job cannot raise its queue's attempts: the smaller applies.
  WorkQueue strict = MakeQueue("strict", {.max_attempts = 1});
  ASSERT_OK(strict.Send({.payload = "b", .max_attempts = 10}));
  ASSERT_OK_AND_ASSIGN(NackOutcome only, strict.Nack(ClaimOne(strict).receipt));
  EXPECT_EQ(only, NackOutcome::kDead);

  // A lease that ran out on its last attempt: the next claim dead-letters
  // it rather than hand it out again.
  ASSERT_OK_AND_ASSIGN(SendResult c,
                       q.Send({.payload = "c", .max_attempts = 1}));
  m = ClaimOne(q);
  ASSERT_EQ(m.id, c.id);
  clock_->Advance(seconds(31));
  EXPECT_TRUE(NothingReady(q));
  ASSERT_OK_AND_ASSIGN(info, q.Get(c.id));
  EXPECT_EQ(info.state, MessageState::kDead);
  EXPECT_EQ(info.last_error, "attempts used up: 1 of 1");

  // Out of range: refused, nothing stored.
  ASSERT_OK_AND_ASSIGN(QueueStats before, q.Stats());
  EXPECT_CODE(q.Send({.payload = "x", .max_attempts = 0}),
              Code::kInvalidArgument);
  EXPECT_CODE(q.Send({.payload = "x",
                      .backoff_base = seconds(10),
                      .backoff_max = seconds(5)}),
              Code::kInvalidArgument);
  EXPECT_CODE(q.Send({.payload = "x", .backoff_base = Duration(-1)}),
              Code::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(QueueStats after, q.Stats());
  EXPECT_EQ(after.sends, before.sends);
}

TEST_P(JobConformance, LiveWorkersAreListedUntilTheirLastReportRunsOut) {
  const Timestamp t0 = clock_->Now();
  WorkerReport a{.id = "web-1:4242:9f2c",
                 .name = "mailer",
                 .host = "web-1",
                 .pid = 4242,
                 .queues = {"emails", "sms"},
                 .kinds = {"email.send"},
                 .concurrency = 8,
                 .jobs = {{.queue = "emails", .id = 17, .since = t0}},
                 .started_at = t0 - seconds(60),
                 .ttl = seconds(30)};
  ASSERT_OK(store_->ReportWorker(a));
  ASSERT_OK(store_->ReportWorker({.id = "cron-box:7:aa",
                                  .host = "cron-box",
                                  .pid = 7,
                                  .ttl = seconds(5)}));
  ASSERT_OK_AND_ASSIGN(auto list, store_->ListWorkers());
  ASSERT_EQ(list.size(), 2u);
  const WorkerInfo& w = list[1];  // by id
  EXPECT_EQ(w.report.id, a.id);
  EXPECT_EQ(w.report.name, "mailer");
  EXPECT_EQ(w.report.host, "web-1");
  EXPECT_EQ(w.report.pid, 4242);
  EXPECT_EQ(w.report.queues, a.queues);
  EXPECT_EQ(w.report.kinds, a.kinds);
  EXPECT_EQ(w.report.concurrency, 8);
  ASSERT_EQ(w.report.jobs.size(), 1u);
  EXPECT_EQ(w.report.jobs[0].queue, "emails");
  EXPECT_EQ(w.report.jobs[0].id, 17);
  EXPECT_EQ(w.report.jobs[0].since, t0);
  EXPECT_EQ(w.report.started_at, a.started_at);
  EXPECT_EQ(w.last_seen, t0);
  EXPECT_EQ(w.expires_at, t0 + seconds(30));

  // A new report replaces the last one; the other worker's runs out.
  clock_->Advance(seconds(10));
  a.jobs.clear();
  ASSERT_OK(store_->ReportWorker(a));
  ASSERT_OK_AND_ASSIGN(list, store_->ListWorkers());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].report.id, a.id);
  EXPECT_TRUE(list[0].report.jobs.empty());
  EXPECT_EQ(list[0].last_seen, t0 + seconds(10));

  // Silent past its ttl: gone from the list, without anyone removing it.
  clock_->Advance(seconds(31));
  ASSERT_OK_AND_ASSIGN(list, store_->ListWorkers());
  EXPECT_TRUE(list.empty());
  // Back within the hour: the same worker again.
  ASSERT_OK(store_->ReportWorker(a));
  ASSERT_OK_AND_ASSIGN(list, store_->ListWorkers());
  EXPECT_EQ(list.size(), 1u);
  ASSERT_OK_AND_ASSIGN(bool removed, store_->RemoveWorker(a.id));
  EXPECT_TRUE(removed);
  ASSERT_OK_AND_ASSIGN(removed, store_->RemoveWorker(a.id));
  EXPECT_FALSE(removed);
  ASSERT_OK_AND_ASSIGN(list, store_->ListWorkers());
  EXPECT_TRUE(list.empty());
}

TEST_P(JobConformance, BadWorkerReportsAreRefused) {
  const WorkerReport good{.id = "w1", .queues = {"jobs"}};
  auto with = [&](auto change) {
    WorkerReport r = good;
    change(r);
    return r;
  };
  for (const WorkerReport& bad :
       {with([](WorkerReport& r) { r.id = ""; }),
        with([](WorkerReport& r) { r.id = "has space"; }),
        with([](WorkerReport& r) { r.id = std::string(129, 'w'); }),
        with([](WorkerReport& r) { r.name = std::string(256, 'n'); }),
        with([](WorkerReport& r) { r.host = "bad\xff"; }),
        with([](WorkerReport& r) { r.queues = {"no spaces"}; }),
        with([](WorkerReport& r) { r.kinds = {""}; }),
        with([](WorkerReport& r) { r.jobs = {{.queue = "jobs", .id = 0}}; }),
        with([](WorkerReport& r) { r.concurrency = -1; }),
        with([](WorkerReport& r) { r.ttl = Duration(999); }),
        with([](WorkerReport& r) { r.ttl = hours(2); })}) {
    SCOPED_TRACE(bad.id);
    EXPECT_CODE(store_->ReportWorker(bad), Code::kInvalidArgument);
  }
  EXPECT_CODE(store_->RemoveWorker(""), Code::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(auto list, store_->ListWorkers());
  EXPECT_TRUE(list.empty());
  ASSERT_OK(store_->ReportWorker(good));
}

INSTANTIATE_TEST_SUITE_P(Engines, JobConformance,
                         ::testing::ValuesIn(Engines()), EngineName);

}  // namespace
}  // namespace sqlq::test
