// PostgreSQL engine specifics beyond the conformance suite: URLs and
// connection errors, claims under many concurrent consumers, LISTEN/NOTIFY
// wake-ups across stores, and concurrent migrations. Runs against the server
// named by SQLQ_TEST_PG_URL (scripts/test.sh starts one).

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/engine.h"
#include "core/receipt.h"
#include "engines/engines.h"
#include "engines/postgres/dialect.h"
#include "engines/postgres/schema.h"
#include "engines/postgres/statements.h"
#include "engines/shared/sql_groups.h"
#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "tests/conformance/engine_fixture.h"
#include "tests/support/listing_sql.h"

namespace sqlq::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using SteadyClock = std::chrono::steady_clock;

class PostgresEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SQLQ_SKIP_UNLESS_AVAILABLE(PostgresFactory());
    db_ = std::make_unique<PostgresDatabase>();
  }

  // `tuning`: URL parameters of the engine (docs/engines/postgres.md);
  // the fixture's own (tuning_) when empty.
  std::unique_ptr<Store> OpenStore(std::string tuning = "") {
    if (tuning.empty()) tuning = tuning_;
    return OpenOrFail(db_->url() + (tuning.empty() ? "" : "?" + tuning));
  }

  // A plain libpq connection to the test database, for poking at it.
  PGconn* Raw() {
    PGconn* c = PQconnectdb(db_->url().c_str());
    EXPECT_EQ(PQstatus(c), CONNECTION_OK) << PQerrorMessage(c);
    return c;
  }

  // For the plan tests: a connection of its own with fresh statistics
  // (ANALYZE) and generic plans, the id of queue `name`, and the ids of the
  // first two of `claimed` as an SQL array.
  struct ForPlan {
    PGconn* c;
    std::string queue_id, ids;
  };
  ForPlan ForPlans(const std::string& name,
                   const std::vector<ClaimedMessage>& claimed) {
    PGconn* c = Raw();
    Query(c, "ANALYZE sqlq_messages");
    Query(c, "SET plan_cache_mode = force_generic_plan");
    return {c,
            Query(c, "SELECT id FROM sqlq_queues WHERE name = '" + name + "'"),
            "'{" + std::to_string(claimed[0].id) + "," +
                std::to_string(claimed[1].id) + "}'"};
  }

  // Waits until the store connections to the test database are gone: a
  // backend reports its statistics (pg_stat_user_indexes) as it exits.
  // `keep`: the pids of the test's own connections, comma-separated.
  static bool StoreBackendsExited(PGconn* c, const std::string& keep) {
    const std::string others =
        "SELECT count(*) FROM pg_stat_activity WHERE datname = "
        "current_database() AND pid NOT IN (" +
        keep + ")";
    const auto deadline = SteadyClock::now() + seconds(30);
    while (Query(c, others) != "0" && SteadyClock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(20));
    }
    if (Query(c, others) != "0") return false;
    Query(c, "SELECT pg_stat_clear_snapshot()");
    return true;
  }

  // A REPEATABLE READ transaction held open on a connection of its own:
  // while it lasts, vacuum can remove no row version its snapshot might
  // see. Ended by End() (or left to the test's database teardown).
  struct HeldSnapshot {
    explicit HeldSnapshot(PGconn* conn) : c(conn) {
      Query(c, "BEGIN ISOLATION LEVEL REPEATABLE READ");
      Query(c, "SELECT count(*) FROM pg_class");
      pid = Query(c, "SELECT pg_backend_pid()");
    }
    void End() {
      Query(c, "COMMIT");
      PQfinish(c);
    }
    PGconn* c;
    std::string pid;
  };

  static std::string Query(PGconn* c, const std::string& sql) {
    PGresult* r = PQexec(c, sql.c_str());
    std::string out;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0) {
      out = PQgetvalue(r, 0, 0);
    } else if (PQresultStatus(r) != PGRES_COMMAND_OK &&
               PQresultStatus(r) != PGRES_TUPLES_OK) {
      ADD_FAILURE() << sql << ": " << PQresultErrorMessage(r);
    }
    PQclear(r);
    return out;
  }

  std::unique_ptr<PostgresDatabase> db_;
  std::string tuning_;  // URL parameters OpenStore adds by default
};

// --- URLs and connection errors ---------------------------------------------

// sqlq's tuning parameters are taken out of the URL; libpq's stay in it.
TEST_F(PostgresEngineTest, TuningParametersAreCheckedAndTheRestGoToLibpq) {
  for (const char* bad :
       {"write_groups=0", "write_groups=65", "vacuum_rows=-1", "fold_rows=0",
        "claim_marks=2", "rescan_ms=x", "ack_flush=later"}) {
    auto s = Store::Open(db_->url() + "?" + bad);
    EXPECT_CODE(s, Code::kInvalidArgument);
    EXPECT_NE(s.status().message().find(
                  std::string(bad).substr(0, std::string(bad).find('='))),
              std::string::npos)
        << s.status().ToString();
  }
  auto s = Store::Open(
      db_->url() +
      "?write_groups=2&application_name=sqlq_tuned&fold_rows=5&ack_flush=off");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_OK_AND_ASSIGN(WorkQueue q, (*s)->CreateQueue("jobs", {}));
  ASSERT_OK(q.Send({.payload = "m"}));
  PGconn* c = Raw();
  EXPECT_NE(Query(c,
                  "SELECT count(*) FROM pg_stat_activity "
                  "WHERE application_name = 'sqlq_tuned'"),
            "0");
  PQfinish(c);
}

TEST_F(PostgresEngineTest, TlsParametersArePassedToLibpq) {
  // The test server has no TLS: libpq itself must refuse sslmode=require,
  // which shows that the parameter reached it.
  auto s = Store::Open(db_->url() + "?sslmode=require");
  EXPECT_CODE(s, Code::kUnavailable);
  EXPECT_NE(s.status().message().find("SSL"), std::string::npos)
      << s.status().ToString();
}

// The store's connections plan each prepared statement once (generic
// plans), not at every execution: replanning the claim cost more than its
// commits (docs/engines/postgres.md, "Connections").
TEST_F(PostgresEngineTest, StoreConnectionsUseGenericPlans) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK(q.Send({.payload = "x"}));
  ASSERT_OK_AND_ASSIGN(Tx tx, store->BeginTx());
  auto* c = static_cast<PGconn*>(tx.native_handle());
  EXPECT_EQ(Query(c, "SHOW plan_cache_mode"), "force_generic_plan");
  ASSERT_OK(tx.Rollback());
}

// Nor do they compile statements (JIT): a scan the session disables counts
// as a huge cost, which put a queue's stats over jit_above_cost and had
// every call compiled first, 100 ms each (docs/engines/postgres.md,
// "Connections").
TEST_F(PostgresEngineTest, StoreConnectionsCompileNoStatement) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK(q.Send({.payload = "x"}));
  ASSERT_OK(q.Stats().status());  // folds nothing; deltas stay in the table
  ASSERT_OK_AND_ASSIGN(Tx tx, store->BeginTx());
  auto* c = static_cast<PGconn*>(tx.native_handle());
  EXPECT_EQ(Query(c, "SHOW jit"), "off");
  std::string sql = engines::postgres::Dialect::kStats;
  const std::string id =
      Query(c, "SELECT id FROM sqlq_queues WHERE name = 'jobs'");
  for (const auto& [mark, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"$1", "9000000000000000"},
           {"$2", "9000000000000000"},
           {"$3", "9000000000000000"},
           {"$4", "9000000000000000"},
           {"$5", id}}) {
    for (auto at = sql.find(mark); at != std::string::npos;
         at = sql.find(mark, at)) {
      sql.replace(at, mark.size(), value);
    }
  }
  const std::string plan = Query(c, "EXPLAIN (ANALYZE, FORMAT JSON) " + sql);
  EXPECT_EQ(plan.find("\"JIT\""), std::string::npos) << plan;
  ASSERT_OK(tx.Rollback());
}

// --- schema ------------------------------------------------------------------

// A role of its own for one test, with a password, dropped afterwards.
class TestRole {
 public:
  explicit TestRole(PostgresDatabase& db, const std::string& suffix = "_r")
      : db_(db), name_(db.name() + suffix) {
    std::string error =
        PostgresAdmin("CREATE ROLE " + name_ + " LOGIN PASSWORD 'secret'");
    if (!error.empty()) ADD_FAILURE() << "CREATE ROLE: " << error;
  }
  ~TestRole() {
    PGconn* c = PQconnectdb(db_.url().c_str());
    PQclear(PQexec(c, ("DROP OWNED BY " + name_).c_str()));
    PQfinish(c);
    std::string error = PostgresAdmin("DROP ROLE " + name_);
    if (!error.empty()) ADD_FAILURE() << "DROP ROLE: " << error;
  }
  const std::string& name() const { return name_; }
  // The test database's URL, as this role.
  std::string url() const {
    std::string url = db_.url();
    const auto start = url.find("://") + 3;
    return url.substr(0, start) + name_ + ":secret" +
           url.substr(url.find('@', start));
  }

 private:
  PostgresDatabase& db_;
  std::string name_;
};

TEST_F(PostgresEngineTest, RoleWithoutCreatePrivilegeIsPermissionDenied) {
  TestRole role(*db_);
  // PostgreSQL 15: nobody but the owner creates in "public".
  auto s = Store::Open(role.url());
  EXPECT_CODE(s, Code::kPermissionDenied);
}

