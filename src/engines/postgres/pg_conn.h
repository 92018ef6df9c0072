// A libpq connection with per-connection prepared statements, parameter and
// result helpers, and the one function that translates PostgreSQL errors
// into sqlq statuses.

#ifndef SQLQ_ENGINES_POSTGRES_PG_CONN_H_
#define SQLQ_ENGINES_POSTGRES_PG_CONN_H_

#include <libpq-fe.h>

#include <chrono>
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
#include "engines/postgres/claim_marks.h"
#include "engines/postgres/leader_watch.h"

namespace sqlq::engines::postgres {

// How a failed command ended, for Translate.
enum class Phase {
  kConnect,    // opening a connection: libpq reports no SQLSTATE there
  kStatement,  // any statement but COMMIT
  kCommit,     // COMMIT: a lost connection leaves the outcome unknown
};

// The single translation of PostgreSQL errors into sqlq codes. `res` may be
// null (libpq could not even send the command); `what` says what was being
// done ("claim").
Status Translate(const PGresult* res, PGconn* conn, std::string_view what,
                 Phase phase = Phase::kStatement);

// True for the SQLSTATEs that mean "run the transaction again"
// (serialization failure, deadlock).
bool IsRetryableSqlState(std::string_view sqlstate);

// True for the SQLSTATEs of a server that cannot take writes now: read-only
// (25006: a standby, or a demoted primary), shutting down or not accepting
// connections (57P01-57P03), connection exceptions (class 08). The pool is
// dropped on them (core::TxConn::failover).
bool IsFailoverSqlState(std::string_view sqlstate);

// `sql` written with ? placeholders (as the SQL the engines share is) with
// PostgreSQL's $1, $2, ... in their place, in order. A ? inside a quoted
// literal or identifier stays.
std::string NumberPlaceholders(std::string_view sql);

// Asks the server to cancel what runs on the connection `cancel` was made
// for (PQgetCancel), on a thread of its own, and frees `cancel`: PQcancel
// has no timeout, and a server whose postmaster is stopped takes the
// request's connection and never answers.
void CancelDetached(PGcancel* cancel);

struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResult = std::unique_ptr<PGresult, ResultDeleter>;

// Parameters of one statement. Integers go as text (PostgreSQL parses them
// into the parameter's declared type); bytea payloads go in binary format so
// that they are neither escaped nor copied into hex.
class Params {
 public:
  Params() = default;
  // values_ points into storage_ (and into callers' bytes): a moved deque
  // keeps its elements in place, a copied one would not.
  Params(const Params&) = delete;
  Params& operator=(const Params&) = delete;
  Params(Params&&) = default;
  Params& operator=(Params&&) = default;

  Params& Int(std::int64_t v);
  Params& Text(std::string_view v);
  // Empty text binds NULL.
  Params& TextOrNull(std::string_view v);
  Params& Null();
  // Binary bytes; `v` must outlive the statement's execution.
  Params& Bytes(std::string_view v);
  // A payload: bytes, as Bytes (SQLite stores them apart from keys).
  Params& Payload(std::string_view v) { return Bytes(v); }
  // One-dimensional arrays in binary format, for `unnest($n::bigint[])` and
  // `unnest($n::bytea[])`: one parameter for a whole batch of rows. The
  // statement must cast the parameter to exactly that array type (the
  // server checks the element type). Copies the elements; nullopt is NULL.
  Params& IntArray(const std::vector<std::int64_t>& v);
  Params& BytesArray(const std::vector<std::optional<std::string_view>>& v);

  int size() const { return static_cast<int>(values_.size()); }
  const char* const* values() const { return values_.data(); }
  const int* lengths() const { return lengths_.data(); }
  const int* formats() const { return formats_.data(); }

 private:
  Params& Add(const char* p, int len, int format);
  Params& Own(std::string v, int format);
  // Owned copies of integers and text; a deque keeps them in place while
  // values_ points into them.
  std::deque<std::string> storage_;
  std::vector<const char*> values_;
  std::vector<int> lengths_;
  std::vector<int> formats_;
};

// Reads a binary-format result: integers by their width (int2/int4/int8),
// booleans, text and bytea as raw bytes.
class Rows {
 public:
  explicit Rows(PgResult res) : res_(std::move(res)) {}
  int size() const { return PQntuples(res_.get()); }
  bool IsNull(int row, int col) const {
    return PQgetisnull(res_.get(), row, col) != 0;
  }
  std::int64_t Int(int row, int col) const;
  std::string Bytes(int row, int col) const;
  // Rows affected by an INSERT/UPDATE/DELETE.
  std::int64_t affected() const;

 private:
  PgResult res_;
};

using core::QueueCounters;

class PgConn : public core::TxConn {
 public:
  // Takes ownership of `conn` when `owned`.
  // An owned connection's server notices come to this wrapper (the
  // warning of a cancelled synchronous-replication wait, see Exec).
  PgConn(PGconn* conn, bool owned);
  ~PgConn() override;

