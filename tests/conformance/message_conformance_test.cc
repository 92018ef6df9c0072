// Conformance of what a message carries besides its payload: headers, an
// absolute run_at time, and the history of its failed attempts
// (docs/semantics.md, "Headers", "Sending at a time", "Error history").
// Every engine runs it unchanged, on a ManualClock.

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "sqlq/worker.h"
#include "tests/conformance/engine_fixture.h"

namespace sqlq::test {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;

class MessageConformance : public EngineTest {
 protected:
  WorkQueue MakeQueue(const QueueOptions& o = {}) {
    auto q = store_->CreateQueue("jobs", o);
    EXPECT_TRUE(q.ok()) << q.status().ToString();
    return std::move(*q);
  }

  ClaimedMessage ClaimOne(WorkQueue& q) {
    auto r = q.Claim();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok() || r->empty()) {
      ADD_FAILURE() << "nothing to claim";
      return {};
    }
    return std::move(r->front());
  }

  bool NothingReady(WorkQueue& q) {
    auto r = q.Claim();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() && r->empty();
  }

  DeadLetter OnlyDead(WorkQueue& q) {
    auto d = q.ListDead();
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    if (!d.ok() || d->size() != 1) {
      ADD_FAILURE() << "want one dead letter";
      return {};
    }
    return std::move(d->front());
  }
};

const Headers kHeaders = {{"traceparent", "00-4bf92f35-00f067aa-01"},
                          {"tenant", "acme"},
                          {"note", "caf\xc3\xa9 \"quoted\" \\ {json}"}};

TEST_P(MessageConformance, HeadersComeBackOnClaimDeadLetterAndRedrive) {
  WorkQueue q = MakeQueue({.max_attempts = 1});
  ASSERT_OK(q.Send({.payload = "with", .headers = kHeaders}));
  ASSERT_OK(q.Send({.payload = "without"}));
  auto claimed = q.Claim({.max = 2});
  ASSERT_OK(claimed.status());
  ASSERT_EQ(claimed->size(), 2u);
  EXPECT_EQ((*claimed)[0].headers, kHeaders);
  EXPECT_TRUE((*claimed)[1].headers.empty());

  ASSERT_OK(q.Ack((*claimed)[1].receipt));
  ASSERT_OK(q.Nack((*claimed)[0].receipt, {.error = "no"}));
  DeadLetter dead = OnlyDead(q);
  EXPECT_EQ(dead.headers, kHeaders);

  ASSERT_OK_AND_ASSIGN(auto moved, q.RedriveAll());
  EXPECT_EQ(moved, 1);
  EXPECT_EQ(ClaimOne(q).headers, kHeaders);
}

TEST_P(MessageConformance, HeadersAndHistoryGoToTheArchive) {
  WorkQueue q = MakeQueue({.archive = true});
  ASSERT_OK(q.Send({.payload = "a", .headers = {{"k", "v"}}}));
  ClaimedMessage m = ClaimOne(q);
  ASSERT_OK(q.Nack(m.receipt, {.delay = Duration(0), .error = "flaky"}));
  m = ClaimOne(q);
  ASSERT_OK(q.Ack(m.receipt));
  // The batch path of acks too.
  ASSERT_OK(q.Send({.payload = "b", .headers = {{"k", "w"}}}));
  m = ClaimOne(q);
  ASSERT_OK_AND_ASSIGN(auto acks, q.AckBatch(std::vector{m.receipt}));
  ASSERT_OK(acks[0]);

  ASSERT_OK_AND_ASSIGN(auto archived, q.ListArchive());
  ASSERT_EQ(archived.size(), 2u);
  EXPECT_EQ(archived[0].headers, (Headers{{"k", "v"}}));
  ASSERT_EQ(archived[0].errors.size(), 1u);
  EXPECT_EQ(archived[0].errors[0].attempt, 1);
  EXPECT_EQ(archived[0].errors[0].error, "flaky");
  EXPECT_EQ(archived[1].headers, (Headers{{"k", "w"}}));
  EXPECT_TRUE(archived[1].errors.empty());
}

