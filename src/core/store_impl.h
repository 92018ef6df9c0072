// Internals behind the public Store, WorkQueue and Tx handles.

#ifndef SQLQ_CORE_STORE_IMPL_H_
#define SQLQ_CORE_STORE_IMPL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "core/engine.h"
#include "core/wake_hub.h"
#include "core/write_batcher.h"
#include "sqlq/store.h"

namespace sqlq::core {

class PeriodicThread;
class WaitingReporter;

// Rung when a job of this store ends through it (an ack with a result, a
// nack or a cancel that dead-letters), so that a wait for a result
// (WorkQueue::ReadResult, and watchers: WorkQueue::WatchJobEnds) looks
// again at once rather than at its next poll. Jobs ended by other
// processes are seen by the poll.
class ResultBell {
 public:
  // Job `message_id` of queue `queue_id` ended; 0: any number of jobs.
  void Ring(std::int64_t queue_id = 0, std::int64_t message_id = 0) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++rung_;
      for (const auto& [id, w] : watchers_) {
        if (message_id == 0 ||
            (w.queue_id == queue_id && w.message_id == message_id)) {
          w.fn();
        }
      }
    }
    cv_.notify_all();
  }
  // `fn` runs at each ring for that job (or for any), under the bell's
  // lock: it must only post.
  std::uint64_t Watch(std::int64_t queue_id, std::int64_t message_id,
                      std::function<void()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    watchers_[++next_watcher_] = {queue_id, message_id, std::move(fn)};
    return next_watcher_;
  }
  void Unwatch(std::uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    watchers_.erase(id);
  }
  std::uint64_t rung() {
    std::lock_guard<std::mutex> lock(mu_);
    return rung_;
  }
  // Until it rings after `seen` (a value of rung()), or `until`.
  void WaitPast(std::uint64_t seen,
                std::chrono::steady_clock::time_point until) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_until(lock, until, [&] { return rung_ != seen; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::uint64_t rung_ = 0;
  std::uint64_t next_watcher_ = 0;
  struct Watcher {
    std::int64_t queue_id = 0, message_id = 0;
    std::function<void()> fn;
  };
  std::map<std::uint64_t, Watcher> watchers_;
};

class StoreImpl {
 public:
  StoreImpl(std::string url, std::unique_ptr<Engine> engine);
  ~StoreImpl();

  const std::string& url() const { return url_; }
  Engine& engine() { return *engine_; }
  WriteBatcher& batcher() { return batcher_; }
  const WriteBatcher& batcher() const { return batcher_; }
  WakeHub& hub() { return hub_; }
  ResultBell& results() { return results_; }
  // How often a waiting claim looks again without being woken: rarely when
  // the engine reports foreign writes, more often when it cannot.
  std::chrono::milliseconds poll_interval() const;
  void set_poll_interval(std::chrono::milliseconds interval) {
    poll_interval_.store(interval, std::memory_order_relaxed);
  }
  // StoreOptions::clock, for checks of input against the time (a send's
  // run_at); nullptr: this machine's clock. Set once, before use.
  void set_clock(std::shared_ptr<Clock> clock) { clock_ = std::move(clock); }
  Timestamp Now() const;
  // Starts reporting this store's waiting claims (StoreOptions::
  // report_waiting; core/waiting_report.h).
  void StartWaitingReports();
  // This store as the holder of the scheduler lease (core/schedules.h),
  // and as the process of its reports of waiting claims.
  const std::string& scheduler_holder() const { return scheduler_holder_; }
  // What the last pass of this store found (Store::HoldsSchedulerLease).
  void set_scheduler_leader(bool leader) { scheduler_leader_ = leader; }
  bool scheduler_leader() const { return scheduler_leader_; }
  // Starts the scheduler thread (StoreOptions::run_schedules); it stops
  // first when the store closes.
  void StartScheduler();
  // True at most once a minute: whether this batch's send should also
  // prune the batches that expired.
  bool BatchPruneDue() {
    const auto now = std::chrono::steady_clock::now().time_since_epoch();
    auto due = batch_prune_due_.load(std::memory_order_relaxed);
    if (now.count() < due) return false;
    return batch_prune_due_.compare_exchange_strong(
        due, (now + std::chrono::minutes(1)).count());
  }

 private:
  std::string url_;
  // Before engine_, so that it outlives the engine's background thread,
  // which calls hub_.NotifyAll() until the engine is destroyed.
  WakeHub hub_;
  ResultBell results_;
  std::unique_ptr<Engine> engine_;
  WriteBatcher batcher_;
  std::shared_ptr<Clock> clock_;
  // One look a second is the safety net for a missed notification; see
  // docs/semantics.md "Waiting".
  std::atomic<std::chrono::milliseconds> poll_interval_{
      std::chrono::milliseconds(1000)};
  const std::string scheduler_holder_;
  std::atomic<bool> scheduler_leader_{false};
  std::atomic<std::chrono::steady_clock::rep> batch_prune_due_{0};
  // Last, so that they stop before anything they use goes.
  std::unique_ptr<PeriodicThread> scheduler_;
  std::unique_ptr<WaitingReporter> reporter_;
};

// Runs `fn(engine, conn)` as one write merged with concurrent callers'
// (WriteBatcher) and returns its value.
template <typename T, typename Fn>
Result<T> MergedWrite(StoreImpl& store, Fn fn) {
  std::optional<T> out;
  Status s = store.batcher().Run([&](Conn& conn) -> Status {
    Result<T> r = fn(store.engine(), conn);
    if (!r.ok()) return r.status();
    out = std::move(*r);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return std::move(*out);
}

// Runs `fn(engine, conn)` in a read snapshot and returns its value.
template <typename T, typename Fn>
Result<T> SnapshotRead(StoreImpl& store, Fn fn) {
  std::optional<T> out;
  Status s = store.engine().Read([&](Conn& conn) -> Status {
    Result<T> r = fn(store.engine(), conn);
    if (!r.ok()) return r.status();
    out = std::move(*r);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return std::move(*out);
}

class QueueImpl;

// What a claim acks first, in its own transaction.
struct ClaimAcks {
  // When refused, nothing is claimed and the claim fails with its error.
  std::optional<Receipt> ack;
  // Acked each on its own; their statuses go to *done_status (when set),
  // and the claim goes on whatever they are.
  std::span<const Receipt> done;
  std::vector<Status>* done_status = nullptr;
};

// Claims as `options` say (a merged write: WriteBatcher::Claim), the first
// look after the acks of `first`; when nothing is ready, waits up to
// options.wait for a send, a delayed message or an expiring lease, looking
// again with plain claims; a claim a limit held back looks again when the
// limit allows (or an ack wakes it). `note`, when set, gets the last
// look's ClaimNote. REQUIRES: options validated.
Result<std::vector<ClaimedMessage>> ClaimWaiting(QueueImpl& impl,
                                                 const ClaimOptions& options,
                                                 const ClaimAcks& first,
                                                 ClaimNote* note = nullptr);

// A claim of `options` (wait 0) that acks `ack` first, without a thread
// waiting for its commit (WriteBatcher::ClaimThen): `then` gets what
// ClaimWaiting would have returned, and the claim's note, on the thread
// that committed it, or on the store's runner when what follows the
// commit reads or writes the store. Its `q` is the queue of `impl`.
// REQUIRES: options validated.
void ClaimOnceThen(const WorkQueue& q, std::shared_ptr<QueueImpl> impl,
                   const ClaimOptions& options, std::optional<Receipt> ack,
                   WorkQueue::ClaimedThen then);

// When a waiting claim of `impl` looks again at the latest (the rule in
// core/next_look.h), from a read of the queue's next ready time.
// `claim`: the note of a claim that just got nothing; nullptr after no
// claim (a time not after now then means a message is ready now).
Result<std::chrono::steady_clock::time_point> NextLookAt(
    QueueImpl& impl, const ClaimNote* claim);

class QueueImpl {
 public:
  QueueImpl(StoreImpl* store, QueueRecord record)
      : store_(store),
        id_(record.id),
        name_(record.info.name),
        info_(std::make_shared<const QueueInfo>(std::move(record.info))),
        read_at_(std::chrono::steady_clock::now()) {}

  StoreImpl& store() { return *store_; }
  std::int64_t id() const { return id_; }
  const std::string& name() const { return name_; }
  // The queue's settings and paused state, read again from the store when
  // the copy is more than kRefresh old, so that changes made elsewhere
  // (another handle, another process) show within that. A failed read
  // keeps the copy.
  static constexpr std::chrono::seconds kRefresh{1};
  std::shared_ptr<const QueueInfo> Current();
  // After this handle's own change: the copy is `info` now.
  void Set(QueueInfo info);

  // True at most once a minute: whether this ack should also prune the
  // archive, or this nack the dead letters (retention is enforced without
  // anyone running a command).
  bool PruneDue() { return archive_prune_.Due(); }
  bool DeadPruneDue() { return dead_prune_.Due(); }
  bool HoldPruneDue() { return hold_prune_.Due(); }
  bool ResultPruneDue() { return result_prune_.Due(); }

  // Where this handle's next claim of a grouped queue starts its round of
  // the groups (ClaimParams::after_group): after the last group it served.
  std::optional<std::string> GroupCursor() {
    std::lock_guard<std::mutex> lock(mu_);
    return group_cursor_;
  }
  void SetGroupCursor(std::string group) {
    std::lock_guard<std::mutex> lock(mu_);
    group_cursor_ = std::move(group);
  }

 private:
  // True at most once a minute, from any number of threads.
  class OncePerMinute {
   public:
    bool Due() {
      auto now = std::chrono::steady_clock::now().time_since_epoch().count();
      auto due = next_.load(std::memory_order_relaxed);
      if (now < due) return false;
      auto next =
          now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::minutes(1))
                    .count();
      return next_.compare_exchange_strong(due, next);
    }

   private:
    std::atomic<std::int64_t> next_{0};
  };

  StoreImpl* store_;
  const std::int64_t id_;
  const std::string name_;
  std::mutex mu_;
  std::shared_ptr<const QueueInfo> info_;          // guarded by mu_
  std::chrono::steady_clock::time_point read_at_;  // guarded by mu_
  std::optional<std::string> group_cursor_;        // guarded by mu_
  OncePerMinute archive_prune_, dead_prune_, hold_prune_, result_prune_;
};

// After messages of queue `q` (of `impl`) left it (acks, dead letters):
// in an ordered queue, or one with a group limit or max_leased, wakes
// waiting claims of this process and of others (a group's next message, or
// a place under the limit, is claimable now: Engine::WakeOthers); prunes the
// archive past retention and the dedup holds that ran out, each at most once a
// minute per handle; failures are left for the next time (the data is only kept
// longer).
void AfterAcks(WorkQueue& q, QueueImpl& impl);
// True when AfterAcks may write to the store for a queue with options
// `o` (its prunes), rather than only wake waiting claims.
bool AfterAcksTouchesStore(const QueueOptions& o);

// Moves the queue's dead letters on to its dead-letter queue, when it has
// one and that queue exists (QueueOptions::dead_letter_queue), after
// settling what waited for them (SettleEnded).
void ForwardDead(QueueImpl& impl);

// The publish of `messages` to topic `topic` on `conn`, inside a write
// transaction (core/topic.cc): every subscriber's messages are checked
// before the first is stored, so that a refusal writes nothing (a clean
// failure). What the WriteBatcher runs for Store::PublishBatch.
Result<std::vector<WriteBatcher::Published>> PublishIn(
    StoreImpl& store, Conn& conn, std::string_view topic,
    std::span<const Message> messages);
// The move itself, for queue `queue_id` named `name` as stored now (no
// handle needed): what SettleEnded does for the queues where it cancelled
// dependents.
void ForwardDeadLetters(StoreImpl& store, std::int64_t queue_id,
                        std::string_view name);

// Whether queue `name` may take `o.dead_letter_queue` as its dead-letter
// queue, read in the transaction that stores the link: kInvalidArgument
// when the queues' dead-letter links, followed from there, lead back to
// `name` (a loop would pass dead letters round for ever). Links to queues
// that do not exist end the walk.
Status CheckDeadLetterLoop(QueueOps& e, Conn& c, std::string_view name,
                           const QueueOptions& o);

// What a Ring or Rotation handle holds: its store and its record.
template <typename Record>
class KindImpl {
 public:
  KindImpl(StoreImpl* store, Record record)
      : store_(store), record_(std::move(record)) {}
  StoreImpl& store() { return *store_; }
  std::int64_t id() const { return record_.id; }
  const Record& record() const { return record_; }

 private:
  StoreImpl* store_;
  Record record_;
};

class RingImpl : public KindImpl<RingRecord> {
 public:
  using KindImpl::KindImpl;
};

class RotationImpl : public KindImpl<RotationRecord> {
 public:
  using KindImpl::KindImpl;
};

class TxImpl {
 public:
  // `joined`: the transaction is the caller's (Store::JoinTx), who may end
  // it on their own; sqlq then never ends it implicitly.
  TxImpl(StoreImpl* store, std::unique_ptr<Conn> conn, bool joined)
      : store_(store), conn_(std::move(conn)), joined_(joined) {}
  StoreImpl& store() { return *store_; }
  bool joined() const { return joined_; }
  // nullptr once committed or rolled back.
  Conn* conn() { return conn_.get(); }
  std::unique_ptr<Conn> Close() { return std::move(conn_); }
  // Queues this transaction sent to, with how many messages: woken on
  // commit.
  std::map<std::int64_t, std::int64_t>& sent() { return sent_; }
  // An operation in this transaction failed after it may have written part
  // of itself (not a clean failure): the transaction must not commit.
  void Poison(const Status& why) {
    if (poisoned_.ok()) poisoned_ = why;
  }
  const Status& poisoned() const { return poisoned_; }

 private:
  StoreImpl* store_;
  std::unique_ptr<Conn> conn_;
  bool joined_;
  Status poisoned_;
  std::map<std::int64_t, std::int64_t> sent_;
};

}  // namespace sqlq::core

#endif  // SQLQ_CORE_STORE_IMPL_H_
