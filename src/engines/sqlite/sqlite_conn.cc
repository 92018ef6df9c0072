#include "engines/sqlite/sqlite_conn.h"

#include <fmt/format.h>

#include <cstdlib>
#include <memory>

namespace sqlq::engines::sqlite {

Status Translate(int rc, sqlite3* db, std::string_view what) {
  // Never a "clean failure" code (core/engine.h): an error SQLite raises in
  // the middle of an operation may follow writes of that operation, so the
  // merged transaction must not commit. Operations produce clean codes only
  // from explicit checks made before they write.
  std::string detail = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  std::string msg = fmt::format("{}: {}", what, detail);
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Status::Busy(fmt::format(
          "{} (the database stayed locked by another writer)", msg));
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return Status::PermissionDenied(msg);
    case SQLITE_NOTADB:
      return Status::Corruption(
          fmt::format("{}: the file is not an SQLite database", what));
    case SQLITE_CORRUPT:
      return Status::Corruption(msg);
    case SQLITE_FULL:
      return Status::Unavailable(fmt::format("{} (disk full)", msg));
    case SQLITE_IOERR:
    case SQLITE_NOMEM:
    case SQLITE_PROTOCOL:
    case SQLITE_CANTOPEN:
      return Status::Unavailable(msg);
    case SQLITE_INTERRUPT:
      return Status::Timeout(msg);
    default:
      // SQLITE_CONSTRAINT, SQLITE_TOOBIG, ...: our checks should have
      // prevented them; a bug of ours.
      return Status::Internal(msg);
  }
}

Status Stmt::Run(std::string_view what) {
  int rc;
  while ((rc = Step()) == SQLITE_ROW) {
  }
  if (rc != SQLITE_DONE) return Translate(rc, db_, what);
  return Status::Ok();
}

std::string Stmt::Text(int col) const {
  const auto* p = sqlite3_column_text(stmt_, col);
  if (p == nullptr) return {};
  return std::string(reinterpret_cast<const char*>(p),
                     sqlite3_column_bytes(stmt_, col));
}

std::string Stmt::Blob(int col) const {
  const void* p = sqlite3_column_blob(stmt_, col);
  if (p == nullptr) return {};
  return std::string(static_cast<const char*>(p),
                     sqlite3_column_bytes(stmt_, col));
}

void Params::BindTo(Stmt& st) const {
  int n = 0;
  for (const Value& v : values_) {
    ++n;
    switch (v.kind) {
      case kInt:
        st.Bind(n, v.i);
        break;
      case kNull:
        st.BindNull(n);
        break;
      case kText:
        st.BindText(n, v.text);
        break;
      case kTextView:
        st.BindText(n, v.view);
        break;
      case kBlob:
        st.BindBlob(n, v.view);
        break;
    }
  }
}

std::int64_t Rows::Int(int row, int col) const {
  const Cell& c = At(row, col);
  if (c.null || c.is_int) return c.i;
  return std::strtoll(c.bytes.c_str(), nullptr, 10);
}

std::string Rows::Bytes(int row, int col) const {
  const Cell& c = At(row, col);
  if (!c.null && c.is_int) return std::to_string(c.i);
  return c.bytes;
}

Result<Rows> SqliteConn::Read(Stmt& st, sqlite3_stmt* raw,
                              std::string_view what) {
  Rows out;
  out.cols_ = static_cast<std::size_t>(sqlite3_column_count(raw));
  int rc;
  while ((rc = st.Step()) == SQLITE_ROW) {
    for (std::size_t col = 0; col < out.cols_; ++col) {
      Rows::Cell& c = out.cells_.emplace_back();
      const int i = static_cast<int>(col);
      switch (sqlite3_column_type(raw, i)) {
        case SQLITE_NULL:
          break;
        case SQLITE_INTEGER:
          c.null = false;
          c.is_int = true;
          c.i = sqlite3_column_int64(raw, i);
          break;
        default:
          c.null = false;
          c.bytes = st.Blob(i);
          break;
      }
    }
    ++out.rows_;
  }
  if (rc != SQLITE_DONE) return Translate(rc, db_, what);
  out.affected_ = sqlite3_stmt_readonly(raw) ? 0 : changes();
  return out;
}

Result<Rows> SqliteConn::Run(std::string_view sql, const Params& params,
                             std::string_view what) {
  auto raw = Prepare(sql);
  if (!raw.ok()) return raw.status();
  Stmt st(db_, *raw);
  params.BindTo(st);
  return Read(st, *raw, what);
}

Result<std::vector<Rows>> SqliteConn::RunAll(const std::string& sql,
                                             const std::vector<Params>& params,
                                             std::string_view what) {
  std::vector<Rows> out;
  out.reserve(params.size());
  for (const Params& p : params) {
    auto rows = Run(sql, p, what);
    if (!rows.ok()) return rows.status();
    out.push_back(std::move(*rows));
  }
  return out;
}

Result<Rows> SqliteConn::RunOnce(const std::string& sql, const Params& params,
                                 std::string_view what) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &raw, nullptr);
  if (rc != SQLITE_OK) return Translate(rc, db_, what);
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> owned(raw,
                                                              sqlite3_finalize);
  Rows out;
  {
    Stmt st(db_, raw);  // resets before the statement is finalized
    params.BindTo(st);
    auto rows = Read(st, raw, what);
    if (!rows.ok()) return rows.status();
    out = std::move(*rows);
  }
  return out;
}

SqliteConn::~SqliteConn() {
  for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
  if (owned_) sqlite3_close_v2(db_);
}

Result<sqlite3_stmt*> SqliteConn::Prepare(const char* sql, int bytes) {
  auto it = cache_.find(sql);
  if (it != cache_.end()) return it->second;
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql, bytes, SQLITE_PREPARE_PERSISTENT, &stmt,
                              nullptr);
  if (rc != SQLITE_OK) return Translate(rc, db_, "prepare statement");
  cache_.emplace(sql, stmt);
  return stmt;
}

Status SqliteConn::Exec(const char* sql, std::string_view what) {
  SQLQ_PREPARE(st, *this, sql);
  return st.Run(what);
}

Status SqliteConn::Commit() {
  Status s = Exec("COMMIT", "commit");
  // A failed write leaves the commit record unwritten (the transaction is
  // not there, whatever happens next); a failed fsync comes after it was
  // written, and the record may be on disk.
  const int ext = sqlite3_extended_errcode(db_);
  if (!s.ok() && (ext == SQLITE_IOERR_FSYNC || ext == SQLITE_IOERR_DIR_FSYNC)) {
    return Status::OutcomeUnknown(fmt::format(
        "{} (an I/O error during commit: the transaction may or may not have "
        "been committed)",
        s.message()));
  }
  return s;
}

}  // namespace sqlq::engines::sqlite
