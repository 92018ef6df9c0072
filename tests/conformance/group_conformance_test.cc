// Conformance of groups (docs/semantics.md, "Groups"): ordered groups
// deliver in send order one message at a time, fair queues share claims
// round-robin between groups, and plain queues keep a message's group
// without letting it change the order. Every engine runs it unchanged, on
// a ManualClock.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
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

using std::chrono::seconds;

class GroupConformance : public EngineTest {
 protected:
  WorkQueue MakeQueue(QueueOptions o) {
    auto q = store_->CreateQueue("jobs", o);
    EXPECT_TRUE(q.ok()) << q.status().ToString();
    return std::move(*q);
  }
  void SendTo(WorkQueue& q, const std::string& group,
              const std::vector<std::string>& payloads) {
    std::vector<Message> batch;
    for (const std::string& p : payloads) {
      batch.push_back({.payload = p, .group = group});
    }
    auto r = q.SendBatch(batch);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  // The payloads a claim of up to `max` returns, in order.
  std::vector<std::string> Claim(WorkQueue& q, int max,
                                 std::vector<ClaimedMessage>* out = nullptr) {
    auto r = q.Claim({.max = max});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    std::vector<std::string> payloads;
    if (!r.ok()) return payloads;
    for (const ClaimedMessage& m : *r) payloads.push_back(m.payload);
    if (out != nullptr) *out = std::move(*r);
    return payloads;
  }
  using Payloads = std::vector<std::string>;
};

TEST_P(GroupConformance, OrderedGroupsDeliverInSendOrderOneAtATime) {
  WorkQueue q = MakeQueue({.groups = GroupMode::kOrdered});
  SendTo(q, "acct-1", {"a1", "a2", "a3"});
  SendTo(q, "acct-2", {"b1", "b2"});
  std::vector<ClaimedMessage> leased;
  EXPECT_EQ(Claim(q, 10, &leased), (Payloads{"a1", "b1"}));
  ASSERT_EQ(leased.size(), 2u);
  EXPECT_EQ(leased[0].group, "acct-1");
  EXPECT_TRUE(Claim(q, 10).empty()) << "a group's next message while its "
                                       "head is leased";
  ASSERT_OK(q.Ack(leased[0].receipt));
  EXPECT_EQ(Claim(q, 10), (Payloads{"a2"}));
  // A nack keeps the group's head in place: the retry comes before b2.
  ASSERT_OK(q.Nack(leased[1].receipt, {.delay = seconds(5)}));
  EXPECT_TRUE(Claim(q, 10).empty());
  clock_->Advance(seconds(5));
  std::vector<ClaimedMessage> again;
  EXPECT_EQ(Claim(q, 10, &again), (Payloads{"b1"}));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].attempt, 2);
}

// A claim looks at groups in batches (core/group_walk.h): past long runs
// of groups with nothing to give, round the end of the groups and back, it
// still takes every ready head once, in group order from where the last
// claim stopped, and stops when it comes round to where it began.
TEST_P(GroupConformance, ClaimWalksPastBlockedGroupsAndRoundTheEnd) {
  WorkQueue q = MakeQueue({.groups = GroupMode::kOrdered});
  auto name = [](int g) { return fmt::format("g{:03}", g); };
  std::vector<Message> batch;
  for (int round = 0; round < 2; ++round) {
    for (int g = 0; g < 100; ++g) {
      batch.push_back(
          {.payload = fmt::format("{}-{}", name(g), round), .group = name(g)});
    }
  }
  ASSERT_OK(q.SendBatch(batch).status());
  std::vector<ClaimedMessage> heads;
  Payloads first = Claim(q, 100, &heads);
  ASSERT_EQ(first.size(), 100u);
  for (int g = 0; g < 100; ++g) EXPECT_EQ(first[g], name(g) + "-0");
  EXPECT_TRUE(Claim(q, 5).empty()) << "every head is leased";
  // Groups 50 to 54 move on; the claim starts after g099 (where the last
  // stopped), goes round to g000 and through 50 blocked groups.
  for (int g = 50; g < 55; ++g) ASSERT_OK(q.Ack(heads[g].receipt));
  EXPECT_EQ(Claim(q, 10),
            (Payloads{"g050-1", "g051-1", "g052-1", "g053-1", "g054-1"}));
  EXPECT_TRUE(Claim(q, 10).empty());
  // And from the middle: after g054, round the end, back to g010.
  ASSERT_OK(q.Ack(heads[10].receipt));
  ASSERT_OK(q.Ack(heads[99].receipt));
  EXPECT_EQ(Claim(q, 10), (Payloads{"g099-1", "g010-1"}));
}

