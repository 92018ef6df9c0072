// Conformance of dependencies between messages (docs/semantics.md,
// "Dependencies"): a message that depends on others waits (listed,
// counted, never claimed) until they have all completed, in any queue; the
// ack that completes the last one releases it in its own transaction, once
// however the acks meet; a dependency that dies follows the dependent's
// policy (cancel, run or wait). Every engine runs it unchanged, on a
// ManualClock.

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "sqlq/worker.h"
#include "tests/conformance/engine_fixture.h"

namespace sqlq::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class DependencyConformance : public EngineTest {
 protected:
  WorkQueue MakeQueue(const std::string& name, const QueueOptions& o = {}) {
    auto q = store_->CreateQueue(name, o);
    EXPECT_TRUE(q.ok()) << q.status().ToString();
    return std::move(*q);
  }

  MessageState StateOf(WorkQueue& q, std::int64_t id) {
    auto info = q.Get(id);
    EXPECT_TRUE(info.ok()) << info.status().ToString();
    return info.ok() ? info->state : MessageState::kReady;
  }

  // Claims the one ready message of `q` and acks it; returns its payload.
  std::string ClaimAndAck(WorkQueue& q) {
    ClaimedMessage m = ClaimOne(q);
    EXPECT_OK(q.Ack(m.receipt));
    return m.payload;
  }

  std::int64_t Waiting(WorkQueue& q) {
    return Count(q, {.state = MessageState::kWaiting});
  }
};

TEST_P(DependencyConformance, AChainAcrossQueuesRunsInOrder) {
  WorkQueue fetch = MakeQueue("fetch");
  WorkQueue resize = MakeQueue("resize");
  ASSERT_OK_AND_ASSIGN(SendResult a, fetch.Send({.payload = "a"}));
  ASSERT_OK_AND_ASSIGN(SendResult b,
                       resize.Send({.payload = "b", .depends_on = {a.id}}));
  ASSERT_OK_AND_ASSIGN(SendResult c,
                       fetch.Send({.payload = "c", .depends_on = {b.id}}));
  EXPECT_EQ(StateOf(fetch, c.id), MessageState::kWaiting);

  // b and c wait: seen, counted, never claimed.
  EXPECT_EQ(StateOf(resize, b.id), MessageState::kWaiting);
  ASSERT_OK_AND_ASSIGN(MessageInfo bi, resize.Get(b.id));
  EXPECT_EQ(bi.waits_for, std::vector<std::int64_t>{a.id});
  EXPECT_FALSE(bi.ready_at);
  ASSERT_OK_AND_ASSIGN(QueueStats rs, resize.Stats());
  EXPECT_EQ(rs.waiting, 1);
  EXPECT_EQ(rs.ready, 0);
  EXPECT_EQ(rs.delayed, 0);
  EXPECT_EQ(Waiting(fetch), 1);
  EXPECT_TRUE(NothingReady(resize));
  // A waiting message is not made ready by hand either.
  ASSERT_OK_AND_ASSIGN(std::int64_t made,
                       resize.RetryNow({.ids = std::vector{b.id}}));
  EXPECT_EQ(made, 0);

  EXPECT_EQ(ClaimAndAck(fetch), "a");
  EXPECT_TRUE(NothingReady(fetch));  // c still waits for b
  EXPECT_EQ(StateOf(resize, b.id), MessageState::kReady);
  EXPECT_EQ(ClaimAndAck(resize), "b");
  EXPECT_EQ(ClaimAndAck(fetch), "c");
  EXPECT_EQ(Waiting(fetch), 0);
  EXPECT_EQ(Waiting(resize), 0);
}

TEST_P(DependencyConformance, LinksNameWhatAMessageWaitsForAndWhatWaitsForIt) {
  WorkQueue fetch = MakeQueue("fetch");
  WorkQueue stitch = MakeQueue("stitch");
  ASSERT_OK_AND_ASSIGN(SendResult a, fetch.Send({.payload = "a"}));
  ASSERT_OK_AND_ASSIGN(SendResult b, fetch.Send({.payload = "b"}));
  ASSERT_OK_AND_ASSIGN(
      SendResult s, stitch.Send({.payload = "s", .depends_on = {b.id, a.id}}));
  ASSERT_OK_AND_ASSIGN(SendResult m,
                       fetch.Send({.payload = "m", .depends_on = {s.id}}));
  auto names = [](const std::vector<MessageLink>& links) {
    std::vector<std::pair<std::string, std::int64_t>> out;
    for (const MessageLink& l : links) {
      EXPECT_FALSE(l.dead);
      out.emplace_back(l.queue, l.id);
    }
    return out;
  };
  using Named = std::vector<std::pair<std::string, std::int64_t>>;
  ASSERT_OK_AND_ASSIGN(MessageLinks sl, stitch.Links(s.id));
  EXPECT_EQ(names(sl.parents), (Named{{"fetch", a.id}, {"fetch", b.id}}));
  EXPECT_EQ(names(sl.dependents), (Named{{"fetch", m.id}}));
  ASSERT_OK_AND_ASSIGN(MessageLinks al, fetch.Links(a.id));
  EXPECT_EQ(names(al.parents), Named{});
  EXPECT_EQ(names(al.dependents), (Named{{"stitch", s.id}}));
  // Another queue's message, or none: no links.
  ASSERT_OK_AND_ASSIGN(MessageLinks other, fetch.Links(s.id));
  EXPECT_TRUE(other.parents.empty() && other.dependents.empty());
  EXPECT_EQ(fetch.Links(0).status().code(), Code::kInvalidArgument);
  // A parent that completed is no longer linked.
  EXPECT_EQ(ClaimAndAck(fetch), "a");
  ASSERT_OK_AND_ASSIGN(sl, stitch.Links(s.id));
  EXPECT_EQ(names(sl.parents), (Named{{"fetch", b.id}}));
  ASSERT_OK_AND_ASSIGN(al, fetch.Links(a.id));
  EXPECT_TRUE(al.parents.empty() && al.dependents.empty());
}

