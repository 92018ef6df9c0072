// The internal engine interface, split as River splits its driver: how
// operations run in transactions (Transactions), how waiting claims hear of
// other processes' writes (ForeignWriteWatch), and one method per storage
// operation in an interface per noun (QueueOps, MessageOps, RingOps,
// RotationOps, ScheduleOps, TopicOps). An engine implements them all (Engine);
// core code takes the narrowest one it needs.
//
// Division of labour (docs/architecture.md): core decides what happens
// (validation, backoff, dead-lettering rule, lease tokens, batching of
// concurrent callers, wake-ups) and passes the decision in a params struct;
// the engine only persists it, in as few statements as its SQL allows. Every
// engine runs the same conformance suite (tests/conformance).
//
// Transactions: every operation runs on a Conn inside a transaction the core
// opened through Write()/Read() or a caller's Tx. Operations never commit.
// Errors are translated to sqlq codes inside the engine, in one function.
//
// Clean failures: an operation that fails with one of the codes for which
// IsCleanFailure() holds (not found, stale receipt, invalid argument, already
// exists, too large) has written nothing, so the other operations merged into
// the same transaction may still commit. Engines check such preconditions
// before they write. Any other failure may have written part of the
// operation and aborts the whole transaction.

#ifndef SQLQ_CORE_ENGINE_H_
#define SQLQ_CORE_ENGINE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/receipt.h"
#include "sqlq/queue.h"
#include "sqlq/ring.h"
#include "sqlq/rotation.h"
#include "sqlq/schedule.h"
#include "sqlq/status.h"
#include "sqlq/topic.h"

namespace sqlq::core {

using Micros = std::chrono::microseconds;

// One engine connection. Engines subclass it; core only passes it back.
class Conn {
 public:
  virtual ~Conn() = default;
};

struct QueueRecord {
  std::int64_t id = 0;
  QueueInfo info;
};

// Changes to the counters of a queue, ring or rotation (sends, acks, ...,
// pushes, serves), which engines gather per transaction and write once at
// commit rather than once per operation.
struct QueueCounters {
  std::int64_t sends = 0, claims = 0, acks = 0, nacks = 0, expirations = 0,
               dead_lettered = 0, pushes = 0, serves = 0;
  // Jobs not started by their expiry (QueueStats::expired).
  std::int64_t expired = 0;
  QueueCounters& operator+=(const QueueCounters& d) {
    sends += d.sends;
    claims += d.claims;
    acks += d.acks;
    nacks += d.nacks;
    expirations += d.expirations;
    dead_lettered += d.dead_lettered;
    pushes += d.pushes;
    serves += d.serves;
    expired += d.expired;
    return *this;
  }
};

struct RingRecord {
  std::int64_t id = 0;
  std::string name;
  RingOptions options;
};

struct RotationRecord {
  std::int64_t id = 0;
  std::string name;
  RotationOptions options;
};

struct KindsRecord {
  std::vector<RingRecord> rings;
  std::vector<RotationRecord> rotations;
};

// Each message's headers go in as EncodeHeaders (core/columns.h) gives
// them, and it becomes claimable at the later of (now + delay) and
// NotBeforeUs (core/rows.h).
// Dedup windows (QueueOptions::unique_for): when `unique_for` is above 0,
// an operation that removes a message with a dedup key from the queue by
// ack or dead-lettering records a hold on the key until now + unique_for
// (sqlq_dedup_holds: queue, key, message id, end), replacing any earlier
// hold; a send with `unique_for` above 0 whose key is held by an unexpired
// hold stores nothing and returns the hold's message id as a duplicate,
// also when the holder was acked by a transaction that committed while the
// send waited for it (engines check after their insert, not before, where
// concurrent writers exist). With 0, none of this runs.
struct SendParams {
  std::int64_t queue_id = 0;
  std::span<const Message> messages;
  Micros unique_for{0};
  // The queue's GroupMode is not kNone: a message without a group is
  // stored in the group "" (else its group column is NULL).
  bool grouped = false;
};

struct ClaimParams {
  std::int64_t queue_id = 0;
  int max = 1;
  Micros lease{0};
  // Fencing token of this claim's leases (random, never 0).
  std::uint64_t token = 0;
  // Candidates whose attempts already reached this are dead-lettered with
  // `exhausted_error` (or their last error) instead of being leased.
  int max_attempts = 1;
  std::string_view worker;
  // ClaimOptions::max_bytes: lease messages while their payloads total at
  // most this, always at least one; 0 for no limit. Candidates that are
  // dead-lettered instead do not count.
  std::size_t max_bytes = 0;
  Micros unique_for{0};  // for the candidates dead-lettered (SendParams)
  // Not kNone: the claim goes round the queue's groups in key order,
  // starting after `after_group` (from the first group when unset), taking
  // at most one message from a group per round: kFair its first ready
  // message in id order, kOrdered its first message (in id order) if that
  // is ready; more rounds while `max` is not reached and a round leased
  // something. A claim looks at most kMaxIdleGroups groups in a row that
  // give it nothing, and a group at most once between two leases (groups
  // come and go while it walks). ClaimOutcome::last_group says where to
  // start next time: the last group looked at.
  GroupMode groups = GroupMode::kNone;
  std::optional<std::string> after_group;
  // kFair: a group's window, its `group_limit` oldest messages, of which
  // only the ready ones can be claimed (at most that many leased per
  // group); 0 for no limit. kOrdered is a window of 1 whatever this says.
  int group_limit = 0;
  // The queue's max_leased and rate limit (QueueOptions), 0 for none:
  // core::ClaimLimited applies them around the engine's Claim.
  std::int64_t max_leased = 0, rate_u = 0, rate_burst = 0;
};

// A schedule as stored: its id, and its info with next_tick and last_tick
// as the columns hold them (microseconds; 0 for none).
struct ScheduleRecord {
  std::int64_t id = 0;
  ScheduleInfo info;
};

// ScheduleOps::SetSchedulePaused: resumed at `next_us`.
struct SetSchedulePausedParams {
  std::string_view name;
  bool paused = false;
  std::int64_t next_us = 0;
};

// ScheduleOps::TakeSchedulerLease: for `holder` until now + `lease`.
struct TakeSchedulerLeaseParams {
  std::string_view holder;
  Micros lease{0};
};

// A scheduler pass's move of a schedule past the ticks it sent or skipped
// (ScheduleOps::AdvanceSchedule): made only while the schedule is still at
// `from_us`, so that of two passes that read the same tick one sends it.
struct AdvanceScheduleParams {
  std::int64_t id = 0;
  std::int64_t from_us = 0;  // its next tick as the pass read it
  std::int64_t next_us = 0;  // 0: it never ticks again
  std::int64_t last_us = 0;  // the last tick sent now; 0: unchanged
  std::int64_t sent = 0, skipped = 0;
  std::string_view last_error;  // kept as is when empty and nothing sent
};

// A limited queue's claim state (ClaimParams::max_leased, rate_u), read
// under the lock that lets one limited claim of the queue run at a time.
struct LimitState {
  std::int64_t now_us = 0;    // the store's clock
  std::int64_t tokens_u = 0;  // the rate bucket, claims times 10^6...
  std::int64_t at_us = 0;     // ...as of this time; 0 for a full bucket
  // Counted only when asked: the queue's live leases taken by limited
  // claims, and the earliest of their ends (0 when none).
  std::int64_t leased = 0;
  std::int64_t first_end_us = 0;
};

// MessageOps::LockLimits: with `count_leased`, LimitState::leased and
// first_end_us are counted.
struct LockLimitsParams {
  std::int64_t queue_id = 0;
  bool count_leased = false;
};

// MessageOps::SaveLimits: the bucket of `state` stored when `bucket`;
// `leased`, the ids just leased with `token` (TokenBits), recorded.
struct SaveLimitsParams {
  std::int64_t queue_id = 0;
  LimitState state;
  bool bucket = false;
  std::span<const std::int64_t> leased;
  std::int64_t token = 0;
};

struct ClaimOutcome {
  // In claim order. receipt is left empty: core formats it.
  std::vector<ClaimedMessage> messages;
  std::int64_t expirations = 0;  // leased messages whose lease had run out
  std::int64_t dead_lettered = 0;
  // Grouped claims: the last group looked at (ClaimParams).
  std::optional<std::string> last_group;
  // Set by core::ClaimLimited when a limit gave the claim fewer messages
  // than it asked for: which one, and when more becomes claimable.
  std::string_view limited_by;
  Micros retry_after{0};

