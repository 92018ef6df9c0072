// What the server engines (PostgreSQL, MariaDB/MySQL) do the same beyond
// the conformance suite, where the test needs the engine's own client
// library: URLs and connection errors, a caller's transaction joined by
// its native connection, claims that skip rows another transaction locked,
// and leases measured with the database's clock. What differs between the
// engines here is data (ServerSide): URL schemes, malformed URLs, how a
// transaction begins, the clock's SQL.

#include <chrono>
#include <string>
#include <vector>

#include "tests/conformance/engine_fixture.h"
#include "tests/conformance/raw_db.h"

namespace sqlq::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using SteadyClock = std::chrono::steady_clock;

// `url` with the password of its user replaced.
std::string WithPassword(const std::string& url, const std::string& password) {
  const auto start = url.find("://") + 3;
  const auto at = url.find('@', start);
  if (at == std::string::npos) return url;
  const auto colon = url.find(':', start);
  const std::string user = url.substr(start, (colon < at ? colon : at) - start);
  return url.substr(0, start) + user + ":" + password + url.substr(at);
}

struct ServerSide {
  std::string scheme;        // of the test URLs
  std::string other_scheme;  // the engine's other name for it
  std::vector<std::string> malformed;
  std::string unreachable;  // nothing listens there
  std::string server_url;   // the test server's own database, not the test's
  std::string begin;
  // The caller's session may have settings of its own; sqlq's SQL must not
  // depend on them.
  std::string caller_session;
  // Microseconds since the epoch, read from the server's clock now.
  std::string clock_us;
};

ServerSide SideOf(const std::string& engine) {
  if (engine == "Postgres") {
    return {.scheme = "postgresql://",
            .other_scheme = "postgres://",
            .malformed = {"postgresql://localhost/db?no_such_parameter=1",
                          "postgresql://%zz/db", "postgresql://[::1/db",
                          "postgresql://localhost/db?write_groups=0"},
            .unreachable = "postgresql://sqlq@127.0.0.1:1/postgres",
            .server_url = PostgresTestUrl(),
            .begin = "BEGIN",
            .caller_session = "SET search_path = public, pg_catalog",
            .clock_us =
                "SELECT (extract(epoch FROM clock_timestamp()) * "
                "1e6)::bigint"};
  }
  return {
      .scheme = "mysql://",
      .other_scheme = "mariadb://",
      .malformed = {"mysql://localhost/db?no_such_parameter=1",
                    "mysql://localhost", "mysql://localhost/",
                    "mysql://u:%zz@localhost/db", "mysql://localhost:99999/db",
                    "mysql://localhost:port/db", "mysql://[::1/db",
                    "mysql://localhost/db?ssl=sometimes",
                    "mysql://localhost/db?connect_timeout=0",
                    "mysql://localhost/db?write_groups=0",
                    "mysql://localhost/db?write_groups=65"},
      .unreachable = "mysql://root@127.0.0.1:1/sqlq",
      .server_url = MysqlTestUrl(),
      .begin = "START TRANSACTION",
      .caller_session =
          "SET SESSION sql_mode = "
          "'ANSI,NO_BACKSLASH_ESCAPES,SIMULTANEOUS_ASSIGNMENT'",
      .clock_us =
          "SELECT CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)"};
}

class ServerEngine : public ::testing::TestWithParam<EngineFactory> {
 protected:
  void SetUp() override {
    SQLQ_SKIP_UNLESS_AVAILABLE(GetParam());
    db_ = GetParam().make();
    side_ = SideOf(GetParam().name);
  }
  std::unique_ptr<Store> OpenStore() { return OpenOrFail(db_->url()); }
  // A connection of the engine's client library to `url` (the test's
  // database by default).
  std::unique_ptr<RawDb> Raw(const std::string& url = "") {
    return std::make_unique<RawDb>(GetParam().name,
                                   url.empty() ? db_->url() : url);
  }

  std::unique_ptr<TestDatabase> db_;
  ServerSide side_;
};

// --- URLs and connection errors ---------------------------------------------

TEST_P(ServerEngine, BothUrlSchemesOpenTheSameDatabase) {
  auto a = OpenStore();
  ASSERT_TRUE(a);
  ASSERT_OK(a->CreateQueue("jobs", {}));
  const std::string url = db_->url();
  ASSERT_EQ(url.rfind(side_.scheme, 0), 0u) << url;
  ASSERT_OK_AND_ASSIGN(auto b, Store::Open(side_.other_scheme +
                                           url.substr(side_.scheme.size())));
  EXPECT_OK(b->Queue("jobs"));
}

TEST_P(ServerEngine, MalformedUrlIsInvalidArgument) {
  for (const std::string& url : side_.malformed) {
    SCOPED_TRACE(url);
    EXPECT_CODE(Store::Open(url), Code::kInvalidArgument);
  }
}

