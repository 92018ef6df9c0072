// SQLite specifics: how the file is opened and configured, what a bad file
// or URL gives, several stores on one file (as several processes would), and
// caller transactions that use the native sqlite3 handle.

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "tests/conformance/engine_fixture.h"

namespace sqlq::test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using SteadyClock = std::chrono::steady_clock;

// A connection of the test's own, as another process or the application
// would hold one.
class Db {
 public:
  explicit Db(const std::string& path) {
    rc_ = sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE, nullptr);
    // Like any application connection beside a busy writer, wait for the
    // write lock instead of failing with "database is locked" at once (the
    // store's own checkpoints and commits may hold it for a moment).
    if (rc_ == SQLITE_OK) sqlite3_busy_timeout(db_, 10000);
  }
  Db(const Db&) = delete;
  ~Db() {
    if (db_ != nullptr) sqlite3_close_v2(db_);
  }
  int open_rc() const { return rc_; }
  sqlite3* get() const { return db_; }
  // Closes now; returns sqlite3_close's code (SQLITE_BUSY if statements of
  // someone else's are still open on it).
  int Close() {
    int rc = sqlite3_close(db_);
    if (rc == SQLITE_OK) db_ = nullptr;
    return rc;
  }

 private:
  sqlite3* db_ = nullptr;
  int rc_ = SQLITE_OK;
};

int Exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    ADD_FAILURE() << sql << ": " << (err ? err : sqlite3_errstr(rc));
  }
  sqlite3_free(err);
  return rc;
}

// The first column of the first row, as text; nullopt on error or no row.
std::optional<std::string> QueryText(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) != SQLITE_OK) {
    ADD_FAILURE() << sql << ": " << sqlite3_errmsg(db);
    return std::nullopt;
  }
  std::optional<std::string> out;
  if (sqlite3_step(st) == SQLITE_ROW) {
    const auto* p = sqlite3_column_text(st, 0);
    out = p ? reinterpret_cast<const char*>(p) : "";
  }
  sqlite3_finalize(st);
  return out;
}

