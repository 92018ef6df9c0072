// The CLI's side of what a message carries (docs/cli.md, `send`): headers,
// a JSON payload and a run_at time, through the real sqlq program; bad input
// exits 2 with one line on stderr and stores nothing.

#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <string>
#include <vector>

#include "tests/cli/cli_assertions.h"
#include "tests/cli/cli_fixture.h"
#include "tests/cli/cli_runner.h"

namespace sqlq::cli_test {
namespace {

class MessageCliTest : public CliFixture {
 protected:
  void SetUp() override {
    CliFixture::SetUp();
    One({"queue", "create", "jobs"});
  }
  std::int64_t Sends() {
    return One({"queue", "stats", "jobs"}).value("sends", -1);
  }
};

// An RFC 3339 time `from_now` away, with a +00:00 offset.
std::string TimeFromNow(std::chrono::seconds from_now) {
  const std::time_t t =
      std::chrono::system_clock::to_time_t(std::chrono::system_clock::now()) +
      from_now.count();
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[64];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S+00:00", &tm);
  return text;
}

TEST_F(MessageCliTest, HeadersAndAJsonPayloadComeBackOnClaim) {
  One({"send", "jobs", "--json-payload", "--header", "tenant=acme", "--header",
       "trace=a=b", R"({"to": "ada", "n": [1, 2]})"});
  One({"send", "jobs", "plain"});
  auto claimed = Ok({"claim", "jobs", "--max", "2"});
  ASSERT_EQ(claimed.size(), 2u);
  EXPECT_EQ(claimed[0]["payload"],
            json::parse(R"({"to": "ada", "n": [1, 2]})"));
  // The value after the first '=' is the header's, '=' and all.
  EXPECT_EQ(claimed[0]["headers"],
            json::parse(R"({"content-type": "application/json",
                            "tenant": "acme", "trace": "a=b"})"));
  EXPECT_EQ(claimed[1]["payload"], "plain");
  EXPECT_FALSE(claimed[1].contains("headers"));
}

TEST_F(MessageCliTest, RunAtHoldsTheMessageBack) {
  One({"send", "jobs", "--run-at", TimeFromNow(std::chrono::hours(1)),
       "later"});
  One({"send", "jobs", "--run-at", TimeFromNow(-std::chrono::hours(1)),
       "overdue"});
  auto claimed = Ok({"claim", "jobs", "--max", "5"});
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0]["payload"], "overdue");
  EXPECT_EQ(One({"queue", "stats", "jobs"}).value("delayed", -1), 1);
}

TEST_F(MessageCliTest, BadInputExitsTwoAndSendsNothing) {
  EXPECT_TRUE(FailsWith(Human({"send", "jobs", "--header", "novalue", "x"}),
                        kUsage, "NAME=VALUE"));
  EXPECT_TRUE(FailsWith(Human({"send", "jobs", "--header", "bad name=v", "x"}),
                        kUsage, "header name"));
  EXPECT_TRUE(FailsWith(Human({"send", "jobs", "--json-payload", "{oops"}),
                        kUsage, "not valid JSON"));
  EXPECT_TRUE(FailsWith(Human({"send", "jobs", "--run-at", "soon", "x"}),
                        kUsage, "RFC 3339"));
  EXPECT_TRUE(FailsWith(Human({"send", "jobs", "--run-at",
                               TimeFromNow(std::chrono::hours(24 * 400)), "x"}),
                        kUsage, "365 days"));
  EXPECT_EQ(Human({"send", "jobs", "--run-at",
                   TimeFromNow(std::chrono::hours(1)), "--delay", "5s", "x"})
                .exit_code,
            kUsage);
  EXPECT_EQ(Sends(), 0);
}

// Every time the command line reads refuses a second of 60 (a leap
// second's, which the clocks sqlq reads never show) and changes nothing.
TEST_F(MessageCliTest, ATimeWithSecondSixtyIsRefused) {
  std::string leap = TimeFromNow(std::chrono::hours(1));
  leap.replace(leap.find('+') - 2, 2, "60");
  EXPECT_TRUE(FailsWith(Human({"send", "jobs", "--run-at", leap, "x"}), kUsage,
                        "second 60"));
  EXPECT_EQ(Sends(), 0);
  One({"send", "jobs", "a"});
  EXPECT_TRUE(
      FailsWith(Human({"message", "reschedule", "jobs", "1", "--at", leap}),
                kUsage, "second 60"));
  EXPECT_TRUE(
      FailsWith(Human({"message", "list", "jobs", "--enqueued-after", leap}),
                kUsage, "second 60"));
  EXPECT_EQ(One({"message", "get", "jobs", "1"})["state"], "ready");
}

