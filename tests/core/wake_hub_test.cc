// WakeHub: where waiting claims sleep and what wakes them.

#include "core/wake_hub.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

namespace sqlq::core {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using SteadyClock = std::chrono::steady_clock;

// Wait() with a deadline already passed: only reports (and clears) a signal.
bool Signalled(WakeHub& hub, WakeHub::Waiter& w) {
  return hub.Wait(w, SteadyClock::now() - seconds(1));
}

TEST(WakeHub, NotifyOfOneWakesExactlyOneOfTwoWaitersTheOldestFirst) {
  WakeHub hub;
  WakeHub::Waiter w1, w2;
  hub.Register(w1, 7);
  hub.Register(w2, 7);
  hub.Notify(7, 1);
  EXPECT_TRUE(Signalled(hub, w1));
  EXPECT_FALSE(Signalled(hub, w2));
  hub.Unregister(w1);
  hub.Unregister(w2);
}

TEST(WakeHub, NotifyWakesAsManyWaitersAsItIsTold) {
  WakeHub hub;
  WakeHub::Waiter w1, w2, w3;
  hub.Register(w1, 7);
  hub.Register(w2, 7);
  hub.Register(w3, 7);
  hub.Notify(7, 2);
  EXPECT_TRUE(Signalled(hub, w1));
  EXPECT_TRUE(Signalled(hub, w2));
  EXPECT_FALSE(Signalled(hub, w3));
  hub.Notify(7, 100);
  EXPECT_TRUE(Signalled(hub, w1));
  EXPECT_TRUE(Signalled(hub, w2));
  EXPECT_TRUE(Signalled(hub, w3));
  hub.Unregister(w1);
  hub.Unregister(w2);
  hub.Unregister(w3);
}

TEST(WakeHub, NotifyPassesOverWaitersAlreadySignalled) {
  WakeHub hub;
  WakeHub::Waiter w1, w2;
  hub.Register(w1, 7);
  hub.Register(w2, 7);
  // Two sends before anyone woke up: two waiters, not one twice.
  hub.Notify(7, 1);
  hub.Notify(7, 1);
  EXPECT_TRUE(Signalled(hub, w1));
  EXPECT_TRUE(Signalled(hub, w2));
  hub.Unregister(w1);
  hub.Unregister(w2);
}

TEST(WakeHub, NotifyWakesOnlyWaitersOfThatQueue) {
  WakeHub hub;
  WakeHub::Waiter other;
  hub.Register(other, 8);
  hub.Notify(7, 5);
  EXPECT_FALSE(Signalled(hub, other));
  hub.Unregister(other);
}

TEST(WakeHub, NotifyAllWakesEveryWaiterOfEveryQueue) {
  WakeHub hub;
  WakeHub::Waiter a1, a2, b;
  hub.Register(a1, 1);
  hub.Register(a2, 1);
  hub.Register(b, 2);
  hub.NotifyAll();
  EXPECT_TRUE(Signalled(hub, a1));
  EXPECT_TRUE(Signalled(hub, a2));
  EXPECT_TRUE(Signalled(hub, b));
  hub.Unregister(a1);
  hub.Unregister(a2);
  hub.Unregister(b);
}

TEST(WakeHub, WokenWaiterGoesToTheBackOfTheLine) {
  WakeHub hub;
  WakeHub::Waiter w1, w2;
  hub.Register(w1, 7);
  hub.Register(w2, 7);
  hub.Notify(7, 1);
  ASSERT_TRUE(Signalled(hub, w1));
  hub.Notify(7, 1);
  EXPECT_FALSE(Signalled(hub, w1));
  EXPECT_TRUE(Signalled(hub, w2));
  hub.Unregister(w1);
  hub.Unregister(w2);
}

TEST(WakeHub, SignalBetweenRegisterAndWaitIsNotLost) {
  WakeHub hub;
  WakeHub::Waiter w;
  hub.Register(w, 7);
  // A send commits after the claim looked and found nothing, before it
  // went to sleep.
  hub.Notify(7, 1);
  const auto t0 = SteadyClock::now();
  EXPECT_TRUE(hub.Wait(w, t0 + seconds(30)));
  EXPECT_LT(SteadyClock::now() - t0, seconds(5));
  hub.Unregister(w);
}

TEST(WakeHub, SleepingWaiterIsWokenByNotifyFromAnotherThread) {
  WakeHub hub;
  WakeHub::Waiter w;
  hub.Register(w, 7);
  std::promise<void> started;
  auto woke = std::async(std::launch::async, [&] {
    started.set_value();
    const auto t0 = SteadyClock::now();
    bool signalled = hub.Wait(w, t0 + seconds(30));
    return std::make_pair(signalled, SteadyClock::now() - t0);
  });
  started.get_future().wait();
  hub.Notify(7, 1);
  auto [signalled, elapsed] = woke.get();
  EXPECT_TRUE(signalled);
  EXPECT_LT(elapsed, seconds(5));
  hub.Unregister(w);
}

TEST(WakeHub, WaitWithoutSignalReturnsFalseAtTheDeadline) {
  WakeHub hub;
  WakeHub::Waiter w;
  hub.Register(w, 7);
  const auto t0 = SteadyClock::now();
  EXPECT_FALSE(hub.Wait(w, t0 + milliseconds(50)));
  EXPECT_GE(SteadyClock::now() - t0, milliseconds(50));
  hub.Unregister(w);
}

TEST(WakeHub, UnregisteredWaiterIsNotWoken) {
  WakeHub hub;
  WakeHub::Waiter w1, w2;
  hub.Register(w1, 7);
  hub.Register(w2, 7);
  EXPECT_EQ(hub.waiting(), 2u);
  hub.Unregister(w1);
  EXPECT_EQ(hub.waiting(), 1u);
  // The one wake-up goes to the waiter still there, not to the one gone.
  hub.Notify(7, 1);
  EXPECT_TRUE(Signalled(hub, w2));
  hub.Unregister(w2);
  EXPECT_EQ(hub.waiting(), 0u);
  hub.Unregister(w2);  // twice is harmless
  EXPECT_EQ(hub.waiting(), 0u);
}

// A waiter counts as asleep only while it sleeps in Wait with no signal to
// end the sleep: tests act on a sleeping claim only once nothing else would
// make it look.
TEST(WakeHub, AsleepCountsOnlyWaitersSleepingWithNoSignalPending) {
  WakeHub hub;
  WakeHub::Waiter w;
  hub.Register(w, 7);
  EXPECT_EQ(hub.asleep(), 0u);  // registered, not sleeping
  auto woken = std::async(std::launch::async, [&] {
    return hub.Wait(w, SteadyClock::now() + std::chrono::hours(1));
  });
  while (hub.asleep() == 0) std::this_thread::yield();
  hub.Notify(7, 1);
  // Signalled: no longer asleep, even before its thread runs again.
  EXPECT_EQ(hub.asleep(), 0u);
  EXPECT_TRUE(woken.get());
  EXPECT_EQ(hub.asleep(), 0u);
  hub.Unregister(w);
}

}  // namespace
}  // namespace sqlq::core