std::int64_t QueryInt(sqlite3* db, const std::string& sql) {
  auto t = QueryText(db, sql);
  return t ? std::stoll(*t) : -1;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class SqliteEngineTest : public ::testing::Test {
 protected:
  Result<std::unique_ptr<Store>> Open(const std::string& suffix = "",
                                      StoreOptions options = {}) {
    return Store::Open(db_.url() + suffix, options);
  }
  const std::string& path() const { return db_.path(); }

  SqliteDatabase db_;
};

// --- opening and configuration -----------------------------------------------

TEST_F(SqliteEngineTest, DatabaseIsInWalJournalMode) {
  ASSERT_OK_AND_ASSIGN(auto store, Open());
  Db other(path());
  ASSERT_EQ(other.open_rc(), SQLITE_OK);
  EXPECT_EQ(QueryText(other.get(), "PRAGMA journal_mode"), "wal");
}

TEST_F(SqliteEngineTest, SynchronousDefaultsToFull) {
  ASSERT_OK_AND_ASSIGN(auto store, Open());
  ASSERT_OK_AND_ASSIGN(Tx tx, store->BeginTx());
  auto* db = static_cast<sqlite3*>(tx.native_handle());
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(QueryInt(db, "PRAGMA synchronous"), 2);
  EXPECT_EQ(QueryText(db, "PRAGMA journal_mode"), "wal");
  ASSERT_OK(tx.Rollback());
}

TEST_F(SqliteEngineTest, SynchronousNormalIsTakenFromTheUrl) {
  ASSERT_OK_AND_ASSIGN(auto store, Open("?synchronous=normal"));
  ASSERT_OK_AND_ASSIGN(Tx tx, store->BeginTx());
  auto* db = static_cast<sqlite3*>(tx.native_handle());
  ASSERT_NE(db, nullptr);
  EXPECT_EQ(QueryInt(db, "PRAGMA synchronous"), 1);
  ASSERT_OK(tx.Rollback());
}

TEST_F(SqliteEngineTest, FileThatIsNotADatabaseIsCorruptionAndLeftUnchanged) {
  std::string text;
  for (int i = 0; i < 200; ++i) {
    text += "line " + std::to_string(i) + ": not a database, just text\n";
  }
  {
    std::ofstream out(path(), std::ios::binary);
    out << text;
  }
  auto store = Open();
  EXPECT_CODE(store, Code::kCorruption);
  EXPECT_EQ(ReadFile(path()), text);
}

TEST_F(SqliteEngineTest, MissingFileWithoutCreateIsNotFoundAndCreatesNothing) {
  auto store = Open("", {.create_if_missing = false});
  EXPECT_CODE(store, Code::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(path()));
  EXPECT_TRUE(std::filesystem::is_empty(db_.dir().path()));
}

TEST_F(SqliteEngineTest, PathInAMissingDirectoryIsNotFound) {
  const auto dir = db_.dir().path() / "no" / "such" / "dir";
  auto store = Store::Open("sqlite:" + (dir / "q.db").string());
  EXPECT_CODE(store, Code::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(db_.dir().path() / "no"));
}

TEST_F(SqliteEngineTest, MalformedUrlsAreInvalidArgument) {
  EXPECT_CODE(Open("?journal=off"), Code::kInvalidArgument);
  EXPECT_CODE(Open("?synchronous=sometimes"), Code::kInvalidArgument);
  EXPECT_CODE(Open("?synchronous=normal&cache=big"), Code::kInvalidArgument);
  EXPECT_CODE(Open("?ack_flush=later"), Code::kInvalidArgument);
  EXPECT_CODE(Store::Open("redis://x"), Code::kInvalidArgument);
  EXPECT_CODE(Store::Open("sqlite:"), Code::kInvalidArgument);
  EXPECT_CODE(Store::Open(""), Code::kInvalidArgument);
  // Nothing was created by any of them.
  EXPECT_TRUE(std::filesystem::is_empty(db_.dir().path()));
}

TEST_F(SqliteEngineTest, ReopeningKeepsQueuesAndSchema) {
  {
    ASSERT_OK_AND_ASSIGN(auto store, Open());
    ASSERT_OK(store->CreateQueue("jobs", {}));
  }
  ASSERT_OK_AND_ASSIGN(auto store, Open("", {.create_if_missing = false}));
  EXPECT_OK(store->Queue("jobs"));
}

TEST_F(SqliteEngineTest, IdsBeyondThirtyTwoBitsWork) {
  ASSERT_OK_AND_ASSIGN(auto store, Open());
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK(q.Send({.payload = "first"}));
  {
    Db other(path());
    ASSERT_EQ(Exec(other.get(),
                   "UPDATE sqlite_sequence SET seq = 5000000000 "
                   "WHERE name = 'sqlq_messages'"),
              SQLITE_OK);
  }
  ASSERT_OK_AND_ASSIGN(SendResult big,
                       q.Send({.payload = "big", .priority = 1}));
  EXPECT_EQ(big.id, 5000000001);
  ASSERT_OK_AND_ASSIGN(auto claimed, q.Claim());
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0].id, big.id);
  EXPECT_EQ(claimed[0].receipt.rfind("5000000001-1-", 0), 0u)
      << claimed[0].receipt;
  EXPECT_OK(q.Ack(claimed[0].receipt));
}

// --- several stores on one file ----------------------------------------------