  // Where an owned connection goes when this wrapper is destroyed, instead
  // of being closed: set on connections lent to a caller's Tx, which core
  // destroys after commit, so that they return to the engine's pool with
  // their prepared statements. Called only for healthy, idle connections.
  using Recycler = std::function<void(std::unique_ptr<PgConn>)>;
  void set_recycler(Recycler r) { recycler_ = std::move(r); }

  PGconn* pg() const { return conn_; }
  bool healthy() const { return PQstatus(conn_) == CONNECTION_OK; }
  bool StillOpen() { return healthy() && !ClosedWhileIdle(); }
  bool Poolable() const {
    return healthy() && PQtransactionStatus(conn_) == PQTRANS_IDLE;
  }

  // Runs `sql`, prepared once per connection (the cache is keyed by the
  // address of `sql`, which must have static storage). Results come in
  // binary format. On error returns the translated status and remembers
  // that the transaction is aborted.
  Result<Rows> Run(const char* sql, const Params& params, std::string_view what,
                   Phase phase = Phase::kStatement);
  // The same for a statement built once (Dialect::Statement): `sql` must
  // have static storage too.
  // Runs a statement built at run time (its text differs from call to
  // call), unprepared: it is not kept on the connection.
  Result<Rows> RunOnce(const std::string& sql, const Params& params,
                       std::string_view what);
  Result<Rows> Run(const std::string& sql, const Params& params,
                   std::string_view what, Phase phase = Phase::kStatement) {
    return Run(sql.c_str(), params, what, phase);
  }
  // Runs `sql` once per element of `params`, in order, in pipeline mode: a
  // round trip per chunk of statements instead of per statement. The first
  // failure fails the whole call (and, as with Run, the transaction).
  Result<std::vector<Rows>> RunAll(const char* sql,
                                   const std::vector<Params>& params,
                                   std::string_view what);
  Result<std::vector<Rows>> RunAll(const std::string& sql,
                                   const std::vector<Params>& params,
                                   std::string_view what) {
    return RunAll(sql.c_str(), params, what);
  }
  // Runs `sql` once per element of `params`, then COMMIT, all in one
  // pipeline, after the deferred BEGIN and the staged statement if there
  // are: the statements that must precede the commit cost no round trip of
  // their own. Once the pipeline is sent, a lost connection is
  // kOutcomeUnknown. On failure the transaction is rolled back if it can
  // be. REQUIRES: an owned connection.
  Status RunAndCommit(const char* sql, const std::vector<Params>& params,
                      std::string_view what);
  // Stages `sql` (static storage) to run in the commit's pipeline
  // (RunAndCommit), for a statement whose result is wanted only once the
  // transaction committed: a transaction of that one statement is then a
  // single round trip, BEGIN and COMMIT included. `on_rows` gets its result
  // after the commit succeeded; it is dropped if the commit fails or the
  // transaction is run again. Statements staged one after the other run in
  // that order (a later one sees what an earlier one wrote).
  void StageForCommit(const char* sql, Params params, std::string_view what,
                      std::function<void(const Rows&)> on_rows);
  bool has_staged() const { return !staged_.empty(); }
  // For a pooled idle connection: true when the server closed it meanwhile
  // (restart, idle timeout, pg_terminate_backend), which shows only as
  // something to read on its socket. Costs a poll, no round trip.
  bool ClosedWhileIdle();
  // How long the answer to a COMMIT is awaited before the server is asked
  // to cancel what it waits for (AwaitCommitAnswer); zero: for ever.
  void set_commit_timeout(std::chrono::milliseconds t) { commit_timeout_ = t; }
  // Registers the connection with `watch`, which shuts it down when another
  // server leads (LeaderWatch); it unregisters when it closes.
  void Watch(LeaderWatch* watch);
  // Runs a statement without parameters through the simple protocol (BEGIN,
  // COMMIT...). Returns the command tag on success.
  Result<std::string> Exec(const char* sql, std::string_view what,
                           Phase phase = Phase::kStatement);

  // Defers `begin_sql` (static storage) until the transaction's first
  // statement, which it then precedes in one pipeline: the BEGIN costs no
  // round trip of its own, and a transaction that runs no statement costs
  // none at all (its COMMIT or ROLLBACK is answered here). Only on owned
  // connections.
  void DeferBegin(const char* begin_sql) { pending_begin_ = begin_sql; }
  bool begin_pending() const { return pending_begin_ != nullptr; }
  // lost_at_begin (core::TxConn) is set when the connection was lost in
  // the round trip that carried the deferred BEGIN: nothing of the
  // transaction reached the server.

