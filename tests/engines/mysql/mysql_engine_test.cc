// MariaDB/MySQL engine specifics beyond the conformance suite: URLs and
// connection errors, the claim's plan and locking under many concurrent
// consumers, server sql_modes, caller transactions, the database clock,
// wake-ups across stores and concurrent migrations. Runs against the server
// named by SQLQ_TEST_MYSQL_URL (scripts/test.sh starts one).

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mysql.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/engine.h"
#include "core/receipt.h"
#include "engines/engines.h"
#include "engines/mysql/dialect.h"
#include "engines/mysql/schema.h"
#include "engines/shared/sql_groups.h"
#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "tests/conformance/engine_fixture.h"
#include "tests/support/listing_sql.h"

namespace sqlq::test {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::seconds;
using SteadyClock = std::chrono::steady_clock;

// A plain Connector/C connection, for poking at the database.
class Raw {
 public:
  explicit Raw(const std::string& url) {
    std::string error;
    m_ = MysqlConnect(url, &error);
    EXPECT_NE(m_, nullptr) << error;
  }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;
  ~Raw() {
    if (m_ != nullptr) mysql_close(m_);
  }
  MYSQL* get() const { return m_; }

  // The first column of the first row ("" when none); fails the test on an
  // error.
  std::string Query(const std::string& sql) {
    std::string out;
    if (m_ == nullptr) return out;
    if (mysql_query(m_, sql.c_str()) != 0) {
      ADD_FAILURE() << sql << ": " << mysql_error(m_);
      return out;
    }
    MYSQL_RES* res = mysql_store_result(m_);
    if (res != nullptr) {
      MYSQL_ROW row = mysql_fetch_row(res);
      if (row != nullptr && row[0] != nullptr) out = row[0];
      mysql_free_result(res);
    }
    return out;
  }

 private:
  MYSQL* m_ = nullptr;
};

// Versions 1 to `last` of the schema, as a build of that version left them.
void InstallUpTo(Raw& raw, int last) {
  raw.Query(
      "CREATE TABLE sqlq_schema (version INT NOT NULL PRIMARY KEY, "
      "applied_at DATETIME(6) NOT NULL) ENGINE=InnoDB");
  for (int v = 1; v <= last; ++v) {
    for (const char* stmt :
         engines::mysql::kMigrations[static_cast<std::size_t>(v - 1)]) {
      raw.Query(stmt);
    }
    raw.Query("INSERT INTO sqlq_schema VALUES (" + std::to_string(v) +
              ", NOW(6))");
  }
}

// "1" while sqlq_messages has the unique index on dedup keys of versions
// before 25, else "0".
std::string DedupIndexes(Raw& raw) {
  return raw.Query(
      "SELECT COUNT(DISTINCT INDEX_NAME) FROM information_schema.STATISTICS "
      "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'sqlq_messages' AND "
      "INDEX_NAME = 'sqlq_messages_dedup'");
}

class MysqlEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SQLQ_SKIP_UNLESS_AVAILABLE(MysqlFactory());
    db_ = std::make_unique<MysqlDatabase>();
  }

  std::unique_ptr<Store> OpenStore() { return OpenOrFail(db_->url()); }

  std::unique_ptr<MysqlDatabase> db_;
};

// --- URLs and connection errors ---------------------------------------------

TEST_F(MysqlEngineTest, WriteGroupsComeFromTheUrl) {
  ASSERT_OK_AND_ASSIGN(auto four, Store::Open(db_->url() + "?write_groups=4"));
  ASSERT_OK_AND_ASSIGN(WorkQueue q, four->CreateQueue("jobs", {}));
  EXPECT_OK(q.Send({.payload = "m"}));
}

// ack_flush (acks that do not wait for the disk) is refused, not ignored:
// the server decides every commit's flush alike.
TEST_F(MysqlEngineTest, AckFlushIsRefusedWithTheReason) {
  auto s = Store::Open(db_->url() + "?ack_flush=off");
  EXPECT_CODE(s, Code::kInvalidArgument);
  EXPECT_NE(s.status().message().find("innodb_flush_log_at_trx_commit"),
            std::string::npos)
      << s.status().ToString();
}

TEST_F(MysqlEngineTest, TlsParametersArePassedToTheConnector) {
  Raw raw(db_->url());
  if (raw.Query("SELECT @@have_ssl") == "YES") {
    GTEST_SKIP() << "the test server offers TLS";
  }
  // The server has no TLS: the connector itself must refuse ssl=require,
  // which shows that the parameter reached it.
  auto s = Store::Open(db_->url() + "?ssl=require");
  EXPECT_CODE(s, Code::kUnavailable);
  EXPECT_NE(s.status().message().find("SSL"), std::string::npos)
      << s.status().ToString();
  // Without it, the same server is fine.
  EXPECT_OK(Store::Open(db_->url() + "?ssl=disable&connect_timeout=5"));
}

// --- server sql_modes
// ----------------------------------------------------------

// Sets the server's global sql_mode for the connections opened while it
// lives; restores the old one after.
class GlobalSqlMode {
 public:
  GlobalSqlMode(const std::string& url, const std::string& mode) : raw_(url) {
    old_ = raw_.Query("SELECT @@GLOBAL.sql_mode");
    raw_.Query("SET GLOBAL sql_mode = '" + mode + "'");
  }
  ~GlobalSqlMode() { raw_.Query("SET GLOBAL sql_mode = '" + old_ + "'"); }

 private:
  Raw raw_;
  std::string old_;
};

// A send, claim, nack, claim and ack round with bytes that SQL text would
// mangle (quotes, backslashes, NUL), plus a dedup key and a dead letter.
void RoundTrip(Store& store, const std::string& queue) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store.CreateQueue(queue, {.max_attempts = 2}));
  const std::string payload = std::string("it's a \"quote\" \\ and \0 NUL", 26);
  ASSERT_OK_AND_ASSIGN(SendResult sent,
                       q.Send({.payload = payload, .dedup_key = "k'\\"}));
  ASSERT_OK_AND_ASSIGN(SendResult again,
                       q.Send({.payload = "other", .dedup_key = "k'\\"}));
  EXPECT_TRUE(again.duplicate);
  EXPECT_EQ(again.id, sent.id);
  ASSERT_OK_AND_ASSIGN(auto first, q.Claim({.worker = "w\"1"}));
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].payload, payload);
  ASSERT_OK(q.Nack(first[0].receipt,
                   {.delay = milliseconds(0), .error = "bad 'input' \\n"}));
  ASSERT_OK_AND_ASSIGN(auto second, q.Claim({}));
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].attempt, 2);
  ASSERT_OK(q.Ack(second[0].receipt));
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.sends, 1);
  EXPECT_EQ(st.acks, 1);
  EXPECT_EQ(st.ready + st.leased + st.delayed, 0);
}

TEST_F(MysqlEngineTest, WorksUnderEveryServerSqlMode) {
  const std::vector<std::string> modes = {
      "",  // non-strict: truncation would be silent
      "STRICT_ALL_TABLES,STRICT_TRANS_TABLES,ONLY_FULL_GROUP_BY",
      "ANSI_QUOTES",
      "NO_BACKSLASH_ESCAPES",
      "ANSI,NO_BACKSLASH_ESCAPES,PIPES_AS_CONCAT",
      "TRADITIONAL,SIMULTANEOUS_ASSIGNMENT,NO_AUTO_VALUE_ON_ZERO",
  };
  int n = 0;
  for (const std::string& mode : modes) {
    SCOPED_TRACE("sql_mode='" + mode + "'");
    GlobalSqlMode global(db_->url(), mode);
    // A fresh store: its connections start under the mode.
    auto store = OpenStore();
    ASSERT_TRUE(store);
    RoundTrip(*store, "jobs" + std::to_string(n++));
  }
}

// --- caller transactions -----------------------------------------------------

TEST_F(MysqlEngineTest, RolledBackJoinedTransactionLeavesNothing) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  Raw raw(db_->url());
  raw.Query("START TRANSACTION");
  {
    ASSERT_OK_AND_ASSIGN(Tx tx, store->JoinTx(raw.get()));
    ASSERT_OK(q.Send(tx, {.payload = "never"}));
  }
  raw.Query("ROLLBACK");
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.ready, 0);
  EXPECT_EQ(st.sends, 0);
}

