// `sqlq bench ...` runs the program sqlq-bench from sqlq's directory with
// the same arguments; where it is missing, sqlq says so.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/shell.h"
#include "tests/support/sqlq_bin.h"

namespace sqlq::test {
namespace {

namespace fs = std::filesystem;

class BenchProgram : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sqlq-bench-program-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

// The global options may stand before the word "bench": they reach
// sqlq-bench, which measures the database named and prints JSON.
TEST_F(BenchProgram, GlobalOptionsBeforeTheCommandReachTheBenchmark) {
  const std::string db = "sqlite:" + (dir_ / "b.db").string();
  Ran r = Shell(std::string(SQLQ_BIN) + " --db '" + db +
                "' --json bench --runs 1 --threads 1 --messages 20 "
                "--workload send-1");
  ASSERT_EQ(r.exit, 0) << r.out;
  auto first =
      nlohmann::json::parse(r.out.substr(0, r.out.find('\n')), nullptr, false);
  ASSERT_FALSE(first.is_discarded()) << r.out;
  EXPECT_EQ(first["bench"], "environment");
  EXPECT_EQ(first["db"], db);
  EXPECT_NE(r.out.find(R"("workload":"send-1")"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir_ / "b.db"));
}

TEST_F(BenchProgram, HelpIsTheBenchmarksOwn) {
  Ran r = Shell(std::string(SQLQ_BIN) + " bench --help");
  EXPECT_EQ(r.exit, 0) << r.out;
  EXPECT_NE(r.out.find("sqlq-bench"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--workload"), std::string::npos) << r.out;
}

// A sqlq without sqlq-bench beside it (a copy of the program alone).
TEST_F(BenchProgram, AMissingBenchmarkProgramIsNamedAndExits3) {
  const fs::path alone = dir_ / "sqlq";
  fs::copy_file(SQLQ_BIN, alone);
  Ran r = Shell(alone.string() + " bench --runs 1");
  EXPECT_EQ(r.exit, 3) << r.out;
  EXPECT_NE(r.out.find((dir_ / "sqlq-bench").string() + " is missing"),
            std::string::npos)
      << r.out;
  Ran j = Shell(alone.string() + " --json bench --runs 1");
  EXPECT_EQ(j.exit, 3) << j.out;
  EXPECT_NE(j.out.find(R"({"error":{"code":"not_found")"), std::string::npos)
      << j.out;
}

}  // namespace
}  // namespace sqlq::test
