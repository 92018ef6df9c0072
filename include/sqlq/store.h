// Store: the entry point of libsqlq. A Store is one database (named by a URL)
// holding any number of queues. Open it once per process and share it.
//
//   auto store = sqlq::Store::Open("sqlite:jobs.db");
//   if (!store.ok()) { ... store.status().ToString() ... }
//   auto q = (*store)->CreateQueue("emails", {});
//   auto sent = q->Send({.payload = "hello"});
//
// Thread-safety: a Store is safe to use from many threads at once. It owns a
// small pool of connections and a background thread that notices writes made
// by other processes (to wake waiting claims).

#ifndef SQLQ_STORE_H_
#define SQLQ_STORE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sqlq/batch.h"
#include "sqlq/queue.h"
#include "sqlq/ring.h"
#include "sqlq/rotation.h"
#include "sqlq/schedule.h"
#include "sqlq/status.h"
#include "sqlq/topic.h"
#include "sqlq/workers.h"

namespace sqlq {

namespace core {
class StoreImpl;
class TxImpl;
}  // namespace core

// Where a store reads the time from. Tests inject a manual clock to move
// leases and delays forward without sleeping; production uses the system
// clock (SQLite) or the database server's clock (server engines).
class Clock {
 public:
  virtual ~Clock() = default;
  virtual Timestamp Now() = 0;
};

struct StoreOptions {
  // Create the database file and the sqlq tables when missing. When false,
  // opening a missing database fails with kNotFound.
  bool create_if_missing = true;
  // Time source; nullptr means the engine's own clock.
  std::shared_ptr<Clock> clock;
  // Run the scheduler in a thread of this store: it takes the database's
  // scheduler lease when no other process holds it, and sends the due
  // ticks of every schedule (RunSchedules) while it holds it. `sqlq serve`
  // runs one; short-lived programs should not.
  bool run_schedules = false;
  // Report this store's waiting claims to the database, so that every
  // process sees them in WaitingConsumers (the dashboard's waiting
  // consumers): a small write every 5 s while claims wait (and one when
  // they stop). Off, an idle waiting claim writes nothing.
  // `sqlq serve` and the sqlq command report; a worker of your own can.
  bool report_waiting = false;
};

// A transaction the caller controls, for writing business rows and queue rows
// atomically. Obtained from Store::BeginTx (sqlq opens the connection) or
// Store::JoinTx (the caller's own connection). Not thread-safe: one thread
// at a time. Destroying an open Tx that sqlq began rolls it back.
class Tx {
 public:
  Tx(Tx&&) noexcept;
  Tx& operator=(Tx&&) noexcept;
  ~Tx();

  // The engine's native connection (sqlite3* for SQLite, PGconn* for
  // PostgreSQL) so that the caller can run its own statements inside this
  // transaction. Owned by the Tx.
  void* native_handle() const;

  // Commits (or rolls back) the transaction, then wakes claims waiting on
  // the queues it sent to. After either, the Tx is closed.
  // For a joined transaction these issue COMMIT / ROLLBACK on the caller's
  // connection; the caller may instead end it on its own.
  Status Commit();
  Status Rollback();

 private:
  friend class Store;
  friend class WorkQueue;
  explicit Tx(std::unique_ptr<core::TxImpl> impl);
  std::unique_ptr<core::TxImpl> impl_;
};

class Store {
 public:
  // Opens the store named by `url`:
  //   sqlite:PATH                  (relative or absolute path)
  //   sqlite:PATH?synchronous=normal|full|extra
  //   postgresql://[user[:password]@][host][:port][/dbname][?param=...]
  //   postgres://...               (the same; passed to libpq unchanged,
  //                                 so TLS and other parameters work)
  // Errors: kInvalidArgument (malformed URL or unknown engine), kNotFound
  // (missing database and !create_if_missing; on PostgreSQL, a missing
  // database always: sqlq creates tables, not databases), kPermissionDenied
  // (also a wrong password), kCorruption (not a database), kUnavailable
  // (also an unreachable server).
  static Result<std::unique_ptr<Store>> Open(std::string_view url,
                                             const StoreOptions& options = {});

  // The URL used when none is given: "sqlite:sqlq.db".
  static constexpr std::string_view kDefaultUrl = "sqlite:sqlq.db";

  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;
  ~Store();

  // Creates a queue. Names are 1..64 characters of [A-Za-z0-9_-].
  // Errors: kInvalidArgument (name or options, or a dead-letter queue that
  // leads back to this name), kAlreadyExists.
  Result<WorkQueue> CreateQueue(std::string_view name,
                                const QueueOptions& options);
  // A handle on an existing queue. Errors: kInvalidArgument, kNotFound.
  Result<WorkQueue> Queue(std::string_view name);

