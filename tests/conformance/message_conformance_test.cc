// Conformance of what a message carries besides its payload: headers, an
// absolute run_at time, and the history of its failed attempts
// (docs/semantics.md, "Headers", "Sending at a time", "Error history").
// Every engine runs it unchanged, on a ManualClock.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "sqlq/worker.h"
#include "tests/conformance/engine_fixture.h"
#include "tests/conformance/raw_db.h"

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

// ---------------------------------------------------------------- finding

// Every id that pages of `filter` list, following next_cursor to the end.
std::vector<std::int64_t> AllPages(WorkQueue& q, const MessageFilter& filter,
                                   int limit) {
  std::vector<std::int64_t> ids;
  ListMessagesOptions o{.filter = filter, .limit = limit};
  for (int pages = 0; pages < 1000; ++pages) {
    auto page = q.ListMessages(o);
    if (!page.ok()) {
      ADD_FAILURE() << page.status().ToString();
      return ids;
    }
    for (const MessageInfo& m : page->messages) ids.push_back(m.id);
    if (page->next_cursor.empty()) return ids;
    o.cursor = page->next_cursor;
  }
  ADD_FAILURE() << "the listing never ended";
  return ids;
}

TEST_P(MessageConformance, GetShowsAMessageInEveryState) {
  WorkQueue q = MakeQueue({.max_attempts = 2, .archive = true});
  const Timestamp sent = clock_->Now();
  ASSERT_OK_AND_ASSIGN(SendResult ready, q.Send({.payload = "r",
                                                 .priority = 3,
                                                 .dedup_key = "key-r",
                                                 .headers = {{"h", "1"}}}));
  ASSERT_OK_AND_ASSIGN(SendResult delayed,
                       q.Send({.payload = "d", .delay = hours(1)}));
  ASSERT_OK_AND_ASSIGN(SendResult leased, q.Send({.payload = "l"}));
  ASSERT_OK_AND_ASSIGN(SendResult dead,
                       q.Send({.payload = "x", .priority = 5}));
  ASSERT_OK_AND_ASSIGN(SendResult archived, q.Send({.payload = "a"}));
  // Claimed in order x, r, l, a. r is given back; x fails twice and dies;
  // a is acked; l stays leased.
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 4, .worker = "w1"}));
  ASSERT_EQ(got.size(), 4u);
  ASSERT_EQ(got[0].id, dead.id);
  ASSERT_EQ(got[1].id, ready.id);
  ASSERT_EQ(got[3].id, archived.id);
  ASSERT_OK(q.Nack(got[0].receipt, {.delay = Duration(0), .error = "first"}));
  ASSERT_OK(q.Nack(got[1].receipt, {.delay = Duration(0), .error = "later"}));
  ASSERT_OK(q.Ack(got[3].receipt));
  ClaimedMessage again = ClaimOne(q);
  ASSERT_EQ(again.id, dead.id);
  ASSERT_OK(q.Nack(again.receipt, {.error = "fatal"}));

  ASSERT_OK_AND_ASSIGN(MessageInfo r, q.Get(ready.id));
  EXPECT_EQ(r.state, MessageState::kReady);
  EXPECT_EQ(r.payload, "r");
  EXPECT_EQ(r.priority, 3);
  EXPECT_EQ(r.attempts, 1);
  EXPECT_EQ(r.dedup_key, "key-r");
  EXPECT_EQ(r.headers, (Headers{{"h", "1"}}));
  EXPECT_EQ(Us(r.enqueued_at), Us(sent));
  ASSERT_TRUE(r.ready_at);
  EXPECT_EQ(Us(*r.ready_at), Us(clock_->Now()));
  EXPECT_FALSE(r.lease_expires_at);
  EXPECT_EQ(r.last_error, "later");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].error, "later");

  ASSERT_OK_AND_ASSIGN(MessageInfo d, q.Get(delayed.id));
  EXPECT_EQ(d.state, MessageState::kDelayed);
  EXPECT_EQ(d.attempts, 0);
  EXPECT_EQ(Us(*d.ready_at), Us(sent + hours(1)));

  ASSERT_OK_AND_ASSIGN(MessageInfo l, q.Get(leased.id));
  EXPECT_EQ(l.state, MessageState::kLeased);
  EXPECT_EQ(l.worker, "w1");
  ASSERT_TRUE(l.lease_expires_at);
  EXPECT_EQ(Us(*l.lease_expires_at), Us(clock_->Now() + seconds(30)));

  ASSERT_OK_AND_ASSIGN(MessageInfo x, q.Get(dead.id));
  EXPECT_EQ(x.state, MessageState::kDead);
  EXPECT_EQ(x.last_error, "fatal");
  ASSERT_TRUE(x.died_at);
  EXPECT_FALSE(x.ready_at);
  EXPECT_EQ(x.attempts, 2);
  ASSERT_EQ(x.errors.size(), 2u);
  EXPECT_EQ(x.errors[1].error, "fatal");

  ASSERT_OK_AND_ASSIGN(MessageInfo a, q.Get(archived.id));
  EXPECT_EQ(a.state, MessageState::kArchived);
  EXPECT_EQ(a.worker, "w1");
  ASSERT_TRUE(a.completed_at);

  // Its lease ran out: ready again, the lease's end still shown.
  clock_->Advance(minutes(1));
  ASSERT_OK_AND_ASSIGN(l, q.Get(leased.id));
  EXPECT_EQ(l.state, MessageState::kReady);
  EXPECT_TRUE(l.lease_expires_at);
}

TEST_P(MessageConformance, GetOfAnUnknownOrForeignIdIsNotFound) {
  WorkQueue q = MakeQueue();
  ASSERT_OK_AND_ASSIGN(WorkQueue other, store_->CreateQueue("other", {}));
  ASSERT_OK_AND_ASSIGN(SendResult theirs, other.Send({.payload = "o"}));
  Status s = q.Get(theirs.id).status();
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_NE(s.message().find("not in queue 'jobs'"), std::string::npos)
      << s.ToString();
  EXPECT_CODE(q.Get(123456), Code::kNotFound);
  EXPECT_CODE(q.Get(0), Code::kInvalidArgument);
  EXPECT_CODE(q.Get(-4), Code::kInvalidArgument);
  ASSERT_OK(other.Get(theirs.id));
}