TEST_F(MysqlEngineTest, OwnTransactionSendsAndAcksTogether) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK(q.Send({.payload = "in"}));
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({}));
  ASSERT_EQ(got.size(), 1u);
  {
    ASSERT_OK_AND_ASSIGN(Tx tx, store->BeginTx());
    ASSERT_OK(q.Ack(tx, got[0].receipt));
    ASSERT_OK(q.Send(tx, {.payload = "out"}));
    ASSERT_OK(tx.Commit());
  }
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.acks, 1);
  EXPECT_EQ(st.ready, 1);
}

// A caller's transaction at REPEATABLE READ (MariaDB's default, and the
// engine's own level on a server logging STATEMENT or MIXED) reads a
// snapshot taken at its first read. What sqlq looks up inside it to decide
// an outcome must be what is committed now, not what that snapshot shows.
TEST_F(MysqlEngineTest, RepeatableReadTxSeesADedupKeySentSinceItsSnapshot) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  Raw raw(db_->url());
  raw.Query("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ");
  raw.Query("START TRANSACTION WITH CONSISTENT SNAPSHOT");
  EXPECT_EQ(raw.Query("SELECT COUNT(*) FROM sqlq_messages"), "0");
  ASSERT_OK_AND_ASSIGN(SendResult first,
                       q.Send({.payload = "first", .dedup_key = "k"}));
  {
    ASSERT_OK_AND_ASSIGN(Tx tx, store->JoinTx(raw.get()));
    ASSERT_OK_AND_ASSIGN(SendResult again,
                         q.Send(tx, {.payload = "again", .dedup_key = "k"}));
    EXPECT_TRUE(again.duplicate);
    EXPECT_EQ(again.id, first.id);
  }
  raw.Query("COMMIT");
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.ready, 1);
}

TEST_F(MysqlEngineTest, RepeatableReadTxAckOfAMessageAckedSinceIsNotFound) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK(q.Send({.payload = "job"}));
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({}));
  ASSERT_EQ(got.size(), 1u);
  Raw raw(db_->url());
  raw.Query("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ");
  raw.Query("START TRANSACTION WITH CONSISTENT SNAPSHOT");
  EXPECT_EQ(raw.Query("SELECT COUNT(*) FROM sqlq_messages"), "1");
  ASSERT_OK(q.Ack(got[0].receipt));
  {
    ASSERT_OK_AND_ASSIGN(Tx tx, store->JoinTx(raw.get()));
    EXPECT_CODE(q.Ack(tx, got[0].receipt), Code::kNotFound);
  }
  raw.Query("ROLLBACK");
}

// A statement that returns rows and loses a deadlock after its first rows
// went out fails while its result is read. The transaction is run again on
// the same pooled connection; before the statement handle was discarded,
// Connector/C's next execute of it waited for rows that never came, and the
// retried transaction hung forever holding its locks (how four write groups
// hung the replication test). `statement` is a LIKE pattern of the ack's
// statement that locks the messages, run as `command` (Execute: a prepared
// statement; Query: a CALL of the claim's procedure).
void AckLosesADeadlockMidResult(Store& store, const std::string& url,
                                const QueueOptions& options,
                                const std::string& statement,
                                const std::string& command = "Execute") {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store.CreateQueue("jobs", options));
  for (int i = 0; i < 3; ++i) ASSERT_OK(q.Send({.payload = "job"}));
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 3}));
  ASSERT_EQ(got.size(), 3u);
  std::vector<std::string> receipts;
  std::vector<std::int64_t> ids;
  for (const auto& m : got) {
    receipts.push_back(m.receipt);
    ids.push_back(m.id);
  }
  std::sort(ids.begin(), ids.end());

  Raw holder(url);
  Raw watcher(url);
  holder.Query("CREATE TABLE ballast (id INT PRIMARY KEY) ENGINE=InnoDB");
  // The holder writes rows, so that InnoDB picks the ack's transaction (which
  // only locked rows) as the deadlock's victim.
  std::string rows = "INSERT INTO ballast VALUES (0)";
  for (int i = 1; i < 200; ++i) rows += ",(" + std::to_string(i) + ")";
  holder.Query("START TRANSACTION");
  holder.Query(rows);
  holder.Query("SELECT id FROM sqlq_messages WHERE id = " +
               std::to_string(ids.back()) + " FOR UPDATE");
  // The ack locks the messages in id order: the first ones, then waits for
  // the holder's. A statement still running after a second is waiting.
  auto acks =
      std::async(std::launch::async, [&] { return q.AckBatch(receipts); });
  const auto deadline = SteadyClock::now() + seconds(60);
  while (watcher.Query("SELECT COUNT(*) FROM information_schema.processlist "
                       "WHERE command = '" +
                       command + "' AND time >= 1 AND info LIKE '" + statement +
                       "'") != "1") {
    ASSERT_NE(acks.wait_for(milliseconds(20)), std::future_status::ready)
        << "the ack did not wait for the holder's row: "
        << StatusOf(acks.get()).ToString();
    ASSERT_LT(SteadyClock::now(), deadline) << "the ack never waited";
  }
  // Closes the cycle: InnoDB rolls the ack's transaction back at once.
  holder.Query("SELECT id FROM sqlq_messages WHERE id = " +
               std::to_string(ids.front()) + " FOR UPDATE");
  holder.Query("ROLLBACK");

  ASSERT_EQ(acks.wait_for(seconds(60)), std::future_status::ready)
      << "the ack's transaction, run again after the deadlock, hung";
  ASSERT_OK_AND_ASSIGN(std::vector<Status> acked, acks.get());
  for (const Status& s : acked) EXPECT_OK(s);
  // The pooled connections still work.
  ASSERT_OK(q.Send({.payload = "next"}));
  ASSERT_OK_AND_ASSIGN(auto next, q.Claim({}));
  ASSERT_EQ(next.size(), 1u);
  ASSERT_OK(q.AckBatch(std::vector<std::string>{next[0].receipt}).status());
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.acks, 4);
  EXPECT_EQ(st.ready + st.leased, 0);
}

// Archiving acks lock the messages with a SELECT ... FOR UPDATE first.
TEST_F(MysqlEngineTest, ArchivingAckThatLosesADeadlockMidResultIsRunAgain) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  AckLosesADeadlockMidResult(*store, db_->url(), {.archive = true},
                             "SELECT id, token, attempts%FOR UPDATE");
}

// Other acks the claim's procedure does not take (here: a schema without
// it) are one DELETE ... RETURNING on MariaDB.
TEST_F(MysqlEngineTest, AckThatLosesADeadlockMidResultIsRunAgain) {
  ASSERT_TRUE(OpenStore());  // makes the schema
  Raw(db_->url()).Query("DROP PROCEDURE sqlq__claims_committed");
  auto store = OpenStore();
  ASSERT_TRUE(store);
  AckLosesADeadlockMidResult(*store, db_->url(), {},
                             "DELETE FROM sqlq_messages%RETURNING%");
}

// And those it takes are its CALL (the DELETE inside it waits), run again
// as a whole.
TEST_F(MysqlEngineTest, AckByTheClaimProcedureThatLosesADeadlockIsRunAgain) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  AckLosesADeadlockMidResult(*store, db_->url(), {},
                             "DELETE m FROM JSON_TABLE%", "Query");
}

// --- sends -------------------------------------------------------------------