// A claim that gets nothing while messages are ready says that their
// groups held them back (ClaimNote::groups_busy), and says nothing of the
// kind when nothing was ready.
TEST_P(GroupConformance, AnEmptyClaimSaysWhenGroupsHeldReadyMessagesBack) {
  WorkQueue q = MakeQueue({.groups = GroupMode::kOrdered});
  auto claim = [&](ClaimNote& note) {
    auto r = q.Claim({.max = 10}, &note);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->size() : 0u;
  };
  ClaimNote note;
  EXPECT_EQ(claim(note), 0u);
  EXPECT_FALSE(note.groups_busy) << "nothing is ready at all";
  SendTo(q, "acct-1", {"a1", "a2"});
  std::vector<ClaimedMessage> head;
  ASSERT_EQ(Claim(q, 10, &head), (Payloads{"a1"}));
  EXPECT_EQ(claim(note), 0u);
  EXPECT_TRUE(note.groups_busy) << "a2 is ready, behind its leased head";
  // Behind a head that waits for its retry, the same.
  ASSERT_OK(q.Nack(head[0].receipt, {.delay = seconds(5)}));
  EXPECT_EQ(claim(note), 0u);
  EXPECT_TRUE(note.groups_busy);
  clock_->Advance(seconds(5));
  EXPECT_EQ(claim(note), 1u);
  EXPECT_FALSE(note.groups_busy);

  // A group limit holds ready messages back the same way.
  auto fair = store_->CreateQueue(
      "fair", {.groups = GroupMode::kFair, .group_limit = 1});
  ASSERT_OK(fair.status());
  const std::vector<Message> two{{.payload = "f1", .group = "g"},
                                 {.payload = "f2", .group = "g"}};
  ASSERT_OK(fair->SendBatch(two).status());
  ASSERT_OK_AND_ASSIGN(auto got, fair->Claim({.max = 10}, &note));
  EXPECT_EQ(got.size(), 1u);
  EXPECT_FALSE(note.groups_busy);
  ASSERT_OK_AND_ASSIGN(got, fair->Claim({.max = 10}, &note));
  EXPECT_TRUE(got.empty());
  EXPECT_TRUE(note.groups_busy) << "f2 is ready, its group at its limit";
  // And a waiting claim that ends empty says it too.
  ASSERT_OK_AND_ASSIGN(
      got,
      fair->Claim({.max = 10, .wait = std::chrono::milliseconds(50)}, &note));
  EXPECT_TRUE(got.empty());
  EXPECT_TRUE(note.groups_busy);
}

TEST_P(GroupConformance, OrderedHeadIsRedeliveredAfterItsLeaseRanOut) {
  WorkQueue q =
      MakeQueue({.lease = seconds(30), .groups = GroupMode::kOrdered});
  SendTo(q, "g", {"first", "second"});
  EXPECT_EQ(Claim(q, 5), (Payloads{"first"}));
  clock_->Advance(seconds(31));
  std::vector<ClaimedMessage> again;
  EXPECT_EQ(Claim(q, 5, &again), (Payloads{"first"}));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].attempt, 2);
}

TEST_P(GroupConformance, DeadLetterOrDeletionOfTheHeadFreesItsGroup) {
  WorkQueue q = MakeQueue(
      {.max_attempts = 1, .lease = seconds(30), .groups = GroupMode::kOrdered});
  SendTo(q, "g", {"m1", "m2", "m3", "m4"});
  std::vector<ClaimedMessage> leased;
  EXPECT_EQ(Claim(q, 5, &leased), (Payloads{"m1"}));
  ASSERT_OK(q.Nack(leased[0].receipt, {.error = "bad"}));  // last attempt
  EXPECT_EQ(Claim(q, 5, &leased), (Payloads{"m2"}));
  // Its lease runs out on its last attempt: the claim dead-letters it and
  // takes the next.
  clock_->Advance(seconds(31));
  EXPECT_EQ(Claim(q, 5, &leased), (Payloads{"m3"}));
  ASSERT_OK_AND_ASSIGN(std::int64_t deleted, q.Delete({.ids = {leased[0].id}}));
  EXPECT_EQ(deleted, 1);
  EXPECT_EQ(Claim(q, 5), (Payloads{"m4"}));
  ASSERT_OK_AND_ASSIGN(auto dead, q.ListDead());
  EXPECT_EQ(dead.size(), 2u);
}

