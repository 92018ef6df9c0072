// Regression tests from review: the "clean failure" contract
// (src/core/engine.h: an operation that fails with
// kNotFound/kFailedPrecondition/kInvalidArgument/kAlreadyExists/ kTooLarge has
// written nothing) is not what the SQLite engine delivers: sqlite::Translate
// maps *any* SQLITE_CONSTRAINT to kAlreadyExists (and SQLITE_TOOBIG to
// kTooLarge, SQLITE_CANTOPEN to kNotFound), whatever the operation had written
// before the failing statement. WriteBatcher::RunGroup then treats the failure
// as clean and COMMITs the partial writes.
//
// A trigger stands in for any constraint that fires on the n-th statement
// of an operation (here: the 2nd message of a batch, the 2nd archive insert
// of an AckBatch). The same holds for Redrive(ids), Claim (MoveToDead),
// Ack with archive, and a Tx the caller commits after such a failure.

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "sqlq/store.h"

namespace sqlq {
namespace {

struct Db {
  std::string dir = "/tmp/sqlq-review-XXXXXX";
  std::string path;
  Db() {
    if (mkdtemp(dir.data()) == nullptr) ADD_FAILURE();
    path = dir + "/q.db";
  }
  ~Db() { std::filesystem::remove_all(dir); }
  void Exec(const char* sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, &err), SQLITE_OK)
        << (err ? err : "");
    sqlite3_free(err);
    sqlite3_close(db);
  }
};

TEST(CleanFailureReview, SendBatchIsAllOrNoneEvenWhenALaterInsertFails) {
  Db db;
  auto store = Store::Open("sqlite:" + db.path);
  ASSERT_TRUE(store.ok());
  auto q = (*store)->CreateQueue("q", {});
  ASSERT_TRUE(q.ok());
  db.Exec(
      "CREATE TRIGGER review_refuse BEFORE INSERT ON sqlq_messages "
      "WHEN NEW.payload = CAST('bad' AS BLOB) "
      "BEGIN SELECT RAISE(ABORT, 'refused by a constraint'); END;");

  std::vector<Message> batch = {{.payload = "good"}, {.payload = "bad"}};
  auto r = q->SendBatch(batch);
  ASSERT_FALSE(r.ok());
  auto stats = q->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->ready, 0)
      << "SendBatch failed with '" << r.status().ToString()
      << "' but the first message of the batch was committed";
}

TEST(CleanFailureReview, AckBatchThatFailsAsAWholeCommitsNothing) {
  Db db;
  auto store = Store::Open("sqlite:" + db.path);
  ASSERT_TRUE(store.ok());
  auto q = (*store)->CreateQueue("q", {.archive = true});
  ASSERT_TRUE(q.ok());
  for (const char* p : {"one", "two", "three"}) {
    ASSERT_TRUE(q->Send({.payload = p}).ok());
  }
  auto claimed = q->Claim({.max = 3});
  ASSERT_TRUE(claimed.ok());
  ASSERT_EQ(claimed->size(), 3u);
  db.Exec(
      "CREATE TRIGGER review_refuse BEFORE INSERT ON sqlq_archive "
      "WHEN NEW.payload = CAST('two' AS BLOB) "
      "BEGIN SELECT RAISE(ABORT, 'refused by a constraint'); END;");

  std::vector<std::string> receipts;
  for (const auto& m : *claimed) receipts.push_back(m.receipt);
  auto r = q->AckBatch(receipts);
  auto stats = q->Stats();
  ASSERT_TRUE(stats.ok());
  if (!r.ok()) {
    // "The outer Result fails only when nothing could be done".
    EXPECT_EQ(stats->leased, 3)
        << "AckBatch failed as a whole (" << r.status().ToString() << ") yet "
        << 3 - stats->leased << " ack(s) were committed";
  } else {
    EXPECT_TRUE((*r)[0].ok());
    EXPECT_FALSE((*r)[1].ok());
    EXPECT_TRUE((*r)[2].ok());
  }
}

TEST(CleanFailureReview, TxWithAnOperationThatFailedPartWayDoesNotCommit) {
  Db db;
  auto store = Store::Open("sqlite:" + db.path);
  ASSERT_TRUE(store.ok());
  auto q = (*store)->CreateQueue("q", {});
  ASSERT_TRUE(q.ok());
  db.Exec("CREATE TABLE orders (id INTEGER PRIMARY KEY)");
  db.Exec(
      "CREATE TRIGGER review_refuse BEFORE INSERT ON sqlq_messages "
      "WHEN NEW.payload = CAST('bad' AS BLOB) "
      "BEGIN SELECT RAISE(ABORT, 'refused by a constraint'); END;");

  auto tx = (*store)->BeginTx();
  ASSERT_TRUE(tx.ok()) << tx.status().ToString();
  auto* conn = static_cast<sqlite3*>(tx->native_handle());
  ASSERT_EQ(sqlite3_exec(conn, "INSERT INTO orders VALUES (1)", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  ASSERT_TRUE(q->Send(*tx, {.payload = "good"}).ok());
  auto bad = q->Send(*tx, {.payload = "bad"});
  ASSERT_FALSE(bad.ok());
  // The caller ignores the failure and commits anyway: refused, and the
  // whole transaction (the order and the good message) is rolled back.
  Status committed = tx->Commit();
  EXPECT_EQ(committed.code(), Code::kFailedPrecondition)
      << committed.ToString();
  auto stats = q->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->ready, 0);
  sqlite3* check = nullptr;
  ASSERT_EQ(sqlite3_open(db.path.c_str(), &check), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(check, "SELECT count(*) FROM orders", -1, &st,
                               nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(st, 0), 0);
  sqlite3_finalize(st);
  sqlite3_close(check);
}

TEST(SqliteUrl, InMemoryDatabaseIsRefusedClearly) {
  auto store = Store::Open("sqlite::memory:");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), Code::kInvalidArgument);
  EXPECT_NE(store.status().message().find("in-memory"), std::string::npos)
      << store.status().ToString();
}

}  // namespace
}  // namespace sqlq
