// WorkQueue: a handle on one work queue of a Store, and the plain value types
// its operations take and return. Semantics: docs/semantics.md.
//
// Thread-safety: a WorkQueue is a cheap, copyable handle. All its methods may
// be called concurrently from any number of threads; concurrent sends, claims
// and acks in one process are merged into shared transactions (one commit for
// many callers), and each call still returns only after its own commit.
// A handle must not outlive the Store it came from.

#ifndef SQLQ_QUEUE_H_
#define SQLQ_QUEUE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sqlq/status.h"

namespace sqlq {

using Duration = std::chrono::milliseconds;

// The longest durations the library accepts (longer ones are
// kInvalidArgument): a lease or an extension, a delay or backoff, a queue's
// archive retention.
inline constexpr Duration kMaxLease = std::chrono::hours(12);
inline constexpr Duration kMaxDelay = std::chrono::hours(24 * 365);
inline constexpr Duration kMaxRetention = kMaxDelay * 10;
// Wall-clock instants, microsecond resolution, as the store's clock sees them.
using Timestamp = std::chrono::sys_time<std::chrono::microseconds>;

class Tx;
class Store;
namespace core {
class QueueImpl;
struct SubscriptionState;
}  // namespace core

// How a queue's claims treat the groups of its messages (Message::group;
// docs/semantics.md, "Groups"). Set when the queue is created.
enum class GroupMode {
  // Groups are kept and shown, and claims ignore them.
  kNone,
  // Claims take messages round-robin across the groups with ready
  // messages, in send order within a group: a group with many messages
  // does not starve the others.
  kFair,
  // As kFair, and a group's messages are delivered strictly in send order,
  // one at a time: the next is claimable only once the one before left the
  // queue (acked, dead-lettered or deleted).
  kOrdered,
};
// "none", "fair", "ordered".
std::string_view GroupModeName(GroupMode mode);
// kInvalidArgument for another name.
Result<GroupMode> ParseGroupMode(std::string_view name);

// Per-queue settings: set when the queue is created, changed with
// WorkQueue::Alter (docs/semantics.md, "Changing a queue").
struct QueueOptions {
  // Deliveries a message gets before it becomes a dead letter. Each claim
  // uses one attempt. Range 1..1,000,000.
  int max_attempts = 5;
  // Lease (visibility timeout) a claim takes when it names none. A message
  // claimed and neither acked nor extended within its lease is delivered
  // again. Range 1ms..12h.
  Duration lease = std::chrono::seconds(30);
  // Retry delay after the first failed attempt; doubles with every attempt
  // up to backoff_max, then jittered into [delay/2, delay] so that a burst of
  // failures does not come back as a burst. backoff_base <= backoff_max.
  Duration backoff_base = std::chrono::seconds(1);
  Duration backoff_max = std::chrono::minutes(10);
  // Keep acked messages (with completion time, attempts and worker) in the
  // archive for `retention`, instead of deleting them. Costs one more row
  // write per ack.
  bool archive = false;
  Duration retention = std::chrono::hours(24 * 7);
  // Largest payload a send accepts, in bytes. Range 1..64 MiB.
  std::size_t max_payload_bytes = 1 << 20;
  // Keep dead letters this long after they died, then delete them (pruned
  // as the archive is); 0 keeps them until purged. 0..10 years.
  Duration dead_retention{0};
  // Dedup window: a message's dedup key stays taken this long after the
  // message is acked or dead-lettered, so a send with that key in the
  // meantime is a duplicate of it (SendResult::duplicate, its id). 0 frees
  // the key as the message leaves the queue. 0..10 years.
  Duration unique_for{0};
  // Set at creation only: Alter refuses to change it.
  GroupMode groups = GroupMode::kNone;

  // Limits (docs/semantics.md, "Limits"). Unset: no limit. Alter sets and
  // unsets them; a new limit applies to the leases taken after it.
  // At most this many messages of the queue leased at once, counted over
  // every consumer and every process on the database. 1..kMaxLeasedLimit.
  std::optional<int> max_leased;
  // At most this many messages claimed per second, shared by every process
  // on the database: a bucket of `rate_burst` claims that refills at this
  // rate. kMinRateLimit..kMaxRateLimit (0.1 is one every 10 seconds).
  std::optional<double> rate_limit;
  // How many claims the bucket holds: the most that go at once after a
  // quiet spell. 1..kMaxRateBurst; unset: one second's worth, at least 1.
  // Only with rate_limit.
  std::optional<int> rate_burst;
  // Fair queues only: at most this many messages of one group leased at
  // once. Each group's window is its `group_limit` oldest messages, and only
  // those can be claimed. 1..kMaxGroupLimit. (An ordered queue's is 1.)
  std::optional<int> group_limit;

