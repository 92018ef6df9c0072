// Conformance of schedules (docs/semantics.md, "Schedules"): made, listed,
// paused and dropped; each tick sent exactly once whatever store runs the
// scheduler; one scheduler at a time through the lease; missed ticks
// skipped or caught up; bad input refused. Every engine runs it unchanged,
// on a ManualClock (2024-01-01T00:00:00Z, a Monday).

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "tests/conformance/engine_fixture.h"
#include "tests/conformance/raw_db.h"

namespace sqlq::test {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;

class ScheduleConformance : public EngineTest {
 protected:
  void SetUp() override {
    EngineTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_OK(store_->CreateQueue("jobs", {}).status());
  }
  ScheduleOptions Every(const std::string& cron, int catch_up = 0) {
    return {.cron = cron,
            .queue = "jobs",
            .message = {.payload = "tick", .headers = {{"team", "ops"}}},
            .catch_up = catch_up};
  }
  // Every message in the queue, claimed.
  std::vector<ClaimedMessage> Drain(Store& store) {
    auto q = store.Queue("jobs");
    EXPECT_TRUE(q.ok());
    auto r = q->Claim({.max = 1000});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : std::vector<ClaimedMessage>();
  }
};

TEST_P(ScheduleConformance, MadeListedPausedResumedAndDropped) {
  ASSERT_OK_AND_ASSIGN(
      ScheduleInfo made,
      store_->CreateSchedule("reports", {.cron = "30 9 * * mon-fri",
                                         .time_zone = "Europe/Berlin",
                                         .queue = "jobs",
                                         .message = {.payload = "go"}}));
  EXPECT_EQ(made.name, "reports");
  EXPECT_FALSE(made.paused);
  // Monday 2024-01-01 09:30 in Berlin (CET) is 08:30 UTC.
  ASSERT_TRUE(made.next_tick.has_value());
  EXPECT_EQ(*made.next_tick, ManualClock::kStart + std::chrono::hours(8) +
                                 std::chrono::minutes(30));
  EXPECT_FALSE(made.last_tick.has_value());
  ASSERT_OK_AND_ASSIGN(auto list, store_->ListSchedules());
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].options.time_zone, "Europe/Berlin");
  EXPECT_EQ(list[0].options.message.payload, "go");

  ASSERT_OK(store_->PauseSchedule("reports"));
  clock_->Advance(std::chrono::hours(9));
  ASSERT_OK_AND_ASSIGN(ScheduleRun run, store_->RunSchedules());
  EXPECT_FALSE(run.leader) << "no schedule ticks: no lease to take";
  EXPECT_EQ(run.sent, 0) << "a paused schedule sends nothing";
  ASSERT_OK(store_->ResumeSchedule("reports"));
  ASSERT_OK_AND_ASSIGN(ScheduleInfo resumed, store_->GetSchedule("reports"));
  EXPECT_FALSE(resumed.paused);
  // From the next tick after now: Tuesday's, not Monday's missed one.
  EXPECT_EQ(*resumed.next_tick, ManualClock::kStart +
                                    std::chrono::hours(24 + 8) +
                                    std::chrono::minutes(30));
  ASSERT_OK_AND_ASSIGN(run, store_->RunSchedules());
  EXPECT_EQ(run.sent, 0);
  EXPECT_TRUE(Drain(*store_).empty());

  ASSERT_OK(store_->DropSchedule("reports"));
  EXPECT_EQ(store_->GetSchedule("reports").status().code(), Code::kNotFound);
  EXPECT_EQ(store_->DropSchedule("reports").code(), Code::kNotFound);
  EXPECT_EQ(store_->PauseSchedule("reports").code(), Code::kNotFound);
}

TEST_P(ScheduleConformance, EachTickSendsItsMessageOnce) {
  ASSERT_OK(store_->CreateSchedule("beat", Every("*/10 * * * *")).status());
  clock_->Advance(minutes(10) + seconds(1));
  auto first = store_->RunSchedules();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ScheduleRun run = *first;
  EXPECT_TRUE(run.leader);
  EXPECT_EQ(run.sent, 1);
  ASSERT_OK_AND_ASSIGN(run, store_->RunSchedules());
  EXPECT_EQ(run.sent, 0) << "a tick sent is not sent again";
  auto got = Drain(*store_);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "tick");
  EXPECT_EQ(got[0].headers.at("team"), "ops");
  EXPECT_EQ(got[0].headers.at("sqlq-schedule"), "beat");
  EXPECT_EQ(got[0].headers.at("sqlq-tick"), "2024-01-01T00:10:00Z");
  ASSERT_OK_AND_ASSIGN(ScheduleInfo info, store_->GetSchedule("beat"));
  EXPECT_EQ(info.sent, 1);
  EXPECT_EQ(info.last_tick, ManualClock::kStart + minutes(10));
  EXPECT_EQ(info.next_tick, ManualClock::kStart + minutes(20));
  EXPECT_EQ(run.next_tick, ManualClock::kStart + minutes(20));
}

