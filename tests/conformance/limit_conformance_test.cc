// Conformance of limits (docs/semantics.md, "Limits"): max_leased holds
// across consumers and processes, the rate limit is one bucket shared by
// every store on the database, a group limit bounds each group's leases,
// and bad limits are refused. Every engine runs it unchanged, on a
// ManualClock.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "tests/conformance/engine_fixture.h"

namespace sqlq::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

class LimitConformance : public EngineTest {
 protected:
  WorkQueue MakeQueue(QueueOptions o) {
    auto q = store_->CreateQueue("jobs", o);
    EXPECT_TRUE(q.ok()) << q.status().ToString();
    return std::move(*q);
  }
  void Fill(WorkQueue& q, int n, const std::string& group = "") {
    std::vector<Message> batch;
    for (int i = 0; i < n; ++i) {
      batch.push_back({.payload = group + std::to_string(i), .group = group});
    }
    auto r = q.SendBatch(batch);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  std::vector<ClaimedMessage> Claim(WorkQueue& q, int max,
                                    ClaimNote* note = nullptr) {
    auto r = q.Claim({.max = max}, note);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : std::vector<ClaimedMessage>();
  }
};

TEST_P(LimitConformance, MaxLeasedHoldsAcrossStoresUntilLeasesEnd) {
  WorkQueue q = MakeQueue({.lease = seconds(30), .max_leased = 3});
  Fill(q, 10);
  ClaimNote note;
  auto first = Claim(q, 10, &note);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(note.limited_by, "max_leased");
  // Capacity comes back at the latest when the first of the leases ends.
  EXPECT_EQ(note.retry_after, seconds(30));

  auto other = OtherStore();
  ASSERT_NE(other, nullptr);
  ASSERT_OK_AND_ASSIGN(WorkQueue q2, other->Queue("jobs"));
  ClaimNote note2;
  EXPECT_TRUE(Claim(q2, 1, &note2).empty());
  EXPECT_EQ(note2.limited_by, "max_leased");

  // An ack frees one place, a nack another; a claim takes exactly those.
  ASSERT_OK(q.Ack(first[0].receipt));
  ASSERT_OK(q2.Nack(first[1].receipt, {.delay = minutes(5)}).status());
  auto second = Claim(q2, 10, &note2);
  EXPECT_EQ(second.size(), 2u);
  EXPECT_EQ(note2.limited_by, "max_leased");

  // Leases that run out free their places: the queue's three leases end
  // (first[2] and second's two) and three more can be taken.
  clock_->Advance(seconds(31));
  auto third = Claim(q, 10, &note);
  EXPECT_EQ(third.size(), 3u);
  // An extended lease keeps its place.
  ASSERT_OK(q.Extend(third[0].receipt, minutes(10)).status());
  clock_->Advance(seconds(31));
  auto fourth = Claim(q, 10, &note);
  EXPECT_EQ(fourth.size(), 2u);
  EXPECT_EQ(note.limited_by, "max_leased");
}

TEST_P(LimitConformance, ClaimsUnderTheLimitAreNotHeldBack) {
  WorkQueue q = MakeQueue({.max_leased = 5, .rate_limit = 100});
  Fill(q, 2);
  ClaimNote note{.limited_by = "stale"};
  EXPECT_EQ(Claim(q, 10, &note).size(), 2u);
  EXPECT_EQ(note.limited_by, "") << "the queue ran dry, no limit held it";
}

TEST_P(LimitConformance, AlterSetsAndLiftsLimits) {
  WorkQueue q = MakeQueue({});
  Fill(q, 6);
  QueueOptions o = q.options();
  o.max_leased = 1;
  ASSERT_OK(q.Alter(o));
  ASSERT_OK_AND_ASSIGN(WorkQueue again, store_->Queue("jobs"));
  EXPECT_EQ(again.options().max_leased, 1);
  EXPECT_EQ(Claim(q, 10).size(), 1u);
  o.max_leased.reset();
  ASSERT_OK(q.Alter(o));
  EXPECT_EQ(Claim(q, 10).size(), 5u);
}

TEST_P(LimitConformance, RateLimitIsOneBucketForEveryStore) {
  WorkQueue q = MakeQueue({.rate_limit = 2, .rate_burst = 3});
  Fill(q, 20);
  ClaimNote note;
  // A full bucket: the burst goes at once.
  EXPECT_EQ(Claim(q, 10, &note).size(), 3u);
  EXPECT_EQ(note.limited_by, "rate_limit");
  EXPECT_EQ(note.retry_after, milliseconds(500));
  auto other = OtherStore();
  ASSERT_NE(other, nullptr);
  ASSERT_OK_AND_ASSIGN(WorkQueue q2, other->Queue("jobs"));
  ClaimNote note2;
  EXPECT_TRUE(Claim(q2, 10, &note2).empty()) << "the other store's bucket";
  EXPECT_EQ(note2.limited_by, "rate_limit");
  EXPECT_EQ(note2.retry_after, milliseconds(500));
  // Two claims a second, whoever claims.
  clock_->Advance(milliseconds(250));
  EXPECT_TRUE(Claim(q2, 10, &note2).empty());
  EXPECT_EQ(note2.retry_after, milliseconds(250));
  clock_->Advance(milliseconds(250));
  EXPECT_EQ(Claim(q2, 10).size(), 1u);
  clock_->Advance(seconds(1));
  EXPECT_EQ(Claim(q, 10).size(), 2u);
  // A long quiet spell fills the bucket to its size, not beyond.
  clock_->Advance(minutes(10));
  EXPECT_EQ(Claim(q, 10).size(), 3u);
}

TEST_P(LimitConformance, SlowRatesAndTheDefaultBurst) {
  // 0.5 a second: the bucket holds one claim (a second's worth, at least
  // one), and the next comes two seconds later.
  WorkQueue q = MakeQueue({.rate_limit = 0.5});
  Fill(q, 5);
  ClaimNote note;
  EXPECT_EQ(Claim(q, 5, &note).size(), 1u);
  EXPECT_EQ(note.retry_after, seconds(2));
  clock_->Advance(milliseconds(1999));
  EXPECT_TRUE(Claim(q, 5).empty());
  clock_->Advance(milliseconds(1));
  EXPECT_EQ(Claim(q, 5).size(), 1u);
  // 100 a second: a second's worth, 100, at once.
  ASSERT_OK_AND_ASSIGN(WorkQueue fast,
                       store_->CreateQueue("fast", {.rate_limit = 100}));
  Fill(fast, 150);
  EXPECT_EQ(Claim(fast, 1000).size(), 100u);
  clock_->Advance(milliseconds(100));
  EXPECT_EQ(Claim(fast, 1000).size(), 10u);
}

TEST_P(LimitConformance, DeadLettersDoNotUseTheRate) {
  WorkQueue q =
      MakeQueue({.max_attempts = 1, .lease = seconds(1), .rate_limit = 1});
  Fill(q, 1);
  EXPECT_EQ(Claim(q, 1).size(), 1u);
  // Its lease runs out on its last attempt: the next claim buries it, and
  // takes the message sent after it with the bucket's one claim.
  clock_->Advance(seconds(2));
  ASSERT_OK(q.Send({.payload = "later"}).status());
  auto next = Claim(q, 1);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].payload, "later");
  ASSERT_OK_AND_ASSIGN(QueueStats stats, q.Stats());
  EXPECT_EQ(stats.dead, 1);
}