TEST_F(MysqlEngineTest, DuplicateDedupKeyAmidABatchStoresTheRestOnce) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(SendResult held,
                       q.Send({.payload = "held", .dedup_key = "k"}));
  // Plain messages before and after the duplicate go in multi-row inserts;
  // the duplicate's failed insert is rolled back as a statement and must
  // take nothing else with it, nor leave anything half-done.
  const std::vector<Message> batch = {{.payload = "a"},
                                      {.payload = "b"},
                                      {.payload = "x", .dedup_key = "k"},
                                      {.payload = "c"},
                                      {.payload = "y", .dedup_key = "j"},
                                      {.payload = "z", .dedup_key = "j"},
                                      {.payload = "d"}};
  ASSERT_OK_AND_ASSIGN(auto sent, q.SendBatch(batch));
  ASSERT_EQ(sent.size(), 7u);
  EXPECT_TRUE(sent[2].duplicate);
  EXPECT_EQ(sent[2].id, held.id);
  EXPECT_FALSE(sent[4].duplicate);
  EXPECT_TRUE(sent[5].duplicate);
  EXPECT_EQ(sent[5].id, sent[4].id);
  // Ids of stored messages follow the batch order.
  std::vector<std::int64_t> stored;
  for (int i : {0, 1, 3, 4, 6}) stored.push_back(sent[i].id);
  EXPECT_TRUE(std::is_sorted(stored.begin(), stored.end()));
  EXPECT_EQ(std::set<std::int64_t>(stored.begin(), stored.end()).size(), 5u);
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.ready, 6);
  EXPECT_EQ(st.sends, 6);
  // Everything claims back with the ids the send reported.
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 10}));
  std::set<std::int64_t> claimed;
  for (const auto& m : got) claimed.insert(m.id);
  std::set<std::int64_t> expected(stored.begin(), stored.end());
  expected.insert(held.id);
  EXPECT_EQ(claimed, expected);
}

TEST_F(MysqlEngineTest, LargeBatchesKeepTheirOrderAndIds) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  std::vector<Message> batch;
  for (int i = 0; i < 1000; ++i) {
    batch.push_back({.payload = std::to_string(i)});
  }
  ASSERT_OK_AND_ASSIGN(auto sent, q.SendBatch(batch));
  ASSERT_EQ(sent.size(), 1000u);
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 1000}));
  ASSERT_EQ(got.size(), 1000u);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(got[i].id, sent[i].id) << i;
    EXPECT_EQ(got[i].payload, std::to_string(i));
  }
}

// A send goes to the server as one packet of statements with its messages
// written as hex (MysqlEngine::SendAndCommit): every byte, header and group
// comes back as sent, and priorities, delays and run_at keep their order.
TEST_F(MysqlEngineTest, OnePacketSendsKeepEveryByteHeaderAndGroup) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("packets", {}));
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte += static_cast<char>(b);
  const Headers headers = {{"name", "Ærøskøbing \u2603 'quoted' \\"},
                           {"emoji", "\xf0\x9f\x93\xa6"}};
  std::vector<Message> batch = {
      {.payload = every_byte, .headers = headers, .group = "g'1"},
      {.payload = ""},
      {.payload = "first by priority", .priority = 5},
      {.payload = "later", .delay = seconds(30)},
      {.payload = "at a time",
       .run_at = std::chrono::time_point_cast<std::chrono::microseconds>(
           std::chrono::system_clock::now() + seconds(60))},
  };
  ASSERT_OK_AND_ASSIGN(auto sent, q.SendBatch(batch));
  ASSERT_EQ(sent.size(), batch.size());
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 10}));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].payload, "first by priority");
  EXPECT_EQ(got[0].id, sent[2].id);
  EXPECT_EQ(got[1].id, sent[0].id);
  EXPECT_EQ(got[1].payload, every_byte);
  EXPECT_EQ(got[1].headers, headers);
  EXPECT_EQ(got[1].group, "g'1");
  EXPECT_EQ(got[2].id, sent[1].id);
  EXPECT_EQ(got[2].payload, "");
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.delayed, 2);
  EXPECT_EQ(st.sends, 5);
}

// A send of one message is a CALL of the procedure the schema installs
// (schema.h, kSendCommitted); without it (a user without CREATE ROUTINE
// migrated the schema, or an administrator dropped it while the store was
// open) sends go on as one packet of statements.
TEST_F(MysqlEngineTest, SendsGoOnWhenTheSendProcedureIsMissing) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("routine", {}));
  Raw raw(db_->url());
  EXPECT_EQ(raw.Query("SELECT COUNT(*) FROM information_schema.ROUTINES "
                      "WHERE ROUTINE_SCHEMA = DATABASE() AND "
                      "ROUTINE_NAME = 'sqlq__send_committed'"),
            "1");
  ASSERT_OK(q.Send({.payload = "by the procedure",
                    .headers = {{"k", "v"}},
                    .group = "g"})
                .status());
  raw.Query("DROP PROCEDURE sqlq__send_committed");
  // The open store finds it gone at its next send; a store opened now
  // knows from the start.
  ASSERT_OK(q.Send({.payload = "after the drop"}).status());
  auto second = OpenStore();
  ASSERT_TRUE(second);
  ASSERT_OK_AND_ASSIGN(WorkQueue q2, second->Queue("routine"));
  ASSERT_OK(
      q2.Send({.payload = "from a store without it", .headers = {{"k", "w"}}})
          .status());
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 10}));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].payload, "by the procedure");
  EXPECT_EQ(got[0].headers, (Headers{{"k", "v"}}));
  EXPECT_EQ(got[0].group, "g");
  EXPECT_EQ(got[1].payload, "after the drop");
  EXPECT_EQ(got[2].payload, "from a store without it");
  EXPECT_EQ(got[2].headers, (Headers{{"k", "w"}}));
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.sends, 3);
}

// A claim of one message, an ack, and an ack with the next claim are one
// CALL each of the claim's procedure (schema.h, kClaimCommitted). What it
// does not take (a receipt that acks nothing, a lease that ran out, used-up
// attempts) it hands back undone, and the general way answers as it always
// has: the errors, the history and the dead letters are the same.
TEST_F(MysqlEngineTest, OneMessageClaimsAndAcksAreOneCallEach) {
  ASSERT_TRUE(OpenStore());  // makes the schema
  Raw raw(db_->url());
  // A procedure of that name that counts its calls, then runs the real one.
  std::string inner = engines::mysql::kClaimCommitted;
  const std::string name = "sqlq__claim_committed(";
  inner.replace(inner.find(name), name.size(), "sqlq_test_claim_inner(");
  raw.Query("CREATE TABLE test_calls (n BIGINT AUTO_INCREMENT PRIMARY KEY)");
  raw.Query(inner);
  raw.Query("DROP PROCEDURE sqlq__claim_committed");
  raw.Query(
      "CREATE PROCEDURE sqlq__claim_committed(IN a BIGINT, IN b INT, IN c "
      "INT, IN d BIGINT, IN e BIGINT, IN f VARBINARY(255), IN g INT, IN h "
      "BIGINT, IN i BIGINT, IN j INT) MODIFIES SQL DATA BEGIN INSERT INTO "
      "test_calls () VALUES (); CALL sqlq_test_claim_inner(a, b, c, d, e, f, "
      "g, h, i, j); END");
  auto calls = [&] {
    return std::stoi(raw.Query("SELECT COUNT(*) FROM test_calls"));
  };
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store->CreateQueue("calls", {.max_attempts = 2}));
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte += static_cast<char>(b);
  const Headers headers = {{"name", "Ærøskøbing 'quoted' \\"}};
  ASSERT_OK_AND_ASSIGN(SendResult a, q.Send({.payload = every_byte,
                                             .priority = 5,
                                             .headers = headers,
                                             .group = "g'1"}));
  ASSERT_OK_AND_ASSIGN(SendResult b, q.Send({.payload = "b"}));
  ASSERT_OK_AND_ASSIGN(SendResult c, q.Send({.payload = "c"}));
  const int before = calls();

  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.worker = "w'1"}));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, a.id);
  EXPECT_EQ(got[0].payload, every_byte);
  EXPECT_EQ(got[0].headers, headers);
  EXPECT_EQ(got[0].group, "g'1");
  EXPECT_EQ(got[0].priority, 5);
  EXPECT_EQ(got[0].attempt, 1);
  EXPECT_EQ(calls(), before + 1);
  ASSERT_OK_AND_ASSIGN(MessageInfo leased, q.Get(a.id));
  EXPECT_EQ(leased.worker, "w'1");

  ASSERT_OK_AND_ASSIGN(auto next, q.AckAndClaim(got[0].receipt));
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].id, b.id);
  EXPECT_EQ(calls(), before + 2);
  ASSERT_OK(q.Ack(next[0].receipt));
  EXPECT_EQ(calls(), before + 3);
  // Acked already: the procedure hands it back, the general way says why.
  EXPECT_CODE(q.Ack(next[0].receipt), Code::kNotFound);
  EXPECT_EQ(calls(), before + 4);
  EXPECT_CODE(q.AckAndClaim(next[0].receipt), Code::kNotFound);
  EXPECT_EQ(calls(), before + 5);

  // A lease that runs out: the next claim goes the general way, which
  // writes the expiry into the history; the old receipt is stale.
  ASSERT_OK_AND_ASSIGN(auto first, q.Claim({.lease = milliseconds(1)}));
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].id, c.id);
  auto claim_again = [&](std::chrono::milliseconds lease) {
    const auto deadline = SteadyClock::now() + seconds(10);
    std::vector<ClaimedMessage> again;
    while (again.empty() && SteadyClock::now() < deadline) {
      auto r = q.Claim({.lease = lease});
      if (!r.ok()) break;
      again = std::move(*r);
    }
    return again;
  };
  auto second = claim_again(milliseconds(1));
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].id, c.id);
  EXPECT_EQ(second[0].attempt, 2);
  ASSERT_OK_AND_ASSIGN(MessageInfo info, q.Get(c.id));
  ASSERT_EQ(info.errors.size(), 1u);
  EXPECT_EQ(info.errors[0].error, "lease expired");
  EXPECT_CODE(q.Ack(first[0].receipt), Code::kFailedPrecondition);
  // Its attempts used up once this lease runs out too: buried.
  const auto deadline = SteadyClock::now() + seconds(10);
  std::vector<DeadLetter> dead;
  while (dead.empty() && SteadyClock::now() < deadline) {
    ASSERT_OK_AND_ASSIGN(auto none, q.Claim());
    EXPECT_TRUE(none.empty());
    ASSERT_OK_AND_ASSIGN(dead, q.ListDead());
  }
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].id, c.id);

  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.sends, 3);
  EXPECT_EQ(st.acks, 2);
  EXPECT_EQ(st.claims, 4);
  EXPECT_EQ(st.dead_lettered, 1);
  EXPECT_EQ(st.ready + st.leased, 0);
  ASSERT_OK(store->DropQueue("calls"));
  EXPECT_CODE(q.Claim(), Code::kNotFound);
}