  // What the claim adds to its queue's counters.
  QueueCounters Counters() const {
    return {.claims = static_cast<std::int64_t>(messages.size()),
            .expirations = expirations,
            .dead_lettered = dead_lettered};
  }
};

struct AckParams {
  std::int64_t queue_id = 0;
  Receipt receipt;
  bool archive = false;
  Micros unique_for{0};  // SendParams
  // A job dropped at its expiry (ExpiryAction::kDrop) rather than acked:
  // the same delete and dedup hold, counted as expired, not as an ack
  // (AckCounters). Core never archives such a one.
  bool expired = false;
};

// What an Ack adds to its queue's counters.
inline QueueCounters AckCounters(const AckParams& p) {
  return p.expired ? QueueCounters{.expired = 1} : QueueCounters{.acks = 1};
}

struct RetryParams {
  std::int64_t queue_id = 0;
  Receipt receipt;
  Micros delay{0};
  std::string_view error;
  // The error as the message's history keeps it (CleanErrorText).
  std::string_view history_error;
  // Give the message back unworked instead (a Worker's prefetched message
  // it never handed out): ready after `delay`, its attempt returned
  // (attempts - 1), last error kept, counted as one claim less rather than
  // as a nack.
  bool release = false;
  // Snooze it instead (NackAction::kSnooze), if its snoozes are below
  // kMaxSnoozes: ready after `delay`, its attempt returned (attempts - 1),
  // snoozes + 1, last error kept, no counter change; `*snoozed` says
  // whether it was. A receipt that does not match, or a message snoozed
  // kMaxSnoozes times, changes nothing and is no error: core then nacks it
  // as a failed attempt, which says which it was.
  bool snooze = false;
  bool* snoozed = nullptr;
};

// QueueOps::ReportWaiting: this process's claims waiting for each queue
// (queue id, how many), which replace its earlier report, stamped with
// the engine's clock. Rows of any process reported before now -
// `forget_after` go too (processes gone without a word).
struct ReportWaitingParams {
  std::string_view process;
  std::span<const std::pair<std::int64_t, std::int64_t>> waiting;
  Micros forget_after{0};
};

// QueueOps::ReadWaiting: the reports made in the last `fresh` by the
// engine's clock.
struct ReadWaitingParams {
  Micros fresh{0};
};

// Engine::Cancel: the queue's messages `ids` that are still in it, in
// any state, go to its dead letters with `error` as their last error and
// in their error history (their attempts unchanged); a leased one's lease
// ends with it, so its worker's receipt is refused afterwards.
struct CancelParams {
  std::int64_t queue_id = 0;
  std::span<const std::int64_t> ids;
  std::string_view error;
  Micros unique_for{0};  // SendParams
};

struct BuryParams {
  std::int64_t queue_id = 0;
  Receipt receipt;
  std::string_view error;
  std::string_view history_error;  // as in RetryParams
  Micros unique_for{0};            // SendParams
  // A job dead-lettered at its expiry: counted as expired too (BuryCounters).
  bool expired = false;
};

// What a Bury adds to its queue's counters: a nack that dead-letters.
inline QueueCounters BuryCounters(const BuryParams& p) {
  return {.nacks = 1, .dead_lettered = 1, .expired = p.expired ? 1 : 0};
}

// ClaimParams::groups: how many groups in a row a claim looks at without
// leasing anything before it gives up (the next claim goes on from there).
inline constexpr int kMaxIdleGroups = 256;

// What the error history records when a lease runs out: the attempt whose
// lease expired, at its lease's end.
inline constexpr std::string_view kLeaseExpired = "lease expired";

// Params of the other operations, field for field what the engine needs.
// An operation without a struct here takes one id (or name) and nothing
// else.
struct CreateQueueParams {
  std::string_view name;
  QueueOptions options;
};

struct AlterQueueParams {
  std::int64_t queue_id = 0;
  QueueOptions options;
};

struct SetQueuePausedParams {
  std::int64_t queue_id = 0;
  bool paused = false;
};

struct PruneDeadParams {
  std::int64_t queue_id = 0;
  Micros retention{0};
};

struct AckManyParams {
  std::int64_t queue_id = 0;
  std::span<const Receipt> receipts;
  bool archive = false;
  Micros unique_for{0};  // SendParams
  // Engine::ClaimAndCommit of these acks alone (ClaimParams::max 0): false
  // lets its commit return before the disk has it (WriteUnflushed).
  bool flush = true;
};

struct ExtendParams {
  std::int64_t queue_id = 0;
  Receipt receipt;
  Micros lease{0};
};

struct ListDeadParams {
  std::int64_t queue_id = 0;
  ListOptions options;
};

struct RedriveParams {
  std::int64_t queue_id = 0;
  std::span<const std::int64_t> ids;  // empty: every dead letter
  // The queue they go to as ready messages; 0: back into queue_id. Another
  // queue is where the dead letters of a queue with a dead-letter queue go
  // (QueueOptions::dead_letter_queue).
  std::int64_t to_queue_id = 0;
};

struct ListArchiveParams {
  std::int64_t queue_id = 0;
  ListOptions options;
};

struct PruneArchiveParams {
  std::int64_t queue_id = 0;
  Micros retention{0};
};

struct CreateRingParams {
  std::string_view name;
  RingOptions options;
};

struct PushToRingParams {
  std::int64_t ring_id = 0;
  std::string_view group;
  std::string_view payload;
};

struct ReadRingParams {
  std::int64_t ring_id = 0;
  std::string_view group;
  RingReadOptions options;
};

struct DeleteRingEntryParams {
  std::int64_t ring_id = 0;
  std::string_view group;
  std::int64_t seq = 0;
};

struct DeleteRingGroupParams {
  std::int64_t ring_id = 0;
  std::string_view group;
};

struct SetRingCapacityParams {
  std::int64_t ring_id = 0;
  std::int64_t capacity = 0;
};

struct CreateRotationParams {
  std::string_view name;
  RotationOptions options;
};

struct AddToRotationParams {
  std::int64_t rotation_id = 0;
  std::string_view key;
  std::string_view payload;
};

struct RemoveFromRotationParams {
  std::int64_t rotation_id = 0;
  std::string_view key;
};

struct ServeFromRotationParams {
  std::int64_t rotation_id = 0;
  int n = 0;
};

struct ReportRotationFailureParams {
  std::int64_t rotation_id = 0;
  std::string_view key;
  int max_failures = 0;
};

struct ReportRotationSuccessParams {
  std::int64_t rotation_id = 0;
  std::string_view key;
};

struct ResetRotationItemParams {
  std::int64_t rotation_id = 0;
  std::string_view key;
};

// Where a message is stored: the queue's table (ready, delayed, leased),
// the dead letters, the archive.
enum class MessageTable { kQueued, kDead, kArchived };

// Messages of one table of a queue, chosen by `filter` (its state, when
// one of the queue's, narrows kQueued) and, when `ids` is not empty, among
// those ids; in id order past `after_id`, at most `limit`. With `scan` > 0
// only the first `scan` rows of the queue's part of the table past
// `after_id` are looked at, whatever the filter: the cost of a page is
// bounded however few rows match (FoundMessages::scanned_to says where it
// stopped).
struct FindMessagesParams {
  std::int64_t queue_id = 0;
  MessageTable table = MessageTable::kQueued;
  const MessageFilter* filter = nullptr;
  std::span<const std::int64_t> ids;
  std::int64_t after_id = 0;
  int limit = 100;
  int scan = 0;
};

struct FoundMessages {
  std::vector<MessageInfo> messages;
  // Set when the scan bound was reached: the last id looked at.
  std::optional<std::int64_t> scanned_to;
};

// Bulk changes of messages chosen as FindMessagesParams chooses them.
enum class SteerAction {
  kDelete,       // any table
  kMakeReady,    // kQueued: delayed messages ready now
  kReschedule,   // kQueued: ready or delayed ones claimable at at_us
  kSetPriority,  // kQueued: any state
};

struct SteerMessagesParams {
  std::int64_t queue_id = 0;
  MessageTable table = MessageTable::kQueued;
  SteerAction action = SteerAction::kDelete;
  const MessageFilter* filter = nullptr;
  std::span<const std::int64_t> ids;
  std::int64_t at_us = 0;
  std::int32_t priority = 0;
};

// See "Clean failures" above.
inline bool IsCleanFailure(const Status& s) {
  switch (s.code()) {
    case Code::kNotFound:
    case Code::kFailedPrecondition:
    case Code::kInvalidArgument:
    case Code::kAlreadyExists:
    case Code::kTooLarge:
      return true;
    default:
      return false;
  }
}

// The exclusive seq bound of a ring read: entries below it newest first,
// above it oldest first; with no after_seq, one past either end.
inline std::int64_t RingReadBound(const RingReadOptions& o) {
  if (o.after_seq != 0) return o.after_seq;
  return o.oldest_first ? 0 : std::numeric_limits<std::int64_t>::max();
}

// How the operations below run: in transactions core opens and commits
// through this interface (every operation takes the Conn it hands out).
class Transactions {
 public:
  virtual ~Transactions() = default;

