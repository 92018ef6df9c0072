#include "engines/postgres/pg_conn.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace sqlq::engines::postgres {

namespace {

// How long a server asked to cancel a COMMIT's wait has to answer.
constexpr std::chrono::seconds kCancelGrace{5};

std::string Trimmed(const char* s) {
  std::string out = s != nullptr ? s : "";
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) {
    out.pop_back();
  }
  return out;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

bool IsRetryableSqlState(std::string_view sqlstate) {
  return sqlstate == "40001" || sqlstate == "40P01";
}

bool IsFailoverSqlState(std::string_view sqlstate) {
  return sqlstate == "25006" || StartsWith(sqlstate, "57P") ||
         StartsWith(sqlstate, "08");
}

std::string NumberPlaceholders(std::string_view sql) {
  std::string out;
  out.reserve(sql.size() + 16);
  int n = 0;
  char quote = 0;  // the quote of the literal or identifier we are in
  for (char ch : sql) {
    if (quote != 0) {
      if (ch == quote) quote = 0;  // a doubled quote leaves and re-enters
    } else if (ch == '\'' || ch == '"') {
      quote = ch;
    } else if (ch == '?') {
      out += fmt::format("${}", ++n);
      continue;
    }
    out += ch;
  }
  return out;
}

Status Translate(const PGresult* res, PGconn* conn, std::string_view what,
                 Phase phase) {
  std::string detail = Trimmed(res != nullptr ? PQresultErrorMessage(res)
                                              : PQerrorMessage(conn));
  if (detail.empty() && conn != nullptr) detail = Trimmed(PQerrorMessage(conn));
  const std::string msg = fmt::format("{}: {}", what, detail);
  const char* state_field =
      res != nullptr ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  const std::string_view state = state_field != nullptr ? state_field : "";
  const bool lost = conn == nullptr || PQstatus(conn) == CONNECTION_BAD;

  if (phase == Phase::kConnect) {
    // libpq keeps the server's SQLSTATE of a failed connection to itself;
    // its messages are stable and in English for these cases.
    if (detail.find("password authentication failed") != std::string::npos ||
        detail.find("no password supplied") != std::string::npos ||
        detail.find("no pg_hba.conf entry") != std::string::npos ||
        detail.find("permission denied") != std::string::npos) {
      return Status::PermissionDenied(msg);
    }
    if (detail.find("does not exist") != std::string::npos &&
        detail.find("database") != std::string::npos) {
      return Status::NotFound(msg);
    }
    return Status::Unavailable(msg);
  }
  // A connection lost while COMMIT was on the wire: the server may have
  // committed. Never report that as retryable (status.h).
  if (phase == Phase::kCommit &&
      (lost || StartsWith(state, "08") || StartsWith(state, "57P"))) {
    return Status::OutcomeUnknown(fmt::format(
        "{} (the connection was lost during commit: the transaction may or "
        "may not have been committed)",
        msg));
  }
  if (state.empty()) {
    // Errors libpq makes up itself: lost connection, out of memory.
    return Status::Unavailable(msg);
  }
  if (IsRetryableSqlState(state) || state == "55P03") {
    return Status::Busy(msg);
  }
  if (StartsWith(state, "08") || StartsWith(state, "53") ||
      StartsWith(state, "57P") || StartsWith(state, "58")) {
    return Status::Unavailable(msg);
  }
  if (state == "57014") return Status::Timeout(msg);
  // A read-only transaction: this server is a standby, or a primary that a
  // failover demoted and whose connections were left open. The database
  // is writable elsewhere or will be soon: retryable, and the pool is
  // dropped (IsFailoverState).
  if (state == "25006") {
    return Status::Unavailable(fmt::format(
        "{} (the server is read-only: a standby, or a primary demoted by a "
        "failover)",
        msg));
  }
  // A statement this connection prepared is gone, or a name it is about
  // to prepare is taken (sqlq never prepares a name twice on one
  // connection): something between sqlq and the server hands each
  // transaction another server connection.
  if (state == "26000" || state == "42P05") {
    return Status::FailedPrecondition(fmt::format(
        "{} (a statement prepared on this connection is unknown to the "
        "server: a pooler in transaction mode, such as pgbouncer with "
        "pool_mode=transaction, is in between; sqlq needs session pooling)",
        msg));
  }
  if (state == "42501" || StartsWith(state, "28")) {
    return Status::PermissionDenied(msg);
  }
  if (state == "3D000") return Status::NotFound(msg);
  // A row of a dropped queue referenced: the queue is gone.
  if (state == "23503") return Status::NotFound(msg);
  if (state == "23505") return Status::AlreadyExists(msg);
  if (state == "54000") return Status::TooLarge(msg);
  if (state == "XX001" || state == "XX002") return Status::Corruption(msg);
  return Status::Internal(fmt::format("{} (SQLSTATE {})", msg, state));
}

Params& Params::Add(const char* p, int len, int format) {
  values_.push_back(p);
  lengths_.push_back(len);
  formats_.push_back(format);
  return *this;
}

Params& Params::Own(std::string v, int format) {
  storage_.push_back(std::move(v));
  const std::string& s = storage_.back();
  return Add(s.data(), static_cast<int>(s.size()), format);
}

Params& Params::Int(std::int64_t v) { return Own(std::to_string(v), 0); }
Params& Params::Text(std::string_view v) { return Own(std::string(v), 0); }
Params& Params::TextOrNull(std::string_view v) {
  return v.empty() ? Null() : Text(v);
}
Params& Params::Null() { return Add(nullptr, 0, 0); }
Params& Params::Bytes(std::string_view v) {
  // libpq reads `v.size()` bytes; a non-null pointer even when empty, so
  // that an empty payload is '' and not NULL.
  return Add(v.data() != nullptr ? v.data() : "", static_cast<int>(v.size()),
             1);
}

namespace {

// PostgreSQL's binary array format (array_recv): ndim, has-nulls flag,
// element type oid, then per dimension its length and lower bound, then
// each element as a 4-byte length (-1: NULL) and its bytes; all integers
// big-endian.
void PutU32(std::string& out, std::uint32_t v) {
  const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 8), static_cast<char>(v)};
  out.append(b, 4);
}

