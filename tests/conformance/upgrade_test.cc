// Upgrades: a database left at any schema version an earlier sqlq wrote is
// brought to the newest one when a store opens it, on every engine, and
// then works. Each engine's steps are append-only (a released step is never
// edited), so applying the first k of them gives the schema of version k
// exactly as it was on main.

#include <functional>
#include <string>

#include "engines/mysql/schema.h"
#include "engines/postgres/schema.h"
#include "engines/sqlite/schema.h"
#include "tests/conformance/engine_fixture.h"
#include "tests/conformance/raw_db.h"

namespace sqlq::test {
namespace {

using Exec = RawDb::Exec;

struct EngineSchema {
  int latest = 0;
  // Creates version `k` of the schema (0: nothing) on an empty database.
  std::function<std::string(const Exec&, int k)> install;
};

std::string RunAll(const Exec& exec, std::initializer_list<std::string> sql) {
  for (const std::string& s : sql) {
    std::string e = exec(s);
    if (!e.empty()) return s + ": " + e;
  }
  return "";
}

EngineSchema SqliteSchema() {
  return {engines::sqlite::kSchemaVersion, [](const Exec& exec, int k) {
            if (k == 0) return std::string();
            // Before version 3, sqlq_schema held one row without a time.
            std::string e =
                k < 3 ? exec(
                            "CREATE TABLE sqlq_schema (version INTEGER NOT "
                            "NULL)")
                      : exec(
                            "CREATE TABLE sqlq_schema (version INTEGER "
                            "PRIMARY KEY, applied_at INTEGER NOT NULL)");
            for (int v = 1; v <= k && e.empty(); ++v) {
              e = exec(engines::sqlite::kMigrations[v - 1]);
              if (e.empty() && v >= 3) {
                e = exec("INSERT INTO sqlq_schema VALUES (" +
                         std::to_string(v) + ", 0)");
              }
            }
            if (e.empty() && k < 3) {
              e = exec("INSERT INTO sqlq_schema VALUES (" + std::to_string(k) +
                       ")");
            }
            return e;
          }};
}

EngineSchema PostgresSchema() {
  return {engines::postgres::kSchemaVersion, [](const Exec& exec, int k) {
            if (k == 0) return std::string();
            std::string e = exec(
                "CREATE TABLE sqlq_schema (version INTEGER PRIMARY KEY, "
                "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())");
            for (int v = 1; v <= k && e.empty(); ++v) {
              e = RunAll(exec, {engines::postgres::kMigrations[v - 1],
                                "INSERT INTO sqlq_schema (version) VALUES (" +
                                    std::to_string(v) + ")"});
            }
            return e;
          }};
}

EngineSchema MysqlSchema() {
  return {
      engines::mysql::kSchemaVersion, [](const Exec& exec, int k) {
        if (k == 0) return std::string();
        std::string e = exec(
            "CREATE TABLE sqlq_schema (version INT NOT NULL PRIMARY KEY, "
            "applied_at DATETIME(6) NOT NULL) ENGINE=InnoDB");
        for (int v = 1; v <= k && e.empty(); ++v) {
          for (const char* stmt :
               engines::mysql::kMigrations[static_cast<std::size_t>(v - 1)]) {
            if (e.empty()) e = exec(stmt);
          }
          if (e.empty()) {
            e = exec("INSERT INTO sqlq_schema VALUES (" + std::to_string(v) +
                     ", NOW(6))");
          }
        }
        return e;
      }};
}

class Upgrade : public ::testing::TestWithParam<EngineFactory> {
 protected:
  void SetUp() override { SQLQ_SKIP_UNLESS_AVAILABLE(GetParam()); }
  EngineSchema Schema() const {
    const std::string& n = GetParam().name;
    if (n == "Sqlite") return SqliteSchema();
    if (n == "Postgres") return PostgresSchema();
    return MysqlSchema();
  }
};

TEST_P(Upgrade, EveryEarlierVersionIsBroughtToTheNewestAndWorks) {
  const EngineSchema schema = Schema();
  ASSERT_GE(schema.latest, 1);
  // k = latest: up to date already, so opening only reads.
  for (int k = 1; k <= schema.latest; ++k) {
    SCOPED_TRACE("from version " + std::to_string(k));
    std::unique_ptr<TestDatabase> db = GetParam().make();
    {
      RawDb raw(GetParam().name, *db);
      ASSERT_EQ(schema.install(raw.exec(), k), "");
      // A queue an earlier version stored survives the upgrade.
      ASSERT_EQ(
          raw.exec()("INSERT INTO sqlq_queues (name, max_attempts, lease_us, "
                     "backoff_base_us, backoff_max_us, archive, retention_us, "
                     "max_payload, created_us) VALUES ('old', 3, 30000000, "
                     "1000000, 600000000, FALSE, 604800000000, 1048576, 0)"),
          "");
      // So do its messages and dead letters, as they were (no headers, no
      // error history).
      const bool mysql = GetParam().name == "Mysql";
      ASSERT_EQ(raw.exec()(std::string("INSERT INTO sqlq_messages (queue_id, "
                                       "priority, ") +
                           (mysql ? "npriority, " : "") +
                           "ready_us, enqueued_us, payload) SELECT id, 0, " +
                           (mysql ? "0, " : "") +
                           "0, 0, 'stored before' FROM sqlq_queues "
                           "WHERE name = 'old'"),
                "");
      ASSERT_EQ(raw.exec()("INSERT INTO sqlq_dead (id, queue_id, priority, "
                           "attempts, enqueued_us, died_us, last_error, "
                           "payload) SELECT 1000, id, 0, 3, 0, 0, 'old error', "
                           "'dead before' FROM sqlq_queues WHERE name = 'old'"),
                "");
    }
    // Without create: an existing schema is upgraded all the same.
    ASSERT_OK_AND_ASSIGN(auto store,
                         Store::Open(db->url(), {.create_if_missing = false}));
    ASSERT_OK_AND_ASSIGN(WorkQueue old, store->Queue("old"));
    EXPECT_EQ(old.options().max_attempts, 3);
    ASSERT_OK(
        old.Send({.payload = "after the upgrade", .headers = {{"k", "v"}}}));
    ASSERT_OK_AND_ASSIGN(auto got, old.Claim({.max = 2}));
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].payload, "stored before");
    EXPECT_TRUE(got[0].headers.empty());
    EXPECT_EQ(got[1].payload, "after the upgrade");
    EXPECT_EQ(got[1].headers, (Headers{{"k", "v"}}));
    EXPECT_OK(old.Ack(got[1].receipt));
    // A message stored before starts its error history now.
    ASSERT_OK(old.Nack(got[0].receipt, {.delay = Duration(0), .error = "e"}));
    ASSERT_OK_AND_ASSIGN(auto second, old.Claim({.max = 1}));
    ASSERT_EQ(second.size(), 1u);
    EXPECT_EQ(second[0].attempt, 2);
    ASSERT_OK(old.Nack(second[0].receipt, {.delay = Duration(0)}));
    ASSERT_OK_AND_ASSIGN(auto third, old.Claim({.max = 1}));
    ASSERT_EQ(third.size(), 1u);
    ASSERT_OK(old.Nack(third[0].receipt, {.error = "last"}));
    ASSERT_OK_AND_ASSIGN(auto dead, old.ListDead());
    ASSERT_EQ(dead.size(), 2u);
    // In id order: the message's id is 1, the dead letter's 1000.
    EXPECT_EQ(dead[0].payload, "stored before");
    ASSERT_EQ(dead[0].errors.size(), 3u);
    EXPECT_EQ(dead[0].errors[0].error, "e");
    EXPECT_EQ(dead[0].errors[2].error, "last");
    EXPECT_EQ(dead[1].payload, "dead before");
    EXPECT_EQ(dead[1].last_error, "old error");
    EXPECT_TRUE(dead[1].errors.empty());
    ASSERT_OK_AND_ASSIGN(Ring ring, store->CreateRing("views", {}));
    EXPECT_OK(ring.Push("g", "x"));
    ASSERT_OK_AND_ASSIGN(Rotation rot, store->CreateRotation("pool", {}));
    EXPECT_OK(rot.Add("a", "x"));
    store.reset();
    // Reopening finds nothing left to do, and the newest version recorded.
    ASSERT_OK_AND_ASSIGN(auto again,
                         Store::Open(db->url(), {.create_if_missing = false}));
    EXPECT_OK(again->CheckWritable());
  }
}