  // Runs `body` in a write transaction and commits it when `body` returns OK;
  // rolls back otherwise. Write transactions are serialised per engine.
  virtual Status Write(const std::function<Status(Conn&)>& body) = 0;
  // How many write transactions of one process the core runs at once (its
  // group commit, core/write_batcher.h). 1 for engines whose writers
  // exclude each other anyway (SQLite); more where transactions on separate
  // connections proceed side by side and the server merges their flushes.
  virtual int write_groups() const { return 1; }
  // True when a transaction of nothing but acks may commit without waiting
  // for the disk (the store URL's ack_flush=off; docs/semantics.md, "Acks
  // that do not wait for the disk"): the core then runs such transactions
  // with WriteUnflushed (and ClaimAndCommit with AckManyParams::flush
  // false), every other one as before.
  virtual bool acks_unflushed() const { return false; }
  // Write, with a commit that returns once the database has the
  // transaction, before it is on disk (or on a synchronous standby); a
  // later flushed commit, or the database's own background flush, makes it
  // durable, and a crash of the database or the machine before that undoes
  // it, with every commit after it. Only for transactions of acks.
  virtual Status WriteUnflushed(const std::function<Status(Conn&)>& body) {
    return Write(body);
  }
  // Runs `body` in a read-only snapshot; may run concurrently with writes.
  virtual Status Read(const std::function<Status(Conn&)>& body) = 0;

  // Caller-controlled transactions (the public Tx).
  virtual Result<std::unique_ptr<Conn>> BeginTx() = 0;
  virtual Result<std::unique_ptr<Conn>> JoinTx(void* native) = 0;
  virtual Status CommitTx(Conn& conn) = 0;
  virtual Status RollbackTx(Conn& conn) = 0;
  virtual void* NativeHandle(Conn& conn) = 0;

  // Writes something that changes nothing a user sees (the schema version,
  // negated and restored, since engines skip rewriting a row to its own
  // values), so that committing it shows the store can write now:
  // Store::CheckWritable, for readiness probes.
  virtual Status TouchSchema(Conn& conn) = 0;

  // The engine's notion of now (the clock every lease is measured with).
  virtual Result<Timestamp> Now(Conn& conn) = 0;
};

// How waiting claims learn of other processes' writes (core's WakeHub):
// the engine's watch, and what the engines that need it are told.
class ForeignWriteWatch {
 public:
  virtual ~ForeignWriteWatch() = default;

  // Calls `changed` (from a background thread) soon after another process
  // commits to the database; at most every few milliseconds. Engines that
  // cannot tell never call it; waiting claims then fall back to polling.
  virtual void WatchForeignWrites(std::function<void()> changed) = 0;
  // Has waiting claims of other processes look again: after acks that
  // let messages through that waited for their group or a limit. Engines
  // whose watch above already sees every ack (SQLite's file watch sees
  // every commit; MariaDB's poll watches the acks counter) need do
  // nothing.
  virtual void WakeOthers() {}
  // Whether the watch above sees other processes' commits yet (it may
  // start in the background: PostgreSQL's LISTEN connection).
  virtual bool WatchingForeignWrites() const { return true; }