// A group's acks and claim are one CALL of the group's procedure (schema.h,
// kClaimsCommitted; Engine::ClaimAndCommit), and so are sends with them
// (Engine::SendsAndClaimAndCommit): the claim takes the messages in claim
// order, those the sends just stored too, with every byte, header and
// group; the counters follow. A receipt that acks nothing hands the whole
// back undone; a send to a dropped queue stores nothing and leaves the
// group to the general way; a claim of a dropped queue fails alone beside
// sends that are stored; acks that would release dependents leave the
// claim to the caller once the sends are stored.
TEST_F(MysqlEngineTest, AGroupsAcksClaimAndSendsAreOneCall) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(WorkQueue other, store->CreateQueue("other", {}));
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte += static_cast<char>(b);
  const Headers headers = {{"name", "Ærøskøbing 'quoted' \\"}};
  ASSERT_OK_AND_ASSIGN(SendResult low, q.Send({.payload = "low"}));
  ASSERT_OK_AND_ASSIGN(SendResult high, q.Send({.payload = every_byte,
                                                .priority = 5,
                                                .headers = headers,
                                                .group = "g'1"}));
  ASSERT_OK_AND_ASSIGN(SendResult later, q.Send({.payload = "later"}));
  Raw raw(db_->url());
  const std::int64_t queue_id =
      std::stoll(raw.Query("SELECT id FROM sqlq_queues WHERE name = 'jobs'"));
  const std::int64_t other_id =
      std::stoll(raw.Query("SELECT id FROM sqlq_queues WHERE name = 'other'"));
  ASSERT_OK_AND_ASSIGN(auto engine,
                       engines::OpenEngine(db_->url(), StoreOptions{}));
  const core::ClaimParams params{.queue_id = queue_id,
                                 .max = 2,
                                 .lease = core::Micros(30'000'000),
                                 // Stored as a negative BIGINT: its
                                 // receipts go through the procedure's
                                 // JSON as integers, every bit kept.
                                 .token = 0xfedcba9876543211,
                                 .max_attempts = 5,
                                 .worker = "w'1"};
  ASSERT_OK_AND_ASSIGN(
      auto first, engine->ClaimAndCommit(params, {.queue_id = queue_id}, {}));
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->outcome.messages.size(), 2u);
  const ClaimedMessage& a = first->outcome.messages[0];
  EXPECT_EQ(a.id, high.id);
  EXPECT_EQ(a.payload, every_byte);
  EXPECT_EQ(a.headers, headers);
  EXPECT_EQ(a.group, "g'1");
  EXPECT_EQ(a.priority, 5);
  EXPECT_EQ(a.attempt, 1);
  EXPECT_EQ(first->outcome.messages[1].id, low.id);
  ASSERT_OK_AND_ASSIGN(MessageInfo leased, q.Get(low.id));
  EXPECT_EQ(leased.worker, "w'1");
  EXPECT_EQ(leased.attempts, 1);
  const std::vector<core::Receipt> both = {
      {.id = high.id, .attempt = 1, .token = params.token},
      {.id = low.id, .attempt = 1, .token = params.token}};

  // One stale receipt among good ones: nothing done, for the general way.
  std::vector<core::Receipt> stale = both;
  stale[1].token ^= 1;
  ASSERT_OK_AND_ASSIGN(
      auto undone,
      engine->ClaimAndCommit(params, {.queue_id = queue_id, .receipts = stale},
                             std::vector<int>{1, 1}));
  EXPECT_FALSE(undone.has_value());
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.leased, 2);
  EXPECT_EQ(st.ready, 1);
  EXPECT_EQ(st.acks, 0);

  // Both acked, and a claim after them; three sends first, which the claim
  // may take, after the message that waited.
  core::Engine::SendsFirst sends{.to = {.queue_id = queue_id}};
  const std::vector<Message> three = {{.payload = "a"},
                                      {.payload = "b", .headers = {{"k", "v"}}},
                                      {.payload = "c"}};
  sends.to.messages = three;
  core::ClaimParams four = params;
  four.max = 4;
  ASSERT_OK_AND_ASSIGN(
      auto done, engine->SendsAndClaimAndCommit(
                     sends, four, {.queue_id = queue_id, .receipts = both},
                     std::vector<int>{1, 1}));
  ASSERT_TRUE(done.has_value());
  ASSERT_TRUE(sends.sent.has_value());
  ASSERT_OK(sends.sent->status());
  ASSERT_EQ((*sends.sent)->size(), 3u);
  ASSERT_EQ(done->acks.size(), 2u);
  EXPECT_OK(done->acks[0]);
  EXPECT_OK(done->acks[1]);
  ASSERT_EQ(done->outcome.messages.size(), 4u);
  EXPECT_EQ(done->outcome.messages[0].id, later.id);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(done->outcome.messages[i + 1].id, (**sends.sent)[i].id);
    EXPECT_EQ(done->outcome.messages[i + 1].payload, three[i].payload);
  }
  EXPECT_EQ(done->outcome.messages[2].headers, (Headers{{"k", "v"}}));
  ASSERT_OK_AND_ASSIGN(st, q.Stats());
  EXPECT_EQ(st.ready, 0);
  EXPECT_EQ(st.leased, 4);
  EXPECT_EQ(st.sends, 6);
  EXPECT_EQ(st.claims, 6);
  EXPECT_EQ(st.acks, 2);

  // A claim of a dropped queue fails alone; the sends beside it are
  // stored.
  ASSERT_OK(store->DropQueue("other"));
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
  ASSERT_OK_AND_ASSIGN(st, q.Stats());
  EXPECT_EQ(st.sends, 9);
  EXPECT_EQ(st.ready, 3);

  // Sends to the dropped queue: nothing stored, nothing done.
  core::Engine::SendsFirst lost{.to = {.queue_id = other_id}};
  lost.to.messages = three;
  ASSERT_OK_AND_ASSIGN(
      auto left,
      engine->SendsAndClaimAndCommit(lost, params, {.queue_id = queue_id}, {}));
  EXPECT_FALSE(left.has_value());
  EXPECT_FALSE(lost.sent.has_value());
  ASSERT_OK_AND_ASSIGN(st, q.Stats());
  EXPECT_EQ(st.ready, 3);
  EXPECT_EQ(st.claims, 6);

  // Acks that would release dependents: the sends are stored, once; the
  // acks and the claim are left to the caller.
  raw.Query("UPDATE sqlq_queues SET dependents = 1 WHERE name = 'jobs'");
  const std::vector<core::Receipt> ack = {
      {.id = later.id, .attempt = 1, .token = params.token}};
  core::Engine::SendsFirst before{.to = {.queue_id = queue_id}};
  before.to.messages = three;
  ASSERT_OK_AND_ASSIGN(
      auto unclaimed,
      engine->SendsAndClaimAndCommit(before, params,
                                     {.queue_id = queue_id, .receipts = ack},
                                     std::vector<int>{1}));
  EXPECT_FALSE(unclaimed.has_value());
  ASSERT_TRUE(before.sent.has_value());
  ASSERT_OK(before.sent->status());
  EXPECT_EQ((*before.sent)->size(), 3u);
  ASSERT_OK_AND_ASSIGN(st, q.Stats());
  EXPECT_EQ(st.sends, 12);
  EXPECT_EQ(st.ready, 6);
  EXPECT_EQ(st.leased, 4);
  EXPECT_EQ(st.acks, 2);
}