TEST_P(MessageConformance, HeadersGoWithEveryMessageOfABatch) {
  WorkQueue q = MakeQueue();
  std::vector<Message> batch;
  for (int i = 0; i < 50; ++i) {
    Message m{.payload = std::to_string(i)};
    if (i % 3 == 0) m.headers = {{"i", std::to_string(i)}};
    if (i % 7 == 0) m.dedup_key = "key" + std::to_string(i);
    batch.push_back(m);
  }
  ASSERT_OK(q.SendBatch(batch));
  ASSERT_OK_AND_ASSIGN(auto claimed, q.Claim({.max = 100}));
  ASSERT_EQ(claimed.size(), 50u);
  for (const ClaimedMessage& m : claimed) {
    const int i = std::stoi(m.payload);
    if (i % 3 == 0) {
      EXPECT_EQ(m.headers, (Headers{{"i", std::to_string(i)}})) << i;
    } else {
      EXPECT_TRUE(m.headers.empty()) << i;
    }
  }
}

TEST_P(MessageConformance, OversizedHeadersAreRefusedAndNothingIsSent) {
  WorkQueue q = MakeQueue();
  std::vector<Message> batch = {
      {.payload = "fine"},
      {.payload = "bad", .headers = {{"k", std::string(5000, 'v')}}}};
  Status s = q.SendBatch(batch).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("message 2"), std::string::npos) << s.ToString();
  EXPECT_CODE(q.Send({.payload = "x", .headers = {{"bad key", "v"}}}),
              Code::kInvalidArgument);
  EXPECT_TRUE(NothingReady(q));
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.sends, 0);
}

TEST_P(MessageConformance, RunAtMakesAMessageClaimableAtThatTime) {
  WorkQueue q = MakeQueue();
  const Timestamp at = clock_->Now() + hours(2);
  ASSERT_OK(q.Send({.payload = "later", .run_at = at}));
  EXPECT_TRUE(NothingReady(q));
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.delayed, 1);
  clock_->Advance(hours(2) - seconds(1));
  EXPECT_TRUE(NothingReady(q));
  clock_->Advance(seconds(1));
  EXPECT_EQ(ClaimOne(q).payload, "later");
}

TEST_P(MessageConformance, RunAtInThePastIsReadyNowBehindEarlierSends) {
  WorkQueue q = MakeQueue();
  ASSERT_OK(q.Send({.payload = "first"}));
  ASSERT_OK(q.Send({.payload = "overdue", .run_at = clock_->Now() - hours(5)}));
  ASSERT_OK_AND_ASSIGN(auto claimed, q.Claim({.max = 2}));
  ASSERT_EQ(claimed.size(), 2u);
  EXPECT_EQ(claimed[0].payload, "first");
  EXPECT_EQ(claimed[1].payload, "overdue");
}

TEST_P(MessageConformance, RunAtTooFarOrWithADelayIsRefused) {
  WorkQueue q = MakeQueue();
  EXPECT_CODE(
      q.Send({.payload = "x", .run_at = clock_->Now() + hours(24 * 400)}),
      Code::kInvalidArgument);
  EXPECT_CODE(
      q.Send({.payload = "x", .run_at = clock_->Now() - hours(24 * 400)}),
      Code::kInvalidArgument);
  EXPECT_CODE(
      q.Send({.payload = "x", .delay = seconds(1), .run_at = clock_->Now()}),
      Code::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.sends, 0);
}

TEST_P(MessageConformance, ErrorHistoryRecordsNacksAndExpiredLeases) {
  WorkQueue q = MakeQueue({.max_attempts = 3, .lease = seconds(30)});
  ASSERT_OK(q.Send({.payload = "job"}));
  const Timestamp t1 = clock_->Now();
  ClaimedMessage m = ClaimOne(q);
  ASSERT_OK(q.Nack(m.receipt, {.delay = Duration(0), .error = "timeout"}));

  clock_->Advance(seconds(5));
  m = ClaimOne(q);  // attempt 2, left to expire
  EXPECT_EQ(m.attempt, 2);
  const Timestamp expired_at = m.lease_expires_at;
  clock_->Advance(minutes(1));
  m = ClaimOne(q);  // attempt 3
  EXPECT_EQ(m.attempt, 3);
  clock_->Advance(seconds(2));
  const Timestamp t3 = clock_->Now();
  ASSERT_OK_AND_ASSIGN(NackOutcome out,
                       q.Nack(m.receipt, {.error = "bad \xff bytes"}));
  EXPECT_EQ(out, NackOutcome::kDead);

  DeadLetter dead = OnlyDead(q);
  ASSERT_EQ(dead.errors.size(), 3u);
  EXPECT_EQ(dead.errors[0].attempt, 1);
  EXPECT_EQ(Us(dead.errors[0].at), Us(t1));
  EXPECT_EQ(dead.errors[0].error, "timeout");
  EXPECT_EQ(dead.errors[1].attempt, 2);
  EXPECT_EQ(Us(dead.errors[1].at), Us(expired_at));
  EXPECT_EQ(dead.errors[1].error, "lease expired");
  EXPECT_EQ(dead.errors[2].attempt, 3);
  EXPECT_EQ(Us(dead.errors[2].at), Us(t3));
  // Kept as UTF-8: the invalid byte becomes U+FFFD in the history.
  EXPECT_EQ(dead.errors[2].error, "bad \xEF\xBF\xBD bytes");
  EXPECT_EQ(dead.last_error, "bad \xff bytes");
}