// A payload prefix compares bytes: case counts, a prefix may end inside a
// UTF-8 character or hold any byte, and a payload shorter than the prefix
// does not match. It finds dead letters too.
TEST_P(MessageConformance, ListingFindsPayloadsByTheirFirstBytes) {
  WorkQueue q = MakeQueue({.max_attempts = 1});
  const std::string binary(
      "\xff\x00"
      "abc",
      5);
  std::vector<std::int64_t> id;
  for (const std::string& p :
       {std::string("order:1"), std::string("order:12"), std::string("ORDER:1"),
        std::string("ord"), binary, std::string("h\xc3\xa9llo")}) {
    ASSERT_OK_AND_ASSIGN(SendResult r, q.Send({.payload = p}));
    id.push_back(r.id);
  }
  EXPECT_EQ(AllPages(q, {.payload_prefix = "order:1"}, 1),
            (std::vector<std::int64_t>{id[0], id[1]}));
  EXPECT_EQ(AllPages(q, {.payload_prefix = "order:12"}, 10),
            (std::vector<std::int64_t>{id[1]}));
  EXPECT_EQ(AllPages(q, {.payload_prefix = "ORD"}, 10),
            (std::vector<std::int64_t>{id[2]}));
  EXPECT_EQ(AllPages(q, {.payload_prefix = std::string("\xff\x00", 2)}, 10),
            (std::vector<std::int64_t>{id[4]}));
  EXPECT_EQ(AllPages(q, {.payload_prefix = "h\xc3"}, 10),
            (std::vector<std::int64_t>{id[5]}));
  EXPECT_TRUE(AllPages(q, {.payload_prefix = "orde!"}, 10).empty());
  // Bulk changes take it as well.
  ASSERT_OK_AND_ASSIGN(
      std::int64_t changed,
      q.SetPriority({.filter = {.payload_prefix = "order:"}}, 9));
  EXPECT_EQ(changed, 2);
  // Dead letters: the two order messages claimed first (priority 9), one
  // failed for good.
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 1}));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_OK(q.Nack(got[0].receipt, {.error = "x"}));
  EXPECT_EQ(
      AllPages(q, {.state = MessageState::kDead, .payload_prefix = "order:"},
               10),
      (std::vector<std::int64_t>{got[0].id}));
  auto too_long = q.ListMessages(
      {.filter = {.payload_prefix = std::string(kMaxPayloadPrefix + 1, 'x')}});
  EXPECT_CODE(too_long, Code::kInvalidArgument);
}

TEST_P(MessageConformance, ListingPagesInIdOrderWithEveryFilter) {
  WorkQueue q = MakeQueue({.max_attempts = 1});
  std::vector<std::int64_t> all, tagged, high, early;
  for (int i = 0; i < 23; ++i) {
    Message m{.payload = std::to_string(i), .priority = i % 4};
    if (i % 5 == 0) m.headers = {{"tenant", "acme"}};
    if (i == 7) m.dedup_key = "seven";
    ASSERT_OK_AND_ASSIGN(SendResult r, q.Send(m));
    all.push_back(r.id);
    if (i % 5 == 0) tagged.push_back(r.id);
    if (i % 4 >= 2) high.push_back(r.id);
    if (i < 10) early.push_back(r.id);
    clock_->Advance(seconds(1));
  }
  const Timestamp cut = clock_->Now() - seconds(13);
  EXPECT_EQ(AllPages(q, {}, 5), all);
  EXPECT_EQ(AllPages(q, {}, 1000), all);
  EXPECT_EQ(
      AllPages(
          q, {.header = std::pair<std::string, std::string>("tenant", "acme")},
          2),
      tagged);
  EXPECT_TRUE(
      AllPages(
          q, {.header = std::pair<std::string, std::string>("tenant", "ACME")},
          10)
          .empty());
  EXPECT_EQ(AllPages(q, {.min_priority = 2}, 4), high);
  EXPECT_EQ(AllPages(q, {.min_priority = 2, .max_priority = 3}, 4), high);
  EXPECT_EQ(AllPages(q, {.dedup_key = "seven"}, 4),
            std::vector<std::int64_t>{all[7]});
  EXPECT_EQ(AllPages(q, {.enqueued_before = cut}, 3), early);

  // By state: claim the three highest (priority 3: 3, 7, 11), let one die.
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 3}));
  ASSERT_EQ(got.size(), 3u);
  ASSERT_OK(q.Nack(got[0].receipt, {.error = "x"}));
  std::vector<std::int64_t> leased = {got[1].id, got[2].id};
  std::sort(leased.begin(), leased.end());
  EXPECT_EQ(AllPages(q, {.state = MessageState::kLeased}, 1), leased);
  EXPECT_EQ(AllPages(q, {.state = MessageState::kDead}, 1),
            std::vector<std::int64_t>{got[0].id});
  EXPECT_EQ(AllPages(q, {.state = MessageState::kReady}, 7).size(), 20u);
  EXPECT_TRUE(AllPages(q, {.state = MessageState::kDelayed}, 7).empty());
  ASSERT_OK_AND_ASSIGN(
      auto page, q.ListMessages({.filter = {.state = MessageState::kDead}}));
  ASSERT_EQ(page.messages.size(), 1u);
  EXPECT_EQ(page.messages[0].state, MessageState::kDead);
  EXPECT_EQ(page.messages[0].last_error, "x");
}

TEST_P(MessageConformance, ListingIsStableUnderConcurrentSendsAndClaims) {
  WorkQueue q = MakeQueue();
  for (int i = 0; i < 10; ++i) ASSERT_OK(q.Send({.payload = "a"}));
  ASSERT_OK_AND_ASSIGN(auto first, q.ListMessages({.limit = 4}));
  ASSERT_EQ(first.messages.size(), 4u);
  // Meanwhile: three claims (the oldest, some already listed), five sends.
  ASSERT_OK(q.Claim({.max = 3}));
  for (int i = 0; i < 5; ++i) ASSERT_OK(q.Send({.payload = "b"}));
  std::vector<std::int64_t> seen;
  for (const auto& m : first.messages) seen.push_back(m.id);
  ListMessagesOptions o{.limit = 4, .cursor = first.next_cursor};
  while (!o.cursor.empty()) {
    ASSERT_OK_AND_ASSIGN(auto page, q.ListMessages(o));
    for (const auto& m : page.messages) seen.push_back(m.id);
    o.cursor = page.next_cursor;
  }
  // Each message once, in id order, the new ones at the end.
  ASSERT_EQ(seen.size(), 15u);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
  EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end());
}

TEST_P(MessageConformance, APageReadsABoundedStretchOfADeepQueue) {
  WorkQueue q = MakeQueue();
  std::vector<Message> batch(10000, Message{.payload = "x"});
  ASSERT_OK(q.SendBatch(batch));
  batch.resize(1000);
  batch.back().headers = {{"find", "me"}};
  ASSERT_OK_AND_ASSIGN(auto sent, q.SendBatch(batch));
  const MessageFilter f{.header =
                            std::pair<std::string, std::string>("find", "me")};
  // The first page looks at 10,000 messages, finds none, and says where
  // to go on; the second finds it.
  ASSERT_OK_AND_ASSIGN(auto first, q.ListMessages({.filter = f}));
  EXPECT_TRUE(first.messages.empty());
  ASSERT_FALSE(first.next_cursor.empty());
  ASSERT_OK_AND_ASSIGN(
      auto second, q.ListMessages({.filter = f, .cursor = first.next_cursor}));
  ASSERT_EQ(second.messages.size(), 1u);
  EXPECT_EQ(second.messages[0].id, sent.back().id);
  EXPECT_TRUE(second.next_cursor.empty());
}

TEST_P(MessageConformance, AQueueBesideADeeperOneListsAllItsMessages) {
  WorkQueue q = MakeQueue();
  ASSERT_OK_AND_ASSIGN(WorkQueue big, store_->CreateQueue("big", {}));
  std::vector<std::int64_t> ours;
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK_AND_ASSIGN(SendResult r, q.Send({.payload = "ours"}));
    ours.push_back(r.id);
  }
  ASSERT_OK(
      big.SendBatch(std::vector<Message>(10000, Message{.payload = "b"})));
  ASSERT_OK(big.SendBatch(std::vector<Message>(5000, Message{.payload = "b"})));
  ASSERT_OK_AND_ASSIGN(SendResult last, q.Send({.payload = "ours"}));
  ours.push_back(last.id);
  // Pages past the other queue's messages come back empty, with a cursor.
  EXPECT_EQ(AllPages(q, {}, 100), ours);
  EXPECT_EQ(AllPages(big, {}, 1000).size(), 15000u);
}