  // The engine's own state of the open transaction, beside core's.
  void ResetTxState() override;
  // The transaction made messages claimable: after its commit, other
  // processes get a (coalesced) NOTIFY.
  bool notify = false;
  // Message rows this transaction updated or deleted (dead row versions it
  // leaves behind), for the Vacuumer after commit.
  std::int64_t churned = 0;
  // Counter delta rows this transaction appended, for the fold.
  std::int64_t counted = 0;
  // When this transaction began (ClaimMarks: how long its writes took to
  // commit).
  std::chrono::steady_clock::time_point began;
  // Claims made in this transaction, for ClaimMarks once it committed.
  struct ClaimDone {
    std::int64_t queue_id;
    ClaimMarks::Plan plan;
    std::optional<ClaimKey> last;
    std::int64_t now_us;
    std::chrono::steady_clock::duration cost;
  };
  std::vector<ClaimDone> claims;
  // Per queue, the smallest ready_us this transaction gave a message it
  // made claimable (send, nack, redrive).
  std::unordered_map<std::int64_t, std::int64_t> ready_floor;
  void MadeReady(std::int64_t queue_id, std::int64_t ready_us) {
    auto [it, fresh] = ready_floor.emplace(queue_id, ready_us);
    if (!fresh && ready_us < it->second) it->second = ready_us;
  }

 private:
  Result<Rows> Finish(PgResult res, std::string_view what, Phase phase);
  // Runs the deferred BEGIN and then the prepared statement `name`, in one
  // round trip.
  Result<Rows> RunAfterBegin(const std::string& name, const Params& params,
                             std::string_view what);
  // The name of `sql` prepared on this connection, preparing it first.
  Result<std::string> Prepared(const char* sql, std::string_view what,
                               Phase phase);
  // The status of a failed command; notes whether the transaction may run
  // again (retry_tx) and whether the server is failing over (failover).
  Status Failed(const PGresult* res, std::string_view what, Phase phase);
  // Failed, remembered as the transaction's error.
  Status Fail(const PGresult* res, std::string_view what, Phase phase);
  // libpq's notice receiver for owned connections: notes the warning
  // PostgreSQL sends with a COMMIT whose wait for a synchronous standby was
  // cancelled (pg_cancel_backend, pg_terminate_backend or a shutdown;
  // statement_timeout is off while a COMMIT waits, so never this): the
  // transaction committed on this server but may not have reached the standby,
  // so a failover can still lose it.
  static void OnNotice(void* self, const PGresult* notice);
  // The outcome of a COMMIT the server answered with success: OK, or
  // kOutcomeUnknown when a cancelled replication wait was reported with it.
  Status CommitAnswered(std::string_view what);
  // In pipeline mode: sends the deferred BEGIN, if any, ahead of what
  // follows. ReadBegin reads its result (after which the pipeline's next
  // results are the statements'); a failure is remembered as the
  // transaction's error.
  bool SendBegin();
  std::optional<Status> ReadBegin();
  // Runs the deferred BEGIN on its own.
  Status FlushBegin();
  // Called once a COMMIT is sent (CommitSent), before each read of its
  // round trip's answers: waits until the next answer is there, up to
  // commit_timeout_ from when the COMMIT was sent. A COMMIT that waits for a
  // synchronous standby that does not answer (one rebuilt, or following another
  // leader while this server, fenced off but still running, believes it leads)
  // waits for ever: past the timeout the server is asked to cancel that wait,
  // after which it answers with success and the warning CommitAnswered reports.
  // False when even then no answer came: the connection is then shut down, and
  // CommitUnanswered says what happened.
  bool AwaitCommitAnswer();
  // Starts the commit timeout's clock: a COMMIT was just sent.
  void CommitSent();
  Status CommitUnanswered(std::string_view what);
  // In pipeline mode: the next command's result, its terminating null read.
  PgResult NextResult();
  // True when `res` (an error) or the connection's state says that this
  // session is over.
  bool SessionEnding(const PGresult* res) const;

  const char* pending_begin_ = nullptr;
  struct Staged {
    const char* sql;
    Params params;
    std::string what;
    std::function<void(const Rows&)> on_rows;
  };
  std::vector<Staged> staged_;

  PGconn* conn_;
  bool owned_;
  // Set by OnNotice; cleared before each COMMIT is sent.
  bool replication_wait_cancelled_ = false;
  std::chrono::milliseconds commit_timeout_{0};
  LeaderWatch* watch_ = nullptr;
  std::uint64_t watch_id_ = 0;
  std::chrono::steady_clock::time_point commit_deadline_;
  bool commit_cancelled_ = false;
  Recycler recycler_;
  std::unordered_map<const char*, std::string> prepared_;  // sql -> name
};

}  // namespace sqlq::engines::postgres

#endif  // SQLQ_ENGINES_POSTGRES_PG_CONN_H_
