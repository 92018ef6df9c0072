// The operations every engine runs the same way above its SQL: queues
// (create, look up, list, alter, pause, purge, stats) and the rows of
// sqlq_queues that name things; rings; rotations; topics; schedules; the state
// of limited claims; the listing and pruning of dead letters and archive;
// finding, counting and changing messages by filter; the share lock every
// operation takes on its queue; refused receipts; the transaction's clock
// and its counters. Written once, over a dialect that holds each engine's
// SQL and client calls (as River splits its drivers from its logic).
//
// SqlEngine<D> holds the operations only. How a transaction begins and
// commits, and on which connection, is each engine's: the server engines
// (PostgreSQL, MariaDB/MySQL) take theirs from a pool of sessions
// (PooledSqlEngine<D>, pooled_sql_engine.h), SQLite from its one writer
// and its readers. Sends, claims, acks, nacks, extends and redrives are
// each engine's too: their SQL is where the engines differ most, and
// where each is fastest.
//
// A dialect D provides (the names below are its requirements):
//   Conn, Params, Rows       the engine's connection (a core::TxConn),
//                            statement parameters and result set, with
//                            conn.Run(sql, params, what) -> Result<Rows>
//                            (`sql` of static storage: it may be kept
//                            prepared by its address),
//                            conn.RunAll(sql, vector<Params>, what),
//                            conn.RunOnce(sql, params, what) for a
//                            statement built at run time (not kept),
//                            Params::Int/Text/TextOrNull/Bytes/Payload/
//                            Null, Rows::size/Int/Bytes/IsNull/affected;
//   kJsonColumns             "headers, errors" selected as text;
//   kMessageStyle            how message_sql.h writes its statements;
//   AfterSteer(conn, queue)  what a bulk change of messages needs at commit
//                            (PostgreSQL: a notification);
//   BeforeListing(conn)      what the listing's plans need first;
//   Statement(sql)           a statement written with ? placeholders, as
//                            the engine runs it (PostgreSQL numbers them);
//   kForUpdate               what a read that locks the rows it reads for
//                            the rest of the transaction ends with;
//   kCascades                whether deleting a row of sqlq_queues deletes
//                            the rows of its ring or rotation (foreign
//                            keys ON DELETE CASCADE);
//   the statements named k... below whose text differs between engines
//                            (each dialect says how and why), and
//   the static functions named D:: in the definitions, whose statements
//   differ in number or kind, not only in text (RETURNING on PostgreSQL
//   and SQLite, a second read on MariaDB): InsertName, PushEntry,
//   DeleteOldest, NextStamp, UpdateItem.
// PostgreSQL's and SQLite's dialects take what they write alike from
// StandardSql<D> (standard_sql.h); MariaDB's writes its own.
// The definitions are in sql_queue.h, sql_ring.h, sql_rotation.h,
// sql_topics.h, sql_schedules.h, sql_limits.h, sql_results.h, sql_deps.h
// and sql_batches.h.
//
// An engine derives from SqlEngine<D> (a server engine through
// PooledSqlEngine<D>), implements the operations that are its own and
// instantiates SqlEngine<D> once, in <engine>_shared.cc.
//
// Locking, for every engine: every operation on a queue, ring or rotation
// first takes a share lock on its sqlq_queues row (CheckQueue), so that a
// drop, which deletes that row, waits for it. Rings: a push locks its
// group's row with the upsert, which serialises the pushes to one group;
// every operation that deletes entries locks the group row first, so group
// row, then entries, is the one lock order. Setting a ring's capacity locks
// the ring's row for update, which waits for the pushes in flight (their
// share locks) and holds new ones off until it commits: no push evicts by
// the old capacity after the new one is in force. Rotations: next() and
// add() lock the rotation's row for update first (LockRotation), so they
// run one after the other per rotation across connections and processes:
// each call sees the stamps of the calls before it, which keeps the
// round-robin order and its fairness, and no two calls get the same item.
// next() also locks the items it serves against a concurrent
// fail/ok/reset/remove. On SQLite these reads lock nothing (its dialect
// reads plainly): a write transaction holds the database's one write lock
// from its BEGIN IMMEDIATE to its end, which serialises them all.