TEST_F(PostgresEngineTest, RoleWithOnlyDataPrivilegesUsesAnExistingSchema) {
  ASSERT_TRUE(OpenStore());  // the owner creates the schema
  TestRole role(*db_);
  PGconn* c = Raw();
  Query(c,
        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "
        "public TO " +
            role.name());
  Query(c, "GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO " + role.name());
  PQfinish(c);
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(role.url()));
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK(q.Send({.payload = "x"}));
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim());
  ASSERT_EQ(got.size(), 1u);
  EXPECT_OK(q.Ack(got[0].receipt));
}

// A role that may create schemas in the database makes one named after the
// store's role, with a table named like sqlq's: PostgreSQL's default
// search_path ("$user", public) would put it in front of public, and the
// store's statements would go to the intruder's table (and through its
// triggers, run with the store's rights). The store's sessions pin their
// path, so neither new connections nor those opened before see it.
TEST_F(PostgresEngineTest, ASchemaNamedAfterTheStoresRoleDoesNotCaptureIt) {
  ASSERT_TRUE(OpenStore());  // the owner creates sqlq's tables in public
  TestRole app(*db_, "_app"), intruder(*db_, "_in");
  PGconn* c = Raw();
  Query(c,
        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "
        "public TO " +
            app.name());
  Query(c, "GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO " + app.name());
  Query(c, "GRANT CREATE ON DATABASE \"" + db_->name() + "\" TO " +
               intruder.name());
  PQfinish(c);
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(app.url()));
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK(q.Send({.payload = "before"}));

  PGconn* in = PQconnectdb(intruder.url().c_str());
  ASSERT_EQ(PQstatus(in), CONNECTION_OK) << PQerrorMessage(in);
  Query(in, "CREATE SCHEMA " + app.name());
  Query(in, "CREATE TABLE " + app.name() + ".sqlq_messages (x int)");
  Query(in, "CREATE TABLE " + app.name() + ".sqlq_queues (x int)");
  Query(in, "GRANT USAGE ON SCHEMA " + app.name() + " TO PUBLIC");
  Query(in, "GRANT ALL ON ALL TABLES IN SCHEMA " + app.name() + " TO PUBLIC");

  // A connection opened before, and one opened after.
  ASSERT_OK(q.Send({.payload = "pooled"}));
  ASSERT_OK_AND_ASSIGN(auto fresh, Store::Open(app.url()));
  ASSERT_OK_AND_ASSIGN(WorkQueue q2, fresh->Queue("jobs"));
  ASSERT_OK(q2.Send({.payload = "fresh"}));
  ASSERT_OK_AND_ASSIGN(auto got, q2.Claim({.max = 10}));
  EXPECT_EQ(got.size(), 3u);
  EXPECT_EQ(Query(in, "SELECT count(*) FROM " + app.name() + ".sqlq_messages"),
            "0");
  Query(in, "DROP SCHEMA " + app.name() + " CASCADE");
  PQfinish(in);
}

// --- faults ------------------------------------------------------------------

TEST_F(PostgresEngineTest,
       ConnectionsClosedByTheServerAreReplacedTransparently) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK(q.Send({.payload = "before"}));
  // As after a server restart: every idle pooled connection is gone.
  PGconn* c = Raw();
  Query(c,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()");
  PQfinish(c);
  EXPECT_OK(q.Send({.payload = "after"}));
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 10}));
  EXPECT_EQ(got.size(), 2u);
}

TEST_F(PostgresEngineTest, ConnectionLostDuringCommitIsOutcomeUnknown) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  // A deferred trigger makes COMMIT take a while, so that the connection
  // can be killed while COMMIT is on the wire.
  PGconn* c = Raw();
  Query(c, R"sql(
    CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN PERFORM pg_sleep(5); RETURN NULL; END $$)sql");
  Query(c, R"sql(
    CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON sqlq_messages
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit())sql");
  auto sent =
      std::async(std::launch::async, [&] { return q.Send({.payload = "x"}); });
  const std::string committing =
      "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
      "AND state = 'active' AND query = 'COMMIT'";
  std::string pid;
  const auto deadline = SteadyClock::now() + seconds(10);
  while ((pid = Query(c, committing)).empty() &&
         SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_FALSE(pid.empty()) << "no COMMIT seen";
  Query(c, "SELECT pg_terminate_backend(" + pid + ")");
  PQfinish(c);
  auto r = sent.get();
  EXPECT_CODE(r, Code::kOutcomeUnknown);
  EXPECT_FALSE(r.status().retryable());
}

// --- claims ------------------------------------------------------------------

// The TID scans' conditions in a plan of EXPLAIN (FORMAT JSON), in order.
// A statement's rows found by address are read by one TID scan of an array
// ("(ctid = ANY ($n))"); a condition on another row's address is a TID
// scan run again for each such row, each run reading the table's size.
std::vector<std::string> TidConds(const std::string& plan) {
  static const std::string kKey = "\"TID Cond\": \"";
  std::vector<std::string> out;
  for (auto at = plan.find(kKey); at != std::string::npos;
       at = plan.find(kKey, at + 1)) {
    const auto from = at + kKey.size();
    out.push_back(plan.substr(from, plan.find('"', from) - from));
  }
  return out;
}

bool AllOfArrays(const std::vector<std::string>& conds) {
  return std::all_of(conds.begin(), conds.end(), [](const std::string& c) {
    return c.starts_with("(ctid = ANY (");
  });
}

// Many queues with a message or two each and one deep queue: the statistics
// then say a queue holds a handful of rows, and a generic plan that looked
// up the ack's receipts through the queue's claim index would read the deep
// queue whole for every batch. The plan must look each receipt up by id.
TEST_F(PostgresEngineTest, AckBatchPlanLooksUpReceiptsByIdWhateverTheStats) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue deep, store->CreateQueue("deep", {}));
  std::vector<Message> batch(3000, Message{.payload = "m"});
  ASSERT_OK(deep.SendBatch(batch));
  for (int i = 0; i < 300; ++i) {
    ASSERT_OK_AND_ASSIGN(WorkQueue small,
                         store->CreateQueue("small" + std::to_string(i), {}));
    ASSERT_OK(small.Send({.payload = "m"}));
  }
  ASSERT_OK_AND_ASSIGN(auto claimed, deep.Claim({.max = 100}));
  ASSERT_EQ(claimed.size(), 100u);
  auto [c, queue_id, ids] = ForPlans("deep", claimed);
  const std::string args = queue_id + ", " + ids + ", '{1,2}', '{1,1}'";
  Query(c,
        std::string("PREPARE ack(bigint, bigint[], bigint[], bigint[]) AS ") +
            engines::postgres::kAckManySql);
  Query(c, std::string("PREPARE ack_archive(bigint, bigint[], bigint[], "
                       "bigint[], bigint) AS ") +
               engines::postgres::kAckManyArchiveSql);
  for (const std::string& explain :
       {"EXPLAIN (FORMAT JSON) EXECUTE ack(" + args + ")",
        "EXPLAIN (FORMAT JSON) EXECUTE ack_archive(" + args + ", 0)"}) {
    const std::string plan = Query(c, explain);
    RecordProperty("plan", plan);
    EXPECT_NE(plan.find("\"Index Name\": \"sqlq_messages_pkey\""),
              std::string::npos)
        << explain << "\n"
        << plan;
    EXPECT_EQ(plan.find("sqlq_messages_claim"), std::string::npos)
        << explain << "\n"
        << plan;
    // The rows found are deleted by one TID scan of their addresses.
    const std::vector<std::string> tids = TidConds(plan);
    EXPECT_EQ(tids.size(), 1u) << explain << "\n" << plan;
    EXPECT_TRUE(AllOfArrays(tids)) << explain << "\n" << plan;
  }
  PQfinish(c);
  // And the batch acks what it names, nothing else.
  std::vector<std::string> receipts;
  for (const auto& m : claimed) receipts.push_back(m.receipt);
  ASSERT_OK_AND_ASSIGN(auto acked, deep.AckBatch(receipts));
  for (const Status& s : acked) EXPECT_OK(s);
  ASSERT_OK_AND_ASSIGN(QueueStats stats, deep.Stats());
  EXPECT_EQ(stats.ready, 2900);
  EXPECT_EQ(stats.leased, 0);
}