TEST_P(DependencyConformance, ABatchFansOutAndInOverItsOwnMessages) {
  WorkQueue q = MakeQueue("jobs");
  std::vector<Message> batch = {
      {.payload = "split"},
      {.payload = "left", .depends_on_batch = {0}},
      {.payload = "right", .depends_on_batch = {0}},
      {.payload = "join", .depends_on_batch = {1, 2}},
  };
  ASSERT_OK_AND_ASSIGN(std::vector<SendResult> sent, q.SendBatch(batch));
  ASSERT_EQ(sent.size(), 4u);
  EXPECT_EQ(Waiting(q), 3);
  ASSERT_OK_AND_ASSIGN(MessageInfo join, q.Get(sent[3].id));
  EXPECT_EQ(join.waits_for,
            (std::vector<std::int64_t>{sent[1].id, sent[2].id}));

  EXPECT_EQ(ClaimAndAck(q), "split");
  // Both halves at once, in their order; the join waits for both.
  ASSERT_OK_AND_ASSIGN(auto two, q.Claim({.max = 10}));
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].payload, "left");
  EXPECT_EQ(two[1].payload, "right");
  ASSERT_OK(q.Ack(two[0].receipt));
  EXPECT_TRUE(NothingReady(q));
  ASSERT_OK_AND_ASSIGN(MessageInfo still, q.Get(sent[3].id));
  EXPECT_EQ(still.waits_for, std::vector<std::int64_t>{sent[2].id});
  ASSERT_OK(q.Ack(two[1].receipt));
  EXPECT_EQ(ClaimAndAck(q), "join");
}

TEST_P(DependencyConformance, ParentsAckedInOneBatchReleaseTheirChildOnce) {
  WorkQueue q = MakeQueue("jobs");
  ASSERT_OK_AND_ASSIGN(SendResult a, q.Send({.payload = "a"}));
  ASSERT_OK_AND_ASSIGN(SendResult b, q.Send({.payload = "b"}));
  ASSERT_OK_AND_ASSIGN(SendResult c,
                       q.Send({.payload = "c", .depends_on = {a.id, b.id}}));
  ASSERT_OK_AND_ASSIGN(auto both, q.Claim({.max = 10}));
  ASSERT_EQ(both.size(), 2u);
  ASSERT_OK_AND_ASSIGN(auto acked, q.AckBatch(std::vector<std::string>{
                                       both[0].receipt, both[1].receipt}));
  EXPECT_OK(acked[0]);
  EXPECT_OK(acked[1]);
  ASSERT_OK_AND_ASSIGN(auto one, q.Claim({.max = 10}));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].id, c.id);
  EXPECT_EQ(one[0].attempt, 1);
}

// Two processes ack the two parents of each child at the same time: each
// child is released exactly once, whichever ack commits last.
TEST_P(DependencyConformance, ConcurrentAcksOfTwoParentsReleaseEachChild) {
  WorkQueue q = MakeQueue("jobs");
  constexpr int kChildren = 40;
  std::vector<std::int64_t> left, right, children;
  for (int i = 0; i < kChildren; ++i) {
    ASSERT_OK_AND_ASSIGN(SendResult l, q.Send({.payload = "l"}));
    ASSERT_OK_AND_ASSIGN(SendResult r, q.Send({.payload = "r"}));
    ASSERT_OK_AND_ASSIGN(
        SendResult c, q.Send({.payload = "child", .depends_on = {l.id, r.id}}));
    left.push_back(l.id);
    right.push_back(r.id);
    children.push_back(c.id);
  }
  ASSERT_OK_AND_ASSIGN(auto parents, q.Claim({.max = 2 * kChildren}));
  ASSERT_EQ(parents.size(), 2u * kChildren);
  std::vector<std::string> mine, theirs;
  for (const ClaimedMessage& m : parents) {
    (std::find(left.begin(), left.end(), m.id) != left.end() ? mine : theirs)
        .push_back(m.receipt);
  }
  std::unique_ptr<Store> other = OtherStore();
  ASSERT_NE(other, nullptr);
  ASSERT_OK_AND_ASSIGN(WorkQueue q2, other->Queue("jobs"));
  std::atomic<int> failures = 0;
  auto ack_all = [&](WorkQueue queue, const std::vector<std::string>& rs) {
    for (const std::string& r : rs) {
      if (!queue.Ack(r).ok()) ++failures;
    }
  };
  std::thread t1(ack_all, q, mine);
  std::thread t2(ack_all, q2, theirs);
  t1.join();
  t2.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(Waiting(q), 0);
  ASSERT_OK_AND_ASSIGN(auto released, q.Claim({.max = 2 * kChildren}));
  ASSERT_EQ(released.size(), static_cast<std::size_t>(kChildren));
  for (const ClaimedMessage& m : released) {
    EXPECT_EQ(m.payload, "child");
    EXPECT_EQ(m.attempt, 1);
  }
}