  // Sends each message to its queue, all in one transaction: all stored,
  // or none. For a graph of jobs over several queues: a message's
  // depends_on_batch indexes count over all of `messages`
  // (docs/semantics.md, "Dependencies"). 1..1000 messages; each checked
  // against its queue's limits as WorkQueue::SendBatch checks them.
  Result<std::vector<SendResult>> SendAll(
      std::span<const QueuedMessage> messages);
  // Batches (sqlq/batch.h; docs/semantics.md, "Batches"). CreateBatch
  // sends the members and the callback in one transaction (all or
  // nothing), the callback waiting for every member. Errors: those of
  // SendAll, naming the member ("member 3") or "callback";
  // kInvalidArgument for a bad id, retention or callback; kAlreadyExists
  // for an id still known.
  Result<BatchSent> CreateBatch(const BatchSpec& spec);
  // The batch's counts and state. kNotFound for an id never sent, or whose
  // batch was done more than its retention ago, or whose callback's queue
  // was dropped.
  Result<BatchStatus> GetBatch(std::string_view id);
  // Cancels the members that have not ended yet (dead-lettered with the
  // error "cancelled: batch ID was cancelled", as WorkQueue::Cancel does,
  // a leased one's lease ended), in one transaction that counts them as
  // cancelled and so releases the callback. A batch already done is left
  // as it is. Returns the batch as it stands after. Errors as GetBatch's.
  Result<BatchStatus> CancelBatch(std::string_view id);
  Result<std::vector<QueueInfo>> ListQueues();
  // Commits a write transaction that changes nothing a user sees, to learn
  // whether the store can write now (a readiness probe): OK, or the error a
  // send would get (kUnavailable for a full disk, kPermissionDenied for a
  // read-only database, ...).
  Status CheckWritable();
  // Deletes the queue with its messages, dead letters and archive, and
  // clears it as the dead-letter queue of the queues that named it (in the
  // same transaction), so that a queue made later under its name receives
  // none of their dead letters.
  Status DropQueue(std::string_view name);

  // Rings (sqlq/ring.h) and rotations (sqlq/rotation.h). Names share one
  // namespace with queues: creating any kind under a taken name is
  // kAlreadyExists; getting a name of another kind is kFailedPrecondition.
  Result<Ring> CreateRing(std::string_view name, const RingOptions& options);
  Result<Ring> GetRing(std::string_view name);
  Status DropRing(std::string_view name);
  Result<Rotation> CreateRotation(std::string_view name,
                                  const RotationOptions& options);
  Result<Rotation> GetRotation(std::string_view name);
  Status DropRotation(std::string_view name);
  // Every ring, and every rotation, with its settings, by name.
  Result<std::vector<RingInfo>> ListRings();
  Result<std::vector<RotationInfo>> ListRotations();

  // Topics (sqlq/topic.h; docs/semantics.md, "Topics"). Names as queue
  // names, in the namespace of queues, rings and rotations: kAlreadyExists
  // for a name of any kind, kFailedPrecondition for a name of another kind.
  Status CreateTopic(std::string_view name);
  // Deletes the topic and its subscriptions (the queues stay).
  Status DropTopic(std::string_view name);
  // Every topic, by name.
  Result<std::vector<TopicInfo>> ListTopics();
  // Subscribes queue `queue` to the topic, or replaces the filter of its
  // subscription: whether the subscription is new. It takes the publishes
  // that commit after this call; a queue is subscribed at most once, and
  // its subscription goes when the queue is dropped.
  // Errors: kInvalidArgument (a name or the filter), kNotFound (topic,
  // queue), kFailedPrecondition (a name of another kind).
  Result<bool> Subscribe(std::string_view topic, std::string_view queue,
                         const Headers& filter = {});
  // kNotFound when the queue is not subscribed (or the topic is missing).
  Status Unsubscribe(std::string_view topic, std::string_view queue);
  // The topic's subscriptions, by queue name.
  Result<std::vector<Subscription>> ListSubscriptions(std::string_view topic);
  // Sends the message to every subscribed queue whose filter it matches,
  // in one transaction: stored in all of them or in none. The deliveries
  // are by queue name; none (an empty list, nothing stored) when no queue
  // subscribes or none matches. Each queue checks the message as its own
  // send would (kTooLarge beyond its max_payload_bytes). Errors as
  // WorkQueue::Send's, and kNotFound for a missing topic.
  Result<std::vector<Delivery>> Publish(std::string_view topic,
                                        const Message& message);
  // Publish for each message of the batch (1..10,000), in one transaction.
  Result<std::vector<Delivery>> PublishBatch(std::string_view topic,
                                             std::span<const Message> messages);
  // Publish inside the caller's transaction (BeginTx, JoinTx): stored when
  // it commits, and not at all if it rolls back.
  Result<std::vector<Delivery>> Publish(Tx& tx, std::string_view topic,
                                        const Message& message);