  // Where this queue's dead letters go (docs/semantics.md, "Dead-letter
  // queues"): when set, a message that uses up its attempts is moved into
  // the queue of this name as a ready message with fresh attempts (same
  // id, payload, headers, group and error history), instead of staying in
  // this queue's dead letters. Empty: they stay here. Not this queue's own
  // name, nor a queue whose dead-letter queues lead back here (a loop:
  // kInvalidArgument). While the named queue does not exist, they stay here
  // and move once it does (at the next message that dies). Dropping the
  // named queue clears this (Store::DropQueue).
  std::string dead_letter_queue;
  // Labels: names to text, kept with the queue and changed with Alter.
  // sqlq gives them no meaning: they are for the application (an owner, a
  // team) and for front ends (the SQS endpoint keeps its settings and tags
  // here, under keys beginning "sqs:"). At most kMaxLabels; keys as header
  // keys (1..kMaxHeaderKey bytes of letters, digits and '_', '-', '.',
  // ':'); values valid UTF-8 without NUL bytes, at most kMaxLabelValue
  // bytes; keys and values together at most 4 * kMaxLabelValue.
  std::map<std::string, std::string> labels;
};
inline constexpr std::size_t kMaxLabels = 64;
inline constexpr std::size_t kMaxLabelValue = 65536;
inline constexpr int kMaxLeasedLimit = 1000000;
inline constexpr double kMinRateLimit = 0.001;
inline constexpr double kMaxRateLimit = 1000000;
inline constexpr int kMaxRateBurst = 1000000;
inline constexpr int kMaxGroupLimit = 10000;

// What a queue is: its name, settings, creation time and whether it is
// paused.
struct QueueInfo {
  std::string name;
  QueueOptions options;
  Timestamp created_at;
  // Paused: sends go on, claims return nothing (WorkQueue::Pause).
  bool paused = false;
};

// A message's headers: string keys to string values, set at send and
// returned with the message wherever it goes (claim, dead letters, archive).
// Trace context and tags travel here. Limits (kInvalidArgument beyond them):
// at most kMaxHeaders keys; each key 1..kMaxHeaderKey bytes of letters,
// digits and '_', '-', '.', ':'; each value valid UTF-8 without NUL bytes,
// at most kMaxHeaderValue bytes; keys and values together at most
// kMaxHeaderBytes.
using Headers = std::map<std::string, std::string>;
inline constexpr std::size_t kMaxHeaders = 64;
inline constexpr std::size_t kMaxHeaderKey = 128;
inline constexpr std::size_t kMaxHeaderValue = 4096;
inline constexpr std::size_t kMaxHeaderBytes = 16384;

// One failed attempt of a message, as its error history keeps it: the
// attempt's number, when it failed, and why (the nack's error text, or
// "lease expired" when its lease ran out). A message keeps the last
// kErrorHistory of them; they follow it into the dead letters and the
// archive.
struct AttemptError {
  int attempt = 0;
  Timestamp at;
  std::string error;
};
inline constexpr std::size_t kErrorHistory = 20;

// What a waiting message does when a message it depends on dies
// (Message::if_dependency_dies).
enum class IfDependencyDies {
  // It is cancelled too: dead-lettered with the error "cancelled: message
  // N, which it depends on, died" (or "was deleted"); its own dependents
  // then follow their policies in turn.
  kCancel,
  // It runs anyway, as if that one had completed.
  kRun,
  // It keeps waiting: the dead one, redriven into its queue and then
  // completed, releases it.
  kWait,
};
// "cancel", "run", "wait".
std::string_view IfDependencyDiesName(IfDependencyDies v);
// kInvalidArgument for another name.
Result<IfDependencyDies> ParseIfDependencyDies(std::string_view name);

// What a job's expiry does with it (Message::on_expiry).
enum class ExpiryAction {
  // Dead-lettered, with the error "expired: not started within N ms".
  kDeadLetter,
  // Deleted: not dead-lettered, not archived, gone as if acked.
  kDrop,
};
// "dead", "drop".
std::string_view ExpiryActionName(ExpiryAction action);
// kInvalidArgument for another name.
Result<ExpiryAction> ParseExpiryAction(std::string_view name);

// One message to send.
struct Message {
  std::string payload;  // bytes; any content, up to max_payload_bytes
  // Higher first. Messages of equal priority go in ready-time order.
  std::int32_t priority = 0;
  // Becomes claimable this long after the send commits. 0..365 days.
  Duration delay{0};
  // When non-empty: while a message with this key is in the queue (ready,
  // delayed or leased), a send with the same key stores nothing and returns
  // the existing message's id. At most 255 bytes.
  std::string dedup_key;
  // Claimable from this time on, by the store's clock, instead of after
  // `delay` (set one or the other). A time already past makes the message
  // ready at once, in its place at the end of the queue. At most 365 days
  // ahead and 365 days back.
  std::optional<Timestamp> run_at;
  Headers headers;
  // The message's group (a customer, a tenant, an account: whatever must
  // go in order, or share fairly), at most kMaxGroup bytes. In a queue
  // whose GroupMode is kFair or kOrdered a message without one is in the
  // group "" (the empty string) with every other such message.
  std::string group;
  // The job's kind ("email.send", "billing/invoice"): which handler a
  // worker runs it with (docs/semantics.md, "Jobs"). Empty: none. Else
  // 1..kMaxKind bytes of ASCII letters, digits and '_', '-', '.', ':', '/'.
  // It follows the message to its dead letters, the archive and a
  // dead-letter queue.
  std::string kind;
  // The job's own limits (docs/semantics.md, "Jobs"), unset for none:
  // - timeout: the longest one attempt may run, 1ms..12h. A claim leases
  //   the message for at most this; the workers stop extending its lease
  //   there and fail the attempt with the error "timeout"; a worker that is
  //   gone or frozen loses it at the same limit.
  // - expire_after: it must be started (claimed) within this long after
  //   its send, 1ms..365 days: the claim that finds it later dead-letters it
  //   instead, with the error "expired: not started within N ms". Longer
  //   than its delay (or than the wait for its run_at).
  // - on_expiry: what that claim does with it: kDeadLetter (the default,
  //   as above) or kDrop, which deletes it instead (no dead letter, no
  //   archive; its dedup key is held as an ack holds it). Either way the
  //   queue counts it in QueueStats::expired. kDrop needs expire_after.
  std::optional<Duration> timeout;
  std::optional<Duration> expire_after;
  ExpiryAction on_expiry = ExpiryAction::kDeadLetter;
  // The job's own retry policy, unset for the queue's (docs/semantics.md,
  // "Jobs"):
  // - max_attempts (1..1,000,000): dead-lettered once this many attempts
  //   failed. It can lower the queue's max_attempts, not raise it: the
  //   smaller of the two applies.
  // - backoff_base, backoff_max (0..365 days): the retry delay after a
  //   failed attempt, as the queue's backoff computes it, from these
  //   instead of the queue's (the other one unset: the queue's).
  std::optional<int> max_attempts;
  std::optional<Duration> backoff_base, backoff_max;
  // Dependencies (docs/semantics.md, "Dependencies"): the message waits
  // (MessageState::kWaiting: stored, listed and counted, never claimed)
  // until every message it depends on has completed (been acked), in any
  // queue of the store; the ack that completes the last one makes it ready
  // in the same transaction. depends_on: ids of messages sent before it
  // (one already acked counts as completed); depends_on_batch: indexes of
  // earlier messages of the same SendBatch. Together at most
  // kMaxDependencies; not with a delay or run_at.
  std::vector<std::int64_t> depends_on;
  std::vector<std::size_t> depends_on_batch;
  // What it does when one it depends on dies instead (dead-lettered,
  // cancelled, or deleted).
  IfDependencyDies if_dependency_dies = IfDependencyDies::kCancel;
};
inline constexpr std::size_t kMaxGroup = 255;
inline constexpr std::size_t kMaxDependencies = 100;
inline constexpr std::size_t kMaxKind = 128;

// A message and the queue it goes to (Store::SendAll, Store::CreateBatch).
struct QueuedMessage {
  std::string queue;
  Message message;
};

// How the members of a batch ended (sqlq/batch.h; docs/semantics.md,
// "Batches"): of `total`, how many completed (were acked), died
// (dead-lettered: attempts used up, a nack that kills, an expiry) and were
// cancelled (a cancel, the batch's own among them, or a deletion).
struct BatchCounts {
  std::int64_t total = 0;
  std::int64_t completed = 0;
  std::int64_t dead = 0;
  std::int64_t cancelled = 0;
  // Not ended yet.
  std::int64_t pending() const { return total - completed - dead - cancelled; }
  bool operator==(const BatchCounts&) const = default;
};

// A message a message was sent to wait for (ClaimedMessage::parents), by
// id and queue, so that its result can be read (WorkQueue::ReadResult).
// The queue is empty for one that had already left every queue (completed,
// or deleted) when the message that names it was sent.
struct ParentRef {
  std::string queue;
  std::int64_t id = 0;
  bool operator==(const ParentRef&) const = default;
};

// A message's part in a batch (ClaimedMessage::batch, MessageInfo::batch).
struct BatchRef {
  std::string id;
  // The batch's callback; else one of its members.
  bool callback = false;
  // The callback once its batch is done (always so when it is claimed):
  // how the members ended, as they stood when the last one ended.
  std::optional<BatchCounts> counts;
};

struct SendResult {
  std::int64_t id = 0;
  // True when dedup_key matched a message already in the queue.
  bool duplicate = false;
};

struct ClaimOptions {
  // Claim up to this many messages (1..1000).
  int max = 1;
  // Lease to take; the queue's default when unset.
  std::optional<Duration> lease;
  // When nothing is ready, sleep up to this long for a message (0..1h). The
  // claim wakes as soon as one is sent: at once from this process, within
  // milliseconds from another process (docs/semantics.md, "Waiting").
  Duration wait{0};
  // Free text naming the consumer, kept in the archive. At most 255 bytes.
  std::string worker;
  // When set (> 0), the claim takes messages, in claim order, while their
  // payloads add up to at most this many bytes, and stops at the first that
  // would pass it: fewer than `max` messages, but a bounded reply. The first
  // message is always taken, whatever its size. 0: no limit.
  std::size_t max_bytes = 0;
};

// What a claim says besides its messages: why it got fewer than it asked
// for while more were ready (a limit of the queue, a pause, busy groups).
struct ClaimNote {
  // "max_leased" or "rate_limit"; empty when no limit held the claim back.
  std::string limited_by;
  // When more becomes claimable: the next claim the bucket allows, or the
  // end of the first lease that runs out (an ack frees capacity sooner).
  Duration retry_after{0};
  // The queue is paused (WorkQueue::Pause): nothing is handed out until it
  // is resumed; the acks the claim carried were done all the same.
  bool paused = false;
  // The claim got nothing while messages were ready: their groups held
  // them back (an earlier message of the group in flight or waiting for its
  // retry, in ordered groups; or group_limit messages of the group in
  // flight). More comes when one of those is acked, retried or its lease
  // runs out.
  bool groups_busy = false;
};

// A message handed to a consumer under a lease.
struct ClaimedMessage {
  std::int64_t id = 0;
  // Names this one lease. Ack, nack and extend take it; once the lease has
  // expired and the message was claimed again, the receipt is stale.
  std::string receipt;
  int attempt = 0;  // 1 on the first delivery
  std::int32_t priority = 0;
  std::string payload;
  Timestamp enqueued_at;
  Timestamp lease_expires_at;
  Headers headers;
  std::string group;
  std::string kind;  // Message::kind
  // Message::timeout, expire_after (the latter counted from enqueued_at)
  // and on_expiry, and max_attempts.
  std::optional<Duration> timeout;
  std::optional<Duration> expire_after;
  ExpiryAction on_expiry = ExpiryAction::kDeadLetter;
  std::optional<int> max_attempts;
  // A member or the callback of a batch (sqlq/batch.h).
  std::optional<BatchRef> batch;
  // The messages it was sent to wait for (Message::depends_on, then
  // depends_on_batch, each once), completed or not: whose results a job
  // may read.
  std::vector<ParentRef> parents;
};

// What a nack does with the message (the outcomes of a job's handler).
enum class NackAction {
  // The attempt failed: retried after the delay (or the queue's backoff),
  // dead-lettered once its attempts are used up.
  kRetry,
  // A failure no retry can mend: dead-lettered now, whatever attempts are
  // left (a cancel is this, with its reason as the error).
  kDead,
  // Not now: claimable again after the delay, its attempt given back (the
  // next claim gets the same attempt number) and no error recorded. Each
  // snooze is counted on the message (MessageInfo::snoozes); once it has
  // kMaxSnoozes of them, a snooze is a failed attempt (kRetry, with the
  // error "snoozed 100 times"), so a job that snoozes for ever still ends
  // in the dead letters.
  kSnooze,
};
inline constexpr int kMaxSnoozes = 100;

struct NackOptions {
  // Retry (or come back, for kSnooze) after exactly this delay instead of
  // the queue's backoff (kSnooze: at once when unset).
  std::optional<Duration> delay;
  // Why the attempt failed; kept on the message and shown on its dead
  // letter. At most 4096 bytes (longer text is cut). kSnooze keeps none.
  std::string error;
  NackAction action = NackAction::kRetry;
};

// What Nack did with the message.
enum class NackOutcome { kRetry, kDead, kSnoozed };
// "retry", "dead", "snooze".
std::string_view NackActionName(NackAction action);
// kInvalidArgument for another name.
Result<NackAction> ParseNackAction(std::string_view name);

// --- results and progress of jobs (docs/semantics.md "Results") ----------

struct AckOptions {
  // The job's result, kept in the ack's own transaction (acked with it, or
  // neither) for ReadResult: any bytes, up to the queue's
  // max_payload_bytes. Unset: nothing is kept, and the ack costs what an
  // ack without options does.
  std::optional<std::string> result;
  // How long the result is kept after the ack (kMinResultTtl..kMaxResultTtl).
  Duration result_ttl = std::chrono::hours(24);
};
inline constexpr Duration kMinResultTtl = std::chrono::seconds(1);
inline constexpr Duration kMaxResultTtl = std::chrono::hours(24 * 30);
// A progress note's limit, in bytes.
inline constexpr std::size_t kMaxProgressNote = 4096;
// How a wait for a job's result looks again for a job another process may
// end (ReadResult, and the server's waits): after kResultFirstLook, then
// twice as long each time, up to every kResultLookEvery.
inline constexpr Duration kResultFirstLook = std::chrono::milliseconds(10);
inline constexpr Duration kResultLookEvery = std::chrono::milliseconds(250);

// Where a job is, as ReadResult sees it.
enum class JobState { kReady, kDelayed, kLeased, kCompleted, kDead, kWaiting };
// "ready", "delayed", "leased", "completed", "dead", "waiting".
std::string_view JobStateName(JobState state);

struct JobResult {
  std::int64_t id = 0;
  JobState state = JobState::kReady;
  // Completed with a result (AckOptions::result), until its ttl runs out.
  std::optional<std::string> result;
  std::optional<Timestamp>
      completed_at;  // completed with a result, or archived
  // The last progress recorded (Progress), while the job runs and after.
  std::optional<double> progress;
  std::string note;
  std::optional<Timestamp> progress_at;
  std::string error;  // dead: its last error
  int attempts = 0;   // deliveries so far, when the message is still known
  // Completed or dead: what a wait for the result waits for.
  bool ended() const {
    return state == JobState::kCompleted || state == JobState::kDead;
  }
};

struct QueueStats {
  std::string name;
  std::int64_t ready = 0;    // claimable now (including expired leases)
  std::int64_t delayed = 0;  // waiting for their delay or retry backoff
  std::int64_t leased = 0;   // held under a live lease
  std::int64_t waiting = 0;  // for messages they depend on
  std::int64_t dead = 0;
  std::int64_t archived = 0;
  // How long the longest-waiting ready message has been claimable; 0 if none.
  Duration oldest_ready_age{0};
  // Counters since the queue was created.
  std::int64_t sends = 0;
  std::int64_t claims = 0;  // messages handed out
  std::int64_t acks = 0;
  std::int64_t nacks = 0;
  std::int64_t expirations = 0;  // leases that ran out before an ack
  std::int64_t dead_lettered = 0;
  // Jobs not started by their expiry (Message::expire_after), whether
  // dead-lettered (also counted in nacks and dead_lettered) or dropped.
  std::int64_t expired = 0;
  bool paused = false;  // WorkQueue::Pause
};

struct DeadLetter {
  std::int64_t id = 0;
  std::int32_t priority = 0;
  std::string payload;
  int attempts = 0;
  std::string last_error;
  Timestamp enqueued_at;
  Timestamp died_at;
  Headers headers;
  std::vector<AttemptError> errors;  // oldest first
  std::string kind;
};

struct ArchivedMessage {
  std::int64_t id = 0;
  std::int32_t priority = 0;
  std::string payload;
  int attempts = 0;
  std::string worker;
  Timestamp enqueued_at;
  Timestamp completed_at;
  Headers headers;
  std::vector<AttemptError> errors;  // oldest first
  std::string kind;
};

// Paging for listings: up to `limit` entries with id greater than `after_id`,
// in id order.
struct ListOptions {
  int limit = 100;  // 1..10,000
  std::int64_t after_id = 0;
};

// Where a message is. Ready, delayed and leased messages are in the queue
// (a message whose lease ran out is ready again); dead letters and archived
// messages have left it.
// kWaiting: for the messages it depends on (Message::depends_on).
enum class MessageState {
  kReady,
  kDelayed,
  kLeased,
  kDead,
  kArchived,
  kWaiting
};
// "ready", "delayed", "leased", "dead", "archived", "waiting".
std::string_view MessageStateName(MessageState state);
// kInvalidArgument for another name.
Result<MessageState> ParseMessageState(std::string_view name);

// A message linked to another by a dependency (WorkQueue::Links).
struct MessageLink {
  std::string queue;
  std::int64_t id = 0;
  // A parent that died: the dependent waits for its redrive
  // (IfDependencyDies::kWait).
  bool dead = false;
};

// The dependencies of a message still in its queue (docs/semantics.md,
// "Dependencies"): those it still waits for, and those still waiting for
// it (the first 1000; more_dependents when there are more),
// each in id order. A parent that completed is no longer listed.
struct MessageLinks {
  std::vector<MessageLink> parents;
  std::vector<MessageLink> dependents;
  bool more_dependents = false;
};

// A message as Get and ListMessages show it, in whatever state it is.
struct MessageInfo {
  std::int64_t id = 0;
  MessageState state = MessageState::kReady;
  std::int32_t priority = 0;
  int attempts = 0;  // deliveries so far
  std::string payload;
  Headers headers;
  std::string dedup_key;  // in the queue only
  std::string group;      // in the queue and the dead letters
  std::string kind;       // Message::kind
  std::optional<Duration> timeout, expire_after;  // Message's
  ExpiryAction on_expiry = ExpiryAction::kDeadLetter;
  std::optional<int> max_attempts;  // Message's
  std::optional<Duration> backoff_base, backoff_max;
  // Times it was snoozed (NackAction::kSnooze); in the queue only.
  int snoozes = 0;
  Timestamp enqueued_at;
  // In the queue: when it is (or was) claimable, or, leased, when its lease
  // ends.
  std::optional<Timestamp> ready_at;
  // Leased (or ready after its lease ran out): the lease's end.
  std::optional<Timestamp> lease_expires_at;
  // Leased: the worker named by the claim; archived: the one that acked.
  std::string worker;
  std::string last_error;
  std::vector<AttemptError> errors;       // oldest first
  std::optional<Timestamp> died_at;       // dead
  std::optional<Timestamp> completed_at;  // archived
  // Waiting: the messages it still waits for (by id, any queue), and of
  // those the ones that died and that it waits for a redrive of
  // (IfDependencyDies::kWait).
  std::vector<std::int64_t> waits_for;
  std::vector<std::int64_t> waits_for_dead;
  // A member or the callback of a batch (sqlq/batch.h).
  std::optional<BatchRef> batch;
  // Every message it was sent to wait for (ClaimedMessage::parents).
  std::vector<ParentRef> parents;
};

// Which messages a listing or a bulk change takes. Every criterion set must
// hold. `state` picks the place looked in: unset, every message in the
// queue (ready, delayed, leased); kDead the dead letters; kArchived the
// archive. dedup_key only matches messages in the queue.
struct MessageFilter {
  std::optional<MessageState> state;
  std::optional<std::int32_t> min_priority, max_priority;
  std::string dedup_key;
  // In this group ("" included); only messages in the queue and dead
  // letters have one.
  std::optional<std::string> group;
  // A header that must be present with exactly this value.
  std::optional<std::pair<std::string, std::string>> header;
  // Of this kind (Message::kind; not empty).
  std::optional<std::string> kind;
  // enqueued_after <= enqueue time < enqueued_before
  std::optional<Timestamp> enqueued_after, enqueued_before;
  // Whose payload begins with these bytes (at most kMaxPayloadPrefix).
  std::string payload_prefix;
};
inline constexpr std::size_t kMaxPayloadPrefix = 1024;

// A page of ListMessages: up to `limit` (1..1,000) messages in id order,
// from where `cursor` (the previous page's next_cursor; empty: the start)
// left off.
struct ListMessagesOptions {
  MessageFilter filter;
  int limit = 100;
  std::string cursor;
};

struct MessagePage {
  std::vector<MessageInfo> messages;
  // Empty when the listing is complete; else where the next page starts.
  // A page may hold fewer than `limit` messages (none, even) and still have
  // a next cursor: each page reads at most a bounded stretch of the queue
  // (docs/semantics.md, "Finding messages").
  std::string next_cursor;
};

// The messages a bulk change applies to: these ids (1..10,000) when given,
// else every message that `filter` selects.
struct MessageSelection {
  std::vector<std::int64_t> ids;
  MessageFilter filter;
};

// WorkQueue::CountMessages: how many, and a time just past the store's
// clock when they were counted. A change by the same filter with
// enqueued_before set to `at` takes every message counted (that is still
// there) and leaves alone those sent since, but for sends of the count's
// own microsecond or committing at that moment.
struct MessageCount {
  std::int64_t count = 0;
  Timestamp at;
};

// The last error of a cancelled message (WorkQueue::Cancel).
inline constexpr std::string_view kCancelled = "cancelled";

// The checks CreateQueue applies, for callers that want to refuse bad input
// before touching a database: kInvalidArgument with the reason, or OK.
Status CheckQueueName(std::string_view name);
Status CheckQueueOptions(const QueueOptions& options);

// A registration to hear, without a thread, when a queue may have ready
// messages: the asynchronous form of a claim's wait (WorkQueue::Subscribe).
// It follows the rules of a waiting claim: a send of n messages signals at
// most n subscribers (and waiting claims) of the queue, the longest-waiting
// first; a write by another process signals every one. A signal means
// "look now" (claim), not that a claim will succeed.
//
// Thread-safety: TakeSignal may be called from any thread; destroy the
// subscription from one thread, not concurrently with TakeSignal. It must
// not outlive the Store.
class ReadySubscription {
 public:
  ReadySubscription(const ReadySubscription&) = delete;
  ReadySubscription& operator=(const ReadySubscription&) = delete;
  // Unsubscribes. A signal that was never taken is handed on to the next
  // subscriber or waiting claim of the queue, so that it is not lost.
  ~ReadySubscription();

