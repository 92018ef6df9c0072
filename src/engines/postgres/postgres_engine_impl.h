// The PostgreSQL engine class, shared by the files that implement
// it by concern (postgres_engine.cc, postgres_queue.cc, postgres_claim.cc,
// postgres_migrate.cc). Rings, rotations and the rest of what it shares
// with the MariaDB engine are in engines/shared/, with PostgreSQL's SQL for
// them in dialect.h and postgres_shared.cc. Internal: included by those
// files only.
//
// The PostgreSQL engine. Design notes: docs/engines/postgres.md.
//
// Connections: a pool of libpq connections, each with its own prepared
// statements. Unlike SQLite, PostgreSQL lets writers run side by side, so
// Write() does not serialise: the core's WriteBatcher already merges one
// process's writes, and processes contend only on the rows they touch.
// Write transactions run at READ COMMITTED; claims lock their rows with
// FOR UPDATE SKIP LOCKED, so a claim never waits on another consumer.
// Reads run in a REPEATABLE READ READ ONLY snapshot.
//
// Clean failures (engine.h): any failed statement aborts a PostgreSQL
// transaction, so operations detect their clean failures (unknown queue,
// stale receipt, existing name, duplicate dedup key) without a failing
// statement: ON CONFLICT DO NOTHING, zero affected rows, lookups. A failed
// statement is remembered on the connection (PgConn::tx_error) and the
// transaction is then never committed.
//
// Time: the database clock, now() (the transaction's start), fetched with
// BEGIN in the same round trip, unless StoreOptions::clock is set; either
// way every statement gets "now" as a parameter, and Now() returns the
// same value.

#ifndef SQLQ_ENGINES_POSTGRES_POSTGRES_ENGINE_IMPL_H_
#define SQLQ_ENGINES_POSTGRES_POSTGRES_ENGINE_IMPL_H_

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/errors.h"
#include "core/migrate.h"
#include "core/rows.h"
#include "core/tx_conn.h"
#include "core/url_params.h"
#include "engines/entry.h"
#include "engines/postgres/claim_marks.h"
#include "engines/postgres/dialect.h"
#include "engines/postgres/leader_watch.h"
#include "engines/postgres/notifier.h"
#include "engines/postgres/pg_conn.h"
#include "engines/postgres/schema.h"
#include "engines/postgres/statements.h"
#include "engines/postgres/vacuumer.h"
#include "engines/shared/pooled_sql_engine.h"

namespace sqlq::engines::postgres {

using core::Conn;
using core::Micros;

// Group commits run at once (Engine::write_groups); the URL parameter
// write_groups overrides. Measured on 2 cores (docs/benchmarks.md): 64
// single senders gain most up to 4; more groups only add connections and
// lock traffic.
constexpr int kWriteGroups = 4;
// The store vacuums the message table itself (vacuumer.h) once this many
// message rows were updated or deleted, at most once per kVacuumInterval;
// the URL parameter vacuum_rows overrides (0: never, autovacuum only).
constexpr std::int64_t kVacuumRows = 20000;
constexpr std::chrono::milliseconds kVacuumInterval{1000};
// The store folds the counter deltas into sqlq_counters once it appended
// this many (at most once per kVacuumInterval); fold_rows overrides.
constexpr std::int64_t kFoldRows = 1000;
// A COMMIT unanswered this long is cancelled (PgConn::AwaitCommitAnswer):
// as long as MariaDB's default read_timeout, so that on both engines a call
// the database leaves without an answer ends in about 30 s; the URL
// parameter commit_timeout_ms overrides (0: wait for ever).
constexpr std::int64_t kCommitTimeoutMs = 30'000;
// With several servers in the URL, each is asked this often which leads
// (LeaderWatch); the URL parameter leader_check_ms overrides (0: never).
constexpr std::int64_t kLeaderCheckMs = 1'000;

// The URL parameters of docs/engines/postgres.md, "Tuning", taken out of
// the URL before libpq sees it.
constexpr std::string_view kTuningParams[] = {
    "write_groups",      "vacuum_rows",     "fold_rows",
    "claim_marks",       "rescan_ms",       "failover_wait_ms",
    "commit_timeout_ms", "leader_check_ms", "ack_flush"};

struct Tuning {
  int write_groups = kWriteGroups;
  std::int64_t vacuum_rows = kVacuumRows;  // 0: never
  std::int64_t fold_rows = kFoldRows;
  bool claim_marks = true;
  std::int64_t rescan_ms = 0;  // 0: adaptive (ClaimMarks::Options)
  // core::RetryPolicy::failover_wait; -1: the default for the URL's hosts
  // (core::DefaultFailoverWait).
  std::int64_t failover_wait_ms = -1;
  // PgConn::set_commit_timeout; 0: for ever.
  std::int64_t commit_timeout_ms = kCommitTimeoutMs;
  // LeaderWatch's period, with several servers; 0: no watch.
  std::int64_t leader_check_ms = kLeaderCheckMs;
  // ack_flush=off: transactions of acks alone commit with
  // synchronous_commit = off (Engine::WriteUnflushed).
  bool ack_flush = true;

