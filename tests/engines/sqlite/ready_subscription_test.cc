// WorkQueue::Subscribe and NextLook: the thread-free form of a claim's
// wait, which the server's long-poll claims are built on.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <vector>

#include "core/wake_hub.h"
#include "sqlq/store.h"

namespace sqlq {
namespace {

using std::chrono::milliseconds;

class ReadySubscriptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("sqlq-sub-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    auto s = Store::Open("sqlite:" + (dir_ / "q.db").string());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
    auto q = store_->CreateQueue("jobs", {});
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    queue_.emplace(*q);
  }
  void TearDown() override {
    queue_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  std::filesystem::path dir_;
  std::unique_ptr<Store> store_;
  std::optional<WorkQueue> queue_;
};

TEST_F(ReadySubscriptionTest, OneSendSignalsExactlyOneOfThreeSubscribers) {
  std::atomic<int> calls[3] = {0, 0, 0};
  std::vector<std::unique_ptr<ReadySubscription>> subs;
  for (int i = 0; i < 3; ++i) {
    subs.push_back(queue_->Subscribe([&calls, i] { ++calls[i]; }));
  }
  ASSERT_TRUE(queue_->Send({.payload = "a"}).ok());
  // The callback runs inside Send, before it returns.
  EXPECT_EQ(calls[0] + calls[1] + calls[2], 1);
  EXPECT_EQ(calls[0], 1) << "the longest-waiting subscriber comes first";
  EXPECT_TRUE(subs[0]->TakeSignal());
  EXPECT_FALSE(subs[0]->TakeSignal()) << "taking clears the signal";
  EXPECT_FALSE(subs[1]->TakeSignal());
}

TEST_F(ReadySubscriptionTest, BatchOfTwoSignalsTwoAndNotTheThird) {
  std::atomic<int> total = 0;
  std::vector<std::unique_ptr<ReadySubscription>> subs;
  for (int i = 0; i < 3; ++i)
    subs.push_back(queue_->Subscribe([&] { ++total; }));
  std::vector<Message> batch = {{.payload = "a"}, {.payload = "b"}};
  ASSERT_TRUE(queue_->SendBatch(batch).ok());
  EXPECT_EQ(total, 2);
}

TEST_F(ReadySubscriptionTest, UntakenSignalPassesToTheNextSubscriberOnDestroy) {
  std::atomic<int> first = 0, second = 0;
  auto a = queue_->Subscribe([&] { ++first; });
  auto b = queue_->Subscribe([&] { ++second; });
  ASSERT_TRUE(queue_->Send({.payload = "a"}).ok());
  EXPECT_EQ(first, 1);
  EXPECT_EQ(second, 0);
  a.reset();  // left without claiming: the message still needs someone
  EXPECT_EQ(second, 1);
  EXPECT_TRUE(b->TakeSignal());
}

TEST_F(ReadySubscriptionTest, NoSecondCallbackUntilTheSignalIsTaken) {
  std::atomic<int> calls = 0;
  auto sub = queue_->Subscribe([&] { ++calls; });
  ASSERT_TRUE(queue_->Send({.payload = "a"}).ok());
  ASSERT_TRUE(queue_->Send({.payload = "b"}).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(sub->TakeSignal());
  ASSERT_TRUE(queue_->Send({.payload = "c"}).ok());
  EXPECT_EQ(calls, 2);
}

// A delayed message is not claimable yet, but a subscriber must hear of it
// to shorten its sleep to the message's ready time (NextLook).
TEST_F(ReadySubscriptionTest, DelayedSendSignalsSoSleepersLearnItsReadyTime) {
  store_->TEST_set_poll_interval(std::chrono::hours(1));
  std::atomic<int> calls = 0;
  auto sub = queue_->Subscribe([&] { ++calls; });
  ASSERT_TRUE(
      queue_->Send({.payload = "later", .delay = std::chrono::seconds(30)})
          .ok());
  EXPECT_EQ(calls, 1);
  const auto before = std::chrono::steady_clock::now();
  auto at = queue_->NextLook();
  ASSERT_TRUE(at.ok()) << at.status().ToString();
  EXPECT_GT(*at, before + std::chrono::seconds(29));
  EXPECT_LE(*at, std::chrono::steady_clock::now() + std::chrono::seconds(31));
}

TEST_F(ReadySubscriptionTest, NextLookIsTheSafetyNetTheDelayOrNow) {
  const auto before = std::chrono::steady_clock::now();
  auto none = queue_->NextLook();
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_GE(*none, before + std::chrono::seconds(1)) << "the safety net";
  EXPECT_LE(*none, std::chrono::steady_clock::now() + std::chrono::seconds(1));
  store_->TEST_set_poll_interval(std::chrono::hours(2));
  ASSERT_TRUE(
      queue_->Send({.payload = "later", .delay = std::chrono::hours(1)}).ok());
  auto later = queue_->NextLook();
  ASSERT_TRUE(later.ok());
  EXPECT_GT(*later, before + std::chrono::minutes(59));
  // Just after the ready time: the rule's margin is half a millisecond.
  EXPECT_LE(*later, std::chrono::steady_clock::now() + std::chrono::hours(1) +
                        milliseconds(1));
  ASSERT_TRUE(queue_->Send({.payload = "now"}).ok());
  auto now = queue_->NextLook();
  ASSERT_TRUE(now.ok());
  EXPECT_LE(*now, std::chrono::steady_clock::now())
      << "a message ready now: look now";
}

// A claim that got nothing while a message is ready (another consumer's
// group holds it back) waits for the ack that lets it through, not for
// the ready time that has passed: it looks again at the safety net only.
TEST_F(ReadySubscriptionTest, ReadyMessageBlockedByItsGroupWaitsForAnAck) {
  store_->TEST_set_poll_interval(std::chrono::hours(1));
  auto q = store_->CreateQueue("ordered", {.groups = GroupMode::kOrdered});
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  std::vector<Message> batch = {{.payload = "a", .group = "g"},
                                {.payload = "b", .group = "g"}};
  ASSERT_TRUE(q->SendBatch(batch).ok());
  auto first = q->Claim();
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->size(), 1u);
  ClaimNote note;
  auto second = q->Claim({}, &note);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(second->empty()) << "b waits for a";
  const auto before = std::chrono::steady_clock::now();
  auto at = q->NextLook(&note);
  ASSERT_TRUE(at.ok());
  EXPECT_GE(*at, before + std::chrono::minutes(59));
  auto peek = q->NextLook();
  ASSERT_TRUE(peek.ok());
  EXPECT_LE(*peek, std::chrono::steady_clock::now())
      << "a read alone sees b ready";
}

}  // namespace
}  // namespace sqlq

namespace sqlq::core {
namespace {

TEST(WakeHub, AsyncWaiterIsCalledInsteadOfSleepingAndConsumeClears) {
  WakeHub hub;
  int calls = 0;
  WakeHub::Waiter async_waiter;
  async_waiter.on_signal = [&] { ++calls; };
  WakeHub::Waiter other;
  hub.Register(async_waiter, 3);
  hub.Register(other, 3);
  hub.Notify(3, 1);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(hub.Consume(async_waiter));
  EXPECT_FALSE(hub.Consume(async_waiter));
  // After consuming it went to the back: the next wake goes to `other`.
  hub.Notify(3, 1);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(hub.Wait(other, std::chrono::steady_clock::now()));
  hub.NotifyAll();
  EXPECT_EQ(calls, 2);
  hub.Unregister(async_waiter);
  hub.Unregister(other);
}

}  // namespace
}  // namespace sqlq::core
