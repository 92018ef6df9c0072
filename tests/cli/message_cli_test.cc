// The CLI's side of what a message carries (docs/cli.md, `send`): headers,
// a JSON payload and a run_at time, through the real sqlq program; bad input
// exits 2 with one line on stderr and stores nothing.

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <ctime>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "sqlq/store.h"
#include "tests/cli/cli_assertions.h"
#include "tests/cli/cli_fixture.h"
#include "tests/cli/cli_runner.h"
#include "tests/support/test_servers.h"
#include "tests/support/test_util.h"

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

TEST_F(MessageCliTest, JobKindsAndNackActionsFromTheCommandLine) {
  One({"queue", "create", "work", "--max-attempts", "3"});
  EXPECT_TRUE(FailsWith(Human({"send", "work", "x", "--kind", "no spaces"}),
                        kUsage, "kind"));
  One({"send", "work", "a", "--kind", "email.send"});
  One({"send", "work", "b", "--kind", "report/build"});
  auto listed = Ok({"message", "list", "work", "--kind", "report/build"});
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["payload"], "b");
  EXPECT_EQ(listed[0]["kind"], "report/build");

  auto both = Ok({"claim", "work", "--max", "2"});
  ASSERT_EQ(both.size(), 2u);
  json a = both[0];
  EXPECT_EQ(a["kind"], "email.send");
  EXPECT_EQ(both[1]["kind"], "report/build");
  RunResult snoozed = Human({"nack", "work", a["receipt"], "--snooze"});
  EXPECT_EQ(snoozed.exit_code, kOk) << Show(snoozed);
  EXPECT_NE(snoozed.out.find("snoozed"), std::string::npos) << Show(snoozed);
  json again = One({"claim", "work"});
  EXPECT_EQ(again["id"], a["id"]);
  EXPECT_EQ(again["attempt"], 1);
  const std::string id = std::to_string(a["id"].get<int>());
  EXPECT_EQ(One({"message", "get", "work", id})["snoozes"], 1);
  EXPECT_TRUE(
      FailsWith(Human({"nack", "work", again["receipt"], "--snooze", "--dead"}),
                kUsage, "--dead"));
  json dead = One({"nack", "work", again["receipt"], "--dead", "--error",
                   "cancelled: not needed"});
  EXPECT_EQ(dead["outcome"], "dead");
  json got = One({"message", "get", "work", id});
  EXPECT_EQ(got["state"], "dead");
  EXPECT_EQ(got["kind"], "email.send");
  EXPECT_EQ(got["last_error"], "cancelled: not needed");
}

TEST_F(MessageCliTest, AJobsOwnRetryPolicyFromTheCommandLine) {
  EXPECT_TRUE(FailsWith(Human({"send", "jobs", "x", "--max-attempts", "0"}),
                        kUsage, "max_attempts"));
  EXPECT_EQ(Sends(), 0);
  One({"send", "jobs", "x", "--max-attempts", "1", "--backoff", "30s",
       "--backoff-max", "1h"});
  json m = One({"claim", "jobs"});
  EXPECT_EQ(m["max_attempts"], 1);
  const std::string id = std::to_string(m["id"].get<int>());
  json got = One({"message", "get", "jobs", id});
  EXPECT_EQ(got["backoff_ms"], 30000);
  EXPECT_EQ(got["backoff_max_ms"], 3600000);
  // The queue allows five attempts; this job one.
  EXPECT_EQ(One({"nack", "jobs", m["receipt"]})["outcome"], "dead");
}

TEST_F(MessageCliTest, DependenciesFromTheCommandLine) {
  EXPECT_TRUE(FailsWith(Human({"send", "jobs", "x", "--depends-on", "0"}),
                        kUsage, "--depends-on"));
  EXPECT_TRUE(FailsWith(Human({"send", "jobs", "x", "--depends-on", "1",
                               "--if-dependency-dies", "explode"}),
                        kUsage, "--if-dependency-dies"));
  EXPECT_EQ(Sends(), 0);
  const std::string a =
      std::to_string(One({"send", "jobs", "a"})["id"].get<int>());
  const std::string b =
      std::to_string(One({"send", "jobs", "b"})["id"].get<int>());
  const std::string c =
      std::to_string(One({"send", "jobs", "c", "--depends-on", a + "," + b,
                          "--if-dependency-dies", "run"})["id"]
                         .get<int>());
  json got = One({"message", "get", "jobs", c});
  EXPECT_EQ(got["state"], "waiting");
  EXPECT_EQ(got["waits_for"], json::array({std::stoi(a), std::stoi(b)}));
  EXPECT_EQ(One({"queue", "stats", "jobs"})["waiting"], 1);
  auto two = Ok({"claim", "jobs", "--max", "10"});
  ASSERT_EQ(two.size(), 2u);  // c waits
  One({"ack", "jobs", two[0]["receipt"]});
  One({"nack", "jobs", two[1]["receipt"], "--dead", "--error", "no"});
  json m = One({"claim", "jobs"});  // b died; c runs anyway
  EXPECT_EQ(m["payload"], "c");
}