TEST_F(MessageCliTest, GetListAndChangeMessages) {
  One({"send", "jobs", "--header", "tenant=acme", "a"});
  One({"send", "jobs", "--delay", "1h", "b"});
  One({"send", "jobs", "--header", "tenant=acme", "c"});
  json a = One({"message", "get", "jobs", "1"});
  EXPECT_EQ(a["state"], "ready");
  EXPECT_EQ(a["payload"], "a");
  EXPECT_EQ(a["headers"], json::parse(R"({"tenant":"acme"})"));

  auto acme = Ok({"message", "list", "jobs", "--header", "tenant=acme"});
  ASSERT_EQ(acme.size(), 2u);
  EXPECT_EQ(acme[0]["id"], 1);
  EXPECT_EQ(acme[1]["id"], 3);
  // A limit below what there is: the cursor to go on with is on stderr.
  RunResult first = Json({"message", "list", "jobs", "--limit", "2"});
  ASSERT_EQ(first.exit_code, kOk) << Show(first);
  std::vector<json> lines;
  ASSERT_TRUE(ParseLines(first.out, &lines));
  ASSERT_EQ(lines.size(), 2u);
  const std::string cursor = json::parse(first.err)["next_cursor"];
  auto rest = Ok({"message", "list", "jobs", "--cursor", cursor});
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_EQ(rest[0]["id"], 3);

  EXPECT_EQ(One({"message", "retry", "jobs", "--state", "delayed"})["changed"],
            1);
  EXPECT_EQ(
      One({"message", "priority", "jobs", "3", "--priority", "9"})["changed"],
      1);
  EXPECT_EQ(One({"claim", "jobs"})["id"], 3);
  EXPECT_EQ(One({"message", "reschedule", "jobs", "1", "--at",
                 TimeFromNow(std::chrono::hours(2))})["changed"],
            1);
  EXPECT_EQ(One({"message", "get", "jobs", "1"})["state"], "delayed");
  EXPECT_EQ(One({"message", "delete", "jobs", "1", "2"})["changed"], 2);
  EXPECT_TRUE(FailsWith(Human({"message", "get", "jobs", "1"}), kNotFound,
                        "message 1"));
}

TEST_F(MessageCliTest, CountAndCancel) {
  One({"send", "jobs", "--header", "tenant=acme", "a"});
  One({"send", "jobs", "--header", "tenant=acme", "b"});
  One({"send", "jobs", "c"});
  EXPECT_EQ(One({"message", "count", "jobs"})["count"], 3);
  EXPECT_EQ(
      One({"message", "count", "jobs", "--header", "tenant=acme"})["count"], 2);
  EXPECT_EQ(
      One({"message", "cancel", "jobs", "--header", "tenant=acme"})["changed"],
      2);
  EXPECT_EQ(One({"message", "count", "jobs", "--state", "dead"})["count"], 2);
  json dead = One({"message", "get", "jobs", "1"});
  EXPECT_EQ(dead["state"], "dead");
  EXPECT_EQ(dead["last_error"], "cancelled");
  EXPECT_TRUE(FailsWith(Human({"message", "cancel", "jobs", "--state", "dead"}),
                        kUsage, "not to dead letters"));
  EXPECT_EQ(One({"claim", "jobs"})["payload"], "c");
}

TEST_F(MessageCliTest, ChangesWithoutIdsOrFilterAreRefused) {
  One({"send", "jobs", "a"});
  EXPECT_TRUE(FailsWith(Human({"message", "delete", "jobs"}), kUsage, "--all"));
  EXPECT_TRUE(FailsWith(Human({"message", "list", "jobs", "--state", "odd"}),
                        kUsage, "unknown state"));
  EXPECT_TRUE(FailsWith(Human({"message", "list", "jobs", "--cursor", "x"}),
                        kUsage, "cursor"));
  EXPECT_EQ(One({"queue", "stats", "jobs"}).value("ready", -1), 1);
  EXPECT_EQ(One({"message", "delete", "jobs", "--all"})["changed"], 1);
}