TEST_P(DependencyConformance, AWorkerAckingWithItsNextClaimReleasesTheNext) {
  WorkQueue q = MakeQueue("jobs");
  ASSERT_OK_AND_ASSIGN(SendResult a, q.Send({.payload = "1"}));
  std::int64_t last = a.id;
  for (int i = 2; i <= 5; ++i) {
    ASSERT_OK_AND_ASSIGN(SendResult s, q.Send({.payload = std::to_string(i),
                                               .depends_on = {last}}));
    last = s.id;
  }
  Worker w(q, {.prefetch = 1});
  std::string order;
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK_AND_ASSIGN(auto m, w.Next());
    ASSERT_TRUE(m.has_value()) << "after " << order;
    order += m->payload;
    ASSERT_OK(w.Done(*m));
  }
  ASSERT_OK(w.Close());
  EXPECT_EQ(order, "12345");
  EXPECT_EQ(Count(q), 0);
}

TEST_P(DependencyConformance, WhatIsAlreadyDoneOrDeadCountsAtTheSend) {
  WorkQueue q = MakeQueue("jobs", {.max_attempts = 1});
  ASSERT_OK_AND_ASSIGN(SendResult done, q.Send({.payload = "done"}));
  EXPECT_EQ(ClaimAndAck(q), "done");
  ASSERT_OK_AND_ASSIGN(SendResult failed, q.Send({.payload = "failed"}));
  ClaimedMessage f = ClaimOne(q);
  ASSERT_OK(q.Nack(f.receipt, {.error = "boom"}));
  ASSERT_EQ(StateOf(q, failed.id), MessageState::kDead);

  ASSERT_OK_AND_ASSIGN(SendResult after_done,
                       q.Send({.payload = "x", .depends_on = {done.id}}));
  EXPECT_EQ(StateOf(q, after_done.id), MessageState::kReady);
  ASSERT_OK_AND_ASSIGN(SendResult after_dead,
                       q.Send({.payload = "y", .depends_on = {failed.id}}));
  ASSERT_OK_AND_ASSIGN(MessageInfo y, q.Get(after_dead.id));
  EXPECT_EQ(y.state, MessageState::kDead);
  EXPECT_EQ(y.last_error, "cancelled: message " + std::to_string(failed.id) +
                              ", which it depends on, died");
  ASSERT_OK_AND_ASSIGN(SendResult runs,
                       q.Send({.payload = "z",
                               .depends_on = {failed.id},
                               .if_dependency_dies = IfDependencyDies::kRun}));
  EXPECT_EQ(StateOf(q, runs.id), MessageState::kReady);
}