TEST_F(SqliteEngineTest, TwoStoresOnOneFileSeeEachOthersMessages) {
  ASSERT_OK_AND_ASSIGN(auto a, Open());
  ASSERT_OK_AND_ASSIGN(auto b, Open());
  ASSERT_OK_AND_ASSIGN(WorkQueue qa, a->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(WorkQueue qb, b->Queue("jobs"));
  ASSERT_OK_AND_ASSIGN(SendResult sent, qb.Send({.payload = "from b"}));
  ASSERT_OK_AND_ASSIGN(auto claimed, qa.Claim());
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0].id, sent.id);
  EXPECT_EQ(claimed[0].payload, "from b");
  // The lease taken through a holds for b too.
  ASSERT_OK_AND_ASSIGN(auto none, qb.Claim());
  EXPECT_TRUE(none.empty());
  ASSERT_OK(qb.Ack(claimed[0].receipt));
  ASSERT_OK_AND_ASSIGN(QueueStats st, qa.Stats());
  EXPECT_EQ(st.acks, 1);
  EXPECT_EQ(st.leased, 0);
}

TEST_F(SqliteEngineTest, WaitingClaimIsWokenBySendThroughAnotherStore) {
  ASSERT_OK_AND_ASSIGN(auto a, Open());
  ASSERT_OK_AND_ASSIGN(auto b, Open());
  ASSERT_OK_AND_ASSIGN(WorkQueue qa, a->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(WorkQueue qb, b->Queue("jobs"));
  std::promise<void> started;
  auto claim = std::async(std::launch::async, [&] {
    started.set_value();
    const auto t0 = SteadyClock::now();
    auto r = qa.Claim({.wait = seconds(10)});
    return std::make_pair(
        std::move(r),
        std::chrono::duration_cast<milliseconds>(SteadyClock::now() - t0));
  });
  started.get_future().wait();
  const auto sent_at = SteadyClock::now();
  ASSERT_OK(qb.Send({.payload = "across"}));
  auto [result, elapsed] = claim.get();
  const auto since_send =
      std::chrono::duration_cast<milliseconds>(SteadyClock::now() - sent_at);
  ASSERT_OK(result);
  ASSERT_EQ(result->size(), 1u);
  EXPECT_EQ((*result)[0].payload, "across");
  // Store a cannot see b's in-process wake-up; only the file watcher can
  // wake it before its 1 s fallback poll.
  EXPECT_LT(since_send.count(), 900)
      << "claim took " << elapsed.count() << " ms";
}

TEST_F(SqliteEngineTest, IdleWaitingClaimWritesNothingToTheDatabase) {
  ASSERT_OK_AND_ASSIGN(auto store, Open());
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  struct stat before_db {
  }, before_wal{}, after_db{}, after_wal{};
  const std::string wal = path() + "-wal";
  ASSERT_EQ(stat(path().c_str(), &before_db), 0);
  ASSERT_EQ(stat(wal.c_str(), &before_wal), 0);
  // Long enough for the fallback poll (1 s) to look again at least once.
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.wait = milliseconds(1500)}));
  EXPECT_TRUE(got.empty());
  ASSERT_EQ(stat(path().c_str(), &after_db), 0);
  ASSERT_EQ(stat(wal.c_str(), &after_wal), 0);
  auto ns = [](const struct stat& s) {
    return s.st_mtim.tv_sec * 1000000000LL + s.st_mtim.tv_nsec;
  };
  EXPECT_EQ(after_wal.st_size, before_wal.st_size);
  EXPECT_EQ(ns(after_wal), ns(before_wal)) << "the -wal file was written";
  EXPECT_EQ(ns(after_db), ns(before_db)) << "the database file was written";
}

// --- caller transactions through the native handle ---------------------------

class SqliteTxTest : public SqliteEngineTest {
 protected:
  void SetUp() override {
    auto store = Open();
    ASSERT_OK(store);
    store_ = std::move(*store);
    auto q = store_->CreateQueue("jobs", {});
    ASSERT_OK(q);
    q_.emplace(*q);
    // The application's own table, created beforehand.
    Db app(path());
    ASSERT_EQ(Exec(app.get(),
                   "CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)"),
              SQLITE_OK);
  }