// A claim committed alone, its acks, or both: one call of
// sqlq__claim_commit (schema.h, migration 26). Every statement the function
// runs, as auto_explain shows them (generic plans, as sqlq's sessions
// plan), looks each receipt up by the primary key and the candidates up in
// the claim index, whatever the statistics say: never a pass over the
// whole table; the rows it deletes or leases by address are found by one
// TID scan of an array each.
TEST_F(PostgresEngineTest, ClaimCommitFunctionSeeksItsIndexesWhateverTheStats) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue deep, store->CreateQueue("deep", {}));
  std::vector<Message> batch(3000, Message{.payload = "m"});
  ASSERT_OK(deep.SendBatch(batch));
  ASSERT_OK_AND_ASSIGN(auto claimed, deep.Claim({.max = 2}));
  ASSERT_EQ(claimed.size(), 2u);
  auto [c, queue_id, ids] = ForPlans("deep", claimed);
  const std::string one = std::to_string(claimed[0].id);
  const std::string token =
      Query(c, "SELECT token FROM sqlq_messages WHERE id = " + one);
  std::string notices;
  PQsetNoticeProcessor(
      c,
      [](void* out, const char* message) {
        static_cast<std::string*>(out)->append(message);
      },
      &notices);
  Query(c, "LOAD 'auto_explain'");
  Query(c, "SET auto_explain.log_min_duration = 0");
  Query(c, "SET auto_explain.log_nested_statements = on");
  Query(c, "SET auto_explain.log_format = json");
  Query(c, "SET auto_explain.log_level = notice");
  const std::string call =
      "SELECT count(*) FROM sqlq__claim_commit(" + queue_id + ", 30000000, ";
  // Each call: what it does, and its arguments after the queue and lease.
  const std::vector<std::pair<std::string, std::string>> calls = {
      {"claim alone",
       "1, 7, NULL, NULL, 5, 0, NULL, NULL, NULL, NULL, NULL, "
       "NULL, NULL"},
      {"claim alone from a mark, within a byte budget",
       "2, 7, NULL, NULL, 5, 1000, NULL, NULL, NULL, NULL, 0, 0, 0"},
      {"two stale receipts and a claim",
       "1, 7, " + ids +
           ", NULL, 5, 0, '{1,2}', '{1,1}', '{1,0}', NULL, NULL, "
           "NULL, NULL"},
      {"one receipt and the next claim from a mark",
       "0, 8, '{" + one + "}', NULL, 5, 0, '{" + token +
           "}', '{1}', '{1}', NULL, 0, 0, 0"},
      {"acks alone", "0, 0, " + ids +
                         ", NULL, 5, 0, '{1,2}', '{1,1}', NULL, NULL, NULL, "
                         "NULL, NULL"},
      // With no attempt allowed, every candidate is out of attempts.
      {"dead letters",
       "10, 9, NULL, NULL, 0, 0, NULL, NULL, NULL, NULL, "
       "NULL, NULL, NULL"}};
  std::size_t tid_scans = 0;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto& [what, args] = calls[i];
    notices.clear();
    Query(c, call + args + ")");
    RecordProperty("plans_" + std::to_string(i), notices);
    EXPECT_NE(notices.find("\"Query Text\""), std::string::npos)
        << what << ": no plans shown";
    EXPECT_EQ(notices.find("\"Seq Scan\""), std::string::npos) << what << "\n"
                                                               << notices;
    const bool claims =
        what.find("claim") != std::string::npos || what == "dead letters";
    EXPECT_EQ(notices.find("\"Index Name\": \"sqlq_messages_claim\"") !=
                  std::string::npos,
              claims)
        << what << "\n"
        << notices;
    const bool receipts =
        what.find("receipt") != std::string::npos || what == "acks alone";
    EXPECT_EQ(notices.find("\"Index Name\": \"sqlq_messages_pkey\"") !=
                  std::string::npos,
              receipts)
        << what << "\n"
        << notices;
    for (const std::string& cond : TidConds(notices)) {
      ++tid_scans;
      EXPECT_NE(cond.find("ctid = ANY ("), std::string::npos)
          << what << ": " << cond << "\n"
          << notices;
    }
  }
  // The leases, the budget's look-up, the acks' delete of several
  // receipts and the dead letters' delete: each by address.
  EXPECT_GE(tid_scans, 4u);
  EXPECT_EQ(Query(c, "SELECT count(*) FROM sqlq_dead"), "10");
  PQfinish(c);
}

// Group commit's claims with their acks as one statement
// (Engine::ClaimAndCommit): a member's claim counts only when its ack
// holds; a refused receipt says why; the counters follow. A queue whose
// acks release dependents is left to the general way, untouched.
TEST_F(PostgresEngineTest, OneStatementClaimClaimsOnlyForTheAcksThatHold) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  std::vector<Message> batch(6, Message{.payload = "m"});
  ASSERT_OK(q.SendBatch(batch));
  ASSERT_OK_AND_ASSIGN(auto held, q.Claim({.max = 2}));
  ASSERT_EQ(held.size(), 2u);
  ASSERT_OK_AND_ASSIGN(core::Receipt good, core::ParseReceipt(held[0].receipt));
  ASSERT_OK_AND_ASSIGN(core::Receipt stale,
                       core::ParseReceipt(held[1].receipt));
  stale.token ^= 1;  // another lease's
  const core::Receipt gone{.id = 999999, .attempt = 1, .token = good.token};
  PGconn* c = Raw();
  const std::int64_t queue_id =
      std::stoll(Query(c, "SELECT id FROM sqlq_queues WHERE name = 'jobs'"));
  ASSERT_OK_AND_ASSIGN(auto engine,
                       engines::OpenEngine(db_->url(), StoreOptions{}));
  const core::ClaimParams params{.queue_id = queue_id,
                                 .max = 6,
                                 .lease = core::Micros(30'000'000),
                                 .token = 0x5eed,
                                 .max_attempts = 5};
  // The good receipt comes twice (two callers acking one message): only
  // its first place is acked.
  const std::vector<core::Receipt> receipts = {good, stale, gone, good};
  // Three of the six are claimed only for the acks that hold (one for each
  // of the first, second and fourth receipts); the third gates nothing.
  const std::vector<int> gates = {1, 1, 0, 1};
  ASSERT_OK_AND_ASSIGN(
      auto done,
      engine->ClaimAndCommit(
          params, {.queue_id = queue_id, .receipts = receipts}, gates));
  ASSERT_TRUE(done.has_value());
  ASSERT_EQ(done->acks.size(), 4u);
  EXPECT_OK(done->acks[0]);
  EXPECT_EQ(done->acks[1].code(), Code::kFailedPrecondition)
      << done->acks[1].ToString();
  EXPECT_EQ(done->acks[2].code(), Code::kNotFound) << done->acks[2].ToString();
  EXPECT_EQ(done->acks[3].code(), Code::kNotFound) << done->acks[3].ToString();
  // 3 whatever the acks, 1 for the good receipt's first place, none for
  // the stale receipt or the good one's second place.
  EXPECT_EQ(done->outcome.messages.size(), 4u);
  for (const auto& m : done->outcome.messages) {
    EXPECT_NE(m.id, held[1].id);
    EXPECT_EQ(m.attempt, 1);
  }
  ASSERT_OK_AND_ASSIGN(QueueStats stats, q.Stats());
  EXPECT_EQ(stats.ready, 0);
  EXPECT_EQ(stats.leased, 5);  // the stale receipt's message and four
  EXPECT_EQ(stats.acks, 1);
  EXPECT_EQ(stats.claims, 6);

  // Acks alone (a claim of no message): each receipt's own status.
  const core::Receipt first{.id = done->outcome.messages[0].id,
                            .attempt = done->outcome.messages[0].attempt,
                            .token = params.token};
  const std::vector<core::Receipt> two = {first, gone};
  core::ClaimParams none = params;
  none.max = 0;
  ASSERT_OK_AND_ASSIGN(
      auto acked,
      engine->ClaimAndCommit(none, {.queue_id = queue_id, .receipts = two},
                             std::vector<int>{0, 0}));
  ASSERT_TRUE(acked.has_value());
  ASSERT_EQ(acked->acks.size(), 2u);
  EXPECT_OK(acked->acks[0]);
  EXPECT_EQ(acked->acks[1].code(), Code::kNotFound);
  EXPECT_TRUE(acked->outcome.messages.empty());
  ASSERT_OK_AND_ASSIGN(stats, q.Stats());
  EXPECT_EQ(stats.leased, 4);
  EXPECT_EQ(stats.acks, 2);
  EXPECT_EQ(stats.claims, 6);

  // Acks that would release dependents: nothing done, left to the caller.
  Query(c, "UPDATE sqlq_queues SET dependents = 1 WHERE name = 'jobs'");
  ASSERT_OK_AND_ASSIGN(core::Receipt next, core::ParseReceipt(held[1].receipt));
  const std::vector<core::Receipt> one = {next};
  const std::vector<int> gate = {1};
  ASSERT_OK_AND_ASSIGN(
      auto left, engine->ClaimAndCommit(
                     params, {.queue_id = queue_id, .receipts = one}, gate));
  EXPECT_FALSE(left.has_value());
  ASSERT_OK_AND_ASSIGN(stats, q.Stats());
  EXPECT_EQ(stats.leased, 4);
  EXPECT_EQ(stats.acks, 2);
  PQfinish(c);
}