std::string ArrayHeader(std::uint32_t elem_oid, std::size_t n, bool has_nulls) {
  std::string out;
  PutU32(out, 1);  // dimensions
  PutU32(out, has_nulls ? 1 : 0);
  PutU32(out, elem_oid);
  PutU32(out, static_cast<std::uint32_t>(n));
  PutU32(out, 1);  // lower bound
  return out;
}

constexpr std::uint32_t kInt8Oid = 20;
constexpr std::uint32_t kByteaOid = 17;

}  // namespace

Params& Params::IntArray(const std::vector<std::int64_t>& v) {
  std::string out = ArrayHeader(kInt8Oid, v.size(), false);
  out.reserve(out.size() + v.size() * 12);
  for (std::int64_t x : v) {
    const auto u = static_cast<std::uint64_t>(x);
    PutU32(out, 8);
    PutU32(out, static_cast<std::uint32_t>(u >> 32));
    PutU32(out, static_cast<std::uint32_t>(u));
  }
  return Own(std::move(out), 1);
}

Params& Params::BytesArray(
    const std::vector<std::optional<std::string_view>>& v) {
  bool nulls = false;
  std::size_t bytes = 0;
  for (const auto& e : v) {
    nulls = nulls || !e.has_value();
    bytes += 4 + (e ? e->size() : 0);
  }
  std::string out = ArrayHeader(kByteaOid, v.size(), nulls);
  out.reserve(out.size() + bytes);
  for (const auto& e : v) {
    if (!e) {
      PutU32(out, 0xffffffffu);
      continue;
    }
    PutU32(out, static_cast<std::uint32_t>(e->size()));
    out.append(e->data(), e->size());
  }
  return Own(std::move(out), 1);
}

std::int64_t Rows::Int(int row, int col) const {
  const char* p = PQgetvalue(res_.get(), row, col);
  switch (PQgetlength(res_.get(), row, col)) {
    case 8: {
      std::uint64_t hi, lo;
      std::uint32_t h, l;
      std::memcpy(&h, p, 4);
      std::memcpy(&l, p + 4, 4);
      hi = ntohl(h);
      lo = ntohl(l);
      return static_cast<std::int64_t>((hi << 32) | lo);
    }
    case 4: {
      std::uint32_t v;
      std::memcpy(&v, p, 4);
      return static_cast<std::int32_t>(ntohl(v));
    }
    case 2: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      return static_cast<std::int16_t>(ntohs(v));
    }
    case 1:  // boolean
      return p[0] != 0 ? 1 : 0;
    default:
      return 0;
  }
}