TEST_P(GroupConformance, MessagesWithoutAGroupShareTheEmptyGroup) {
  WorkQueue q = MakeQueue({.groups = GroupMode::kOrdered});
  ASSERT_OK(q.Send({.payload = "x"}));
  ASSERT_OK(q.Send({.payload = "y"}));
  std::vector<ClaimedMessage> leased;
  EXPECT_EQ(Claim(q, 5, &leased), (Payloads{"x"}));
  EXPECT_EQ(leased[0].group, "");
  ASSERT_OK(q.Ack(leased[0].receipt));
  EXPECT_EQ(Claim(q, 5), (Payloads{"y"}));
}

TEST_P(GroupConformance, FairClaimsServeEveryGroupBesideAFloodingOne) {
  WorkQueue q = MakeQueue({.groups = GroupMode::kFair});
  std::vector<std::string> flood;
  for (int i = 0; i < 300; ++i) flood.push_back("big-" + std::to_string(i));
  SendTo(q, "big", flood);
  SendTo(q, "small-1", {"s1-0", "s1-1"});
  SendTo(q, "small-2", {"s2-0"});
  // Round-robin in group order: one from each group per round.
  EXPECT_EQ(Claim(q, 4), (Payloads{"big-0", "s1-0", "s2-0", "big-1"}));
  // The next claim goes on where the last stopped.
  EXPECT_EQ(Claim(q, 2), (Payloads{"s1-1", "big-2"}));
  EXPECT_EQ(Claim(q, 2), (Payloads{"big-3", "big-4"}));
}

TEST_P(GroupConformance, FairClaimsOfOneMessageTakeTheGroupsInTurn) {
  WorkQueue q = MakeQueue({.groups = GroupMode::kFair});
  SendTo(q, "a", {"a0", "a1", "a2"});
  SendTo(q, "b", {"b0", "b1", "b2"});
  SendTo(q, "c", {"c0"});
  Payloads got;
  for (int i = 0; i < 7; ++i) {
    auto one = Claim(q, 1);
    ASSERT_EQ(one.size(), 1u) << "claim " << i;
    got.push_back(one[0]);
  }
  EXPECT_EQ(got, (Payloads{"a0", "b0", "c0", "a1", "b1", "a2", "b2"}));
}

// A claim of many from few groups takes several rounds in one go; the
// order is still the round-robin of claims of one.
TEST_P(GroupConformance, FairClaimsOfManyFromFewGroupsKeepTheRounds) {
  WorkQueue q = MakeQueue({.groups = GroupMode::kFair});
  SendTo(q, "a", {"a0", "a1", "a2"});
  SendTo(q, "b", {"b0", "b1", "b2"});
  SendTo(q, "c", {"c0"});
  EXPECT_EQ(Claim(q, 10), (Payloads{"a0", "b0", "c0", "a1", "b1", "a2", "b2"}));
  EXPECT_EQ(Claim(q, 10), Payloads{});

  // One small group beside a deep one: the small one's message, then the
  // deep one's in send order, up to the claim's most.
  ASSERT_OK_AND_ASSIGN(
      WorkQueue r, store_->CreateQueue("deep", {.groups = GroupMode::kFair}));
  SendTo(r, "small", {"s0"});
  Payloads deep;
  for (int i = 0; i < 20; ++i) deep.push_back("d" + std::to_string(i));
  SendTo(r, "deep", deep);
  ASSERT_OK(r.Send({.payload = "u0"}));  // the group ""
  EXPECT_EQ(Claim(r, 10), (Payloads{"u0", "d0", "s0", "d1", "d2", "d3", "d4",
                                    "d5", "d6", "d7"}));
  EXPECT_EQ(Claim(r, 3), (Payloads{"d8", "d9", "d10"}));
}