TEST_P(MessageConformance, BadCursorsAndFiltersAreRefused) {
  WorkQueue q = MakeQueue();
  ASSERT_OK_AND_ASSIGN(WorkQueue other, store_->CreateQueue("other", {}));
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK(q.Send({.payload = "a"}));
    ASSERT_OK(other.Send({.payload = "a"}));
  }
  ASSERT_OK_AND_ASSIGN(auto page, q.ListMessages({.limit = 1}));
  ASSERT_FALSE(page.next_cursor.empty());
  ASSERT_OK_AND_ASSIGN(auto theirs, other.ListMessages({.limit = 1}));
  for (const std::string& bad :
       {std::string("nonsense"), std::string("m1.1.2"),
        std::string("m1.zz.1.0"), page.next_cursor + "0"}) {
    SCOPED_TRACE(bad);
    EXPECT_CODE(q.ListMessages({.cursor = bad}), Code::kInvalidArgument);
  }
  Status s = q.ListMessages({.cursor = theirs.next_cursor}).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("another listing"), std::string::npos)
      << s.ToString();
  EXPECT_CODE(q.ListMessages(
                  {.filter = {.min_priority = 1}, .cursor = page.next_cursor}),
              Code::kInvalidArgument);
  EXPECT_CODE(q.ListMessages({.limit = 0}), Code::kInvalidArgument);
  EXPECT_CODE(q.ListMessages({.limit = 1001}), Code::kInvalidArgument);
  EXPECT_CODE(
      q.ListMessages({.filter = {.min_priority = 5, .max_priority = 1}}),
      Code::kInvalidArgument);
  EXPECT_CODE(
      q.ListMessages({.filter = {.header = std::pair<std::string, std::string>(
                                     "bad key", "v")}}),
      Code::kInvalidArgument);
}

// --------------------------------------------------------------- steering

TEST_P(MessageConformance, DeletingALeasedMessageMakesItsReceiptFail) {
  WorkQueue q = MakeQueue();
  ASSERT_OK_AND_ASSIGN(SendResult a, q.Send({.payload = "a"}));
  ASSERT_OK_AND_ASSIGN(SendResult b, q.Send({.payload = "b"}));
  ClaimedMessage m = ClaimOne(q);
  ASSERT_EQ(m.id, a.id);
  ASSERT_OK_AND_ASSIGN(std::int64_t n, q.Delete({.ids = {a.id, 999999}}));
  EXPECT_EQ(n, 1);
  EXPECT_CODE(q.Ack(m.receipt), Code::kNotFound);
  EXPECT_CODE(q.Get(a.id), Code::kNotFound);
  ASSERT_OK(q.Get(b.id));
  // Deleting again changes nothing.
  ASSERT_OK_AND_ASSIGN(n, q.Delete({.ids = {a.id}}));
  EXPECT_EQ(n, 0);
}

TEST_P(MessageConformance, CancelledMessagesAreDeadLettersWhateverTheirState) {
  WorkQueue q = MakeQueue({.max_attempts = 5});
  ASSERT_OK_AND_ASSIGN(SendResult leased, q.Send({.payload = "leased"}));
  ASSERT_OK_AND_ASSIGN(SendResult ready, q.Send({.payload = "ready"}));
  ASSERT_OK_AND_ASSIGN(SendResult delayed,
                       q.Send({.payload = "delayed", .delay = hours(1)}));
  ASSERT_OK_AND_ASSIGN(SendResult kept, q.Send({.payload = "kept"}));
  ClaimedMessage m = ClaimOne(q);
  ASSERT_EQ(m.id, leased.id);

  ASSERT_OK_AND_ASSIGN(
      std::int64_t n,
      q.Cancel({.ids = {leased.id, ready.id, delayed.id, 999999}}));
  EXPECT_EQ(n, 3);
  // The worker's lease ended with it.
  EXPECT_CODE(q.Ack(m.receipt), Code::kNotFound);
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.ready, 1);
  EXPECT_EQ(st.delayed + st.leased, 0);
  EXPECT_EQ(st.dead, 3);
  EXPECT_EQ(st.dead_lettered, 3);
  ASSERT_OK_AND_ASSIGN(auto dead, q.ListDead());
  ASSERT_EQ(dead.size(), 3u);
  for (const DeadLetter& d : dead) {
    EXPECT_EQ(d.last_error, kCancelled) << d.payload;
    ASSERT_FALSE(d.errors.empty()) << d.payload;
    EXPECT_EQ(d.errors.back().error, kCancelled) << d.payload;
    EXPECT_EQ(d.attempts, d.id == leased.id ? 1 : 0) << d.payload;
  }
  // Cancelling again changes nothing; dead letters are not "in the queue".
  ASSERT_OK_AND_ASSIGN(n, q.Cancel({.ids = {ready.id}}));
  EXPECT_EQ(n, 0);
  EXPECT_CODE(q.Cancel({.filter = {.state = MessageState::kDead}}),
              Code::kInvalidArgument);
  // A cancelled message can be redriven, and is claimed like any other.
  ASSERT_OK_AND_ASSIGN(n, q.Redrive(std::vector<std::int64_t>{ready.id}));
  EXPECT_EQ(n, 1);
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 5}));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].id, ready.id);
  EXPECT_EQ(got[1].id, kept.id);
}

TEST_P(MessageConformance, CancelByFilterTakesEveryMatchAndOnlyThose) {
  WorkQueue q = MakeQueue();
  // More matches than one page of the cancel's walk (10,000).
  std::vector<Message> batch;
  for (int i = 0; i < 10050; ++i) {
    batch.push_back({.payload = std::to_string(i),
                     .headers = {{"batch", i % 2 == 0 ? "even" : "odd"}}});
  }
  for (std::size_t at = 0; at < batch.size(); at += 1000) {
    const std::size_t n = std::min<std::size_t>(1000, batch.size() - at);
    ASSERT_OK(q.SendBatch(std::span<const Message>(batch.data() + at, n)));
  }
  const MessageFilter even{
      .header = std::pair<std::string, std::string>("batch", "even")};
  EXPECT_EQ(Count(q, even), 5025);
  ASSERT_OK_AND_ASSIGN(std::int64_t n, q.Cancel({.filter = even}));
  EXPECT_EQ(n, 5025);
  EXPECT_EQ(Count(q, even), 0);
  EXPECT_EQ(Count(q, {.state = MessageState::kDead, .header = even.header}),
            5025);
  EXPECT_EQ(Count(q), 5025);
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.ready, 5025);
  EXPECT_EQ(st.dead, 5025);
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 3}));
  ASSERT_EQ(got.size(), 3u);
  for (const ClaimedMessage& c : got) {
    EXPECT_EQ(c.headers.at("batch"), "odd") << c.payload;
  }
}

