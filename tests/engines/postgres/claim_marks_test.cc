// ClaimMarks on its own, without a server: where claims start reading, when
// they read the whole queue again, and what moves a mark back.

#include "engines/postgres/claim_marks.h"

#include <gtest/gtest.h>

#include <chrono>

namespace sqlq::engines::postgres {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Time = ClaimMarks::SteadyClock::time_point;

constexpr std::int64_t kQueue = 7;
constexpr std::int64_t kNow = 1'000'000'000;  // store clock, microseconds

bool Same(const ClaimKey& a, const ClaimKey& b) {
  return a.priority == b.priority && a.ready_us == b.ready_us && a.id == b.id;
}

class ClaimMarksTest : public ::testing::Test {
 protected:
  // A claim that starts at `at`, takes `last` and commits.
  ClaimMarks::Plan Claim(std::optional<ClaimKey> last, Time at,
                         milliseconds cost = milliseconds(1)) {
    ClaimMarks::Plan plan = marks_.Start(kQueue, at);
    marks_.Advance(kQueue, plan, last, kNow, cost, at + cost);
    return plan;
  }

  ClaimMarks marks_;
  Time t0_ = ClaimMarks::SteadyClock::now();
};

TEST_F(ClaimMarksTest, ClaimOrderIsPriorityDownThenReadyTimeThenId) {
  EXPECT_TRUE(Before({5, 100, 1}, {4, 0, 0}));
  EXPECT_TRUE(Before({5, 100, 9}, {5, 101, 1}));
  EXPECT_TRUE(Before({5, 100, 1}, {5, 100, 2}));
  EXPECT_FALSE(Before({5, 100, 2}, {5, 100, 2}));
  EXPECT_FALSE(Before({-1, 0, 0}, {3, 0, 0}));
}

TEST_F(ClaimMarksTest, TheFirstClaimReadsTheWholeQueueAndLaterOnesTheMark) {
  EXPECT_FALSE(Claim(ClaimKey{0, kNow - 1'000'000, 42}, t0_).from);
  ASSERT_TRUE(marks_.TEST_mark(kQueue));
  EXPECT_TRUE(Same(*marks_.TEST_mark(kQueue), {0, kNow - 1'000'000, 42}));
  const auto plan = marks_.Start(kQueue, t0_ + milliseconds(1));
  ASSERT_TRUE(plan.from);
  EXPECT_TRUE(Same(*plan.from, {0, kNow - 1'000'000, 42}));
}

TEST_F(ClaimMarksTest, AMarkStaysALagBehindTheClaimsClock) {
  Claim(ClaimKey{3, kNow - 10, 42}, t0_);
  const ClaimKey mark = *marks_.TEST_mark(kQueue);
  EXPECT_EQ(mark.priority, 3);
  EXPECT_EQ(mark.ready_us, kNow - marks_.options().lag.count());
  EXPECT_EQ(mark.id, 0);
}

TEST_F(ClaimMarksTest, AMarkOnlyMovesForward) {
  Claim(ClaimKey{0, 500, 5}, t0_);
  Claim(ClaimKey{0, 400, 9}, t0_ + milliseconds(1));
  EXPECT_TRUE(Same(*marks_.TEST_mark(kQueue), {0, 500, 5}));
  Claim(ClaimKey{-1, 100, 1}, t0_ + milliseconds(2));  // a lower priority
  EXPECT_TRUE(Same(*marks_.TEST_mark(kQueue), {-1, 100, 1}));
}

TEST_F(ClaimMarksTest, AClaimThatFindsNothingLeavesTheMark) {
  Claim(ClaimKey{0, 500, 5}, t0_);
  Claim(std::nullopt, t0_ + milliseconds(1));
  EXPECT_TRUE(Same(*marks_.TEST_mark(kQueue), {0, 500, 5}));
}

TEST_F(ClaimMarksTest, ALateWriteLowersTheMarkOfItsPriority) {
  Claim(ClaimKey{2, 500, 5}, t0_);
  marks_.Lower(kQueue, 300);
  EXPECT_TRUE(Same(*marks_.TEST_mark(kQueue), {2, 300, 0}));
  marks_.Lower(kQueue, 400);  // above the mark: nothing to do
  EXPECT_TRUE(Same(*marks_.TEST_mark(kQueue), {2, 300, 0}));
}

// A claim in flight when a write came late or a transaction rolled back may
// have skipped the rows concerned: it must not move the mark past them.
TEST_F(ClaimMarksTest, ClaimsInFlightAcrossALowerOrARollbackKeepTheirHands) {
  Claim(ClaimKey{0, 500, 5}, t0_);
  auto plan = marks_.Start(kQueue, t0_ + milliseconds(1));
  marks_.Lower(kQueue, 300);
  marks_.Advance(kQueue, plan, ClaimKey{0, 900, 9}, kNow, milliseconds(1),
                 t0_ + milliseconds(2));
  EXPECT_TRUE(Same(*marks_.TEST_mark(kQueue), {0, 300, 0}));

  plan = marks_.Start(kQueue, t0_ + milliseconds(3));
  marks_.ForgetAll();
  EXPECT_FALSE(marks_.TEST_mark(kQueue));
  marks_.Advance(kQueue, plan, ClaimKey{0, 900, 9}, kNow, milliseconds(1),
                 t0_ + milliseconds(4));
  EXPECT_FALSE(marks_.TEST_mark(kQueue));
  EXPECT_FALSE(marks_.Start(kQueue, t0_ + milliseconds(5)).from);
}

TEST_F(ClaimMarksTest, AWaitingClaimThatSeesAMessageBelowTheMarkForgetsIt) {
  Claim(ClaimKey{0, 500, 5}, t0_);
  marks_.ReadyAt(kQueue, 0, 600);  // above: locked by another claim
  marks_.ReadyAt(kQueue, 1, 100);  // another priority: read whole anyway
  EXPECT_TRUE(marks_.TEST_mark(kQueue));
  marks_.ReadyAt(kQueue, 0, 499);
  EXPECT_FALSE(marks_.TEST_mark(kQueue));
}

// Full reads come back after a multiple of what the last one cost, so that
// however slow they get they take a bounded share of the claims' time.
TEST_F(ClaimMarksTest, FullReadsRecurAfterAMultipleOfTheirCost) {
  const milliseconds cost(50);
  EXPECT_FALSE(Claim(ClaimKey{0, 500, 5}, t0_, cost).from);
  const auto interval = cost * ClaimMarks::kRescanFactor;
  const Time done = t0_ + cost;
  EXPECT_TRUE(marks_.Start(kQueue, done + interval - milliseconds(1)).from);
  EXPECT_FALSE(marks_.Start(kQueue, done + interval).from);
  // While that full read runs, the others keep to the mark.
  EXPECT_TRUE(marks_.Start(kQueue, done + interval + milliseconds(1)).from);
}

TEST_F(ClaimMarksTest, FullReadsRecurWithinBounds) {
  ClaimMarks::Options o;
  o.min_rescan = milliseconds(100);
  o.max_rescan = seconds(2);
  ClaimMarks marks(o);
  auto run = [&](Time at, milliseconds cost) {
    auto plan = marks.Start(kQueue, at);
    marks.Advance(kQueue, plan, ClaimKey{0, 500, 5}, kNow, cost, at + cost);
    return plan;
  };
  EXPECT_FALSE(run(t0_, milliseconds(0)).from);
  EXPECT_TRUE(run(t0_ + milliseconds(99), milliseconds(0)).from);
  EXPECT_FALSE(run(t0_ + milliseconds(100), seconds(1)).from);
  const Time done = t0_ + milliseconds(100) + seconds(1);
  EXPECT_TRUE(marks.Start(kQueue, done + milliseconds(1999)).from);
  EXPECT_FALSE(marks.Start(kQueue, done + seconds(2)).from);
}

}  // namespace
}  // namespace sqlq::engines::postgres