// And without them (a user without CREATE ROUTINE migrated the schema, or
// an administrator dropped them while the store was open), claims and acks
// go on the general way.
TEST_F(MysqlEngineTest, ClaimsGoOnWhenTheClaimProcedureIsMissing) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("routine", {}));
  for (const char* p : {"one", "two", "three"}) {
    ASSERT_OK(q.Send({.payload = p}).status());
  }
  ASSERT_OK_AND_ASSIGN(auto one, q.Claim());
  ASSERT_EQ(one.size(), 1u);
  Raw raw(db_->url());
  raw.Query("DROP PROCEDURE sqlq__claim_committed");
  raw.Query("DROP PROCEDURE sqlq__claims_committed");
  ASSERT_OK_AND_ASSIGN(auto two, q.AckAndClaim(one[0].receipt));
  ASSERT_EQ(two.size(), 1u);
  EXPECT_EQ(two[0].payload, "two");
  auto second = OpenStore();
  ASSERT_TRUE(second);
  ASSERT_OK_AND_ASSIGN(WorkQueue q2, second->Queue("routine"));
  ASSERT_OK_AND_ASSIGN(auto three, q2.AckAndClaim(two[0].receipt));
  ASSERT_EQ(three.size(), 1u);
  EXPECT_EQ(three[0].payload, "three");
  ASSERT_OK(q2.Ack(three[0].receipt));
  // A claim of more, from the store that still thought it had the group's
  // procedure.
  ASSERT_OK(q.Send({.payload = "four"}).status());
  ASSERT_OK(q.Send({.payload = "five"}).status());
  ASSERT_OK_AND_ASSIGN(auto more, q.Claim({.max = 2}));
  ASSERT_EQ(more.size(), 2u);
  EXPECT_EQ(more[0].payload, "four");
  EXPECT_EQ(more[1].payload, "five");
  ASSERT_OK(
      q.AckBatch(std::vector<std::string>{more[0].receipt, more[1].receipt})
          .status());
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.acks, 5);
  EXPECT_EQ(st.ready + st.leased, 0);
}

// The send's one packet carries its BEGIN: a pooled connection the server
// closed while it sat idle must be found out before the packet goes, not
// answered as a send whose outcome is unknown.
TEST_F(MysqlEngineTest,
       ASendAfterTheServerKilledThePooledConnectionsGoesThrough) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("killed", {}));
  ASSERT_OK(q.Send({.payload = "before"}).status());
  Raw raw(db_->url());
  const std::string others =
      "SELECT GROUP_CONCAT(id) FROM information_schema.PROCESSLIST WHERE "
      "db = DATABASE() AND id <> CONNECTION_ID()";
  const std::string ids = raw.Query(others);
  ASSERT_FALSE(ids.empty());
  std::size_t at = 0;
  while (at < ids.size()) {
    std::size_t end = ids.find(',', at);
    if (end == std::string::npos) end = ids.size();
    raw.Query("KILL CONNECTION " + ids.substr(at, end - at));
    at = end + 1;
  }
  // The server has closed them once they leave its process list.
  const auto deadline = SteadyClock::now() + seconds(10);
  while (!raw.Query(others).empty() && SteadyClock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  ASSERT_TRUE(raw.Query(others).empty());
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK(q.Send({.payload = "after"}).status());
  }
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.ready, 4);
}

// --- claims ------------------------------------------------------------------

// The claim's candidate read, as in MysqlEngine::Claim.
constexpr const char* kCandidateSql =
    "SELECT id, npriority, ready_us "
    "FROM sqlq_messages FORCE INDEX (sqlq_messages_claim) "
    "WHERE queue_id = {q} AND ready_us <= {now} "
    "ORDER BY npriority, ready_us, id LIMIT 10";

TEST_F(MysqlEngineTest, ClaimReadsTheIndexInOrderWithoutFilesort) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(WorkQueue other, store->CreateQueue("other", {}));
  std::vector<Message> batch;
  for (int i = 0; i < 500; ++i) {
    batch.push_back({.payload = "m", .priority = i % 5});
  }
  // Ids 1-2,000, the keyed one 2,001 (inside the page's window), then the
  // other queue's.
  ASSERT_OK(q.SendBatch(batch));
  ASSERT_OK(q.Send({.payload = "keyed", .dedup_key = "k"}));
  ASSERT_OK(other.SendBatch(batch));
  ASSERT_OK(other.Send({.payload = "keyed", .dedup_key = "k"}));
  Raw raw(db_->url());
  raw.Query("ANALYZE TABLE sqlq_messages");
  const std::string queue_id =
      raw.Query("SELECT id FROM sqlq_queues WHERE name = 'jobs'");
  std::string sql = kCandidateSql;
  sql.replace(sql.find("{q}"), 3, queue_id);
  sql.replace(sql.find("{now}"), 5, "9223372036854775807");
  const std::string plan = raw.Query("EXPLAIN FORMAT=JSON " + sql);
  RecordProperty("plan", plan);
  EXPECT_NE(plan.find("\"key\": \"sqlq_messages_claim\""), std::string::npos)
      << plan;
  EXPECT_EQ(plan.find("filesort"), std::string::npos) << plan;
  // And what it returns is the claim order.
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 5}));
  ASSERT_EQ(got.size(), 5u);
  for (const auto& m : got) EXPECT_EQ(m.priority, 4);
}

// The group index costs every message a write (MariaDB has no partial
// indexes): it exists only once a queue has groups, and a grouped queue's
// claims have it from the start.
TEST_F(MysqlEngineTest, GroupIndexIsMadeWithTheFirstGroupedQueue) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  Raw raw(db_->url());
  auto has_index = [&] {
    return raw.Query(
               "SELECT COUNT(DISTINCT index_name) FROM "
               "information_schema.STATISTICS WHERE "
               "table_schema = DATABASE() AND table_name = 'sqlq_messages' "
               "AND index_name = 'sqlq_messages_group'") != "0";
  };
  EXPECT_FALSE(has_index()) << "a new database";
  ASSERT_OK_AND_ASSIGN(WorkQueue plain, store->CreateQueue("plain", {}));
  ASSERT_OK(plain.Send({.payload = "p", .group = "kept"}));
  EXPECT_FALSE(has_index()) << "a plain queue";
  ASSERT_OK_AND_ASSIGN(
      WorkQueue fair, store->CreateQueue("fair", {.groups = GroupMode::kFair}));
  EXPECT_TRUE(has_index());
  // Another grouped queue finds it there.
  ASSERT_OK(
      store->CreateQueue("ordered", {.groups = GroupMode::kOrdered}).status());
  EXPECT_TRUE(has_index());
}