TEST_P(MessageConformance, ACountPinsAChangeToWhatItCounted) {
  WorkQueue q = MakeQueue();
  const Headers acme = {{"tenant", "acme"}};
  ASSERT_OK(q.Send({.payload = "a", .headers = acme}));
  ASSERT_OK(q.Send({.payload = "b", .headers = acme}));
  const MessageFilter f{
      .header = std::pair<std::string, std::string>("tenant", "acme")};
  ASSERT_OK_AND_ASSIGN(MessageCount c, q.CountMessages(f));
  EXPECT_EQ(c.count, 2);
  // Sent after the count, in the same microsecond and later.
  ASSERT_OK_AND_ASSIGN(SendResult same,
                       q.Send({.payload = "c", .headers = acme}));
  clock_->Advance(std::chrono::microseconds(1));
  ASSERT_OK_AND_ASSIGN(SendResult later,
                       q.Send({.payload = "d", .headers = acme}));
  MessageFilter pinned = f;
  pinned.enqueued_before = c.at;
  ASSERT_OK_AND_ASSIGN(std::int64_t n, q.Cancel({.filter = pinned}));
  // The two counted, and the one sent in the count's own microsecond
  // (MessageCount says so); not the later one.
  EXPECT_EQ(n, 3);
  ASSERT_OK_AND_ASSIGN(MessageInfo s, q.Get(same.id));
  EXPECT_EQ(s.state, MessageState::kDead);
  ASSERT_OK_AND_ASSIGN(MessageInfo d, q.Get(later.id));
  EXPECT_EQ(d.state, MessageState::kReady);
}

TEST_P(MessageConformance, CancellingAnOrderedGroupsHeadLetsTheNextThrough) {
  WorkQueue q = MakeQueue({.groups = GroupMode::kOrdered});
  ASSERT_OK_AND_ASSIGN(SendResult head,
                       q.Send({.payload = "head", .group = "acct"}));
  ASSERT_OK_AND_ASSIGN(SendResult next,
                       q.Send({.payload = "next", .group = "acct"}));
  EXPECT_EQ(ClaimOne(q).id, head.id);
  EXPECT_TRUE(NothingReady(q));
  // A claim waiting for the group is woken by the cancel.
  auto waiting = std::async(std::launch::async,
                            [&] { return q.Claim({.wait = seconds(30)}); });
  ASSERT_OK_AND_ASSIGN(std::int64_t n, q.Cancel({.ids = {head.id}}));
  EXPECT_EQ(n, 1);
  auto got = waiting.get();
  ASSERT_OK(got.status());
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ(got->front().id, next.id);
}

TEST_P(MessageConformance, CancelledMessagesGoToTheDeadLetterQueue) {
  ASSERT_OK_AND_ASSIGN(WorkQueue dlq, store_->CreateQueue("jobs-dlq", {}));
  WorkQueue q = MakeQueue({.dead_letter_queue = "jobs-dlq"});
  ASSERT_OK_AND_ASSIGN(SendResult sent, q.Send({.payload = "p"}));
  ASSERT_OK_AND_ASSIGN(std::int64_t n, q.Cancel({.ids = {sent.id}}));
  EXPECT_EQ(n, 1);
  ClaimedMessage moved = ClaimOne(dlq);
  EXPECT_EQ(moved.id, sent.id);
  ASSERT_OK_AND_ASSIGN(MessageInfo info, dlq.Get(sent.id));
  ASSERT_EQ(info.errors.size(), 1u);
  EXPECT_EQ(info.errors[0].error, kCancelled);
}

TEST_P(MessageConformance, BulkChangesByFilterReportHowManyChanged) {
  WorkQueue q = MakeQueue({.max_attempts = 1});
  for (int i = 0; i < 6; ++i) {
    Message m{.payload = std::to_string(i), .delay = hours(1)};
    if (i < 4) m.headers = {{"batch", "b1"}};
    ASSERT_OK(q.Send(m));
  }
  const MessageFilter b1{
      .header = std::pair<std::string, std::string>("batch", "b1")};
  EXPECT_EQ(Count(q, b1), 4);
  EXPECT_EQ(Count(q, {.state = MessageState::kReady}), 0);
  ASSERT_OK_AND_ASSIGN(std::int64_t n, q.RetryNow({.filter = b1}));
  EXPECT_EQ(n, 4);
  EXPECT_EQ(Count(q, {.state = MessageState::kReady}), 4);
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.ready, 4);
  EXPECT_EQ(st.delayed, 2);
  // Already ready: nothing more to do.
  ASSERT_OK_AND_ASSIGN(n, q.RetryNow({.filter = b1}));
  EXPECT_EQ(n, 0);

  ASSERT_OK_AND_ASSIGN(n, q.SetPriority({.filter = b1}, 9));
  EXPECT_EQ(n, 4);
  ASSERT_OK_AND_ASSIGN(n, q.Reschedule({.filter = {.max_priority = 0}},
                                       clock_->Now() - minutes(1)));
  EXPECT_EQ(n, 2);  // the two delayed ones, ready now
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 10}));
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(got[0].priority, 9);
  EXPECT_EQ(got[3].priority, 9);
  EXPECT_EQ(got[4].priority, 0);

  // Dead letters: redriven by filter.
  for (const ClaimedMessage& m : got) ASSERT_OK(q.Nack(m.receipt));
  ASSERT_OK_AND_ASSIGN(n, q.RetryNow({.filter = {.state = MessageState::kDead,
                                                 .header = b1.header}}));
  EXPECT_EQ(n, 4);
  ASSERT_OK_AND_ASSIGN(st, q.Stats());
  EXPECT_EQ(st.ready, 4);
  EXPECT_EQ(st.dead, 2);
  ASSERT_OK_AND_ASSIGN(n, q.Delete({.filter = {.state = MessageState::kDead}}));
  EXPECT_EQ(n, 2);
  ASSERT_OK_AND_ASSIGN(n, q.Delete({.filter = b1}));
  EXPECT_EQ(n, 4);
  ASSERT_OK_AND_ASSIGN(st, q.Stats());
  EXPECT_EQ(st.ready + st.delayed + st.leased + st.dead, 0);
}

TEST_P(MessageConformance, RescheduleMovesReadyAndDelayedButNotLeased) {
  WorkQueue q = MakeQueue();
  ASSERT_OK_AND_ASSIGN(SendResult a, q.Send({.payload = "a"}));
  ASSERT_OK_AND_ASSIGN(SendResult b, q.Send({.payload = "b"}));
  ASSERT_OK_AND_ASSIGN(SendResult c, q.Send({.payload = "c"}));
  ClaimedMessage m = ClaimOne(q);  // a, leased
  ASSERT_EQ(m.id, a.id);
  const Timestamp at = clock_->Now() + hours(3);
  ASSERT_OK_AND_ASSIGN(std::int64_t n, q.Reschedule({.ids = {a.id, b.id}}, at));
  EXPECT_EQ(n, 1);
  ASSERT_OK_AND_ASSIGN(MessageInfo bi, q.Get(b.id));
  EXPECT_EQ(bi.state, MessageState::kDelayed);
  EXPECT_EQ(Us(*bi.ready_at), Us(at));
  ASSERT_OK(q.Ack(m.receipt));  // the lease is untouched
  ClaimedMessage cm = ClaimOne(q);
  EXPECT_EQ(cm.id, c.id);
  ASSERT_OK(q.Ack(cm.receipt));
  EXPECT_TRUE(NothingReady(q));
  clock_->Advance(hours(3));
  EXPECT_EQ(ClaimOne(q).id, b.id);
}