std::string Rows::Bytes(int row, int col) const {
  return std::string(PQgetvalue(res_.get(), row, col),
                     PQgetlength(res_.get(), row, col));
}

std::int64_t Rows::affected() const {
  const char* n = PQcmdTuples(res_.get());
  return n != nullptr && *n != '\0' ? std::strtoll(n, nullptr, 10) : 0;
}

PgConn::~PgConn() {
  if (!owned_ || conn_ == nullptr) return;
  if (recycler_ && healthy() && PQtransactionStatus(conn_) == PQTRANS_IDLE) {
    auto heir = std::make_unique<PgConn>(conn_, /*owned=*/true);
    heir->prepared_ = std::move(prepared_);
    // The pool drops it, and the other idle ones, after a failover.
    heir->failover = failover;
    heir->watch_ = watch_;
    heir->watch_id_ = watch_id_;
    conn_ = nullptr;
    Recycler recycler = std::move(recycler_);
    recycler(std::move(heir));
    return;
  }
  if (watch_ != nullptr) watch_->Unregister(watch_id_);
  PQfinish(conn_);
}

void PgConn::Watch(LeaderWatch* watch) {
  if (watch_ != nullptr) watch_->Unregister(watch_id_);
  watch_ = watch;
  watch_id_ = watch_ != nullptr ? watch_->Register(conn_) : 0;
}

void PgConn::ResetTxState() {
  core::TxConn::ResetTxState();
  pending_begin_ = nullptr;
  staged_.clear();
  notify = false;
  churned = 0;
  counted = 0;
  began = std::chrono::steady_clock::now();
  claims.clear();
  ready_floor.clear();
}

PgConn::PgConn(PGconn* conn, bool owned) : conn_(conn), owned_(owned) {
  // A caller's own connection (JoinTx) keeps the caller's receiver: its
  // COMMIT is the caller's.
  if (owned_ && conn_ != nullptr) {
    PQsetNoticeReceiver(conn_, &PgConn::OnNotice, this);
  }
}

void PgConn::OnNotice(void* self, const PGresult* notice) {
  // The two warnings of a cancelled wait for a synchronous standby
  // (PostgreSQL's syncrep.c): SQLSTATE 01000 after a cancel, 57P01 when the
  // session is being terminated. Both come as a WARNING with the COMMIT's
  // success; no other warning comes with a COMMIT that sqlq sends (its
  // transactions are always open then). Other notices ("relation already
  // exists, skipping") would have gone to stderr, which belongs to the
  // application: they are dropped.
  const char* severity =
      PQresultErrorField(notice, PG_DIAG_SEVERITY_NONLOCALIZED);
  const char* state = PQresultErrorField(notice, PG_DIAG_SQLSTATE);
  if (severity == nullptr || state == nullptr) return;
  const std::string_view code(state);
  if (std::string_view(severity) == "WARNING" &&
      (code == "01000" || code == "57P01")) {
    static_cast<PgConn*>(self)->replication_wait_cancelled_ = true;
  }
}

Status PgConn::CommitAnswered(std::string_view what) {
  if (!replication_wait_cancelled_) return Status::Ok();
  replication_wait_cancelled_ = false;
  // The server may be about to lose this commit in a failover: the
  // connection is not reused, and the pool starts afresh.
  failover = true;
  return Status::OutcomeUnknown(fmt::format(
      "{}: the server committed locally but its wait for the synchronous "
      "standby was cancelled: the transaction may be lost if the server "
      "fails over now",
      what));
}

void PgConn::CommitSent() {
  commit_deadline_ = std::chrono::steady_clock::now() + commit_timeout_;
  commit_cancelled_ = false;
}

