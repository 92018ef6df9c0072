// NextLook: when a waiting claim looks again, the one rule of the library's
// waiting claims and the server's parked ones.

#include "core/next_look.h"

#include <gtest/gtest.h>

#include <chrono>

namespace sqlq::core {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::seconds;

const SteadyTime kNow = SteadyTime() + std::chrono::hours(1);
constexpr milliseconds kNet = seconds(1);

TEST(NextLook, NothingPendingLooksAtTheSafetyNet) {
  ClaimNote note;
  EXPECT_EQ(NextLook(kNow, kNet, {.claim = &note}), kNow + kNet);
  EXPECT_EQ(NextLook(kNow, kNet, {}), kNow + kNet);
  EXPECT_EQ(NextLook(kNow, milliseconds(20), {}), kNow + milliseconds(20))
      << "the store's poll interval is the safety net";
}

TEST(NextLook, DelayedMessageIsLookedForJustAfterItsReadyTime) {
  ClaimNote note;
  EXPECT_EQ(
      NextLook(kNow, kNet, {.ready_in = milliseconds(300), .claim = &note}),
      kNow + milliseconds(300) + kReadyMargin);
  EXPECT_EQ(NextLook(kNow, kNet, {.ready_in = milliseconds(300)}),
            kNow + milliseconds(300) + kReadyMargin);
  EXPECT_EQ(NextLook(kNow, kNet, {.ready_in = seconds(5), .claim = &note}),
            kNow + kNet)
      << "no later than the safety net";
}

TEST(NextLook, AReadThatFindsAMessageReadyLooksNow) {
  EXPECT_EQ(NextLook(kNow, kNet, {.ready_in = microseconds(0)}), kNow);
  EXPECT_EQ(NextLook(kNow, kNet, {.ready_in = microseconds(-70)}), kNow);
  EXPECT_EQ(NextLook(kNow, kNet,
                     {.ready_in = microseconds(0), .blocked_by_groups = true}),
            kNow)
      << "only a claim can tell that the group holds it back";
}

TEST(NextLook, ReadyMessageAnEmptyClaimMissedIsLookedForAfterTheMargin) {
  // Ready between the claim and the read (a delay that ran out): looked for
  // at once, with the margin against the two clocks.
  ClaimNote note;
  EXPECT_EQ(
      NextLook(kNow, kNet, {.ready_in = microseconds(-70), .claim = &note}),
      kNow + kReadyMargin);
}

TEST(NextLook, ReadyMessageHeldBackByItsGroupWaitsForAnAck) {
  ClaimNote note;
  EXPECT_EQ(NextLook(kNow, kNet,
                     {.ready_in = microseconds(0),
                      .claim = &note,
                      .blocked_by_groups = true}),
            kNow + kNet);
  EXPECT_EQ(NextLook(kNow, kNet,
                     {.ready_in = milliseconds(40),
                      .claim = &note,
                      .blocked_by_groups = true}),
            kNow + milliseconds(40) + kReadyMargin)
      << "a message ready later is looked for then";
}

TEST(NextLook, ClaimHeldBackByALimitLooksAtItsRetryAfter) {
  ClaimNote note{.limited_by = "rate_limit", .retry_after = milliseconds(250)};
  EXPECT_EQ(NextLook(kNow, kNet, {.ready_in = microseconds(0), .claim = &note}),
            kNow + milliseconds(250));
  EXPECT_EQ(NextLook(kNow, kNet, {.claim = &note}), kNow + milliseconds(250));
  note.retry_after = seconds(30);
  EXPECT_EQ(NextLook(kNow, kNet, {.claim = &note}), kNow + kNet);
}

TEST(NextLook, ClaimOfAPausedQueueWaitsForResume) {
  ClaimNote note;
  EXPECT_EQ(
      NextLook(kNow, kNet,
               {.ready_in = microseconds(0), .claim = &note, .paused = true}),
      kNow + kNet);
  EXPECT_EQ(
      NextLook(kNow, kNet,
               {.ready_in = milliseconds(40), .claim = &note, .paused = true}),
      kNow + kNet);
  EXPECT_EQ(NextLook(kNow, kNet, {.ready_in = microseconds(0), .paused = true}),
            kNow)
      << "a read alone does not know the claim would get nothing";
}

TEST(NextLook, BlockedByGroupsIsOrderedOrAGroupLimit) {
  EXPECT_FALSE(BlockedByGroups({}));
  EXPECT_FALSE(BlockedByGroups({.groups = GroupMode::kFair}));
  EXPECT_TRUE(BlockedByGroups({.groups = GroupMode::kOrdered}));
  EXPECT_TRUE(BlockedByGroups({.groups = GroupMode::kFair, .group_limit = 2}));
}

}  // namespace
}  // namespace sqlq::core