TEST_P(MessageConformance, SteeringBadInputIsRefusedAndChangesNothing) {
  WorkQueue q = MakeQueue({.archive = true});
  ASSERT_OK_AND_ASSIGN(SendResult a, q.Send({.payload = "a"}));
  const MessageFilter dead{.state = MessageState::kDead};
  const MessageFilter archived{.state = MessageState::kArchived};
  EXPECT_CODE(q.Reschedule({.filter = dead}, clock_->Now()),
              Code::kInvalidArgument);
  EXPECT_CODE(q.SetPriority({.filter = archived}, 1), Code::kInvalidArgument);
  EXPECT_CODE(q.RetryNow({.filter = archived}), Code::kInvalidArgument);
  EXPECT_CODE(q.Reschedule({.ids = {a.id}}, clock_->Now() + hours(24 * 400)),
              Code::kInvalidArgument);
  EXPECT_CODE(q.Delete({.ids = {a.id, -1}}), Code::kInvalidArgument);
  EXPECT_CODE(q.Delete({.ids = std::vector<std::int64_t>(10001, a.id)}),
              Code::kTooLarge);
  ASSERT_OK_AND_ASSIGN(MessageInfo m, q.Get(a.id));
  EXPECT_EQ(m.state, MessageState::kReady);
}

// ---------------------------------------------------------- queue control

TEST_P(MessageConformance, AlterChangesTheOptionsForWhatHappensNext) {
  WorkQueue q = MakeQueue({.max_attempts = 5});
  ASSERT_OK(q.Send({.payload = "a"}));
  ClaimedMessage m = ClaimOne(q);
  QueueOptions o = q.options();
  o.max_attempts = 1;
  o.archive = true;
  o.dead_retention = hours(1);
  ASSERT_OK(q.Alter(o));
  EXPECT_EQ(q.options().max_attempts, 1);
  // The leased message keeps its lease; its next failure is its last.
  ASSERT_OK_AND_ASSIGN(NackOutcome out, q.Nack(m.receipt, {.error = "x"}));
  EXPECT_EQ(out, NackOutcome::kDead);
  // Stored: a handle opened now reads the new options.
  ASSERT_OK_AND_ASSIGN(WorkQueue again, store_->Queue("jobs"));
  EXPECT_EQ(again.options().max_attempts, 1);
  EXPECT_TRUE(again.options().archive);
  EXPECT_EQ(again.options().dead_retention, hours(1));
  ASSERT_OK_AND_ASSIGN(auto listed, store_->ListQueues());
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].options.max_attempts, 1);
}

TEST_P(MessageConformance, AnotherStoresHandleSeesAnAlterWithinASecond) {
  WorkQueue q = MakeQueue({.max_attempts = 5});
  auto other_store = Store::Open(db_->url(), StoreOptions{.clock = clock_});
  ASSERT_OK(other_store.status());
  ASSERT_OK_AND_ASSIGN(WorkQueue other, (*other_store)->Queue("jobs"));
  EXPECT_EQ(other.options().max_attempts, 5);
  ASSERT_OK(q.Alter({.max_attempts = 2}));
  // Waits on the change itself (a handle re-reads within a second).
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (other.options().max_attempts != 2 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(other.options().max_attempts, 2);
}

TEST_P(MessageConformance, AlterRefusesOptionsOutOfRangeAndChangesNothing) {
  WorkQueue q = MakeQueue({.max_attempts = 3});
  EXPECT_CODE(q.Alter({.max_attempts = 0}), Code::kInvalidArgument);
  EXPECT_CODE(q.Alter({.lease = Duration(0)}), Code::kInvalidArgument);
  EXPECT_CODE(q.Alter({.dead_retention = Duration(-1)}),
              Code::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(WorkQueue again, store_->Queue("jobs"));
  EXPECT_EQ(again.options().max_attempts, 3);
  ASSERT_OK(store_->DropQueue("jobs"));
  EXPECT_CODE(q.Alter({}), Code::kNotFound);
  EXPECT_CODE(q.Pause(), Code::kNotFound);
}

TEST_P(MessageConformance, APausedQueueTakesSendsButGivesNothing) {
  WorkQueue q = MakeQueue();
  ASSERT_OK(q.Send({.payload = "before"}));
  ClaimedMessage held = ClaimOne(q);
  ASSERT_OK(q.Pause());
  ASSERT_OK(q.Pause());  // idempotent
  EXPECT_TRUE(q.info().paused);
  ASSERT_OK(q.Send({.payload = "during"}));
  EXPECT_TRUE(NothingReady(q));
  // An ack that travels with a claim is done; nothing is claimed, and the
  // note says why.
  ClaimNote note;
  ASSERT_OK_AND_ASSIGN(auto got, q.AckAndClaim(held.receipt, {}, &note));
  EXPECT_TRUE(got.empty());
  EXPECT_TRUE(note.paused);
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_TRUE(st.paused);
  EXPECT_EQ(st.ready, 1);
  EXPECT_EQ(st.acks, 1);
  ASSERT_OK_AND_ASSIGN(WorkQueue fresh, store_->Queue("jobs"));
  EXPECT_TRUE(fresh.info().paused);
  ASSERT_OK(q.Resume());
  ASSERT_OK_AND_ASSIGN(st, q.Stats());
  EXPECT_FALSE(st.paused);
  ASSERT_OK_AND_ASSIGN(got, q.Claim({}, &note));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "during");
  EXPECT_FALSE(note.paused);
}

TEST_P(MessageConformance, AWaitingClaimStaysParkedUntilResume) {
  WorkQueue q = MakeQueue();
  ASSERT_OK(q.Pause());
  auto waiting = std::async(std::launch::async, [q]() mutable {
    return q.Claim({.wait = seconds(30)});
  });
  ASSERT_OK(q.Send({.payload = "m"}));
  // The send would wake it at once; paused, it keeps waiting.
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(300)),
            std::future_status::timeout);
  ASSERT_OK(q.Resume());
  ASSERT_EQ(waiting.wait_for(seconds(20)), std::future_status::ready);
  auto got = waiting.get();
  ASSERT_OK(got.status());
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].payload, "m");
}

// A paused queue's ready messages wait for Resume, which wakes the
// waiting claims; until then a waiting claim looks at the safety net, not
// again and again at messages it may not take.
TEST_P(MessageConformance, AWaitingClaimOnAPausedQueueDoesNotSpin) {
  WorkQueue q = MakeQueue();
  ASSERT_OK(q.Send({.payload = "m"}));
  ASSERT_OK(q.Pause());
  const std::int64_t before = clock_->reads();
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.wait = seconds(2)}));
  const std::int64_t looks = clock_->reads() - before;
  EXPECT_TRUE(got.empty());
  // The first look, one a second of the wait (2) and a spare for the one
  // that lands on the deadline. A busy loop makes thousands.
  EXPECT_LE(looks, 4) << looks << " reads of the time in a 2 s wait";
}

TEST_P(MessageConformance, DeadLettersPastTheirRetentionArePruned) {
  WorkQueue q = MakeQueue({.max_attempts = 1, .dead_retention = hours(1)});
  ASSERT_OK(q.Send({.payload = "old"}));
  ASSERT_OK(q.Nack(ClaimOne(q).receipt));
  clock_->Advance(minutes(30));
  ASSERT_OK(q.Send({.payload = "young"}));
  ASSERT_OK(q.Nack(ClaimOne(q).receipt));
  clock_->Advance(minutes(31));
  ASSERT_OK_AND_ASSIGN(std::int64_t pruned, q.PruneDead());
  EXPECT_EQ(pruned, 1);
  DeadLetter left = OnlyDead(q);
  EXPECT_EQ(left.payload, "young");
  // Without a retention nothing is pruned.
  QueueOptions o = q.options();
  o.dead_retention = Duration(0);
  ASSERT_OK(q.Alter(o));
  clock_->Advance(hours(100));
  ASSERT_OK_AND_ASSIGN(pruned, q.PruneDead());
  EXPECT_EQ(pruned, 0);
}