  // Schedules (sqlq/schedule.h; names as queue names, in their own
  // namespace). Create checks the cron, the zone, the queue and the
  // message. Errors: kInvalidArgument, kAlreadyExists, kNotFound (queue).
  Result<ScheduleInfo> CreateSchedule(std::string_view name,
                                      const ScheduleOptions& options);
  Result<ScheduleInfo> GetSchedule(std::string_view name);
  Result<std::vector<ScheduleInfo>> ListSchedules();
  // A paused schedule sends nothing; resumed, it goes on from its next
  // tick after now (the ticks while it was paused are not sent).
  Status PauseSchedule(std::string_view name);
  Status ResumeSchedule(std::string_view name);
  Status DropSchedule(std::string_view name);
  // One pass of the scheduler: takes (or renews) the scheduler lease of the
  // database unless another store holds it, and then sends every due tick
  // of every schedule, each tick exactly once (its send commits with the
  // schedule's move to its next tick). Safe to call from any number of
  // processes at once. The background scheduler (run_schedules) calls it.
  Result<ScheduleRun> RunSchedules();
  // Whether this store's last scheduler pass held the lease.
  bool HoldsSchedulerLease() const;
  // How long the scheduler lease lasts: a store that stops renewing it
  // (killed) is replaced once it runs out.
  static constexpr std::chrono::seconds kSchedulerLease{5};

  // The claims waiting for messages, by queue name, in every process that
  // uses this database and reports them (StoreOptions::report_waiting:
  // servers, the sqlq command, workers that opt in): each reports its own
  // every 5 s while any wait, and a report counts for 15 s (a process that
  // died stops counting then). Queues without any are left out.
  // docs/semantics.md, "Waiting".
  Result<std::map<std::string, std::int64_t>> WaitingConsumers();

  // Live workers (sqlq/workers.h). ReportWorker replaces the worker's last
  // report; RemoveWorker drops it (whether there was one); ListWorkers gives
  // the reports that have not run out, by id. kInvalidArgument for a report
  // or id beyond the limits.
  Status ReportWorker(const WorkerReport& report);
  Result<bool> RemoveWorker(std::string_view id);
  Result<std::vector<WorkerInfo>> ListWorkers();

  // Starts a write transaction on a connection of sqlq's own. On SQLite it
  // holds the database's write lock until it ends, so every other write
  // waits for it — including this store's ordinary (non-Tx) calls: a thread
  // that holds a Tx and makes one waits on itself until kBusy (60 s).
  // If an operation inside the Tx fails part-way (any error but the clean
  // ones: invalid argument, not found, stale receipt, exists, too large),
  // Commit rolls back and answers kFailedPrecondition.
  Result<Tx> BeginTx();
  // Wraps the caller's connection, on which the caller has begun a
  // transaction. For SQLite pass a sqlite3* opened on this store's file, for
  // PostgreSQL a PGconn* to this store's database; the connection stays the
  // caller's (sqlq never closes it). Destroy the Tx
  // before closing the connection: it holds prepared statements on it.
  // Errors: kInvalidArgument (null, another database, no open transaction).
  Result<Tx> JoinTx(void* native_connection);

  const std::string& url() const;

  // Where the claims of WorkQueue::ClaimThen run when one of them is to
  // lead its group's transaction (they merge with other callers' writes
  // into one commit, and someone must make it), and the work that follows
  // such a commit when it reads or writes the store: `run` must hand each
  // task to a thread that may block on the database (a thread pool), and
  // must not run it before returning. Set once, before the first
  // ClaimThen; without it ClaimThen claims on its caller's thread.
  void SetRunner(std::function<void(std::function<void()>)> run);

  // Diagnostics for tests and benchmarks: write transactions committed (or
  // failed) by this Store so far, and operations merged into them.
  std::size_t TEST_write_transactions() const;
  std::size_t TEST_write_operations() const;
  // Claims of this Store waiting right now, and the safety-net poll of a
  // waiting claim (default 1 s): a test sets it far beyond its deadlines to
  // prove a wake-up came from the engine's notification, not the poll.
  std::size_t TEST_waiting_claims() const;
  void TEST_set_poll_interval(std::chrono::milliseconds interval);
  // Waiting claims asleep right now, with no wake-up pending: each looks
  // again only when something wakes it or its time is up.
  std::size_t TEST_sleeping_claims() const;
  // Whether commits of other processes wake this Store's waiting claims
  // yet: PostgreSQL listens from a connection it opens in the background;
  // MariaDB polls only while a claim waits, and notices commits once the
  // first poll since that claim began (which has every waiting claim look
  // again) is done.
  bool TEST_watching_foreign_writes() const;

 private:
  explicit Store(std::unique_ptr<core::StoreImpl> impl);
  std::unique_ptr<core::StoreImpl> impl_;
};

}  // namespace sqlq

#endif  // SQLQ_STORE_H_