// A group's sends and claims in one transaction
// (Engine::SendsAndClaimAndCommit): the claim takes the messages the sends
// just stored, with the ack before it; a send to a dropped queue is a clean
// failure beside a claim that still runs, and a claim of one beside sends
// that are stored; sends with a dedup key are left
// to the general way untouched; acks that would release dependents leave
// the claim to the caller once the sends are stored.
TEST_F(PostgresEngineTest, SendsAndAClaimInOneTransaction) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(WorkQueue other, store->CreateQueue("other", {}));
  ASSERT_OK(q.Send({.payload = "old"}));
  ASSERT_OK_AND_ASSIGN(auto held, q.Claim({.max = 1}));
  ASSERT_EQ(held.size(), 1u);
  ASSERT_OK_AND_ASSIGN(core::Receipt receipt,
                       core::ParseReceipt(held[0].receipt));
  PGconn* c = Raw();
  const std::int64_t queue_id =
      std::stoll(Query(c, "SELECT id FROM sqlq_queues WHERE name = 'jobs'"));
  const std::int64_t other_id =
      std::stoll(Query(c, "SELECT id FROM sqlq_queues WHERE name = 'other'"));
  ASSERT_OK_AND_ASSIGN(auto engine,
                       engines::OpenEngine(db_->url(), StoreOptions{}));
  const core::ClaimParams params{.queue_id = queue_id,
                                 .max = 3,
                                 .lease = core::Micros(30'000'000),
                                 .token = 0x5eed,
                                 .max_attempts = 5};
  const std::vector<Message> three = {
      {.payload = "a"}, {.payload = "b"}, {.payload = "c"}};
  const std::vector<core::Receipt> one = {receipt};
  const std::vector<int> gate = {1};
  core::Engine::SendsFirst sends{.to = {.queue_id = queue_id}};
  sends.to.messages = three;
  ASSERT_OK_AND_ASSIGN(
      auto done,
      engine->SendsAndClaimAndCommit(
          sends, params, {.queue_id = queue_id, .receipts = one}, gate));
  ASSERT_TRUE(done.has_value());
  ASSERT_TRUE(sends.sent.has_value());
  ASSERT_OK(sends.sent->status());
  ASSERT_EQ((*sends.sent)->size(), 3u);
  ASSERT_EQ(done->acks.size(), 1u);
  EXPECT_OK(done->acks[0]);
  // The claim saw the sends of its own transaction, in their order.
  ASSERT_EQ(done->outcome.messages.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(done->outcome.messages[i].id, (**sends.sent)[i].id);
    EXPECT_EQ(done->outcome.messages[i].payload, three[i].payload);
  }
  ASSERT_OK_AND_ASSIGN(QueueStats stats, q.Stats());
  EXPECT_EQ(stats.ready, 0);
  EXPECT_EQ(stats.leased, 3);
  EXPECT_EQ(stats.sends, 4);
  EXPECT_EQ(stats.claims, 4);
  EXPECT_EQ(stats.acks, 1);

  // Sends to a queue dropped meanwhile: their own clean failure; the claim
  // of the other queue runs.
  ASSERT_OK(store->DropQueue("other"));
  core::Engine::SendsFirst lost{.to = {.queue_id = other_id}};
  lost.to.messages = three;
  ASSERT_OK_AND_ASSIGN(
      auto beside,
      engine->SendsAndClaimAndCommit(lost, params, {.queue_id = queue_id}, {}));
  ASSERT_TRUE(beside.has_value());
  ASSERT_TRUE(lost.sent.has_value());
  EXPECT_EQ(lost.sent->status().code(), Code::kNotFound)
      << lost.sent->status().ToString();
  EXPECT_TRUE(beside->outcome.messages.empty());

  // A claim of the dropped queue: its own clean failure; the sends beside
  // it are stored.
  core::ClaimParams gone = params;
  gone.queue_id = other_id;
  core::Engine::SendsFirst kept{.to = {.queue_id = queue_id}};
  kept.to.messages = three;
  auto failed =
      engine->SendsAndClaimAndCommit(kept, gone, {.queue_id = other_id}, {});
  EXPECT_EQ(failed.status().code(), Code::kNotFound)
      << failed.status().ToString();
  ASSERT_TRUE(kept.sent.has_value());
  ASSERT_OK(kept.sent->status());
  EXPECT_EQ((*kept.sent)->size(), 3u);
  ASSERT_OK_AND_ASSIGN(stats, q.Stats());
  EXPECT_EQ(stats.sends, 7);
  EXPECT_EQ(stats.ready, 3);

  // A dedup key: nothing done, for the general way.
  core::Engine::SendsFirst keyed{.to = {.queue_id = queue_id}};
  const std::vector<Message> with_key = {{.payload = "k", .dedup_key = "k"}};
  keyed.to.messages = with_key;
  ASSERT_OK_AND_ASSIGN(
      auto left, engine->SendsAndClaimAndCommit(keyed, params,
                                                {.queue_id = queue_id}, {}));
  EXPECT_FALSE(left.has_value());
  EXPECT_FALSE(keyed.sent.has_value());
  ASSERT_OK_AND_ASSIGN(stats, q.Stats());
  EXPECT_EQ(stats.sends, 7);

  // Acks that would release dependents: the sends are stored, once; the
  // ack and the claim are left to the caller.
  Query(c, "UPDATE sqlq_queues SET dependents = 1 WHERE name = 'jobs'");
  const core::Receipt first{.id = done->outcome.messages[0].id,
                            .attempt = done->outcome.messages[0].attempt,
                            .token = params.token};
  const std::vector<core::Receipt> ack = {first};
  core::Engine::SendsFirst before{.to = {.queue_id = queue_id}};
  before.to.messages = three;
  ASSERT_OK_AND_ASSIGN(
      auto unclaimed,
      engine->SendsAndClaimAndCommit(
          before, params, {.queue_id = queue_id, .receipts = ack}, gate));
  EXPECT_FALSE(unclaimed.has_value());
  ASSERT_TRUE(before.sent.has_value());
  ASSERT_OK(before.sent->status());
  EXPECT_EQ((*before.sent)->size(), 3u);
  ASSERT_OK_AND_ASSIGN(stats, q.Stats());
  EXPECT_EQ(stats.sends, 10);
  EXPECT_EQ(stats.ready, 6);
  EXPECT_EQ(stats.leased, 3);
  EXPECT_EQ(stats.acks, 1);
  PQfinish(c);
}

// The listing of a queue's messages (WorkQueue::ListMessages) walks
// sqlq_messages by primary key in id order, a bounded stretch per page,
// with the statistics of a vacuum of the empty table as well as with fresh
// ones: never the whole table, never the claim index, never a sort. The
// statements are the engine's own (engines/shared/message_sql.h), with the
// values in place of their parameters, as the engine runs them (unprepared, so
// planned with their values).
TEST_F(PostgresEngineTest, ListingPlansWalkThePrimaryKeyWhateverTheStats) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue deep, store->CreateQueue("deep", {}));
  PGconn* c = Raw();
  Query(c, "VACUUM ANALYZE sqlq_messages");  // the table is empty
  std::vector<Message> batch(5000, Message{.payload = "m"});
  ASSERT_OK(deep.SendBatch(batch));
  for (int i = 0; i < 100; ++i) {
    ASSERT_OK_AND_ASSIGN(WorkQueue small,
                         store->CreateQueue("small" + std::to_string(i), {}));
    ASSERT_OK(small.Send({.payload = "m"}));
  }
  const std::string queue_id =
      Query(c, "SELECT id FROM sqlq_queues WHERE name = 'deep'");
  const ListingPage page(std::stoll(queue_id));
  const core::FindMessagesParams& p = page.params;
  auto literal = [](const engines::shared::BuiltSql& b) {
    return WithValues(b, /*numbered=*/true);
  };
  const auto& style = engines::postgres::Dialect::kMessageStyle;
  for (const char* stats : {"after a vacuum of the empty table", "fresh"}) {
    SCOPED_TRACE(stats);
    if (std::string(stats) == "fresh") Query(c, "ANALYZE sqlq_messages");
    // In a transaction, as the engine runs them, after its settings.
    Query(c, "BEGIN");
    Query(c, engines::postgres::Dialect::kListingSettings);
    for (const std::string& sql :
         {literal(engines::shared::WindowSql(style, p)),
          literal(engines::shared::FindSql(style, p, 0, 5000))}) {
      const std::string plan = Query(c, "EXPLAIN (FORMAT JSON) " + sql);
      RecordProperty("plan", plan);
      EXPECT_NE(plan.find("\"Index Name\": \"sqlq_messages_pkey\""),
                std::string::npos)
          << sql << "\n"
          << plan;
      EXPECT_EQ(plan.find("Seq Scan"), std::string::npos) << sql << "\n"
                                                          << plan;
      EXPECT_EQ(plan.find("sqlq_messages_claim"), std::string::npos)
          << sql << "\n"
          << plan;
      EXPECT_EQ(plan.find("\"Node Type\": \"Sort\""), std::string::npos)
          << sql << "\n"
          << plan;
    }
    Query(c, "COMMIT");
  }
  PQfinish(c);
}

// `sql` with its ? placeholders replaced by `values` (SQL literals), in
// order: a statement to EXPLAIN.
std::string Filled(std::string sql, const std::vector<std::string>& values) {
  std::size_t at = 0;
  for (const std::string& v : values) {
    at = sql.find('?', at);
    if (at == std::string::npos) break;
    sql.replace(at, 1, v);
    at += v.size();
  }
  return sql;
}

// The statements of a grouped claim (engines/shared/sql_groups.h) are seeks
// of the group index whatever the statistics say: never a scan of the
// queue, never a sort, beside a plain queue's messages.
TEST_F(PostgresEngineTest, GroupClaimPlansSeekTheGroupIndexWhateverTheStats) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue plain, store->CreateQueue("plain", {}));
  ASSERT_OK_AND_ASSIGN(
      WorkQueue grouped,
      store->CreateQueue("grouped", {.groups = GroupMode::kOrdered}));
  PGconn* c = Raw();
  Query(c, "VACUUM ANALYZE sqlq_messages");  // the table is empty
  ASSERT_OK(
      plain.SendBatch(std::vector<Message>(5000, Message{.payload = "m"})));
  std::vector<Message> batch;
  for (int i = 0; i < 5000; ++i) {
    batch.push_back({.payload = "m", .group = "g" + std::to_string(i % 50)});
  }
  ASSERT_OK(grouped.SendBatch(batch));
  const std::string id =
      Query(c, "SELECT id FROM sqlq_queues WHERE name = 'grouped'");
  const std::string group = "'g17'::bytea";
  for (const char* stats : {"after a vacuum of the empty table", "fresh"}) {
    SCOPED_TRACE(stats);
    if (std::string(stats) == "fresh") Query(c, "ANALYZE sqlq_messages");
    std::vector<std::string> statements = {
        Filled(engines::shared::kGroupHeadSql, {id, group}),
        Filled(engines::shared::kGroupReadySql,
               {id, group, "9000000000000000", "10"})};
    // The look at the next groups, one recursive statement: each step a
    // seek of the group index.
    for (bool first : {false, true}) {
      for (bool ordered : {false, true}) {
        for (bool window : {false, true}) {
          if (ordered && window) continue;
          std::string sql =
              engines::postgres::Dialect::GroupLookSql(first, ordered, window);
          for (const auto& [mark, value] :
               std::vector<std::pair<std::string, std::string>>{
                   {"$1", id},
                   {"$2", first ? std::string("''::bytea") : group},
                   {"$3", "40"},
                   {"$4", "9000000000000000"},
                   {"$5", "10"},
                   {"$6", "3"}}) {
            for (auto at = sql.find(mark); at != std::string::npos;
                 at = sql.find(mark, at)) {
              sql.replace(at, mark.size(), value);
            }
          }
          statements.push_back(sql);
        }
      }
    }
    for (const std::string& sql : statements) {
      const std::string plan = Query(c, "EXPLAIN (FORMAT JSON) " + sql);
      EXPECT_NE(plan.find("\"Index Name\": \"sqlq_messages_group\""),
                std::string::npos)
          << sql << "\n"
          << plan;
      // Every read of sqlq_messages in it goes through the group index.
      EXPECT_EQ(plan.find("\"Index Name\": \"sqlq_messages_pkey\""),
                std::string::npos)
          << sql << "\n"
          << plan;
      EXPECT_EQ(plan.find("Seq Scan"), std::string::npos) << sql << "\n"
                                                          << plan;
      EXPECT_EQ(plan.find("\"Node Type\": \"Sort\""), std::string::npos)
          << sql << "\n"
          << plan;
    }
  }
  PQfinish(c);
}