// --- dedup window (unique_for) ----------------------------------------------

class DedupWindowConformance : public MessageConformance {
 protected:
  // A send of key `key` that must be a duplicate of message `of`.
  void ExpectHeld(WorkQueue& q, const std::string& key, std::int64_t of) {
    auto r = q.Send({.payload = "again", .dedup_key = key});
    ASSERT_OK(r.status());
    EXPECT_TRUE(r->duplicate) << key << " was free";
    EXPECT_EQ(r->id, of);
  }
  void ExpectFree(WorkQueue& q, const std::string& key, std::int64_t was) {
    auto r = q.Send({.payload = "again", .dedup_key = key});
    ASSERT_OK(r.status());
    EXPECT_FALSE(r->duplicate) << key << " was held";
    EXPECT_NE(r->id, was);
  }
  std::string Holds() {
    RawDb raw(GetParam().name, *db_);
    return raw.Query("SELECT count(*) FROM sqlq_dedup_holds");
  }
};

TEST_P(DedupWindowConformance, KeyStaysTakenForTheWindowAfterAck) {
  WorkQueue q = MakeQueue({.unique_for = hours(1)});
  ASSERT_OK_AND_ASSIGN(SendResult first,
                       q.Send({.payload = "a", .dedup_key = "k"}));
  ASSERT_OK(q.Ack(ClaimOne(q).receipt));
  ExpectHeld(q, "k", first.id);
  EXPECT_TRUE(NothingReady(q)) << "the duplicate was stored";
  // Other keys, and sends without a key, are not held.
  ASSERT_OK_AND_ASSIGN(SendResult other,
                       q.Send({.payload = "b", .dedup_key = "other"}));
  EXPECT_FALSE(other.duplicate);
  clock_->Advance(hours(1) - seconds(1));
  ExpectHeld(q, "k", first.id);
  clock_->Advance(seconds(1));
  ExpectFree(q, "k", first.id);
  ASSERT_OK_AND_ASSIGN(QueueStats stats, q.Stats());
  EXPECT_EQ(stats.ready, 2);
}

TEST_P(DedupWindowConformance, WithoutAWindowTheKeyIsFreeAtAck) {
  WorkQueue q = MakeQueue();
  ASSERT_OK_AND_ASSIGN(SendResult first,
                       q.Send({.payload = "a", .dedup_key = "k"}));
  ASSERT_OK(q.Ack(ClaimOne(q).receipt));
  ExpectFree(q, "k", first.id);
  EXPECT_EQ(Holds(), "0");
}

TEST_P(DedupWindowConformance, KeyOfADeadLetterIsHeld) {
  WorkQueue q = MakeQueue({.max_attempts = 1, .unique_for = hours(1)});
  // Dead by a nack on the last attempt.
  ASSERT_OK_AND_ASSIGN(SendResult nacked,
                       q.Send({.payload = "a", .dedup_key = "nacked"}));
  ASSERT_OK(q.Nack(ClaimOne(q).receipt, {.error = "no"}));
  // Dead by a lease that ran out on the last attempt (found by a claim).
  ASSERT_OK_AND_ASSIGN(SendResult expired,
                       q.Send({.payload = "b", .dedup_key = "expired"}));
  ClaimOne(q);
  clock_->Advance(minutes(1));
  EXPECT_TRUE(NothingReady(q));
  ASSERT_OK_AND_ASSIGN(auto dead, q.ListDead());
  ASSERT_EQ(dead.size(), 2u);
  ExpectHeld(q, "nacked", nacked.id);
  ExpectHeld(q, "expired", expired.id);
  // The window runs from the death: "nacked" died a minute earlier.
  clock_->Advance(minutes(59));
  ExpectFree(q, "nacked", nacked.id);
  ExpectHeld(q, "expired", expired.id);
}

TEST_P(DedupWindowConformance, KeyOfACancelledMessageIsHeld) {
  WorkQueue q = MakeQueue({.unique_for = hours(1)});
  ASSERT_OK_AND_ASSIGN(SendResult sent,
                       q.Send({.payload = "a", .dedup_key = "cancelled"}));
  ASSERT_OK_AND_ASSIGN(std::int64_t n, q.Cancel({.ids = {sent.id}}));
  EXPECT_EQ(n, 1);
  ExpectHeld(q, "cancelled", sent.id);
  clock_->Advance(hours(1));
  ExpectFree(q, "cancelled", sent.id);
}

TEST_P(DedupWindowConformance, EveryAckPathHoldsTheKey) {
  WorkQueue q = MakeQueue({.unique_for = hours(1)});
  std::vector<Message> batch;
  for (const char* k : {"batch-1", "batch-2", "next", "worker"}) {
    batch.push_back({.payload = k, .dedup_key = k});
  }
  batch.push_back({.payload = "no key"});
  ASSERT_OK_AND_ASSIGN(auto sent, q.SendBatch(batch));
  ASSERT_OK_AND_ASSIGN(auto claimed, q.Claim({.max = 3}));
  ASSERT_EQ(claimed.size(), 3u);
  // AckBatch: one statement for the batch where the engine can.
  std::vector<std::string> receipts = {claimed[0].receipt, claimed[1].receipt};
  ASSERT_OK_AND_ASSIGN(auto acked, q.AckBatch(receipts));
  for (const Status& s : acked) EXPECT_OK(s);
  // Ack and claim next: the ack goes with the claim's transaction.
  ASSERT_OK_AND_ASSIGN(auto next, q.AckAndClaim(claimed[2].receipt, {}));
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].payload, "worker");
  // In a transaction of the caller's.
  {
    ASSERT_OK_AND_ASSIGN(Tx tx, store_->BeginTx());
    ASSERT_OK(q.Ack(tx, next[0].receipt));
    ASSERT_OK(tx.Commit());
  }
  for (std::size_t i = 0; i < 4; ++i) {
    ExpectHeld(q, batch[i].dedup_key, sent[i].id);
  }
  // A batch send: each held key is a duplicate of its holder, and a second
  // message of the batch with the same key is one too.
  ASSERT_OK_AND_ASSIGN(auto again, q.SendBatch(std::vector<Message>{
                                       {.payload = "x", .dedup_key = "next"},
                                       {.payload = "y", .dedup_key = "fresh"},
                                       {.payload = "z", .dedup_key = "next"}}));
  EXPECT_TRUE(again[0].duplicate);
  EXPECT_EQ(again[0].id, sent[2].id);
  EXPECT_FALSE(again[1].duplicate);
  EXPECT_TRUE(again[2].duplicate);
  EXPECT_EQ(again[2].id, sent[2].id);
  // A send in a transaction of the caller's sees the hold too.
  ASSERT_OK_AND_ASSIGN(Tx tx, store_->BeginTx());
  ASSERT_OK_AND_ASSIGN(SendResult in_tx,
                       q.Send(tx, {.payload = "t", .dedup_key = "worker"}));
  ASSERT_OK(tx.Commit());
  EXPECT_TRUE(in_tx.duplicate);
  EXPECT_EQ(in_tx.id, sent[3].id);
}