  // Returns whether a signal came since the last call, and clears it. Call
  // it before each claim the signal prompts: a subscriber that took its
  // signal goes to the back of the line, and a signal left untaken when the
  // subscription is destroyed is passed on (so a subscriber that claimed
  // nothing should take it only if it will look again).
  bool TakeSignal();

 private:
  friend class WorkQueue;
  explicit ReadySubscription(std::unique_ptr<core::SubscriptionState> state);
  std::unique_ptr<core::SubscriptionState> state_;
};

// A watch of a job's end through a store (WorkQueue::WatchJobEnd);
// destroying it ends the watch.
class JobEndWatch {
 public:
  JobEndWatch(const JobEndWatch&) = delete;
  JobEndWatch& operator=(const JobEndWatch&) = delete;
  ~JobEndWatch();

 private:
  friend class WorkQueue;
  JobEndWatch(std::shared_ptr<core::QueueImpl> queue, std::uint64_t id)
      : queue_(std::move(queue)), id_(id) {}
  std::shared_ptr<core::QueueImpl> queue_;
  std::uint64_t id_;
};

class WorkQueue {
 public:
  WorkQueue(const WorkQueue&) = default;
  WorkQueue& operator=(const WorkQueue&) = default;
  ~WorkQueue();

  const std::string& name() const;
  // The queue's settings and state as this handle last read them: when it
  // was opened, after its own Alter, Pause or Resume, and at most a second
  // old while it is used (changes by other handles or processes show within
  // a second).
  QueueOptions options() const;
  // Name, options, creation time and paused state.
  QueueInfo info() const;