  std::int64_t Orders() {
    Db reader(path());
    return QueryInt(reader.get(), "SELECT count(*) FROM orders");
  }
  std::int64_t Messages() {
    auto st = q_->Stats();
    if (!st.ok()) {
      ADD_FAILURE() << st.status().ToString();
      return -1;
    }
    return st->ready;
  }

  std::unique_ptr<Store> store_;
  std::optional<WorkQueue> q_;
};

TEST_F(SqliteTxTest, BusinessRowAndMessageRollBackTogether) {
  ASSERT_OK_AND_ASSIGN(Tx tx, store_->BeginTx());
  auto* db = static_cast<sqlite3*>(tx.native_handle());
  ASSERT_NE(db, nullptr);
  ASSERT_EQ(Exec(db, "INSERT INTO orders (item) VALUES ('book')"), SQLITE_OK);
  ASSERT_OK(q_->Send(tx, {.payload = "ship book"}));
  ASSERT_OK(tx.Rollback());
  EXPECT_EQ(Orders(), 0);
  EXPECT_EQ(Messages(), 0);
}

TEST_F(SqliteTxTest, BusinessRowAndMessageCommitTogether) {
  ASSERT_OK_AND_ASSIGN(Tx tx, store_->BeginTx());
  auto* db = static_cast<sqlite3*>(tx.native_handle());
  ASSERT_NE(db, nullptr);
  ASSERT_EQ(Exec(db, "INSERT INTO orders (item) VALUES ('book')"), SQLITE_OK);
  ASSERT_OK(q_->Send(tx, {.payload = "ship book"}));
  EXPECT_EQ(Orders(), 0);  // invisible before the commit
  EXPECT_EQ(Messages(), 0);
  ASSERT_OK(tx.Commit());
  EXPECT_EQ(Orders(), 1);
  EXPECT_EQ(Messages(), 1);
}

TEST_F(SqliteTxTest, JoinedTransactionRollsBackWithTheCallersRow) {
  Db app(path());
  ASSERT_EQ(Exec(app.get(), "BEGIN IMMEDIATE"), SQLITE_OK);
  ASSERT_EQ(Exec(app.get(), "INSERT INTO orders (item) VALUES ('pen')"),
            SQLITE_OK);
  {
    ASSERT_OK_AND_ASSIGN(Tx tx, store_->JoinTx(app.get()));
    EXPECT_EQ(tx.native_handle(), app.get());
    ASSERT_OK(q_->Send(tx, {.payload = "ship pen"}));
    ASSERT_OK(tx.Rollback());
  }
  EXPECT_EQ(sqlite3_get_autocommit(app.get()), 1);
  EXPECT_EQ(Orders(), 0);
  EXPECT_EQ(Messages(), 0);
  // sqlq left nothing open on the caller's connection.
  EXPECT_EQ(app.Close(), SQLITE_OK);
}

TEST_F(SqliteTxTest, JoinedTransactionCommitsWithTheCallersRow) {
  Db app(path());
  ASSERT_EQ(Exec(app.get(), "BEGIN IMMEDIATE"), SQLITE_OK);
  ASSERT_EQ(Exec(app.get(), "INSERT INTO orders (item) VALUES ('pen')"),
            SQLITE_OK);
  {
    ASSERT_OK_AND_ASSIGN(Tx tx, store_->JoinTx(app.get()));
    ASSERT_OK(q_->Send(tx, {.payload = "ship pen"}));
    ASSERT_OK(tx.Commit());
  }
  EXPECT_EQ(Orders(), 1);
  EXPECT_EQ(Messages(), 1);
  EXPECT_EQ(app.Close(), SQLITE_OK);
}

