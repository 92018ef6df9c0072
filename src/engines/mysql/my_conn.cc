#include "engines/mysql/my_conn.h"

#include <errmsg.h>
#include <fmt/format.h>
#include <mysqld_error.h>
#include <poll.h>

#include <cstdlib>
#include <cstring>

namespace sqlq::engines::mysql {

bool IsRetryableError(unsigned int err) {
  return err == ER_LOCK_DEADLOCK || err == ER_LOCK_WAIT_TIMEOUT;
}

bool IsFailoverError(unsigned int err) {
  switch (err) {
    case ER_UNKNOWN_COM_ERROR:          // 1047 under Galera: node not ready
    case ER_OPTION_PREVENTS_STATEMENT:  // 1290: --read-only
    case ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION:  // 1792
    case ER_READ_ONLY_MODE:                         // 1836
      return true;
    default:
      return IsConnectionError(err);
  }
}

bool IsConnectionError(unsigned int err) {
  switch (err) {
    case CR_SERVER_GONE_ERROR:
    case CR_SERVER_LOST:
    case CR_CONNECTION_ERROR:
    case CR_CONN_HOST_ERROR:
    case CR_UNKNOWN_HOST:
    case CR_SERVER_LOST_EXTENDED:
    case CR_SSL_CONNECTION_ERROR:
    case CR_COMMANDS_OUT_OF_SYNC:
    case ER_CONNECTION_KILLED:
    case ER_SERVER_SHUTDOWN:
    case ER_NORMAL_SHUTDOWN:
      return true;
    default:
      return false;
  }
}

Status Translate(unsigned int err, std::string_view message,
                 std::string_view what, Phase phase) {
  const std::string msg = fmt::format("{}: {} (error {})", what, message, err);
  // A connection lost while COMMIT was on the wire: the server may have
  // committed. Never report that as retryable (status.h).
  if (phase == Phase::kCommit && IsConnectionError(err)) {
    return Status::OutcomeUnknown(fmt::format(
        "{} (the connection was lost during commit: the transaction may or "
        "may not have been committed)",
        msg));
  }
  // Galera: a COMMIT the node could not replicate (it left the primary
  // component while committing). Its write set may already have been
  // ordered in the cluster before the cut, so the outcome is unknown.
  if (phase == Phase::kCommit && err == ER_ERROR_DURING_COMMIT) {
    return Status::OutcomeUnknown(fmt::format(
        "{} (the commit failed in the cluster's replication: the transaction "
        "may or may not have been committed)",
        msg));
  }
  switch (err) {
    case ER_LOCK_DEADLOCK:
    case ER_LOCK_WAIT_TIMEOUT:
      return Status::Busy(msg);
    case ER_ACCESS_DENIED_ERROR:
    case ER_DBACCESS_DENIED_ERROR:
    case ER_TABLEACCESS_DENIED_ERROR:
    case ER_COLUMNACCESS_DENIED_ERROR:
    case ER_SPECIFIC_ACCESS_DENIED_ERROR:
    case ER_PROCACCESS_DENIED_ERROR:  // routines (the SQL-level API)
    // A trigger where the binary log is on, by a user without SUPER (and
    // without log_bin_trust_function_creators).
    case ER_BINLOG_CREATE_ROUTINE_NEED_SUPER:
      return Status::PermissionDenied(msg);
    // A server that takes no writes now: a replica, a primary demoted by a
    // failover, a Galera node outside the primary component. The database
    // is writable elsewhere or will be soon: retryable, and the pool is
    // dropped (IsFailoverError).
    case ER_OPTION_PREVENTS_STATEMENT:  // --read-only
    case ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION:
    case ER_READ_ONLY_MODE:
      return Status::Unavailable(
          fmt::format("{} (the server is read-only: a replica, or a primary "
                      "demoted by a failover)",
                      msg));
    case ER_UNKNOWN_COM_ERROR:  // 1047: "WSREP has not yet prepared node"
      return Status::Unavailable(fmt::format(
          "{} (the cluster node is not ready: it is not part of the "
          "cluster's primary component)",
          msg));
    case ER_BAD_DB_ERROR:
      return Status::NotFound(msg);
    // A row of a dropped queue referenced: the queue is gone.
    case ER_NO_REFERENCED_ROW:
    case ER_NO_REFERENCED_ROW_2:
      return Status::NotFound(msg);
    case ER_DUP_ENTRY:
    case ER_DUP_KEY:
      return Status::AlreadyExists(msg);
    case ER_NET_PACKET_TOO_LARGE:
    case ER_DATA_TOO_LONG:
    case CR_NET_PACKET_TOO_LARGE:
      return Status::TooLarge(msg);
    case ER_STATEMENT_TIMEOUT:
    case ER_QUERY_INTERRUPTED:
      return Status::Timeout(msg);
    case ER_CON_COUNT_ERROR:
    case ER_TOO_MANY_USER_CONNECTIONS:
    case ER_HOST_IS_BLOCKED:
    case CR_OUT_OF_MEMORY:
      return Status::Unavailable(msg);
    case ER_CRASHED_ON_USAGE:
    case ER_NOT_KEYFILE:
      return Status::Corruption(msg);
    default:
      break;
  }
  if (IsConnectionError(err) || (err >= CR_MIN_ERROR && err <= CR_MAX_ERROR) ||
      phase == Phase::kConnect) {
    return Status::Unavailable(msg);
  }
  return Status::Internal(msg);
}

// --- Params ------------------------------------------------------------------

Params& Params::Int(std::int64_t v) {
  ints_.push_back(v);
  MYSQL_BIND b;
  std::memset(&b, 0, sizeof b);
  b.buffer_type = MYSQL_TYPE_LONGLONG;
  b.buffer = &ints_.back();
  binds_.push_back(b);
  return *this;
}

Params& Params::AddBytes(const char* p, std::size_t n) {
  MYSQL_BIND b;
  std::memset(&b, 0, sizeof b);
  b.buffer_type = MYSQL_TYPE_BLOB;
  // A non-null pointer even when empty, so that '' is not NULL.
  b.buffer = const_cast<char*>(p != nullptr ? p : "");
  b.buffer_length = static_cast<unsigned long>(n);
  binds_.push_back(b);
  return *this;
}

Params& Params::Bytes(std::string_view v) {
  return AddBytes(v.data(), v.size());
}

Params& Params::BytesOrNull(std::string_view v) {
  return v.empty() ? Null() : Bytes(v);
}

Params& Params::Text(std::string_view v) {
  storage_.emplace_back(v);
  return AddBytes(storage_.back().data(), storage_.back().size());
}

Params& Params::Null() {
  MYSQL_BIND b;
  std::memset(&b, 0, sizeof b);
  b.buffer_type = MYSQL_TYPE_NULL;
  binds_.push_back(b);
  return *this;
}

std::int64_t Rows::Int(int row, int col) const {
  const Cell& c = rows_[row][col];
  if (c.null) return 0;
  if (c.is_int) return c.i;
  return std::strtoll(c.s.c_str(), nullptr, 10);
}

// --- MyConn ------------------------------------------------------------------

MyConn::~MyConn() {
  if (owned_ && recycler_ && healthy() && !tx_open && !InTransaction()) {
    auto heir = std::make_unique<MyConn>(conn_, /*owned=*/true);
    heir->prepared_ = std::move(prepared_);
    heir->auto_increment_increment = auto_increment_increment;
    heir->consecutive_autoinc = consecutive_autoinc;
    heir->mariadb = mariadb;
    heir->counter_slot = counter_slot;
    // The pool drops it, and the other idle ones, after a failover.
    heir->failover = failover;
    Recycler recycler = std::move(recycler_);
    recycler(std::move(heir));
    return;
  }
  for (auto& [sql, stmt] : prepared_) mysql_stmt_close(stmt);
  if (owned_ && conn_ != nullptr) mysql_close(conn_);
}

bool MyConn::InTransaction() const {
  unsigned int status = 0;
  if (mariadb_get_infov(conn_, MARIADB_CONNECTION_SERVER_STATUS, &status) !=
      0) {
    return false;
  }
  return (status & SERVER_STATUS_IN_TRANS) != 0;
}

void MyConn::ResetTxState() {
  core::TxConn::ResetTxState();
  bumps = 0;
}

namespace {

// Errors that InnoDB answers by rolling back the statement alone, leaving
// the transaction usable: a duplicate key, a missing parent row.
bool IsStatementRollback(unsigned int err) {
  return err == ER_DUP_ENTRY || err == ER_NO_REFERENCED_ROW_2 ||
         err == ER_NO_REFERENCED_ROW;
}

}  // namespace

Status MyConn::Fail(unsigned int err, std::string_view message,
                    std::string_view what, Phase phase, bool record) {
  Status s = Translate(err, message, what, phase);
  last_errno_ = err;
  if (IsRetryableError(err)) retry_tx = true;
  if (IsConnectionError(err)) broken_ = true;
  if (IsFailoverError(err)) failover = true;
  if (record) tx_error = s;
  return s;
}

int MyConn::ReadResults(std::vector<Done>* done) {
  for (;;) {
    MYSQL_RES* res = mysql_store_result(conn_);
    std::optional<std::int64_t> value;
    Rows rows;
    if (res != nullptr) {
      if (done != nullptr) {
        const unsigned int ncols = mysql_num_fields(res);
        while (MYSQL_ROW row = mysql_fetch_row(res)) {
          const unsigned long* lengths = mysql_fetch_lengths(res);
          std::vector<Rows::Cell> cells(ncols);
          for (unsigned int i = 0; i < ncols; ++i) {
            cells[i].null = row[i] == nullptr;
            if (!cells[i].null) cells[i].s.assign(row[i], lengths[i]);
          }
          rows.rows_.push_back(std::move(cells));
        }
        if (rows.size() > 0 && !rows.IsNull(0, 0)) value = rows.Int(0, 0);
      }
      mysql_free_result(res);
    }
    if (done != nullptr) {
      const my_ulonglong n = mysql_affected_rows(conn_);
      done->push_back({.affected = n == static_cast<my_ulonglong>(-1)
                                       ? 0
                                       : static_cast<std::int64_t>(n),
                       .insert_id = mysql_insert_id(conn_),
                       .value = value,
                       .rows = std::move(rows)});
    }
    const int more = mysql_next_result(conn_);
    if (more != 0) return more;
  }
}

Status MyConn::Exec(std::string_view sql, std::string_view what, Phase phase) {
  if (mysql_real_query(conn_, sql.data(), sql.size()) != 0) {
    return Fail(mysql_errno(conn_), mysql_error(conn_), what, phase,
                /*record=*/phase != Phase::kCommit);
  }
  if (ReadResults(nullptr) > 0 || mysql_errno(conn_) != 0) {
    return Fail(mysql_errno(conn_), mysql_error(conn_), what, phase, true);
  }
  // Statements here end transactions only at their end ("...; COMMIT").
  if (sql.ends_with("COMMIT") || sql.ends_with("ROLLBACK")) tx_open = false;
  return Status::Ok();
}

Result<std::vector<MyConn::Done>> MyConn::ExecCommit(std::string_view sql,
                                                     std::size_t count,
                                                     std::size_t commit_at,
                                                     std::string_view what) {
  std::vector<Done> done;
  done.reserve(count);
  // The statement the server was at when something failed: the COMMIT's
  // failure, or a lost connection, leaves the outcome unknown.
  auto fail = [&]() -> Status {
    const unsigned int err = mysql_errno(conn_);
    const bool at_commit = done.size() >= commit_at || IsConnectionError(err);
    return Fail(err, mysql_error(conn_), what,
                at_commit ? Phase::kCommit : Phase::kStatement,
                /*record=*/true);
  };
  if (mysql_real_query(conn_, sql.data(), sql.size()) != 0) {
    // Connector/C says "gone away" (2006) when it could not write the
    // packet: the server had closed the connection before it, so nothing
    // ran. "Lost" (2013) is a failure to read the answer: it may have.
    if (mysql_errno(conn_) == CR_SERVER_GONE_ERROR) {
      lost_at_begin = true;
      return Fail(CR_SERVER_GONE_ERROR, mysql_error(conn_), what,
                  Phase::kStatement, /*record=*/true);
    }
    return fail();
  }
  if (ReadResults(&done) > 0) return fail();
  if (done.size() != count) {
    return Status::Internal(fmt::format("{}: {} statements answered, {} sent",
                                        what, done.size(), count));
  }
  tx_open = false;
  return done;
}

bool MyConn::StillOpen() {
  if (!healthy()) return false;
  const my_socket fd = mysql_get_socket(conn_);
  if (fd == MARIADB_INVALID_SOCKET) return false;
  pollfd p{.fd = fd, .events = POLLIN | POLLRDHUP, .revents = 0};
  if (::poll(&p, 1, 0) == 0) return true;
  broken_ = true;
  return false;
}

Status MyConn::ExecSteps(std::string_view sql, std::string_view what,
                         std::vector<Done>* done, bool clean_ok) {
  done->clear();
  if (tx_error) return *tx_error;
  if (mysql_real_query(conn_, sql.data(), sql.size()) != 0 ||
      ReadResults(done) > 0 || mysql_errno(conn_) != 0) {
    const unsigned int err = mysql_errno(conn_);
    const bool clean = clean_ok && IsStatementRollback(err);
    return Fail(err, mysql_error(conn_), what, Phase::kStatement, !clean);
  }
  return Status::Ok();
}

Result<std::int64_t> MyConn::ExecScalar(std::string_view sql,
                                        std::string_view what) {
  if (mysql_real_query(conn_, sql.data(), sql.size()) != 0) {
    return Fail(mysql_errno(conn_), mysql_error(conn_), what, Phase::kStatement,
                true);
  }
  std::vector<Done> done;
  if (ReadResults(&done) > 0 || mysql_errno(conn_) != 0) {
    return Fail(mysql_errno(conn_), mysql_error(conn_), what, Phase::kStatement,
                true);
  }
  std::optional<std::int64_t> value;
  for (const Done& d : done) {
    if (d.value) value = d.value;
  }
  if (!value) return Status::Internal(fmt::format("{}: no value", what));
  return *value;
}

Result<MYSQL_STMT*> MyConn::Prepared(const std::string& sql,
                                     std::string_view what) {
  auto it = prepared_.find(sql);
  if (it != prepared_.end()) return it->second;
  MYSQL_STMT* stmt = mysql_stmt_init(conn_);
  if (stmt == nullptr) {
    return Fail(CR_OUT_OF_MEMORY, "out of memory", what, Phase::kStatement,
                true);
  }
  my_bool update_max = 1;
  mysql_stmt_attr_set(stmt, STMT_ATTR_UPDATE_MAX_LENGTH, &update_max);
  if (mysql_stmt_prepare(stmt, sql.data(), sql.size()) != 0) {
    Status s = Fail(mysql_stmt_errno(stmt), mysql_stmt_error(stmt), what,
                    Phase::kStatement, true);
    mysql_stmt_close(stmt);
    return s;
  }
  prepared_.emplace(sql, stmt);
  return stmt;
}

Result<Rows> MyConn::Run(const std::string& sql, Params& params,
                         std::string_view what, bool clean_ok) {
  if (tx_error) return *tx_error;
  auto prepared = Prepared(sql, what);
  if (!prepared.ok()) return prepared.status();
  MYSQL_STMT* stmt = *prepared;
  // `in_result`: the statement failed while its rows were being read (a
  // locking read that hit a deadlock or lock wait timeout after its first
  // rows went out). Connector/C then leaves the handle in a state in which
  // its next execute waits for rows that never come (it would hang the
  // connection inside its next transaction, holding that transaction's
  // locks), so the handle is closed and prepared afresh next time.
  auto fail = [&](bool in_result = false) -> Status {
    const unsigned int err = mysql_stmt_errno(stmt);
    const bool clean = clean_ok && IsStatementRollback(err);
    Status s = Fail(err, mysql_stmt_error(stmt), what, Phase::kStatement,
                    /*record=*/!clean);
    if (in_result) {
      prepared_.erase(sql);
      mysql_stmt_close(stmt);
    } else {
      mysql_stmt_free_result(stmt);
    }
    if (broken_) {
      // The statement handles died with the connection.
      for (auto& [text, st] : prepared_) mysql_stmt_close(st);
      prepared_.clear();
    }
    return s;
  };
  if (params.size() != mysql_stmt_param_count(stmt)) {
    return Status::Internal(
        fmt::format("{}: statement takes {} parameters, {} given", what,
                    mysql_stmt_param_count(stmt), params.size()));
  }
  if (params.size() > 0 && mysql_stmt_bind_param(stmt, params.binds()) != 0) {
    return fail();
  }
  if (mysql_stmt_execute(stmt) != 0) return fail();
  Rows rows;
  MYSQL_RES* meta = mysql_stmt_result_metadata(stmt);
  if (meta == nullptr) {
    const my_ulonglong n = mysql_stmt_affected_rows(stmt);
    rows.affected_ =
        n == static_cast<my_ulonglong>(-1) ? 0 : static_cast<std::int64_t>(n);
    rows.insert_id_ = mysql_stmt_insert_id(stmt);
    return rows;
  }
  if (mysql_stmt_store_result(stmt) != 0) {
    mysql_free_result(meta);
    return fail(/*in_result=*/true);
  }
  const unsigned int ncols = mysql_num_fields(meta);
  MYSQL_FIELD* fields = mysql_fetch_fields(meta);
  std::vector<MYSQL_BIND> binds(ncols);
  std::vector<std::int64_t> ints(ncols);
  std::vector<std::string> bufs(ncols);
  std::vector<unsigned long> lengths(ncols);
  std::vector<my_bool> nulls(ncols);
  std::vector<bool> is_int(ncols);
  for (unsigned int i = 0; i < ncols; ++i) {
    std::memset(&binds[i], 0, sizeof binds[i]);
    switch (fields[i].type) {
      case MYSQL_TYPE_TINY:
      case MYSQL_TYPE_SHORT:
      case MYSQL_TYPE_INT24:
      case MYSQL_TYPE_LONG:
      case MYSQL_TYPE_LONGLONG:
        is_int[i] = true;
        binds[i].buffer_type = MYSQL_TYPE_LONGLONG;
        binds[i].buffer = &ints[i];
        binds[i].is_unsigned = (fields[i].flags & UNSIGNED_FLAG) != 0;
        break;
      default:
        bufs[i].resize(fields[i].max_length + 1);
        binds[i].buffer_type = MYSQL_TYPE_BLOB;
        binds[i].buffer = bufs[i].data();
        binds[i].buffer_length = static_cast<unsigned long>(bufs[i].size());
        break;
    }
    binds[i].length = &lengths[i];
    binds[i].is_null = &nulls[i];
  }
  mysql_free_result(meta);
  if (ncols > 0 && mysql_stmt_bind_result(stmt, binds.data()) != 0) {
    return fail();
  }
  for (;;) {
    const int rc = mysql_stmt_fetch(stmt);
    if (rc == MYSQL_NO_DATA) break;
    if (rc == 1) return fail(/*in_result=*/true);
    if (rc == MYSQL_DATA_TRUNCATED) {
      mysql_stmt_free_result(stmt);
      return Status::Internal(fmt::format("{}: result truncated", what));
    }
    std::vector<Rows::Cell> row(ncols);
    for (unsigned int i = 0; i < ncols; ++i) {
      row[i].null = nulls[i] != 0;
      if (row[i].null) continue;
      if (is_int[i]) {
        row[i].is_int = true;
        row[i].i = ints[i];
      } else {
        row[i].s.assign(bufs[i].data(), lengths[i]);
      }
    }
    rows.rows_.push_back(std::move(row));
  }
  mysql_stmt_free_result(stmt);
  rows.affected_ = static_cast<std::int64_t>(rows.rows_.size());
  return rows;
}

}  // namespace sqlq::engines::mysql