  // Changes the queue's settings (all of them, as given; read info() first
  // to change one). What is in flight keeps what it has: a leased message
  // its lease; a delayed one its time; a longer max_attempts gives
  // messages that have not died yet more attempts, a shorter one takes
  // effect at their next failure or claim. kInvalidArgument for options
  // out of range.
  Status Alter(const QueueOptions& options);
  // Paused, claims (waiting ones included) get nothing while sends go on
  // and are stored; Resume wakes the waiting claims. Both are idempotent.
  Status Pause();
  Status Resume();

  // Sends one message. Returns once it is durably committed.
  // Errors: kInvalidArgument (delay, priority, dedup key), kTooLarge
  // (payload), kNotFound (queue dropped), kBusy/kUnavailable (retryable).
  Result<SendResult> Send(const Message& message);
  // Sends a batch atomically: all are stored or none (1..10,000 messages).
  // Results are in the order of `messages`.
  Result<std::vector<SendResult>> SendBatch(std::span<const Message> messages);

  // Claims up to options.max ready messages in priority DESC, ready time ASC,
  // id ASC order, leasing each. Never blocks on messages other consumers
  // hold. Messages whose attempts are used up become dead letters instead of
  // being delivered. An empty vector means nothing was ready within `wait`.
  // With `note`, says whether a limit of the queue held the claim back, or
  // the queue is paused (ClaimNote).
  Result<std::vector<ClaimedMessage>> Claim(const ClaimOptions& options = {},
                                            ClaimNote* note = nullptr);