// A candidate out of attempts among several of one group: it goes to the
// dead letters, the group's next message is taken in its place, and none
// is leased twice.
TEST_P(GroupConformance, FairClaimsBuryExhaustedCandidatesAndTakeTheNext) {
  WorkQueue q = MakeQueue(
      {.max_attempts = 1, .lease = seconds(30), .groups = GroupMode::kFair});
  ASSERT_OK(q.Send({.payload = "m1", .delay = seconds(60), .group = "g"}));
  SendTo(q, "g", {"m2", "m3", "m4"});
  EXPECT_EQ(Claim(q, 1), (Payloads{"m2"}));
  // m2's lease runs out on its last attempt; m1 becomes ready.
  clock_->Advance(seconds(61));
  std::vector<ClaimedMessage> leased;
  EXPECT_EQ(Claim(q, 2, &leased), (Payloads{"m1", "m3"}));
  EXPECT_EQ(Claim(q, 5), (Payloads{"m4"}));
  ASSERT_OK_AND_ASSIGN(auto dead, q.ListDead());
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].payload, "m2");

  // Every candidate of a look out of attempts: the claim still fills up.
  SendTo(q, "h", {"h1", "h2", "h3", "h4", "h5", "h6"});
  EXPECT_EQ(Claim(q, 3), (Payloads{"h1", "h2", "h3"}));
  clock_->Advance(seconds(31));
  EXPECT_EQ(Claim(q, 3), (Payloads{"h4", "h5", "h6"}));
  ASSERT_OK_AND_ASSIGN(dead, q.ListDead());
  EXPECT_EQ(dead.size(), 7u);  // m2, h1-h3, and m1, m3, m4 ran out too
}

TEST_P(GroupConformance, PlainQueuesKeepTheGroupAndIgnoreIt) {
  WorkQueue q = MakeQueue({});
  SendTo(q, "g", {"1", "2"});
  std::vector<ClaimedMessage> leased;
  EXPECT_EQ(Claim(q, 5, &leased), (Payloads{"1", "2"}));
  EXPECT_EQ(leased[0].group, "g");
  ASSERT_OK(q.Send({.payload = "none"}));
  EXPECT_EQ(Claim(q, 5, &leased), (Payloads{"none"}));
  EXPECT_EQ(leased[0].group, "");
}

TEST_P(GroupConformance, BadGroupsAndModeChangesAreRefused) {
  WorkQueue q = MakeQueue({.groups = GroupMode::kOrdered});
  EXPECT_CODE(q.Send({.payload = "x", .group = std::string(256, 'g')}),
              Code::kInvalidArgument);
  ASSERT_OK(q.Send({.payload = "x", .group = std::string(255, 'g')}));
  QueueOptions o = q.options();
  o.groups = GroupMode::kFair;
  EXPECT_CODE(q.Alter(o), Code::kInvalidArgument);
  EXPECT_EQ(q.options().groups, GroupMode::kOrdered);
  ASSERT_OK_AND_ASSIGN(WorkQueue again, store_->Queue("jobs"));
  EXPECT_EQ(again.options().groups, GroupMode::kOrdered);
  EXPECT_CODE(ParseGroupMode("sorted"), Code::kInvalidArgument);
}

TEST_P(GroupConformance, RedrivenDeadLetterComesBackAtTheHeadOfItsGroup) {
  WorkQueue q = MakeQueue({.max_attempts = 1, .groups = GroupMode::kOrdered});
  SendTo(q, "g", {"first", "second", "third"});
  std::vector<ClaimedMessage> leased;
  EXPECT_EQ(Claim(q, 5, &leased), (Payloads{"first"}));
  ASSERT_OK(q.Nack(leased[0].receipt));
  EXPECT_EQ(Claim(q, 5, &leased), (Payloads{"second"}));
  ASSERT_OK(q.Ack(leased[0].receipt));
  // Redriven, the first message keeps its id and its group: it is the
  // group's head again, before the third.
  ASSERT_OK(q.RedriveAll());
  EXPECT_EQ(Claim(q, 5, &leased), (Payloads{"first"}));
  EXPECT_EQ(leased[0].group, "g");
  ASSERT_OK(q.Ack(leased[0].receipt));
  EXPECT_EQ(Claim(q, 5), (Payloads{"third"}));
}

