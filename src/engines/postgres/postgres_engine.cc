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

#include "engines/postgres/postgres_engine.h"

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
#include "engines/postgres/claim_marks.h"
#include "engines/postgres/notifier.h"
#include "engines/postgres/pg_conn.h"
#include "engines/postgres/schema.h"
#include "engines/postgres/statements.h"
#include "engines/postgres/vacuumer.h"

namespace sqlq::engines::postgres {

namespace {

using core::Conn;
using core::Micros;

// Idle connections kept for reuse.
constexpr std::size_t kMaxIdle = 16;
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

// The URL parameters of docs/engines/postgres.md, "Tuning", taken out of
// the URL before libpq sees it.
constexpr std::string_view kTuningParams[] = {
    "write_groups", "vacuum_rows", "fold_rows", "claim_marks", "rescan_ms"};

struct Tuning {
  int write_groups = kWriteGroups;
  std::int64_t vacuum_rows = kVacuumRows;  // 0: never
  std::int64_t fold_rows = kFoldRows;
  bool claim_marks = true;
  std::int64_t rescan_ms = 0;  // 0: adaptive (ClaimMarks::Options)

  static Result<Tuning> From(const core::UrlTuning& u) {
    Tuning t;
    auto groups = u.Int("write_groups", kWriteGroups, 1, 64);
    auto vacuum = u.Int("vacuum_rows", kVacuumRows, 0, INT64_MAX);
    auto fold = u.Int("fold_rows", kFoldRows, 1, INT64_MAX);
    auto marks = u.Int("claim_marks", 1, 0, 1);
    auto rescan = u.Int("rescan_ms", 0, 0, 86'400'000);
    for (const auto* r : {&groups, &vacuum, &fold, &marks, &rescan}) {
      if (!r->ok()) return r->status();
    }
    t.write_groups = static_cast<int>(*groups);
    t.vacuum_rows = *vacuum;
    t.fold_rows = *fold;
    t.claim_marks = *marks == 1;
    t.rescan_ms = *rescan;
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
constexpr const char* kNowSql =
    "SELECT (extract(epoch FROM now()) * 1000000)::bigint";

class PostgresEngine : public core::Engine {
 public:
  PostgresEngine(std::string url, const Tuning& tuning,
                 std::shared_ptr<Clock> clock)
      : url_(std::move(url)),
        clock_(std::move(clock)),
        write_groups_(tuning.write_groups),
        vacuum_threshold_(tuning.vacuum_rows),
        fold_threshold_(tuning.fold_rows),
        pool_([this] { return Connect(); }, kMaxIdle) {
    ClaimMarks::Options marks;
    if (tuning.rescan_ms > 0) {
      marks.min_rescan = marks.max_rescan =
          std::chrono::milliseconds(tuning.rescan_ms);
    }
    if (tuning.claim_marks) marks_ = std::make_unique<ClaimMarks>(marks);
  }

  ~PostgresEngine() override {
    notifier_.reset();  // stop callbacks before the connections go
    vacuumer_.reset();
    folder_.reset();
  }

  int write_groups() const override { return write_groups_; }

  Status Init(bool create_if_missing) {
    auto conn = Connect();
    if (!conn.ok()) return conn.status();
    Status s = Migrate(**conn, create_if_missing);
    if (!s.ok()) return s;
    Release(std::move(*conn));
    if (vacuum_threshold_ > 0) {
      vacuumer_ = std::make_unique<Vacuumer>(
          [this] { return ConnectRaw(); }, vacuum_threshold_,
          /*fold_threshold=*/0, kVacuumInterval);
    }
    folder_ = std::make_unique<Vacuumer>([this] { return ConnectRaw(); },
                                         /*threshold=*/0, fold_threshold_,
                                         kVacuumInterval);
    return Status::Ok();
  }

  // --- transactions -------------------------------------------------------

  Status Write(const std::function<Status(Conn&)>& body) override {
    return pool_.RunWrite([&](PgConn& c) {
      // BEGIN goes with the first statement (PgConn::DeferBegin), which
      // finds a pooled connection the server closed meanwhile
      // (lost_at_begin).
      c.read_only = false;
      c.DeferBegin(kBeginWrite);
      c.defer_counters = true;
      return InTransaction(c, body);
    });
  }

  Status Read(const std::function<Status(Conn&)>& body) override {
    auto conn = AcquireBegun(/*read_only=*/true);
    if (!conn.ok()) return conn.status();
    Status s = InTransaction(**conn, body);
    Release(std::move(*conn));
    return s;
  }

  Result<std::unique_ptr<Conn>> BeginTx() override {
    auto conn = AcquireBegun(/*read_only=*/false);
    if (!conn.ok()) return conn.status();
    (*conn)->defer_counters = false;
    // Back to the pool once core destroys it after commit or rollback
    // (a Tx never outlives its Store, hence its engine).
    (*conn)->set_recycler(
        [this](std::unique_ptr<PgConn> c) { Release(std::move(c)); });
    return std::unique_ptr<Conn>(std::move(*conn));
  }

  Result<std::unique_ptr<Conn>> JoinTx(void* native) override {
    auto* pg = static_cast<PGconn*>(native);
    if (PQstatus(pg) != CONNECTION_OK) {
      return Status::InvalidArgument("the connection is not open");
    }
    if (!SameDatabase(pg)) {
      return Status::InvalidArgument(fmt::format(
          "connection is to database '{}' on {}:{}, not to this store's",
          PQdb(pg), PQhost(pg), PQport(pg)));
    }
    if (PQtransactionStatus(pg) != PQTRANS_INTRANS) {
      return Status::InvalidArgument(
          "the connection has no open transaction: run BEGIN first");
    }
    auto conn = std::make_unique<PgConn>(pg, /*owned=*/false);
    conn->ResetTxState();
    return std::unique_ptr<Conn>(std::move(conn));
  }

  Status CommitTx(Conn& c) override { return Commit(Pg(c)); }

  Status RollbackTx(Conn& c) override {
    PgConn& conn = Pg(c);
    // The caller's own statements may have locked message rows too.
    if (marks_) marks_->ForgetAll();
    auto r = conn.Exec("ROLLBACK", "rollback");
    return r.ok() ? Status::Ok() : r.status();
  }

  void* NativeHandle(Conn& c) override { return Pg(c).pg(); }

  void WatchForeignWrites(std::function<void()> changed) override {
    notifier_ = std::make_unique<Notifier>(
        [this]() -> PGconn* { return ConnectRaw(/*start_only=*/true); },
        std::move(changed), kNotifyInterval);
  }

  // --- queues --------------------------------------------------------------

  Result<core::QueueRecord> CreateQueue(Conn& c, std::string_view name,
                                        const QueueOptions& o) override {
    PgConn& conn = Pg(c);
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    static constexpr const char* kSql = R"sql(
      INSERT INTO sqlq_queues (name, max_attempts, lease_us, backoff_base_us,
        backoff_max_us, archive, retention_us, max_payload, created_us)
      VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
      ON CONFLICT (name) DO NOTHING
      RETURNING id)sql";
    auto rows =
        conn.Run(kSql,
                 Params()
                     .Text(name)
                     .Int(o.max_attempts)
                     .Int(Us(o.lease))
                     .Int(Us(o.backoff_base))
                     .Int(Us(o.backoff_max))
                     .Text(o.archive ? "true" : "false")
                     .Int(Us(o.retention))
                     .Int(static_cast<std::int64_t>(o.max_payload_bytes))
                     .Int(*now),
                 "create queue");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return Taken(conn, name);
    core::QueueRecord r;
    r.id = rows->Int(0, 0);
    r.info = {
        .name = std::string(name), .options = o, .created_at = FromUs(*now)};
    return r;
  }

  Result<core::QueueRecord> GetQueue(Conn& c, std::string_view name) override {
    static constexpr const char* kSql = R"sql(
      SELECT id, name, max_attempts, lease_us, backoff_base_us,
             backoff_max_us, archive, retention_us, max_payload, created_us
      FROM sqlq_queues WHERE name = $1 AND kind = 'queue')sql";
    auto rows = Pg(c).Run(kSql, Params().Text(name), "look up queue");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return Missing(Pg(c), name, "queue");
    return core::DecodeQueue(core::RowAt<Rows>{*rows, 0});
  }

  Result<std::vector<core::QueueRecord>> ListQueues(Conn& c) override {
    static constexpr const char* kSql = R"sql(
      SELECT id, name, max_attempts, lease_us, backoff_base_us,
             backoff_max_us, archive, retention_us, max_payload, created_us
      FROM sqlq_queues WHERE kind = 'queue' ORDER BY name)sql";
    auto rows = Pg(c).Run(kSql, Params(), "list queues");
    if (!rows.ok()) return rows.status();
    std::vector<core::QueueRecord> out;
    for (int i = 0; i < rows->size(); ++i)
      out.push_back(core::DecodeQueue(core::RowAt<Rows>{*rows, i}));
    return out;
  }

  Status TouchSchema(Conn& c) override {
    // A new row version of the newest schema row: WAL the commit flushes.
    static constexpr const char* kSql =
        "UPDATE sqlq_schema SET version = version WHERE version = "
        "(SELECT max(version) FROM sqlq_schema)";
    auto rows = Pg(c).Run(kSql, Params(), "check writable");
    return rows.ok() ? Status::Ok() : rows.status();
  }

  Status DropQueue(Conn& c, std::int64_t queue_id) override {
    // Dead letters, archive and counters go by ON DELETE CASCADE; messages
    // have no foreign key (schema.h, version 3) and are deleted here, after
    // the queue row. Deleting that row waits for the transactions that hold
    // its FOR KEY SHARE lock, which every statement inserting messages takes
    // first; the second DELETE, a new statement in READ COMMITTED, then sees
    // what they inserted. Transactions that come later find no queue row and
    // insert nothing.
    static constexpr const char* kSql = "DELETE FROM sqlq_queues WHERE id = $1";
    static constexpr const char* kMessages =
        "DELETE FROM sqlq_messages WHERE queue_id = $1";
    auto rows = Pg(c).Run(kSql, Params().Int(queue_id), "drop queue");
    if (!rows.ok()) return rows.status();
    if (rows->affected() == 0) return core::QueueGone(queue_id);
    auto messages =
        Pg(c).Run(kMessages, Params().Int(queue_id), "drop queue's messages");
    if (!messages.ok()) return messages.status();
    // Claims waiting on the queue in other processes look again and end
    // with kNotFound, instead of at their next poll.
    Pg(c).notify = true;
    return Status::Ok();
  }