// Version 8 drops the index of version 5 unless a queue has groups.
TEST_F(MysqlEngineTest, UpgradeKeepsTheGroupIndexOnlyForGroupedQueues) {
  for (bool grouped : {false, true}) {
    SCOPED_TRACE(grouped ? "with a grouped queue" : "without");
    auto db = std::make_unique<MysqlDatabase>();
    Raw raw(db->url());
    InstallUpTo(raw, 7);
    raw.Query(fmt::format(
        "INSERT INTO sqlq_queues (name, max_attempts, lease_us, "
        "backoff_base_us, backoff_max_us, archive, retention_us, "
        "max_payload, created_us, group_mode) VALUES ('q', 3, 30000000, "
        "1000000, 600000000, FALSE, 604800000000, 1048576, 0, {})",
        grouped ? 1 : 0));
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(db->url()));
    EXPECT_EQ(raw.Query("SELECT COUNT(DISTINCT index_name) FROM "
                        "information_schema.STATISTICS "
                        "WHERE table_schema = DATABASE() AND table_name = "
                        "'sqlq_messages' AND index_name = "
                        "'sqlq_messages_group'"),
              grouped ? "1" : "0");
  }
}

// --- dedup keys (schema.h, version 25) ---------------------------------------

// The keys live in sqlq_dedup_keys, one row for each message that has one,
// and go with their message whatever deletes it (the trigger); no index on
// sqlq_messages holds them.
TEST_F(MysqlEngineTest, DedupKeysLiveInATableOfTheirOwnAndGoWithTheirMessage) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  Raw raw(db_->url());
  EXPECT_EQ(DedupIndexes(raw), "0");
  auto keys = [&] {
    return raw.Query(
        "SELECT COALESCE(GROUP_CONCAT(CONCAT(dedup, '=', message_id) ORDER "
        "BY dedup), '') FROM sqlq_dedup_keys");
  };
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(auto sent, q.SendBatch(std::vector<Message>{
                                      {.payload = "a", .dedup_key = "ka"},
                                      {.payload = "plain"},
                                      {.payload = "b", .dedup_key = "kb"}}));
  EXPECT_EQ(keys(), fmt::format("ka={},kb={}", sent[0].id, sent[2].id));
  ASSERT_OK_AND_ASSIGN(SendResult again,
                       q.Send({.payload = "a2", .dedup_key = "ka"}));
  EXPECT_TRUE(again.duplicate);
  EXPECT_EQ(again.id, sent[0].id);
  // An ack deletes the key with the message: the key is free again.
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 1}));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].payload, "a");
  ASSERT_OK(q.Ack(got[0].receipt));
  EXPECT_EQ(keys(), fmt::format("kb={}", sent[2].id));
  ASSERT_OK_AND_ASSIGN(SendResult fresh,
                       q.Send({.payload = "a3", .dedup_key = "ka"}));
  EXPECT_FALSE(fresh.duplicate);
  EXPECT_EQ(keys(), fmt::format("ka={},kb={}", fresh.id, sent[2].id));
  // A listing by key finds its message through the table.
  ASSERT_OK_AND_ASSIGN(MessagePage page,
                       q.ListMessages({.filter = {.dedup_key = "kb"}}));
  ASSERT_EQ(page.messages.size(), 1u);
  EXPECT_EQ(page.messages[0].id, sent[2].id);
  ASSERT_OK_AND_ASSIGN(MessageCount count,
                       q.CountMessages({.dedup_key = "kb"}));
  EXPECT_EQ(count.count, 1);
  // A change by key (its statement cannot read the table the trigger
  // writes: it reads the key off the rows).
  ASSERT_OK_AND_ASSIGN(std::int64_t deleted,
                       q.Delete({.filter = {.dedup_key = "kb"}}));
  EXPECT_EQ(deleted, 1);
  EXPECT_EQ(keys(), fmt::format("ka={}", fresh.id));
  // A purge, and a drop of the queue, take the keys too.
  ASSERT_OK(q.Purge().status());
  EXPECT_EQ(keys(), "");
  ASSERT_OK(q.Send({.payload = "c", .dedup_key = "kc"}).status());
  ASSERT_OK(store->DropQueue("jobs"));
  EXPECT_EQ(keys(), "");
}

// A key whose message is gone without the trigger seeing it (a session's
// temporary table of the same name took the trigger's delete) is taken
// over by the next send of it, not answered as a duplicate.
TEST_F(MysqlEngineTest, ASendTakesOverAKeyWhoseMessageIsGone) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(SendResult first,
                       q.Send({.payload = "a", .dedup_key = "k"}));
  Raw raw(db_->url());
  raw.Query(
      "CREATE TEMPORARY TABLE sqlq_dedup_keys (queue_id BIGINT, dedup "
      "VARBINARY(255), message_id BIGINT)");
  raw.Query("DELETE FROM sqlq_messages WHERE id = " + std::to_string(first.id));
  raw.Query("DROP TEMPORARY TABLE sqlq_dedup_keys");
  EXPECT_EQ(raw.Query("SELECT message_id FROM sqlq_dedup_keys"),
            std::to_string(first.id));
  ASSERT_OK_AND_ASSIGN(SendResult second,
                       q.Send({.payload = "b", .dedup_key = "k"}));
  EXPECT_FALSE(second.duplicate);
  EXPECT_NE(second.id, first.id);
  EXPECT_EQ(raw.Query("SELECT message_id FROM sqlq_dedup_keys"),
            std::to_string(second.id));
  ASSERT_OK_AND_ASSIGN(SendResult third,
                       q.Send({.payload = "c", .dedup_key = "k"}));
  EXPECT_TRUE(third.duplicate);
  EXPECT_EQ(third.id, second.id);
}

// A keyed send on a queue with a dedup window goes the general way, one
// packet for the message and its key (SendKeyed): its delay and clock as
// any send's.
TEST_F(MysqlEngineTest, AKeyedSendOnAQueueWithAWindowKeepsItsDelay) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store->CreateQueue("jobs", {.unique_for = hours(1)}));
  ASSERT_OK(q.Send({.payload = "later", .delay = hours(1), .dedup_key = "k"}));
  ASSERT_OK(q.Send({.payload = "now", .dedup_key = "j"}));
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.delayed, 1);
  EXPECT_EQ(st.ready, 1);
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 2}));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "now");
  ASSERT_OK_AND_ASSIGN(SendResult again,
                       q.Send({.payload = "again", .dedup_key = "k"}));
  EXPECT_TRUE(again.duplicate);
}

// A keyed message too large for one packet of literals goes statement by
// statement, with the same outcomes.
TEST_F(MysqlEngineTest, AKeyedSendTooLargeForOnePacketTakesItsKeyAlike) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  const std::string big(300 << 10, 'b');
  ASSERT_OK_AND_ASSIGN(SendResult first,
                       q.Send({.payload = big, .dedup_key = "k"}));
  EXPECT_FALSE(first.duplicate);
  ASSERT_OK_AND_ASSIGN(SendResult again,
                       q.Send({.payload = big, .dedup_key = "k"}));
  EXPECT_TRUE(again.duplicate);
  EXPECT_EQ(again.id, first.id);
  Raw raw(db_->url());
  EXPECT_EQ(raw.Query("SELECT message_id FROM sqlq_dedup_keys"),
            std::to_string(first.id));
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({}));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, big);
  ASSERT_OK(q.Ack(got[0].receipt));
  ASSERT_OK_AND_ASSIGN(SendResult fresh,
                       q.Send({.payload = big, .dedup_key = "k"}));
  EXPECT_FALSE(fresh.duplicate);
  EXPECT_EQ(raw.Query("SELECT message_id FROM sqlq_dedup_keys"),
            std::to_string(fresh.id));
}

