#include <fmt/format.h>
#include <sqlite3.h>

#include <atomic>
#include <filesystem>
#include <vector>

#include "bench/baseline.h"
#include "bench/baseline_drive.h"

namespace sqlq::bench {

namespace {

// One connection as a hand-written queue would open it. Only the setup
// connection switches to WAL and creates the table: a journal-mode change
// needs the database to itself and, when many workers open at once, fails
// with "database is locked" without waiting in the busy handler.
class Db {
 public:
  enum class Role { kSetup, kWorker };
  explicit Db(const std::string& path, Role role = Role::kWorker) {
    rc_ = sqlite3_open(path.c_str(), &db_);
    if (rc_ == SQLITE_OK) {
      sqlite3_busy_timeout(db_, 10000);
      rc_ = sqlite3_exec(db_,
                         role == Role::kSetup
                             ? "PRAGMA journal_mode=WAL; PRAGMA "
                               "synchronous=FULL; CREATE TABLE IF NOT EXISTS "
                               "jobs (id INTEGER PRIMARY KEY, payload BLOB NOT "
                               "NULL, locked_until INTEGER NOT NULL DEFAULT 0);"
                             : "PRAGMA synchronous=FULL;",
                         nullptr, nullptr, nullptr);
    }
  }
  ~Db() {
    for (auto* st : stmts_) sqlite3_finalize(st);
    sqlite3_close(db_);
  }
  Status status() const {
    return rc_ == SQLITE_OK ? Status::Ok()
                            : Status::Unavailable(fmt::format(
                                  "baseline: {}", sqlite3_errstr(rc_)));
  }
  sqlite3_stmt* Prepare(const char* sql) {
    sqlite3_stmt* st = nullptr;
    sqlite3_prepare_v2(db_, sql, -1, &st, nullptr);
    stmts_.push_back(st);
    return st;
  }
  Status Exec(const char* sql) {
    int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) {
      return Status::Busy(fmt::format("baseline: {}", sqlite3_errmsg(db_)));
    }
    return Status::Ok();
  }
  Status Error() const {
    return Status::Busy(fmt::format("baseline: {}", sqlite3_errmsg(db_)));
  }
  Status Step(sqlite3_stmt* st) {
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
      return Status::Busy(fmt::format("baseline: {}", sqlite3_errmsg(db_)));
    }
    return Status::Ok();
  }

 private:
  sqlite3* db_ = nullptr;
  int rc_ = SQLITE_OK;
  std::vector<sqlite3_stmt*> stmts_;
};

// One thread's connection (baseline_drive.h): a producer, or a taker of a
// drain (delete on claim).
class Worker {
 public:
  Worker(const std::string& path, std::size_t payload)
      : db_(path), body_(payload, 'x') {
    ins_ = db_.Prepare("INSERT INTO jobs (payload) VALUES (?)");
    take_ = db_.Prepare(
        "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs ORDER BY id "
        "LIMIT ?) RETURNING id, payload");
  }
  Status status() const { return db_.status(); }

  // One autocommitted INSERT, or n in one BEGIN IMMEDIATE ... COMMIT.
  Status Insert(int n) {
    Status s = n > 1 ? db_.Exec("BEGIN IMMEDIATE") : Status::Ok();
    for (int i = 0; s.ok() && i < n; ++i) {
      sqlite3_bind_blob(ins_, 1, body_.data(), static_cast<int>(body_.size()),
                        SQLITE_STATIC);
      s = db_.Step(ins_);
    }
    if (n == 1) return s;
    if (s.ok()) return db_.Exec("COMMIT");
    (void)db_.Exec("ROLLBACK");
    return s;
  }

  // Delete on claim: one autocommitted DELETE ... RETURNING.
  Result<long> Take(int n) {
    sqlite3_bind_int(take_, 1, n);
    long got = 0;
    int rc;
    while ((rc = sqlite3_step(take_)) == SQLITE_ROW) ++got;
    sqlite3_reset(take_);
    if (rc != SQLITE_DONE) return db_.Error();
    return got;
  }

 private:
  Db db_;
  const std::string body_;
  sqlite3_stmt* ins_ = nullptr;
  sqlite3_stmt* take_ = nullptr;
};

// A mixed load's consumer (DriveMixed): takes messages under a lease in
// one transaction, then deletes them in another, as a queue with leases
// written by hand does.
class Leaser {
 public:
  explicit Leaser(const std::string& path) : db_(path) {
    pick_ = db_.Prepare(
        "SELECT id, payload FROM jobs WHERE locked_until < ? ORDER BY id "
        "LIMIT ?");
    lease_ = db_.Prepare("UPDATE jobs SET locked_until = ? WHERE id = ?");
    del_ = db_.Prepare("DELETE FROM jobs WHERE id = ?");
  }
  Status status() const { return db_.status(); }

  Result<long> Take(int n) {
    ids_.clear();
    Status s = db_.Exec("BEGIN IMMEDIATE");
    if (!s.ok()) return s;
    const auto now = std::chrono::duration_cast<std::chrono::microseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    sqlite3_bind_int64(pick_, 1, now);
    sqlite3_bind_int(pick_, 2, n);
    while (sqlite3_step(pick_) == SQLITE_ROW) {
      ids_.push_back(sqlite3_column_int64(pick_, 0));
    }
    sqlite3_reset(pick_);
    for (auto id : ids_) {
      sqlite3_bind_int64(lease_, 1, now + 30000000);
      sqlite3_bind_int64(lease_, 2, id);
      if (s.ok()) s = db_.Step(lease_);
    }
    if (s.ok()) s = db_.Exec("COMMIT");
    if (!s.ok()) return s;
    if (ids_.empty()) return 0L;
    // "Work", then ack: one delete per message, in one transaction.
    s = db_.Exec("BEGIN IMMEDIATE");
    for (auto id : ids_) {
      sqlite3_bind_int64(del_, 1, id);
      if (s.ok()) s = db_.Step(del_);
    }
    if (s.ok()) s = db_.Exec("COMMIT");
    if (!s.ok()) return s;
    return static_cast<long>(ids_.size());
  }

 private:
  Db db_;
  sqlite3_stmt* pick_ = nullptr;
  sqlite3_stmt* lease_ = nullptr;
  sqlite3_stmt* del_ = nullptr;
  std::vector<std::int64_t> ids_;
};

// The file's life and its workers, for DrivenBaseline.
struct SqliteParts {
  std::string path;
  std::size_t payload;

  Status Setup() {
    Db setup(path, Db::Role::kSetup);
    return setup.status();
  }
  void Teardown() {
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::error_code ec;
      std::filesystem::remove(path + suffix, ec);
    }
  }
  Worker MakeWorker() { return Worker(path, payload); }
  Leaser MakeConsumer() { return Leaser(path); }
};

}  // namespace

std::unique_ptr<Baseline> SqliteBaseline(const std::string& path,
                                         std::size_t payload) {
  return std::make_unique<DrivenBaseline<SqliteParts>>(
      SqliteParts{.path = path, .payload = payload});
}

}  // namespace sqlq::bench