TEST_P(ScheduleConformance, OneSchedulerAtATimeAndAnotherTakesOver) {
  ASSERT_OK(store_->CreateSchedule("beat", Every("* * * * * *")).status());
  auto other = OtherStore();
  ASSERT_NE(other, nullptr);
  ASSERT_OK_AND_ASSIGN(ScheduleRun a, store_->RunSchedules());
  EXPECT_TRUE(a.leader);
  clock_->Advance(seconds(2));
  ASSERT_OK_AND_ASSIGN(ScheduleRun b, other->RunSchedules());
  EXPECT_FALSE(b.leader) << "the first store's lease is live";
  EXPECT_EQ(b.sent, 0);
  // The first store stops renewing (it died): once its lease ran out the
  // other takes over and sends the ticks due, 00:00:01 to 00:00:07.
  clock_->Advance(Store::kSchedulerLease);
  ASSERT_OK_AND_ASSIGN(b, other->RunSchedules());
  EXPECT_TRUE(b.leader);
  EXPECT_EQ(b.sent, 7);
  ASSERT_OK_AND_ASSIGN(a, store_->RunSchedules());
  EXPECT_FALSE(a.leader);
  EXPECT_EQ(a.sent, 0);
  EXPECT_EQ(Drain(*store_).size(), 7u);
}