// The process that acks a parent is killed with SIGKILL at times spread
// over its run: before, during or after its commit. Whatever the moment,
// the parent and its dependent agree: the parent still leased and the
// dependent waiting, or the parent gone and the dependent ready. Never
// the parent gone and the dependent stranded waiting, nor the dependent
// ready before the parent's ack committed. On every engine: on the
// servers, in a queue of the test's own in the test server's database.
class AckKillTest : public CliFixture,
                    public ::testing::WithParamInterface<test::TestEngine> {
 protected:
  void SetUp() override {
    CliFixture::SetUp();
    if (GetParam().server != nullptr) {
      SQLQ_REQUIRE_SERVER(*GetParam().server);
      db_ = test::ServerUrl(*GetParam().server);
      queue_ = "ack_kill_" + std::to_string(getpid()) + "_" +
               std::to_string(std::time(nullptr));
    }
    One({"queue", "create", queue_});
  }
  void TearDown() override {
    // Skipped (no test server): SetUp made no queue to drop.
    if (!IsSkipped() && !HasFatalFailure() && GetParam().server != nullptr) {
      One({"queue", "drop", queue_});
    }
    CliFixture::TearDown();
  }
  std::string queue_ = "jobs";
};

TEST_P(AckKillTest, AnAckKilledAtAnyMomentNeverStrandsItsDependent) {
  const std::string& q = queue_;
  // How long a whole ack takes here (a process that starts, connects and
  // commits): the kills are spread from at once to a third past it.
  One({"send", q, "timing"});
  const json timed = One({"claim", q});
  const auto began = std::chrono::steady_clock::now();
  One({"ack", q, timed["receipt"]});
  const auto whole = std::chrono::steady_clock::now() - began;
  int released = 0, kept = 0;
  for (int round = 0; round < 16; ++round) {
    const std::string parent =
        std::to_string(One({"send", q, "parent"})["id"].get<std::int64_t>());
    const std::string child =
        std::to_string(One({"send", q, "child", "--depends-on", parent})["id"]
                           .get<std::int64_t>());
    json m = One({"claim", q});
    ASSERT_EQ(std::to_string(m["id"].get<std::int64_t>()), parent);
    Child ack = Child::Start(
        SQLQ_BIN,
        {"--db", db_, "--json", "ack", q, m["receipt"].get<std::string>()},
        {.cwd = dir_});
    ASSERT_GT(ack.pid(), 0);
    std::this_thread::sleep_for(whole * round / 12);
    kill(ack.pid(), SIGKILL);
    (void)ack.Finish();
    const RunResult p = Json({"message", "get", q, parent});
    const json c = One({"message", "get", q, child});
    if (p.exit_code == kNotFound) {
      EXPECT_EQ(c["state"], "ready") << "round " << round;
      ++released;
    } else {
      ASSERT_EQ(p.exit_code, kOk) << Show(p);
      EXPECT_EQ(json::parse(p.out)["state"], "leased") << "round " << round;
      EXPECT_EQ(c["state"], "waiting") << "round " << round;
      ++kept;
      One({"ack", q, m["receipt"]});  // the ack done again
    }
    json next = One({"claim", q});
    EXPECT_EQ(next["payload"], "child") << "round " << round;
    One({"ack", q, next["receipt"]});
  }
  std::cout << "acks killed: " << released << " after their commit, " << kept
            << " before it\n";
  EXPECT_EQ(Ok({"claim", q}).size(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Engines, AckKillTest,
                         ::testing::ValuesIn(test::kTestEngines),
                         [](const auto& p) {
                           return std::string(p.param.name);
                         });

TEST_F(MessageCliTest, WhatAnExpiryDoesFromTheCommandLine) {
  EXPECT_TRUE(FailsWith(Human({"send", "jobs", "x", "--expire-after", "1m",
                               "--on-expiry", "later"}),
                        kUsage, "later"));
  EXPECT_TRUE(FailsWith(Human({"send", "jobs", "x", "--on-expiry", "drop"}),
                        kUsage, "expire_after"));
  EXPECT_EQ(Sends(), 0);
  const json late = One(
      {"send", "jobs", "late", "--expire-after", "1ms", "--on-expiry", "drop"});
  One({"send", "jobs", "buried", "--expire-after", "1ms"});  // dead-lettered
  One({"send", "jobs", "in time", "--expire-after", "10m", "--on-expiry",
       "drop"});
  // The first two expire 1 ms after their send, which has returned: past
  // that once this much more time has gone by.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto claimed = Ok({"claim", "jobs", "--max", "10"});
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0]["payload"], "in time");
  EXPECT_EQ(claimed[0]["on_expiry"], "drop");
  EXPECT_TRUE(FailsWith(
      Human({"message", "get", "jobs", std::to_string(late["id"].get<int>())}),
      kNotFound, "is not in queue"));
  json stats = One({"queue", "stats", "jobs"});
  EXPECT_EQ(stats["expired"], 2);
  EXPECT_EQ(stats["dead_lettered"], 1);
  EXPECT_EQ(stats["dead"], 1);
}