  // Subscribes to this queue's wake-ups, for callers that wait for messages
  // without blocking a thread (an event loop): register first, then claim
  // with wait 0; when that finds nothing, wait for `on_ready` or until
  // NextLook(&note), then TakeSignal() and claim again. Registering before
  // the first claim means no send is missed in between.
  // `on_ready` runs on the thread that signals (a sender's, or the store's
  // watcher thread) while a lock is held: it must return quickly and must
  // not call into sqlq; post the work to your own executor. It is not
  // called again until the signal has been taken with TakeSignal().
  std::unique_ptr<ReadySubscription> Subscribe(std::function<void()> on_ready);

  // When a subscriber looks again at the latest if no wake-up comes, on
  // std::chrono::steady_clock: the rule of a waiting Claim (docs/
  // semantics.md "Waiting"). The first of the safety net (a second after
  // this call), the next delayed message's (or expiring lease's) ready
  // time, and, when a limit held the claim back, its retry_after. Take the
  // earlier of it and the end of your wait.
  // `after_claim`: the note of the claim with wait 0 that just found
  // nothing. A message ready now that such a claim did not get waits for
  // the one before it in its group (an ordered queue, or one with a group
  // limit) or for Resume (a paused queue): for an ack or a Resume, which
  // signal, not for a time, so that claim gets the safety net.
  // nullptr when no claim was made (a look when the timer ran out): a time
  // not after now then means a message is ready now, worth a claim.
  Result<std::chrono::steady_clock::time_point> NextLook(
      const ClaimNote* after_claim = nullptr);

