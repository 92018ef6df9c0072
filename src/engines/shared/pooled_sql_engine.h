// What the server engines (PostgreSQL, MariaDB/MySQL) share beyond the
// operations of SqlEngine<D> (sql_engine.h): their sessions, a pool of
// connections (core::ConnPool, whose RunWrite is the one retry policy) on
// which reads and callers' transactions run; and the parts of their
// sends and claims that are alike: the receipt's fence, dedup holds
// (sql_holds.h) and the claims of grouped queues (sql_groups.h).
//
// A dialect D provides, besides what SqlEngine<D> needs: kHeldBy and
// WriteHolds (dedup holds); kLeaseSet, IdsIn, AddIds, kGroupLookInOneStatement,
// kGroupLookLocks and GroupLookSql (grouped claims); kSchemaExistsSql and
// kSchemaVersionSql (the version a migration starts from).
//
// An engine derives from PooledSqlEngine<D>, implements Begin,
// InTransaction, Commit and its Write, and instantiates it once, in
// <engine>_shared.cc, beside SqlEngine<D>.

#ifndef SQLQ_ENGINES_SHARED_POOLED_SQL_ENGINE_H_
#define SQLQ_ENGINES_SHARED_POOLED_SQL_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/engine.h"
#include "core/rows.h"
#include "core/tx_conn.h"
#include "engines/shared/sql_engine.h"

namespace sqlq::engines::shared {

// A dedup key to hold (core/engine.h, SendParams): the message that had it.
struct HeldKey {
  std::int64_t message_id = 0;
  std::string key;
};

// Idle connections kept for reuse. Opening one costs the server a new
// session (on PostgreSQL a process) and the client its statements prepared
// again, so as many are kept as a busy server's database threads use at
// once: with 16, a server with 32 threads opened and closed connections
// all the time, and a mixed load ran at half speed. Keeping them does not
// raise how many are open at the peak, only how long they stay open after.
constexpr std::size_t kMaxIdle = 64;

template <class D>
class PooledSqlEngine : public SqlEngine<D> {
 public:
  using Base = SqlEngine<D>;
  using typename Base::DConn;
  using typename Base::Params;
  using typename Base::Rows;

  // --- transactions -------------------------------------------------------
  // Write() is each engine's own: how a write transaction begins and
  // commits is where the engines differ (PostgreSQL sends BEGIN with the
  // first statement, MariaDB reads the clock with it).

  Status Read(const std::function<Status(core::Conn&)>& body) override {
    return pool_.RunRead([&](DConn& c) { return Begin(c, /*read_only=*/true); },
                         [&](DConn& c) { return InTransaction(c, body); });
  }

  Result<std::unique_ptr<core::Conn>> BeginTx() override {
    auto conn =
        pool_.Lend([&](DConn& c) { return Begin(c, /*read_only=*/false); });
    if (!conn.ok()) return conn.status();
    return std::unique_ptr<core::Conn>(std::move(*conn));
  }

  Status CommitTx(core::Conn& c) override { return Commit(Native(c)); }

 protected:
  // The schema version sqlq_schema records, 0 when it does not exist yet
  // (D::kSchemaExistsSql, D::kSchemaVersionSql): what core::Migrate starts
  // from.
  static Result<std::int64_t> SchemaVersion(DConn& conn) {
    auto exists =
        conn.Run(D::kSchemaExistsSql, Params(), "read schema version");
    if (!exists.ok()) return exists.status();
    if (exists->Int(0, 0) == 0) return 0;
    auto version =
        conn.Run(D::kSchemaVersionSql, Params(), "read schema version");
    if (!version.ok()) return version.status();
    return version->Int(0, 0);
  }

  using Base::AddCounters;
  using Base::CheckQueue;
  using Base::clock_;
  using Base::Native;
  using Base::NowUs;

  // `clock` null: the database's clock. `connect` opens a connection for
  // the pool.
  PooledSqlEngine(std::shared_ptr<Clock> clock,
                  typename core::ConnPool<DConn>::Connect connect)
      : Base(std::move(clock)), pool_(std::move(connect), kMaxIdle) {}

  // Begins a transaction on `conn` (a read-only snapshot, or a write
  // transaction for a caller's Tx); on failure nothing is left open.
  virtual Status Begin(DConn& conn, bool read_only) = 0;

  // Runs `body` in the transaction begun on `conn`, and commits (or rolls
  // back when `body` failed).
  virtual Status InTransaction(
      DConn& conn, const std::function<Status(core::Conn&)>& body) = 0;

  // Commits, then does what follows a commit in this process.
  virtual Status Commit(DConn& conn) = 0;

  // The parameters that fence a receipt (id, queue, token, attempt), in
  // that order, for `WHERE id = ? AND queue_id = ? AND token = ? AND
  // attempts = ?`.
  static Params Fence(std::int64_t queue_id, const core::Receipt& r) {
    Params p;
    AppendFence(p, queue_id, r);
    return p;
  }
  static void AppendFence(Params& p, std::int64_t queue_id,
                          const core::Receipt& r) {
    p.Int(r.id).Int(queue_id).Int(core::TokenBits(r.token)).Int(r.attempt);
  }

  // Dedup windows (core/engine.h, SendParams). HoldKeys holds `keys` until
  // now + unique_for (nothing when either is empty or 0).
  Status HoldKeys(DConn& conn, std::int64_t queue_id,
                  const std::vector<HeldKey>& keys, core::Micros unique_for);
  // The keys of rows of (message id, dedup key or NULL).
  static std::vector<HeldKey> KeysOf(const Rows& rows) {
    std::vector<HeldKey> keys;
    for (int i = 0; i < rows.size(); ++i) {
      if (!rows.IsNull(i, 1))
        keys.push_back({rows.Int(i, 0), rows.Bytes(i, 1)});
    }
    return keys;
  }
  // After a send's inserts: each message of `out` stored under a key that
  // an unexpired hold has is deleted again and becomes a duplicate of the
  // hold's message; `stored` counts what remains. Run after the inserts,
  // which wait for a transaction that is acking the key's holder, so that
  // its hold is seen here (a look before would miss it).
  Status ApplyHolds(DConn& conn, const core::SendParams& p,
                    std::vector<SendResult>& out, std::int64_t& stored);

  // A claim of a queue with groups (sql_groups.h).
  Result<core::ClaimOutcome> ClaimGroups(DConn& conn,
                                         const core::ClaimParams& p);
  // Moves messages `ids`, locked by this transaction and out of attempts
  // (their last lease ran out), to the dead letters, holding their dedup
  // keys for p.unique_for.
  virtual Status BuryExhausted(DConn& conn,
                               const std::vector<std::int64_t>& ids,
                               std::int64_t now,
                               const core::ClaimParams& p) = 0;

  // Queues whose acks release dependents (sqlq_queues.dependents, which is
  // never cleared), as the engine's ClaimAndCommit found them: their acks
  // go the general way at once.
  bool AcksReleaseDependents(std::int64_t queue_id) {
    std::lock_guard<std::mutex> lock(dependents_mu_);
    return dependents_.contains(queue_id);
  }
  void NoteAcksReleaseDependents(std::int64_t queue_id) {
    std::lock_guard<std::mutex> lock(dependents_mu_);
    dependents_.insert(queue_id);
  }

  core::ConnPool<DConn> pool_;

 private:
  std::mutex dependents_mu_;
  std::unordered_set<std::int64_t> dependents_;  // guarded by dependents_mu_
};

}  // namespace sqlq::engines::shared

#endif  // SQLQ_ENGINES_SHARED_POOLED_SQL_ENGINE_H_