TEST_P(ServerEngine, UnreachableServerIsUnavailableQuickly) {
  const auto t0 = SteadyClock::now();
  // Port 1 on loopback: nothing listens, the connection is refused.
  auto s = Store::Open(side_.unreachable);
  EXPECT_CODE(s, Code::kUnavailable);
  EXPECT_TRUE(s.status().retryable());
  EXPECT_LT(MsSince(t0), 2000);
}

TEST_P(ServerEngine, WrongPasswordIsPermissionDenied) {
  auto s = Store::Open(WithPassword(db_->url(), "certainly-wrong"));
  EXPECT_CODE(s, Code::kPermissionDenied);
}

TEST_P(ServerEngine, MissingDatabaseIsNotFound) {
  auto s = Store::Open(WithDatabase(side_.server_url, "sqlq_no_such_db"));
  EXPECT_CODE(s, Code::kNotFound);
  EXPECT_NE(s.status().message().find("sqlq_no_such_db"), std::string::npos)
      << s.status().ToString();
}

// --- caller transactions -----------------------------------------------------

TEST_P(ServerEngine, JoinedTransactionCommitsQueueAndBusinessRows) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  auto raw = Raw();
  ASSERT_EQ(raw->exec()("CREATE TABLE orders (id INT PRIMARY KEY)"), "");
  ASSERT_EQ(raw->exec()(side_.caller_session), "");
  ASSERT_EQ(raw->exec()(side_.begin), "");
  ASSERT_EQ(raw->exec()("INSERT INTO orders VALUES (42)"), "");
  {
    ASSERT_OK_AND_ASSIGN(Tx tx, store->JoinTx(raw->native()));
    EXPECT_EQ(tx.native_handle(), raw->native());
    ASSERT_OK(q.Send(tx, {.payload = "order 42"}));
    ASSERT_OK(q.Send(tx, {.payload = "a", .dedup_key = "a"}));
    ASSERT_OK(q.Send(tx, {.payload = "b"}));
  }
  // Not committed yet: invisible to the store's own connections.
  ASSERT_OK_AND_ASSIGN(QueueStats before, q.Stats());
  EXPECT_EQ(before.ready, 0);
  ASSERT_EQ(raw->exec()("COMMIT"), "");
  ASSERT_OK_AND_ASSIGN(QueueStats after, q.Stats());
  EXPECT_EQ(after.ready, 3);
  EXPECT_EQ(after.sends, 3);
  // The caller's connection keeps working, without sqlq's statements.
  EXPECT_EQ(raw->Query("SELECT count(*) FROM orders"), "1");
}

TEST_P(ServerEngine, JoinTxRefusesAConnectionWithoutATransaction) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  auto raw = Raw();
  EXPECT_CODE(store->JoinTx(raw->native()), Code::kInvalidArgument);
}

TEST_P(ServerEngine, JoinTxRefusesAConnectionToAnotherDatabase) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  auto raw = Raw(side_.server_url);
  ASSERT_EQ(raw->exec()(side_.begin), "");
  EXPECT_CODE(store->JoinTx(raw->native()), Code::kInvalidArgument);
  ASSERT_EQ(raw->exec()("ROLLBACK"), "");
}

// --- claims ------------------------------------------------------------------

TEST_P(ServerEngine, ClaimSkipsMessagesLockedByAnotherTransaction) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(SendResult first, q.Send({.payload = "first"}));
  ASSERT_OK(q.Send({.payload = "second"}));
  // Another consumer holds the first message's row.
  auto raw = Raw();
  ASSERT_EQ(raw->exec()(side_.begin), "");
  ASSERT_EQ(raw->Query("SELECT id FROM sqlq_messages WHERE id = " +
                       std::to_string(first.id) + " FOR UPDATE"),
            std::to_string(first.id));
  // A wait would last until the lock is released (PostgreSQL) or the lock
  // wait timeout of 5 s (MariaDB).
  const auto t0 = SteadyClock::now();
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 2}));
  EXPECT_LT(MsSince(t0), 1000) << "the claim waited on a locked row";
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "second");
  ASSERT_EQ(raw->exec()("ROLLBACK"), "");
}

// --- time --------------------------------------------------------------------

TEST_P(ServerEngine, LeasesAreMeasuredWithTheDatabaseClock) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK(q.Send({.payload = "x"}));
  auto raw = Raw();
  const std::int64_t before = std::stoll(raw->Query(side_.clock_us));
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.lease = seconds(60)}));
  const std::int64_t after = std::stoll(raw->Query(side_.clock_us));
  ASSERT_EQ(got.size(), 1u);
  const std::int64_t expires = Us(got[0].lease_expires_at);
  EXPECT_GE(expires, before + 60'000'000);
  EXPECT_LE(expires, after + 60'000'000);
}

INSTANTIATE_TEST_SUITE_P(Engines, ServerEngine,
                         ::testing::ValuesIn(ServerEngines()), EngineName);

}  // namespace
}  // namespace sqlq::test