  // How many claims wait in this process (core's WakeHub), for engines that
  // poll for foreign writes: they poll only while some claim waits. Called
  // once, before WatchForeignWrites.
  virtual void SetWaitingProbe(std::function<std::size_t()> waiting) {
    (void)waiting;
  }
};

// Queues: their rows, options, state and counters; the claims waiting on
// them in every process.
class QueueOps {
 public:
  virtual ~QueueOps() = default;

  virtual Result<QueueRecord> CreateQueue(Conn& conn,
                                          const CreateQueueParams& p) = 0;
  virtual Result<QueueRecord> GetQueue(Conn& conn, std::string_view name) = 0;
  virtual Result<std::vector<QueueRecord>> ListQueues(Conn& conn) = 0;
  virtual Status DropQueue(Conn& conn, std::int64_t queue_id) = 0;
  // Writes the queue's options (all of them); kNotFound when it is gone.
  virtual Status AlterQueue(Conn& conn, const AlterQueueParams& p) = 0;
  // Clears the dead-letter queue of every queue whose dead_letter_queue is
  // `name`, in one statement (Store::DropQueue, in the drop's transaction:
  // a dropped queue's links go with it, so that a queue created later under
  // its name does not receive others' dead letters). Returns how many
  // queues it changed.
  virtual Result<std::int64_t> UnlinkDeadLetterQueue(Conn& conn,
                                                     std::string_view name) = 0;
  virtual Status SetQueuePaused(Conn& conn, const SetQueuePausedParams& p) = 0;
  virtual Result<std::int64_t> PurgeQueue(Conn& conn,
                                          std::int64_t queue_id) = 0;
  virtual Result<QueueStats> GetQueueStats(Conn& conn,
                                           std::int64_t queue_id) = 0;

  // What a queue with groups needs before its claims run, outside any
  // transaction (Store::CreateQueue calls it before the queue's transaction
  // and again after it commits). MariaDB makes the group index here: it
  // has no partial indexes, and the index would cost every message of
  // every queue.
  virtual Status PrepareGroups() { return Status::Ok(); }

  // Waiting claims of every process (core/waiting_report.h).
  virtual Status ReportWaiting(Conn& conn, const ReportWaitingParams& p) = 0;
  // The claims waiting per queue name, summed over the fresh reports;
  // queues with none are left out.
  virtual Result<std::map<std::string, std::int64_t>> ReadWaiting(
      Conn& conn, const ReadWaitingParams& p) = 0;
};

// Messages: sends, claims and their leases, limited claims, dead letters
// and the archive, and single messages by filter.
class MessageOps {
 public:
  virtual ~MessageOps() = default;

  // Stores the messages; kNotFound when the queue no longer exists.
  virtual Result<std::vector<SendResult>> Send(Conn& conn,
                                               const SendParams& p) = 0;
  // Send for each of `sends` (a publish: each to its own queue), in fewer
  // statements where the engine can; the default runs Send for each. A
  // queue dropped since the caller looked it up takes nothing: its entry
  // is nullopt. Any other failure is the result's status, and is not a
  // clean one once a send before it stored something.
  using SentTo = std::optional<std::vector<SendResult>>;
  virtual Result<std::vector<SentTo>> SendEach(
      Conn& conn, std::span<const SendParams> sends) {
    std::vector<SentTo> out;
    out.reserve(sends.size());
    bool wrote = false;
    for (const SendParams& p : sends) {
      auto r = Send(conn, p);
      if (!r.ok()) {
        if (r.status().code() == Code::kNotFound) {
          out.emplace_back();
          continue;
        }
        if (wrote && IsCleanFailure(r.status())) {
          return Status::Internal("send: " + r.status().ToString());
        }
        return r.status();
      }
      wrote = wrote || !r->empty();
      out.emplace_back(std::move(*r));
    }
    return out;
  }
  virtual Result<ClaimOutcome> Claim(Conn& conn, const ClaimParams& p) = 0;
  // Limited claims (core::ClaimLimited): locks the queue's limit state for
  // the rest of the transaction, creating it when missing, and reads it;
  // with `count_leased`, counts the live leases of sqlq_leases (dropping
  // the rows of leases that ended).
  virtual Result<LimitState> LockLimits(Conn& conn,
                                        const LockLimitsParams& p) = 0;
  // Stores the bucket of `state` (when `bucket`) and records `leased`, the
  // ids just leased with `token`, in sqlq_leases.
  virtual Status SaveLimits(Conn& conn, const SaveLimitsParams& p) = 0;
  // When the next message of the queue becomes claimable (its delay, backoff
  // or lease ends); nullopt when the queue holds no message at all.
  virtual Result<std::optional<Timestamp>> NextReadyAt(
      Conn& conn, std::int64_t queue_id) = 0;
  // The headers column of message `id` of the queue as text (where its job
  // fields are: core/columns.h), "" for none; nullopt when it is not in
  // the queue. A nack reads its job's retry policy with it.
  virtual Result<std::optional<std::string>> ReadHeaders(Conn& conn,
                                                         std::int64_t queue_id,
                                                         std::int64_t id) = 0;
  // Each of these checks the receipt's lease token: kFailedPrecondition when
  // the message is there under another lease, kNotFound when it is gone.
  virtual Status Ack(Conn& conn, const AckParams& p) = 0;
  // Acks every receipt of `receipts` as Ack would, in order, and returns
  // one status per receipt (OK or a clean failure: kNotFound,
  // kFailedPrecondition); any other failure is the result's status and may
  // have written part of the batch. Engines that can, do it in one
  // statement; the default runs Ack for each.
  virtual Result<std::vector<Status>> AckMany(Conn& conn,
                                              const AckManyParams& p) {
    std::vector<Status> out;
    out.reserve(p.receipts.size());
    for (const Receipt& r : p.receipts) {
      Status s = Ack(conn, {.queue_id = p.queue_id,
                            .receipt = r,
                            .archive = p.archive,
                            .unique_for = p.unique_for});
      if (!s.ok() && !IsCleanFailure(s)) return s;
      out.push_back(std::move(s));
    }
    return out;
  }
  virtual Status Retry(Conn& conn, const RetryParams& p) = 0;
  virtual Status Bury(Conn& conn, const BuryParams& p) = 0;
  // Returns how many moved; counts them as dead-lettered.
  virtual Result<std::int64_t> Cancel(Conn& conn, const CancelParams& p) = 0;
  virtual Result<Timestamp> Extend(Conn& conn, const ExtendParams& p) = 0;

  // Dead letters and the archive.
  virtual Result<std::vector<DeadLetter>> ListDead(Conn& conn,
                                                   const ListDeadParams& p) = 0;
  // Empty `ids` means all.
  virtual Result<std::int64_t> Redrive(Conn& conn, const RedriveParams& p) = 0;
  virtual Result<std::int64_t> PurgeDead(Conn& conn, std::int64_t queue_id) = 0;
  // Deletes dead letters that died more than `retention` ago.
  virtual Result<std::int64_t> PruneDead(Conn& conn,
                                         const PruneDeadParams& p) = 0;
  // Deletes the queue's dedup holds that have run out (SendParams).
  virtual Result<std::int64_t> PruneHolds(Conn& conn,
                                          std::int64_t queue_id) = 0;
  virtual Result<std::vector<ArchivedMessage>> ListArchive(
      Conn& conn, const ListArchiveParams& p) = 0;
  virtual Result<std::int64_t> PruneArchive(Conn& conn,
                                            const PruneArchiveParams& p) = 0;

