// Review: a wake-up given to a waiter that then leaves without sleeping
// (its claim returned other messages, or failed) is lost; the next waiter of
// the queue sleeps on, up to the 1 s safety-net poll, although a message it
// could claim is ready.
//
// Scenario at queue level (src/core/queue.cc Claim + src/core/wake_hub.cc):
//   waiters A (registered first, so first in the list) and B of queue q;
//   A wakes on its own timer (poll tick, or the next-ready time of an expired
//   lease L) and is running claim_once; meanwhile a send of M commits and
//   Notify(q, 1) picks A (first, not signalled). A's claim (max 1) takes L,
//   which sorts before M (earlier ready time); A returns and Unregister()s
//   with signalled == true. B was never signalled: M waits until B's own
//   timer (up to poll_interval() = 1 s).

#include <gtest/gtest.h>

#include <chrono>

#include "core/wake_hub.h"

namespace sqlq::core {
namespace {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TEST(WakeHubReview, SignalOfAWaiterThatLeavesUnusedPassesToTheNextWaiter) {
  WakeHub hub;
  WakeHub::Waiter a, b;
  hub.Register(a, 7);
  hub.Register(b, 7);
  hub.Notify(7, 1);   // one new message: goes to a, the oldest
  hub.Unregister(a);  // a's claim returned other work; it never Wait()s
  // b is the only waiter left and a message is ready for it.
  EXPECT_TRUE(hub.Wait(b, SteadyClock::now() + milliseconds(200)))
      << "the wake-up meant for the new message was dropped with a";
  hub.Unregister(b);
}

}  // namespace
}  // namespace sqlq::core