bool PgConn::AwaitCommitAnswer() {
  if (commit_timeout_.count() <= 0) return true;
  using std::chrono::milliseconds;
  using std::chrono::steady_clock;
  while (PQisBusy(conn_) == 1) {
    const auto left =
        std::chrono::ceil<milliseconds>(commit_deadline_ - steady_clock::now());
    if (left.count() > 0) {
      pollfd p{.fd = PQsocket(conn_), .events = POLLIN, .revents = 0};
      const int r = ::poll(&p, 1, static_cast<int>(left.count()));
      if (r < 0 && errno != EINTR) return true;  // libpq will report it
      if (r > 0 && PQconsumeInput(conn_) == 0) return true;  // the same
      continue;
    }
    if (!commit_cancelled_) {
      // A cancelled wait for a standby is answered at once; a server that
      // answers nothing even then is given up on after kCancelGrace.
      commit_cancelled_ = true;
      commit_deadline_ = steady_clock::now() + kCancelGrace;
      // The wait below outlives the cancel's thread.
      if (PGcancel* cancel = PQgetCancel(conn_)) CancelDetached(cancel);
      continue;
    }
    ::shutdown(PQsocket(conn_), SHUT_RDWR);
    (void)PQconsumeInput(conn_);
    failover = true;
    return false;
  }
  return true;
}

Status PgConn::CommitUnanswered(std::string_view what) {
  return Status::OutcomeUnknown(fmt::format(
      "{}: no answer within commit_timeout_ms ({} ms), nor after asking the "
      "server to cancel: the transaction may or may not have been committed",
      what, commit_timeout_.count()));
}

Status PgConn::Failed(const PGresult* res, std::string_view what, Phase phase) {
  const char* state =
      res != nullptr ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  if (state != nullptr && IsRetryableSqlState(state)) retry_tx = true;
  if ((state != nullptr && IsFailoverSqlState(state)) || !healthy()) {
    failover = true;
  }
  return Translate(res, conn_, what, phase);
}

Status PgConn::Fail(const PGresult* res, std::string_view what, Phase phase) {
  Status s = Failed(res, what, phase);
  tx_error = s;
  return s;
}

void CancelDetached(PGcancel* cancel) {
  std::thread([cancel] {
    char err[256];
    (void)PQcancel(cancel, err, sizeof err);
    PQfreeCancel(cancel);
  }).detach();
}

PgResult PgConn::NextResult() {
  PgResult res(PQgetResult(conn_));
  // The null that ends this command's results.
  while (PgResult extra{PQgetResult(conn_)}) {
  }
  return res;
}

bool PgConn::SessionEnding(const PGresult* res) const {
  if (!healthy()) return true;
  const char* state =
      res != nullptr ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  // 57P01-57P03: admin or crash shutdown, cannot connect now; class 08:
  // connection exception. The server may already be gone, but another
  // connection may work.
  const std::string_view code(state != nullptr ? state : "");
  return code.starts_with("57P") || code.starts_with("08");
}

bool PgConn::SendBegin() {
  if (pending_begin_ == nullptr) return true;
  return PQsendQueryParams(conn_, pending_begin_, 0, nullptr, nullptr, nullptr,
                           nullptr, 0) == 1;
}

std::optional<Status> PgConn::ReadBegin() {
  if (pending_begin_ == nullptr) return std::nullopt;
  pending_begin_ = nullptr;
  PgResult res = NextResult();
  if (res != nullptr && PQresultStatus(res.get()) == PGRES_COMMAND_OK) {
    return std::nullopt;
  }
  if (SessionEnding(res.get())) lost_at_begin = true;
  return Fail(res.get(), "begin transaction", Phase::kStatement);
}

Status PgConn::FlushBegin() {
  if (pending_begin_ == nullptr) return Status::Ok();
  const char* sql = pending_begin_;
  pending_begin_ = nullptr;
  auto r = Exec(sql, "begin transaction");
  if (r.ok()) return Status::Ok();
  if (!healthy()) lost_at_begin = true;
  tx_error = r.status();
  return r.status();
}

Result<std::string> PgConn::Prepared(const char* sql, std::string_view what,
                                     Phase phase) {
  auto it = prepared_.find(sql);
  if (it != prepared_.end()) return it->second;
  std::string name = fmt::format("sqlq_{}", prepared_.size());
  PgResult res(PQprepare(conn_, name.c_str(), sql, 0, nullptr));
  if (res == nullptr || PQresultStatus(res.get()) != PGRES_COMMAND_OK) {
    return Fail(res.get(), what, phase);
  }
  prepared_.emplace(sql, name);
  return name;
}