#ifndef SQLQ_ENGINES_SHARED_SQL_ENGINE_H_
#define SQLQ_ENGINES_SHARED_SQL_ENGINE_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/engine.h"
#include "core/tx_conn.h"
#include "sqlq/store.h"

namespace sqlq::engines::shared {

// A dialect whose database takes the shared statements' ? placeholders as
// they are written (SQLite, MariaDB; PostgreSQL numbers them).
struct QuestionMarks {
  static std::string Statement(std::string_view sql) {
    return std::string(sql);
  }
};

// A ring entry as stored by Dialect::PushEntry.
struct Pushed {
  std::int64_t seq = 0;
  // Entries in the group now, this one included.
  std::int64_t entries = 0;
  // The ring's capacity as it is now (not as the caller's handle cached
  // it), read after the group's row lock was granted.
  std::int64_t capacity = 0;
};

template <class D>
class SqlEngine : public core::Engine {
 public:
  using DConn = typename D::Conn;
  using Params = typename D::Params;
  using Rows = typename D::Rows;

  // --- queues ----------------------------------------------------------------

  Result<core::QueueRecord> CreateQueue(
      core::Conn& c, const core::CreateQueueParams& op) override;

  Result<core::QueueRecord> GetQueue(core::Conn& c,
                                     std::string_view name) override;

  Result<std::vector<core::QueueRecord>> ListQueues(core::Conn& c) override;

  Result<std::int64_t> PurgeQueue(core::Conn& c,
                                  std::int64_t queue_id) override;

  Status AlterQueue(core::Conn& c, const core::AlterQueueParams& op) override;

  Result<std::int64_t> UnlinkDeadLetterQueue(core::Conn& c,
                                             std::string_view name) override;

  Status SetQueuePaused(core::Conn& c,
                        const core::SetQueuePausedParams& p) override;

  Result<QueueStats> GetQueueStats(core::Conn& c,
                                   std::int64_t queue_id) override;

  Result<Timestamp> Now(core::Conn& c) override;

  // The dead letters' queue and the queue they go to (itself unless
  // to_queue_id names another) checked, then the engine's MoveDeadLetters.
  Result<std::int64_t> Redrive(core::Conn& c,
                               const core::RedriveParams& p) override;

  // Schedules (sql_schedules.h).
  Result<std::int64_t> CreateSchedule(core::Conn& c,
                                      const ScheduleInfo& info) override;
  Result<std::vector<core::ScheduleRecord>> ListSchedules(
      core::Conn& c) override;
  Status DropSchedule(core::Conn& c, std::string_view name) override;
  Status SetSchedulePaused(core::Conn& c,
                           const core::SetSchedulePausedParams& p) override;
  Result<bool> TakeSchedulerLease(
      core::Conn& c, const core::TakeSchedulerLeaseParams& p) override;
  Result<bool> AdvanceSchedule(core::Conn& c,
                               const core::AdvanceScheduleParams& a) override;

  // Limits (sql_limits.h).
  Result<core::LimitState> LockLimits(core::Conn& c,
                                      const core::LockLimitsParams& p) override;
  Status SaveLimits(core::Conn& c, const core::SaveLimitsParams& p) override;

  // --- dead letters and archive -------------------------------------------

  Result<std::vector<DeadLetter>> ListDead(
      core::Conn& c, const core::ListDeadParams& op) override;

  Result<std::int64_t> PurgeDead(core::Conn& c, std::int64_t queue_id) override;

  Result<std::int64_t> PruneDead(core::Conn& c,
                                 const core::PruneDeadParams& op) override;

  Result<std::int64_t> PruneHolds(core::Conn& c,
                                  std::int64_t queue_id) override;

  Result<std::vector<ArchivedMessage>> ListArchive(
      core::Conn& c, const core::ListArchiveParams& op) override;

  Result<std::int64_t> PruneArchive(
      core::Conn& c, const core::PruneArchiveParams& op) override;

  // --- single messages ------------------------------------------------------

  Result<core::FoundMessages> FindMessages(
      core::Conn& c, const core::FindMessagesParams& op) override;

  Result<std::int64_t> SteerMessages(
      core::Conn& c, const core::SteerMessagesParams& op) override;
  Result<std::int64_t> CountMessages(
      core::Conn& c, const core::FindMessagesParams& p) override;
  Status ReportWaiting(core::Conn& c,
                       const core::ReportWaitingParams& r) override;
  Result<std::map<std::string, std::int64_t>> ReadWaiting(
      core::Conn& c, const core::ReadWaitingParams& p) override;