  // The message is done: deleted, or archived when the queue keeps one.
  // Errors: kInvalidArgument (malformed receipt), kFailedPrecondition (stale:
  // the lease expired and someone else claimed the message), kNotFound (the
  // message is no longer in the queue).
  Status Ack(std::string_view receipt);
  // Acks `receipt` and claims the next messages (as Claim(options)) in the
  // same transaction: one commit per job for a worker that takes one job at
  // a time, where Ack then Claim costs two. When the ack fails (malformed,
  // stale or gone receipt: errors as for Ack) nothing is acked and nothing
  // is claimed. When nothing is ready the ack is committed and the call
  // waits up to options.wait as Claim does; an empty vector then means the
  // ack is done and no message came.
  Result<std::vector<ClaimedMessage>> AckAndClaim(
      std::string_view receipt, const ClaimOptions& options = {},
      ClaimNote* note = nullptr);
  // Claim (with `ack` empty) or AckAndClaim without a thread waiting for
  // the commit, for an event loop: returns at once, and `then` gets the
  // result and the claim's note once the claim committed, on the thread
  // that committed it (it may be running other callers' writes: `then`
  // must be short and must not call into sqlq; hand longer work to
  // another thread) or on the store's runner (Store::SetRunner). Without
  // a runner, the claim runs on this thread before ClaimThen returns.
  // options.wait must be 0 (a waiting claim parks a thread: kInvalidArgument
  // otherwise). Errors as for Claim and AckAndClaim, through `then`.
  using ClaimedThen =
      std::function<void(Result<std::vector<ClaimedMessage>>, ClaimNote)>;
  void ClaimThen(std::string_view ack, const ClaimOptions& options,
                 ClaimedThen then);
  // Acks with options: with a result, the result is kept in the ack's
  // transaction. Errors as for Ack; kTooLarge for a result over the
  // queue's max_payload_bytes, kInvalidArgument for a ttl out of range
  // (nothing acked).
  Status Ack(std::string_view receipt, const AckOptions& options);
  // Records the job's progress while its receipt holds it: `progress` (any
  // finite number, e.g. a percent) and `note` (free text, at most
  // kMaxProgressNote bytes), replacing the last. Does not extend the
  // lease. Errors as for Ack.
  Status Progress(std::string_view receipt, double progress,
                  std::string_view note = {});
  // Where job `id` is, with its result once completed and its last
  // progress. With `wait` (up to 1 h), waits until the job is completed or
  // dead or the wait ends, and then says where it is. kNotFound when the
  // queue knows nothing of it: never sent, deleted, or acked without a
  // result (and without an archive), or its result ran out.
  Result<JobResult> ReadResult(std::int64_t id, Duration wait = Duration(0));
  // Calls `on_end` when job `id` may have ended through this queue's store
  // (acked with a result, dead-lettered, or dropped at its expiry:
  // Message::on_expiry), for callers that wait for a
  // result without blocking a thread (an event loop): on each call,
  // ReadResult with no wait. A job another process ends is not signalled:
  // look again now and then as well. `on_end` runs on the thread that
  // ended the job, under a lock: it must return quickly and must not call
  // into sqlq.
  std::unique_ptr<JobEndWatch> WatchJobEnd(std::int64_t id,
                                           std::function<void()> on_end);