Result<Rows> PgConn::Run(const char* sql, const Params& params,
                         std::string_view what, Phase phase) {
  // Once a statement failed, PostgreSQL refuses everything but ROLLBACK;
  // report the first error again rather than "transaction is aborted".
  if (tx_error) return *tx_error;
  if (!owned_) {
    // A caller's connection (JoinTx): named statements would outlive this
    // wrapper and collide with the next one's, so use unnamed ones.
    PgResult res(PQexecParams(conn_, sql, params.size(), nullptr,
                              params.values(), params.lengths(),
                              params.formats(), /*resultFormat=*/1));
    return Finish(std::move(res), what, phase);
  }
  auto name = Prepared(sql, what, phase);
  if (!name.ok()) return name.status();
  if (pending_begin_ != nullptr) return RunAfterBegin(*name, params, what);
  PgResult res(PQexecPrepared(conn_, name->c_str(), params.size(),
                              params.values(), params.lengths(),
                              params.formats(), /*resultFormat=*/1));
  return Finish(std::move(res), what, phase);
}

Result<Rows> PgConn::RunOnce(const std::string& sql, const Params& params,
                             std::string_view what) {
  if (tx_error) return *tx_error;
  if (pending_begin_ != nullptr) {
    // The deferred BEGIN goes with a statement that is kept prepared.
    auto begun = Run("SELECT 1", Params(), what);
    if (!begun.ok()) return begun.status();
  }
  PgResult res(PQexecParams(conn_, sql.c_str(), params.size(), nullptr,
                            params.values(), params.lengths(), params.formats(),
                            /*resultFormat=*/1));
  return Finish(std::move(res), what, Phase::kStatement);
}

Result<Rows> PgConn::RunAfterBegin(const std::string& name,
                                   const Params& params,
                                   std::string_view what) {
  auto lost = [&](Status s) {
    if (!healthy()) lost_at_begin = true;
    return s;
  };
  if (PQenterPipelineMode(conn_) != 1) {
    return lost(Fail(nullptr, what, Phase::kStatement));
  }
  const bool sent =
      SendBegin() &&
      PQsendQueryPrepared(conn_, name.c_str(), params.size(), params.values(),
                          params.lengths(), params.formats(),
                          /*resultFormat=*/1) == 1 &&
      PQpipelineSync(conn_) == 1;
  if (!sent) {
    pending_begin_ = nullptr;
    Status s = Fail(nullptr, what, Phase::kStatement);
    (void)PQexitPipelineMode(conn_);
    return lost(s);
  }
  std::optional<Status> failed = ReadBegin();
  PgResult res = NextResult();
  PgResult sync(PQgetResult(conn_));
  const bool exited = PQexitPipelineMode(conn_) == 1;
  if (failed) return lost(*failed);
  const ExecStatusType st =
      res != nullptr ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    return lost(Fail(res.get(), what, Phase::kStatement));
  }
  if (sync == nullptr || PQresultStatus(sync.get()) != PGRES_PIPELINE_SYNC ||
      !exited) {
    return lost(Fail(sync.get(), what, Phase::kStatement));
  }
  return Rows(std::move(res));
}

Result<Rows> PgConn::Finish(PgResult res, std::string_view what, Phase phase) {
  const ExecStatusType st =
      res != nullptr ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    return Fail(res.get(), what, phase);
  }
  return Rows(std::move(res));
}

