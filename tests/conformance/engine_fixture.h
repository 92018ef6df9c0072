// What the conformance suite runs against: one factory per engine that makes
// a fresh, empty database for every test, a manual clock to move leases and
// delays without sleeping, and assertion helpers for Status and Result.
//
// Adding an engine: write a TestDatabase subclass that creates a fresh
// database (and drops it in its destructor) and a factory function for it,
// and name the engine in kTestEngines (tests/support/test_servers.h). Every
// suite runs on the engines of Engines() (ServerEngines(): those that need
// a server) with one INSTANTIATE_TEST_SUITE_P line.

#ifndef SQLQ_TESTS_CONFORMANCE_ENGINE_FIXTURE_H_
#define SQLQ_TESTS_CONFORMANCE_ENGINE_FIXTURE_H_

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <mysql.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "tests/support/test_servers.h"
#include "tests/support/test_util.h"

namespace sqlq {
namespace test {

// `url` with the store URL parameters of SQLQ_TEST_STORE_PARAMS appended
// (as "ack_flush=off&write_groups=1"), so that the whole suite can run
// under an engine's tuning; `url` itself when it is unset. The parameters
// go only to the store, never to the admin connections that make and drop
// the databases.
inline std::string WithStoreParams(const std::string& url) {
  const char* params = std::getenv("SQLQ_TEST_STORE_PARAMS");
  if (params == nullptr || *params == '\0') return url;
  return url + (url.find('?') == std::string::npos ? "?" : "&") + params;
}

// One fresh, empty database; dropped when the object goes.
class TestDatabase {
 public:
  virtual ~TestDatabase() = default;
  // The store's URL (with SQLQ_TEST_STORE_PARAMS).
  virtual const std::string& url() const = 0;
  // The URL for a client library's own connection (without them).
  virtual const std::string& raw_url() const { return url(); }
};

class SqliteDatabase : public TestDatabase {
 public:
  SqliteDatabase()
      : path_((dir_.path() / "sqlq.db").string()),
        url_(WithStoreParams("sqlite:" + path_)) {}
  const std::string& url() const override { return url_; }
  const std::string& path() const { return path_; }
  const TempDir& dir() const { return dir_; }

