// The one rule for tests that need a database server: they run where the
// server's URL variable is set (scripts/test.sh starts throwaway servers
// and sets it), are skipped where it is not, and fail instead of skipping
// when SQLQ_REQUIRE_<ENGINE>=1 says the server was meant to be there (as
// scripts/test.sh and CI set), so that a missing server never passes as
// green.

#ifndef SQLQ_TESTS_SUPPORT_TEST_SERVERS_H_
#define SQLQ_TESTS_SUPPORT_TEST_SERVERS_H_

#include <gtest/gtest.h>
#include <stdlib.h>

#include <ostream>
#include <string>

namespace sqlq::test {

struct TestServer {
  const char* url_var;      // the URL of a database on it, as an admin
  const char* require_var;  // =1: fail rather than skip without it
  const char* how;          // how to get one
};

inline constexpr TestServer kPostgresServer{
    "SQLQ_TEST_PG_URL", "SQLQ_REQUIRE_PG",
    "run scripts/test.sh, or eval \"$(scripts/pg-test-server.sh start)\""};
inline constexpr TestServer kMariadbServer{
    "SQLQ_TEST_MYSQL_URL", "SQLQ_REQUIRE_MYSQL",
    "run scripts/test.sh, or eval \"$(scripts/mariadb-test-server.sh "
    "start)\""};

// The engines, by the names tests give them (valid gtest names), each with
// the server it needs (none for SQLite). The one list of engines: every
// suite that runs on each engine is instantiated from it (the conformance
// suites through Engines() in tests/conformance/engine_fixture.h), so an
// engine added here runs them all.
struct TestEngine {
  const char* name;
  const TestServer* server;  // nullptr: none needed
};
inline constexpr TestEngine kTestEngines[] = {
    {"Sqlite", nullptr},
    {"Postgres", &kPostgresServer},
    {"Mysql", &kMariadbServer},
};
inline void PrintTo(const TestEngine& e, std::ostream* os) { *os << e.name; }

// The server's URL, or "" when its variable is unset.
inline std::string ServerUrl(const TestServer& s) {
  const char* url = std::getenv(s.url_var);
  return url != nullptr ? url : "";
}

// Why the server's tests cannot run here, or "" when they can.
inline std::string ServerMissing(const TestServer& s) {
  if (!ServerUrl(s).empty()) return "";
  return std::string(s.url_var) + " is not set: " + s.how;
}

inline bool ServerRequired(const TestServer& s) {
  const char* v = std::getenv(s.require_var);
  return v != nullptr && std::string(v) == "1";
}

}  // namespace sqlq::test

// In a test body or SetUp: skips the test without the server, or fails it
// when the server was required.
#define SQLQ_REQUIRE_SERVER(server)                                           \
  do {                                                                        \
    const std::string sqlq_missing_ = ::sqlq::test::ServerMissing(server);    \
    if (!sqlq_missing_.empty()) {                                             \
      if (::sqlq::test::ServerRequired(server)) {                             \
        FAIL() << sqlq_missing_ << " (and " << (server).require_var << "=1)"; \
      }                                                                       \
      GTEST_SKIP() << sqlq_missing_;                                          \
    }                                                                         \
  } while (0)

#endif  // SQLQ_TESTS_SUPPORT_TEST_SERVERS_H_