// Messages have no foreign key to their queue (schema version 3): what keeps
// a send racing DropQueue from leaving messages behind is the queue row's
// lock. Senders in other stores send until the queue is gone; whatever they
// were told was stored must go with the queue.
TEST_F(PostgresEngineTest, DropQueueRacingSendsLeavesNoMessageBehind) {
  auto dropper = OpenStore();
  ASSERT_TRUE(dropper);
  std::vector<std::unique_ptr<Store>> senders;
  for (int i = 0; i < 4; ++i) {
    senders.push_back(OpenStore());
    ASSERT_TRUE(senders.back());
  }
  PGconn* c = Raw();
  for (int round = 0; round < 5; ++round) {
    ASSERT_OK(dropper->CreateQueue("jobs", {}));
    const std::string queue_id =
        Query(c, "SELECT id FROM sqlq_queues WHERE name = 'jobs'");
    std::mutex mu;
    std::condition_variable cv;
    int stored = 0;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        auto q = senders[t]->Queue("jobs");
        if (!q.ok()) return;  // dropped before this sender began
        std::vector<Message> batch(t % 2 == 0 ? 1 : 20,
                                   Message{.payload = "m"});
        for (;;) {
          auto sent = q->SendBatch(batch);
          if (!sent.ok()) {
            EXPECT_CODE(sent, Code::kNotFound);
            return;
          }
          std::lock_guard lock(mu);
          stored += static_cast<int>(batch.size());
          cv.notify_all();
        }
      });
    }
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return stored >= 200; });
    }
    ASSERT_OK(dropper->DropQueue("jobs"));
    for (auto& t : threads) t.join();
    EXPECT_EQ(Query(c, "SELECT count(*) FROM sqlq_messages WHERE queue_id = " +
                           queue_id),
              "0")
        << "round " << round << ", " << stored << " messages stored";
  }
  EXPECT_EQ(Query(c,
                  "SELECT count(*) FROM sqlq_messages m WHERE NOT EXISTS "
                  "(SELECT 1 FROM sqlq_queues q WHERE q.id = m.queue_id)"),
            "0");
  PQfinish(c);
}

// A database created by an earlier version (2: messages with a foreign key
// to their queue, a claim index ending with id) is upgraded in place: its
// messages stay claimable, in order, and a drop still takes them with the
// queue.
TEST_F(PostgresEngineTest, UpgradeFromVersionTwoKeepsTheMessages) {
  {
    auto store = OpenStore();
    ASSERT_TRUE(store);
    ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
    ASSERT_OK(q.SendBatch(std::vector<Message>(10, Message{.payload = "m"})));
  }
  PGconn* c = Raw();
  // Back to version 2 as that version left it: counters in slot rows of
  // sqlq_counters (slot 7 here), no deltas.
  Query(c, "DELETE FROM sqlq_schema WHERE version > 2");
  Query(c, "DROP INDEX sqlq_dead_died");
  Query(c, "DROP TABLE sqlq_dedup_holds");
  Query(c, "DROP TABLE sqlq_limits");
  Query(c, "DROP TABLE sqlq_leases");
  Query(c, "DROP TABLE sqlq_schedules");
  Query(c, "DROP TABLE sqlq_scheduler");
  Query(c, "DROP TABLE sqlq_waiting");
  Query(c, "DROP TABLE sqlq_workers");
  Query(c, "DROP TABLE sqlq_results");
  Query(c, "DROP TABLE sqlq_batches");
  Query(c, "DROP TABLE sqlq_deps");
  Query(c, "ALTER TABLE sqlq_messages DROP COLUMN waits");
  Query(c, "ALTER TABLE sqlq_queues DROP COLUMN dependents");
  Query(c, "DROP TABLE sqlq_subscriptions");
  Query(c, "DROP INDEX sqlq_messages_group");
  Query(c, "ALTER TABLE sqlq_messages DROP COLUMN grp");
  Query(c, "ALTER TABLE sqlq_dead DROP COLUMN grp");
  Query(c, "ALTER TABLE sqlq_messages DROP COLUMN snoozes");
  Query(c,
        "ALTER TABLE sqlq_queues DROP COLUMN paused, DROP COLUMN "
        "dead_retention_us, DROP COLUMN unique_for_us, DROP COLUMN "
        "group_mode, DROP COLUMN max_leased, DROP COLUMN rate_u, DROP COLUMN "
        "rate_burst, DROP COLUMN group_limit, DROP COLUMN dead_letter_queue, "
        "DROP COLUMN labels");
  for (const char* table : {"sqlq_messages", "sqlq_dead", "sqlq_archive"}) {
    Query(c, std::string("ALTER TABLE ") + table +
                 " DROP COLUMN headers, DROP COLUMN errors");
  }
  Query(c,
        "INSERT INTO sqlq_counters (queue_id, slot, sends) "
        "SELECT queue_id, 7, sum(sends) FROM sqlq_counter_deltas "
        "GROUP BY queue_id");
  Query(c, "DROP VIEW sqlq_counts");
  Query(c, "DROP TABLE sqlq_counter_deltas");
  Query(c, "ALTER TABLE sqlq_counters DROP COLUMN expired");
  Query(c,
        "ALTER TABLE sqlq_messages ADD CONSTRAINT sqlq_messages_queue_id_fkey "
        "FOREIGN KEY (queue_id) REFERENCES sqlq_queues ON DELETE CASCADE");
  Query(c, "DROP INDEX sqlq_messages_claim");
  Query(c,
        "CREATE INDEX sqlq_messages_claim ON sqlq_messages "
        "(queue_id, priority DESC, ready_us, id)");
  auto store = OpenStore();
  ASSERT_TRUE(store);
  EXPECT_EQ(Query(c, "SELECT max(version) FROM sqlq_schema"),
            std::to_string(engines::postgres::kSchemaVersion));
  EXPECT_EQ(Query(c,
                  "SELECT count(*) FROM pg_constraint WHERE conrelid = "
                  "'sqlq_messages'::regclass AND contype = 'f'"),
            "0");
  EXPECT_EQ(Query(c, "SELECT pg_get_indexdef('sqlq_messages_claim'::regclass)"),
            "CREATE INDEX sqlq_messages_claim ON public.sqlq_messages USING "
            "btree (queue_id, priority DESC, ready_us, ((id + 0)))");
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->Queue("jobs"));
  ASSERT_OK_AND_ASSIGN(QueueStats stats, q.Stats());
  EXPECT_EQ(stats.sends, 10);  // the old slot row, summed with the deltas
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 20}));
  ASSERT_EQ(got.size(), 10u);
  for (std::size_t i = 1; i < got.size(); ++i) {
    EXPECT_LT(got[i - 1].id, got[i].id);
  }
  ASSERT_OK(store->DropQueue("jobs"));
  EXPECT_EQ(Query(c, "SELECT count(*) FROM sqlq_messages"), "0");
  PQfinish(c);
}

// Sum of rows times loops of the scan nodes of an EXPLAIN ANALYZE in text.
std::int64_t RowsScanned(const std::string& plan) {
  std::int64_t total = 0;
  std::size_t line_start = 0;
  while (line_start < plan.size()) {
    std::size_t end = plan.find('\n', line_start);
    if (end == std::string::npos) end = plan.size();
    const std::string line = plan.substr(line_start, end - line_start);
    line_start = end + 1;
    if (line.find("Scan") == std::string::npos) continue;
    const auto rows = line.find(" rows=", line.find("actual"));
    const auto loops = line.find(" loops=", rows);
    if (rows == std::string::npos || loops == std::string::npos) continue;
    total +=
        std::stoll(line.substr(rows + 6)) * std::stoll(line.substr(loops + 7));
  }
  return total;
}