  // --- live workers
  // ------------------------------------------------------------

  Status ReportWorker(core::Conn& c,
                      const core::ReportWorkerParams& p) override;
  Result<bool> RemoveWorker(core::Conn& c, std::string_view id) override;
  Result<std::vector<core::WorkerRecord>> ListWorkers(core::Conn& c) override;

  Result<std::optional<std::string>> ReadHeaders(core::Conn& c,
                                                 std::int64_t queue_id,
                                                 std::int64_t id) override;

  // --- results and progress (sql_results.h) ---------------------------------

  Status SaveProgress(core::Conn& c,
                      const core::SaveProgressParams& p) override;
  Status SaveResult(core::Conn& c, const core::SaveResultParams& p) override;
  Result<std::optional<core::ResultRecord>> ReadResult(
      core::Conn& c, std::int64_t queue_id, std::int64_t message_id) override;
  Result<std::int64_t> PruneResults(core::Conn& c) override;

  // --- dependencies (sql_deps.h) -------------------------------------------

  Status FlagDependents(core::Conn& c, std::span<const std::int64_t> parents,
                        std::span<const std::int64_t> queues) override;
  Result<std::vector<core::ParentState>> LockParents(
      core::Conn& c, std::span<const std::int64_t> ids) override;
  Result<std::map<std::int64_t, std::string>> QueueNames(
      core::Conn& c, std::span<const std::int64_t> ids) override;
  Result<std::vector<core::DeadDependent>> TakeDeadDependents(
      core::Conn& c, std::int64_t queue_id, std::span<const std::int64_t> ids,
      bool unlink) override;
  Status WriteLinks(core::Conn& c, std::span<const core::DependencyLink> links,
                    std::span<const core::ChildWaits> children) override;
  Result<core::ReleaseOutcome> ReleaseDependents(
      core::Conn& c, std::int64_t queue_id,
      std::span<const std::int64_t> parents) override;
  Result<std::vector<core::EndedDependency>> EndedDependencies(
      core::Conn& c, std::int64_t queue_id) override;
  Result<bool> SettleDependency(core::Conn& c,
                                const core::EndedDependency& d) override;
  Result<std::vector<core::DependencyRecord>> ListDependencies(
      core::Conn& c, std::int64_t child_id) override;
  Result<std::vector<core::LinkRecord>> ListLinks(core::Conn& c,
                                                  std::int64_t queue_id,
                                                  std::int64_t id,
                                                  int limit) override;
  Status DropDependencies(core::Conn& c, std::int64_t queue_id) override;
  Result<std::int64_t> MoveParents(core::Conn& c, std::int64_t from,
                                   std::int64_t to) override;

  // --- batches (sql_batches.h) ----------------------------------------------

  Result<std::optional<std::int64_t>> AddBatch(
      core::Conn& c, const core::AddBatchParams& p) override;
  Status SealBatch(core::Conn& c, const core::SealBatchParams& p) override;
  Result<std::optional<core::BatchRecord>> CountBatch(
      core::Conn& c, std::int64_t callback_id,
      const BatchCounts& delta) override;
  Status FinishBatch(core::Conn& c, const core::FinishBatchParams& p) override;
  Result<std::optional<core::BatchRecord>> FindBatch(
      core::Conn& c, std::string_view name) override;
  Result<std::vector<core::BatchMember>> PendingBatchMembers(
      core::Conn& c, std::int64_t callback_id) override;
  Result<std::vector<core::EndedDependency>> EndedBatchMembers(
      core::Conn& c, std::int64_t callback_id) override;
  Status MarkBatchCancelled(core::Conn& c, std::int64_t batch_id) override;
  Result<std::int64_t> PruneBatches(core::Conn& c) override;

  // --- topics (sql_topics.h) ------------------------------------------------