// One batch whose first message is cancelled at the send (it waits for a
// dead one): the later messages of the batch that wait for it see it dead,
// each by its own policy, as if they had been sent after it.
TEST_P(DependencyConformance, ACancelAtTheSendIsDeadForTheRestOfItsBatch) {
  WorkQueue q = MakeQueue("jobs", {.max_attempts = 1});
  ASSERT_OK_AND_ASSIGN(SendResult failed, q.Send({.payload = "failed"}));
  ClaimedMessage f = ClaimOne(q);
  ASSERT_OK(q.Nack(f.receipt, {.error = "boom"}));
  ASSERT_OK_AND_ASSIGN(SendResult live, q.Send({.payload = "live"}));
  ASSERT_OK_AND_ASSIGN(
      std::vector<SendResult> sent,
      q.SendBatch(std::vector<Message>{
          {.payload = "a", .depends_on = {failed.id}},
          {.payload = "b", .depends_on_batch = {0}},
          {.payload = "c",
           .depends_on = {live.id},
           .depends_on_batch = {0},
           .if_dependency_dies = IfDependencyDies::kWait},
          {.payload = "d",
           .depends_on_batch = {0},
           .if_dependency_dies = IfDependencyDies::kRun},
          {.payload = "e", .depends_on = {live.id}, .depends_on_batch = {3}},
      }));
  ASSERT_EQ(sent.size(), 5u);
  ASSERT_OK_AND_ASSIGN(MessageInfo a, q.Get(sent[0].id));
  EXPECT_EQ(a.state, MessageState::kDead);
  EXPECT_EQ(a.last_error, "cancelled: message " + std::to_string(failed.id) +
                              ", which it depends on, died");
  ASSERT_OK_AND_ASSIGN(MessageInfo b, q.Get(sent[1].id));
  EXPECT_EQ(b.state, MessageState::kDead);
  EXPECT_EQ(b.last_error, "cancelled: message " + std::to_string(sent[0].id) +
                              ", which it depends on, died");
  ASSERT_OK_AND_ASSIGN(MessageInfo c, q.Get(sent[2].id));
  EXPECT_EQ(c.state, MessageState::kWaiting);
  EXPECT_EQ(c.waits_for, (std::vector<std::int64_t>{live.id, sent[0].id}));
  EXPECT_EQ(c.waits_for_dead, (std::vector<std::int64_t>{sent[0].id}));
  EXPECT_EQ(StateOf(q, sent[3].id), MessageState::kReady);
  ASSERT_OK_AND_ASSIGN(MessageInfo e, q.Get(sent[4].id));
  EXPECT_EQ(e.state, MessageState::kWaiting);
  EXPECT_EQ(e.waits_for, (std::vector<std::int64_t>{live.id, sent[3].id}));

  // Acking "live" and then "d" releases "e"; "c" still waits for "a".
  EXPECT_EQ(ClaimAndAck(q), "live");
  EXPECT_EQ(StateOf(q, sent[2].id), MessageState::kWaiting);
  EXPECT_EQ(ClaimAndAck(q), "d");
  EXPECT_EQ(ClaimAndAck(q), "e");
  EXPECT_EQ(StateOf(q, sent[2].id), MessageState::kWaiting);
  EXPECT_EQ(Waiting(q), 1);
}

TEST_P(DependencyConformance, ADeadParentCancelsItsDependentsInTurn) {
  WorkQueue a_q = MakeQueue("a", {.max_attempts = 1});
  WorkQueue b_q = MakeQueue("b");
  ASSERT_OK_AND_ASSIGN(SendResult a, a_q.Send({.payload = "a"}));
  ASSERT_OK_AND_ASSIGN(SendResult b,
                       b_q.Send({.payload = "b", .depends_on = {a.id}}));
  ASSERT_OK_AND_ASSIGN(SendResult c,
                       a_q.Send({.payload = "c", .depends_on = {b.id}}));
  ClaimedMessage m = ClaimOne(a_q);
  ASSERT_EQ(m.id, a.id);
  ASSERT_OK(a_q.Nack(m.receipt, {.error = "no such image"}));

  ASSERT_OK_AND_ASSIGN(MessageInfo bi, b_q.Get(b.id));
  EXPECT_EQ(bi.state, MessageState::kDead);
  EXPECT_EQ(bi.last_error, "cancelled: message " + std::to_string(a.id) +
                               ", which it depends on, died");
  EXPECT_EQ(bi.attempts, 0);
  ASSERT_OK_AND_ASSIGN(MessageInfo ci, a_q.Get(c.id));
  EXPECT_EQ(ci.state, MessageState::kDead);
  EXPECT_EQ(ci.last_error, "cancelled: message " + std::to_string(b.id) +
                               ", which it depends on, died");
  EXPECT_TRUE(NothingReady(a_q));
  EXPECT_TRUE(NothingReady(b_q));
  ASSERT_OK_AND_ASSIGN(QueueStats bs, b_q.Stats());
  EXPECT_EQ(bs.dead_lettered, 1);
  EXPECT_EQ(bs.waiting, 0);
}

// A dependent cancelled because its parent died in another queue is a
// dead letter of its own queue, and goes on to that queue's dead-letter
// queue as any cancel's would; so does the one it cancels in turn.
TEST_P(DependencyConformance,
       ACancelledDependentGoesToItsQueuesDeadLetterQueue) {
  WorkQueue b_dead = MakeQueue("b-dead");
  WorkQueue c_dead = MakeQueue("c-dead");
  WorkQueue a_q = MakeQueue("a", {.max_attempts = 1});
  WorkQueue b_q = MakeQueue("b", {.dead_letter_queue = "b-dead"});
  WorkQueue c_q = MakeQueue("c", {.dead_letter_queue = "c-dead"});
  ASSERT_OK_AND_ASSIGN(SendResult a, a_q.Send({.payload = "a"}));
  ASSERT_OK_AND_ASSIGN(SendResult b,
                       b_q.Send({.payload = "b", .depends_on = {a.id}}));
  ASSERT_OK_AND_ASSIGN(SendResult c,
                       c_q.Send({.payload = "c", .depends_on = {b.id}}));
  ClaimedMessage m = ClaimOne(a_q);
  ASSERT_OK(a_q.Nack(m.receipt, {.error = "no such image"}));

  EXPECT_EQ(Count(b_q, {}), 0);
  EXPECT_EQ(Count(c_q, {}), 0);
  ClaimedMessage bm = ClaimOne(b_dead);
  EXPECT_EQ(bm.id, b.id);
  EXPECT_EQ(bm.payload, "b");
  ClaimedMessage cm = ClaimOne(c_dead);
  EXPECT_EQ(cm.id, c.id);
  EXPECT_EQ(cm.payload, "c");
  ASSERT_OK_AND_ASSIGN(QueueStats bs, b_q.Stats());
  EXPECT_EQ(bs.dead_lettered, 1);
}

