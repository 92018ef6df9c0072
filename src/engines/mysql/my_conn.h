// A MariaDB Connector/C connection with per-connection binary prepared
// statements, parameter and result helpers, and the one function that
// translates MariaDB/MySQL errors into sqlq statuses.

#ifndef SQLQ_ENGINES_MYSQL_MY_CONN_H_
#define SQLQ_ENGINES_MYSQL_MY_CONN_H_

#include <mysql.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/engine.h"
#include "core/tx_conn.h"

namespace sqlq::engines::mysql {

// How a failed command ended, for Translate.
enum class Phase {
  kConnect,    // opening a connection
  kStatement,  // any statement but COMMIT
  kCommit,     // COMMIT: a lost connection leaves the outcome unknown
};

// The single translation of MariaDB/MySQL errors (server error numbers and
// Connector/C client errors) into sqlq codes. `what` says what was being
// done ("claim").
Status Translate(unsigned int err, std::string_view message,
                 std::string_view what, Phase phase = Phase::kStatement);

// Deadlock (1213) and lock wait timeout (1205): the transaction is rolled
// back (or must be) and may be run again whole.
bool IsRetryableError(unsigned int err);
// The connection is gone (server restart, network): client errors 2006,
// 2013 and friends.
bool IsConnectionError(unsigned int err);
// True for the errors of a server that takes no writes now (read-only, a
// Galera node outside the primary component) or is gone: the pool is
// dropped on them (core::TxConn::failover).
bool IsFailoverError(unsigned int err);

// Parameters of one statement, bound in binary (no text escaping anywhere):
// integers as BIGINT, bytes as BLOB.
class Params {
 public:
  Params() = default;
  // binds_ points into storage_ and ints_: a moved deque keeps its
  // elements in place, a copied one would not.
  Params(const Params&) = delete;
  Params& operator=(const Params&) = delete;
  Params(Params&&) = default;
  Params& operator=(Params&&) = default;

  Params& Int(std::int64_t v);
  // Bytes; `v` must outlive the statement's execution.
  Params& Bytes(std::string_view v);
  // A payload: bytes, as Bytes (SQLite stores them apart from keys).
  Params& Payload(std::string_view v) { return Bytes(v); }
  // Bytes, or NULL when empty.
  Params& BytesOrNull(std::string_view v);
  // An owned copy of `v`.
  Params& Text(std::string_view v);
  // An owned copy, or NULL when empty.
  Params& TextOrNull(std::string_view v) {
    return v.empty() ? Null() : Text(v);
  }
  Params& Null();

  std::size_t size() const { return binds_.size(); }
  MYSQL_BIND* binds() { return binds_.data(); }

 private:
  Params& AddBytes(const char* p, std::size_t n);
  std::deque<std::int64_t> ints_;
  std::deque<std::string> storage_;
  std::vector<MYSQL_BIND> binds_;
};

// A fetched result set (copied out of the connector's buffers), plus the
// affected row count and insert id of a write.
class Rows {
 public:
  struct Cell {
    bool null = true;
    bool is_int = false;
    std::int64_t i = 0;
    std::string s;
  };
  int size() const { return static_cast<int>(rows_.size()); }
  bool IsNull(int row, int col) const { return rows_[row][col].null; }
  // Integers, and DECIMAL results (SUM) as text.
  std::int64_t Int(int row, int col) const;
  std::string Bytes(int row, int col) const { return rows_[row][col].s; }
  std::size_t BytesSize(int row, int col) const {
    return rows_[row][col].s.size();
  }
  // Rows matched by an UPDATE (CLIENT_FOUND_ROWS), deleted or inserted.
  std::int64_t affected() const { return affected_; }
  std::uint64_t insert_id() const { return insert_id_; }

 private:
  friend class MyConn;
  std::vector<std::vector<Cell>> rows_;
  std::int64_t affected_ = 0;
  std::uint64_t insert_id_ = 0;
};

using core::QueueCounters;

class MyConn : public core::TxConn {
 public:
  // Takes ownership of `conn` when `owned`.
  MyConn(MYSQL* conn, bool owned) : conn_(conn), owned_(owned) {}
  ~MyConn() override;

  // Where an owned connection goes when this wrapper is destroyed, instead
  // of being closed: set on connections lent to a caller's Tx, so that they
  // return to the engine's pool with their prepared statements.
  using Recycler = std::function<void(std::unique_ptr<MyConn>)>;
  void set_recycler(Recycler r) { recycler_ = std::move(r); }

  MYSQL* my() const { return conn_; }
  bool healthy() const { return !broken_; }
  // For a pooled idle connection: false when the server closed it
  // meanwhile (a restart, wait_timeout, KILL, a proxy that dropped it),
  // which shows only as something to read on its socket: the server sends
  // nothing unasked otherwise. Costs a poll, no round trip.
  bool StillOpen();
  bool Poolable() const { return healthy() && !tx_open && !InTransaction(); }
  bool owned() const { return owned_; }
  // The server says a transaction is open on this connection.
  bool InTransaction() const;

