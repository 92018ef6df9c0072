// Cron expressions, their ticks in time zones through daylight saving
// changes, and which ticks a scheduler pass sends (docs/semantics.md,
// "Schedules").

#include "core/cron.h"

#include <gtest/gtest.h>

#include <ctime>
#include <string>
#include <vector>

#include "core/schedules.h"

namespace sqlq::core {
namespace {

// A UTC time.
Timestamp At(int y, int mo, int d, int h, int mi, int s = 0) {
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  return Timestamp(std::chrono::seconds(timegm(&tm)));
}

std::string Utc(Timestamp t) {
  const std::time_t secs =
      std::chrono::floor<std::chrono::seconds>(t).time_since_epoch().count();
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// The first `n` ticks of `expr` in `zone` after `after`, in UTC.
std::vector<std::string> Ticks(const std::string& expr, const std::string& zone,
                               Timestamp after, int n) {
  auto cron = Cron::Parse(expr);
  EXPECT_TRUE(cron.ok()) << cron.status().ToString();
  auto z = Zone::Load(zone);
  EXPECT_TRUE(z.ok()) << z.status().ToString();
  std::vector<std::string> out;
  if (!cron.ok() || !z.ok()) return out;
  std::optional<Timestamp> t = after;
  for (int i = 0; i < n; ++i) {
    t = cron->Next(*t, *z);
    if (!t) break;
    out.push_back(Utc(*t));
  }
  return out;
}

using Strings = std::vector<std::string>;

TEST(Cron, FieldsStepsRangesListsAndNames) {
  EXPECT_EQ(Ticks("*/20 9-10 * * *", "UTC", At(2026, 6, 1, 0, 0), 7),
            (Strings{"2026-06-01 09:00:00", "2026-06-01 09:20:00",
                     "2026-06-01 09:40:00", "2026-06-01 10:00:00",
                     "2026-06-01 10:20:00", "2026-06-01 10:40:00",
                     "2026-06-02 09:00:00"}));
  EXPECT_EQ(Ticks("0 9 * * mon-fri", "UTC", At(2026, 6, 5, 10, 0), 2),
            (Strings{"2026-06-08 09:00:00", "2026-06-09 09:00:00"}))
      << "Friday 10:00: the next is Monday";
  EXPECT_EQ(Ticks("0 9 * * 1-5", "UTC", At(2026, 6, 5, 10, 0), 2),
            Ticks("0 9 * * MON-FRI", "UTC", At(2026, 6, 5, 10, 0), 2));
  EXPECT_EQ(Ticks("15,45 0 1 jan,JUL *", "UTC", At(2026, 1, 2, 0, 0), 3),
            (Strings{"2026-07-01 00:15:00", "2026-07-01 00:45:00",
                     "2027-01-01 00:15:00"}));
  EXPECT_EQ(Ticks("0 12 * * 7", "UTC", At(2026, 6, 1, 0, 0), 1),
            (Strings{"2026-06-07 12:00:00"}))
      << "7 is Sunday too";
  EXPECT_EQ(Ticks("5/20 * * * *", "UTC", At(2026, 6, 1, 0, 0), 3),
            (Strings{"2026-06-01 00:05:00", "2026-06-01 00:25:00",
                     "2026-06-01 00:45:00"}));
}

TEST(Cron, BothDayFieldsRestrictedMatchEither) {
  // 2026-06-02 is a Tuesday: the Mondays of June, and July 1st.
  EXPECT_EQ(Ticks("0 0 1 * MON", "UTC", At(2026, 6, 2, 0, 0), 6),
            (Strings{"2026-06-08 00:00:00", "2026-06-15 00:00:00",
                     "2026-06-22 00:00:00", "2026-06-29 00:00:00",
                     "2026-07-01 00:00:00", "2026-07-06 00:00:00"}));
}

TEST(Cron, MacrosAndSeconds) {
  EXPECT_EQ(Ticks("@hourly", "UTC", At(2026, 6, 1, 10, 30), 2),
            (Strings{"2026-06-01 11:00:00", "2026-06-01 12:00:00"}));
  EXPECT_EQ(Ticks("@daily", "UTC", At(2026, 6, 1, 10, 30), 1),
            (Strings{"2026-06-02 00:00:00"}));
  EXPECT_EQ(Ticks("@weekly", "UTC", At(2026, 6, 1, 10, 30), 1),
            (Strings{"2026-06-07 00:00:00"}));
  EXPECT_EQ(Ticks("@monthly", "UTC", At(2026, 6, 1, 10, 30), 1),
            (Strings{"2026-07-01 00:00:00"}));
  EXPECT_EQ(Ticks("@yearly", "UTC", At(2026, 6, 1, 10, 30), 1),
            (Strings{"2027-01-01 00:00:00"}));
  EXPECT_EQ(Ticks("*/10 * * * * *", "UTC", At(2026, 6, 1, 12, 0, 5), 2),
            (Strings{"2026-06-01 12:00:10", "2026-06-01 12:00:20"}));
}

TEST(Cron, AfterIsExclusive) {
  EXPECT_EQ(Ticks("0 * * * *", "UTC", At(2026, 6, 1, 10, 0), 1),
            (Strings{"2026-06-01 11:00:00"}));
}

// Europe/Berlin springs forward on 2026-03-29 at 02:00 CET (01:00 UTC) to
// 03:00 CEST, and falls back on 2026-10-25 at 03:00 CEST (01:00 UTC) to
// 02:00 CET.
TEST(Cron, SpringForwardTicksOnceAtTheJump) {
  EXPECT_EQ(Ticks("30 2 * * *", "Europe/Berlin", At(2026, 3, 27, 12, 0), 3),
            (Strings{"2026-03-28 01:30:00",    // 02:30 CET
                     "2026-03-29 01:00:00",    // no 02:30: the jump
                     "2026-03-30 00:30:00"}))  // 02:30 CEST
      << "a daily job in the skipped hour still runs that day";
  // Every half hour: 02:00 and 02:30 do not exist; they make one tick with
  // 03:00, at the jump.
  EXPECT_EQ(Ticks("*/30 * * * *", "Europe/Berlin", At(2026, 3, 29, 0, 0), 3),
            (Strings{"2026-03-29 00:30:00",    // 01:30 CET
                     "2026-03-29 01:00:00",    // 03:00 CEST
                     "2026-03-29 01:30:00"}))  // 03:30 CEST
      << "no tick twice at the jump";
}

TEST(Cron, FallBackTicksOnceUnlessTheHourIsEvery) {
  EXPECT_EQ(Ticks("30 2 * * *", "Europe/Berlin", At(2026, 10, 24, 12, 0), 2),
            (Strings{"2026-10-25 00:30:00",    // the first 02:30 (CEST)
                     "2026-10-26 01:30:00"}))  // not the second: next day
      << "a daily job in the repeated hour runs once";
  EXPECT_EQ(Ticks("*/30 * * * *", "Europe/Berlin", At(2026, 10, 24, 23, 59), 5),
            (Strings{"2026-10-25 00:00:00",    // 02:00 CEST
                     "2026-10-25 00:30:00",    // 02:30 CEST
                     "2026-10-25 01:00:00",    // 02:00 CET
                     "2026-10-25 01:30:00",    // 02:30 CET
                     "2026-10-25 02:00:00"}))  // 03:00 CET
      << "an every-hour schedule keeps its pace through the repeated hour";
  // Looking from inside the repeated hour finds the rest of it.
  EXPECT_EQ(Ticks("*/30 * * * *", "Europe/Berlin", At(2026, 10, 25, 0, 45), 2),
            (Strings{"2026-10-25 01:00:00", "2026-10-25 01:30:00"}));
}

TEST(Cron, AnExpressionThatNeverFiresHasNoTick) {
  auto cron = Cron::Parse("0 0 30 2 *");
  ASSERT_TRUE(cron.ok());
  auto utc = Zone::Load("UTC");
  ASSERT_TRUE(utc.ok());
  EXPECT_FALSE(cron->Next(At(2026, 1, 1, 0, 0), *utc).has_value());
}

TEST(Cron, BadExpressionsSayWhatIsWrong) {
  const std::pair<const char*, const char*> bad[] = {
      {"", "has 0 fields"},
      {"* * * *", "has 4 fields"},
      {"* * * * * * *", "has 7 fields"},
      {"60 * * * *", "minute field '60': 60 is out of range 0-59"},
      {"* 24 * * *", "hour field"},
      {"* * 0 * *", "day-of-month field"},
      {"* * * 13 *", "month field"},
      {"* * * * 8", "day-of-week field"},
      {"*/0 * * * *", "bad step"},
      {"5-1 * * * *", "runs backwards"},
      {"@often", "unknown cron macro"},
      {"a * * * *", "not a number"},
      {"* * * FOO *", "unknown name 'FOO'"},
      {"1,,2 * * * *", "a value is missing"},
  };
  for (auto [expr, why] : bad) {
    auto c = Cron::Parse(expr);
    ASSERT_FALSE(c.ok()) << expr;
    EXPECT_EQ(c.status().code(), Code::kInvalidArgument);
    EXPECT_NE(c.status().message().find(why), std::string::npos)
        << expr << ": " << c.status().message();
  }
}

TEST(Zone, UnknownNamesAndPathsAreRefused) {
  EXPECT_TRUE(Zone::Load("UTC").ok());
  EXPECT_TRUE(Zone::Load("America/New_York").ok());
  for (const char* bad : {"Mars/Olympus", "../../etc/passwd", "/etc/localtime",
                          "", "Europe/Berlin\n"}) {
    auto z = Zone::Load(bad);
    EXPECT_EQ(z.status().code(), Code::kInvalidArgument) << bad;
  }
}

// "localtime" is the host's own zone: a new schedule may not use it (it
// would fire at other instants on a server set up otherwise), while a
// stored one still loads its zone and ticks.
TEST(Zone, LocaltimeLoadsForStoredSchedulesButNoNewOneTakesIt) {
  EXPECT_TRUE(Zone::Load("localtime").ok());
  ScheduleOptions o{.cron = "0 3 * * *", .queue = "jobs"};
  o.message.payload = "x";
  const Timestamp now = At(2026, 6, 1, 10, 0);
  EXPECT_TRUE(ValidateSchedule("nightly", o, now).ok());
  o.time_zone = "localtime";
  auto refused = ValidateSchedule("nightly", o, now);
  EXPECT_EQ(refused.status().code(), Code::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(
                "'localtime' means each server's own zone"),
            std::string::npos)
      << refused.status().message();
}

class TicksDueTest : public ::testing::Test {
 protected:
  DueTicks Due(int catch_up, Timestamp next, Timestamp now,
               const char* expr = "* * * * *") {
    auto cron = Cron::Parse(expr);
    auto utc = Zone::Load("UTC");
    ScheduleInfo info;
    info.name = "every-minute";
    info.options.catch_up = catch_up;
    info.next_tick = next;
    return TicksDue(*cron, *utc, info, now);
  }
  const Timestamp t0_ = At(2026, 6, 1, 10, 0);
};

TEST_F(TicksDueTest, OnTimeTickIsSent) {
  DueTicks d = Due(0, t0_, t0_ + std::chrono::seconds(2));
  ASSERT_EQ(d.send.size(), 1u);
  EXPECT_EQ(d.send[0], t0_);
  EXPECT_EQ(d.skipped, 0);
  EXPECT_EQ(d.next, t0_ + std::chrono::minutes(1));
}

TEST_F(TicksDueTest, EveryTickWithinTheGraceIsOnTime) {
  DueTicks d = Due(0, t0_, t0_ + std::chrono::seconds(2), "* * * * * *");
  EXPECT_EQ(d.send.size(), 3u);
  EXPECT_EQ(d.skipped, 0);
}

TEST_F(TicksDueTest, MissedTicksAreSkippedOrCaughtUp) {
  const Timestamp now =
      t0_ + std::chrono::minutes(10) + std::chrono::seconds(5);
  // Ticks 10:00 .. 10:10 are due; 10:10 is on time, the ten before missed.
  DueTicks skip = Due(0, t0_, now);
  ASSERT_EQ(skip.send.size(), 1u);
  EXPECT_EQ(skip.send[0], t0_ + std::chrono::minutes(10));
  EXPECT_EQ(skip.skipped, 10);
  DueTicks three = Due(3, t0_, now);
  ASSERT_EQ(three.send.size(), 4u);
  EXPECT_EQ(three.send[0], t0_ + std::chrono::minutes(7));
  EXPECT_EQ(three.send[3], t0_ + std::chrono::minutes(10));
  EXPECT_EQ(three.skipped, 7);
  DueTicks all = Due(1000, t0_, now);
  EXPECT_EQ(all.send.size(), 11u);
  EXPECT_EQ(all.skipped, 0);
  EXPECT_EQ(all.next, t0_ + std::chrono::minutes(11));
}

TEST_F(TicksDueTest, ATickPastTheGraceIsMissed) {
  // Every five minutes, looked at 10:11:30: 10:00, 10:05 and 10:10 are
  // due, and even the last is 90 s late.
  const Timestamp now =
      t0_ + std::chrono::minutes(11) + std::chrono::seconds(30);
  DueTicks skip = Due(0, t0_, now, "*/5 * * * *");
  EXPECT_TRUE(skip.send.empty());
  EXPECT_EQ(skip.skipped, 3);
  EXPECT_EQ(skip.next, t0_ + std::chrono::minutes(15));
  DueTicks two = Due(2, t0_, now, "*/5 * * * *");
  ASSERT_EQ(two.send.size(), 2u);
  EXPECT_EQ(two.send[0], t0_ + std::chrono::minutes(5));
  EXPECT_EQ(two.send[1], t0_ + std::chrono::minutes(10));
  EXPECT_EQ(two.skipped, 1);
}

TEST_F(TicksDueTest, TickMessagesCarryTheScheduleAndTheTick) {
  ScheduleInfo info;
  info.name = "nightly";
  info.options.message = {.payload = "go", .headers = {{"team", "ops"}}};
  Message m = TickMessage(info, At(2026, 3, 29, 1, 0));
  EXPECT_EQ(m.payload, "go");
  EXPECT_EQ(m.headers.at("team"), "ops");
  EXPECT_EQ(m.headers.at("sqlq-schedule"), "nightly");
  EXPECT_EQ(m.headers.at("sqlq-tick"), "2026-03-29T01:00:00Z");
  EXPECT_EQ(m.dedup_key, "sqlq-schedule:nightly:1774746000000000");
}

}  // namespace
}  // namespace sqlq::core