TEST_F(MessageCliTest, AlterPauseAndResume) {
  json q = One({"queue", "alter", "jobs", "--max-attempts", "2",
                "--dead-retention", "1h", "--archive"});
  EXPECT_EQ(q["max_attempts"], 2);
  EXPECT_EQ(q["dead_retention_ms"], 3600000);
  EXPECT_EQ(q["archive"], true);
  EXPECT_EQ(q["lease_ms"], 30000);
  EXPECT_EQ(One({"queue", "alter", "jobs", "--no-archive"})["archive"], false);
  EXPECT_EQ(
      One({"queue", "alter", "jobs", "--unique-for", "1h"})["unique_for_ms"],
      3600000);
  EXPECT_TRUE(
      FailsWith(Human({"queue", "alter", "jobs", "--unique-for", "soon"}),
                kUsage, "--unique-for"));
  EXPECT_EQ(One({"queue", "list"})["max_attempts"], 2);
  EXPECT_TRUE(
      FailsWith(Human({"queue", "alter", "jobs", "--max-attempts", "0"}),
                kUsage, "max attempts"));
  EXPECT_EQ(One({"queue", "pause", "jobs"})["paused"], true);
  One({"send", "jobs", "m"});
  // Nothing came, and the claim says why (on stderr, as for a limit).
  RunResult claimed = Human({"claim", "jobs"});
  EXPECT_EQ(claimed.exit_code, 0) << claimed.err;
  EXPECT_EQ(claimed.out, "");
  EXPECT_NE(claimed.err.find("queue 'jobs' is paused"), std::string::npos)
      << claimed.err;
  EXPECT_NE(claimed.err.find("sqlq queue resume jobs"), std::string::npos)
      << claimed.err;
  EXPECT_EQ(One({"queue", "stats", "jobs"})["paused"], true);
  EXPECT_EQ(One({"queue", "resume", "jobs"})["paused"], false);
  EXPECT_EQ(One({"claim", "jobs"})["payload"], "m");
  EXPECT_TRUE(FailsWith(Human({"queue", "pause", "nope"}), kNotFound, "nope"));
}

TEST_F(MessageCliTest, UniqueForKeepsAnAckedKeyTaken) {
  One({"queue", "create", "once", "--unique-for", "1h"});
  json first = One({"send", "once", "a", "--dedup", "welcome-42"});
  json claimed = One({"claim", "once"});
  One({"ack", "once", claimed["receipt"]});
  json again = One({"send", "once", "b", "--dedup", "welcome-42"});
  EXPECT_EQ(again["id"], first["id"]);
  EXPECT_EQ(again["duplicate"], true);
  EXPECT_TRUE(Ok({"claim", "once"}).empty());
}

TEST_F(MessageCliTest, OrderedGroupsFromTheCommandLine) {
  EXPECT_EQ(One({"queue", "create", "ord", "--groups", "ordered"})["groups"],
            "ordered");
  EXPECT_TRUE(FailsWith(Human({"queue", "create", "bad", "--groups", "odd"}),
                        kUsage, "group mode"));
  One({"send", "ord", "a1", "--group", "acct-1"});
  One({"send", "ord", "a2", "--group", "acct-1"});
  json first = One({"claim", "ord", "--max", "5"});
  EXPECT_EQ(first["payload"], "a1");
  EXPECT_EQ(first["group"], "acct-1");
  // Nothing comes while a2 waits behind its leased head, and stderr says
  // why, with or without --json.
  for (const RunResult& busy :
       {Json({"claim", "ord"}), Human({"claim", "ord"})}) {
    EXPECT_EQ(busy.exit_code, kOk) << Show(busy);
    EXPECT_EQ(busy.out, "") << Show(busy);
    EXPECT_NE(busy.err.find("their groups hold them back"), std::string::npos)
        << Show(busy);
  }
  One({"ack", "ord", first["receipt"]});
  EXPECT_EQ(One({"claim", "ord"})["payload"], "a2");
  One({"send", "ord", "b1", "--group", "acct-2"});
  auto listed = Ok({"message", "list", "ord", "--group", "acct-2"});
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["payload"], "b1");
  EXPECT_EQ(listed[0]["group"], "acct-2");
}