  // Acks many in one commit; one Status per receipt, in order. The outer
  // Result fails only when nothing could be done (database unreachable).
  Result<std::vector<Status>> AckBatch(std::span<const std::string> receipts);

  // The attempt failed: the message is retried after the backoff (or
  // options.delay), or becomes a dead letter when its attempts are used up.
  // Errors as for Ack.
  Result<NackOutcome> Nack(std::string_view receipt,
                           const NackOptions& options = {});

  // Renews the lease to `lease` from now (heartbeat). Errors as for Ack.
  // Returns the new expiry.
  Result<Timestamp> Extend(std::string_view receipt, Duration lease);

  // Deletes every message (ready, delayed, leased); keeps dead letters and
  // archive. Returns how many were deleted.
  Result<std::int64_t> Purge();

  Result<QueueStats> Stats();

  Result<std::vector<DeadLetter>> ListDead(const ListOptions& options = {});
  // Moves the given dead letters (1..10,000 ids; RedriveAll: every one)
  // back into the queue, ready now with fresh attempts, same ids. Returns
  // how many were moved; ids that are not dead letters of this queue are
  // skipped.
  Result<std::int64_t> Redrive(std::span<const std::int64_t> ids);
  Result<std::int64_t> RedriveAll();
  Result<std::int64_t> PurgeDead();
  // Deletes dead letters older than the queue's dead_retention (none when
  // it is 0). Nacks that dead-letter run this at most once a minute.
  Result<std::int64_t> PruneDead();