TEST_P(DependencyConformance, RunAnywayMakesItReadyWhenTheParentDies) {
  WorkQueue q = MakeQueue("jobs", {.max_attempts = 1});
  ASSERT_OK_AND_ASSIGN(SendResult a, q.Send({.payload = "a"}));
  ASSERT_OK_AND_ASSIGN(SendResult ok, q.Send({.payload = "ok"}));
  ASSERT_OK_AND_ASSIGN(SendResult cleanup,
                       q.Send({.payload = "cleanup",
                               .depends_on = {a.id, ok.id},
                               .if_dependency_dies = IfDependencyDies::kRun}));
  ASSERT_OK_AND_ASSIGN(auto two, q.Claim({.max = 2}));
  ASSERT_EQ(two.size(), 2u);
  ASSERT_OK(q.Nack(two[0].receipt, {.error = "boom"}));       // a dies
  EXPECT_EQ(StateOf(q, cleanup.id), MessageState::kWaiting);  // ok runs
  ASSERT_OK(q.Ack(two[1].receipt));
  EXPECT_EQ(ClaimAndAck(q), "cleanup");
}

TEST_P(DependencyConformance, WaitKeepsItWaitingUntilARedriveCompletes) {
  WorkQueue q = MakeQueue("jobs", {.max_attempts = 1});
  ASSERT_OK_AND_ASSIGN(SendResult a, q.Send({.payload = "a"}));
  ASSERT_OK_AND_ASSIGN(SendResult b,
                       q.Send({.payload = "b",
                               .depends_on = {a.id},
                               .if_dependency_dies = IfDependencyDies::kWait}));
  ClaimedMessage m = ClaimOne(q);
  ASSERT_OK(q.Nack(m.receipt, {.error = "flaky"}));
  ASSERT_OK_AND_ASSIGN(MessageInfo bi, q.Get(b.id));
  EXPECT_EQ(bi.state, MessageState::kWaiting);
  EXPECT_EQ(bi.waits_for, std::vector<std::int64_t>{a.id});
  EXPECT_EQ(bi.waits_for_dead, std::vector<std::int64_t>{a.id});
  EXPECT_TRUE(NothingReady(q));
  // Its links say the same, both ways.
  ASSERT_OK_AND_ASSIGN(MessageLinks bl, q.Links(b.id));
  ASSERT_EQ(bl.parents.size(), 1u);
  EXPECT_EQ(bl.parents[0].id, a.id);
  EXPECT_TRUE(bl.parents[0].dead);
  ASSERT_OK_AND_ASSIGN(MessageLinks al, q.Links(a.id));
  ASSERT_EQ(al.dependents.size(), 1u);
  EXPECT_EQ(al.dependents[0].id, b.id);

  ASSERT_OK_AND_ASSIGN(std::int64_t redriven, q.Redrive(std::vector{a.id}));
  EXPECT_EQ(redriven, 1);
  EXPECT_EQ(ClaimAndAck(q), "a");
  EXPECT_EQ(ClaimAndAck(q), "b");
}