// A job's progress and result from the command line: a shell script that
// works a job records both, and another reads them (or waits for them).
TEST_F(MessageCliTest, ProgressAndResultFromTheCommandLine) {
  One({"send", "jobs", "resize cat.png"});
  json m = One({"claim", "jobs"});
  const std::string id = std::to_string(m["id"].get<int>());
  json waiting = One({"result", "jobs", id});
  EXPECT_EQ(waiting["state"], "leased");
  EXPECT_FALSE(waiting.contains("progress"));
  One({"progress", "jobs", m["receipt"], "40", "--note", "tiles 4/10"});
  json running = One({"result", "jobs", id});
  EXPECT_EQ(running["progress"], 40);
  EXPECT_EQ(running["note"], "tiles 4/10");
  EXPECT_TRUE(
      FailsWith(Human({"ack", "jobs", m["receipt"], "other", "--result", "x"}),
                kUsage, "one receipt"));
  One({"ack", "jobs", m["receipt"], "--result", "/t/cat.png", "--result-ttl",
       "1h"});
  json done = One({"result", "jobs", id, "--wait", "10s"});
  EXPECT_EQ(done["state"], "completed");
  EXPECT_EQ(done["result"], "/t/cat.png");
  EXPECT_EQ(done["progress"], 40);
  // Progress after the ack, and a job the queue never had.
  EXPECT_EQ(Human({"progress", "jobs", m["receipt"], "50"}).exit_code,
            kNotFound);
  EXPECT_TRUE(FailsWith(Human({"result", "jobs", "999"}), kNotFound,
                        "knows nothing of job 999"));
}

TEST_F(MessageCliTest, WorkerListShowsTheLiveWorkers) {
  EXPECT_EQ(Ok({"worker", "list"}).size(), 0u);
  {
    auto store = Store::Open(db_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_OK((*store)->ReportWorker({.id = "web-1:42:ab",
                                      .name = "mailer",
                                      .host = "web-1",
                                      .pid = 42,
                                      .queues = {"jobs"},
                                      .kinds = {"email.send"},
                                      .concurrency = 3}));
    ASSERT_OK((*store)->ReportWorker({.id = "other:7:cd", .queues = {"x"}}));
  }
  auto all = Ok({"worker", "list"});
  ASSERT_EQ(all.size(), 2u);
  auto mine = Ok({"worker", "list", "--queue", "jobs"});
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0]["id"], "web-1:42:ab");
  EXPECT_EQ(mine[0]["host"], "web-1");
  EXPECT_EQ(mine[0]["pid"], 42);
  EXPECT_EQ(mine[0]["concurrency"], 3);
  EXPECT_EQ(mine[0]["kinds"], json({"email.send"}));
  RunResult human = Human({"worker", "list"});
  EXPECT_EQ(human.exit_code, kOk) << Show(human);
  EXPECT_NE(human.out.find("mailer"), std::string::npos) << Show(human);
}

// A claim that waits is a live worker while it waits, and leaves the list
// when it is over.
TEST_F(MessageCliTest, AWaitingClaimIsListedAmongTheWorkers) {
  Child claim = Child::Start(SQLQ_BIN,
                             {"--db", db_, "--json", "claim", "jobs", "--wait",
                              "60s", "--worker", "nightly"},
                             {.cwd = dir_});
  ASSERT_GT(claim.pid(), 0);
  std::vector<json> listed;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (listed.empty() && std::chrono::steady_clock::now() < deadline) {
    listed = Ok({"worker", "list", "--queue", "jobs"});
  }
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["name"], "nightly");
  EXPECT_EQ(listed[0]["pid"], claim.pid());
  EXPECT_EQ(listed[0]["queues"], json({"jobs"}));
  EXPECT_EQ(listed[0]["jobs"], json::array());
  One({"send", "jobs", "wake up"});
  RunResult r = claim.Finish();
  ASSERT_EQ(r.exit_code, kOk) << Show(r);
  EXPECT_NE(r.out.find("wake up"), std::string::npos) << Show(r);
  EXPECT_EQ(Ok({"worker", "list"}).size(), 0u);  // removed as it finished
  // A claim that does not wait is never listed (nothing to remove either).
  EXPECT_EQ(Ok({"claim", "jobs"}).size(), 0u);
  EXPECT_EQ(Ok({"worker", "list"}).size(), 0u);
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