Result<std::vector<Rows>> PgConn::RunAll(const char* sql,
                                         const std::vector<Params>& params,
                                         std::string_view what) {
  std::vector<Rows> out;
  out.reserve(params.size());
  if (!owned_ || params.size() == 1) {
    for (const Params& p : params) {
      auto r = Run(sql, p, what);
      if (!r.ok()) return r.status();
      out.push_back(std::move(*r));
    }
    return out;
  }
  if (tx_error) return *tx_error;
  auto name = Prepared(sql, what, Phase::kStatement);
  if (!name.ok()) return name.status();
  if (Status b = FlushBegin(); !b.ok()) return b;
  // Chunks bound what the server writes back before we read it: with a
  // blocking socket, a pipeline whose results fill both socket buffers
  // would stall us and the server on each other.
  constexpr std::size_t kChunk = 256;
  for (std::size_t from = 0; from < params.size(); from += kChunk) {
    const std::size_t to = std::min(params.size(), from + kChunk);
    if (PQenterPipelineMode(conn_) != 1)
      return Fail(nullptr, what, Phase::kStatement);
    bool sent = true;
    for (std::size_t i = from; i < to && sent; ++i) {
      const Params& p = params[i];
      sent = PQsendQueryPrepared(conn_, name->c_str(), p.size(), p.values(),
                                 p.lengths(), p.formats(),
                                 /*resultFormat=*/1) == 1;
    }
    if (sent) sent = PQpipelineSync(conn_) == 1;
    if (!sent) {
      Status s = Fail(nullptr, what, Phase::kStatement);
      (void)PQexitPipelineMode(conn_);
      return s;
    }
    // One result (then a null) per statement, then the sync's.
    std::optional<Status> failed;
    for (std::size_t i = from; i < to; ++i) {
      PgResult res = NextResult();
      const ExecStatusType st =
          res != nullptr ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
      if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        out.emplace_back(std::move(res));
      } else if (!failed) {
        failed = Fail(res.get(), what, Phase::kStatement);
      }
    }
    PgResult sync(PQgetResult(conn_));
    const bool exited = PQexitPipelineMode(conn_) == 1;
    if (failed) return *failed;
    if (sync == nullptr || PQresultStatus(sync.get()) != PGRES_PIPELINE_SYNC) {
      return Fail(sync.get(), what, Phase::kStatement);
    }
    if (!exited) return Fail(nullptr, what, Phase::kStatement);
  }
  return out;
}

void PgConn::StageForCommit(const char* sql, Params params,
                            std::string_view what,
                            std::function<void(const Rows&)> on_rows) {
  staged_.push_back(Staged{.sql = sql,
                           .params = std::move(params),
                           .what = std::string(what),
                           .on_rows = std::move(on_rows)});
}

Status PgConn::RunAndCommit(const char* sql, const std::vector<Params>& params,
                            std::string_view what) {
  if (tx_error) return *tx_error;
  std::vector<Staged> staged = std::move(staged_);
  staged_.clear();
  auto name = Prepared(sql, what, Phase::kStatement);
  if (!name.ok()) return name.status();
  std::vector<std::string> staged_names;
  for (const Staged& st : staged) {
    auto n = Prepared(st.sql, st.what, Phase::kStatement);
    if (!n.ok()) return n.status();
    staged_names.push_back(std::move(*n));
  }
  auto rollback = [&](Status s) {
    if (PQtransactionStatus(conn_) == PQTRANS_INERROR ||
        PQtransactionStatus(conn_) == PQTRANS_INTRANS) {
      (void)Exec("ROLLBACK", "rollback");
    }
    return s;
  };
  if (PQenterPipelineMode(conn_) != 1) {
    return rollback(Fail(nullptr, what, Phase::kStatement));
  }
  auto send = [&](const std::string& n, const Params& p) {
    return PQsendQueryPrepared(conn_, n.c_str(), p.size(), p.values(),
                               p.lengths(), p.formats(),
                               /*resultFormat=*/1) == 1;
  };
  const bool with_begin = begin_pending();
  replication_wait_cancelled_ = false;
  bool sent = SendBegin();
  for (std::size_t i = 0; i < staged.size() && sent; ++i) {
    sent = send(staged_names[i], staged[i].params);
  }
  for (std::size_t i = 0; i < params.size() && sent; ++i) {
    sent = send(*name, params[i]);
  }
  if (sent) {
    sent = PQsendQueryParams(conn_, "COMMIT", 0, nullptr, nullptr, nullptr,
                             nullptr, 0) == 1 &&
           PQpipelineSync(conn_) == 1;
  }
  if (!sent) {
    // Maybe nothing reached the server, maybe everything did.
    pending_begin_ = nullptr;
    Status s = Fail(nullptr, "commit", Phase::kCommit);
    (void)PQexitPipelineMode(conn_);
    return s;
  }
  // The server sends the pipeline's results when it reaches the sync, so a
  // COMMIT that waits holds back the answers before it too: every read
  // below is bounded by the commit timeout.
  CommitSent();
  bool unanswered = false;
  auto read = [&]() -> PgResult {
    if (unanswered || !AwaitCommitAnswer()) {
      unanswered = true;
      return nullptr;
    }
    return NextResult();
  };
  // A lost connection anywhere in here may have taken the COMMIT with it.
  auto phase = [&] { return healthy() ? Phase::kStatement : Phase::kCommit; };
  std::optional<Status> failed;
  auto next = [&](std::string_view stmt) -> PgResult {
    PgResult res = read();
    const ExecStatusType st =
        res != nullptr ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
      if (!failed) failed = Fail(res.get(), stmt, phase());
      return nullptr;
    }
    return res;
  };
  if (with_begin) {
    pending_begin_ = nullptr;
    PgResult res = read();
    if (res == nullptr || PQresultStatus(res.get()) != PGRES_COMMAND_OK) {
      // An error the server sent as BEGIN's answer (a SQLSTATE, as when it
      // was ending the session: pg_terminate_backend, shutdown) means it ran
      // nothing of the pipeline, so the transaction may run again on
      // another connection. Without one, libpq lost the connection and
      // cannot tell how far the server got.
      const char* state = res != nullptr
                              ? PQresultErrorField(res.get(), PG_DIAG_SQLSTATE)
                              : nullptr;
      const bool from_server = state != nullptr;
      failed = Fail(res.get(), "begin transaction",
                    from_server ? Phase::kStatement : phase());
      lost_at_begin = from_server && SessionEnding(res.get());
    }
  }
  std::vector<std::optional<Rows>> staged_rows(staged.size());
  for (std::size_t i = 0; i < staged.size(); ++i) {
    if (PgResult res = next(staged[i].what)) {
      staged_rows[i].emplace(std::move(res));
    }
  }
  for (std::size_t i = 0; i < params.size(); ++i) (void)next(what);
  PgResult commit = read();
  if (unanswered) {
    (void)PQexitPipelineMode(conn_);
    return CommitUnanswered("commit");
  }
  PgResult sync(PQgetResult(conn_));
  const bool exited = PQexitPipelineMode(conn_) == 1;
  if (failed) return rollback(*failed);
  const ExecStatusType st =
      commit != nullptr ? PQresultStatus(commit.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK) {
    return rollback(Fail(commit.get(), "commit", Phase::kCommit));
  }
  if (std::string_view(PQcmdStatus(commit.get())) == "ROLLBACK") {
    return Status::Internal(
        "commit: the transaction had failed and was rolled back");
  }
  if (!exited) {
    // Committed; the connection is in a state we do not know, so it must
    // not be reused.
    PQreset(conn_);
    Watch(watch_);  // its socket is another now
  }
  if (Status answered = CommitAnswered("commit"); !answered.ok()) {
    return answered;
  }
  for (std::size_t i = 0; i < staged.size(); ++i) {
    if (staged_rows[i]) staged[i].on_rows(*staged_rows[i]);
  }
  return Status::Ok();
}

