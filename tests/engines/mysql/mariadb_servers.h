// Throwaway MariaDB servers of a test's own (scripts/mariadb-test-server.sh):
// one, or a primary with a replica; restarted or killed on demand. And a raw
// Connector/C connection to look at them from outside sqlq.
//
// Tests that start servers run where MariaDB tests run at all: when
// SQLQ_TEST_MYSQL_URL is set (scripts/test.sh sets it), or fail when
// SQLQ_REQUIRE_MYSQL=1 says they must run.

#ifndef SQLQ_TESTS_ENGINES_MYSQL_MARIADB_SERVERS_H_
#define SQLQ_TESTS_ENGINES_MYSQL_MARIADB_SERVERS_H_

#include <gtest/gtest.h>
#include <mysql.h>
#include <stdio.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/script_vars.h"

namespace sqlq::test {

// In a test body: skips unless MariaDB tests are to run
// (tests/support/test_servers.h).
#define SQLQ_SKIP_UNLESS_MARIADB() SQLQ_REQUIRE_SERVER(kMariadbServer)

inline const std::string& MariadbScript() {
  static const std::string script =
      std::string(SQLQ_SOURCE_DIR) + "/scripts/mariadb-test-server.sh";
  return script;
}

// Runs the script with `args`; returns the variables its "export K='V' ..."
// output sets (empty on failure).
inline std::map<std::string, std::string> RunMariadbScript(
    const std::string& args) {
  return ScriptVars(MariadbScript() + " " + args);
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

// One server's directory, as the script lays it out.
struct MariadbServer {
  std::string dir;
  std::string url;
  std::string password() const { return ReadFile(dir + "/password"); }
  unsigned port() const {
    return static_cast<unsigned>(std::stoul(ReadFile(dir + "/port")));
  }
  std::string log() const { return ReadFile(dir + "/server.log"); }
  // Clean shutdown and start again, same port.
  bool Restart() const {
    return std::system((MariadbScript() + " restart " + dir).c_str()) == 0;
  }
  // kill -9 and start again, same port.
  bool Crash() const {
    return std::system((MariadbScript() + " crash " + dir).c_str()) == 0;
  }
};

// Servers started by one script call, stopped when this goes.
class MariadbServers {
 public:
  // `args`: "start", "start --binlog STATEMENT", "start-replicated MIXED".
  explicit MariadbServers(const std::string& args) {
    auto vars = RunMariadbScript(args);
    top_dir_ = vars["SQLQ_TEST_MYSQL_DIR"];
    primary_.url = vars["SQLQ_TEST_MYSQL_URL"];
    primary_.dir = vars.count("SQLQ_TEST_MYSQL_PRIMARY_DIR")
                       ? vars["SQLQ_TEST_MYSQL_PRIMARY_DIR"]
                       : top_dir_;
    replica_.url = vars["SQLQ_TEST_MYSQL_REPLICA_URL"];
    replica_.dir = vars["SQLQ_TEST_MYSQL_REPLICA_DIR"];
  }
  ~MariadbServers() {
    if (!top_dir_.empty()) {
      (void)std::system((MariadbScript() + " stop " + top_dir_).c_str());
    }
  }
  MariadbServers(const MariadbServers&) = delete;
  MariadbServers& operator=(const MariadbServers&) = delete;

  bool ok() const { return !top_dir_.empty() && !primary_.url.empty(); }
  const MariadbServer& primary() const { return primary_; }
  const MariadbServer& replica() const { return replica_; }

 private:
  std::string top_dir_;
  MariadbServer primary_, replica_;
};

// A plain Connector/C connection as root to database `sqlq` of a server,
// for looking at what sqlq stored. Not thread-safe.
class RawConnection {
 public:
  explicit RawConnection(const MariadbServer& server)
      : conn_(mysql_init(nullptr)) {
    if (mysql_real_connect(conn_, "127.0.0.1", "root",
                           server.password().c_str(), "sqlq", server.port(),
                           nullptr, 0) == nullptr) {
      error_ = mysql_error(conn_);
    }
  }
  ~RawConnection() { mysql_close(conn_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  // Empty when connected.
  const std::string& error() const { return error_; }

  // Runs `sql`; its rows (NULL as "NULL"), or nullopt with error() set.
  std::optional<std::vector<std::vector<std::string>>> Query(
      const std::string& sql) {
    std::vector<std::vector<std::string>> rows;
    if (mysql_real_query(conn_, sql.data(), sql.size()) != 0) {
      error_ = mysql_error(conn_);
      return std::nullopt;
    }
    MYSQL_RES* res = mysql_store_result(conn_);
    if (res == nullptr) {
      if (mysql_field_count(conn_) != 0) {
        error_ = mysql_error(conn_);
        return std::nullopt;
      }
      return rows;
    }
    const unsigned n = mysql_num_fields(res);
    while (MYSQL_ROW row = mysql_fetch_row(res)) {
      unsigned long* lengths = mysql_fetch_lengths(res);
      std::vector<std::string> r;
      for (unsigned i = 0; i < n; ++i) {
        r.push_back(row[i] == nullptr ? "NULL"
                                      : std::string(row[i], lengths[i]));
      }
      rows.push_back(std::move(r));
    }
    mysql_free_result(res);
    error_.clear();
    return rows;
  }

  // The first row of `sql` by column name; empty on error or no row.
  std::map<std::string, std::string> FirstRow(const std::string& sql) {
    std::map<std::string, std::string> out;
    if (mysql_real_query(conn_, sql.data(), sql.size()) != 0) {
      error_ = mysql_error(conn_);
      return out;
    }
    MYSQL_RES* res = mysql_store_result(conn_);
    if (res == nullptr) return out;
    const unsigned n = mysql_num_fields(res);
    MYSQL_FIELD* fields = mysql_fetch_fields(res);
    if (MYSQL_ROW row = mysql_fetch_row(res)) {
      for (unsigned i = 0; i < n; ++i) {
        out[fields[i].name] = row[i] == nullptr ? "NULL" : row[i];
      }
    }
    mysql_free_result(res);
    return out;
  }

  // The single value of a one-row, one-column query; "" on error.
  std::string Value(const std::string& sql) {
    auto rows = Query(sql);
    if (!rows || rows->empty() || rows->front().empty()) return "";
    return rows->front().front();
  }

 private:
  MYSQL* conn_;
  std::string error_;
};

}  // namespace sqlq::test

#endif  // SQLQ_TESTS_ENGINES_MYSQL_MARIADB_SERVERS_H_