// A waiting claim asks when the queue's next message is ready. With
// thousands of delayed messages over a few priorities that must be a few
// index probes, not a read of the whole queue.
TEST_F(PostgresEngineTest, NextReadyTimeReadsAFewEntriesOfADeepQueue) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("later", {}));
  std::vector<Message> batch;
  for (int i = 0; i < 3000; ++i) {
    batch.push_back({.payload = "m",
                     .priority = i % 3,
                     .delay = std::chrono::hours(1) + seconds(3000 - i)});
  }
  ASSERT_OK(q.SendBatch(batch));
  PGconn* c = Raw();
  Query(c, "ANALYZE sqlq_messages");
  const std::string queue_id =
      Query(c, "SELECT id FROM sqlq_queues WHERE name = 'later'");
  Query(c, std::string("PREPARE next_ready(bigint) AS ") +
               engines::postgres::kNextReadySql);
  EXPECT_EQ(Query(c, "EXECUTE next_ready(" + queue_id + ")"),
            Query(c,
                  "SELECT min(ready_us) FROM sqlq_messages WHERE "
                  "queue_id = " +
                      queue_id));
  PGresult* r = PQexec(
      c, ("EXPLAIN ANALYZE EXECUTE next_ready(" + queue_id + ")").c_str());
  std::string plan;
  for (int i = 0; i < PQntuples(r); ++i) {
    plan += PQgetvalue(r, i, 0);
    plan += '\n';
  }
  PQclear(r);
  RecordProperty("plan", plan);
  EXPECT_GT(RowsScanned(plan), 0) << plan;
  EXPECT_LT(RowsScanned(plan), 50) << plan;
  // A queue without messages has no next ready time.
  Query(c, "DELETE FROM sqlq_messages WHERE queue_id = " + queue_id);
  EXPECT_EQ(Query(c, "EXECUTE next_ready(" + queue_id + ")"), "");
  PQfinish(c);
}

// Claims `n` messages of `q`, all of which must be there, and acks them in
// one batch.
void ClaimAndAck(WorkQueue& q, int n, std::vector<ClaimedMessage>* got) {
  ASSERT_OK_AND_ASSIGN(*got, q.Claim({.max = n}));
  ASSERT_EQ(got->size(), static_cast<std::size_t>(n));
  std::vector<std::string> receipts;
  for (const ClaimedMessage& m : *got) receipts.push_back(m.receipt);
  ASSERT_OK_AND_ASSIGN(auto acked, q.AckBatch(receipts));
  for (const Status& s : acked) ASSERT_OK(s);
}

// Sends `n` messages to `q` and claims them all; their receipts in
// `receipts`.
void SendAndClaimAll(WorkQueue& q, int n, std::vector<std::string>* receipts) {
  std::vector<Message> batch(n, Message{.payload = "m"});
  ASSERT_OK(q.SendBatch(batch));
  while (receipts->size() < static_cast<std::size_t>(n)) {
    ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 1000}));
    ASSERT_FALSE(got.empty());
    for (const ClaimedMessage& m : got) receipts->push_back(m.receipt);
  }
}

// A queue table is often empty for a moment, and a vacuum (autovacuum's or
// the store's own) that runs then records that it holds next to no rows.
// Until the next one, the planner believes so however many messages come
// in, and a plan that is as good as any for an empty table reads the whole
// table or a whole index for every row it looks up: claims and acks go from
// a fraction of a millisecond to many. The store's statements must keep to
// their indexes whatever the statistics say (docs/engines/postgres.md,
// "Plans that do not depend on statistics").
TEST_F(PostgresEngineTest,
       StatisticsTakenWhenTheTableWasEmptyKeepPlansOnIndexes) {
  constexpr int kMessages = 5000, kRounds = 20, kBatch = 100;
  PGconn* c = Raw();
  const std::string our_pid = Query(c, "SELECT pg_backend_pid()");
  {
    auto store = OpenStore();
    ASSERT_TRUE(store);
    ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
    std::vector<std::string> receipts;
    ASSERT_NO_FATAL_FAILURE(SendAndClaimAll(q, kMessages, &receipts));
    // All done but the newest, which keeps the table's last page (so that
    // vacuum cannot truncate the table) and leaves one row.
    receipts.pop_back();
    ASSERT_OK_AND_ASSIGN(auto acked, q.AckBatch(receipts));
    for (const Status& s : acked) ASSERT_OK(s);
  }
  Query(c, "VACUUM sqlq_messages");
  ASSERT_LE(std::stod(Query(c,
                            "SELECT reltuples FROM pg_class WHERE relname = "
                            "'sqlq_messages'")),
            1.0);
  Query(c, "SELECT pg_stat_reset()");
  {
    auto store = OpenStore();
    ASSERT_TRUE(store);
    ASSERT_OK_AND_ASSIGN(WorkQueue q, store->Queue("jobs"));
    std::vector<Message> batch(kMessages, Message{.payload = "m"});
    ASSERT_OK(q.SendBatch(batch));
    // More rounds than a prepared statement's first five, planned each
    // time: the rest run its generic plan.
    for (int round = 0; round < kRounds; ++round) {
      std::vector<ClaimedMessage> got;
      ASSERT_NO_FATAL_FAILURE(ClaimAndAck(q, kBatch, &got));
      // A single ack, looked up by id: refused, the message being gone.
      EXPECT_EQ(q.Ack(got[0].receipt).code(), Code::kNotFound);
    }
  }
  ASSERT_TRUE(StoreBackendsExited(c, our_pid))
      << "the store's connections stayed open";
  const std::string reads = Query(
      c,
      "SELECT coalesce(sum(idx_tup_read), 0) || ' ' || "
      "coalesce(sum(seq_tup_read), 0) FROM pg_stat_user_indexes i JOIN "
      "pg_stat_user_tables t USING (relid) WHERE t.relname = 'sqlq_messages'");
  PQfinish(c);
  std::int64_t index_entries = 0, table_rows = 0;
  std::istringstream(reads) >> index_entries >> table_rows;
  RecordProperty("index_entries_read", std::to_string(index_entries));
  RecordProperty("table_rows_read_in_scans", std::to_string(table_rows));
  // Each round claims 100 messages and acks them: a few hundred index
  // entries. A plan reading an index whole per message would read
  // kMessages entries per message claimed, millions in all.
  EXPECT_LT(index_entries, kRounds * kBatch * 10);
  EXPECT_EQ(table_rows, 0);
}

// A drained queue's table ends in empty pages, and a vacuum would give them
// back to the file system under the table's exclusive lock: every send and
// claim waits behind it, and a hot standby replaying it cancels its readers.
// The tables that churn keep their size through any vacuum, a plain one
// like autovacuum's included (docs/engines/postgres.md, "No vacuum shortens
// the tables").
TEST_F(PostgresEngineTest, AVacuumOfADrainedQueueDoesNotShortenItsTable) {
  constexpr int kMessages = 5000;
  {
    auto store = OpenStore();
    ASSERT_TRUE(store);
    ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
    std::vector<std::string> receipts;
    ASSERT_NO_FATAL_FAILURE(SendAndClaimAll(q, kMessages, &receipts));
    ASSERT_OK_AND_ASSIGN(auto acked, q.AckBatch(receipts));
    for (const Status& s : acked) ASSERT_OK(s);
  }
  PGconn* c = Raw();
  const std::string size_sql =
      "SELECT pg_relation_size('sqlq_messages') || ' ' || "
      "(SELECT count(*) FROM sqlq_messages)";
  const std::string before = Query(c, size_sql);
  ASSERT_NE(before.rfind("0 ", 0), 0U) << "the table holds no page: " << before;
  // A plain VACUUM, as autovacuum's and the store's own are.
  Query(c, "VACUUM sqlq_messages");
  EXPECT_EQ(Query(c, size_sql), before.substr(0, before.find(' ')) + " 0")
      << "before the vacuum: " << before;
  // What a user runs to take the space back after a one-off flood.
  Query(c, "VACUUM (TRUNCATE true) sqlq_messages");
  EXPECT_EQ(Query(c, size_sql), "0 0");
  PQfinish(c);
}

// --- counters ------------------------------------------------------------

// Counter changes are appended (sqlq_counter_deltas), not added to a row:
// while a snapshot is held open elsewhere, each update of a row would leave
// a version that every later update walks. Counted in the server's
// statistics of sqlq_counters, which a backend reports when it exits.
TEST_F(PostgresEngineTest, CountersUnderAnOpenSnapshotAreAppendedNotUpdated) {
  constexpr int kSends = 300;
  HeldSnapshot holder(Raw());
  PGconn* c = Raw();
  const std::string our_pid = Query(c, "SELECT pg_backend_pid()");
  {
    auto store = OpenStore();
    ASSERT_TRUE(store);
    ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
    for (int i = 0; i < kSends; ++i) ASSERT_OK(q.Send({.payload = "m"}));
    ASSERT_OK_AND_ASSIGN(QueueStats stats, q.Stats());
    EXPECT_EQ(stats.sends, kSends);
  }
  ASSERT_TRUE(StoreBackendsExited(c, holder.pid + ", " + our_pid))
      << "the store's connections stayed open";
  // Folds update one row per queue at most once a second; adding to a row
  // at each commit would be one update per send.
  const std::int64_t updates = std::stoll(
      Query(c,
            "SELECT n_tup_upd + n_tup_hot_upd FROM pg_stat_user_tables "
            "WHERE relname = 'sqlq_counters'"));
  EXPECT_LT(updates, kSends / 10);
  holder.End();
  PQfinish(c);
}