bool PgConn::ClosedWhileIdle() {
  const int fd = PQsocket(conn_);
  if (fd < 0) return true;
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  if (::poll(&p, 1, 0) <= 0) return false;  // nothing arrived: still open
  // The server said something while we were idle: usually that it is
  // closing the connection (shutdown, pg_terminate_backend) and did.
  return PQconsumeInput(conn_) == 0 || !healthy();
}

Result<std::string> PgConn::Exec(const char* sql, std::string_view what,
                                 Phase phase) {
  if (pending_begin_ != nullptr) {
    // The transaction ran no statement: there is nothing to commit or roll
    // back, and nothing to send.
    const std::string_view verb(sql);
    if (verb == "ROLLBACK" || (verb == "COMMIT" && staged_.empty())) {
      pending_begin_ = nullptr;
      staged_.clear();
      return std::string(verb);
    }
    if (Status b = FlushBegin(); !b.ok()) return b;
  }
  PgResult res;
  if (phase == Phase::kCommit) {
    replication_wait_cancelled_ = false;
    if (PQsendQuery(conn_, sql) != 1) return Failed(nullptr, what, phase);
    CommitSent();
    if (!AwaitCommitAnswer()) return CommitUnanswered(what);
    // As PQexec: the last result.
    while (PgResult next{PQgetResult(conn_)}) res = std::move(next);
  } else {
    res.reset(PQexec(conn_, sql));
  }
  const ExecStatusType st =
      res != nullptr ? PQresultStatus(res.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    return Failed(res.get(), what, phase);
  }
  std::string tag(PQcmdStatus(res.get()));
  if (phase == Phase::kCommit && tag == "COMMIT") {
    if (Status answered = CommitAnswered(what); !answered.ok()) {
      return answered;
    }
  }
  return tag;
}

}  // namespace sqlq::engines::postgres