  Result<std::int64_t> CreateTopic(core::Conn& c,
                                   std::string_view name) override;
  Result<std::int64_t> GetTopic(core::Conn& c, std::string_view name) override;
  Result<std::vector<core::TopicRecord>> ListTopics(core::Conn& c) override;
  Status DropTopic(core::Conn& c, std::int64_t topic_id) override;
  Result<bool> Subscribe(core::Conn& c,
                         const core::SubscribeParams& p) override;
  Result<bool> Unsubscribe(core::Conn& c, std::int64_t topic_id,
                           std::int64_t queue_id) override;
  Result<std::vector<core::SubscriberRecord>> ListSubscribers(
      core::Conn& c, std::int64_t topic_id) override;
  Result<std::vector<core::SubscriberRecord>> LockSubscribers(
      core::Conn& c, std::string_view name) override;
  Status DropSubscriptionsOf(core::Conn& c, std::int64_t queue_id) override;

  // --- rings -----------------------------------------------------------------

  Result<core::RingRecord> CreateRing(
      core::Conn& c, const core::CreateRingParams& op) override;

  Result<core::KindsRecord> ListRingsAndRotations(core::Conn& c) override;
  Result<core::RingRecord> GetRing(core::Conn& c,
                                   std::string_view name) override;

  Status DropRing(core::Conn& c, std::int64_t ring_id) override;

  Result<RingEntry> PushToRing(core::Conn& c,
                               const core::PushToRingParams& op) override;

  Result<std::vector<RingEntry>> ReadRing(
      core::Conn& c, const core::ReadRingParams& op) override;

  Result<std::vector<RingGroup>> ListRingGroups(core::Conn& c,
                                                std::int64_t ring_id) override;

  Status DeleteRingEntry(core::Conn& c,
                         const core::DeleteRingEntryParams& op) override;

  Result<std::int64_t> DeleteRingGroup(
      core::Conn& c, const core::DeleteRingGroupParams& op) override;

  Result<std::int64_t> SetRingCapacity(
      core::Conn& c, const core::SetRingCapacityParams& op) override;

  Result<RingStats> GetRingStats(core::Conn& c, std::int64_t ring_id) override;

  // --- rotations -------------------------------------------------------------

  Result<core::RotationRecord> CreateRotation(
      core::Conn& c, const core::CreateRotationParams& op) override;

  Result<core::RotationRecord> GetRotation(core::Conn& c,
                                           std::string_view name) override;

  Status DropRotation(core::Conn& c, std::int64_t rotation_id) override;

  Status AddToRotation(core::Conn& c,
                       const core::AddToRotationParams& op) override;

  Status RemoveFromRotation(core::Conn& c,
                            const core::RemoveFromRotationParams& op) override;

  Result<std::vector<RotationItem>> ServeFromRotation(
      core::Conn& c, const core::ServeFromRotationParams& op) override;

  Result<RotationItem> ReportRotationFailure(
      core::Conn& c, const core::ReportRotationFailureParams& op) override;

  Result<RotationItem> ReportRotationSuccess(
      core::Conn& c, const core::ReportRotationSuccessParams& op) override;

  Result<RotationItem> ResetRotationItem(
      core::Conn& c, const core::ResetRotationItemParams& op) override;

  Result<std::vector<RotationItem>> ListRotationItems(
      core::Conn& c, std::int64_t rotation_id) override;

  Result<RotationStats> GetRotationStats(core::Conn& c,
                                         std::int64_t rotation_id) override;

 protected:
  // `clock` null: the database's clock.
  explicit SqlEngine(std::shared_ptr<Clock> clock) : clock_(std::move(clock)) {}

  static DConn& Native(core::Conn& c) { return static_cast<DConn&>(c); }

  // How the listing, counting and steering statements are written: the
  // dialect's, unless the engine's schema calls for another (MariaDB's
  // dedup keys held apart).
  virtual const shared::MessageSqlStyle& MessageStyle() const {
    return D::kMessageStyle;
  }

  // The transaction's "now" in microseconds: the store's clock if it has
  // one, else the database's, read once per transaction (engines that read
  // it with BEGIN set conn.tx_now_us first).
  Result<std::int64_t> NowUs(DConn& conn);

  // Makes sure the queue (or ring, or rotation) exists and, in write
  // transactions, keeps it from being dropped until this transaction ends:
  // a share lock on its row, which conflicts only with its deletion, not
  // with other senders' or claimers' locks. Taking it first, before any
  // message row, gives every transaction the same lock order as a drop
  // (queue row, then its messages by cascade), so the two cannot
  // deadlock. `lock` false: only look (a claim, which must stay free of
  // writes and locks when it finds nothing).
  Status CheckQueue(DConn& conn, std::int64_t queue_id, bool lock = true);