  // Single messages (WorkQueue::Get, ListMessages, the bulk changes).
  // Each checks the queue first (kNotFound when it is gone). The SQL is
  // built by engines/shared/message_sql.h.
  virtual Result<FoundMessages> FindMessages(Conn& conn,
                                             const FindMessagesParams& p) = 0;
  // How many messages FindMessages would find without its limit, after_id
  // and scan bound.
  virtual Result<std::int64_t> CountMessages(Conn& conn,
                                             const FindMessagesParams& p) = 0;
  // Returns how many messages changed.
  virtual Result<std::int64_t> SteerMessages(Conn& conn,
                                             const SteerMessagesParams& p) = 0;
};

// Rings (docs/rings-and-rotations.md). Names share one namespace with
// queues and rotations: kAlreadyExists for a name of any kind; Get*
// answers kFailedPrecondition for a name of another kind.
class RingOps {
 public:
  virtual ~RingOps() = default;

  virtual Result<RingRecord> CreateRing(Conn& conn,
                                        const CreateRingParams& p) = 0;
  virtual Result<RingRecord> GetRing(Conn& conn, std::string_view name) = 0;
  // Every ring and every rotation of the store, each list by name (the
  // columns of DecodeKinds in rows.h).
  virtual Result<KindsRecord> ListRingsAndRotations(Conn& conn) = 0;
  virtual Status DropRing(Conn& conn, std::int64_t ring_id) = 0;
  // Appends to the group and, when the group then holds more than the
  // ring's capacity (read in the same transaction, so a concurrent
  // SetRingCapacity is honoured), deletes its oldest entries down to
  // capacity.
  virtual Result<RingEntry> PushToRing(Conn& conn,
                                       const PushToRingParams& p) = 0;
  // Entries of `group` in the options' order, from after options.after_seq
  // (RingReadBound gives the seq bound to compare with).
  virtual Result<std::vector<RingEntry>> ReadRing(Conn& conn,
                                                  const ReadRingParams& p) = 0;
  virtual Result<std::vector<RingGroup>> ListRingGroups(
      Conn& conn, std::int64_t ring_id) = 0;
  virtual Status DeleteRingEntry(Conn& conn,
                                 const DeleteRingEntryParams& p) = 0;
  virtual Result<std::int64_t> DeleteRingGroup(
      Conn& conn, const DeleteRingGroupParams& p) = 0;
  // Returns the number of entries evicted.
  virtual Result<std::int64_t> SetRingCapacity(
      Conn& conn, const SetRingCapacityParams& p) = 0;
  virtual Result<RingStats> GetRingStats(Conn& conn, std::int64_t ring_id) = 0;
};

// Rotations (docs/rings-and-rotations.md).
class RotationOps {
 public:
  virtual ~RotationOps() = default;

  virtual Result<RotationRecord> CreateRotation(
      Conn& conn, const CreateRotationParams& p) = 0;
  virtual Result<RotationRecord> GetRotation(Conn& conn,
                                             std::string_view name) = 0;
  virtual Status DropRotation(Conn& conn, std::int64_t rotation_id) = 0;
  // kAlreadyExists when the key is present (and then writes nothing).
  virtual Status AddToRotation(Conn& conn, const AddToRotationParams& p) = 0;
  virtual Status RemoveFromRotation(Conn& conn,
                                    const RemoveFromRotationParams& p) = 0;
  // The n least recently served unparked items, ordered by (last served
  // stamp, added stamp), each stamped with its own new value of the
  // rotation's counter, increasing in the order returned (one shared stamp
  // would let ties fall back to the order of addition and break the
  // round-robin). Writes nothing when there is nothing to serve.
  virtual Result<std::vector<RotationItem>> ServeFromRotation(
      Conn& conn, const ServeFromRotationParams& p) = 0;
  // failures += 1; parked once failures >= max_failures (core's rule).
  virtual Result<RotationItem> ReportRotationFailure(
      Conn& conn, const ReportRotationFailureParams& p) = 0;
  // failures = 0; kFailedPrecondition (writing nothing) when parked.
  virtual Result<RotationItem> ReportRotationSuccess(
      Conn& conn, const ReportRotationSuccessParams& p) = 0;
  // failures = 0 and unparked.
  virtual Result<RotationItem> ResetRotationItem(
      Conn& conn, const ResetRotationItemParams& p) = 0;
  virtual Result<std::vector<RotationItem>> ListRotationItems(
      Conn& conn, std::int64_t rotation_id) = 0;
  virtual Result<RotationStats> GetRotationStats(Conn& conn,
                                                 std::int64_t rotation_id) = 0;
};

// Schedules (core/schedules.cc).
class ScheduleOps {
 public:
  virtual ~ScheduleOps() = default;