TEST_F(SqliteTxTest, CallerMayEndAJoinedTransactionItself) {
  Db app(path());
  ASSERT_EQ(Exec(app.get(), "BEGIN IMMEDIATE"), SQLITE_OK);
  {
    ASSERT_OK_AND_ASSIGN(Tx tx, store_->JoinTx(app.get()));
    ASSERT_OK(q_->Send(tx, {.payload = "ship pen"}));
  }  // the Tx handle goes; the transaction is still the caller's
  ASSERT_EQ(Exec(app.get(), "INSERT INTO orders (item) VALUES ('pen')"),
            SQLITE_OK);
  EXPECT_EQ(Exec(app.get(), "COMMIT"), SQLITE_OK);
  EXPECT_EQ(Orders(), 1);
  EXPECT_EQ(Messages(), 1);
  EXPECT_EQ(app.Close(), SQLITE_OK);
}

TEST_F(SqliteTxTest, DroppingAJoinedTxLeavesTheCallersNextTransactionAlone) {
  Db app(path());
  ASSERT_EQ(Exec(app.get(), "BEGIN IMMEDIATE"), SQLITE_OK);
  {
    ASSERT_OK_AND_ASSIGN(Tx tx, store_->JoinTx(app.get()));
    ASSERT_OK(q_->Send(tx, {.payload = "ship pen"}));
    // The caller commits on its own and starts its next transaction
    // before the Tx handle goes.
    ASSERT_EQ(Exec(app.get(), "COMMIT"), SQLITE_OK);
    ASSERT_EQ(Exec(app.get(), "BEGIN IMMEDIATE"), SQLITE_OK);
    ASSERT_EQ(Exec(app.get(), "INSERT INTO orders (item) VALUES ('ink')"),
              SQLITE_OK);
  }
  EXPECT_EQ(sqlite3_get_autocommit(app.get()), 0)
      << "the caller's transaction was ended by sqlq";
  EXPECT_EQ(Exec(app.get(), "COMMIT"), SQLITE_OK);
  EXPECT_EQ(Orders(), 1);
  EXPECT_EQ(Messages(), 1);
  EXPECT_EQ(app.Close(), SQLITE_OK);
}

TEST_F(SqliteTxTest, TransactionalAckOnTheCallersConnection) {
  ASSERT_OK(q_->Send({.payload = "x"}));
  ASSERT_OK_AND_ASSIGN(auto claimed, q_->Claim());
  ASSERT_EQ(claimed.size(), 1u);
  Db app(path());
  for (bool commit : {false, true}) {
    SCOPED_TRACE(commit ? "commit" : "rollback");
    ASSERT_EQ(Exec(app.get(), "BEGIN IMMEDIATE"), SQLITE_OK);
    ASSERT_EQ(Exec(app.get(), "INSERT INTO orders (item) VALUES ('done')"),
              SQLITE_OK);
    ASSERT_OK_AND_ASSIGN(Tx tx, store_->JoinTx(app.get()));
    ASSERT_OK(q_->Ack(tx, claimed[0].receipt));
    ASSERT_OK(commit ? tx.Commit() : tx.Rollback());
    ASSERT_OK_AND_ASSIGN(QueueStats st, q_->Stats());
    EXPECT_EQ(st.leased, commit ? 0 : 1);
    EXPECT_EQ(st.acks, commit ? 1 : 0);
    EXPECT_EQ(Orders(), commit ? 1 : 0);
  }
}

TEST_F(SqliteTxTest, JoinTxRefusesUnusableConnections) {
  EXPECT_CODE(store_->JoinTx(nullptr), Code::kInvalidArgument);

  // A connection without an open transaction.
  Db app(path());
  EXPECT_CODE(store_->JoinTx(app.get()), Code::kInvalidArgument);

  SqliteDatabase elsewhere;
  { ASSERT_OK_AND_ASSIGN(auto other, Store::Open(elsewhere.url())); }
  // A connection to another database.
  Db foreign(elsewhere.path());
  ASSERT_EQ(Exec(foreign.get(), "BEGIN IMMEDIATE"), SQLITE_OK);
  EXPECT_CODE(store_->JoinTx(foreign.get()), Code::kInvalidArgument);
  Exec(foreign.get(), "ROLLBACK");
}

}  // namespace
}  // namespace sqlq::test