TEST_P(DedupWindowConformance, RefusedAckHoldsNothing) {
  WorkQueue q = MakeQueue({.lease = seconds(30), .unique_for = hours(1)});
  ASSERT_OK_AND_ASSIGN(SendResult first,
                       q.Send({.payload = "a", .dedup_key = "k"}));
  ClaimedMessage stale = ClaimOne(q);
  clock_->Advance(seconds(31));
  ClaimedMessage current = ClaimOne(q);
  ASSERT_EQ(current.id, first.id);
  EXPECT_CODE(q.Ack(stale.receipt), Code::kFailedPrecondition);
  const std::vector<std::string> stale_receipts = {stale.receipt};
  ASSERT_OK_AND_ASSIGN(auto refused, q.AckBatch(stale_receipts));
  EXPECT_CODE(refused[0], Code::kFailedPrecondition);
  EXPECT_EQ(Holds(), "0");
  // Deleting a message frees its key at once (no hold).
  ASSERT_OK_AND_ASSIGN(std::int64_t deleted, q.Delete({.ids = {first.id}}));
  EXPECT_EQ(deleted, 1);
  ExpectFree(q, "k", first.id);
}

TEST_P(DedupWindowConformance, WindowSetByAlterAppliesToLaterAcks) {
  WorkQueue q = MakeQueue();
  ASSERT_OK_AND_ASSIGN(SendResult before,
                       q.Send({.payload = "a", .dedup_key = "before"}));
  ASSERT_OK(q.Ack(ClaimOne(q).receipt));
  QueueOptions o = q.options();
  o.unique_for = minutes(10);
  ASSERT_OK(q.Alter(o));
  ASSERT_OK_AND_ASSIGN(auto info, store_->Queue("jobs"));
  EXPECT_EQ(info.options().unique_for, minutes(10));
  ASSERT_OK_AND_ASSIGN(SendResult after,
                       q.Send({.payload = "b", .dedup_key = "after"}));
  ASSERT_OK(q.Ack(ClaimOne(q).receipt));
  ExpectFree(q, "before", before.id);
  ExpectHeld(q, "after", after.id);
  // Turned off, sends no longer look at holds.
  o.unique_for = Duration(0);
  ASSERT_OK(q.Alter(o));
  ExpectFree(q, "after", after.id);
}

TEST_P(DedupWindowConformance, WindowOutOfRangeIsRefused) {
  EXPECT_CODE(store_->CreateQueue("neg", {.unique_for = Duration(-1)}),
              Code::kInvalidArgument);
  EXPECT_CODE(store_->CreateQueue("long", {.unique_for = hours(24 * 366 * 11)}),
              Code::kInvalidArgument);
  WorkQueue q = MakeQueue();
  QueueOptions o = q.options();
  o.unique_for = Duration(-5);
  EXPECT_CODE(q.Alter(o), Code::kInvalidArgument);
  EXPECT_EQ(q.options().unique_for, Duration(0));
}

TEST_P(DedupWindowConformance, HoldsThatRanOutArePruned) {
  WorkQueue q = MakeQueue({.unique_for = minutes(5)});
  for (const char* k : {"a", "b"}) {
    ASSERT_OK(q.Send({.payload = k, .dedup_key = k}));
    ASSERT_OK(q.Ack(ClaimOne(q).receipt));
  }
  EXPECT_EQ(Holds(), "2");
  clock_->Advance(minutes(5));
  // A fresh handle prunes with its first ack (then at most once a minute).
  ASSERT_OK_AND_ASSIGN(WorkQueue fresh, store_->Queue("jobs"));
  ASSERT_OK_AND_ASSIGN(SendResult c,
                       fresh.Send({.payload = "c", .dedup_key = "c"}));
  ASSERT_OK(fresh.Ack(ClaimOne(fresh).receipt));
  EXPECT_EQ(Holds(), "1");
  ExpectHeld(fresh, "c", c.id);
}

// An ack committing while a send of its key waits for it: the send must
// see the hold (engines check after their insert, which waits for the
// acking transaction on the server engines).
TEST_P(DedupWindowConformance, SendWaitingForAnAckSeesItsHold) {
  WorkQueue q = MakeQueue({.unique_for = hours(1)});
  ASSERT_OK_AND_ASSIGN(SendResult first,
                       q.Send({.payload = "a", .dedup_key = "k"}));
  ClaimedMessage m = ClaimOne(q);
  ASSERT_OK_AND_ASSIGN(Tx tx, store_->BeginTx());
  ASSERT_OK(q.Ack(tx, m.receipt));
  auto send = std::async(std::launch::async, [&] {
    return q.Send({.payload = "b", .dedup_key = "k"});
  });
  bool waited = true;
  if (GetParam().name != "Sqlite") {
    // Wait until the send is blocked in its insert by the acking
    // transaction (MariaDB lists such an insert's wait in no InnoDB table,
    // only as a statement in progress: the insert of the key, which the
    // ack's trigger deletes, since schema version 25).
    RawDb raw(GetParam().name, *db_);
    const std::string waiting =
        GetParam().name == "Postgres"
            ? "SELECT count(*) FROM pg_stat_activity WHERE datname = "
              "current_database() AND wait_event_type = 'Lock'"
            : "SELECT count(*) FROM information_schema.processlist WHERE "
              "db = DATABASE() AND (info LIKE '%INSERT INTO sqlq_messages%' "
              "OR info LIKE '%INSERT INTO sqlq_dedup_keys%') "
              "AND state = 'Update'";
    const auto deadline = std::chrono::steady_clock::now() + seconds(20);
    while (raw.Query(waiting) == "0" &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    waited = raw.Query(waiting) == "1";
  }
  // Committed before any assertion, so that a failure cannot leave the
  // send waiting for this transaction.
  ASSERT_OK(tx.Commit());
  auto r = send.get();
  EXPECT_TRUE(waited) << "the send never waited for the ack";
  ASSERT_OK(r.status());
  EXPECT_TRUE(r->duplicate);
  EXPECT_EQ(r->id, first.id);
  EXPECT_TRUE(NothingReady(q));
}

// ---- dead-letter queues (docs/semantics.md, "Dead-letter queues") ----

TEST_P(MessageConformance, ANackedToDeathMessageGoesReadyToTheDeadLetterQueue) {
  ASSERT_OK_AND_ASSIGN(WorkQueue dlq, store_->CreateQueue("jobs-dlq", {}));
  WorkQueue q = MakeQueue({.max_attempts = 2, .dead_letter_queue = "jobs-dlq"});
  ASSERT_OK_AND_ASSIGN(
      SendResult sent,
      q.Send({.payload = "p", .headers = kHeaders, .group = "acct-1"}));
  ClaimedMessage m = ClaimOne(q);
  ASSERT_OK(q.Nack(m.receipt, {.delay = Duration(0), .error = "boom"}));
  m = ClaimOne(q);
  ASSERT_OK_AND_ASSIGN(NackOutcome outcome,
                       q.Nack(m.receipt, {.error = "again"}));
  EXPECT_EQ(outcome, NackOutcome::kDead);

  // Gone from the queue and its dead letters; ready in the other queue,
  // with fresh attempts and everything it carried.
  ASSERT_OK_AND_ASSIGN(auto dead, q.ListDead());
  EXPECT_TRUE(dead.empty());
  EXPECT_TRUE(NothingReady(q));
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.dead_lettered, 1);
  ClaimedMessage moved = ClaimOne(dlq);
  EXPECT_EQ(moved.id, sent.id);
  EXPECT_EQ(moved.payload, "p");
  EXPECT_EQ(moved.headers, kHeaders);
  EXPECT_EQ(moved.group, "acct-1");
  EXPECT_EQ(moved.attempt, 1);
  ASSERT_OK_AND_ASSIGN(MessageInfo info, dlq.Get(sent.id));
  ASSERT_EQ(info.errors.size(), 2u);
  EXPECT_EQ(info.errors[0].error, "boom");
  EXPECT_EQ(info.errors[1].error, "again");
}

