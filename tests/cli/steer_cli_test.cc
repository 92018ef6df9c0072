// What the command line says when it moves or removes messages, on every
// engine: where dead letters went (the queue's own dead letters, or its
// dead-letter queue).
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
#include "tests/cli/cli_runner.h"
#include "tests/support/test_servers.h"

namespace sqlq::cli_test {
namespace {

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

INSTANTIATE_TEST_SUITE_P(Sqlite, SteerCliTest,
                         ::testing::Values(Engine::kSqlite));
INSTANTIATE_TEST_SUITE_P(Postgres, SteerCliTest,
                         ::testing::Values(Engine::kPostgres));
INSTANTIATE_TEST_SUITE_P(Mariadb, SteerCliTest,
                         ::testing::Values(Engine::kMariadb));

}  // namespace
}  // namespace sqlq::cli_test