TEST_P(MessageConformance, AnExpiredLeaseOnTheLastAttemptIsInTheHistory) {
  WorkQueue q = MakeQueue({.max_attempts = 1, .lease = seconds(10)});
  ASSERT_OK(q.Send({.payload = "job"}));
  ClaimedMessage m = ClaimOne(q);
  clock_->Advance(minutes(1));
  EXPECT_TRUE(NothingReady(q));  // dead-lettered by this claim
  DeadLetter dead = OnlyDead(q);
  ASSERT_EQ(dead.errors.size(), 1u);
  EXPECT_EQ(dead.errors[0].attempt, 1);
  EXPECT_EQ(Us(dead.errors[0].at), Us(m.lease_expires_at));
  EXPECT_EQ(dead.errors[0].error, "lease expired");
}

TEST_P(MessageConformance, ErrorHistoryKeepsTheLastTwentyAttempts) {
  constexpr int kAttempts = 25;
  WorkQueue q = MakeQueue({.max_attempts = kAttempts});
  ASSERT_OK(q.Send({.payload = "job"}));
  for (int i = 1; i <= kAttempts; ++i) {
    ClaimedMessage m = ClaimOne(q);
    ASSERT_EQ(m.attempt, i);
    ASSERT_OK(q.Nack(m.receipt, {.delay = Duration(0),
                                 .error = "failure " + std::to_string(i)}));
  }
  DeadLetter dead = OnlyDead(q);
  ASSERT_EQ(dead.errors.size(), kErrorHistory);
  for (std::size_t k = 0; k < kErrorHistory; ++k) {
    const int attempt =
        kAttempts - static_cast<int>(kErrorHistory) + 1 + static_cast<int>(k);
    EXPECT_EQ(dead.errors[k].attempt, attempt);
    EXPECT_EQ(dead.errors[k].error, "failure " + std::to_string(attempt));
  }
}

TEST_P(MessageConformance, AReleaseByAWorkerIsNoFailure) {
  WorkQueue q = MakeQueue({.archive = true});
  ASSERT_OK(q.Send({.payload = "handed out"}));
  ASSERT_OK(q.Send({.payload = "given back"}));
  {
    Worker w(q, {.prefetch = 2});
    ASSERT_OK_AND_ASSIGN(auto first, w.Next());
    ASSERT_TRUE(first.has_value());
    ASSERT_OK(w.Done(*first));
    // The second was never handed out: Close gives it back.
    ASSERT_OK(w.Close());
  }
  ClaimedMessage m = ClaimOne(q);
  EXPECT_EQ(m.payload, "given back");
  EXPECT_EQ(m.attempt, 1);
  ASSERT_OK(q.Ack(m.receipt));
  ASSERT_OK_AND_ASSIGN(auto archived, q.ListArchive());
  ASSERT_EQ(archived.size(), 2u);
  EXPECT_TRUE(archived[0].errors.empty());
  EXPECT_TRUE(archived[1].errors.empty());
}

INSTANTIATE_TEST_SUITE_P(Sqlite, MessageConformance,
                         ::testing::Values(SqliteFactory()), EngineName);
INSTANTIATE_TEST_SUITE_P(Postgres, MessageConformance,
                         ::testing::Values(PostgresFactory()), EngineName);
INSTANTIATE_TEST_SUITE_P(Mysql, MessageConformance,
                         ::testing::Values(MysqlFactory()), EngineName);

}  // namespace
}  // namespace sqlq::test