  Result<std::int64_t> PurgeQueue(Conn& c, std::int64_t queue_id) override {
    PgConn& conn = Pg(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    static constexpr const char* kSql =
        "DELETE FROM sqlq_messages WHERE queue_id = $1";
    auto rows = conn.Run(kSql, Params().Int(queue_id), "purge queue");
    if (!rows.ok()) return rows.status();
    return rows->affected();
  }

  Result<QueueStats> Stats(Conn& c, std::int64_t queue_id) override {
    PgConn& conn = Pg(c);
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    // One round trip; sum() of BIGINT is NUMERIC, hence the casts. The
    // counters are summed in one pass over sqlq_counts: the deltas table
    // has no index, so each separate sum would read it whole again.
    static constexpr const char* kSql = R"sql(
      SELECT q.name, k.sends, k.claims, k.acks, k.nacks, k.expirations,
        k.dead_lettered,
        m.ready, m.delayed, m.leased, m.oldest,
        (SELECT count(*) FROM sqlq_dead d WHERE d.queue_id = q.id),
        (SELECT count(*) FROM sqlq_archive a WHERE a.queue_id = q.id)
      FROM sqlq_queues q,
        LATERAL (SELECT coalesce(sum(sends), 0)::bigint AS sends,
                   coalesce(sum(claims), 0)::bigint AS claims,
                   coalesce(sum(acks), 0)::bigint AS acks,
                   coalesce(sum(nacks), 0)::bigint AS nacks,
                   coalesce(sum(expirations), 0)::bigint AS expirations,
                   coalesce(sum(dead_lettered), 0)::bigint AS dead_lettered
                 FROM sqlq_counts WHERE queue_id = q.id) k,
        LATERAL (SELECT count(*) FILTER (WHERE ready_us <= $2) AS ready,
                   count(*) FILTER (WHERE ready_us > $2 AND token = 0)
                     AS delayed,
                   count(*) FILTER (WHERE ready_us > $2 AND token <> 0)
                     AS leased,
                   min(ready_us) FILTER (WHERE ready_us <= $2) AS oldest
                 FROM sqlq_messages WHERE queue_id = q.id) m
      WHERE q.id = $1)sql";
    auto rows = conn.Run(kSql, Params().Int(queue_id).Int(*now), "stats");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::QueueGone(queue_id);
    return core::DecodeStats(core::RowAt<Rows>{*rows, 0}, *now);
  }

  // --- messages ------------------------------------------------------------