  // CheckQueue for a ring or rotation: kNotFound naming the kind.
  Status CheckKind(DConn& conn, std::int64_t id, std::string_view kind);

  // CheckQueue, then NowUs: the start of every operation on a queue that
  // needs the time.
  Result<std::int64_t> CheckedNow(DConn& conn, std::int64_t queue_id);

  // Redrive's move, each engine's own: the dead letters `p` names go back
  // as messages of queue `to`, ready at `now_us`. Redrive has checked
  // both queues.
  virtual Result<std::int64_t> MoveDeadLetters(DConn& conn,
                                               const core::RedriveParams& p,
                                               std::int64_t to,
                                               std::int64_t now_us) = 0;

  // Adds to the queue's counters, at commit when the transaction defers
  // them. REQUIRES: CheckQueue(queue_id) in this transaction.
  Status AddCounters(DConn& conn, std::int64_t queue_id,
                     const core::QueueCounters& d);

  // Writes counter changes now (each engine keeps its counters its way).
  virtual Status WriteCounters(DConn& conn, std::int64_t queue_id,
                               const core::QueueCounters& d) = 0;

  // Why `name` is not a `want`: missing, or another kind of thing.
  static Status Missing(DConn& conn, std::string_view name,
                        std::string_view want);

  // The name is taken: says by what kind of thing.
  static Status Taken(DConn& conn, std::string_view name);

  // The counters in the order of the columns sends, claims, acks, nacks,
  // expirations, dead_lettered, pushes, serves, expired.
  static void AppendCounters(Params& p, const core::QueueCounters& d) {
    p.Int(d.sends)
        .Int(d.claims)
        .Int(d.acks)
        .Int(d.nacks)
        .Int(d.expirations)
        .Int(d.dead_lettered)
        .Int(d.pushes)
        .Int(d.serves)
        .Int(d.expired);
  }

  // Says why a receipt was refused: the message is gone, or it is there
  // under another lease.
  static Status Refused(DConn& conn, std::int64_t queue_id,
                        const core::Receipt& r);

  const std::shared_ptr<Clock> clock_;  // null: the database clock

 private:
  // Creates the row of a ring or rotation (`kind` is one of those two
  // literals); kAlreadyExists when the name is taken by any kind.
  Result<std::int64_t> InsertKind(DConn& conn, std::string_view name,
                                  const char* kind, std::size_t max_payload,
                                  std::int64_t capacity, int max_failures);

  // The sqlq_queues row of the ring or rotation `name` (`kind` is one of
  // those two literals): id, capacity, max_failures, max_payload. kNotFound
  // saying what the name is when it is not a `kind`.
  static Result<Rows> FindKind(DConn& conn, std::string_view name,
                               const char* kind);

  // Drops a ring, rotation or topic: `drop` deletes its row of sqlq_queues
  // (by id and kind), after, on engines without foreign keys (SQLite), the
  // statements `children` (each by the id) deleted the rows that hang on
  // it; with them, ON DELETE CASCADE does.
  static Status DropKindRow(DConn& conn, std::int64_t id,
                            const std::string& drop,
                            std::initializer_list<const std::string*> children,
                            std::string_view what);

  // Locks the group's row (the lock a push takes), before any of its
  // entries: false when the group was never pushed to.
  static Result<bool> LockGroup(DConn& conn, std::int64_t ring_id,
                                std::string_view group);

  // Deletes the group's `n` oldest entries (lowest seq: a total order) and
  // returns how many went. REQUIRES: the group row locked.
  static Result<std::int64_t> EvictOldest(DConn& conn, std::int64_t ring_id,
                                          std::string_view group,
                                          std::int64_t n);

  static Status AdjustEntries(DConn& conn, std::int64_t ring_id,
                              std::string_view group, std::int64_t delta);

  // Locks the rotation's row for update (to commit): serialises next() and
  // add() per rotation. kNotFound when it was dropped.
  static Status LockRotation(DConn& conn, std::int64_t rotation_id);
};

}  // namespace sqlq::engines::shared

#endif  // SQLQ_ENGINES_SHARED_SQL_ENGINE_H_