TEST_P(LimitConformance, GroupLimitBoundsEachGroupsLeases) {
  WorkQueue q = MakeQueue(
      {.lease = minutes(10), .groups = GroupMode::kFair, .group_limit = 2});
  Fill(q, 4, "a");
  Fill(q, 1, "b");
  auto first = Claim(q, 10);
  std::vector<std::string> got;
  for (const ClaimedMessage& m : first) got.push_back(m.payload);
  EXPECT_EQ(got, (std::vector<std::string>{"a0", "b0", "a1"}));
  EXPECT_TRUE(Claim(q, 10).empty()) << "a's two places are taken";
  // An ack moves a's window on by one.
  ASSERT_OK(q.Ack(first[0].receipt));
  auto second = Claim(q, 10);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].payload, "a2");
  // A nacked message keeps its place in the window while it waits: a3
  // stays out.
  ASSERT_OK(q.Nack(first[2].receipt, {.delay = minutes(1)}).status());
  EXPECT_TRUE(Claim(q, 10).empty());
  clock_->Advance(minutes(1));
  auto third = Claim(q, 10);
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0].payload, "a1");
}

TEST_P(LimitConformance, ConcurrentConsumersStayWithinMaxLeased) {
  constexpr int kMax = 2, kMessages = 60;
  MakeQueue({.lease = minutes(10), .max_leased = kMax});
  {
    ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->Queue("jobs"));
    Fill(q, kMessages);
  }
  auto other = OtherStore();
  ASSERT_NE(other, nullptr);
  std::mutex mu;
  int in_flight = 0, most = 0;        // guarded by mu
  std::vector<std::string> problems;  // guarded by mu
  std::atomic<int> done{0};
  auto consumer = [&](Store& store) {
    auto q = store.Queue("jobs");
    if (!q.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      problems.push_back(q.status().ToString());
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + seconds(60);
    while (done.load() < kMessages &&
           std::chrono::steady_clock::now() < deadline) {
      auto r = q->Claim({.max = 2, .wait = milliseconds(200)});
      if (!r.ok()) {
        if (r.status().code() == Code::kBusy) continue;
        std::lock_guard<std::mutex> lock(mu);
        problems.push_back(r.status().ToString());
        return;
      }
      // Leased from here until just before the ack: a window inside the
      // lease, so more than kMax at once here is more than kMax leased.
      {
        std::lock_guard<std::mutex> lock(mu);
        in_flight += static_cast<int>(r->size());
        most = std::max(most, in_flight);
      }
      std::this_thread::yield();
      for (const ClaimedMessage& m : *r) {
        {
          std::lock_guard<std::mutex> lock(mu);
          --in_flight;
        }
        Status s = q->Ack(m.receipt);
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          problems.push_back("ack: " + s.ToString());
        }
        ++done;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back(consumer,
                         i % 2 == 0 ? std::ref(*store_) : std::ref(*other));
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(done.load(), kMessages);
  EXPECT_LE(most, kMax);
}

// A queue full under max_leased 1, a claim waiting on it through `waiter`
// (this store or another), and an ack from this store: the waiting claim
// gets the freed place well before its wait runs out.
void ExpectAnAckWakes(WorkQueue& q, Store& waiter) {
  const auto first = q.Claim({.max = 1});
  ASSERT_TRUE(first.ok() && first->size() == 1u);
  ASSERT_OK_AND_ASSIGN(WorkQueue w, waiter.Queue("jobs"));
  // No safety-net look within the wait: only a wake-up can end it early
  // (the lease it would otherwise wait for is ten minutes).
  waiter.TEST_set_poll_interval(std::chrono::hours(1));
  const std::size_t looks_before = waiter.TEST_write_transactions();
  std::vector<ClaimedMessage> got;
  Status status;
  std::chrono::steady_clock::duration waited{};
  std::thread t([&] {
    const auto start = std::chrono::steady_clock::now();
    auto r = w.Claim({.max = 1, .wait = seconds(60)});
    // A claim that only looked again when its wait ran out (and found the
    // message then) was not woken.
    waited = std::chrono::steady_clock::now() - start;
    status = r.status();
    if (r.ok()) got = std::move(*r);
  });
  // Acked once the waiter has looked and found the queue full (its look is
  // a write transaction of its store) and sleeps: else it would find the
  // place free at a look it was making anyway, and the test would prove
  // nothing about waking. The waiter's store must watch for other
  // processes' commits by then too: the start of its watch has every
  // waiting claim look once (PostgreSQL's LISTEN, MariaDB's first poll
  // after a claim began to wait), and that look must not stand in for the
  // wake-up under test.
  while (waiter.TEST_write_transactions() == looks_before ||
         !waiter.TEST_watching_foreign_writes() ||
         waiter.TEST_sleeping_claims() == 0) {
    std::this_thread::yield();
  }
  ASSERT_OK(q.Ack((*first)[0].receipt));
  t.join();
  ASSERT_OK(status);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "1");
  EXPECT_LT(waited, seconds(30));
}

TEST_P(LimitConformance, AWaitingClaimWakesWhenAnAckFreesAPlace) {
  WorkQueue q = MakeQueue({.lease = minutes(10), .max_leased = 1});
  Fill(q, 2);
  ExpectAnAckWakes(q, *store_);
}

TEST_P(LimitConformance, AWaitingClaimOfAnotherStoreWakesWhenAnAckFreesAPlace) {
  WorkQueue q = MakeQueue({.lease = minutes(10), .max_leased = 1});
  Fill(q, 2);
  auto other = OtherStore();
  ASSERT_NE(other, nullptr);
  ExpectAnAckWakes(q, *other);
}

// The same with an ordered group instead of a limit: the ack of the
// group's head lets its next message through.
TEST_P(LimitConformance,
       AWaitingClaimOfAnotherStoreWakesWhenAnAckFreesItsGroup) {
  WorkQueue q =
      MakeQueue({.lease = minutes(10), .groups = GroupMode::kOrdered});
  Fill(q, 2);
  auto other = OtherStore();
  ASSERT_NE(other, nullptr);
  ExpectAnAckWakes(q, *other);
}

TEST_P(LimitConformance, BadLimitsAreRefusedAndChangeNothing) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const QueueOptions bad[] = {
      {.max_leased = 0},
      {.max_leased = -3},
      {.max_leased = kMaxLeasedLimit + 1},
      {.rate_limit = 0},
      {.rate_limit = -1},
      {.rate_limit = nan},
      {.rate_limit = kMaxRateLimit * 2},
      {.rate_burst = 5},
      {.rate_limit = 1, .rate_burst = 0},
      {.groups = GroupMode::kFair, .group_limit = 0},
      {.groups = GroupMode::kFair, .group_limit = kMaxGroupLimit + 1},
      {.group_limit = 2},
      {.groups = GroupMode::kOrdered, .group_limit = 2},
  };
  for (const QueueOptions& o : bad) {
    auto r = store_->CreateQueue("limited", o);
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument)
        << r.status().ToString();
  }
  EXPECT_EQ(store_->Queue("limited").status().code(), Code::kNotFound);
  WorkQueue q = MakeQueue({.max_leased = 4});
  for (const QueueOptions& o : bad) {
    EXPECT_EQ(q.Alter(o).code(), Code::kInvalidArgument);
  }
  ASSERT_OK_AND_ASSIGN(WorkQueue again, store_->Queue("jobs"));
  EXPECT_EQ(again.options().max_leased, 4);
  EXPECT_FALSE(again.options().rate_limit.has_value());
}

TEST_P(LimitConformance, LimitsAreKeptWithTheQueue) {
  MakeQueue({.groups = GroupMode::kFair,
             .max_leased = 7,
             .rate_limit = 0.25,
             .rate_burst = 9,
             .group_limit = 3});
  store_.reset();
  auto reopened = Store::Open(db_->url(), StoreOptions{.clock = clock_});
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  ASSERT_OK_AND_ASSIGN(WorkQueue q, (*reopened)->Queue("jobs"));
  const QueueOptions o = q.options();
  EXPECT_EQ(o.max_leased, 7);
  EXPECT_EQ(o.rate_limit, 0.25);
  EXPECT_EQ(o.rate_burst, 9);
  EXPECT_EQ(o.group_limit, 3);
}

INSTANTIATE_TEST_SUITE_P(Engines, LimitConformance,
                         ::testing::ValuesIn(Engines()), EngineName);

}  // namespace
}  // namespace sqlq::test