 private:
  TempDir dir_;
  std::string path_;
  std::string url_;
};

// The PostgreSQL server the tests use: SQLQ_TEST_PG_URL, a URL of a
// database on it (usually "postgres") as a user allowed to create databases.
// scripts/test.sh starts a throwaway server and sets it
// (scripts/pg-test-server.sh); empty when unset.
inline std::string PostgresTestUrl() { return ServerUrl(kPostgresServer); }

// `url` with its database name replaced by `dbname`.
inline std::string WithDatabase(const std::string& url,
                                const std::string& dbname) {
  const auto authority = url.find("://");
  const auto path = url.find_first_of("/?", authority + 3);
  if (path == std::string::npos) return url + "/" + dbname;
  const auto query = url.find('?', path);
  return url.substr(0, path) + "/" + dbname +
         (query == std::string::npos ? "" : url.substr(query));
}

// Runs one statement on the server's admin database; "" or the error.
inline std::string PostgresAdmin(const std::string& sql) {
  PGconn* conn = PQconnectdb(PostgresTestUrl().c_str());
  std::string error;
  if (PQstatus(conn) != CONNECTION_OK) {
    error = PQerrorMessage(conn);
  } else {
    PGresult* res = PQexec(conn, sql.c_str());
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
      error = PQresultErrorMessage(res);
    }
    PQclear(res);
  }
  PQfinish(conn);
  return error;
}

// A fresh database on the test server, dropped (with any connection still
// open to it) when the object goes.
class PostgresDatabase : public TestDatabase {
 public:
  PostgresDatabase() {
    static std::atomic<int> counter{0};
    std::random_device rd;
    name_ = "sqlq_test_" + std::to_string(getpid()) + "_" +
            std::to_string(counter++) + "_" + std::to_string(rd() % 100000);
    std::string error = PostgresAdmin("CREATE DATABASE " + name_);
    if (!error.empty()) ADD_FAILURE() << "CREATE DATABASE: " << error;
    raw_url_ = WithDatabase(PostgresTestUrl(), name_);
    url_ = WithStoreParams(raw_url_);
  }
  ~PostgresDatabase() override {
    std::string error =
        PostgresAdmin("DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
    if (!error.empty()) ADD_FAILURE() << "DROP DATABASE: " << error;
  }
  const std::string& url() const override { return url_; }
  const std::string& raw_url() const override { return raw_url_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::string raw_url_;
  std::string url_;
};

// The MariaDB/MySQL server the tests use: SQLQ_TEST_MYSQL_URL, a
// mysql:// URL of a database on it (usually "mysql") as a user allowed to
// create databases. scripts/test.sh starts a throwaway server and sets it;
// empty when unset.
inline std::string MysqlTestUrl() { return ServerUrl(kMariadbServer); }

// The parts of a mysql://user:password@host:port/db URL the test helpers
// need (no percent-decoding: test URLs do not use it).
struct MysqlUrlParts {
  std::string user, password, host = "127.0.0.1", db;
  unsigned int port = 3306;
};

inline MysqlUrlParts ParseMysqlUrl(const std::string& url) {
  MysqlUrlParts p;
  std::string rest = url.substr(url.find("://") + 3);
  rest = rest.substr(0, rest.find('?'));
  const auto slash = rest.find('/');
  if (slash != std::string::npos) {
    p.db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
  }
  const auto at = rest.rfind('@');
  if (at != std::string::npos) {
    const std::string userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const auto colon = userinfo.find(':');
    p.user = userinfo.substr(0, colon);
    if (colon != std::string::npos) p.password = userinfo.substr(colon + 1);
  }
  const auto colon = rest.rfind(':');
  if (colon != std::string::npos) {
    p.port = static_cast<unsigned int>(std::stoul(rest.substr(colon + 1)));
    rest = rest.substr(0, colon);
  }
  if (!rest.empty()) p.host = rest;
  return p;
}

// A connection to `url` (the test server's by default), or null with the
// error in `*error`. The caller closes it with mysql_close.
inline MYSQL* MysqlConnect(const std::string& url, std::string* error) {
  const MysqlUrlParts p = ParseMysqlUrl(url);
  MYSQL* m = mysql_init(nullptr);
  if (mysql_real_connect(m, p.host.c_str(), p.user.c_str(), p.password.c_str(),
                         p.db.empty() ? nullptr : p.db.c_str(), p.port, nullptr,
                         CLIENT_FOUND_ROWS) == nullptr) {
    if (error != nullptr) *error = mysql_error(m);
    mysql_close(m);
    return nullptr;
  }
  return m;
}

// Runs one statement on the test server's admin database; "" or the error.
inline std::string MysqlAdmin(const std::string& sql) {
  std::string error;
  MYSQL* m = MysqlConnect(MysqlTestUrl(), &error);
  if (m == nullptr) return error;
  if (mysql_query(m, sql.c_str()) != 0) {
    error = mysql_error(m);
  } else {
    MYSQL_RES* res = mysql_store_result(m);
    if (res != nullptr) mysql_free_result(res);
  }
  mysql_close(m);
  return error;
}

// A fresh database on the MariaDB test server, dropped when the object goes.
class MysqlDatabase : public TestDatabase {
 public:
  MysqlDatabase() {
    static std::atomic<int> counter{0};
    std::random_device rd;
    name_ = "sqlq_test_" + std::to_string(getpid()) + "_" +
            std::to_string(counter++) + "_" + std::to_string(rd() % 100000);
    std::string error = MysqlAdmin("CREATE DATABASE " + name_);
    if (!error.empty()) ADD_FAILURE() << "CREATE DATABASE: " << error;
    raw_url_ = WithDatabase(MysqlTestUrl(), name_);
    url_ = WithStoreParams(raw_url_);
  }
  ~MysqlDatabase() override {
    std::string error = MysqlAdmin("DROP DATABASE IF EXISTS " + name_);
    if (!error.empty()) ADD_FAILURE() << "DROP DATABASE: " << error;
  }
  const std::string& url() const override { return url_; }
  const std::string& raw_url() const override { return raw_url_; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::string raw_url_;
  std::string url_;
};

// An engine under test: its name (a valid gtest name), how to make a fresh
// database for it, and the server it needs (none for SQLite).
struct EngineFactory {
  std::string name;
  std::function<std::unique_ptr<TestDatabase>()> make;
  const TestServer* server = nullptr;
};

inline void PrintTo(const EngineFactory& f, std::ostream* os) { *os << f.name; }

inline EngineFactory SqliteFactory() {
  return {"Sqlite", [] { return std::make_unique<SqliteDatabase>(); }};
}

inline EngineFactory PostgresFactory() {
  return {"Postgres", [] { return std::make_unique<PostgresDatabase>(); },
          &kPostgresServer};
}

inline EngineFactory MysqlFactory() {
  return {"Mysql", [] { return std::make_unique<MysqlDatabase>(); },
          &kMariadbServer};
}

// The factory of each engine of kTestEngines (tests/support/test_servers.h),
// in its order: what every suite is instantiated with.
inline std::vector<EngineFactory> Engines() {
  std::vector<EngineFactory> out;
  for (const TestEngine& e : kTestEngines) {
    const std::string name = e.name;
    out.push_back(name == "Postgres" ? PostgresFactory()
                  : name == "Mysql"  ? MysqlFactory()
                                     : SqliteFactory());
    if (out.back().name != name) {
      std::fprintf(stderr,
                   "kTestEngines names %s, which has no factory in "
                   "engine_fixture.h\n",
                   e.name);
      std::abort();
    }
  }
  return out;
}

// The engines of Engines() that run on a database server.
inline std::vector<EngineFactory> ServerEngines() {
  std::vector<EngineFactory> out = Engines();
  std::erase_if(out,
                [](const EngineFactory& f) { return f.server == nullptr; });
  return out;
}

// In SetUp: the one rule of tests/support/test_servers.h for the engine's
// server.
#define SQLQ_SKIP_UNLESS_AVAILABLE(factory)   \
  do {                                        \
    if ((factory).server != nullptr) {        \
      SQLQ_REQUIRE_SERVER(*(factory).server); \
    }                                         \
  } while (0)

inline std::string EngineName(
    const ::testing::TestParamInfo<EngineFactory>& info) {
  return info.param.name;
}

// A fresh database per test, a ManualClock, and a store opened on both.
class EngineTest : public ::testing::TestWithParam<EngineFactory> {
 protected:
  void SetUp() override {
    SQLQ_SKIP_UNLESS_AVAILABLE(GetParam());
    db_ = GetParam().make();
    clock_ = std::make_shared<ManualClock>();
    auto store = Store::Open(db_->url(), StoreOptions{.clock = clock_});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
  }

  void TearDown() override { store_.reset(); }

  // A second store on the same database and clock: another process, as
  // far as the database can tell.
  std::unique_ptr<Store> OtherStore() {
    auto other = Store::Open(db_->url(), StoreOptions{.clock = clock_});
    EXPECT_TRUE(other.ok()) << other.status().ToString();
    return other.ok() ? std::move(*other) : nullptr;
  }

  // The one message a claim of `q` gets (a failure when none).
  ClaimedMessage ClaimOne(WorkQueue& q) {
    auto r = q.Claim();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok() || r->empty()) {
      ADD_FAILURE() << "nothing to claim";
      return {};
    }
    return std::move(r->front());
  }

  // How many messages of `q` the filter selects (-1 on failure).
  std::int64_t Count(WorkQueue& q, const MessageFilter& f = {}) {
    auto c = q.CountMessages(f);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? c->count : -1;
  }

  // Whether a claim of `q` gets nothing.
  bool NothingReady(WorkQueue& q) {
    auto r = q.Claim();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() && r->empty();
  }

  std::unique_ptr<TestDatabase> db_;
  std::shared_ptr<ManualClock> clock_;
  std::unique_ptr<Store> store_;
};

}  // namespace test
}  // namespace sqlq

#endif  // SQLQ_TESTS_CONFORMANCE_ENGINE_FIXTURE_H_