TEST_P(ScheduleConformance, StoresRacingForTicksSendEachExactlyOnce) {
  ASSERT_OK(
      store_->CreateSchedule("beat", Every("* * * * * *", 1000)).status());
  auto other = OtherStore();
  ASSERT_NE(other, nullptr);
  // Two stores run passes side by side while time moves on and the lease
  // changes hands (each pass of the holder renews it; the clock jumps past
  // it now and then).
  std::atomic<bool> stop{false};
  std::atomic<int> errors{0};
  auto passes = [&](Store& s) {
    while (!stop.load()) {
      if (!s.RunSchedules().ok()) ++errors;
    }
  };
  std::thread t1(passes, std::ref(*store_));
  std::thread t2(passes, std::ref(*other));
  for (int i = 0; i < 60; ++i) {
    clock_->Advance(i % 10 == 9 ? Store::kSchedulerLease : seconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop = true;
  t1.join();
  t2.join();
  EXPECT_EQ(errors.load(), 0);
  // A last pass by whoever may, after the lease of the other ran out.
  clock_->Advance(Store::kSchedulerLease);
  ASSERT_OK(store_->RunSchedules().status());
  ASSERT_OK_AND_ASSIGN(ScheduleInfo info, store_->GetSchedule("beat"));
  std::set<std::string> ticks;
  for (const ClaimedMessage& m : Drain(*store_)) {
    EXPECT_TRUE(ticks.insert(m.headers.at("sqlq-tick")).second)
        << "tick " << m.headers.at("sqlq-tick") << " sent twice";
  }
  // Every second from the first to the last is there: none lost, as
  // catch_up 1000 sends the missed ones.
  const auto span = std::chrono::duration_cast<seconds>(*info.last_tick -
                                                        ManualClock::kStart);
  EXPECT_EQ(static_cast<std::int64_t>(ticks.size()), span.count());
  EXPECT_EQ(info.sent, span.count());
  EXPECT_EQ(info.skipped, 0);
}

TEST_P(ScheduleConformance, MissedTicksAreSkippedOrCaughtUp) {
  ASSERT_OK(store_->CreateSchedule("skip", Every("* * * * *")).status());
  ASSERT_OK(store_->CreateSchedule("catch", Every("* * * * *", 3)).status());
  // Down for ten minutes: ticks 00:01 .. 00:10 are due at 00:10:05, and
  // only 00:10 is on time.
  clock_->Advance(minutes(10) + seconds(5));
  ASSERT_OK_AND_ASSIGN(ScheduleRun run, store_->RunSchedules());
  EXPECT_EQ(run.sent, 1 + 4);
  EXPECT_EQ(run.skipped, 9 + 6);
  ASSERT_OK_AND_ASSIGN(ScheduleInfo skip, store_->GetSchedule("skip"));
  EXPECT_EQ(skip.sent, 1);
  EXPECT_EQ(skip.skipped, 9);
  ASSERT_OK_AND_ASSIGN(ScheduleInfo caught, store_->GetSchedule("catch"));
  EXPECT_EQ(caught.sent, 4);
  EXPECT_EQ(caught.skipped, 6);
  std::multiset<std::string> ticks;
  for (const ClaimedMessage& m : Drain(*store_)) {
    ticks.insert(m.headers.at("sqlq-schedule") + " " +
                 m.headers.at("sqlq-tick"));
  }
  EXPECT_EQ(ticks,
            (std::multiset<std::string>{
                "catch 2024-01-01T00:07:00Z", "catch 2024-01-01T00:08:00Z",
                "catch 2024-01-01T00:09:00Z", "catch 2024-01-01T00:10:00Z",
                "skip 2024-01-01T00:10:00Z"}));
}

TEST_P(ScheduleConformance, ATickWithoutItsQueueIsSkippedAndSaysWhy) {
  ASSERT_OK(store_->CreateSchedule("beat", Every("* * * * *")).status());
  ASSERT_OK(store_->DropQueue("jobs"));
  clock_->Advance(minutes(1));
  ASSERT_OK_AND_ASSIGN(ScheduleRun run, store_->RunSchedules());
  EXPECT_EQ(run.sent, 0);
  ASSERT_OK_AND_ASSIGN(ScheduleInfo info, store_->GetSchedule("beat"));
  EXPECT_EQ(info.skipped, 1);
  EXPECT_NE(info.last_error.find("jobs"), std::string::npos) << info.last_error;
  // Back with its queue: the next tick goes, and the error is cleared.
  ASSERT_OK(store_->CreateQueue("jobs", {}).status());
  clock_->Advance(minutes(1));
  ASSERT_OK_AND_ASSIGN(run, store_->RunSchedules());
  EXPECT_EQ(run.sent, 1);
  ASSERT_OK_AND_ASSIGN(info, store_->GetSchedule("beat"));
  EXPECT_EQ(info.last_error, "");
}

TEST_P(ScheduleConformance, BadSchedulesAreRefusedAndChangeNothing) {
  const std::pair<ScheduleOptions, Code> bad[] = {
      {{.cron = "* * *", .queue = "jobs"}, Code::kInvalidArgument},
      {{.cron = "61 * * * *", .queue = "jobs"}, Code::kInvalidArgument},
      {{.cron = "0 0 30 2 *", .queue = "jobs"}, Code::kInvalidArgument},
      {{.cron = "@daily", .time_zone = "Mars/Olympus", .queue = "jobs"},
       Code::kInvalidArgument},
      {{.cron = "@daily", .time_zone = "localtime", .queue = "jobs"},
       Code::kInvalidArgument},
      {{.cron = "@daily", .queue = "nope"}, Code::kNotFound},
      {{.cron = "@daily", .queue = "bad name"}, Code::kInvalidArgument},
      {{.cron = "@daily", .queue = "jobs", .catch_up = -1},
       Code::kInvalidArgument},
      {{.cron = "@daily", .queue = "jobs", .catch_up = kMaxCatchUp + 1},
       Code::kInvalidArgument},
      {{.cron = "@daily", .queue = "jobs", .message = {.delay = seconds(5)}},
       Code::kInvalidArgument},
      {{.cron = "@daily", .queue = "jobs", .message = {.dedup_key = "k"}},
       Code::kInvalidArgument},
      {{.cron = "@daily",
        .queue = "jobs",
        .message = {.headers = {{"sqlq-tick", "x"}}}},
       Code::kInvalidArgument},
      {{.cron = "@daily",
        .queue = "jobs",
        .message = {.group = std::string(300, 'g')}},
       Code::kInvalidArgument},
  };
  for (const auto& [o, code] : bad) {
    auto r = store_->CreateSchedule("s", o);
    EXPECT_EQ(r.status().code(), code)
        << o.cron << ": " << r.status().ToString();
  }
  EXPECT_EQ(store_->CreateSchedule("bad name", Every("@daily")).status().code(),
            Code::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(auto list, store_->ListSchedules());
  EXPECT_TRUE(list.empty());
  ASSERT_OK(store_->CreateSchedule("s", Every("@daily")).status());
  EXPECT_EQ(store_->CreateSchedule("s", Every("@hourly")).status().code(),
            Code::kAlreadyExists);
  ASSERT_OK_AND_ASSIGN(ScheduleInfo s, store_->GetSchedule("s"));
  EXPECT_EQ(s.options.cron, "@daily");
}

// A schedule an earlier sqlq stored with the zone "localtime" (now refused
// for new ones) is still listed, paused, resumed and ticked, in the zone of
// the host that runs the scheduler, as before.
TEST_P(ScheduleConformance, AScheduleStoredWithLocaltimeStillRuns) {
  ASSERT_OK(store_->CreateSchedule("old", Every("* * * * *")).status());
  {
    RawDb raw(GetParam().name, *db_);
    ASSERT_EQ(raw.exec()("UPDATE sqlq_schedules SET time_zone = 'localtime' "
                         "WHERE name = 'old'"),
              "");
  }
  ASSERT_OK_AND_ASSIGN(ScheduleInfo old, store_->GetSchedule("old"));
  EXPECT_EQ(old.options.time_zone, "localtime");
  ASSERT_OK_AND_ASSIGN(auto list, store_->ListSchedules());
  EXPECT_EQ(list.size(), 1u);
  ASSERT_OK(store_->PauseSchedule("old"));
  ASSERT_OK(store_->ResumeSchedule("old"));
  clock_->Advance(minutes(1));
  ASSERT_OK_AND_ASSIGN(ScheduleRun run, store_->RunSchedules());
  EXPECT_EQ(run.sent, 1);
  ASSERT_OK_AND_ASSIGN(old, store_->GetSchedule("old"));
  EXPECT_EQ(old.sent, 1);
  EXPECT_EQ(old.last_error, "");
}

INSTANTIATE_TEST_SUITE_P(Engines, ScheduleConformance,
                         ::testing::ValuesIn(Engines()), EngineName);

}  // namespace
}  // namespace sqlq::test
