// What the command line says and asks when it moves or removes many
// messages, on every engine: where dead letters went (the queue's own dead
// letters, or its dead-letter queue), `--dry-run` counts without changing,
// and a delete or cancel by a filter asks first when a person is at the
// terminal (a real pseudo-terminal), but not when stdin is not one.
//
// SQLite runs on a fresh file; PostgreSQL and MariaDB on the test server's
// database (tests/support/test_servers.h), with queue names of this test's
// own, dropped afterwards.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

#include "tests/cli/cli_assertions.h"
#include "tests/cli/cli_fixture.h"
#include "tests/cli/cli_pty.h"
#include "tests/cli/cli_runner.h"
#include "tests/support/test_servers.h"

namespace sqlq::cli_test {
namespace {

using std::chrono::seconds;

enum class Engine { kSqlite, kPostgres, kMariadb };

class SteerCliTest : public CliFixture,
                     public ::testing::WithParamInterface<Engine> {
 protected:
  void SetUp() override {
    CliFixture::SetUp();
    static std::atomic<int> counter{0};
    prefix_ = "cli-" + std::to_string(getpid()) + "-" +
              std::to_string(counter++) + "-";
    if (GetParam() == Engine::kPostgres) {
      SQLQ_REQUIRE_SERVER(test::kPostgresServer);
      db_ = test::ServerUrl(test::kPostgresServer);
    } else if (GetParam() == Engine::kMariadb) {
      SQLQ_REQUIRE_SERVER(test::kMariadbServer);
      db_ = test::ServerUrl(test::kMariadbServer);
    }
  }
  void TearDown() override {
    for (const std::string& q : made_) (void)Json({"queue", "drop", q});
    CliFixture::TearDown();
  }
  // This test's name for queue `name`, created with `options`.
  std::string Queue(const std::string& name,
                    std::vector<std::string> options = {}) {
    const std::string q = prefix_ + name;
    options.insert(options.begin(), {"queue", "create", q});
    One(options);
    made_.push_back(q);
    return q;
  }
  std::int64_t Send(const std::string& q, const std::string& payload,
                    std::vector<std::string> options = {}) {
    options.insert(options.begin(), {"send", q, payload});
    return One(options).value("id", std::int64_t{-1});
  }
  // Sends a message and claims it: its receipt.
  std::string Claimed(const std::string& q) {
    Send(q, "fragile");
    return One({"claim", q})["receipt"];
  }
  json Count(const std::string& q, std::vector<std::string> filter = {}) {
    filter.insert(filter.begin(), {"message", "count", q});
    return One(filter)["count"];
  }
  // `sqlq --db DB ARGS...` on a terminal of its own.
  std::unique_ptr<PtyChild> AtTerminal(std::vector<std::string> args) {
    args.insert(args.begin(), {"--db", db_});
    return std::make_unique<PtyChild>(SQLQ_BIN, args, dir_);
  }

  std::string prefix_;
  std::vector<std::string> made_;
};

// A nack that uses up the attempts names where the message is now: the
// queue's own dead letters, its dead-letter queue (and --json says which),
// or its own dead letters when the dead-letter queue it names is missing.
TEST_P(SteerCliTest, NackSaysWhereTheDeadLetterWent) {
  const std::string dlq = Queue("dlq");
  const std::string jobs =
      Queue("jobs", {"--max-attempts", "1", "--dead-letter-queue", dlq});
  const std::string solo = Queue("solo", {"--max-attempts", "1"});
  const std::string orphan = Queue(
      "orphan", {"--max-attempts", "1", "--dead-letter-queue", prefix_ + "no"});

  RunResult moved = Human({"nack", jobs, Claimed(jobs), "--error", "smtp 451"});
  EXPECT_EQ(moved.exit_code, kOk) << Show(moved);
  EXPECT_EQ(moved.out, "attempts used up: moved to queue '" + dlq +
                           "' (the dead-letter queue of '" + jobs +
                           "'), ready\n");
  const std::string receipt = Claimed(jobs);
  EXPECT_EQ(One({"nack", jobs, receipt}), json({{"receipt", receipt},
                                                {"outcome", "dead"},
                                                {"dead_letter_queue", dlq}}));
  auto arrived = Ok({"message", "list", dlq});
  ASSERT_EQ(arrived.size(), 2u);
  EXPECT_EQ(arrived[0]["state"], "ready");
  EXPECT_EQ(arrived[0]["last_error"], "smtp 451");

  RunResult kept = Human({"nack", solo, Claimed(solo)});
  EXPECT_EQ(kept.exit_code, kOk) << Show(kept);
  EXPECT_EQ(kept.out, "attempts used up: now in the dead letters of queue '" +
                          solo + "' (sqlq dead list " + solo + ")\n");
  const std::string solo_receipt = Claimed(solo);
  EXPECT_EQ(One({"nack", solo, solo_receipt}),
            json({{"receipt", solo_receipt}, {"outcome", "dead"}}));

  RunResult stayed = Human({"nack", orphan, Claimed(orphan)});
  EXPECT_EQ(stayed.exit_code, kOk) << Show(stayed);
  EXPECT_EQ(stayed.out,
            "attempts used up: kept in the dead letters of queue '" + orphan +
                "': its dead-letter queue '" + prefix_ +
                "no' does not exist\n");
  EXPECT_EQ(Count(orphan, {"--state", "dead"}), 1);
}

TEST_P(SteerCliTest, CancelSaysWhereTheMessagesWent) {
  const std::string dlq = Queue("dlq");
  const std::string jobs = Queue("jobs", {"--dead-letter-queue", dlq});
  const std::string solo = Queue("solo");
  for (const std::string& q : {jobs, jobs, solo}) {
    Send(q, "x", {"--header", "tenant=acme"});
  }
  // stdin is not a terminal here: no question, as before.
  RunResult moved =
      Human({"message", "cancel", jobs, "--header", "tenant=acme"});
  EXPECT_EQ(moved.exit_code, kOk) << Show(moved);
  EXPECT_EQ(moved.out, "cancel: 2 messages, moved to queue '" + dlq +
                           "' (the dead-letter queue of '" + jobs +
                           "'), ready\n");
  EXPECT_EQ(moved.err, "");
  EXPECT_EQ(Count(dlq, {"--state", "ready"}), 2);
  EXPECT_EQ(One({"message", "cancel", solo, "--all"}), json({{"changed", 1}}));
  EXPECT_EQ(Count(solo, {"--state", "dead"}), 1);
}

// --dry-run counts what the change would touch, by filter or by ids, and
// changes nothing; it refuses what the change itself would refuse.
TEST_P(SteerCliTest, DryRunCountsAndChangesNothing) {
  const std::string jobs = Queue("jobs");
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 3; ++i) {
    ids.push_back(Send(jobs, "a" + std::to_string(i), {"--header", "t=acme"}));
  }
  Send(jobs, "other");
  One({"claim", jobs});  // one of them leased: still chosen
  EXPECT_EQ(One({"message", "delete", jobs, "--header", "t=acme", "--dry-run"}),
            json({{"changed", 0}, {"would_change", 3}, {"dry_run", true}}));
  RunResult human =
      Human({"message", "cancel", jobs, "--all", "--dry-run", "--yes"});
  EXPECT_EQ(human.exit_code, kOk) << Show(human);
  EXPECT_EQ(human.out,
            "cancel: would cancel 4 messages; nothing changed "
            "(--dry-run)\n");
  EXPECT_EQ(One({"message", "delete", jobs, std::to_string(ids[0]),
                 std::to_string(ids[1]), std::to_string(ids[1]), "999999999",
                 "--dry-run"})["would_change"],
            2);
  EXPECT_EQ(One({"message", "delete", jobs, std::to_string(ids[0]), "--state",
                 "dead", "--dry-run"})["would_change"],
            0);
  EXPECT_EQ(One({"message", "delete", jobs, "--state", "dead", "--all",
                 "--dry-run"})["would_change"],
            0);
  EXPECT_TRUE(FailsWith(
      Human({"message", "cancel", jobs, "--state", "dead", "--dry-run"}),
      kUsage, "not to dead letters"));
  EXPECT_TRUE(
      FailsWith(Human({"message", "delete", jobs, std::to_string(ids[0]),
                       "--header", "t=acme", "--dry-run"}),
                kUsage, "not both"));
  json stats = One({"queue", "stats", jobs});
  EXPECT_EQ(stats["ready"], 3);
  EXPECT_EQ(stats["leased"], 1);
  EXPECT_EQ(stats["dead"], 0);
}

// At a terminal a delete or cancel by filter says how many it would touch
// and asks; "n" changes nothing, "y" changes what was counted (a message
// sent while the question waits is left alone), --yes does not ask.
TEST_P(SteerCliTest, AFilterAsksAtATerminal) {
  const std::string jobs = Queue("jobs");
  Send(jobs, "a", {"--header", "t=acme"});
  Send(jobs, "b", {"--header", "t=acme"});
  Send(jobs, "c");
  const std::string question =
      "delete 2 messages of queue '" + jobs + "' (--header t=acme)? [y/N] ";

  auto no = AtTerminal({"message", "delete", jobs, "--header", "t=acme"});
  ASSERT_TRUE(no->started());
  ASSERT_TRUE(no->WaitFor(question, seconds(30))) << no->output();
  no->Type("n\n");
  RunResult declined = no->Finish();
  EXPECT_EQ(declined.exit_code, kOk) << Show(declined);
  EXPECT_NE(declined.out.find("sqlq: not confirmed; nothing changed"),
            std::string::npos)
      << declined.out;
  EXPECT_EQ(Count(jobs), 3);

  auto yes = AtTerminal({"message", "delete", jobs, "--header", "t=acme"});
  ASSERT_TRUE(yes->WaitFor(question, seconds(30))) << yes->output();
  Send(jobs, "late", {"--header", "t=acme"});
  yes->Type("y\n");
  RunResult confirmed = yes->Finish();
  EXPECT_EQ(confirmed.exit_code, kOk) << Show(confirmed);
  EXPECT_NE(confirmed.out.find("delete: 2 messages"), std::string::npos)
      << confirmed.out;
  auto left = Ok({"message", "list", jobs, "--header", "t=acme"});
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0]["payload"], "late");

  // --json at a terminal asks too; the answer leaves the output an object.
  auto json_no = AtTerminal(
      {"--json", "message", "cancel", jobs, "--payload-prefix", "c"});
  ASSERT_TRUE(json_no->WaitFor(
      "cancel 1 message of queue '" + jobs + "' (--payload-prefix c)? [y/N] ",
      seconds(30)))
      << json_no->output();
  json_no->Type("no\n");
  RunResult json_declined = json_no->Finish();
  EXPECT_EQ(json_declined.exit_code, kOk) << Show(json_declined);
  EXPECT_NE(json_declined.out.find("{\"changed\":0}"), std::string::npos)
      << json_declined.out;

  auto skip = AtTerminal({"message", "cancel", jobs, "--all", "--yes"});
  RunResult skipped = skip->Finish();
  EXPECT_EQ(skipped.exit_code, kOk) << Show(skipped);
  EXPECT_EQ(skipped.out.find("[y/N]"), std::string::npos) << skipped.out;
  EXPECT_NE(skipped.out.find("cancel: 2 messages"), std::string::npos)
      << skipped.out;
  EXPECT_EQ(Count(jobs, {"--state", "dead"}), 2);

  // Ids name exactly what to change: no question.
  const std::int64_t id = Send(jobs, "by id");
  auto by_id = AtTerminal({"message", "delete", jobs, std::to_string(id)});
  RunResult deleted = by_id->Finish();
  EXPECT_EQ(deleted.exit_code, kOk) << Show(deleted);
  EXPECT_EQ(deleted.out.find("[y/N]"), std::string::npos) << deleted.out;
  EXPECT_EQ(Count(jobs), 0);
}

INSTANTIATE_TEST_SUITE_P(Sqlite, SteerCliTest,
                         ::testing::Values(Engine::kSqlite));
INSTANTIATE_TEST_SUITE_P(Postgres, SteerCliTest,
                         ::testing::Values(Engine::kPostgres));
INSTANTIATE_TEST_SUITE_P(Mariadb, SteerCliTest,
                         ::testing::Values(Engine::kMariadb));

}  // namespace
}  // namespace sqlq::cli_test
