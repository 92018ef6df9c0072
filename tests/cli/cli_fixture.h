// A fixture for tests of the sqlq program on a fresh SQLite database in a
// temporary directory: runs it with --json or with human output, and reads
// its JSON lines.

#ifndef SQLQ_TESTS_CLI_CLI_FIXTURE_H_
#define SQLQ_TESTS_CLI_CLI_FIXTURE_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/cli_assertions.h"
#include "tests/cli/cli_runner.h"

namespace sqlq::cli_test {

class CliFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sqlq-cli-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    db_path_ = dir_ + "/q.db";
    db_ = "sqlite:" + db_path_;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Runs sqlq with exactly `args`, in the test's directory unless
  // `options` names another, without SQLQ_DB unless `options` sets it.
  RunResult Sqlq(const std::vector<std::string>& args,
                 RunOptions options = {}) {
    if (options.cwd.empty()) options.cwd = dir_;
    return cli_test::Run(SQLQ_BIN, args, options);
  }
  // Runs `sqlq --db DB --json ARGS...`.
  RunResult Json(std::vector<std::string> args, RunOptions options = {}) {
    args.insert(args.begin(), {"--db", db_, "--json"});
    return Sqlq(args, std::move(options));
  }
  // Runs `sqlq --db DB ARGS...` (human output; errors as "sqlq: ...").
  RunResult Human(std::vector<std::string> args, RunOptions options = {}) {
    args.insert(args.begin(), {"--db", db_});
    return Sqlq(args, std::move(options));
  }
  // Json(args) that must succeed silently on stderr; its stdout lines.
  std::vector<json> Ok(std::vector<std::string> args,
                       std::string stdin_bytes = "") {
    RunResult r =
        Json(std::move(args), {.stdin_bytes = std::move(stdin_bytes)});
    std::vector<json> lines;
    EXPECT_EQ(r.exit_code, kOk) << Show(r);
    EXPECT_EQ(r.err, "") << Show(r);
    EXPECT_TRUE(ParseLines(r.out, &lines));
    return lines;
  }
  // Ok(args) that prints exactly one object.
  json One(std::vector<std::string> args, std::string stdin_bytes = "") {
    auto lines = Ok(std::move(args), std::move(stdin_bytes));
    EXPECT_EQ(lines.size(), 1u);
    return lines.empty() ? json::object() : lines[0];
  }

  std::string dir_, db_path_, db_;
};

}  // namespace sqlq::cli_test

#endif  // SQLQ_TESTS_CLI_CLI_FIXTURE_H_