TEST_F(MessageCliTest, LimitsFromTheCommandLine) {
  json created = One({"queue", "create", "lim", "--max-leased", "2",
                      "--rate-limit", "120/m", "--rate-burst", "5"});
  EXPECT_EQ(created["max_leased"], 2);
  EXPECT_EQ(created["rate_limit"], 2.0);
  EXPECT_EQ(created["rate_burst"], 5);
  for (int i = 0; i < 4; ++i) One({"send", "lim", "m" + std::to_string(i)});
  RunResult held = Human({"claim", "lim", "--max", "10"});
  EXPECT_EQ(held.exit_code, kOk) << Show(held);
  EXPECT_NE(held.out.find("m1"), std::string::npos) << Show(held);
  EXPECT_NE(held.err.find("held back by the queue's max_leased"),
            std::string::npos)
      << Show(held);
  json lifted = One({"queue", "alter", "lim", "--max-leased", "none"});
  EXPECT_TRUE(lifted["max_leased"].is_null());
  EXPECT_EQ(lifted["rate_burst"], 5);
  EXPECT_EQ(Ok({"claim", "lim", "--max", "10"}).size(), 2u);
  // Each with what its error names.
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{
            "--max-leased", "0",
            "--max-leased 0 is out of range: the range is 1 to 1000000 "
            "(none: no limit)"},
        {"--max-leased", "lots", "--max-leased"},
        {"--rate-limit", "5/week", "--rate-limit"},
        {"--rate-limit", "0",
         "--rate-limit 0 is out of range: the range is 0.001 to 1000000 "
         "claims a second (none: no limit)"},
        {"--rate-limit", "0.01/h",
         "--rate-limit 0.01/h is out of range: the range is 3.6/h to "
         "3600000000/h"},
        {"--group-limit", "20000", "the range is 1 to 10000"},
        {"--rate-burst", "3", "needs a rate_limit"},
        {"--group-limit", "2", "fair"}}) {
    EXPECT_TRUE(FailsWith(Human({"queue", "create", "bad", bad[0], bad[1]}),
                          kUsage, bad[2]));
  }
  auto names = Ok({"queue", "list"});
  EXPECT_EQ(names.size(), 2u) << "a refused queue was created";
}

TEST_F(MessageCliTest, SchedulesFromTheCommandLine) {
  EXPECT_TRUE(FailsWith(Human({"schedule", "add", "nightly", "--cron",
                               "0 3 * *", "--queue", "jobs", "--payload", "x"}),
                        kUsage, "has 4 fields"));
  EXPECT_TRUE(FailsWith(
      Human({"schedule", "add", "nightly", "--cron", "0 3 * * *", "--tz",
             "Atlantis/Capital", "--queue", "jobs", "--payload", "x"}),
      kUsage, "unknown time zone"));
  // The zone of whichever host runs the scheduler: refused.
  EXPECT_TRUE(FailsWith(
      Human({"schedule", "add", "nightly", "--cron", "0 3 * * *", "--tz",
             "localtime", "--queue", "jobs", "--payload", "x"}),
      kUsage, "'localtime' means each server's own zone"));
  EXPECT_TRUE(FailsWith(Human({"schedule", "add", "nightly", "--cron", "@daily",
                               "--queue", "nope", "--payload", "x"}),
                        kNotFound, "nope"));
  json made = One({"schedule", "add", "nightly", "--cron", "0 3 * * *", "--tz",
                   "Europe/Berlin", "--queue", "jobs", "--payload", "report",
                   "--header", "team=ops", "--catch-up", "2"});
  EXPECT_EQ(made["name"], "nightly");
  EXPECT_EQ(made["time_zone"], "Europe/Berlin");
  EXPECT_EQ(made["headers"]["team"], "ops");
  EXPECT_EQ(made["catch_up"], 2);
  EXPECT_TRUE(made["next_tick"].is_string());
  EXPECT_TRUE(FailsWith(Human({"schedule", "add", "nightly", "--cron", "@daily",
                               "--queue", "jobs", "--payload", "x"}),
                        kExists, "nightly"));
  auto list = Ok({"schedule", "list"});
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["cron"], "0 3 * * *");
  json run = One({"schedule", "run"});
  EXPECT_EQ(run["leader"], true);
  EXPECT_EQ(run["sent"], 0) << "its first tick is to come";
  EXPECT_EQ(One({"schedule", "pause", "nightly"})["paused"], true);
  EXPECT_EQ(One({"schedule", "resume", "nightly"})["paused"], false);
  EXPECT_EQ(One({"schedule", "remove", "nightly"})["removed"], "nightly");
  EXPECT_TRUE(FailsWith(Human({"schedule", "remove", "nightly"}), kNotFound,
                        "nightly"));
}

TEST_F(MessageCliTest, ListShowsEverythingInTheStore) {
  One({"ring", "create", "views", "--capacity", "3"});
  One({"rotation", "create", "relays"});
  auto all = Ok({"list"});
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0]["kind"], "queue");
  EXPECT_EQ(all[0]["name"], "jobs");
  EXPECT_EQ(all[1]["kind"], "ring");
  EXPECT_EQ(all[1]["name"], "views");
  EXPECT_EQ(all[2]["kind"], "rotation");
  EXPECT_EQ(all[2]["name"], "relays");
}

}  // namespace
}  // namespace sqlq::cli_test
