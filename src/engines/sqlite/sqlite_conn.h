// A SQLite connection with a cache of prepared statements, and the one
// function that translates SQLite result codes into sqlq statuses.

#ifndef SQLQ_ENGINES_SQLITE_SQLITE_CONN_H_
#define SQLQ_ENGINES_SQLITE_SQLITE_CONN_H_

#include <sqlite3.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/engine.h"
#include "core/tx_conn.h"

namespace sqlq::engines::sqlite {

// The single translation of SQLite errors (rc and the connection's message)
// into sqlq codes. `what` says what was being done ("claim").
Status Translate(int rc, sqlite3* db, std::string_view what);

// A bound statement in use; resets itself (and its bindings) when it goes.
class Stmt {
 public:
  Stmt(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  Stmt(const Stmt&) = delete;
  ~Stmt() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }

  Stmt& Bind(int i, std::int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  Stmt& BindText(int i, std::string_view v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()),
                      SQLITE_STATIC);
    return *this;
  }
  Stmt& BindNull(int i) {
    sqlite3_bind_null(stmt_, i);
    return *this;
  }
  // Empty text binds NULL.
  Stmt& BindTextOrNull(int i, std::string_view v) {
    if (v.empty()) {
      sqlite3_bind_null(stmt_, i);
      return *this;
    }
    return BindText(i, v);
  }
  // Always a blob, empty included: sqlite3_bind_blob binds NULL for a null
  // pointer, which an empty std::string_view (such as a defaulted payload
  // argument) may carry.
  Stmt& BindBlob(int i, std::string_view v) {
    if (v.data() == nullptr) {
      sqlite3_bind_zeroblob(stmt_, i, 0);
      return *this;
    }
    sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()),
                      SQLITE_STATIC);
    return *this;
  }

  // SQLITE_ROW, SQLITE_DONE or an error code.
  int Step() { return sqlite3_step(stmt_); }
  // Steps to completion; OK or the translated error.
  Status Run(std::string_view what);
  // Steps through every row, `decode(*this)` for each: the rows, or the
  // translated error.
  template <class Decode>
  auto All(Decode decode, std::string_view what)
      -> Result<std::vector<decltype(decode(*this))>> {
    std::vector<decltype(decode(*this))> out;
    int rc;
    while ((rc = Step()) == SQLITE_ROW) out.push_back(decode(*this));
    if (rc != SQLITE_DONE) return Translate(rc, db_, what);
    return out;
  }

  std::int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  bool IsNull(int col) const {
    return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
  }
  std::string Text(int col) const;
  std::string Blob(int col) const;
  // Text or blob, as bytes: what core's row decoders read (core/rows.h).
  std::string Bytes(int col) const { return Blob(col); }
  sqlite3* db() const { return db_; }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_;
};

using core::QueueCounters;

class SqliteConn : public core::TxConn {
 public:
  // Takes ownership of `db` when `owned`.
  SqliteConn(sqlite3* db, bool owned) : db_(db), owned_(owned) {}
  ~SqliteConn() override;

  sqlite3* db() const { return db_; }
  // A statement for `sql`, prepared once per connection. `sql` must be a
  // string with static storage: the cache is keyed by its address.
  Result<sqlite3_stmt*> Prepare(const char* sql);
  // Runs a statement without results (BEGIN, SAVEPOINT...).
  Status Exec(const char* sql, std::string_view what);
  // COMMIT. An fsync that fails while committing is kOutcomeUnknown: the
  // commit record was written and may be on disk, and the transaction
  // there after a restart or power cut.
  Status Commit();
  std::int64_t changes() const { return sqlite3_changes64(db_); }

  // Start of the current busy wait, for the engine's busy handler.
  std::chrono::steady_clock::time_point busy_started;

  // The state of the open transaction is core::TxConn's. Here a queue in
  // known_queues cannot vanish before the transaction ends: dropping takes
  // the write lock.

 private:
  sqlite3* db_;
  bool owned_;
  std::unordered_map<const char*, sqlite3_stmt*> cache_;
};

// Declares `Stmt var` for `sql` on `conn`, or returns the error from the
// enclosing function.
#define SQLQ_PREPARE(var, conn, sql)              \
  auto var##_raw = (conn).Prepare(sql);           \
  if (!var##_raw.ok()) return var##_raw.status(); \
  ::sqlq::engines::sqlite::Stmt var((conn).db(), *var##_raw)

}  // namespace sqlq::engines::sqlite

#endif  // SQLQ_ENGINES_SQLITE_SQLITE_CONN_H_