  static Result<Tuning> From(const core::UrlTuning& u) {
    Tuning t;
    auto groups = u.Int("write_groups", kWriteGroups, 1, 64);
    auto vacuum = u.Int("vacuum_rows", kVacuumRows, 0, INT64_MAX);
    auto fold = u.Int("fold_rows", kFoldRows, 1, INT64_MAX);
    auto marks = u.Int("claim_marks", 1, 0, 1);
    auto rescan = u.Int("rescan_ms", 0, 0, 86'400'000);
    auto failover = u.Int("failover_wait_ms", -1, 0, 600'000);
    auto commit = u.Int("commit_timeout_ms", kCommitTimeoutMs, 0, 86'400'000);
    auto leader = u.Int("leader_check_ms", kLeaderCheckMs, 0, 60'000);
    for (const auto* r : {&groups, &vacuum, &fold, &marks, &rescan, &failover,
                          &commit, &leader}) {
      if (!r->ok()) return r->status();
    }
    t.write_groups = static_cast<int>(*groups);
    t.vacuum_rows = *vacuum;
    t.fold_rows = *fold;
    t.claim_marks = *marks == 1;
    t.rescan_ms = *rescan;
    t.failover_wait_ms = *failover;
    t.commit_timeout_ms = *commit;
    t.leader_check_ms = *leader;
    auto ack_flush = u.Bool("ack_flush", true);
    if (!ack_flush.ok()) return ack_flush.status();
    t.ack_flush = *ack_flush;
    return t;
  }
};
// Payload bytes of one insert statement: bounds its parameters well below
// PostgreSQL's 1 GiB per value, whatever the payload limit.
constexpr std::size_t kStatementBytes = 16u << 20;
// Cross-process wake-ups: at most one NOTIFY per this interval per store.
constexpr std::chrono::microseconds kNotifyInterval{2000};

using core::FromUs;
using core::TokenBits;
using core::Us;

// "BEGIN" plus, in the same round trip, the database clock. Write
// transactions are READ COMMITTED whatever the server's
// default_transaction_isolation: their locking (a queue row's FOR KEY SHARE,
// DropQueue deleting messages after the queue row) relies on each statement
// seeing what committed before it.
constexpr const char* kBeginWrite = "BEGIN ISOLATION LEVEL READ COMMITTED";
constexpr const char* kBeginWithNow =
    "BEGIN ISOLATION LEVEL READ COMMITTED; "
    "SELECT (extract(epoch FROM now()) * 1000000)::bigint";
constexpr const char* kBeginReadWithNow =
    "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; "
    "SELECT (extract(epoch FROM now()) * 1000000)::bigint";

// A postgresql:// URL read: sqlq's own parameters taken out, the rest
// checked by libpq's parser.
struct ParsedUrl {
  std::string conninfo;
  Tuning tuning;
  bool several_hosts = false;
  // The servers of the URL, in its order.
  std::vector<LeaderWatch::Host> hosts;
};

class PostgresEngine : public shared::PooledSqlEngine<Dialect> {
 public:
  // `url.several_hosts`: the URL names more than one server (a failover
  // list), which changes ConnectRaw's defaults.
  PostgresEngine(ParsedUrl url, std::shared_ptr<Clock> clock)
      : PooledSqlEngine(std::move(clock), [this] { return Connect(); }),
        url_(std::move(url.conninfo)),
        several_hosts_(url.several_hosts),
        write_groups_(url.tuning.write_groups),
        vacuum_threshold_(url.tuning.vacuum_rows),
        fold_threshold_(url.tuning.fold_rows),
        commit_timeout_(url.tuning.commit_timeout_ms),
        ack_flush_(url.tuning.ack_flush) {
    const Tuning& tuning = url.tuning;
    pool_.set_failover_wait(
        core::FailoverWaitFor(tuning.failover_wait_ms, several_hosts_));
    ClaimMarks::Options marks;
    if (tuning.rescan_ms > 0) {
      marks.min_rescan = marks.max_rescan =
          std::chrono::milliseconds(tuning.rescan_ms);
    }
    if (tuning.claim_marks) marks_ = std::make_unique<ClaimMarks>(marks);
    if (several_hosts_ && tuning.leader_check_ms > 0) {
      hosts_ = std::move(url.hosts);
      watch_ = std::make_unique<LeaderWatch>(
          hosts_, [this](const LeaderWatch::Host& h) { return StartOne(h); },
          std::chrono::milliseconds(tuning.leader_check_ms));
    }
  }

  ~PostgresEngine() override {
    notifier_.reset();  // stop callbacks before the connections go
    vacuumer_.reset();
    folder_.reset();
    // Pooled connections unregister from the watch as they close.
    pool_.DropIdle();
    watch_.reset();
  }

  int write_groups() const override;

  Status Init(bool create_if_missing) {
    Status s = core::WithFailoverWait(pool_.policy(), [&]() -> Status {
      auto conn = Connect();
      if (!conn.ok()) return conn.status();
      Status m = Migrate(**conn, create_if_missing);
      if (m.ok()) Release(std::move(*conn));
      return m;
    });
    if (!s.ok()) return s;
    if (vacuum_threshold_ > 0) {
      vacuumer_ = std::make_unique<Vacuumer>(
          [this] { return ConnectRaw(); }, vacuum_threshold_,
          /*fold_threshold=*/0, kVacuumInterval, WatchConn());
    }
    folder_ = std::make_unique<Vacuumer>([this] { return ConnectRaw(); },
                                         /*threshold=*/0, fold_threshold_,
                                         kVacuumInterval, WatchConn());
    return Status::Ok();
  }

  // --- transactions -------------------------------------------------------

  Status Write(const std::function<Status(Conn&)>& body) override;
  bool acks_unflushed() const override { return !ack_flush_; }
  // Write with synchronous_commit = off for the transaction (set in the
  // commit's pipeline: no round trip of its own): its COMMIT waits neither
  // for the WAL flush nor for a synchronous standby.
  Status WriteUnflushed(const std::function<Status(Conn&)>& body) override;

  Result<std::unique_ptr<Conn>> JoinTx(void* native) override;

  Status RollbackTx(Conn& c) override;

  void* NativeHandle(Conn& c) override;

  void WatchForeignWrites(std::function<void()> changed) override;

  // --- queues --------------------------------------------------------------

  Status TouchSchema(Conn& c) override;

  Status DropQueue(Conn& c, std::int64_t queue_id) override;

  // --- messages ------------------------------------------------------------

  Result<std::vector<SendResult>> Send(Conn& c,
                                       const core::SendParams& p) override;
  // One INSERT for every queue when no message has a dedup key and no
  // queue a dedup window; else Send for each.
  Result<std::vector<SentTo>> SendEach(
      Conn& c, std::span<const core::SendParams> sends) override;

  Status BuryExhausted(PgConn& conn, const std::vector<std::int64_t>& ids,
                       std::int64_t now, const core::ClaimParams& p) override;

  Result<core::ClaimOutcome> Claim(Conn& c,
                                   const core::ClaimParams& p) override;

  Result<std::optional<Timestamp>> NextReadyAt(Conn& c,
                                               std::int64_t queue_id) override;

  Status Ack(Conn& c, const core::AckParams& p) override;

  // One statement for the whole batch: the receipts go as arrays and are
  // joined with the messages they fence. RETURNING says which matched;
  // each receipt that did not is explained by Refused (gone, or leased
  // again), so every caller gets its own status. A receipt given twice
  // matches once: the second is refused as gone, as with two Acks.
  // Differs from the SQLite engine, which runs one DELETE per receipt.
  // The statements are in statements.h.
  Result<std::vector<Status>> AckMany(Conn& c,
                                      const core::AckManyParams& op) override;

  Status Retry(Conn& c, const core::RetryParams& p) override;

  Status Bury(Conn& c, const core::BuryParams& p) override;
  Result<std::int64_t> Cancel(Conn& c, const core::CancelParams& p) override;

  Result<Timestamp> Extend(Conn& c, const core::ExtendParams& op) override;

  // --- dead letters (listing them and the archive: engines/shared) --------

  Result<std::int64_t> MoveDeadLetters(PgConn& conn,
                                       const core::RedriveParams& op,
                                       std::int64_t to,
                                       std::int64_t now) override;

 private:
  // Inserts a batch of messages with one INSERT ... SELECT FROM unnest(...)
  // per chunk (the columns go as arrays: one statement, one round trip,
  // one plan for the batch). Rows are inserted in batch order (ORDER BY
  // ordinality), so ids follow it. Fills `out` for the messages stored and
  // for repeats, within the batch, of a dedup key stored earlier in it;
  // appends to `held` the messages whose dedup key a message already in
  // the queue holds. Returns how many were stored.
  // The queue row is locked by the statement, as in Send.
  // One round trip for a group of concurrent senders: BEGIN, one insert
  // that also adds to the queue's counters, and COMMIT go in one pipeline
  // (PgConn::StageForCommit). Only for sends that need no look-up before
  // the commit: no dedup keys (a held key needs one), the database's clock,
  // one statement's worth of payload. Others go the way of any write.
  Result<std::vector<SendResult>> SendAndCommit(
      const core::SendParams& to, const MessagesFn& messages) override;
  // The same for a publish: the topic's subscriptions read, each message
  // matched to their header filters (jsonb containment), stored in every
  // queue it matches and counted, in one statement staged with the BEGIN
  // and COMMIT (one round trip). Only for messages without dedup keys,
  // groups or dependencies, within a statement's size, on the database's
  // clock; a subscriber with a dedup window or groups, a payload over a
  // subscriber's limit or a missing topic store nothing and leave it to
  // the general way (core::PublishIn), which says why or stores them.
  Result<std::optional<std::vector<core::Published>>> PublishAndCommit(
      std::string_view topic, std::span<const Message> messages) override;

  // A claim and the acks before it, the counters, BEGIN and COMMIT in one
  // pipeline: one call of sqlq__claim_commit (kClaimCommitCall) staged
  // with the commit. Only
  // for claims of queues without groups, dedup windows or an archive;
  // acks of a queue whose acks release dependents store nothing and leave
  // it to the general way.
  Result<std::optional<ClaimCommitted>> ClaimAndCommit(
      const core::ClaimParams& p, const core::AckManyParams& acks,
      std::span<const int> gates) override;
  // The same with a group's sends to one queue staged before the claim's
  // statement (the send of SendAndCommit): BEGIN, the sends, the acks and
  // claim, and COMMIT in one pipeline. Only for sends SendAndCommit can
  // store in one statement.
  Result<std::optional<ClaimCommitted>> SendsAndClaimAndCommit(
      SendsFirst& sends, const core::ClaimParams& p,
      const core::AckManyParams& acks, std::span<const int> gates) override;
  // Both, `sends` null for a claim alone.
  Result<std::optional<ClaimCommitted>> ClaimCommit(
      SendsFirst* sends, const core::ClaimParams& p,
      const core::AckManyParams& acks, std::span<const int> gates);
  // True when SendAndCommit stores `p` with one statement (StageSend).
  bool OneStatementSend(const core::SendParams& p) const;
  // Stages the statement that stores `p`'s messages and adds them to the
  // queue's counters (PgConn::StageForCommit); once committed, `out` has
  // their ids, or `failed` why none was stored (the queue gone).
  void StageSend(PgConn& conn, const core::SendParams& p,
                 std::vector<SendResult>& out, std::optional<Status>& failed);

  // `now`: as in Send; set from the database's clock when it was not known.
  Result<std::int64_t> InsertBatch(PgConn& conn, const core::SendParams& p,
                                   std::optional<std::int64_t>& now,
                                   std::vector<SendResult>& out,
                                   std::vector<std::size_t>& held);

  // One row of changes per transaction and queue (schema version 5): an
  // insert, which leaves no row version behind to walk, even while a
  // snapshot open elsewhere keeps vacuum from removing any.
  static constexpr const char* kCounterSql = R"sql(
    INSERT INTO sqlq_counter_deltas (queue_id, sends, claims, acks, nacks,
      expirations, dead_lettered, pushes, serves, expired)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10))sql";