// A redrive links a dead dependent again (WorkQueue::Redrive): redriven
// while the parent that made it die is still dead, it is cancelled again;
// redriven after that parent, it waits for it, and what waited for it,
// redriven with it, waits for it in turn: the failed part of a graph runs
// again in order. A parent that completed meanwhile counts as done.
TEST_P(DependencyConformance, ARedriveLinksADeadDependentAgain) {
  WorkQueue a_q = MakeQueue("a", {.max_attempts = 1});
  WorkQueue b_q = MakeQueue("b");
  ASSERT_OK_AND_ASSIGN(SendResult ok, a_q.Send({.payload = "ok"}));
  ASSERT_OK_AND_ASSIGN(SendResult a, a_q.Send({.payload = "a"}));
  ASSERT_OK_AND_ASSIGN(SendResult b,
                       b_q.Send({.payload = "b", .depends_on = {ok.id, a.id}}));
  ASSERT_OK_AND_ASSIGN(SendResult c,
                       b_q.Send({.payload = "c", .depends_on = {b.id}}));
  EXPECT_EQ(ClaimAndAck(a_q), "ok");
  ClaimedMessage m = ClaimOne(a_q);
  ASSERT_EQ(m.id, a.id);
  ASSERT_OK(a_q.Nack(m.receipt, {.error = "no such image"}));
  ASSERT_EQ(StateOf(b_q, b.id), MessageState::kDead);
  ASSERT_EQ(StateOf(b_q, c.id), MessageState::kDead);

  // Alone, while a is still dead: cancelled again, never ready.
  ASSERT_OK_AND_ASSIGN(std::int64_t n, b_q.Redrive(std::vector{b.id}));
  EXPECT_EQ(n, 1);
  ASSERT_OK_AND_ASSIGN(MessageInfo bi, b_q.Get(b.id));
  EXPECT_EQ(bi.state, MessageState::kDead);
  EXPECT_EQ(bi.last_error, "cancelled: message " + std::to_string(a.id) +
                               ", which it depends on, died");
  EXPECT_TRUE(NothingReady(b_q));

  // a first, then the rest: b waits for a (ok completed), c for b.
  ASSERT_OK_AND_ASSIGN(n, a_q.Redrive(std::vector{a.id}));
  EXPECT_EQ(n, 1);
  ASSERT_OK_AND_ASSIGN(n, b_q.RedriveAll());
  EXPECT_EQ(n, 2);
  ASSERT_OK_AND_ASSIGN(bi, b_q.Get(b.id));
  EXPECT_EQ(bi.state, MessageState::kWaiting);
  EXPECT_EQ(bi.waits_for, std::vector<std::int64_t>{a.id});
  EXPECT_EQ(bi.parents.size(), 2u);
  ASSERT_OK_AND_ASSIGN(MessageInfo ci, b_q.Get(c.id));
  EXPECT_EQ(ci.state, MessageState::kWaiting);
  EXPECT_EQ(ci.waits_for, std::vector<std::int64_t>{b.id});
  EXPECT_TRUE(NothingReady(b_q));
  EXPECT_EQ(Waiting(b_q), 2);

  EXPECT_EQ(ClaimAndAck(a_q), "a");
  EXPECT_EQ(ClaimAndAck(b_q), "b");
  EXPECT_EQ(ClaimAndAck(b_q), "c");
  EXPECT_TRUE(NothingReady(b_q));
}

// A redrive keeps the policy of the send: a dependent that runs anyway,
// cancelled by hand while its parent was live, waits for that parent again
// when redriven, and runs when the parent then dies.
TEST_P(DependencyConformance, ARedriveKeepsTheDependentsPolicy) {
  WorkQueue q = MakeQueue("jobs", {.max_attempts = 1});
  ASSERT_OK_AND_ASSIGN(SendResult x, q.Send({.payload = "x"}));
  ASSERT_OK_AND_ASSIGN(SendResult y,
                       q.Send({.payload = "y",
                               .depends_on = {x.id},
                               .if_dependency_dies = IfDependencyDies::kRun}));
  ASSERT_OK_AND_ASSIGN(std::int64_t n, q.Cancel({.ids = std::vector{y.id}}));
  ASSERT_EQ(n, 1);
  ASSERT_OK_AND_ASSIGN(n, q.Redrive(std::vector{y.id}));
  EXPECT_EQ(n, 1);
  ASSERT_OK_AND_ASSIGN(MessageInfo yi, q.Get(y.id));
  EXPECT_EQ(yi.state, MessageState::kWaiting);
  EXPECT_EQ(yi.waits_for, std::vector<std::int64_t>{x.id});
  // Its headers show none of sqlq's own.
  EXPECT_TRUE(yi.headers.empty());

  ClaimedMessage m = ClaimOne(q);
  ASSERT_EQ(m.id, x.id);
  ASSERT_OK(q.Nack(m.receipt, {.error = "boom"}));
  EXPECT_EQ(ClaimAndAck(q), "y");
  EXPECT_TRUE(NothingReady(q));
}

// A dead parent forwarded to its queue's dead-letter queue is the one its
// `wait` dependents wait for: acked there, it releases them.
TEST_P(DependencyConformance, WaitFollowsTheParentIntoItsDeadLetterQueue) {
  WorkQueue dlq = MakeQueue("dlq");
  WorkQueue q =
      MakeQueue("jobs", {.max_attempts = 1, .dead_letter_queue = "dlq"});
  ASSERT_OK_AND_ASSIGN(SendResult a, q.Send({.payload = "a"}));
  ASSERT_OK_AND_ASSIGN(SendResult b,
                       q.Send({.payload = "b",
                               .depends_on = {a.id},
                               .if_dependency_dies = IfDependencyDies::kWait}));
  ClaimedMessage m = ClaimOne(q);
  ASSERT_OK(q.Nack(m.receipt, {.error = "flaky"}));
  ASSERT_OK_AND_ASSIGN(MessageInfo bi, q.Get(b.id));
  EXPECT_EQ(bi.state, MessageState::kWaiting);
  EXPECT_EQ(bi.waits_for, std::vector<std::int64_t>{a.id});
  // In the dead-letter queue the parent is live again.
  EXPECT_TRUE(bi.waits_for_dead.empty());
  EXPECT_TRUE(NothingReady(q));

  EXPECT_EQ(ClaimAndAck(dlq), "a");
  EXPECT_EQ(ClaimAndAck(q), "b");
}