  Result<std::vector<ArchivedMessage>> ListArchive(
      const ListOptions& options = {});
  // Deletes archived messages older than the queue's retention.
  Result<std::int64_t> PruneArchive();

  // --- seeing and steering single messages (docs/semantics.md) -----------
  // The message with this id, in the queue, the dead letters or the
  // archive. kNotFound when this queue has no message with that id (it
  // was acked without an archive, deleted, or belongs to another queue).
  Result<MessageInfo> Get(std::int64_t id);
  // What message `id` of this queue waits for and what waits for it, with
  // their queues (an id no message of this queue has: none).
  Result<MessageLinks> Links(std::int64_t id);
  // Messages in id order, page by page; stable under concurrent sends and
  // claims: a message that stays where the filter looks is listed once.
  // kInvalidArgument for a malformed cursor or one from another listing.
  Result<MessagePage> ListMessages(const ListMessagesOptions& options = {});
  // How many messages the filter chooses now (what a bulk change by the
  // same filter would touch, unless they change meanwhile), and when.
  Result<MessageCount> CountMessages(const MessageFilter& filter = {});
  // Deletes the selected messages (filter.state picks the queue, the dead
  // letters or the archive). A deleted leased message's receipt stops
  // working: its ack gets kNotFound. Returns how many were deleted.
  Result<std::int64_t> Delete(const MessageSelection& selection);
  // Makes the selected messages claimable now: delayed ones in the queue
  // become ready (ready and leased ones are left as they are); dead
  // letters (filter.state = kDead) are redriven. Returns how many changed.
  Result<std::int64_t> RetryNow(const MessageSelection& selection);
  // Moves the selected ready or delayed messages' claimable time to `at`
  // (a time past makes them ready now); leased ones are left alone. Only
  // for messages in the queue. Returns how many changed.
  Result<std::int64_t> Reschedule(const MessageSelection& selection,
                                  Timestamp at);
  // Cancels the selected messages in the queue (any state): they become
  // dead letters with the error "cancelled" (kCancelled), which a person
  // can redrive. A cancelled leased message's lease ends: its worker's ack
  // or nack gets kNotFound. Only for messages in the queue. Returns how many
  // were cancelled.
  Result<std::int64_t> Cancel(const MessageSelection& selection);
  // Gives the selected messages in the queue (any state) a new priority.
  Result<std::int64_t> SetPriority(const MessageSelection& selection,
                                   std::int32_t priority);

  // Transactional variants: the write joins `tx` and commits or rolls back
  // with it (and with the caller's own writes in it). REQUIRES: tx came from
  // this queue's Store and is open.
  Result<SendResult> Send(Tx& tx, const Message& message);
  Status Ack(Tx& tx, std::string_view receipt);

 private:
  friend class Store;
  friend class Worker;
  explicit WorkQueue(std::shared_ptr<core::QueueImpl> impl);
  std::shared_ptr<core::QueueImpl> impl_;
};

}  // namespace sqlq

#endif  // SQLQ_QUEUE_H_