  static Params CounterParams(std::int64_t queue_id, const QueueCounters& d);

  Status WriteCounters(PgConn& conn, std::int64_t queue_id,
                       const QueueCounters& d) override;

  // BEGIN, and the database clock with it when the store uses it.
  Status Begin(PgConn& conn, bool read_only) override;

  // Commits, then does what follows a commit (Committed) or a rollback
  // (RolledBack) in this process.
  Status Commit(PgConn& conn) override;

  Status RunCommit(PgConn& conn);

  // Runs `body` in the transaction begun on `conn`, and commits.
  Status InTransaction(PgConn& conn,
                       const std::function<Status(Conn&)>& body) override;

  // After a commit: wake other processes' waiters, count dead rows, move
  // the claim marks.
  void Committed(PgConn& conn);

  // After a rollback (or a commit that failed): rows this transaction
  // locked, which other claims skipped, are claimable again where they were.
  void RolledBack(PgConn& conn);

  void Poke();
  // A NOTIFY (coalesced with those of sends) for other processes' waiting
  // claims: acks send none of their own.
  void WakeOthers() override { Poke(); }
  bool WatchingForeignWrites() const override {
    return notifier_ != nullptr && notifier_->Listened();
  }

  bool SameDatabase(PGconn* other);

  // `start_only`: PQconnectStartParams, for the caller to finish with
  // PQconnectPoll.
  PGconn* ConnectRaw(bool start_only = false);
  // A connection start (PQconnectStartParams) to one server of the URL's
  // list, whatever it takes: LeaderWatch's.
  PGconn* StartOne(const LeaderWatch::Host& host);
  // Registers a connection opened outside the pool with the leader watch
  // (none: a function that does nothing).
  ConnWatch WatchConn();