TEST_P(DependencyConformance, DeletingOrDroppingTheParentFollowsThePolicy) {
  WorkQueue parents = MakeQueue("parents");
  WorkQueue kids = MakeQueue("kids");
  ASSERT_OK_AND_ASSIGN(SendResult a, parents.Send({.payload = "a"}));
  ASSERT_OK_AND_ASSIGN(SendResult b, parents.Send({.payload = "b"}));
  ASSERT_OK_AND_ASSIGN(SendResult x,
                       kids.Send({.payload = "x", .depends_on = {a.id}}));
  ASSERT_OK_AND_ASSIGN(
      SendResult y, kids.Send({.payload = "y",
                               .depends_on = {b.id},
                               .if_dependency_dies = IfDependencyDies::kRun}));
  ASSERT_OK_AND_ASSIGN(std::int64_t deleted,
                       parents.Delete({.ids = std::vector{a.id}}));
  EXPECT_EQ(deleted, 1);
  ASSERT_OK_AND_ASSIGN(MessageInfo xi, kids.Get(x.id));
  EXPECT_EQ(xi.state, MessageState::kDead);
  EXPECT_EQ(xi.last_error, "cancelled: message " + std::to_string(a.id) +
                               ", which it depends on, was deleted");
  ASSERT_OK(store_->DropQueue("parents"));
  EXPECT_EQ(StateOf(kids, y.id), MessageState::kReady);
  EXPECT_EQ(ClaimAndAck(kids), "y");
}

TEST_P(DependencyConformance, InATransactionTheLinksCommitWithIt) {
  WorkQueue q = MakeQueue("jobs");
  ASSERT_OK_AND_ASSIGN(SendResult a, q.Send({.payload = "a"}));
  {
    ASSERT_OK_AND_ASSIGN(Tx tx, store_->BeginTx());
    ASSERT_OK(q.Send(tx, {.payload = "rolled back", .depends_on = {a.id}}));
    ASSERT_OK(tx.Rollback());
  }
  ASSERT_OK_AND_ASSIGN(Tx tx, store_->BeginTx());
  ASSERT_OK_AND_ASSIGN(SendResult b,
                       q.Send(tx, {.payload = "b", .depends_on = {a.id}}));
  ASSERT_OK(tx.Commit());
  EXPECT_EQ(StateOf(q, b.id), MessageState::kWaiting);
  ClaimedMessage m = ClaimOne(q);
  ASSERT_EQ(m.id, a.id);
  ASSERT_OK_AND_ASSIGN(Tx tx2, store_->BeginTx());
  ASSERT_OK(q.Ack(tx2, m.receipt));
  ASSERT_OK(tx2.Commit());
  EXPECT_EQ(ClaimAndAck(q), "b");
  EXPECT_EQ(Count(q), 0);  // the rolled-back one never existed
}

// A graph over three queues sent in one call: it runs layer by layer, and
// a call that fails stores nothing of it.
TEST_P(DependencyConformance, AGraphOverSeveralQueuesIsSentAtOnce) {
  WorkQueue fetch = MakeQueue("fetch");
  WorkQueue resize = MakeQueue("resize");
  WorkQueue mail = MakeQueue("mail");
  const std::vector<QueuedMessage> bad = {
      {"fetch", {.payload = "a"}},
      {"no-such-queue", {.payload = "b", .depends_on_batch = {0}}}};
  EXPECT_CODE(store_->SendAll(bad), Code::kNotFound);
  const std::vector<QueuedMessage> cyclic = {
      {"fetch", {.payload = "a", .depends_on_batch = {1}}},
      {"fetch", {.payload = "b"}}};
  EXPECT_CODE(store_->SendAll(cyclic), Code::kInvalidArgument);
  EXPECT_EQ(Count(fetch), 0);

  const std::vector<QueuedMessage> graph = {
      {"fetch", {.payload = "a.png"}},
      {"fetch", {.payload = "b.png"}},
      {"resize", {.payload = "a.png", .depends_on_batch = {0}}},
      {"resize", {.payload = "b.png", .depends_on_batch = {1}}},
      {"mail", {.payload = "album", .depends_on_batch = {2, 3}}},
  };
  ASSERT_OK_AND_ASSIGN(std::vector<SendResult> ids, store_->SendAll(graph));
  ASSERT_EQ(ids.size(), 5u);
  EXPECT_EQ(Count(fetch, {.state = MessageState::kReady}), 2);
  EXPECT_EQ(Waiting(resize), 2);
  ASSERT_OK_AND_ASSIGN(MessageInfo album, mail.Get(ids[4].id));
  EXPECT_EQ(album.waits_for, (std::vector<std::int64_t>{ids[2].id, ids[3].id}));
  EXPECT_TRUE(NothingReady(resize));
  EXPECT_EQ(ClaimAndAck(fetch), "a.png");
  EXPECT_EQ(ClaimAndAck(resize), "a.png");
  EXPECT_TRUE(NothingReady(mail));
  EXPECT_EQ(ClaimAndAck(fetch), "b.png");
  EXPECT_EQ(ClaimAndAck(resize), "b.png");
  EXPECT_EQ(ClaimAndAck(mail), "album");
}

