// BackoffDelay: exponential, capped, with equal jitter in [d/2, d].

#include "core/backoff.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>

#include "core/validate.h"

namespace sqlq::core {
namespace {

using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

std::int64_t Ms(Duration d) { return d.count(); }

// The largest draw below 1: the top of the jitter range.
const double kTop = std::nextafter(1.0, 0.0);

TEST(Backoff, FirstRetryIsBetweenHalfTheBaseAndTheBase) {
  EXPECT_EQ(Ms(BackoffDelay(seconds(1), minutes(10), 1, 0.0)), 500);
  EXPECT_EQ(Ms(BackoffDelay(seconds(1), minutes(10), 1, 0.5)), 750);
  EXPECT_EQ(Ms(BackoffDelay(seconds(1), minutes(10), 1, 0.999)), 1000);
  EXPECT_EQ(Ms(BackoffDelay(seconds(1), minutes(10), 1, kTop)), 1000);
}

TEST(Backoff, DoublesWithEveryAttempt) {
  for (int attempt = 1; attempt <= 8; ++attempt) {
    SCOPED_TRACE("attempt " + std::to_string(attempt));
    const std::int64_t nominal = 1000LL << (attempt - 1);
    EXPECT_EQ(Ms(BackoffDelay(seconds(1), minutes(10), attempt, 0.0)),
              nominal / 2);
    EXPECT_EQ(Ms(BackoffDelay(seconds(1), minutes(10), attempt, kTop)),
              nominal);
    const std::int64_t high =
        Ms(BackoffDelay(seconds(1), minutes(10), attempt, 0.999));
    EXPECT_LE(high, nominal);
    EXPECT_GE(high, nominal - nominal / 1000);
  }
}

TEST(Backoff, IsCappedAtTheMaximum) {
  // 1s * 2^9 = 512s < 600s; 1s * 2^10 = 1024s is capped to 600s.
  EXPECT_EQ(Ms(BackoffDelay(seconds(1), minutes(10), 10, kTop)), 512000);
  EXPECT_EQ(Ms(BackoffDelay(seconds(1), minutes(10), 11, 0.0)), 300000);
  EXPECT_EQ(Ms(BackoffDelay(seconds(1), minutes(10), 11, kTop)), 600000);
  EXPECT_EQ(Ms(BackoffDelay(seconds(1), minutes(10), 50, kTop)), 600000);
  EXPECT_LE(Ms(BackoffDelay(seconds(1), minutes(10), 50, 0.999)), 600000);
}

TEST(Backoff, HugeAttemptDoesNotOverflow) {
  for (Duration max : {Duration(minutes(10)), kMaxDelay}) {
    SCOPED_TRACE("max " + std::to_string(max.count()) + "ms");
    for (int attempt : {63, 64, 1000, 1000000, INT_MAX}) {
      SCOPED_TRACE("attempt " + std::to_string(attempt));
      EXPECT_EQ(Ms(BackoffDelay(seconds(1), max, attempt, 0.0)),
                max.count() / 2);
      EXPECT_EQ(Ms(BackoffDelay(seconds(1), max, attempt, kTop)), max.count());
      const std::int64_t high =
          Ms(BackoffDelay(seconds(1), max, attempt, 0.999));
      EXPECT_LE(high, max.count());
      EXPECT_GE(high, max.count() - max.count() / 1000);
    }
  }
}

TEST(Backoff, AttemptBelowOneCountsAsTheFirst) {
  EXPECT_EQ(Ms(BackoffDelay(seconds(2), minutes(1), 0, kTop)), 2000);
  EXPECT_EQ(Ms(BackoffDelay(seconds(2), minutes(1), -5, 0.0)), 1000);
}

TEST(Backoff, ZeroBaseRetriesAtOnce) {
  EXPECT_EQ(Ms(BackoffDelay(milliseconds(0), minutes(1), 5, kTop)), 0);
}

TEST(Backoff, RandomDrawsStayWithinTheJitterRange) {
  for (int attempt = 1; attempt <= 12; ++attempt) {
    const std::int64_t nominal =
        std::min<std::int64_t>(250LL << (attempt - 1), 60000);
    for (int i = 0; i < 200; ++i) {
      const std::int64_t d =
          Ms(BackoffDelay(milliseconds(250), minutes(1), attempt));
      ASSERT_GE(d, nominal / 2) << "attempt " << attempt;
      ASSERT_LE(d, nominal) << "attempt " << attempt;
    }
  }
}

TEST(Backoff, RandomDrawsSpreadOut) {
  // Equal jitter exists so that a burst of failures does not come back as
  // a burst: 100 draws of a 10 s nominal delay are not all alike.
  std::set<std::int64_t> seen;
  for (int i = 0; i < 100; ++i) {
    seen.insert(Ms(BackoffDelay(seconds(10), minutes(1), 1)));
  }
  EXPECT_GT(seen.size(), 10u);
}

}  // namespace
}  // namespace sqlq::core
