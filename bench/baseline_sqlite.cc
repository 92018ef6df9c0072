#include "bench/baseline_sqlite.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "bench/baseline_drive.h"

namespace sqlq::bench {

namespace {

using SteadyClock = std::chrono::steady_clock;

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

double Since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

// One thread's connection for DriveSends and DriveDrain (baseline_drive.h).
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

}  // namespace

Result<BaselineResult> BaselineSendBatch(const std::string& path, long total,
                                         int threads, int batch,
                                         std::size_t payload) {
  {
    Db setup(path, Db::Role::kSetup);
    if (!setup.status().ok()) return setup.status();
  }
  return DriveSends(total, threads, batch,
                    [&] { return Worker(path, payload); });
}

Result<BaselineResult> BaselineDrain(const std::string& path, long total,
                                     int threads, int per_claim,
                                     std::size_t payload) {
  {
    Db setup(path, Db::Role::kSetup);
    if (!setup.status().ok()) return setup.status();
  }
  return DriveDrain(total, threads, per_claim,
                    [&] { return Worker(path, payload); });
}

Result<BaselineResult> BaselineMixed(const std::string& path, int producers,
                                     int consumers, int batch, int claim_max,
                                     long max_backlog,
                                     std::chrono::milliseconds duration,
                                     std::size_t payload) {
  {
    Db setup(path, Db::Role::kSetup);
    if (!setup.status().ok()) return setup.status();
  }
  std::atomic<bool> stop{false};
  std::atomic<long> sent{0}, done{0};
  std::mutex mu;
  Status failure;
  auto fail = [&](const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (failure.ok()) failure = s;
    stop = true;
  };
  auto now_us = [] {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  auto start = SteadyClock::now();
  std::vector<std::thread> pool;
  for (int p = 0; p < producers; ++p) {
    pool.emplace_back([&] {
      Worker w(path, payload);
      while (!stop) {
        if (sent - done > max_backlog) {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
          continue;
        }
        Status s = w.Insert(batch);
        if (!s.ok()) return fail(s);
        sent += batch;
      }
    });
  }
  for (int c = 0; c < consumers; ++c) {
    pool.emplace_back([&] {
      Db db(path);
      sqlite3_stmt* pick = db.Prepare(
          "SELECT id, payload FROM jobs WHERE locked_until < ? ORDER BY id "
          "LIMIT ?");
      sqlite3_stmt* lease =
          db.Prepare("UPDATE jobs SET locked_until = ? WHERE id = ?");
      sqlite3_stmt* del = db.Prepare("DELETE FROM jobs WHERE id = ?");
      std::vector<std::int64_t> ids;
      while (!stop) {
        ids.clear();
        Status s = db.Exec("BEGIN IMMEDIATE");
        if (!s.ok()) return fail(s);
        const auto now = now_us();
        sqlite3_bind_int64(pick, 1, now);
        sqlite3_bind_int(pick, 2, claim_max);
        while (sqlite3_step(pick) == SQLITE_ROW) {
          ids.push_back(sqlite3_column_int64(pick, 0));
        }
        sqlite3_reset(pick);
        for (auto id : ids) {
          sqlite3_bind_int64(lease, 1, now + 30000000);
          sqlite3_bind_int64(lease, 2, id);
          if (s.ok()) s = db.Step(lease);
        }
        if (s.ok()) s = db.Exec("COMMIT");
        if (!s.ok()) return fail(s);
        if (ids.empty()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          continue;
        }
        // "Work", then ack: one delete per message, in one transaction.
        s = db.Exec("BEGIN IMMEDIATE");
        for (auto id : ids) {
          sqlite3_bind_int64(del, 1, id);
          if (s.ok()) s = db.Step(del);
        }
        if (s.ok()) s = db.Exec("COMMIT");
        if (!s.ok()) return fail(s);
        done += static_cast<long>(ids.size());
      }
    });
  }
  auto deadline = start + duration;
  while (SteadyClock::now() < deadline && !stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  long in_window = done;
  double seconds = Since(start);
  stop = true;
  for (auto& t : pool) t.join();
  if (!failure.ok()) return failure;
  return BaselineResult{.seconds = seconds, .messages = in_window};
}

}  // namespace sqlq::bench