  // Runs `sql` as a binary prepared statement, prepared once per connection
  // (cached by its text). On error returns the translated status and, unless
  // `clean_ok` and the error is a duplicate key or a missing parent row
  // (which InnoDB rolls back as a statement, leaving the transaction
  // usable), remembers that the transaction must not commit.
  Result<Rows> Run(const std::string& sql, Params& params,
                   std::string_view what, bool clean_ok = false);
  // Runs a statement built at run time (its text differs from call to
  // call), and closes it after: it is not kept on the connection.
  Result<Rows> RunOnce(const std::string& sql, Params& params,
                       std::string_view what) {
    auto rows = Run(sql, params, what);
    if (auto it = prepared_.find(sql); it != prepared_.end()) {
      mysql_stmt_close(it->second);
      prepared_.erase(it);
    }
    return rows;
  }
  Result<Rows> Run(const std::string& sql, Params&& params,
                   std::string_view what, bool clean_ok = false) {
    return Run(sql, params, what, clean_ok);
  }
  // Runs `sql` once per element of `params`, in order (PostgreSQL's
  // PgConn::RunAll pipelines them; here they go one by one).
  Result<std::vector<Rows>> RunAll(const std::string& sql,
                                   std::vector<Params>& params,
                                   std::string_view what) {
    std::vector<Rows> out;
    out.reserve(params.size());
    for (Params& p : params) {
      auto r = Run(sql, p, what);
      if (!r.ok()) return r.status();
      out.push_back(std::move(*r));
    }
    return out;
  }
  // Runs a statement without parameters as text (BEGIN, COMMIT, SET, DDL),
  // discarding any result.
  Status Exec(std::string_view sql, std::string_view what,
              Phase phase = Phase::kStatement);
  // What one statement of ExecCommit did.
  struct Done {
    std::int64_t affected = 0;
    // The first AUTO_INCREMENT value it generated (0: none).
    std::uint64_t insert_id = 0;
    // The first column of its first row, when it returned rows.
    std::optional<std::int64_t> value;
    // Its rows, as text (Rows::Int reads them), when it returned any.
    Rows rows;
  };
  // Runs `sql`, `count` statements that begin a transaction and commit it,
  // sent in one packet (CLIENT_MULTI_STATEMENTS): one round trip. The
  // statement at `commit_at` commits (COMMIT, or a CALL of a procedure
  // that commits inside). Returns what each did. The server stops at the
  // first statement that fails: a failure of the committing one, or a
  // connection lost once the packet may have reached the server, is
  // kOutcomeUnknown (as Exec's Phase::kCommit); a failure before it leaves
  // the transaction open (or rolled back by the server) for the caller to
  // roll back. A packet that could not be written at all (the server had
  // closed the connection) sets lost_at_begin: nothing of it ran.
  Result<std::vector<Done>> ExecCommit(std::string_view sql, std::size_t count,
                                       std::size_t commit_at,
                                       std::string_view what);
  // Exec of several statements (CLIENT_MULTI_STATEMENTS) whose last one
  // returns one integer: that integer.
  Result<std::int64_t> ExecScalar(std::string_view sql, std::string_view what);
  // Runs several statements in one packet (CLIENT_MULTI_STATEMENTS; the
  // store's own connections only) inside the open transaction: `done` gets
  // what each did up to the first that failed (the server runs none
  // after it), whose error is returned. `clean_ok`: as Run's.
  Status ExecSteps(std::string_view sql, std::string_view what,
                   std::vector<Done>* done, bool clean_ok = false);

  // The engine's own state of the open transaction, beside core's
  // (core::TxConn, whose retry_tx a deadlock or lock wait timeout sets).
  void ResetTxState() override;
  // We began a transaction on this connection and have not seen its COMMIT
  // or ROLLBACK succeed. Such a connection is closed (the server rolls the
  // transaction back), never pooled, whatever the server status flag says.
  bool tx_open = false;
  // The wake-up counters (Poller's kWakeSum) written to sqlq_counters by
  // this transaction (the wake-up poller ignores the process's own bumps).
  std::int64_t bumps = 0;
  // Session facts read at connect.
  std::int64_t auto_increment_increment = 1;
  bool consecutive_autoinc = true;
  // The server is MariaDB (which has DELETE ... RETURNING), not MySQL.
  bool mariadb = false;
  // The server's error number of the last failure on this connection.
  unsigned int last_errno() const { return last_errno_; }
  // The server is a node of a Galera cluster (wsrep_on).
  bool wsrep = false;
  // The server writes its binary log as statements (log_bin on, format
  // STATEMENT or MIXED).
  bool statement_log = false;
  // The row of each queue's counters this connection adds to
  // (MysqlEngine::ReadSession).
  int counter_slot = 0;

 private:
  Status Fail(unsigned int err, std::string_view message, std::string_view what,
              Phase phase, bool record);
  // Reads the answer of each statement of a text query that succeeded,
  // from the current one on (so that the connection is ready for the
  // next), into `done` when given. Returns mysql_next_result's last
  // answer: -1 when all were read, above 0 when a later statement failed
  // (mysql_errno says how).
  int ReadResults(std::vector<Done>* done);
  Result<MYSQL_STMT*> Prepared(const std::string& sql, std::string_view what);

  MYSQL* conn_;
  bool owned_;
  bool broken_ = false;
  unsigned int last_errno_ = 0;
  Recycler recycler_;
  std::unordered_map<std::string, MYSQL_STMT*> prepared_;
};

}  // namespace sqlq::engines::mysql

#endif  // SQLQ_ENGINES_MYSQL_MY_CONN_H_