  Result<std::unique_ptr<PgConn>> Connect();

  // A pooled connection, or a new one. A pooled connection that broke
  // while idle (server restart) is dropped here and replaced.
  // `pooled` says whether it was idle in the pool (and may have broken).
  Result<std::unique_ptr<PgConn>> Acquire();
  void Release(std::unique_ptr<PgConn> conn);

  // Brings the schema to kSchemaVersion (core/migrate.h), in one
  // transaction under a transaction-scoped advisory lock.
  Status Migrate(PgConn& conn, bool create);

  const std::string url_;
  const bool several_hosts_;
  const int write_groups_;
  const std::int64_t vacuum_threshold_;
  const std::int64_t fold_threshold_;
  const std::chrono::milliseconds commit_timeout_;
  const bool ack_flush_;
  std::unique_ptr<Notifier> notifier_;
  std::unique_ptr<Vacuumer> vacuumer_;
  std::unique_ptr<Vacuumer> folder_;   // folds the counter deltas
  std::unique_ptr<ClaimMarks> marks_;  // null: claims read whole queues
  std::vector<LeaderWatch::Host> hosts_;
  std::unique_ptr<LeaderWatch> watch_;  // null: one server, or no watch
};

}  // namespace sqlq::engines::postgres

#endif  // SQLQ_ENGINES_POSTGRES_POSTGRES_ENGINE_IMPL_H_