// The SQL-level API's functions an earlier version made took their
// search_path from the caller's role ("$user"): the upgrade pins each to
// the store's schema (docs/sql-api.md).
TEST(PostgresUpgrade, TheSqlApiOfVersion14IsPinnedToTheStoresSchema) {
  const EngineFactory factory = PostgresFactory();
  SQLQ_SKIP_UNLESS_AVAILABLE(factory);
  std::unique_ptr<TestDatabase> db = factory.make();
  RawDb raw(factory.name, *db);
  ASSERT_EQ(PostgresSchema().install(raw.exec(), 14), "");
  const std::string paths =
      "SELECT count(*) || ' ' || string_agg(DISTINCT "
      "array_to_string(proconfig, ';'), '|') FROM pg_proc "
      "WHERE pronamespace = 'sqlq'::regnamespace";
  ASSERT_EQ(raw.Query(paths), "10 search_path=\"$user\", public");
  ASSERT_OK(Store::Open(db->url(), {.create_if_missing = false}).status());
  // Every function, the ten of version 14 and those later versions add, is
  // pinned.
  const std::string unpinned =
      "SELECT count(*) FROM pg_proc WHERE pronamespace = "
      "'sqlq'::regnamespace AND (proconfig IS NULL OR array_to_string("
      "proconfig, ';') <> 'search_path=pg_catalog, public, pg_temp')";
  EXPECT_EQ(raw.Query(unpinned), "0");
  const std::string pinned =
      "SELECT count(*) >= 10 FROM pg_proc WHERE pronamespace = "
      "'sqlq'::regnamespace";
  EXPECT_EQ(raw.Query(pinned), "t");
}

INSTANTIATE_TEST_SUITE_P(Engines, Upgrade, ::testing::ValuesIn(Engines()),
                         EngineName);

}  // namespace
}  // namespace sqlq::test