// A claimed dependent names its parents by queue and id, completed or
// not, whether the send named them by id or by their place in its batch
// (one in its own queue and run too), so that it can read their results;
// one that had left every queue before the send has no queue.
TEST_P(DependencyConformance, AClaimedDependentNamesItsParentsAndTheirQueues) {
  WorkQueue fetch = MakeQueue("fetch");
  WorkQueue resize = MakeQueue("resize");
  ASSERT_OK_AND_ASSIGN(SendResult gone, fetch.Send({.payload = "gone"}));
  EXPECT_EQ(ClaimAndAck(fetch), "gone");
  ASSERT_OK_AND_ASSIGN(SendResult before, fetch.Send({.payload = "before"}));
  const std::vector<QueuedMessage> graph = {
      {"resize", {.payload = "a"}},
      {"resize", {.payload = "b", .depends_on_batch = {0}}},
      {"fetch",
       {.payload = "c",
        .depends_on = {before.id, gone.id, before.id},
        .depends_on_batch = {1, 0}}},
  };
  ASSERT_OK_AND_ASSIGN(std::vector<SendResult> ids, store_->SendAll(graph));
  ASSERT_EQ(ids.size(), 3u);
  const std::vector<ParentRef> c_parents = {{"fetch", before.id},
                                            {"", gone.id},
                                            {"resize", ids[1].id},
                                            {"resize", ids[0].id}};
  // Listed while it waits, as the claim gives them.
  ASSERT_OK_AND_ASSIGN(MessageInfo waiting, fetch.Get(ids[2].id));
  EXPECT_EQ(waiting.parents, c_parents);
  EXPECT_TRUE(waiting.headers.empty());  // sqlq's own, not the message's

  ClaimedMessage a = ClaimOne(resize);
  EXPECT_EQ(a.payload, "a");
  EXPECT_TRUE(a.parents.empty());
  ASSERT_OK(resize.Ack(a.receipt));
  ClaimedMessage b = ClaimOne(resize);
  EXPECT_EQ(b.payload, "b");
  EXPECT_EQ(b.parents, (std::vector<ParentRef>{{"resize", ids[0].id}}));
  ASSERT_OK(resize.Ack(b.receipt));
  ClaimedMessage first = ClaimOne(fetch);
  EXPECT_EQ(first.payload, "before");
  ASSERT_OK(fetch.Ack(first.receipt));
  ClaimedMessage c = ClaimOne(fetch);
  EXPECT_EQ(c.payload, "c");
  EXPECT_EQ(c.parents, c_parents);
  EXPECT_TRUE(c.headers.empty());

  // Sent in a transaction of the caller's, by id.
  ASSERT_OK_AND_ASSIGN(SendResult p, resize.Send({.payload = "p"}));
  ASSERT_OK_AND_ASSIGN(Tx tx, store_->BeginTx());
  ASSERT_OK_AND_ASSIGN(SendResult d,
                       fetch.Send(tx, {.payload = "d", .depends_on = {p.id}}));
  ASSERT_OK(tx.Commit());
  ASSERT_OK_AND_ASSIGN(MessageInfo di, fetch.Get(d.id));
  EXPECT_EQ(di.parents, (std::vector<ParentRef>{{"resize", p.id}}));
}

TEST_P(DependencyConformance, BadDependenciesAreRefusedAndStoreNothing) {
  WorkQueue q = MakeQueue("jobs");
  EXPECT_CODE(q.Send({.payload = "x", .depends_on = {0}}),
              Code::kInvalidArgument);
  EXPECT_CODE(q.SendBatch(std::vector<Message>{
                  {.payload = "x", .depends_on_batch = {0}}}),
              Code::kInvalidArgument);
  EXPECT_CODE(q.SendBatch(std::vector<Message>{
                  {.payload = "x"}, {.payload = "y", .depends_on_batch = {1}}}),
              Code::kInvalidArgument);
  EXPECT_CODE(q.Send({.payload = "x", .delay = seconds(1), .depends_on = {1}}),
              Code::kInvalidArgument);
  std::vector<std::int64_t> many(kMaxDependencies + 1, 1);
  EXPECT_CODE(q.Send({.payload = "x", .depends_on = many}),
              Code::kInvalidArgument);
  EXPECT_EQ(Count(q), 0);
}

INSTANTIATE_TEST_SUITE_P(Engines, DependencyConformance,
                         ::testing::ValuesIn(Engines()), EngineName);

}  // namespace
}  // namespace sqlq::test