// Senders in several processes racing with the same keys, while a consumer
// acks what they stored: a key is never held by two messages at once.
TEST_F(MysqlEngineTest, RacingSendsOfOneKeyStoreOneMessageAtATime) {
  ASSERT_TRUE(OpenStore());  // makes the schema
  std::vector<std::unique_ptr<Store>> stores;
  for (int i = 0; i < 4; ++i) stores.push_back(OpenStore());
  ASSERT_OK_AND_ASSIGN(WorkQueue q, stores[0]->CreateQueue("jobs", {}));
  std::atomic<bool> done{false};
  std::atomic<int> stored{0}, acked{0};
  std::vector<std::future<Status>> senders;
  for (int t = 0; t < 3; ++t) {
    senders.push_back(std::async(std::launch::async, [&, t]() -> Status {
      auto mine = stores[t]->Queue("jobs");
      if (!mine.ok()) return mine.status();
      for (int i = 0; i < 200; ++i) {
        auto r = mine->Send({.payload = fmt::format("{}-{}", t, i),
                             .dedup_key = fmt::format("k{}", i % 5)});
        if (!r.ok()) return r.status();
        if (!r->duplicate) ++stored;
      }
      return Status::Ok();
    }));
  }
  auto consumer = std::async(std::launch::async, [&]() -> Status {
    auto mine = stores[3]->Queue("jobs");
    if (!mine.ok()) return mine.status();
    while (!done) {
      auto got = mine->Claim({.max = 3});
      if (!got.ok()) return got.status();
      for (const auto& m : *got) {
        Status s = mine->Ack(m.receipt);
        if (!s.ok()) return s;
        ++acked;
      }
    }
    return Status::Ok();
  });
  Raw raw(db_->url());
  const std::string twice =
      "SELECT COUNT(*) FROM (SELECT dedup FROM sqlq_messages WHERE dedup IS "
      "NOT NULL GROUP BY queue_id, dedup HAVING COUNT(*) > 1) AS d";
  int samples = 0;
  for (auto& f : senders) {
    while (f.wait_for(milliseconds(2)) != std::future_status::ready) {
      EXPECT_EQ(raw.Query(twice), "0");
      ++samples;
    }
  }
  done = true;
  for (auto& f : senders) EXPECT_OK(f.get());
  EXPECT_OK(consumer.get());
  EXPECT_GT(samples, 0);
  EXPECT_EQ(raw.Query(twice), "0");
  // Every message stored is either acked or still there with its key.
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.sends, stored.load());
  EXPECT_EQ(st.acks, acked.load());
  EXPECT_EQ(raw.Query("SELECT COUNT(*) FROM sqlq_messages"),
            std::to_string(stored - acked));
  EXPECT_EQ(raw.Query("SELECT COUNT(*) FROM sqlq_dedup_keys"),
            std::to_string(stored - acked));
  EXPECT_GT(acked.load(), 0);
}

// Senders of a key that a message in the queue holds, at once, each in a
// transaction of its own caller's (JoinTx: a deadlock would reach the
// caller, where the store's own transactions run again): each is a
// duplicate, and none deadlocks another (each holds a share lock on the
// key's row while it deletes its own message again).
TEST_F(MysqlEngineTest, ConcurrentDuplicatesOfOneKeyDoNotDeadlock) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(SendResult held,
                       q.Send({.payload = "held", .dedup_key = "k"}));
  std::vector<std::future<Status>> senders;
  for (int t = 0; t < 4; ++t) {
    senders.push_back(std::async(std::launch::async, [&]() -> Status {
      Raw raw(db_->url());
      for (int i = 0; i < 50; ++i) {
        raw.Query("START TRANSACTION");
        auto tx = store->JoinTx(raw.get());
        if (!tx.ok()) return tx.status();
        auto r = q.Send(*tx, {.payload = "again", .dedup_key = "k"});
        if (!r.ok()) return r.status();
        if (!r->duplicate || r->id != held.id) {
          return Status::Internal(fmt::format("stored {}", r->id));
        }
        raw.Query("COMMIT");
      }
      return Status::Ok();
    }));
  }
  for (auto& f : senders) EXPECT_OK(f.get());
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.sends, 1);
  EXPECT_EQ(st.ready, 1);
}

// Version 25 moves the keys of the messages already stored into the table
// before it drops the index: they stay duplicates.
TEST_F(MysqlEngineTest, UpgradeKeepsTheKeysOfStoredMessages) {
  auto db = std::make_unique<MysqlDatabase>();
  Raw raw(db->url());
  InstallUpTo(raw, 24);
  raw.Query(
      "INSERT INTO sqlq_queues (name, max_attempts, lease_us, "
      "backoff_base_us, backoff_max_us, archive, retention_us, max_payload, "
      "created_us) VALUES ('q', 3, 30000000, 1000000, 600000000, FALSE, "
      "604800000000, 1048576, 0)");
  raw.Query(
      "INSERT INTO sqlq_messages (queue_id, priority, npriority, ready_us, "
      "enqueued_us, dedup, payload) SELECT id, 0, 0, 0, 0, 'k', 'old' FROM "
      "sqlq_queues");
  const std::string old_id = raw.Query("SELECT id FROM sqlq_messages");
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(db->url()));
  EXPECT_EQ(raw.Query("SELECT message_id FROM sqlq_dedup_keys WHERE dedup = "
                      "'k'"),
            old_id);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->Queue("q"));
  ASSERT_OK_AND_ASSIGN(SendResult again,
                       q.Send({.payload = "new", .dedup_key = "k"}));
  EXPECT_TRUE(again.duplicate);
  EXPECT_EQ(std::to_string(again.id), old_id);
}

// A user that may not create the trigger (no TRIGGER privilege) migrates
// without version 25's change: the index stays and decides as before.
TEST_F(MysqlEngineTest, WithoutTheTriggerPrivilegeTheIndexStays) {
  const std::string user = "sqlq_notrig_" + std::to_string(getpid());
  const std::string grant = fmt::format(
      "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, INDEX, ALTER, "
      "CREATE TEMPORARY TABLES, LOCK TABLES, EXECUTE, CREATE ROUTINE, ALTER "
      "ROUTINE, CREATE VIEW, SHOW VIEW, REFERENCES ON `{}`.* TO '{}'@'%'",
      db_->name(), user);
  ASSERT_EQ(MysqlAdmin("CREATE USER IF NOT EXISTS '" + user +
                       "'@'%' IDENTIFIED BY 'pw'"),
            "");
  ASSERT_EQ(MysqlAdmin(grant), "");
  struct DropUser {
    std::string user;
    ~DropUser() { (void)MysqlAdmin("DROP USER IF EXISTS '" + user + "'@'%'"); }
  } drop{user};
  // The test server's URL with this user's name and password.
  std::string url = db_->raw_url();
  const auto at = url.find('@');
  ASSERT_NE(at, std::string::npos);
  url = "mysql://" + user + ":pw" + url.substr(at);
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(url));
  Raw raw(db_->url());
  EXPECT_EQ(DedupIndexes(raw), "1");
  EXPECT_EQ(raw.Query("SELECT COUNT(*) FROM information_schema.TRIGGERS "
                      "WHERE TRIGGER_SCHEMA = DATABASE()"),
            "0");
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(SendResult first,
                       q.Send({.payload = "a", .dedup_key = "k"}));
  ASSERT_OK_AND_ASSIGN(SendResult again,
                       q.Send({.payload = "b", .dedup_key = "k"}));
  EXPECT_TRUE(again.duplicate);
  EXPECT_EQ(again.id, first.id);
  ASSERT_OK_AND_ASSIGN(MessagePage page,
                       q.ListMessages({.filter = {.dedup_key = "k"}}));
  ASSERT_EQ(page.messages.size(), 1u);
  EXPECT_EQ(page.messages[0].id, first.id);
}