  Result<std::vector<SendResult>> Send(Conn& c,
                                       const core::SendParams& p) override {
    PgConn& conn = Pg(c);
    // The clock: the store's own, or the one this transaction read already;
    // else the insert reads the database's itself (now(), the transaction's
    // start, as NowUs would) and returns it, which saves a round trip.
    std::optional<std::int64_t> now =
        clock_ ? std::optional<std::int64_t>(Us(clock_->Now()))
               : conn.tx_now_us;
    // The insert itself takes the queue row's FOR KEY SHARE lock (CheckQueue
    // says why), in its first CTE, saving a round trip: a queue that is gone
    // inserts nothing, which is then told apart from a held dedup key by
    // CheckQueue, so a send to a dropped queue stays a clean failure.
    static constexpr const char* kInsert = R"sql(
      WITH q AS (SELECT id FROM sqlq_queues WHERE id = $1 FOR KEY SHARE),
      t AS (SELECT coalesce($4::bigint,
              (extract(epoch FROM now()) * 1000000)::bigint) AS now_us)
      INSERT INTO sqlq_messages
        (queue_id, priority, ready_us, enqueued_us, dedup, payload)
      SELECT q.id, $2::integer, t.now_us + $3::bigint, t.now_us, $5::bytea,
             $6::bytea
      FROM q, t
      ON CONFLICT (queue_id, dedup) WHERE dedup IS NOT NULL DO NOTHING
      RETURNING id, enqueued_us)sql";
    static constexpr const char* kExisting = R"sql(
      SELECT id FROM sqlq_messages WHERE queue_id = $1 AND dedup = $2)sql";
    auto params_of = [&](const Message& m) {
      Params params;
      params.Int(p.queue_id).Int(m.priority).Int(Us(m.delay));
      if (now) {
        params.Int(*now);
      } else {
        params.Null();
      }
      if (m.dedup_key.empty()) {
        params.Null();
      } else {
        params.Bytes(m.dedup_key);
      }
      params.Bytes(m.payload);
      return params;
    };
    auto learn_now = [&](const Rows& rows, int col) {
      if (now || rows.size() == 0) return;
      now = rows.Int(0, col);
      conn.tx_now_us = now;
    };
    std::vector<SendResult> out(p.messages.size());
    std::int64_t stored = 0;
    // Messages whose dedup key a message already in the queue holds.
    std::vector<std::size_t> held;
    if (p.messages.size() == 1) {
      auto inserted = conn.Run(kInsert, params_of(p.messages[0]), "send");
      if (!inserted.ok()) return inserted.status();
      learn_now(*inserted, 1);
      if (inserted->size() == 1) {
        out[0] = {.id = inserted->Int(0, 0)};
        ++stored;
        conn.known_queues.insert(p.queue_id);
      } else {
        Status checked = CheckQueue(conn, p.queue_id);
        if (!checked.ok()) return checked;
        held.push_back(0);
      }
    } else {
      auto n = InsertBatch(conn, p, now, out, held);
      if (!n.ok()) return n.status();
      stored += *n;
    }
    if (!held.empty() && !now) {
      auto n = NowUs(conn);
      if (!n.ok()) return n.status();
      now = *n;
    }
    for (std::size_t i : held) {
      const Message& m = p.messages[i];
      // The dedup key is held by a message in the queue. Its holder may be
      // acked between our insert and this look-up; then insert again.
      for (int attempt = 0;; ++attempt) {
        auto existing =
            conn.Run(kExisting, Params().Int(p.queue_id).Bytes(m.dedup_key),
                     "send (dedup)");
        if (!existing.ok()) return existing.status();
        if (existing->size() == 1) {
          out[i] = {.id = existing->Int(0, 0), .duplicate = true};
          break;
        }
        if (attempt == 3) {
          return Status::Busy(
              "send: the dedup key's message kept changing; try again");
        }
        auto again = conn.Run(kInsert, params_of(m), "send");
        if (!again.ok()) return again.status();
        if (again->size() == 1) {
          out[i] = {.id = again->Int(0, 0)};
          ++stored;
          break;
        }
      }
    }
    if (stored > 0) {
      conn.notify = true;
      Duration least = p.messages[0].delay;
      for (const Message& m : p.messages) least = std::min(least, m.delay);
      conn.MadeReady(p.queue_id, *now + Us(least));
      Status s = AddCounters(conn, p.queue_id, {.sends = stored});
      if (!s.ok()) return s;
    }
    return out;
  }

  Result<core::ClaimOutcome> Claim(Conn& c,
                                   const core::ClaimParams& p) override {
    PgConn& conn = Pg(c);
    // No FOR KEY SHARE here: an empty claim must stay a transaction without
    // writes, whose COMMIT needs no WAL flush, so that idle consumers cost
    // the server next to nothing. A claim that leases rows takes the lock
    // at its counter update (foreign key); racing a DROP QUEUE that way can
    // deadlock, which the server breaks and Write() retries.
    auto now_r = NowUs(conn);
    if (!now_r.ok()) return now_r.status();
    const std::int64_t now = *now_r;
    const std::int64_t until = now + p.lease.count();
    // One statement (statements.h), from the queue's start or from this
    // store's mark (claim_marks.h). Differs from the SQLite engine, which
    // reads candidates and updates them one by one under its database-wide
    // write lock.
    const auto started = std::chrono::steady_clock::now();
    ClaimMarks::Plan plan;
    if (marks_) plan = marks_->Start(p.queue_id, started);
    std::optional<ClaimKey> last;
    core::ClaimOutcome out;
    std::size_t bytes = 0;  // payload bytes leased, against p.max_bytes
    for (;;) {
      const int want = p.max - static_cast<int>(out.messages.size());
      // What is left of the byte limit. A round after the first (after dead
      // letters left places free) takes no first message for free.
      if (p.max_bytes != 0 && !out.messages.empty() && bytes >= p.max_bytes) {
        break;
      }
      const std::int64_t budget =
          p.max_bytes == 0 ? 0
          : out.messages.empty()
              ? static_cast<std::int64_t>(p.max_bytes)
              : -static_cast<std::int64_t>(p.max_bytes - bytes);
      Params params;
      params.Int(p.queue_id)
          .Int(now)
          .Int(want)
          .Int(TokenBits(p.token))
          .Int(until);
      if (p.worker.empty()) {
        params.Null();
      } else {
        params.Bytes(p.worker);
      }
      params.Int(p.max_attempts);
      if (plan.from) {
        params.Int(plan.from->priority)
            .Int(plan.from->ready_us)
            .Int(plan.from->id);
      }
      params.Int(budget);
      auto rows =
          conn.Run(plan.from ? kClaimFromSql.c_str() : kClaimSql.c_str(),
                   params, "claim");
      if (!rows.ok()) return rows.status();
      struct Leased {
        std::int64_t priority, old_ready;
        ClaimedMessage m;
      };
      std::vector<Leased> leased;
      int buried = 0;
      for (int i = 0; i < rows->size(); ++i) {
        if (rows->Int(i, 4) != 0) ++out.expirations;
        if (rows->Int(i, 0) != 0) {
          ++buried;
          continue;
        }
        Leased l{.priority = rows->Int(i, 2), .old_ready = rows->Int(i, 3)};
        l.m.id = rows->Int(i, 1);
        l.m.attempt = static_cast<int>(rows->Int(i, 5));
        l.m.priority = static_cast<std::int32_t>(l.priority);
        l.m.payload = rows->Bytes(i, 7);
        bytes += l.m.payload.size();
        l.m.enqueued_at = FromUs(rows->Int(i, 6));
        l.m.lease_expires_at = FromUs(until);
        leased.push_back(std::move(l));
      }
      std::sort(leased.begin(), leased.end(),
                [](const Leased& a, const Leased& b) {
                  if (a.priority != b.priority) return a.priority > b.priority;
                  if (a.old_ready != b.old_ready) {
                    return a.old_ready < b.old_ready;
                  }
                  return a.m.id < b.m.id;
                });
      for (Leased& l : leased) {
        const ClaimKey key{
            .priority = l.m.priority, .ready_us = l.old_ready, .id = l.m.id};
        if (!last || Before(*last, key)) last = key;
        out.messages.push_back(std::move(l.m));
      }
      out.dead_lettered += buried;
      // Dead letters left places free: look again for messages behind them.
      if (buried == 0 || rows->size() < want) break;
    }
    if (marks_) {
      conn.claims.push_back(
          {.queue_id = p.queue_id,
           .plan = plan,
           .last = last,
           .now_us = now,
           .cost = std::chrono::steady_clock::now() - started});
    }
    const std::int64_t claimed = static_cast<std::int64_t>(out.messages.size());
    if (claimed + out.expirations + out.dead_lettered == 0) {
      // Empty or gone? Looked up only now, saving a round trip on every
      // claim that finds messages (a dropped queue has none).
      Status checked = CheckQueue(conn, p.queue_id, /*lock=*/false);
      if (!checked.ok()) return checked;
      return out;
    }
    conn.churned += claimed + out.dead_lettered;
    Status s = AddCounters(conn, p.queue_id,
                           {.claims = claimed,
                            .expirations = out.expirations,
                            .dead_lettered = out.dead_lettered});
    if (!s.ok()) return s;
    return out;
  }

  Result<std::optional<Timestamp>> NextReadyAt(Conn& c,
                                               std::int64_t queue_id) override {
    PgConn& conn = Pg(c);
    auto rows = conn.Run(kNextReadySql, Params().Int(queue_id), "next ready");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0 || rows->IsNull(0, 0)) {
      return std::optional<Timestamp>();
    }
    const std::int64_t at = rows->Int(0, 0);
    if (marks_) {
      // Asked after a claim found nothing: a message below the mark is one
      // the marked claims cannot see (claim_marks.h). It is ready: a mark
      // lies at or before the clock of an earlier claim.
      marks_->ReadyAt(queue_id, static_cast<std::int32_t>(rows->Int(0, 1)), at);
    }
    return std::optional<Timestamp>(FromUs(at));
  }

  Result<Timestamp> Now(Conn& c) override {
    auto now = NowUs(Pg(c));
    if (!now.ok()) return now.status();
    return FromUs(*now);
  }

  Status Ack(Conn& c, const core::AckParams& p) override {
    PgConn& conn = Pg(c);
    Status s = CheckQueue(conn, p.queue_id);
    if (!s.ok()) return s;
    static constexpr const char* kDelete = R"sql(
      DELETE FROM sqlq_messages
      WHERE id = $1 AND queue_id + 0 = $2 AND token = $3 AND attempts = $4)sql";
    static constexpr const char* kArchive = R"sql(
      WITH d AS (
        DELETE FROM sqlq_messages
        WHERE id = $1 AND queue_id + 0 = $2 AND token = $3 AND attempts = $4
        RETURNING id, queue_id, priority, attempts, enqueued_us, worker,
                  payload)
      INSERT INTO sqlq_archive (id, queue_id, priority, attempts, enqueued_us,
        completed_us, worker, payload)
      SELECT id, queue_id, priority, attempts, enqueued_us, $5, worker, payload
      FROM d)sql";
    Params params = Fence(p.queue_id, p.receipt);
    if (p.archive) {
      auto now = NowUs(conn);
      if (!now.ok()) return now.status();
      params.Int(*now);
    }
    auto rows = conn.Run(p.archive ? kArchive : kDelete, params, "ack");
    if (!rows.ok()) return rows.status();
    if (rows->affected() == 0) return Refused(conn, p.queue_id, p.receipt);
    ++conn.churned;
    return AddCounters(conn, p.queue_id, {.acks = 1});
  }

  // One statement for the whole batch: the receipts go as arrays and are
  // joined with the messages they fence. RETURNING says which matched;
  // each receipt that did not is explained by Refused (gone, or leased
  // again), so every caller gets its own status. A receipt given twice
  // matches once: the second is refused as gone, as with two Acks.
  // Differs from the SQLite engine, which runs one DELETE per receipt.
  // The statements are in statements.h.
  Result<std::vector<Status>> AckMany(Conn& c, std::int64_t queue_id,
                                      std::span<const core::Receipt> receipts,
                                      bool archive) override {
    PgConn& conn = Pg(c);
    Status checked = CheckQueue(conn, queue_id);
    if (!checked.ok()) {
      if (!core::IsCleanFailure(checked)) return checked;
      return std::vector<Status>(receipts.size(), checked);
    }
    std::vector<std::int64_t> ids, tokens, attempts;
    for (const core::Receipt& r : receipts) {
      ids.push_back(r.id);
      tokens.push_back(TokenBits(r.token));
      attempts.push_back(r.attempt);
    }
    Params params;
    params.Int(queue_id).IntArray(ids).IntArray(tokens).IntArray(attempts);
    if (archive) {
      auto now = NowUs(conn);
      if (!now.ok()) return now.status();
      params.Int(*now);
    }
    auto rows =
        conn.Run(archive ? kAckManyArchiveSql.c_str() : kAckManySql.c_str(),
                 params, "ack");
    if (!rows.ok()) return rows.status();
    std::unordered_set<std::int64_t> matched;
    for (int i = 0; i < rows->size(); ++i) matched.insert(rows->Int(i, 0));
    const auto acked = static_cast<std::int64_t>(matched.size());
    std::vector<Status> out;
    out.reserve(receipts.size());
    for (const core::Receipt& r : receipts) {
      if (matched.erase(r.id) == 1) {
        out.push_back(Status::Ok());
        continue;
      }
      Status why = Refused(conn, queue_id, r);
      if (!core::IsCleanFailure(why)) return why;
      out.push_back(std::move(why));
    }
    if (acked > 0) {
      conn.churned += acked;
      Status s = AddCounters(conn, queue_id, {.acks = acked});
      if (!s.ok()) return s;
    }
    return out;
  }

  Status Retry(Conn& c, const core::RetryParams& p) override {
    PgConn& conn = Pg(c);
    Status s = CheckQueue(conn, p.queue_id);
    if (!s.ok()) return s;
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    static constexpr const char* kSql = R"sql(
      UPDATE sqlq_messages SET token = 0, ready_us = $5, last_error = $6
      WHERE id = $1 AND queue_id + 0 = $2 AND token = $3 AND attempts = $4)sql";
    Params params = Fence(p.queue_id, p.receipt);
    params.Int(*now + p.delay.count());
    if (p.error.empty()) {
      params.Null();
    } else {
      params.Bytes(p.error);
    }
    auto rows = conn.Run(kSql, params, "nack");
    if (!rows.ok()) return rows.status();
    if (rows->affected() == 0) return Refused(conn, p.queue_id, p.receipt);
    conn.notify = true;
    conn.MadeReady(p.queue_id, *now + p.delay.count());
    ++conn.churned;
    return AddCounters(conn, p.queue_id, {.nacks = 1});
  }

  Status Bury(Conn& c, const core::BuryParams& p) override {
    PgConn& conn = Pg(c);
    Status s = CheckQueue(conn, p.queue_id);
    if (!s.ok()) return s;
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    static constexpr const char* kSql = R"sql(
      WITH d AS (
        DELETE FROM sqlq_messages
        WHERE id = $1 AND queue_id + 0 = $2 AND token = $3 AND attempts = $4
        RETURNING id, queue_id, priority, attempts, enqueued_us, payload)
      INSERT INTO sqlq_dead (id, queue_id, priority, attempts, enqueued_us,
        died_us, last_error, payload)
      SELECT id, queue_id, priority, attempts, enqueued_us, $5, $6, payload
      FROM d)sql";
    Params params = Fence(p.queue_id, p.receipt);
    params.Int(*now).Bytes(p.error);
    auto rows = conn.Run(kSql, params, "nack");
    if (!rows.ok()) return rows.status();
    if (rows->affected() == 0) return Refused(conn, p.queue_id, p.receipt);
    ++conn.churned;
    return AddCounters(conn, p.queue_id, {.nacks = 1, .dead_lettered = 1});
  }

  Result<Timestamp> Extend(Conn& c, std::int64_t queue_id,
                           const core::Receipt& receipt,
                           Micros lease) override {
    PgConn& conn = Pg(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    const std::int64_t until = *now + lease.count();
    static constexpr const char* kSql = R"sql(
      UPDATE sqlq_messages SET ready_us = $5
      WHERE id = $1 AND queue_id + 0 = $2 AND token = $3 AND attempts = $4)sql";
    Params params = Fence(queue_id, receipt);
    params.Int(until);
    auto rows = conn.Run(kSql, params, "extend");
    if (!rows.ok()) return rows.status();
    if (rows->affected() == 0) return Refused(conn, queue_id, receipt);
    ++conn.churned;
    return FromUs(until);
  }

  // --- dead letters and archive -------------------------------------------

  Result<std::vector<DeadLetter>> ListDead(Conn& c, std::int64_t queue_id,
                                           const ListOptions& o) override {
    PgConn& conn = Pg(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    static constexpr const char* kSql = R"sql(
      SELECT id, priority, attempts, enqueued_us, died_us, last_error, payload
      FROM sqlq_dead WHERE queue_id = $1 AND id > $2 ORDER BY id LIMIT $3)sql";
    auto rows = conn.Run(
        kSql, Params().Int(queue_id).Int(o.after_id).Int(o.limit), "list dead");
    if (!rows.ok()) return rows.status();
    return core::DecodeAll(*rows,
                           [](const auto& r) { return core::DecodeDead(r); });
  }

  Result<std::int64_t> Redrive(Conn& c, std::int64_t queue_id,
                               std::span<const std::int64_t> ids) override {
    PgConn& conn = Pg(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    // A redriven message is ready now with fresh attempts; it keeps its id
    // (never reused, see schema.h) but not a dedup key.
    static constexpr const char* kAll = R"sql(
      WITH d AS (
        DELETE FROM sqlq_dead WHERE queue_id = $1
        RETURNING id, queue_id, priority, enqueued_us, last_error, payload)
      INSERT INTO sqlq_messages (id, queue_id, priority, ready_us, attempts,
        enqueued_us, last_error, payload)
      SELECT id, queue_id, priority, $2, 0, enqueued_us, last_error, payload
      FROM d)sql";
    static constexpr const char* kSome = R"sql(
      WITH d AS (
        DELETE FROM sqlq_dead WHERE queue_id = $1 AND id = ANY($3::bigint[])
        RETURNING id, queue_id, priority, enqueued_us, last_error, payload)
      INSERT INTO sqlq_messages (id, queue_id, priority, ready_us, attempts,
        enqueued_us, last_error, payload)
      SELECT id, queue_id, priority, $2, 0, enqueued_us, last_error, payload
      FROM d)sql";
    Params params;
    params.Int(queue_id).Int(*now);
    if (!ids.empty()) {
      std::string array = "{";
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (i > 0) array += ',';
        array += std::to_string(ids[i]);
      }
      array += '}';
      params.Text(array);
    }
    auto rows = conn.Run(ids.empty() ? kAll : kSome, params, "redrive");
    if (!rows.ok()) return rows.status();
    if (rows->affected() > 0) {
      conn.notify = true;
      conn.MadeReady(queue_id, *now);
    }
    return rows->affected();
  }

  Result<std::int64_t> PurgeDead(Conn& c, std::int64_t queue_id) override {
    PgConn& conn = Pg(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    static constexpr const char* kSql =
        "DELETE FROM sqlq_dead WHERE queue_id = $1";
    auto rows = conn.Run(kSql, Params().Int(queue_id), "purge dead letters");
    if (!rows.ok()) return rows.status();
    return rows->affected();
  }

  Result<std::vector<ArchivedMessage>> ListArchive(
      Conn& c, std::int64_t queue_id, const ListOptions& o) override {
    PgConn& conn = Pg(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    static constexpr const char* kSql = R"sql(
      SELECT id, priority, attempts, enqueued_us, completed_us, worker, payload
      FROM sqlq_archive WHERE queue_id = $1 AND id > $2
      ORDER BY id LIMIT $3)sql";
    auto rows =
        conn.Run(kSql, Params().Int(queue_id).Int(o.after_id).Int(o.limit),
                 "list archive");
    if (!rows.ok()) return rows.status();
    return core::DecodeAll(
        *rows, [](const auto& r) { return core::DecodeArchived(r); });
  }

  Result<std::int64_t> PruneArchive(Conn& c, std::int64_t queue_id,
                                    Micros retention) override {
    PgConn& conn = Pg(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    static constexpr const char* kSql = R"sql(
      DELETE FROM sqlq_archive WHERE queue_id = $1 AND completed_us < $2)sql";
    auto rows =
        conn.Run(kSql, Params().Int(queue_id).Int(*now - retention.count()),
                 "prune archive");
    if (!rows.ok()) return rows.status();
    return rows->affected();
  }

  // --- rings ---------------------------------------------------------------
  // Locking (docs/engines/postgres.md): operations on a ring take FOR KEY
  // SHARE on its sqlq_queues row (CheckKind), as sends do, so a drop waits.
  // A push locks its group's row with the upsert, which serialises the
  // pushes to one group; every operation that deletes entries locks the
  // group row first, so group row then entries is the one lock order.
  // SetCapacity locks the ring's row FOR UPDATE, which waits for the pushes
  // in flight (their FOR KEY SHARE) and holds new ones off until it commits:
  // no push evicts by the old capacity after the new one is in force.

  Result<core::RingRecord> CreateRing(Conn& c, std::string_view name,
                                      const RingOptions& o) override {
    auto id =
        InsertKind(Pg(c), name, "ring", o.max_payload_bytes, o.capacity, 0);
    if (!id.ok()) return id.status();
    return core::RingRecord{.id = *id, .name = std::string(name), .options = o};
  }

  Result<core::RingRecord> GetRing(Conn& c, std::string_view name) override {
    PgConn& conn = Pg(c);
    static constexpr const char* kSql = R"sql(
      SELECT id, capacity, max_payload FROM sqlq_queues
      WHERE name = $1 AND kind = 'ring')sql";
    auto rows = conn.Run(kSql, Params().Text(name), "look up ring");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return Missing(conn, name, "ring");
    return core::RingRecord{
        .id = rows->Int(0, 0),
        .name = std::string(name),
        .options = {
            .capacity = rows->Int(0, 1),
            .max_payload_bytes = static_cast<std::size_t>(rows->Int(0, 2))}};
  }

  Status DropRing(Conn& c, std::int64_t ring_id) override {
    // Groups, entries and counters go by ON DELETE CASCADE.
    static constexpr const char* kSql =
        "DELETE FROM sqlq_queues WHERE id = $1 AND kind = 'ring'";
    auto rows = Pg(c).Run(kSql, Params().Int(ring_id), "drop ring");
    return rows.ok() ? Status::Ok() : rows.status();
  }

  Result<RingEntry> RingPush(Conn& c, std::int64_t ring_id,
                             std::string_view group,
                             std::string_view payload) override {
    PgConn& conn = Pg(c);
    // Checked (and locked against a concurrent drop) before writing: a
    // push to a dropped ring is a clean failure.
    Status s = CheckKind(conn, ring_id, "ring");
    if (!s.ok()) return s;
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    RingEntry e{.group = std::string(group),
                .payload = std::string(payload),
                .pushed_at = FromUs(*now)};
    // The group's row lock (taken here, held to commit) serialises the
    // pushes to the group.
    static constexpr const char* kGroup = R"sql(
      INSERT INTO sqlq_ring_groups AS g (ring_id, grp, last_seq, entries)
      VALUES ($1, $2, 1, 1)
      ON CONFLICT (ring_id, grp)
      DO UPDATE SET last_seq = g.last_seq + 1, entries = g.entries + 1
      RETURNING last_seq, entries)sql";
    auto grp = conn.Run(kGroup, Params().Int(ring_id).Bytes(group), "push");
    if (!grp.ok()) return grp.status();
    e.seq = grp->Int(0, 0);
    const std::int64_t entries = grp->Int(0, 1);
    // The capacity as it is now (this statement's snapshot is taken after
    // the group lock was granted), not as the caller's handle cached it.
    static constexpr const char* kEntry = R"sql(
      INSERT INTO sqlq_ring_entries (ring_id, grp, seq, pushed_us, payload)
      VALUES ($1, $2, $3, $4, $5)
      RETURNING (SELECT capacity FROM sqlq_queues WHERE id = $1))sql";
    auto ins = conn.Run(
        kEntry,
        Params().Int(ring_id).Bytes(group).Int(e.seq).Int(*now).Bytes(payload),
        "push");
    if (!ins.ok()) return ins.status();
    const std::int64_t capacity = ins->Int(0, 0);
    if (entries > capacity) {
      auto evicted = EvictOldest(conn, ring_id, group, entries - capacity);
      if (!evicted.ok()) return evicted.status();
    }
    s = AddCounters(conn, ring_id, {.pushes = 1});
    if (!s.ok()) return s;
    return e;
  }

  Result<std::vector<RingEntry>> RingRead(Conn& c, std::int64_t ring_id,
                                          std::string_view group,
                                          const RingReadOptions& o) override {
    PgConn& conn = Pg(c);
    Status s = CheckQueue(conn, ring_id);
    if (!s.ok()) return s;
    static constexpr const char* kNewest = R"sql(
      SELECT seq, pushed_us, payload FROM sqlq_ring_entries
      WHERE ring_id = $1 AND grp = $2 AND seq < $4
      ORDER BY seq DESC LIMIT $3)sql";
    static constexpr const char* kOldest = R"sql(
      SELECT seq, pushed_us, payload FROM sqlq_ring_entries
      WHERE ring_id = $1 AND grp = $2 AND seq > $4
      ORDER BY seq LIMIT $3)sql";
    auto rows = conn.Run(o.oldest_first ? kOldest : kNewest,
                         Params().Int(ring_id).Bytes(group).Int(o.limit).Int(
                             core::RingReadBound(o)),
                         "read ring");
    if (!rows.ok()) return rows.status();
    return core::DecodeAll(
        *rows, [&](const auto& r) { return core::DecodeRingEntry(r, group); });
  }

  Result<std::vector<RingGroup>> RingGroups(Conn& c,
                                            std::int64_t ring_id) override {
    PgConn& conn = Pg(c);
    Status s = CheckQueue(conn, ring_id);
    if (!s.ok()) return s;
    static constexpr const char* kSql = R"sql(
      SELECT grp, entries FROM sqlq_ring_groups
      WHERE ring_id = $1 AND entries > 0 ORDER BY grp)sql";
    auto rows = conn.Run(kSql, Params().Int(ring_id), "list groups");
    if (!rows.ok()) return rows.status();
    std::vector<RingGroup> out;
    out.reserve(rows->size());
    for (int i = 0; i < rows->size(); ++i) {
      out.push_back({.group = rows->Bytes(i, 0), .entries = rows->Int(i, 1)});
    }
    return out;
  }

  Status RingDelete(Conn& c, std::int64_t ring_id, std::string_view group,
                    std::int64_t seq) override {
    PgConn& conn = Pg(c);
    Status s = CheckKind(conn, ring_id, "ring");
    if (!s.ok()) return s;
    auto locked = LockGroup(conn, ring_id, group);
    if (!locked.ok()) return locked.status();
    auto missing = [&] { return core::NoRingEntry(group, seq); };
    if (!*locked) return missing();
    static constexpr const char* kSql = R"sql(
      DELETE FROM sqlq_ring_entries
      WHERE ring_id = $1 AND grp = $2 AND seq = $3)sql";
    auto rows = conn.Run(kSql, Params().Int(ring_id).Bytes(group).Int(seq),
                         "delete entry");
    if (!rows.ok()) return rows.status();
    if (rows->affected() == 0) return missing();
    return AdjustEntries(conn, ring_id, group, -1);
  }

  Result<std::int64_t> RingDeleteGroup(Conn& c, std::int64_t ring_id,
                                       std::string_view group) override {
    PgConn& conn = Pg(c);
    Status s = CheckKind(conn, ring_id, "ring");
    if (!s.ok()) return s;
    auto locked = LockGroup(conn, ring_id, group);
    if (!locked.ok()) return locked.status();
    if (!*locked) return std::int64_t{0};
    static constexpr const char* kSql = R"sql(
      DELETE FROM sqlq_ring_entries WHERE ring_id = $1 AND grp = $2)sql";
    auto rows =
        conn.Run(kSql, Params().Int(ring_id).Bytes(group), "delete group");
    if (!rows.ok()) return rows.status();
    const std::int64_t deleted = rows->affected();
    if (deleted > 0) {
      s = AdjustEntries(conn, ring_id, group, -deleted);
      if (!s.ok()) return s;
    }
    return deleted;
  }

  Result<std::int64_t> RingSetCapacity(Conn& c, std::int64_t ring_id,
                                       std::int64_t capacity) override {
    PgConn& conn = Pg(c);
    // FOR UPDATE conflicts with the FOR KEY SHARE of pushes in flight: see
    // "rings" above.
    static constexpr const char* kLock = R"sql(
      SELECT 1 FROM sqlq_queues WHERE id = $1 AND kind = 'ring'
      FOR UPDATE)sql";
    auto locked = conn.Run(kLock, Params().Int(ring_id), "set capacity");
    if (!locked.ok()) return locked.status();
    if (locked->size() == 0) return core::KindGone("ring", ring_id);
    conn.known_queues.insert(ring_id);
    static constexpr const char* kSet =
        "UPDATE sqlq_queues SET capacity = $2 WHERE id = $1";
    auto set =
        conn.Run(kSet, Params().Int(ring_id).Int(capacity), "set capacity");
    if (!set.ok()) return set.status();
    static constexpr const char* kOver = R"sql(
      SELECT grp, entries FROM sqlq_ring_groups
      WHERE ring_id = $1 AND entries > $2 ORDER BY grp FOR UPDATE)sql";
    auto over =
        conn.Run(kOver, Params().Int(ring_id).Int(capacity), "set capacity");
    if (!over.ok()) return over.status();
    std::int64_t evicted = 0;
    for (int i = 0; i < over->size(); ++i) {
      const std::string group = over->Bytes(i, 0);
      auto n = EvictOldest(conn, ring_id, group, over->Int(i, 1) - capacity);
      if (!n.ok()) return n.status();
      evicted += *n;
    }
    return evicted;
  }

  Result<RingStats> RingStatsOf(Conn& c, std::int64_t ring_id) override {
    static constexpr const char* kSql = R"sql(
      SELECT q.name, q.capacity,
        (SELECT coalesce(sum(pushes), 0)::bigint FROM sqlq_counts k
         WHERE k.queue_id = q.id),
        (SELECT count(*) FROM sqlq_ring_groups g
         WHERE g.ring_id = q.id AND g.entries > 0),
        (SELECT coalesce(sum(entries), 0)::bigint FROM sqlq_ring_groups g
         WHERE g.ring_id = q.id)
      FROM sqlq_queues q WHERE q.id = $1 AND q.kind = 'ring')sql";
    auto rows = Pg(c).Run(kSql, Params().Int(ring_id), "ring stats");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::KindGone("ring", ring_id);
    return core::DecodeRingStats(core::RowAt<Rows>{*rows, 0});
  }

  // --- rotations -------------------------------------------------------------
  // Locking: next() and add() lock the rotation's sqlq_queues row FOR NO
  // KEY UPDATE first (and keep it to commit), so they run one after the
  // other per rotation across connections and processes: each call sees
  // the stamps of the calls before it, which keeps the round-robin order
  // and the ±1 fairness, and no two calls get the same item. The lock does
  // not conflict with the FOR KEY SHARE of other operations, but a drop
  // waits for it. next() also locks the items it serves (FOR UPDATE)
  // against a concurrent fail/ok/reset/remove.

  Result<core::RotationRecord> CreateRotation(
      Conn& c, std::string_view name, const RotationOptions& o) override {
    auto id = InsertKind(Pg(c), name, "rotation", o.max_payload_bytes, 0,
                         o.max_failures);
    if (!id.ok()) return id.status();
    return core::RotationRecord{
        .id = *id, .name = std::string(name), .options = o};
  }

  Result<core::RotationRecord> GetRotation(Conn& c,
                                           std::string_view name) override {
    PgConn& conn = Pg(c);
    static constexpr const char* kSql = R"sql(
      SELECT id, max_failures, max_payload FROM sqlq_queues
      WHERE name = $1 AND kind = 'rotation')sql";
    auto rows = conn.Run(kSql, Params().Text(name), "look up rotation");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return Missing(conn, name, "rotation");
    return core::RotationRecord{
        .id = rows->Int(0, 0),
        .name = std::string(name),
        .options = {
            .max_failures = static_cast<int>(rows->Int(0, 1)),
            .max_payload_bytes = static_cast<std::size_t>(rows->Int(0, 2))}};
  }

  Status DropRotation(Conn& c, std::int64_t rotation_id) override {
    // Items and counters go by ON DELETE CASCADE.
    static constexpr const char* kSql =
        "DELETE FROM sqlq_queues WHERE id = $1 AND kind = 'rotation'";
    auto rows = Pg(c).Run(kSql, Params().Int(rotation_id), "drop rotation");
    return rows.ok() ? Status::Ok() : rows.status();
  }

  Status RotationAdd(Conn& c, std::int64_t rotation_id, std::string_view key,
                     std::string_view payload) override {
    PgConn& conn = Pg(c);
    Status s = LockRotation(conn, rotation_id);
    if (!s.ok()) return s;
    // Checked under the rotation's lock, before writing, so that a refused
    // add writes nothing (not even the stamp): a clean failure.
    static constexpr const char* kExists = R"sql(
      SELECT 1 FROM sqlq_rotation_items
      WHERE rotation_id = $1 AND key = $2)sql";
    auto exists =
        conn.Run(kExists, Params().Int(rotation_id).Bytes(key), "add item");
    if (!exists.ok()) return exists.status();
    if (exists->size() > 0) {
      return core::ItemExists(key);
    }
    auto stamp = NextStamp(conn, rotation_id, 1);
    if (!stamp.ok()) return stamp.status();
    static constexpr const char* kSql = R"sql(
      INSERT INTO sqlq_rotation_items (rotation_id, key, payload, added)
      VALUES ($1, $2, $3, $4))sql";
    auto rows = conn.Run(
        kSql, Params().Int(rotation_id).Bytes(key).Bytes(payload).Int(*stamp),
        "add item");
    return rows.ok() ? Status::Ok() : rows.status();
  }

  Status RotationRemove(Conn& c, std::int64_t rotation_id,
                        std::string_view key) override {
    PgConn& conn = Pg(c);
    static constexpr const char* kSql = R"sql(
      DELETE FROM sqlq_rotation_items WHERE rotation_id = $1 AND key = $2)sql";
    auto rows =
        conn.Run(kSql, Params().Int(rotation_id).Bytes(key), "remove item");
    if (!rows.ok()) return rows.status();
    if (rows->affected() == 0) return core::NoItem(key);
    return Status::Ok();
  }

  Result<std::vector<RotationItem>> RotationNext(Conn& c,
                                                 std::int64_t rotation_id,
                                                 int n) override {
    PgConn& conn = Pg(c);
    // Serialises next() per rotation: see "rotations" above.
    Status s = LockRotation(conn, rotation_id);
    if (!s.ok()) return s;
    // Served order: least recently served first (0 = never), then the
    // order of addition. Both are stamps of one counter, so the order is
    // total and exact at any rate.
    static constexpr const char* kSelect = R"sql(
      SELECT key, payload, serves, failures FROM sqlq_rotation_items
      WHERE rotation_id = $1 AND NOT parked
      ORDER BY last_served, added LIMIT $2
      FOR UPDATE)sql";
    auto rows = conn.Run(kSelect, Params().Int(rotation_id).Int(n), "next");
    if (!rows.ok()) return rows.status();
    std::vector<RotationItem> out;
    out.reserve(rows->size());
    for (int i = 0; i < rows->size(); ++i) {
      out.push_back({.key = rows->Bytes(i, 0),
                     .payload = rows->Bytes(i, 1),
                     .served = rows->Int(i, 2) + 1,
                     .failures = static_cast<int>(rows->Int(i, 3))});
    }
    if (out.empty()) return out;
    // One stamp per item, in the order served (engine.h): with one stamp
    // for the whole call, ties would fall back to the order of addition.
    const auto count = static_cast<std::int64_t>(out.size());
    auto last = NextStamp(conn, rotation_id, count);
    if (!last.ok()) return last.status();
    std::int64_t stamp = *last - count;
    static constexpr const char* kServe = R"sql(
      UPDATE sqlq_rotation_items SET last_served = $3, serves = serves + 1
      WHERE rotation_id = $1 AND key = $2)sql";
    std::vector<Params> all;
    all.reserve(out.size());
    for (const RotationItem& item : out) {
      Params p;
      p.Int(rotation_id).Bytes(item.key).Int(++stamp);
      all.push_back(std::move(p));
    }
    auto served = conn.RunAll(kServe, all, "next");
    if (!served.ok()) return served.status();
    s = AddCounters(conn, rotation_id, {.serves = count});
    if (!s.ok()) return s;
    return out;
  }

  Result<RotationItem> RotationFail(Conn& c, std::int64_t rotation_id,
                                    std::string_view key,
                                    int max_failures) override {
    static constexpr const char* kSql = R"sql(
      UPDATE sqlq_rotation_items
      SET failures = failures + 1, parked = (failures + 1 >= $3)
      WHERE rotation_id = $1 AND key = $2
      RETURNING key, payload, serves, failures, parked)sql";
    Params p;
    p.Int(rotation_id).Bytes(key).Int(max_failures);
    return UpdateItem(Pg(c), kSql, p, key);
  }

  Result<RotationItem> RotationOk(Conn& c, std::int64_t rotation_id,
                                  std::string_view key) override {
    PgConn& conn = Pg(c);
    static constexpr const char* kParked = R"sql(
      SELECT parked FROM sqlq_rotation_items
      WHERE rotation_id = $1 AND key = $2 FOR UPDATE)sql";
    auto rows = conn.Run(kParked, Params().Int(rotation_id).Bytes(key), "ok");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::NoItem(key);
    if (rows->Int(0, 0) != 0) {
      return core::ItemParked(key);
    }
    static constexpr const char* kSql = R"sql(
      UPDATE sqlq_rotation_items SET failures = 0
      WHERE rotation_id = $1 AND key = $2
      RETURNING key, payload, serves, failures, parked)sql";
    Params p;
    p.Int(rotation_id).Bytes(key);
    return UpdateItem(conn, kSql, p, key);
  }

  Result<RotationItem> RotationReset(Conn& c, std::int64_t rotation_id,
                                     std::string_view key) override {
    static constexpr const char* kSql = R"sql(
      UPDATE sqlq_rotation_items SET failures = 0, parked = false
      WHERE rotation_id = $1 AND key = $2
      RETURNING key, payload, serves, failures, parked)sql";
    Params p;
    p.Int(rotation_id).Bytes(key);
    return UpdateItem(Pg(c), kSql, p, key);
  }

  Result<std::vector<RotationItem>> RotationList(
      Conn& c, std::int64_t rotation_id) override {
    PgConn& conn = Pg(c);
    Status s = CheckQueue(conn, rotation_id);
    if (!s.ok()) return s;
    static constexpr const char* kSql = R"sql(
      SELECT key, payload, serves, failures, parked FROM sqlq_rotation_items
      WHERE rotation_id = $1 ORDER BY parked, last_served, added)sql";
    auto rows = conn.Run(kSql, Params().Int(rotation_id), "list items");
    if (!rows.ok()) return rows.status();
    std::vector<RotationItem> out;
    out.reserve(rows->size());
    for (int i = 0; i < rows->size(); ++i) {
      out.push_back(core::DecodeItem(core::RowAt<Rows>{*rows, i}));
    }
    return out;
  }

  Result<RotationStats> RotationStatsOf(Conn& c,
                                        std::int64_t rotation_id) override {
    static constexpr const char* kSql = R"sql(
      SELECT q.name, q.max_failures,
        (SELECT coalesce(sum(serves), 0)::bigint FROM sqlq_counts k
         WHERE k.queue_id = q.id),
        (SELECT count(*) FROM sqlq_rotation_items i
         WHERE i.rotation_id = q.id),
        (SELECT count(*) FROM sqlq_rotation_items i
         WHERE i.rotation_id = q.id AND i.parked)
      FROM sqlq_queues q WHERE q.id = $1 AND q.kind = 'rotation')sql";
    auto rows = Pg(c).Run(kSql, Params().Int(rotation_id), "rotation stats");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::KindGone("rotation", rotation_id);
    return core::DecodeRotationStats(core::RowAt<Rows>{*rows, 0});
  }

 protected:
 private:
  static PgConn& Pg(Conn& c) { return static_cast<PgConn&>(c); }

  // Creates the row of a ring or rotation (`kind` is one of those two
  // literals); kAlreadyExists when the name is taken by any kind.
  Result<std::int64_t> InsertKind(PgConn& conn, std::string_view name,
                                  const char* kind, std::size_t max_payload,
                                  std::int64_t capacity, int max_failures) {
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    static constexpr const char* kSql = R"sql(
      INSERT INTO sqlq_queues (name, kind, max_attempts, lease_us,
        backoff_base_us, backoff_max_us, archive, retention_us, max_payload,
        created_us, capacity, max_failures)
      VALUES ($1, $2, 0, 0, 0, 0, false, 0, $3, $4, $5, $6)
      ON CONFLICT (name) DO NOTHING
      RETURNING id)sql";
    auto rows = conn.Run(kSql,
                         Params()
                             .Text(name)
                             .Text(kind)
                             .Int(static_cast<std::int64_t>(max_payload))
                             .Int(*now)
                             .Int(capacity)
                             .Int(max_failures),
                         fmt::format("create {}", kind));
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return Taken(conn, name);
    return rows->Int(0, 0);
  }

  // Why `name` is not a `want`: missing, or another kind of thing.
  static Status Missing(PgConn& conn, std::string_view name,
                        std::string_view want) {
    static constexpr const char* kSql =
        "SELECT kind FROM sqlq_queues WHERE name = $1";
    auto rows = conn.Run(kSql, Params().Text(name), "look up name");
    if (!rows.ok()) return rows.status();
    if (rows->size() > 0) {
      return core::NotA(name, rows->Bytes(0, 0), want);
    }
    return core::NotA(name, std::nullopt, want);
  }

  // The name is taken: says by what kind of thing.
  static Status Taken(PgConn& conn, std::string_view name) {
    static constexpr const char* kSql =
        "SELECT kind FROM sqlq_queues WHERE name = $1";
    auto rows = conn.Run(kSql, Params().Text(name), "look up name");
    if (!rows.ok()) return rows.status();
    // Dropped again since our insert saw it: taken all the same.
    if (rows->size() == 0) return core::NameTaken(name, std::nullopt);
    return core::NameTaken(name, rows->Bytes(0, 0));
  }

  // CheckQueue for a ring or rotation: kNotFound naming the kind.
  Status CheckKind(PgConn& conn, std::int64_t id, std::string_view kind) {
    if (conn.known_queues.contains(id)) return Status::Ok();
    Status s = CheckQueue(conn, id);
    if (s.code() == Code::kNotFound) return core::KindGone(kind, id);
    return s;
  }

  // Locks the rotation's row FOR NO KEY UPDATE (to commit): serialises
  // next() and add() per rotation. kNotFound when it was dropped.
  Status LockRotation(PgConn& conn, std::int64_t rotation_id) {
    static constexpr const char* kSql = R"sql(
      SELECT 1 FROM sqlq_queues WHERE id = $1 AND kind = 'rotation'
      FOR NO KEY UPDATE)sql";
    auto rows = conn.Run(kSql, Params().Int(rotation_id), "lock rotation");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::KindGone("rotation", rotation_id);
    conn.known_queues.insert(rotation_id);
    return Status::Ok();
  }

  // Takes the rotation's next `count` counter values and returns the last
  // of them. REQUIRES: LockRotation in this transaction.
  Result<std::int64_t> NextStamp(PgConn& conn, std::int64_t rotation_id,
                                 std::int64_t count) {
    static constexpr const char* kSql = R"sql(
      UPDATE sqlq_queues SET next_stamp = next_stamp + $2
      WHERE id = $1 RETURNING next_stamp)sql";
    auto rows = conn.Run(kSql, Params().Int(rotation_id).Int(count), "stamp");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::KindGone("rotation", rotation_id);
    return rows->Int(0, 0);
  }

  // Locks the group's row FOR UPDATE (the lock a push takes), before any of
  // its entries: false when the group was never pushed to.
  static Result<bool> LockGroup(PgConn& conn, std::int64_t ring_id,
                                std::string_view group) {
    static constexpr const char* kSql = R"sql(
      SELECT 1 FROM sqlq_ring_groups WHERE ring_id = $1 AND grp = $2
      FOR UPDATE)sql";
    auto rows =
        conn.Run(kSql, Params().Int(ring_id).Bytes(group), "lock group");
    if (!rows.ok()) return rows.status();
    return rows->size() > 0;
  }

  // Deletes the group's `n` oldest entries (lowest seq: a total order) and
  // returns how many went. REQUIRES: the group row locked.
  static Result<std::int64_t> EvictOldest(PgConn& conn, std::int64_t ring_id,
                                          std::string_view group,
                                          std::int64_t n) {
    static constexpr const char* kSql = R"sql(
      DELETE FROM sqlq_ring_entries
      WHERE ring_id = $1 AND grp = $2 AND seq IN (
        SELECT seq FROM sqlq_ring_entries
        WHERE ring_id = $1 AND grp = $2 ORDER BY seq LIMIT $3))sql";
    auto rows =
        conn.Run(kSql, Params().Int(ring_id).Bytes(group).Int(n), "evict");
    if (!rows.ok()) return rows.status();
    const std::int64_t evicted = rows->affected();
    Status s = AdjustEntries(conn, ring_id, group, -evicted);
    if (!s.ok()) return s;
    return evicted;
  }

  static Status AdjustEntries(PgConn& conn, std::int64_t ring_id,
                              std::string_view group, std::int64_t delta) {
    static constexpr const char* kSql = R"sql(
      UPDATE sqlq_ring_groups SET entries = entries + $3
      WHERE ring_id = $1 AND grp = $2)sql";
    auto rows = conn.Run(kSql, Params().Int(ring_id).Bytes(group).Int(delta),
                         "count entries");
    return rows.ok() ? Status::Ok() : rows.status();
  }

  static Result<RotationItem> UpdateItem(PgConn& conn, const char* sql,
                                         const Params& params,
                                         std::string_view key) {
    auto rows = conn.Run(sql, params, "update item");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::NoItem(key);
    return core::DecodeItem(core::RowAt<Rows>{*rows, 0});
  }

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
      std::int64_t queue_id, const MessagesFn& messages) override {
    const core::SendParams p = {.queue_id = queue_id, .messages = messages()};
    static constexpr const char* kSendCounted = R"sql(
      WITH q AS (SELECT id FROM sqlq_queues WHERE id = $1 FOR KEY SHARE),
      t AS (SELECT (extract(epoch FROM now()) * 1000000)::bigint AS now_us),
      ins AS (
        INSERT INTO sqlq_messages
          (queue_id, priority, ready_us, enqueued_us, payload)
        SELECT q.id, m.priority::integer, t.now_us + m.delay_us, t.now_us,
               m.payload
        FROM q, t, unnest($2::bigint[], $3::bigint[], $4::bytea[])
          WITH ORDINALITY AS m(priority, delay_us, payload, ord)
        ORDER BY m.ord
        RETURNING id, enqueued_us),
      k AS (
        INSERT INTO sqlq_counter_deltas (queue_id, sends)
        SELECT $1, count(*) FROM ins HAVING count(*) > 0)
      SELECT id, enqueued_us FROM ins)sql";
    std::size_t bytes = 0;
    bool keyed = false;
    for (const Message& m : p.messages) {
      bytes += m.payload.size();
      keyed = keyed || !m.dedup_key.empty();
    }
    if (clock_ || keyed || bytes > kStatementBytes) {
      return core::Engine::SendAndCommit(queue_id, messages);
    }
    std::vector<std::int64_t> priority, delay;
    std::vector<std::optional<std::string_view>> payload;
    Duration least = p.messages[0].delay;
    for (const Message& m : p.messages) {
      priority.push_back(m.priority);
      delay.push_back(Us(m.delay));
      payload.push_back(std::string_view(m.payload));
      least = std::min(least, m.delay);
    }
    std::vector<SendResult> out;
    std::optional<Status> failed;
    Status s = Write([&](Conn& c) -> Status {
      PgConn& conn = Pg(c);
      Params params;
      params.Int(p.queue_id)
          .IntArray(priority)
          .IntArray(delay)
          .BytesArray(payload);
      conn.StageForCommit(
          kSendCounted, std::move(params), "send", [&](const Rows& rows) {
            if (rows.size() == 0) {
              // The queue was gone: nothing was inserted or counted.
              failed = core::QueueGone(p.queue_id);
              return;
            }
            if (static_cast<std::size_t>(rows.size()) != p.messages.size()) {
              failed = Status::Internal("send: fewer rows stored than sent");
              return;
            }
            // Ids follow the batch order (ORDER BY m.ord).
            std::vector<std::int64_t> ids;
            for (int r = 0; r < rows.size(); ++r) ids.push_back(rows.Int(r, 0));
            std::sort(ids.begin(), ids.end());
            out.clear();
            for (std::int64_t id : ids) out.push_back({.id = id});
            conn.notify = true;
            ++conn.counted;
            conn.MadeReady(p.queue_id, rows.Int(0, 1) + Us(least));
          });
      return Status::Ok();
    });
    if (!s.ok()) return s;
    if (failed) return *failed;
    return out;
  }

  // `now`: as in Send; set from the database's clock when it was not known.
  Result<std::int64_t> InsertBatch(PgConn& conn, const core::SendParams& p,
                                   std::optional<std::int64_t>& now,
                                   std::vector<SendResult>& out,
                                   std::vector<std::size_t>& held) {
    static constexpr const char* kInsertMany = R"sql(
      WITH q AS (SELECT id FROM sqlq_queues WHERE id = $1 FOR KEY SHARE),
      t AS (SELECT coalesce($2::bigint,
              (extract(epoch FROM now()) * 1000000)::bigint) AS now_us)
      INSERT INTO sqlq_messages
        (queue_id, priority, ready_us, enqueued_us, dedup, payload)
      SELECT q.id, m.priority::integer, t.now_us + m.delay_us, t.now_us,
             m.dedup, m.payload
      FROM q, t,
        unnest($3::bigint[], $4::bigint[], $5::bytea[], $6::bytea[])
        WITH ORDINALITY AS m(priority, delay_us, dedup, payload, ord)
      ORDER BY m.ord
      ON CONFLICT (queue_id, dedup) WHERE dedup IS NOT NULL DO NOTHING
      RETURNING id, dedup, enqueued_us)sql";
    constexpr std::size_t kChunkBytes = kStatementBytes;
    std::int64_t stored = 0;
    // Dedup key -> index of its first message in the batch.
    std::unordered_map<std::string_view, std::size_t> first;
    std::size_t begin = 0;
    while (begin < p.messages.size()) {
      std::size_t end = begin, bytes = 0;
      while (end < p.messages.size() &&
             (end == begin ||
              bytes + p.messages[end].payload.size() <= kChunkBytes)) {
        bytes +=
            p.messages[end].payload.size() + p.messages[end].dedup_key.size();
        ++end;
      }
      std::vector<std::int64_t> priority, ready;
      std::vector<std::optional<std::string_view>> dedup, payload;
      for (std::size_t i = begin; i < end; ++i) {
        const Message& m = p.messages[i];
        priority.push_back(m.priority);
        ready.push_back(Us(m.delay));
        dedup.push_back(m.dedup_key.empty()
                            ? std::nullopt
                            : std::optional<std::string_view>(m.dedup_key));
        payload.push_back(std::string_view(m.payload));
      }
      Params params;
      params.Int(p.queue_id);
      if (now) {
        params.Int(*now);
      } else {
        params.Null();
      }
      params.IntArray(priority).IntArray(ready).BytesArray(dedup).BytesArray(
          payload);
      auto rows = conn.Run(kInsertMany, params, "send");
      if (!rows.ok()) return rows.status();
      if (!now && rows->size() > 0) {
        now = rows->Int(0, 2);
        conn.tx_now_us = now;
      }
      if (rows->size() == 0) {
        // Every key held, or the queue gone.
        Status checked = CheckQueue(conn, p.queue_id);
        if (!checked.ok()) return checked;
      } else {
        conn.known_queues.insert(p.queue_id);
      }
      // Rows without a dedup key are all stored, in batch order: sorted by
      // id they match those messages one to one. Rows with a key are found
      // by it.
      std::vector<std::int64_t> plain;
      std::unordered_map<std::string, std::int64_t> keyed;
      for (int r = 0; r < rows->size(); ++r) {
        if (rows->IsNull(r, 1)) {
          plain.push_back(rows->Int(r, 0));
        } else {
          keyed.emplace(rows->Bytes(r, 1), rows->Int(r, 0));
        }
      }
      std::sort(plain.begin(), plain.end());
      stored += rows->size();
      std::size_t next_plain = 0;
      for (std::size_t i = begin; i < end; ++i) {
        const Message& m = p.messages[i];
        if (m.dedup_key.empty()) {
          if (next_plain == plain.size()) {
            return Status::Internal("send: fewer rows stored than sent");
          }
          out[i] = {.id = plain[next_plain++]};
          continue;
        }
        if (auto k = keyed.find(m.dedup_key); k != keyed.end()) {
          out[i] = {.id = k->second};
          keyed.erase(k);
          first.emplace(m.dedup_key, i);
        } else if (auto f = first.find(m.dedup_key); f != first.end()) {
          // A repeat within the batch: a duplicate of the first, once the
          // first is resolved (it may be held by an older message).
          held.push_back(i);
        } else {
          first.emplace(m.dedup_key, i);
          held.push_back(i);
        }
      }
      begin = end;
    }
    return stored;
  }

  static Params Fence(std::int64_t queue_id, const core::Receipt& r) {
    Params p;
    p.Int(r.id).Int(queue_id).Int(TokenBits(r.token)).Int(r.attempt);
    return p;
  }

  Result<std::int64_t> NowUs(PgConn& conn) {
    if (clock_) return Us(clock_->Now());
    if (conn.tx_now_us) return *conn.tx_now_us;
    auto rows = conn.Run(kNowSql, Params(), "read the database clock");
    if (!rows.ok()) return rows.status();
    conn.tx_now_us = rows->Int(0, 0);
    return *conn.tx_now_us;
  }

  // Makes sure the queue exists and, in write transactions, keeps it from
  // being dropped until this transaction ends: FOR KEY SHARE conflicts only
  // with DELETE (and key updates) of the queue row, not with other
  // senders' or claimers' locks. Taking it first, before any message row,
  // gives every transaction the same lock order as DROP QUEUE (queue row,
  // then its messages by cascade), so the two cannot deadlock.
  // `lock` false: only look (a claim, see there).
  Status CheckQueue(PgConn& conn, std::int64_t queue_id, bool lock = true) {
    if (conn.known_queues.contains(queue_id)) return Status::Ok();
    static constexpr const char* kLock =
        "SELECT 1 FROM sqlq_queues WHERE id = $1 FOR KEY SHARE";
    static constexpr const char* kLook =
        "SELECT 1 FROM sqlq_queues WHERE id = $1";
    lock = lock && !conn.read_only;
    auto rows =
        conn.Run(lock ? kLock : kLook, Params().Int(queue_id), "look up queue");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::QueueGone(queue_id);
    // Remembered only once locked: an unlocked look may be repeated by a
    // later operation of the transaction that wants the lock.
    if (lock) conn.known_queues.insert(queue_id);
    return Status::Ok();
  }

  // REQUIRES: CheckQueue(queue_id) in this transaction.
  Status AddCounters(PgConn& conn, std::int64_t queue_id,
                     const QueueCounters& d) {
    if (conn.DeferCounters(queue_id, d)) return Status::Ok();
    return WriteCounters(conn, queue_id, d);
  }

  // One row of changes per transaction and queue (schema version 5): an
  // insert, which leaves no row version behind to walk, even while a
  // snapshot open elsewhere keeps vacuum from removing any.
  static constexpr const char* kCounterSql = R"sql(
    INSERT INTO sqlq_counter_deltas (queue_id, sends, claims, acks, nacks,
      expirations, dead_lettered, pushes, serves)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9))sql";

  static Params CounterParams(std::int64_t queue_id, const QueueCounters& d) {
    Params p;
    p.Int(queue_id)
        .Int(d.sends)
        .Int(d.claims)
        .Int(d.acks)
        .Int(d.nacks)
        .Int(d.expirations)
        .Int(d.dead_lettered)
        .Int(d.pushes)
        .Int(d.serves);
    return p;
  }

  Status WriteCounters(PgConn& conn, std::int64_t queue_id,
                       const QueueCounters& d) {
    auto rows =
        conn.Run(kCounterSql, CounterParams(queue_id, d), "update counters");
    if (rows.ok()) ++conn.counted;
    return rows.ok() ? Status::Ok() : rows.status();
  }

  // Says why a receipt was refused: the message is gone, or it is there
  // under another lease.
  Status Refused(PgConn& conn, std::int64_t queue_id, const core::Receipt& r) {
    static constexpr const char* kSql = R"sql(
      SELECT token, attempts FROM sqlq_messages
      WHERE id = $1 AND queue_id + 0 = $2)sql";
    auto rows =
        conn.Run(kSql, Params().Int(r.id).Int(queue_id), "check receipt");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) {
      return core::NotInQueue(r.id);
    }
    const std::int64_t attempts = rows->Int(0, 1);
    return core::StaleReceipt(r, rows->Int(0, 0), attempts);
  }

  // BEGIN, and the database clock with it when the store uses it.
  Status Begin(PgConn& conn, bool read_only) {
    conn.read_only = read_only;
    if (clock_) {
      auto r = conn.Exec(read_only
                             ? "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
                             : kBeginWrite,
                         "begin transaction");
      return r.ok() ? Status::Ok() : r.status();
    }
    PgResult res(
        PQexec(conn.pg(), read_only ? kBeginReadWithNow : kBeginWithNow));
    if (res == nullptr || PQresultStatus(res.get()) != PGRES_TUPLES_OK) {
      Status s = Translate(res.get(), conn.pg(), "begin transaction");
      if (PQtransactionStatus(conn.pg()) != PQTRANS_IDLE) {
        (void)conn.Exec("ROLLBACK", "rollback");
      }
      return s;
    }
    conn.tx_now_us = std::strtoll(PQgetvalue(res.get(), 0, 0), nullptr, 10);
    return Status::Ok();
  }

  // Commits, then does what follows a commit (Committed) or a rollback
  // (RolledBack) in this process.
  Status Commit(PgConn& conn) {
    Status s = RunCommit(conn);
    if (s.ok()) {
      Committed(conn);
    } else {
      RolledBack(conn);
    }
    return s;
  }

  Status RunCommit(PgConn& conn) {
    if (conn.tx_error) {
      // A statement failed (and its operation may have reported a clean
      // failure): PostgreSQL would turn COMMIT into ROLLBACK anyway.
      Status s = *conn.tx_error;
      (void)conn.Exec("ROLLBACK", "rollback");
      return s;
    }
    if (!conn.pending_counters.empty() || conn.has_staged()) {
      // The counters gathered in this transaction, in queue id order (so
      // that two transactions lock counter rows in the same order), sent
      // with COMMIT in one round trip, after the staged statement.
      std::vector<Params> counters;
      for (const auto& [queue_id, d] : conn.pending_counters) {
        counters.push_back(CounterParams(queue_id, d));
        ++conn.counted;
      }
      conn.pending_counters.clear();
      return conn.RunAndCommit(kCounterSql, counters, "update counters");
    }
    auto tag = conn.Exec("COMMIT", "commit", Phase::kCommit);
    if (!tag.ok()) {
      if (PQtransactionStatus(conn.pg()) == PQTRANS_INERROR ||
          PQtransactionStatus(conn.pg()) == PQTRANS_INTRANS) {
        (void)conn.Exec("ROLLBACK", "rollback");
      }
      return tag.status();
    }
    if (*tag == "ROLLBACK") {
      return Status::Internal(
          "commit: the transaction had failed and was rolled back");
    }
    return Status::Ok();
  }

  // A connection with a transaction begun on it. A pooled connection that
  // the server closed while it was idle (restart, idle timeout) shows only
  // now, when BEGIN fails; nothing was sent in a transaction yet, so a fresh
  // connection is tried instead, transparently.
  Result<std::unique_ptr<PgConn>> AcquireBegun(bool read_only) {
    return pool_.AcquireBegun(
        [&](PgConn& conn) { return Begin(conn, read_only); });
  }

  // Runs `body` in the transaction begun on `conn`, and commits.
  Status InTransaction(PgConn& conn, const std::function<Status(Conn&)>& body) {
    Status s = body(conn);
    if (s.ok()) return Commit(conn);
    RolledBack(conn);
    if (PQstatus(conn.pg()) == CONNECTION_OK) {
      (void)conn.Exec("ROLLBACK", "rollback");
    }
    return s;
  }

  // After a commit: wake other processes' waiters, count dead rows, move
  // the claim marks.
  void Committed(PgConn& conn) {
    if (conn.notify) Poke();
    if (conn.churned > 0 && vacuumer_) vacuumer_->Churned(conn.churned);
    if (conn.counted > 0 && folder_) folder_->Counted(conn.counted);
    if (!marks_) return;
    const auto at = std::chrono::steady_clock::now();
    for (const PgConn::ClaimDone& d : conn.claims) {
      marks_->Advance(d.queue_id, d.plan, d.last, d.now_us, d.cost, at);
    }
    // Messages made ready by a transaction that committed late (a caller's
    // transaction, or one slower than half the lag) may lie below marks
    // moved meanwhile.
    if (!conn.ready_floor.empty() &&
        (!conn.defer_counters || at - conn.began > marks_->options().lag / 2)) {
      for (const auto& [queue_id, ready_us] : conn.ready_floor) {
        marks_->Lower(queue_id, ready_us);
      }
    }
  }

  // After a rollback (or a commit that failed): rows this transaction
  // locked, which other claims skipped, are claimable again where they were.
  void RolledBack(PgConn& conn) {
    if (marks_ && (!conn.claims.empty() || conn.churned > 0)) {
      marks_->ForgetAll();
    }
  }

  void Poke() {
    if (notifier_) notifier_->Poke();
  }

  bool SameDatabase(PGconn* other) {
    auto conn = Acquire();
    if (!conn.ok()) return false;
    PGconn* ours = (*conn)->pg();
    auto eq = [](const char* a, const char* b) {
      return std::string_view(a ? a : "") == std::string_view(b ? b : "");
    };
    bool same = eq(PQdb(ours), PQdb(other)) &&
                eq(PQhost(ours), PQhost(other)) &&
                eq(PQport(ours), PQport(other));
    Release(std::move(*conn));
    return same;
  }

  // `start_only`: PQconnectStartParams, for the caller to finish with
  // PQconnectPoll.
  PGconn* ConnectRaw(bool start_only = false) {
    // Our default connect_timeout comes first, so that the URL's own wins
    // (libpq lets later keywords override earlier ones).
    const char* keys[] = {"connect_timeout", "fallback_application_name",
                          "dbname", nullptr};
    const char* values[] = {"10", "sqlq", url_.c_str(), nullptr};
    PGconn* conn = start_only
                       ? PQconnectStartParams(keys, values, /*expand_dbname=*/1)
                       : PQconnectdbParams(keys, values, /*expand_dbname=*/1);
    // Server notices ("relation already exists, skipping") would go to
    // stderr, which belongs to the application.
    if (conn != nullptr) {
      PQsetNoticeProcessor(
          conn, [](void*, const char*) {}, nullptr);
    }
    return conn;
  }

  Result<std::unique_ptr<PgConn>> Connect() {
    PGconn* pg = ConnectRaw();
    if (pg == nullptr) return Status::Unavailable("connect: out of memory");
    auto conn = std::make_unique<PgConn>(pg, /*owned=*/true);
    if (PQstatus(pg) != CONNECTION_OK) {
      return Translate(nullptr, pg, "connect to PostgreSQL", Phase::kConnect);
    }
    // Every statement of the store is written for an index, read in order.
    // A queue table is often empty for a moment, and statistics taken then
    // make a sequential scan, or a bitmap scan of a whole queue and a sort,
    // look free until the next vacuum, however large the table has grown
    // (docs/engines/postgres.md, "Plans that do not depend on statistics").
    auto set =
        conn->Exec("SET enable_seqscan = off; SET enable_bitmapscan = off",
                   "configure session");
    if (!set.ok()) return set.status();
    return conn;
  }

  // A pooled connection, or a new one. A pooled connection that broke
  // while idle (server restart) is dropped here and replaced.
  // `pooled` says whether it was idle in the pool (and may have broken).
  Result<std::unique_ptr<PgConn>> Acquire() { return pool_.Acquire(); }
  void Release(std::unique_ptr<PgConn> conn) { pool_.Release(std::move(conn)); }

  // The schema version recorded, 0 when sqlq_schema does not exist yet.
  static Result<std::int64_t> SchemaVersion(PgConn& conn) {
    static constexpr const char* kExists =
        "SELECT to_regclass('sqlq_schema') IS NOT NULL";
    auto exists = conn.Run(kExists, Params(), "read schema version");
    if (!exists.ok()) return exists.status();
    if (exists->Int(0, 0) == 0) return 0;
    static constexpr const char* kVersion =
        "SELECT coalesce(max(version), 0) FROM sqlq_schema";
    auto version = conn.Run(kVersion, Params(), "read schema version");
    if (!version.ok()) return version.status();
    return version->Int(0, 0);
  }

  // Brings the schema to kSchemaVersion (core/migrate.h), in one
  // transaction under a transaction-scoped advisory lock.
  Status Migrate(PgConn& conn, bool create) {
    class Target : public core::MigrationTarget {
     public:
      explicit Target(PgConn& conn) : conn_(conn) {}
      std::int64_t latest() const override { return kSchemaVersion; }
      std::string where() const override { return PQdb(conn_.pg()); }
      Status Begin() override {
        conn_.ResetTxState();
        auto begun = conn_.Exec("BEGIN", "begin migration");
        return begun.ok() ? Status::Ok() : begun.status();
      }
      Result<std::int64_t> RecordedVersion() override {
        return SchemaVersion(conn_);
      }
      Status Lock() override {
        static constexpr const char* kLock = "SELECT pg_advisory_xact_lock($1)";
        auto locked = conn_.Run(kLock, Params().Int(kMigrationLock),
                                "lock schema for migration");
        return locked.ok() ? Status::Ok() : locked.status();
      }
      Status CreateSchemaTable() override {
        auto created = conn_.Exec(
            "CREATE TABLE IF NOT EXISTS sqlq_schema ("
            "version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL "
            "DEFAULT now())",
            "create schema table");
        return created.ok() ? Status::Ok() : created.status();
      }
      Status Apply(std::int64_t version) override {
        auto applied = conn_.Exec(kMigrations[version - 1], "migrate schema");
        return applied.ok() ? Status::Ok() : applied.status();
      }
      Status Record(std::int64_t version) override {
        static constexpr const char* kRecord =
            "INSERT INTO sqlq_schema (version) VALUES ($1)";
        auto recorded =
            conn_.Run(kRecord, Params().Int(version), "record schema version");
        return recorded.ok() ? Status::Ok() : recorded.status();
      }
      Status Finish(Status result) override {
        if (!result.ok()) {
          if (PQstatus(conn_.pg()) == CONNECTION_OK) {
            (void)conn_.Exec("ROLLBACK", "rollback");
          }
          return result;
        }
        auto committed =
            conn_.Exec("COMMIT", "commit migration", Phase::kCommit);
        return committed.ok() ? Status::Ok() : committed.status();
      }

     private:
      PgConn& conn_;
    } target(conn);
    return core::Migrate(target, create);
  }

  const std::string url_;
  const std::shared_ptr<Clock> clock_;  // null: the database clock
  const int write_groups_;
  const std::int64_t vacuum_threshold_;
  const std::int64_t fold_threshold_;
  core::ConnPool<PgConn> pool_;
  std::unique_ptr<Notifier> notifier_;
  std::unique_ptr<Vacuumer> vacuumer_;
  std::unique_ptr<Vacuumer> folder_;   // folds the counter deltas
  std::unique_ptr<ClaimMarks> marks_;  // null: claims read whole queues
};

}  // namespace

Result<std::unique_ptr<core::Engine>> Open(std::string_view url,
                                           const StoreOptions& options) {
  const core::UrlTuning taken = core::TakeUrlParams(url, kTuningParams);
  auto tuning = Tuning::From(taken);
  if (!tuning.ok()) return tuning.status();
  const std::string& u = taken.rest;
  // Malformed URLs are the caller's mistake, not an unreachable server.
  char* err = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(u.c_str(), &err);
  if (parsed == nullptr) {
    std::string detail = err != nullptr ? err : "cannot parse";
    if (err != nullptr) PQfreemem(err);
    while (!detail.empty() && detail.back() == '\n') detail.pop_back();
    return Status::InvalidArgument(
        fmt::format("malformed PostgreSQL URL: {}", detail));
  }
  PQconninfoFree(parsed);
  auto engine = std::make_unique<PostgresEngine>(u, *tuning, options.clock);
  Status s = engine->Init(options.create_if_missing);
  if (!s.ok()) return s;
  return std::unique_ptr<core::Engine>(std::move(engine));
}

}  // namespace sqlq::engines::postgres