TEST_P(MessageConformance, AnExpiredLastAttemptGoesToTheDeadLetterQueue) {
  ASSERT_OK_AND_ASSIGN(WorkQueue dlq, store_->CreateQueue("jobs-dlq", {}));
  WorkQueue q = MakeQueue({.max_attempts = 1,
                           .lease = seconds(10),
                           .dead_letter_queue = "jobs-dlq"});
  ASSERT_OK(q.Send({.payload = "slow"}));
  ClaimOne(q);
  clock_->Advance(seconds(11));
  // The claim that finds the lease run out with no attempt left moves it.
  EXPECT_TRUE(NothingReady(q));
  EXPECT_EQ(ClaimOne(dlq).payload, "slow");
}

TEST_P(MessageConformance, DeadLettersWaitForAMissingDeadLetterQueue) {
  WorkQueue q = MakeQueue({.max_attempts = 1, .dead_letter_queue = "later"});
  ASSERT_OK(q.Send({.payload = "first"}));
  ASSERT_OK(q.Nack(ClaimOne(q).receipt));
  EXPECT_EQ(OnlyDead(q).payload, "first");
  // Once the queue exists, the next death takes every dead letter there.
  ASSERT_OK_AND_ASSIGN(WorkQueue later, store_->CreateQueue("later", {}));
  ASSERT_OK(q.Send({.payload = "second"}));
  ASSERT_OK(q.Nack(ClaimOne(q).receipt));
  ASSERT_OK_AND_ASSIGN(auto dead, q.ListDead());
  EXPECT_TRUE(dead.empty());
  ASSERT_OK_AND_ASSIGN(auto got, later.Claim({.max = 10}));
  std::vector<std::string> payloads;
  for (const auto& m : got) payloads.push_back(m.payload);
  std::sort(payloads.begin(), payloads.end());
  EXPECT_EQ(payloads, (std::vector<std::string>{"first", "second"}));
}

TEST_P(MessageConformance, ADroppedDeadLetterQueueDoesNotBindToItsSuccessor) {
  ASSERT_OK(store_->CreateQueue("jobs-dlq", {}).status());
  WorkQueue q = MakeQueue({.max_attempts = 1, .dead_letter_queue = "jobs-dlq"});
  ASSERT_OK(store_->DropQueue("jobs-dlq"));
  // The link went with the dropped queue, as every store reads it.
  auto other = OtherStore();
  ASSERT_NE(other, nullptr);
  ASSERT_OK_AND_ASSIGN(WorkQueue seen, other->Queue("jobs"));
  EXPECT_EQ(seen.options().dead_letter_queue, "");
  // A queue made later under that name, by anyone, receives none of this
  // queue's dead letters, even through `q`, which read the link before
  // the drop: they stay here.
  ASSERT_OK_AND_ASSIGN(WorkQueue successor, other->CreateQueue("jobs-dlq", {}));
  ASSERT_OK(q.Send({.payload = "p", .headers = kHeaders}));
  ASSERT_OK(q.Nack(ClaimOne(q).receipt));
  EXPECT_EQ(OnlyDead(q).payload, "p");
  EXPECT_TRUE(NothingReady(successor));
  ASSERT_OK_AND_ASSIGN(QueueStats st, successor.Stats());
  EXPECT_EQ(st.ready + st.dead, 0);
}

TEST_P(MessageConformance, DeadLetterQueuesCannotFormALoop) {
  auto refused = [](const Status& s) {
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("loop"), std::string::npos) << s.ToString();
  };
  // a <- b <- c: a chain, allowed.
  ASSERT_OK_AND_ASSIGN(WorkQueue a, store_->CreateQueue("a", {}));
  ASSERT_OK(store_->CreateQueue("b", {.dead_letter_queue = "a"}).status());
  ASSERT_OK(store_->CreateQueue("c", {.dead_letter_queue = "b"}).status());
  // a -> b -> a and a -> c -> b -> a close a loop; a -> a is one too.
  for (const char* to : {"b", "c", "a"}) {
    QueueOptions o = a.options();
    o.dead_letter_queue = to;
    refused(a.Alter(o));
  }
  // A queue created into a loop: d -> a, while a waits for d to exist.
  QueueOptions o = a.options();
  o.dead_letter_queue = "d";
  ASSERT_OK(a.Alter(o));
  refused(store_->CreateQueue("d", {.dead_letter_queue = "c"}).status());
  refused(store_->CreateQueue("d", {.dead_letter_queue = "a"}).status());
  ASSERT_OK(store_->CreateQueue("d", {}).status());
  // Nothing refused was stored, as another store reads it.
  auto other = OtherStore();
  ASSERT_NE(other, nullptr);
  for (auto [name, to] :
       {std::pair{"a", "d"}, {"b", "a"}, {"c", "b"}, {"d", ""}}) {
    ASSERT_OK_AND_ASSIGN(WorkQueue seen, other->Queue(name));
    EXPECT_EQ(seen.options().dead_letter_queue, to) << name;
  }
}

TEST_P(MessageConformance, DeadLetterQueueAndLabelsAreKeptAndChanged) {
  const std::map<std::string, std::string> labels = {{"owner", "payments"},
                                                     {"sqs:DelaySeconds", "5"},
                                                     {"note", "caf\xc3\xa9"}};
  WorkQueue q = MakeQueue({.dead_letter_queue = "jobs-dlq", .labels = labels});
  // Read back from the database by another store.
  auto other = OtherStore();
  ASSERT_NE(other, nullptr);
  ASSERT_OK_AND_ASSIGN(WorkQueue seen, other->Queue("jobs"));
  EXPECT_EQ(seen.options().dead_letter_queue, "jobs-dlq");
  EXPECT_EQ(seen.options().labels, labels);
  QueueOptions o = q.options();
  o.dead_letter_queue.clear();
  o.labels = {{"owner", "billing"}};
  ASSERT_OK(q.Alter(o));
  ASSERT_OK_AND_ASSIGN(seen, other->Queue("jobs"));
  EXPECT_EQ(seen.options().dead_letter_queue, "");
  EXPECT_EQ(seen.options().labels, o.labels);
  // Refused: a queue as its own dead-letter queue, a bad name or label.
  o.dead_letter_queue = "jobs";
  EXPECT_EQ(q.Alter(o).code(), Code::kInvalidArgument);
  EXPECT_EQ(
      store_->CreateQueue("x", {.dead_letter_queue = "x"}).status().code(),
      Code::kInvalidArgument);
  EXPECT_EQ(store_->CreateQueue("y", {.dead_letter_queue = "no spaces"})
                .status()
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(
      store_->CreateQueue("z", {.labels = {{"bad key", "v"}}}).status().code(),
      Code::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Engines, MessageConformance,
                         ::testing::ValuesIn(Engines()), EngineName);
INSTANTIATE_TEST_SUITE_P(Engines, DedupWindowConformance,
                         ::testing::ValuesIn(Engines()), EngineName);

}  // namespace
}  // namespace sqlq::test