// The statements of a grouped claim (engines/shared/sql_groups.h) are
// ranges of the group index: never the whole table, never a filesort.
TEST_F(MysqlEngineTest, GroupClaimStatementsSeekTheGroupIndex) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue plain, store->CreateQueue("plain", {}));
  ASSERT_OK_AND_ASSIGN(
      WorkQueue grouped,
      store->CreateQueue("grouped", {.groups = GroupMode::kOrdered}));
  ASSERT_OK(
      plain.SendBatch(std::vector<Message>(2000, Message{.payload = "m"})));
  std::vector<Message> batch;
  for (int i = 0; i < 2000; ++i) {
    batch.push_back({.payload = "m", .group = "g" + std::to_string(i % 50)});
  }
  ASSERT_OK(grouped.SendBatch(batch));
  Raw raw(db_->url());
  raw.Query("ANALYZE TABLE sqlq_messages");
  const std::string id =
      raw.Query("SELECT id FROM sqlq_queues WHERE name = 'grouped'");
  auto filled = [](std::string sql, const std::vector<std::string>& values) {
    std::size_t at = 0;
    for (const std::string& v : values) {
      at = sql.find('?', at);
      sql.replace(at, 1, v);
      at += v.size();
    }
    return sql;
  };
  // The lists of the next groups: each seek of the index finds a group
  // (a loose index scan), whether groups follow the key ('g17') or not
  // ('g9', the last: the list starts again from the first).
  for (const std::string& sql :
       {filled(engines::shared::kGroupListSql,
               {id, "'g17'", "18", id, id, "'g17'", "18"}),
        filled(engines::shared::kGroupListSql,
               {id, "'g9'", "18", id, id, "'g9'", "18"}),
        filled(engines::shared::kGroupListFirstSql, {id, "18"})}) {
    const std::string plan = raw.Query("EXPLAIN FORMAT=JSON " + sql);
    EXPECT_NE(plan.find("\"using_index_for_group_by\": true"),
              std::string::npos)
        << sql << "\n"
        << plan;
    EXPECT_EQ(plan.find("filesort"), std::string::npos) << sql << "\n" << plan;
  }
  for (const std::string& sql :
       {filled(engines::shared::kGroupListSql,
               {id, "'g17'", "18", id, id, "'g17'", "18"}),
        filled(engines::shared::kGroupListSql,
               {id, "'g9'", "18", id, id, "'g9'", "18"}),
        filled(engines::shared::kGroupListFirstSql, {id, "18"}),
        filled(engines::shared::kGroupHeadSql, {id, "'g17'"}),
        filled(engines::shared::kGroupReadySql,
               {id, "'g17'", "9000000000000000", "10"})}) {
    const std::string plan = raw.Query("EXPLAIN FORMAT=JSON " + sql);
    EXPECT_EQ(plan.find("\"access_type\": \"ALL\""), std::string::npos)
        << sql << "\n"
        << plan;
    EXPECT_EQ(plan.find("filesort"), std::string::npos) << sql << "\n" << plan;
    // min(id) of one group is answered from the index alone ("Select
    // tables optimized away"); the others read it.
    EXPECT_TRUE(plan.find("sqlq_messages_group") != std::string::npos ||
                plan.find("optimized away") != std::string::npos)
        << sql << "\n"
        << plan;
  }
}

// The listing of a queue's messages (WorkQueue::ListMessages) walks
// sqlq_messages by primary key in id order, a bounded range, without a
// filesort, whatever else the table holds. The statements are the engine's own
// (engines/shared/message_sql.h), with their values in place of the
// placeholders.
TEST_F(MysqlEngineTest, ListingWalksThePrimaryKeyWithoutFilesort) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(WorkQueue other, store->CreateQueue("other", {}));
  std::vector<Message> batch(2000, Message{.payload = "m"});
  // Ids 1-2,000, the keyed one 2,001 (inside the page's window), then the
  // other queue's.
  ASSERT_OK(q.SendBatch(batch));
  ASSERT_OK(q.Send({.payload = "keyed", .dedup_key = "k"}));
  ASSERT_OK(other.SendBatch(batch));
  ASSERT_OK(other.Send({.payload = "keyed", .dedup_key = "k"}));
  Raw raw(db_->url());
  raw.Query("ANALYZE TABLE sqlq_messages");
  const std::string queue_id =
      raw.Query("SELECT id FROM sqlq_queues WHERE name = 'jobs'");
  ListingPage page(std::stoll(queue_id));
  ListingPage by_key(std::stoll(queue_id));
  by_key.filter = {.dedup_key = "k"};
  auto literal = [](const engines::shared::BuiltSql& b) {
    return WithValues(b, /*numbered=*/false);
  };
  // By a header; and by a dedup key, which the statements look up in
  // sqlq_dedup_keys (schema.h, version 25).
  const auto& style = engines::mysql::Dialect::kMessageStyle;
  const auto& keyed = engines::mysql::Dialect::kMessageStyleKeysApart;
  for (const std::string& sql :
       {literal(engines::shared::WindowSql(style, page.params)),
        literal(engines::shared::FindSql(style, page.params, 0, 3000)),
        literal(engines::shared::WindowSql(keyed, by_key.params)),
        literal(engines::shared::FindSql(keyed, by_key.params, 0, 3000))}) {
    const std::string plan = raw.Query("EXPLAIN FORMAT=JSON " + sql);
    RecordProperty("plan", plan);
    // Every read of sqlq_messages: a range of the primary key, never
    // whole.
    // (Read as text: MariaDB's plan quotes conditions without escaping
    // them, which no JSON parser takes.) A table's entry names its
    // access_type and key after its table_name.
    const std::string table = "\"table_name\": \"sqlq_messages\"";
    int reads = 0;
    for (auto at = plan.find(table); at != std::string::npos;
         at = plan.find(table, at + 1)) {
      ++reads;
      const auto next = plan.find("\"table_name\"", at + 1);
      const std::string entry = plan.substr(
          at, next == std::string::npos ? std::string::npos : next - at);
      EXPECT_NE(entry.find("\"key\": \"PRIMARY\""), std::string::npos)
          << sql << "\n"
          << plan;
      EXPECT_EQ(entry.find("\"access_type\": \"ALL\""), std::string::npos)
          << sql << "\n"
          << plan;
    }
    EXPECT_EQ(reads, 1) << sql << "\n" << plan;
    EXPECT_EQ(plan.find("filesort"), std::string::npos) << sql << "\n" << plan;
  }
}

TEST_F(MysqlEngineTest, OpenClaimTransactionHoldsUpNoAckOfALeasedMessage) {
  auto store = OpenStore();
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(SendResult leased, q.Send({.payload = "leased"}));
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({}));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_OK_AND_ASSIGN(SendResult ready, q.Send({.payload = "ready"}));
  // Another consumer's claim, left open after its locking read: its
  // candidates included the leased message (its plain read saw it before
  // our lease committed), which no longer matches and must not stay locked.
  Raw raw(db_->url());
  if (raw.Query("SELECT @@log_bin AND @@binlog_format <> 'ROW'") == "1") {
    // There the engine runs REPEATABLE READ, which keeps such locks until
    // the claim commits (docs/engines/mysql.md).
    GTEST_SKIP() << "the server logs statements: sqlq runs REPEATABLE READ";
  }
  const std::string queue_id =
      raw.Query("SELECT id FROM sqlq_queues WHERE name = 'jobs'");
  // As the engine's claims run on a server without a binlog.
  raw.Query("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
  raw.Query("START TRANSACTION");
  raw.Query("SELECT id FROM sqlq_messages FORCE INDEX (PRIMARY) WHERE id IN (" +
            std::to_string(leased.id) + ", " + std::to_string(ready.id) +
            ") AND queue_id = " + queue_id +
            " AND ready_us <= CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) "
            " FOR UPDATE SKIP LOCKED");
  // The ack comes through well before the lock wait timeout (5 s) would
  // have ended a wait; it would have failed with kBusy after retries.
  const auto t0 = SteadyClock::now();
  EXPECT_OK(q.Ack(got[0].receipt));
  EXPECT_LT(MsSince(t0), 4000) << "the ack waited for the claim's locks";
  EXPECT_EQ(got[0].id, leased.id);
  raw.Query("ROLLBACK");
}

// --- wake-ups ----------------------------------------------------------------

}  // namespace
}  // namespace sqlq::test