  // Create: the id, kAlreadyExists when the name is taken.
  // SetSchedulePaused: resumed at next_us. kNotFound for a name that is not
  // there.
  virtual Result<std::int64_t> CreateSchedule(Conn& conn,
                                              const ScheduleInfo& info) = 0;
  virtual Result<std::vector<ScheduleRecord>> ListSchedules(Conn& conn) = 0;
  virtual Status DropSchedule(Conn& conn, std::string_view name) = 0;
  virtual Status SetSchedulePaused(Conn& conn,
                                   const SetSchedulePausedParams& p) = 0;
  // Takes or renews the scheduler lease for `holder` until now + lease,
  // unless another holder's lease is live: whether `holder` holds it.
  virtual Result<bool> TakeSchedulerLease(
      Conn& conn, const TakeSchedulerLeaseParams& p) = 0;
  // false when the schedule is no longer at `p.from_us` (or was dropped).
  virtual Result<bool> AdvanceSchedule(Conn& conn,
                                       const AdvanceScheduleParams& p) = 0;
};

// A topic as stored (TopicOps::ListTopics): its row of sqlq_queues (kind
// 'topic') and how many queues subscribe to it.
struct TopicRecord {
  std::int64_t id = 0;
  std::string name;
  std::int64_t created_us = 0;
  std::int64_t subscriptions = 0;
};

// TopicOps::Subscribe: queue `queue_id` subscribes to topic `topic_id`
// with `filter` (EncodeHeaders' text, "" for none: every message), or
// changes the filter of its subscription.
struct SubscribeParams {
  std::int64_t topic_id = 0;
  std::int64_t queue_id = 0;
  std::string_view filter;
};

// A subscription as stored (TopicOps::ListSubscribers): the subscribed
// queue as GetQueue gives it, the filter's text ("" for none) and when it
// was made.
struct SubscriberRecord {
  QueueRecord queue;
  std::string filter;
  std::int64_t subscribed_us = 0;
};

// Topics (core/topic.cc): rows of sqlq_queues of kind 'topic' (one namespace
// with queues, rings and rotations) and their subscriptions, one row per
// (topic, queue) in sqlq_subscriptions, which go with either when it is
// dropped. A publish reads the subscribers and sends to each through
// MessageOps::Send in the same transaction.
class TopicOps {
 public:
  virtual ~TopicOps() = default;
  // The new topic's id; kAlreadyExists when the name is taken (any kind).
  virtual Result<std::int64_t> CreateTopic(Conn& conn,
                                           std::string_view name) = 0;
  // The topic's id; kNotFound, or kFailedPrecondition for a name of
  // another kind.
  virtual Result<std::int64_t> GetTopic(Conn& conn, std::string_view name) = 0;
  virtual Result<std::vector<TopicRecord>> ListTopics(Conn& conn) = 0;
  virtual Status DropTopic(Conn& conn, std::int64_t topic_id) = 0;
  // Whether the subscription is new (false: its filter was replaced).
  // Locks the topic and the queue against a drop first.
  virtual Result<bool> Subscribe(Conn& conn, const SubscribeParams& p) = 0;
  // Whether there was a subscription to remove.
  virtual Result<bool> Unsubscribe(Conn& conn, std::int64_t topic_id,
                                   std::int64_t queue_id) = 0;
  // The topic's subscribers by queue name; in a write transaction the
  // topic is locked against a drop first (kNotFound once it is gone).
  virtual Result<std::vector<SubscriberRecord>> ListSubscribers(
      Conn& conn, std::int64_t topic_id) = 0;
  // What a publish reads first, in one statement: the topic `name` locked
  // against a drop as ListSubscribers locks it, and its subscribers by
  // queue name. kNotFound, or kFailedPrecondition for a name of another
  // kind, as GetTopic.
  virtual Result<std::vector<SubscriberRecord>> LockSubscribers(
      Conn& conn, std::string_view name) = 0;
  // Removes the subscriptions of a queue being dropped (in the drop's
  // transaction, after its row is deleted): engines whose foreign keys
  // cascade have nothing to do.
  virtual Status DropSubscriptionsOf(Conn& conn, std::int64_t queue_id) = 0;
};

// WorkerOps::ReportWorker: the report of worker `id` (its fields as
// core/workers.cc encodes them in `info`) replaces any earlier one, stamped
// with the engine's clock and kept until now + ttl; reports that ran out
// before now - forget_after go too (workers gone without a word).
struct ReportWorkerParams {
  std::string_view id;
  std::string_view info;
  Micros ttl{0};
  Micros forget_after{0};
};

// A worker's report as stored (WorkerOps).
struct WorkerRecord {
  std::string id, info;
  std::int64_t seen_us = 0, expires_us = 0;
};

// Live workers (core/workers.cc).
class WorkerOps {
 public:
  virtual ~WorkerOps() = default;
  virtual Status ReportWorker(Conn& conn, const ReportWorkerParams& p) = 0;
  // Whether there was a report of `id` to remove.
  virtual Result<bool> RemoveWorker(Conn& conn, std::string_view id) = 0;
  // The reports that have not run out by the engine's clock, by id.
  virtual Result<std::vector<WorkerRecord>> ListWorkers(Conn& conn) = 0;
};

// ResultOps::SaveProgress: the latest progress of the message the
// receipt leases (checked as an ack checks it: kNotFound when the message
// is gone, kFailedPrecondition under another lease), as `progress` (text
// core/results.cc encodes), kept until now + ttl.
struct SaveProgressParams {
  std::int64_t queue_id = 0;
  Receipt receipt;
  std::string_view progress;
  Micros ttl{0};
};

// ResultOps::SaveResult: message `message_id` completed (acked in this
// transaction) with `result`, kept until now + ttl.
struct SaveResultParams {
  std::int64_t queue_id = 0;
  std::int64_t message_id = 0;
  std::string_view result;
  Micros ttl{0};
};

// A row of sqlq_results that has not run out: the message's last progress
// (empty: none) and, once it completed, its result.
struct ResultRecord {
  std::string progress;
  std::int64_t progress_us = 0;  // 0: no progress
  std::optional<std::string> result;
  std::int64_t completed_us = 0;  // 0: not completed with a result
};

// Results and progress of jobs (core/results.cc).
class ResultOps {
 public:
  virtual ~ResultOps() = default;
  virtual Status SaveProgress(Conn& conn, const SaveProgressParams& p) = 0;
  virtual Status SaveResult(Conn& conn, const SaveResultParams& p) = 0;
  virtual Result<std::optional<ResultRecord>> ReadResult(
      Conn& conn, std::int64_t queue_id, std::int64_t message_id) = 0;
  // Deletes the rows that ran out; returns how many.
  virtual Result<std::int64_t> PruneResults(Conn& conn) = 0;
};

// Dependencies (core/dependencies.cc, engines/shared/sql_deps.h): a
// message that waits for others is stored waiting (ready_us = kWaitingUs,
// waits = how many have not completed), with a row of sqlq_deps per
// message it waits for. A queue whose messages have (or had) dependents is
// flagged; only its acks look for dependents to release, in the ack's own
// transaction.
inline constexpr std::int64_t kWaitingUs = std::int64_t{1} << 62;
#define SQLQ_WAITING_US "4611686018427387904"

// What a dependent does when a message it waits for dies (is
// dead-lettered, cancelled or deleted): IfDependencyDies, as stored.
// kBatch: the dependent is the callback of a batch and the parent one of
// its members (BatchOps): it runs as with kRun, and each end of a member
// (ack, death, cancel) is counted in the batch's row.
enum class OnDead : int { kCancel = 0, kRun = 1, kWait = 2, kBatch = 3 };

// DependencyOps::LockParents: where a message that others are about to
// wait for is now.
struct ParentState {
  std::int64_t id = 0;
  std::int64_t queue_id = 0;
  bool dead = false;  // in the dead letters (else live, its row locked)
};

// DependencyOps::WriteLinks: a row of sqlq_deps.
struct DependencyLink {
  std::int64_t parent_id = 0;
  std::int64_t child_id = 0;
  std::int64_t parent_queue_id = 0;
  std::int64_t child_queue_id = 0;
  OnDead on_dead = OnDead::kCancel;
  bool parked = false;  // the parent is dead: waiting for its redrive
};

// What a publish stored: the delivery of one message to one queue, and
// that queue's id (core::PublishIn, Engine::PublishAndCommit).
struct Published {
  Delivery delivery;
  std::int64_t queue_id = 0;
};

// DependencyOps::TakeDeadDependents: a dead letter sent with dependencies,
// and its headers column's text (their parents and policy are in it).
struct DeadDependent {
  std::int64_t id = 0;
  std::string headers;
};

// DependencyOps::WriteLinks: a child just sent, now waiting for `waits`.
struct ChildWaits {
  std::int64_t child_id = 0;
  int waits = 0;
};

// A dependency whose parent left its queue other than by a releasing ack.
struct EndedDependency {
  std::int64_t parent_id = 0;
  std::int64_t child_id = 0;
  std::int64_t child_queue_id = 0;
  OnDead on_dead = OnDead::kCancel;
  bool dead = false;  // the parent is in the dead letters (else: deleted)
  // Dead, and cancelled: its last error is "cancelled" or begins with
  // "cancelled:" (WorkQueue::Cancel, a dependency's cancel, a batch's).
  bool cancelled = false;
};

// What DependencyOps::ReleaseDependents did.
struct ReleaseOutcome {
  // The queues of the dependents released (ready now), for wake-ups.
  std::vector<std::int64_t> queues;
  // The batch callbacks (OnDead::kBatch) that waited for the acked
  // messages: one entry per acked member, for BatchOps::CountBatch.
  std::vector<std::int64_t> batches;
};

// A message a waiting message waits for (MessageInfo::waits_for).
struct DependencyRecord {
  std::int64_t parent_id = 0;
  std::int64_t parent_queue_id = 0;
  bool parked = false;  // it died; waiting for a redrive
};

// A message linked to another by a dependency (DependencyOps::ListLinks):
// one it waits for, or one waiting for it.
struct LinkRecord {
  bool dependent = false;  // it waits for the other (else the other for it)
  std::int64_t id = 0;
  std::string queue;
  bool parked = false;  // the parent died; the dependent waits for a redrive
};

class DependencyOps {
 public:
  virtual ~DependencyOps() = default;
  // Flags the queues holding any of `parents`, in a transaction of its
  // own, committed before the send that links to them: an ack that read
  // its queue unflagged has then committed before that send looks at its
  // message (the flag's write waits for the share locks of the acks in
  // flight), and any later ack reads the flag.
  // Flags the queues of `parents` (live or dead) and `queues`.
  virtual Status FlagDependents(Conn& conn,
                                std::span<const std::int64_t> parents,
                                std::span<const std::int64_t> queues) = 0;
  // The state of each of `ids` that is live (its row locked until the
  // transaction ends, so that an ack of it waits for the links written
  // next, or this read waits for the ack and finds the row gone) or dead;
  // an id that is neither (completed, or deleted) is not in the result.
  // In id order.
  virtual Result<std::vector<ParentState>> LockParents(
      Conn& conn, std::span<const std::int64_t> ids) = 0;
  // The names of the queues of `ids` that exist, by id (a dependent keeps
  // its parents' queues by name).
  virtual Result<std::map<std::int64_t, std::string>> QueueNames(
      Conn& conn, std::span<const std::int64_t> ids) = 0;
  // The dead letters of queue `queue_id` among `ids` (every one when
  // empty) that were sent with dependencies (core::kParentsHeader in their
  // headers), locked, in id order; when `unlink`, the links left to them as
  // dependents are deleted (a cancel by hand leaves those until their
  // parent ends): a redrive is about to link them again.
  virtual Result<std::vector<DeadDependent>> TakeDeadDependents(
      Conn& conn, std::int64_t queue_id, std::span<const std::int64_t> ids,
      bool unlink) = 0;
  // Writes `links`, and makes each of `children` (just sent, in this
  // transaction) waiting for its count.
  virtual Status WriteLinks(Conn& conn, std::span<const DependencyLink> links,
                            std::span<const ChildWaits> children) = 0;
  // After the ack of `parents` (of queue `queue_id`) in this transaction:
  // when the queue is flagged, each dependent waits for one less, and one
  // that waits for none is ready now.
  virtual Result<ReleaseOutcome> ReleaseDependents(
      Conn& conn, std::int64_t queue_id,
      std::span<const std::int64_t> parents) = 0;
  // The dependencies on messages of `queue_id` whose message is no longer
  // in the queue and that are not parked: the parent died or was deleted.
  virtual Result<std::vector<EndedDependency>> EndedDependencies(
      Conn& conn, std::int64_t queue_id) = 0;
  // Settles one ended dependency: kCancel and kRun delete it (kRun also
  // counts the parent as done for the child: ready when it waits for no
  // other), kWait parks it. False when another transaction settled it
  // first (then nothing changed).
  virtual Result<bool> SettleDependency(Conn& conn,
                                        const EndedDependency& d) = 0;
  // What message `child_id` waits for.
  virtual Result<std::vector<DependencyRecord>> ListDependencies(
      Conn& conn, std::int64_t child_id) = 0;
  // The links of message `id` of queue `queue_id`: the messages it waits
  // for, then the first `limit` of those waiting for it, each in id order,
  // with their queues' names.
  virtual Result<std::vector<LinkRecord>> ListLinks(Conn& conn,
                                                    std::int64_t queue_id,
                                                    std::int64_t id,
                                                    int limit) = 0;
  // A dropped queue's dependencies: those of its messages (as dependents)
  // are deleted, and the batches whose callback was in it.
  virtual Status DropDependencies(Conn& conn, std::int64_t queue_id) = 0;
  // The dead letters of queue `from` move to queue `to` (a dead-letter
  // queue's forwarding): the dependencies on them, parked, now name `to`
  // as their parent's queue, and wait for it there as for any live one.
  // Returns how many moved.
  virtual Result<std::int64_t> MoveParents(Conn& conn, std::int64_t from,
                                           std::int64_t to) = 0;
};

// Batches (core/batches.cc, engines/shared/sql_batches.h): a row of
// sqlq_batches per batch (its name, callback, the members' queues, the
// counts, when it was made, done and cancelled, its retention), found by
// name or by its callback's id (both unique). The callback waits for each
// member through a row of sqlq_deps with OnDead::kBatch (written with
// DependencyOps::WriteLinks); each end of a
// member adds to the counts in the transaction that ends it (an ack) or
// settles it (a death), by the callback's id.
struct AddBatchParams {
  std::string_view name;
  std::int64_t callback_queue_id = 0;
  std::string_view queues;  // the members' queue names, a JSON array
  Micros ttl{0};            // kept this long after it is done
};

// A member of a batch as BatchOps::PendingBatchMembers sees it: the
// message and its queue.
struct BatchMember {
  std::int64_t id = 0;
  std::int64_t queue_id = 0;
  std::string queue;  // PendingBatchMembers: the queue's name
};

// BatchOps::SealBatch: the batch's callback, and its counts at the send.
struct SealBatchParams {
  std::int64_t batch_id = 0;
  std::int64_t callback_id = 0;
  std::int64_t total = 0;
  std::int64_t cancelled = 0;  // members cancelled at the send
};

// A row of sqlq_batches.
struct BatchRecord {
  std::int64_t id = 0;
  std::string name;
  std::int64_t callback_id = 0;
  std::int64_t callback_queue_id = 0;
  std::string callback_queue;  // GetBatch: the queue's name
  std::string queues;          // as AddBatchParams::queues
  BatchCounts counts;
  std::int64_t created_us = 0;
  std::int64_t done_us = 0;     // 0: not done
  std::int64_t cancel_us = 0;   // 0: not cancelled
  std::int64_t expires_us = 0;  // 0: not done
  std::int64_t ttl_us = 0;
};

// BatchOps::FinishBatch: the batch is done now; `headers`, when set, is
// the callback's new headers column (its counts added).
struct FinishBatchParams {
  std::int64_t batch_id = 0;
  std::int64_t callback_id = 0;
  std::optional<std::string> headers;
};

class BatchOps {
 public:
  virtual ~BatchOps() = default;
  // The new batch's row id; nullopt when the name is taken by a batch
  // that has not expired (one that has is deleted first). Writes nothing
  // then.
  virtual Result<std::optional<std::int64_t>> AddBatch(
      Conn& conn, const AddBatchParams& p) = 0;
  virtual Status SealBatch(Conn& conn, const SealBatchParams& p) = 0;
  // Adds `delta` (total left out) to the counts of the batch whose
  // callback is `callback_id`, and returns its row as it is now, read
  // under the row lock the update took (nullopt: no such batch, dropped
  // with its callback's queue).
  virtual Result<std::optional<BatchRecord>> CountBatch(
      Conn& conn, std::int64_t callback_id, const BatchCounts& delta) = 0;
  // Marks the batch done now (expiring after its ttl) and writes the
  // callback's headers when given.
  virtual Status FinishBatch(Conn& conn, const FinishBatchParams& p) = 0;
  // The batch named `name` unless it expired; nullopt when there is none.
  virtual Result<std::optional<BatchRecord>> FindBatch(
      Conn& conn, std::string_view name) = 0;
  // The members the callback still waits for, with their queues' names.
  virtual Result<std::vector<BatchMember>> PendingBatchMembers(
      Conn& conn, std::int64_t callback_id) = 0;
  // The callback's links to members no longer in their queue (ended, not
  // yet settled), as DependencyOps::EndedDependencies gives them.
  virtual Result<std::vector<EndedDependency>> EndedBatchMembers(
      Conn& conn, std::int64_t callback_id) = 0;
  // Records the batch's cancel now, unless it was cancelled before.
  virtual Status MarkBatchCancelled(Conn& conn, std::int64_t batch_id) = 0;
  // Deletes the batches that expired; returns how many.
  virtual Result<std::int64_t> PruneBatches(Conn& conn) = 0;
};

// An engine: every interface above, and what spans them. Core code takes
// the narrowest of them that it needs.
class Engine : public Transactions,
               public ForeignWriteWatch,
               public QueueOps,
               public MessageOps,
               public RingOps,
               public RotationOps,
               public ScheduleOps,
               public WorkerOps,
               public ResultOps,
               public DependencyOps,
               public BatchOps,
               public TopicOps {
 public:
  // Send in a write transaction of its own, committed: what Write with
  // Send does, which is the default. An engine may do it in fewer round
  // trips (PostgreSQL: one). Group commit uses it for a group that is only
  // sends to one queue, the usual group of concurrent senders.
  // `messages` gives the messages to store; it is called as late as the
  // engine can (the default: once the transaction is open), so that sends
  // that arrived meanwhile can still join, and may be called again (a
  // transaction run again) to give the same messages.
  // `to` gives the queue and its rules; its messages are not used.
  using MessagesFn = std::function<std::span<const Message>()>;
  virtual Result<std::vector<SendResult>> SendAndCommit(
      const SendParams& to, const MessagesFn& messages) {
    std::vector<SendResult> out;
    Status s = Write([&](Conn& conn) -> Status {
      SendParams p = to;
      p.messages = messages();
      auto r = Send(conn, p);
      if (!r.ok()) return r.status();
      out = std::move(*r);
      return Status::Ok();
    });
    if (!s.ok()) return s;
    return out;
  }

  // What ClaimAndCommit did: each receipt's ack (in order) and the claim.
  struct ClaimCommitted {
    std::vector<Status> acks;
    ClaimOutcome outcome;
  };
  // A claim and the acks that go before it (group commit's claims of one
  // queue: WriteBatcher::ClaimRequest's `ack` and `done`) in a write
  // transaction of their own, committed, in fewer round trips than Write
  // with AckMany and Claim (PostgreSQL: one). `acks.receipts` are acked
  // first; `gates[i]` of `p.max` are claimed only when receipt i is acked
  // (0: it gates nothing); `p.max` 0 is acks alone. When the engine
  // cannot (the default; claims of
  // groups or under limits, dedup windows, archives, a queue whose acks
  // release dependents), nothing is stored and the result is empty: the
  // caller goes the general way.
  virtual Result<std::optional<ClaimCommitted>> ClaimAndCommit(
      const ClaimParams& p, const AckManyParams& acks,
      std::span<const int> gates) {
    (void)p;
    (void)acks;
    (void)gates;
    return std::optional<ClaimCommitted>();
  }

  // Sends stored first in a claim's transaction (SendsAndClaimAndCommit).
  struct SendsFirst {
    SendParams to;  // the queue, its rules and its messages
    // How the sends went (stored, or a clean failure such as the queue
    // gone), once they are committed; unset while they are not.
    std::optional<Result<std::vector<SendResult>>> sent;
  };
  // ClaimAndCommit with `sends` stored before the acks and the claim, in
  // the same transaction: a group of concurrent senders and claimers (a
  // producer's send and a consumer's ack and claim) in one commit, in
  // fewer round trips than Write with Send, AckMany and Claim (PostgreSQL:
  // one). sends.sent is set once the sends are committed; the result is
  // then the claim's, as ClaimAndCommit's (an error, such as the claim's
  // queue gone, is the claim's alone), and an empty one leaves the claim
  // to the caller, to make the general way. An error with sends.sent
  // unset is the whole transaction's: nothing of it is stored (or its
  // outcome is unknown). When the engine cannot (the default; or the sends or
  // the claim need the general way) nothing is stored: an empty result
  // and sends.sent unset.
  virtual Result<std::optional<ClaimCommitted>> SendsAndClaimAndCommit(
      SendsFirst& sends, const ClaimParams& p, const AckManyParams& acks,
      std::span<const int> gates) {
    (void)sends;
    (void)p;
    (void)acks;
    (void)gates;
    return std::optional<ClaimCommitted>();
  }

  // A publish of `messages` to topic `topic` in a write transaction of its
  // own, committed, in fewer round trips than Write with core::PublishIn
  // (PostgreSQL: one), for the usual publish: when the engine cannot (the
  // default; or a subscriber whose rules need the general path, a refused
  // message, a topic that is not there), nothing is stored and the result
  // is empty: the caller publishes the general way, which says why.
  // Delivery::message counts over `messages`; deliveries come by queue
  // name, then message.
  virtual Result<std::optional<std::vector<Published>>> PublishAndCommit(
      std::string_view topic, std::span<const Message> messages) {
    (void)topic;
    (void)messages;
    return std::optional<std::vector<Published>>();
  }
};

}  // namespace sqlq::core

#endif  // SQLQ_CORE_ENGINE_H_
