// Regression tests from review: the sqlq program aborted (std::terminate on an
// uncaught nlohmann::json::type_error 316) on text that is not valid UTF-8:
//  - table output (no --json) of a cell that holds a control character and
//    an invalid byte: Cell() in src/wire/printer.cc called v.dump() without
//    error_handler_t::replace. A nack error (a stack trace: newlines) that
//    CutError() cut at 4096 bytes in the middle of a multi-byte character is
//    enough; so is a worker name in `archive list`.
//  - a usage error under --json whose message carries the offending word:
//    Main() in src/cli/main.cc dumps it without the replace handler.
// docs/cli.md: errors are one line and an exit code 0-10, never a signal.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/cli/cli_assertions.h"
#include "tests/cli/cli_runner.h"

namespace sqlq::cli_test {
namespace {

TEST(CliReview, DeadListTableSurvivesAnErrorWithNewlineAndInvalidUtf8) {
  std::string dir = "/tmp/sqlq-review-XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  const std::string url = "--db=sqlite:" + dir + "/q.db";
  ASSERT_EQ(cli_test::Run(SQLQ_BIN,
                          {url, "queue", "create", "q", "--max-attempts", "1"})
                .exit_code,
            0);
  ASSERT_EQ(cli_test::Run(SQLQ_BIN, {url, "send", "q", "hello"}).exit_code, 0);
  RunResult claim = cli_test::Run(SQLQ_BIN, {url, "--json", "claim", "q"});
  ASSERT_EQ(claim.exit_code, 0) << Show(claim);
  std::string receipt =
      nlohmann::json::parse(claim.out)["receipt"].get<std::string>();
  RunResult nack =
      cli_test::Run(SQLQ_BIN, {url, "nack", "q", receipt, "--error",
                               "Traceback:\n  caf\xc3"});  // cut 'é'
  ASSERT_EQ(nack.exit_code, 0) << Show(nack);

  RunResult list = cli_test::Run(SQLQ_BIN, {url, "dead", "list", "q"});
  EXPECT_EQ(list.signal, 0) << Show(list);
  EXPECT_EQ(list.exit_code, 0) << Show(list);
  std::filesystem::remove_all(dir);
}

TEST(CliReview, JsonUsageErrorForAnInvalidUtf8WordIsOneLineNotAnAbort) {
  RunResult r = cli_test::Run(SQLQ_BIN, {"--json", "\xff"});
  EXPECT_EQ(r.signal, 0) << Show(r);
  EXPECT_EQ(r.exit_code, 2) << Show(r);
}

TEST(CliReview, NegativeByteCountIsRefusedNotWrapped) {
  std::string dir = "/tmp/sqlq-review-XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  const std::string url = "--db=sqlite:" + dir + "/q.db";
  RunResult r = cli_test::Run(
      SQLQ_BIN, {url, "queue", "create", "q", "--max-payload", "-1"});
  EXPECT_EQ(r.exit_code, 2) << Show(r);
  EXPECT_NE(r.err.find("must not be negative"), std::string::npos) << Show(r);
  EXPECT_EQ(r.err.find("18446744073709551615"), std::string::npos) << Show(r);
  EXPECT_FALSE(std::filesystem::exists(dir + "/q.db"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sqlq::cli_test