// The store folds the deltas into sqlq_counters in the background; the
// counts read the same before and after.
TEST_F(PostgresEngineTest, CounterDeltasAreFoldedAndStillCounted) {
  auto store = OpenStore("fold_rows=1");
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(WorkQueue other, store->CreateQueue("other", {}));
  for (int i = 0; i < 5; ++i) ASSERT_OK(q.Send({.payload = "m"}));
  ASSERT_OK(other.Send({.payload = "m"}));
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 2}));
  ASSERT_EQ(got.size(), 2u);
  for (const auto& m : got) ASSERT_OK(q.Ack(m.receipt));
  // A job dropped at its expiry (1 ms after its send, which has returned:
  // past once 5 ms more have gone by) counts as expired.
  ASSERT_OK_AND_ASSIGN(WorkQueue late, store->CreateQueue("late", {}));
  ASSERT_OK(late.Send({.payload = "m",
                       .expire_after = milliseconds(1),
                       .on_expiry = ExpiryAction::kDrop}));
  std::this_thread::sleep_for(milliseconds(5));
  ASSERT_OK_AND_ASSIGN(auto none, late.Claim({}));
  EXPECT_TRUE(none.empty());
  PGconn* c = Raw();
  // A dropped queue's deltas are dropped by the fold, not added.
  ASSERT_OK(store->DropQueue("other"));
  const auto deadline = SteadyClock::now() + seconds(30);
  while (Query(c, "SELECT count(*) FROM sqlq_counter_deltas") != "0" &&
         SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(Query(c, "SELECT count(*) FROM sqlq_counter_deltas"), "0")
      << "the deltas were not folded";
  EXPECT_EQ(Query(c,
                  "SELECT sends || ' ' || claims || ' ' || acks FROM "
                  "sqlq_counters k JOIN sqlq_queues q ON q.id = k.queue_id "
                  "WHERE q.name = 'jobs'"),
            "5 2 2");
  EXPECT_EQ(Query(c,
                  "SELECT acks || ' ' || expired FROM sqlq_counters k JOIN "
                  "sqlq_queues q ON q.id = k.queue_id WHERE q.name = 'late'"),
            "0 1");
  ASSERT_OK_AND_ASSIGN(QueueStats stats, q.Stats());
  EXPECT_EQ(stats.sends, 5);
  EXPECT_EQ(stats.claims, 2);
  EXPECT_EQ(stats.acks, 2);
  ASSERT_OK_AND_ASSIGN(stats, late.Stats());
  EXPECT_EQ(stats.expired, 1);
  PQfinish(c);
}

// A fold that waits (here for a lock an operator holds; as well for a
// synchronous standby that does not answer) does not hold up the store's
// close: it is cancelled, and its deltas are left to count and to fold.
TEST_F(PostgresEngineTest, ClosingTheStoreCancelsAFoldThatWaits) {
  auto store = OpenStore("fold_rows=1");
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  PGconn* c = Raw();
  ASSERT_EQ(Query(c, "BEGIN"), "");
  ASSERT_EQ(Query(c, "LOCK TABLE sqlq_counters IN EXCLUSIVE MODE"), "");
  ASSERT_OK(q.Send({.payload = "m"}));
  PGconn* watcher = Raw();
  const auto deadline = SteadyClock::now() + seconds(30);
  const std::string waiting =
      "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
      "AND query LIKE '%DELETE FROM sqlq_counter_deltas RETURNING%' "
      "AND pid <> pg_backend_pid()";
  while (Query(watcher, waiting) != "1" && SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_EQ(Query(watcher, waiting), "1") << "no fold waited for the lock";
  auto closing = std::async(std::launch::async, [&] { store.reset(); });
  const bool closed =
      closing.wait_for(seconds(30)) == std::future_status::ready;
  Query(c, "COMMIT");  // ends the wait, should the close still wait on it
  closing.get();
  EXPECT_TRUE(closed) << "the store's close waited for the fold";
  EXPECT_EQ(Query(watcher, "SELECT sum(sends) FROM sqlq_counter_deltas"), "1");
  PQfinish(watcher);
  PQfinish(c);
}

std::vector<std::string> Payloads(const std::vector<ClaimedMessage>& got) {
  std::vector<std::string> out;
  for (const ClaimedMessage& m : got) out.push_back(m.payload);
  return out;
}

class ClaimMarkTest : public PostgresEngineTest {
 protected:
  // No full read of the queue on a timer during a test: what is tested is
  // what makes a claim read from the queue's start.
  ClaimMarkTest() { tuning_ = "rescan_ms=3600000"; }

  std::unique_ptr<Store> OpenStoreWithClock() {
    return OpenOrFail(db_->url() + "?" + tuning_, {.clock = clock_});
  }
  // Messages sent between two ticks have a ready time of their own.
  void Tick() { clock_->Advance(seconds(1)); }

  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
};

// A transaction left open elsewhere keeps every dead row version and its
// claim-index entries: nothing may be removed or marked dead while its
// snapshot might still see them. Claims must not read the entries of the
// messages processed since, or they slow down with every message (the
// collapse of hand-written SKIP LOCKED queues). Counted in the server's
// statistics of the claim index, which a backend reports when it exits.
TEST_F(ClaimMarkTest, ClaimsUnderAnOpenSnapshotSkipTheMessagesDone) {
  constexpr int kRounds = 40, kBatch = 100;
  HeldSnapshot holder(Raw());
  PGconn* c = Raw();
  const std::string our_pid = Query(c, "SELECT pg_backend_pid()");
  {
    auto store = OpenStoreWithClock();
    ASSERT_TRUE(store);
    ASSERT_OK_AND_ASSIGN(
        WorkQueue q,
        store->CreateQueue("jobs", {.lease = std::chrono::hours(1)}));
    for (int round = 0; round < kRounds; ++round) {
      std::vector<Message> batch(kBatch, Message{.payload = "m"});
      ASSERT_OK(q.SendBatch(batch));
      Tick();
      std::vector<ClaimedMessage> got;
      ASSERT_NO_FATAL_FAILURE(ClaimAndAck(q, kBatch, &got));
    }
    ASSERT_OK(q.Send({.payload = "last"}));
    Tick();
    ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 10}));
    EXPECT_EQ(Payloads(got), std::vector<std::string>{"last"});
  }
  ASSERT_TRUE(StoreBackendsExited(c, holder.pid + ", " + our_pid))
      << "the store's connections stayed open";
  const std::int64_t read =
      std::stoll(Query(c,
                       "SELECT idx_tup_read FROM pg_stat_user_indexes "
                       "WHERE indexrelname = 'sqlq_messages_claim'"));
  RecordProperty("claim_index_entries_read", std::to_string(read));
  // Each claim reads its 100 messages and about one entry more. Reading
  // from the queue's start, claim k would read k * 100 dead entries too,
  // about 80,000 in all.
  EXPECT_GE(read, kRounds * kBatch);
  EXPECT_LT(read, kRounds * kBatch * 2);
  holder.End();
  PQfinish(c);
}

// A message that a rolled-back transaction of the store had locked is
// claimable again where it was, though claims of the store moved past it
// meanwhile.
TEST_F(ClaimMarkTest, AMessageLockedByARolledBackTransactionComesFirstAgain) {
  auto store = OpenStoreWithClock();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  for (const char* p : {"a", "b", "c", "d"}) {
    ASSERT_OK(q.Send({.payload = p}));
    Tick();
  }
  {
    ASSERT_OK_AND_ASSIGN(Tx tx, store->BeginTx());
    PGconn* own = static_cast<PGconn*>(tx.native_handle());
    // The caller's transaction locks "a" as a claim would.
    PGresult* r = PQexec(own,
                         "SELECT id FROM sqlq_messages ORDER BY id LIMIT 1 "
                         "FOR UPDATE");
    ASSERT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << PQresultErrorMessage(r);
    PQclear(r);
    // Claims skip the locked row and move past it.
    ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 2}));
    EXPECT_EQ(Payloads(got), (std::vector<std::string>{"b", "c"}));
    ASSERT_OK(tx.Rollback());
  }
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 2}));
  EXPECT_EQ(Payloads(got), (std::vector<std::string>{"a", "d"}));
}

// The same when the transaction that held the message ran in another
// process: a claim that waits finds it.
TEST_F(ClaimMarkTest, AMessageReleasedByAnotherProcessIsFoundByAWaitingClaim) {
  auto store = OpenStoreWithClock();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  for (const char* p : {"a", "b", "c"}) {
    ASSERT_OK(q.Send({.payload = p}));
    Tick();
  }
  PGconn* c = Raw();
  Query(c, "BEGIN");
  Query(c, "SELECT id FROM sqlq_messages ORDER BY id LIMIT 1 FOR UPDATE");
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 2}));
  EXPECT_EQ(Payloads(got), (std::vector<std::string>{"b", "c"}));
  Query(c, "ROLLBACK");
  ASSERT_OK_AND_ASSIGN(got, q.Claim({.max = 2, .wait = seconds(30)}));
  EXPECT_EQ(Payloads(got), std::vector<std::string>{"a"});
  PQfinish(c);
}

// A caller's transaction that sent a message and committed late: claims of
// the same store moved past the message's ready time meanwhile.
TEST_F(ClaimMarkTest, AMessageSentInALateCommittingTransactionIsNotSkipped) {
  auto store = OpenStoreWithClock();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(Tx tx, store->BeginTx());
  ASSERT_OK(q.Send(tx, {.payload = "early"}));
  Tick();
  ASSERT_OK(q.Send({.payload = "late"}));
  Tick();
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 5}));
  EXPECT_EQ(Payloads(got), std::vector<std::string>{"late"});
  ASSERT_OK(tx.Commit());
  ASSERT_OK_AND_ASSIGN(got, q.Claim({.max = 5}));
  EXPECT_EQ(Payloads(got), std::vector<std::string>{"early"});
}

// --- wake-ups ----------------------------------------------------------------