TEST_P(GroupConformance, MessagesAreFoundAndSteeredByGroup) {
  WorkQueue q = MakeQueue({.max_attempts = 1, .groups = GroupMode::kFair});
  SendTo(q, "acct-1", {"a1", "a2"});
  SendTo(q, "acct-2", {"b1"});
  ASSERT_OK(q.Send({.payload = "none"}));  // the group ""
  auto payloads = [&](std::optional<std::string> group,
                      std::optional<MessageState> state = std::nullopt) {
    Payloads out;
    auto page =
        q.ListMessages({.filter = {.state = state, .group = std::move(group)}});
    EXPECT_TRUE(page.ok()) << page.status().ToString();
    if (page.ok()) {
      for (const MessageInfo& m : page->messages) out.push_back(m.payload);
    }
    return out;
  };
  EXPECT_EQ(payloads("acct-1"), (Payloads{"a1", "a2"}));
  EXPECT_EQ(payloads(""), (Payloads{"none"}));
  EXPECT_EQ(payloads(std::nullopt).size(), 4u);
  // Dead letters keep their group; the archive has none.
  // (The group "" comes first in a round: groups go in bytewise order.)
  std::vector<ClaimedMessage> leased;
  ASSERT_EQ(Claim(q, 2, &leased), (Payloads{"none", "a1"}));
  ASSERT_OK(q.Nack(leased[1].receipt));
  EXPECT_EQ(payloads("acct-1", MessageState::kDead), (Payloads{"a1"}));
  EXPECT_TRUE(payloads("acct-1", MessageState::kArchived).empty());
  // A bulk change by group touches that group only.
  ASSERT_OK_AND_ASSIGN(std::int64_t deleted,
                       q.Delete({.filter = {.group = "acct-2"}}));
  EXPECT_EQ(deleted, 1);
  EXPECT_EQ(payloads(std::nullopt), (Payloads{"a2", "none"}));
  EXPECT_CODE(q.ListMessages({.filter = {.group = std::string(256, 'g')}}),
              Code::kInvalidArgument);
}

// Consumers on two stores (as two processes would be) claim from one
// ordered queue at once: no group ever has two messages leased, and each
// group's messages are done in send order.
TEST_P(GroupConformance, ConcurrentConsumersNeverHoldTwoMessagesOfAGroup) {
  MakeQueue({.lease = std::chrono::minutes(10), .groups = GroupMode::kOrdered});
  constexpr int kGroups = 4, kPerGroup = 30;
  {
    ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->Queue("jobs"));
    for (int g = 0; g < kGroups; ++g) {
      std::vector<std::string> payloads;
      for (int i = 0; i < kPerGroup; ++i) {
        payloads.push_back(std::to_string(g) + ":" + std::to_string(i));
      }
      SendTo(q, "g" + std::to_string(g), payloads);
    }
  }
  auto other = Store::Open(db_->url(), StoreOptions{.clock = clock_});
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  std::mutex mu;
  std::set<std::string> in_flight;           // guarded by mu
  std::map<std::string, int> next_in_group;  // guarded by mu
  std::vector<std::string> problems;         // guarded by mu
  std::atomic<int> done{0};
  auto consumer = [&](Store& store) {
    auto q = store.Queue("jobs");
    if (!q.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      problems.push_back(q.status().ToString());
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() + seconds(60);
    while (done.load() < kGroups * kPerGroup &&
           std::chrono::steady_clock::now() < deadline) {
      auto r = q->Claim({.max = 2});
      if (!r.ok()) {
        if (r.status().code() == Code::kBusy) continue;
        std::lock_guard<std::mutex> lock(mu);
        problems.push_back(r.status().ToString());
        return;
      }
      // Leased from here until just before the ack: no other consumer may
      // hold a message of the same group meanwhile.
      {
        std::lock_guard<std::mutex> lock(mu);
        for (const ClaimedMessage& m : *r) {
          if (!in_flight.insert(m.group).second) {
            problems.push_back("two messages of " + m.group + " leased");
          }
        }
      }
      for (const ClaimedMessage& m : *r) {
        const auto colon = m.payload.find(':');
        const int seq = std::stoi(m.payload.substr(colon + 1));
        {
          std::lock_guard<std::mutex> lock(mu);
          if (next_in_group[m.group] != seq) {
            problems.push_back(m.group + ": got " + m.payload + ", want " +
                               std::to_string(next_in_group[m.group]));
          }
          next_in_group[m.group] = seq + 1;
          // Out of the set before the ack: the group's next message is
          // claimable only once the ack commits.
          in_flight.erase(m.group);
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
                         i % 2 == 0 ? std::ref(*store_) : std::ref(**other));
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(done.load(), kGroups * kPerGroup);
  for (int g = 0; g < kGroups; ++g) {
    EXPECT_EQ(next_in_group["g" + std::to_string(g)], kPerGroup);
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, GroupConformance,
                         ::testing::ValuesIn(Engines()), EngineName);

}  // namespace
}  // namespace sqlq::test
