// A SQLite connection with a cache of prepared statements, and the one
// function that translates SQLite result codes into sqlq statuses. The hot
// paths (sends, claims, acks) step their statements themselves (Stmt);
// the operations shared with the other engines (engines/shared/) run
// theirs through Run, with Params and Rows of the same shape as the other
// engines' (the dialect, dialect.h).

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

// Parameters of one statement run through SqliteConn::Run, bound in order
// (to ?1, ?2, ...). Text is copied; bytes are kept as views, which must
// outlive the statement's execution.
class Params {
 public:
  Params& Int(std::int64_t v) { return Add({.kind = kInt, .i = v}); }
  Params& Null() { return Add({.kind = kNull}); }
  Params& Text(std::string_view v) {
    return Add({.kind = kText, .text = std::string(v)});
  }
  // Empty text binds NULL.
  Params& TextOrNull(std::string_view v) {
    return v.empty() ? Null() : Text(v);
  }
  // Keys, groups and dedup keys: TEXT columns here (the server engines
  // store them as bytes), so bound as text, which is what they compare
  // equal to (a BLOB never equals a TEXT value).
  Params& Bytes(std::string_view v) {
    return Add({.kind = kTextView, .view = v});
  }
  // A payload: a BLOB, empty included.
  Params& Payload(std::string_view v) {
    return Add({.kind = kBlob, .view = v});
  }

  void BindTo(Stmt& st) const;

 private:
  enum Kind { kInt, kNull, kText, kTextView, kBlob };
  struct Value {
    Kind kind = kNull;
    std::int64_t i = 0;
    std::string text;       // kText
    std::string_view view;  // kTextView, kBlob
  };
  Params& Add(Value v) {
    values_.push_back(std::move(v));
    return *this;
  }
  std::vector<Value> values_;
};

// The rows a statement run through SqliteConn::Run returned, read whole,
// by (row, col).
class Rows {
 public:
  int size() const { return rows_; }
  bool IsNull(int row, int col) const { return At(row, col).null; }
  std::int64_t Int(int row, int col) const;
  // Text or blob as bytes (an integer as its decimal text).
  std::string Bytes(int row, int col) const;
  // Rows a statement that writes changed (sqlite3_changes64); 0 for a read.
  std::int64_t affected() const { return affected_; }

 private:
  friend class SqliteConn;
  struct Cell {
    bool null = true;
    bool is_int = false;
    std::int64_t i = 0;
    std::string bytes;
  };
  const Cell& At(int row, int col) const {
    return cells_[static_cast<std::size_t>(row) * cols_ +
                  static_cast<std::size_t>(col)];
  }
  int rows_ = 0;
  std::size_t cols_ = 0;
  std::vector<Cell> cells_;
  std::int64_t affected_ = 0;
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
  Result<sqlite3_stmt*> Prepare(const char* sql) { return Prepare(sql, -1); }
  Result<sqlite3_stmt*> Prepare(std::string_view sql) {
    return Prepare(sql.data(), static_cast<int>(sql.size()));
  }
  // Runs a statement without results (BEGIN, SAVEPOINT...).
  Status Exec(const char* sql, std::string_view what);
  // Runs `sql` with `params`, and reads every row it returns. The text of
  // `sql` must have static storage: it is kept prepared by its address,
  // as Prepare keeps it.
  Result<Rows> Run(std::string_view sql, const Params& params,
                   std::string_view what);
  // Runs `sql` (as for Run) once per element of `params`, in order.
  Result<std::vector<Rows>> RunAll(const std::string& sql,
                                   const std::vector<Params>& params,
                                   std::string_view what);
  // Runs a statement built at run time (its text differs from call to
  // call), prepared for this call only.
  Result<Rows> RunOnce(const std::string& sql, const Params& params,
                       std::string_view what);
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
  // `bytes`: the length of `sql`, or -1 up to its NUL.
  Result<sqlite3_stmt*> Prepare(const char* sql, int bytes);
  // Steps `st` (prepared as `raw`) to its end, reading every row.
  Result<Rows> Read(Stmt& st, sqlite3_stmt* raw, std::string_view what);

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