// Waits (up to 10 s) until `n` claims of `store` are asleep in their wait.
bool WaitUntilWaiting(Store& store, std::size_t n) {
  const auto deadline = SteadyClock::now() + seconds(10);
  while (store.TEST_waiting_claims() < n) {
    if (SteadyClock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// Sends from one store while a claim of another waits. The waiting store's
// safety-net poll is set to an hour, so a claim that returns the message
// within its 30 s wait was woken by NOTIFY and nothing else. Returns how
// long that took (for the record; latency is measured by sqlq bench), or
// -1 when the claim did not get the message.
std::int64_t NotifiedWakeMs(Store& waiting_store, WorkQueue& waiting,
                            WorkQueue& sending) {
  waiting_store.TEST_set_poll_interval(std::chrono::hours(1));
  auto claim = std::async(std::launch::async,
                          [&] { return waiting.Claim({.wait = seconds(30)}); });
  // Were the claim still looking when the message lands, it would find it
  // at once and prove nothing.
  if (!WaitUntilWaiting(waiting_store, 1)) return -1;
  const auto t0 = SteadyClock::now();
  if (!sending.Send({.payload = "wake"}).ok()) return -1;
  auto got = claim.get();
  const std::int64_t ms = MsSince(t0);
  if (!got.ok() || got->size() != 1) return -1;
  return ms;
}

TEST_F(PostgresEngineTest, SendFromAnotherStoreWakesAWaitingClaim) {
  auto a = OpenStore();
  auto b = OpenStore();
  ASSERT_TRUE(a && b);
  ASSERT_OK_AND_ASSIGN(WorkQueue qa, a->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(WorkQueue qb, b->Queue("jobs"));
  for (int i = 0; i < 3; ++i) {
    const std::int64_t ms = NotifiedWakeMs(*a, qa, qb);
    RecordProperty("wake_ms_" + std::to_string(i), std::to_string(ms));
    ASSERT_GE(ms, 0) << "round " << i << ": not woken by NOTIFY";
  }
}

// A publish on the database's clock (no ManualClock, unlike the
// conformance suite) takes PostgreSQL's one-statement way when it can:
// each subscriber gets the messages its filter matches, in order, counted,
// ready or delayed as sent, and a claim waiting on a subscriber wakes; a
// subscriber with a dedup window, a payload over a subscriber's limit and
// a missing topic take the general way, with its answers.
TEST_F(PostgresEngineTest, APublishOnTheDatabasesClockKeepsEveryRule) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK(store->CreateTopic("t"));
  ASSERT_OK_AND_ASSIGN(WorkQueue all, store->CreateQueue("all", {}));
  ASSERT_OK_AND_ASSIGN(WorkQueue odd, store->CreateQueue("odd", {}));
  ASSERT_OK(store->Subscribe("t", "all").status());
  ASSERT_OK(store->Subscribe("t", "odd", {{"kind", "odd"}}).status());
  auto waiting = std::async(std::launch::async, [&] {
    return odd.Claim({.max = 1, .wait = seconds(30)});
  });
  std::vector<Message> batch;
  for (int i = 0; i < 40; ++i) {
    Message m{.payload = "m" + std::to_string(i),
              .priority = i % 3,
              .headers = {{"n", std::to_string(i)},
                          {"kind", i % 2 == 1 ? "odd" : "even"}}};
    if (i % 10 == 0) m.delay = std::chrono::hours(1);
    batch.push_back(std::move(m));
  }
  ASSERT_OK_AND_ASSIGN(auto d, store->PublishBatch("t", batch));
  ASSERT_EQ(d.size(), 60u);
  // The claim that waited on "odd" took one of them.
  ASSERT_OK_AND_ASSIGN(auto woke, waiting.get());
  ASSERT_EQ(woke.size(), 1u);
  EXPECT_EQ(woke[0].headers.at("kind"), "odd");
  std::map<std::string, std::int64_t> last;
  std::map<std::string, int> per_queue;
  for (const Delivery& x : d) {
    SCOPED_TRACE(x.queue + " " + std::to_string(x.message));
    ASSERT_LT(x.message, batch.size());
    if (x.queue == "odd") {
      EXPECT_EQ(x.message % 2, 1u);
    }
    WorkQueue& q = x.queue == "odd" ? odd : all;
    ASSERT_OK_AND_ASSIGN(MessageInfo got, q.Get(x.sent.id));
    const Message& m = batch[x.message];
    EXPECT_EQ(got.payload, m.payload);
    EXPECT_EQ(got.priority, m.priority);
    EXPECT_EQ(got.headers, m.headers);
    EXPECT_EQ(got.state, x.message % 10 == 0       ? MessageState::kDelayed
                         : x.sent.id == woke[0].id ? MessageState::kLeased
                                                   : MessageState::kReady);
    EXPECT_GT(x.sent.id, last[x.queue]);  // in the batch's order
    last[x.queue] = x.sent.id;
    ++per_queue[x.queue];
  }
  EXPECT_EQ(per_queue, (std::map<std::string, int>{{"all", 40}, {"odd", 20}}));
  ASSERT_OK_AND_ASSIGN(QueueStats as, all.Stats());
  EXPECT_EQ(as.sends, 40);
  EXPECT_EQ(as.delayed, 4);
  ASSERT_OK_AND_ASSIGN(QueueStats os, odd.Stats());
  EXPECT_EQ(os.sends, 20);

  // A message goes only where its filter matches.
  ASSERT_OK_AND_ASSIGN(
      auto even,
      store->Publish("t", {.payload = "x", .headers = {{"kind", "even"}}}));
  ASSERT_EQ(even.size(), 1u);
  EXPECT_EQ(even[0].queue, "all");
  // Too large for one subscriber: stored in none.
  ASSERT_OK_AND_ASSIGN(WorkQueue small,
                       store->CreateQueue("small", {.max_payload_bytes = 4}));
  ASSERT_OK(store->Subscribe("t", "small").status());
  EXPECT_CODE(store->Publish("t", {.payload = "too long"}).status(),
              Code::kTooLarge);
  ASSERT_OK_AND_ASSIGN(as, all.Stats());
  EXPECT_EQ(as.sends, 41);
  ASSERT_OK(store->Unsubscribe("t", "small"));
  // A subscriber with a dedup window takes the general way: stored in
  // both; and a key held there is a duplicate there, and only there.
  ASSERT_OK_AND_ASSIGN(
      WorkQueue once,
      store->CreateQueue("once", {.unique_for = std::chrono::hours(1)}));
  ASSERT_OK(store->Subscribe("t", "once").status());
  ASSERT_OK_AND_ASSIGN(auto both, store->Publish("t", {.payload = "c"}));
  ASSERT_EQ(both.size(), 2u);
  for (const Delivery& x : both) EXPECT_FALSE(x.sent.duplicate) << x.queue;
  ASSERT_OK(once.Send({.payload = "held", .dedup_key = "k"}).status());
  ASSERT_OK_AND_ASSIGN(auto keyed,
                       store->Publish("t", {.payload = "b", .dedup_key = "k"}));
  ASSERT_EQ(keyed.size(), 2u);
  for (const Delivery& x : keyed) {
    EXPECT_EQ(x.sent.duplicate, x.queue == "once") << x.queue;
  }
  ASSERT_OK_AND_ASSIGN(QueueStats ones, once.Stats());
  EXPECT_EQ(ones.ready, 2);
  // No such topic.
  EXPECT_CODE(store->Publish("nope", {.payload = "x"}).status(),
              Code::kNotFound);
}

TEST_F(PostgresEngineTest, DroppedListenerConnectionIsReestablished) {
  auto a = OpenStore();
  auto b = OpenStore();
  ASSERT_TRUE(a && b);
  ASSERT_OK_AND_ASSIGN(WorkQueue qa, a->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(WorkQueue qb, b->Queue("jobs"));
  PGconn* c = Raw();
  const std::string listeners =
      "SELECT count(*) FROM pg_stat_activity WHERE datname = "
      "current_database() AND query = 'LISTEN sqlq_changes'";
  // Both stores listen; kill every listener.
  auto deadline = SteadyClock::now() + seconds(10);
  while (Query(c, listeners) != "2" && SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_EQ(Query(c, listeners), "2");
  const std::string old_pids =
      Query(c,
            "SELECT string_agg(pid::text, ',') FROM pg_stat_activity WHERE "
            "datname = current_database() AND query = 'LISTEN sqlq_changes'");
  Query(c,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid "
        "IN (" +
            old_pids + ")");
  // They come back on their own, as new backends.
  const std::string new_listeners =
      listeners + " AND pid NOT IN (" + old_pids + ")";
  deadline = SteadyClock::now() + seconds(10);
  while (Query(c, new_listeners) != "2" && SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_EQ(Query(c, new_listeners), "2") << "listeners did not reconnect";
  PQfinish(c);
  EXPECT_GE(NotifiedWakeMs(*a, qa, qb), 0)
      << "not woken by NOTIFY after reconnecting";
}

TEST_F(PostgresEngineTest, DropFromAnotherStoreEndsAWaitingClaim) {
  auto a = OpenStore();
  auto b = OpenStore();
  ASSERT_TRUE(a && b);
  ASSERT_OK_AND_ASSIGN(WorkQueue qa, a->CreateQueue("jobs", {}));
  a->TEST_set_poll_interval(std::chrono::hours(1));
  auto claim = std::async(std::launch::async,
                          [&] { return qa.Claim({.wait = seconds(60)}); });
  ASSERT_TRUE(WaitUntilWaiting(*a, 1));
  const auto t0 = SteadyClock::now();
  ASSERT_OK(b->DropQueue("jobs"));
  EXPECT_CODE(claim.get(), Code::kNotFound);
  // Unwoken, the claim would sleep out its 60 s wait (the poll is an hour).
  EXPECT_LT(MsSince(t0), 30'000) << "not woken by NOTIFY";
}

}  // namespace
}  // namespace sqlq::test
