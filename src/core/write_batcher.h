// WriteBatcher: merges concurrent write operations of one process into one
// transaction and one commit (group commit).
//
// Throughput of a durable queue is bounded by commits (one fsync each). When
// several threads write at once, the first becomes the leader: it takes every
// operation queued so far, runs them in one transaction, commits once and
// hands each caller its own status. Callers that arrived meanwhile wait; the
// leader takes them as its next group, or hands the lead to the first of
// them. With no contention the leader is the only caller and runs at once,
// so merging adds no latency.
// An operation that fails cleanly (engine.h, "Clean failures") wrote nothing
// and does not disturb the others; any other failure aborts the group and
// every member that had succeeded gets that error.
// The scheme follows LevelDB's writer queue; see docs/architecture.md.
//
// Sends (Send) go further: the small sends of one group to the same queue
// are stored with one engine Send (on PostgreSQL one INSERT ... SELECT FROM
// unnest) at the place of the first of them, in the order the callers
// arrived; each caller gets its own slice of the results.
//
// Claims (Claim) go as far: the claims of one group on the same queue with
// the same lease, worker and attempt limit are made with one engine Claim
// for all their messages, handed out in the callers' order of arrival; the
// receipts some of them ack first (ack and claim next) go to one engine
// AckMany before it. A caller whose ack is refused gets that error and no
// message. A group that is nothing but such claims goes to
// Engine::ClaimAndCommit first (acks, claim and commit in one round trip
// on PostgreSQL); one of such claims and sends to one queue, to
// Engine::SendsAndClaimAndCommit (the sends first, in the same round
// trip).
//
// Publishes (Publish) go as far as sends: the small publishes of one group
// to the same topic are one publish (one read of the subscribers, one
// store of every subscriber's messages) of their messages joined; each
// caller gets the deliveries of its own messages. When that joined publish
// fails cleanly (a subscriber's limit refused one caller's message), each
// runs alone, so that only that caller gets the error.
//
// Engines whose writers do not exclude each other (PostgreSQL) allow several
// groups at once (Engine::write_groups()): up to that many leaders run
// their groups side by side, each in its own transaction on its own
// connection, so that callers do not queue behind one commit's round trips
// while the server could run several; the server merges their WAL flushes.
// A small caller starts a group beside those running only when waiting
// could share nothing: at most two callers come at once (the other is
// already in a transaction), or it is a claim and at most two claims come
// at once (a claim joins only claims, and its transaction is several round
// trips); otherwise it waits to join one.
//
// A waiting caller is woken once, when its answer is ready (or when it is
// to lead), through its own thread's mutex and condition variable (Signal):
// on a small machine with many callers, wake-ups and a contended lock cost
// more than the commit they wait for.
//
// A group of nothing but acks commits without waiting for the disk where
// the store's URL says ack_flush=off (Engine::acks_unflushed); any group
// with a send, a claim or anything else in it waits, as every group does
// otherwise.
//
// Thread-safe.

#ifndef SQLQ_CORE_WRITE_BATCHER_H_
#define SQLQ_CORE_WRITE_BATCHER_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include "core/engine.h"

namespace sqlq::core {

class WriteBatcher {
 public:
  // At most `max_group` operations share one transaction, which bounds how
  // long a transaction holds the engine's write lock. At most `max_leaders`
  // groups run at once (>= 1; 1 serialises all transactions, as SQLite's
  // single writer needs anyway).
  explicit WriteBatcher(Engine& engine, std::size_t max_group = 512,
                        int max_leaders = 1);

  // Runs `op` inside a write transaction, possibly shared with other
  // callers', and returns once that transaction committed or failed.
  // Returns op's own error, or the commit's error when op succeeded but the
  // commit failed (then nothing op wrote is stored).
  Status Run(const std::function<Status(Conn&)>& op);

  // Who wakes the claims of the queues a claim's acks released waiting
  // messages in (core/dependencies.h), after the commit. Set once, before
  // use.
  void set_on_released(
      std::function<void(const std::vector<std::int64_t>&)> fn) {
    on_released_ = std::move(fn);
  }

  // Stores `messages` in queue `queue_id` (Engine::Send), possibly in one
  // engine call with the messages of other sends of the same group to that
  // queue. Returns once they are committed, with one result per message in
  // order, or the error that kept them from being stored. Sends of more
  // than kMaxMessages messages or kMaxBytes payload bytes run alone, so
  // that large batches are never copied; a combined call carries at most
  // kMaxCombined messages. A group that is nothing but sends to one queue
  // is stored with Engine::SendAndCommit.
  // `p` names the queue, its messages and the queue's rules (SendParams);
  // only sends with the same rules share a call.
  Result<std::vector<SendResult>> Send(const SendParams& p);

  // What a publish stored: a delivery and the id of its queue.
  using Published = core::Published;
  // Runs a publish of `messages` to `topic` inside a transaction (the
  // store's core::PublishIn); Delivery::message counts over `messages`.
  using PublishFn = std::function<Result<std::vector<Published>>(
      Conn&, std::string_view topic, std::span<const Message> messages)>;
  // Who publishes (set once, before use).
  void set_publish(PublishFn fn) { publish_ = std::move(fn); }
  // Publishes `messages` to `topic` (the PublishFn), possibly as one
  // publish with other publishes of the same group to that topic, and
  // returns once committed, with the deliveries of these messages (their
  // Delivery::message counting over `messages`).
  Result<std::vector<Published>> Publish(std::string_view topic,
                                         std::span<const Message> messages);

  // A claim, possibly acking one receipt first in the same transaction.
  // A claim of no message (params.max 0) is acks alone: they share a
  // statement with other callers' acks where the engine can.
  struct ClaimRequest {
    ClaimParams params;
    // Acked first; when refused, nothing is claimed (ack and claim next).
    std::optional<Receipt> ack;
    // Acked first too, each on its own: a refusal is reported in
    // Claimed::done and the claim goes on (a Worker's finished messages).
    std::span<const Receipt> done;
    bool archive = false;  // the queue's option, for the acks
  };
  // Runs `request` (Engine::Claim, after Engine::AckMany of the ack when
  // there is one), possibly in one engine call with the other claims of
  // the same group on the same queue with the same lease, worker and
  // attempt limit, and returns once committed. The messages are this
  // caller's, leased under the token of the returned outcome's first
  // message's claim: `token` (which may be another caller's). Claims of
  // more than one message with a byte limit run alone.
  struct Claimed {
    ClaimOutcome outcome;
    std::uint64_t token = 0;
    std::vector<Status> done;  // one per ClaimRequest::done, in order
  };
  Result<Claimed> Claim(const ClaimRequest& request);

  // Claim without a thread waiting for the commit: queues `request` as
  // Claim does and returns; `then` gets what Claim would have returned,
  // once the group committed, on the thread that ran it (a leader, with
  // more groups to run: `then` must be short and must not call into the
  // batcher; longer work goes to the runner). A ClaimThen caller that is
  // to lead its group (nobody leads) leads it on its own thread, as Claim
  // would, before returning; it is never handed the lead later, since no
  // thread of its waits: a leader that has run its groups with only such
  // callers queued gives the lead up and asks the runner for a thread to
  // take it (Kick), which a caller that comes meanwhile may take first.
  // With no runner set, ClaimThen is Claim followed by `then`.
  // `request.done` is copied.
  using ClaimDone = std::function<void(Result<Claimed>)>;
  void ClaimThen(ClaimRequest request, ClaimDone then);
  // Where ClaimThen's groups run, and the work its callers hand on: a pool
  // of threads that may block on the database (the server's). Set once,
  // before use.
  using Runner = std::function<void(std::function<void()>)>;
  void set_runner(Runner fn) { runner_ = std::move(fn); }
  const Runner& runner() const { return runner_; }

  static constexpr std::size_t kMaxMessages = 100;
  static constexpr std::size_t kMaxBytes = 64 << 10;
  static constexpr std::size_t kMaxCombined = 10000;
  // Most messages one combined claim asks for (the most one claim may).
  static constexpr int kMaxCombinedClaim = 1000;
  // A group beside those running starts only with this much to do
  // (Writer::weight; a single-message send weighs 1), or for a caller that
  // could share nothing by waiting (Enter).
  static constexpr std::size_t kMinGroupWeight = 32;

  // Number of transactions committed and operations run; for benchmarks.
  std::size_t TEST_transactions() const;
  std::size_t TEST_operations() const;
  // Most leaders seen running at once.
  int TEST_peak_leaders() const;
  // Callers waiting to be taken into a group now.
  std::size_t TEST_queued() const;

 private:
  enum class State { kQueued, kLead, kDone };
  // How a waiting caller is told its state. Each thread has one, reused by
  // its calls (a thread waits in one call at a time). The waker holds a
  // reference while it notifies, outside the mutex, so that the woken
  // thread does not block on a mutex its waker still holds, and may return
  // (or even end) at once.
  struct Signal {
    std::mutex m;
    std::condition_variable cv;
    State state = State::kQueued;  // guarded by m
  };
  static std::shared_ptr<Signal> ThreadSignal();

  struct Pending;  // a ClaimThen caller's (write_batcher.cc)

  struct Writer {
    // Either op, or a claim, or a publish (topic, messages, published), or
    // a send (queue_id, messages, results).
    const std::function<Status(Conn&)>* op = nullptr;
    const ClaimRequest* claim = nullptr;
    bool publish = false;
    std::string_view topic;
    std::vector<Published> published;
    Claimed claimed;
    std::int64_t queue_id = 0;
    std::span<const Message> messages;
    SendParams rules;  // a send's: unique_for and grouped (messages unused)
    bool combinable = false;
    // How much this caller brings to a group: a send's message count; any
    // other operation is worth a group of its own.
    std::size_t weight = kMinGroupWeight;
    std::vector<SendResult> results;
    Status status;

    std::shared_ptr<Signal> signal;  // the caller's thread's
    // A ClaimThen caller's, instead of a signal: no thread waits for it.
    Pending* pending = nullptr;
  };

  // Counts a caller in (callers_, claimers_): how many, with it, and how
  // many claims; Depart counts it out.
  struct Counts {
    int callers;
    int claims;
  };
  Counts Arrive(bool claim);
  void Depart(bool claim);
  // Queues `self` (or leads at once) and returns its status.
  Status Enter(Writer& self);
  // Under mu_: true when `self` is to lead now (counted among the
  // leaders); else queues it, to be woken (Wake) when its answer is ready
  // or it is to lead.
  bool Admit(Writer& self, Counts counts);
  // A ClaimThen caller's answer is ready: hands it over, and ends it.
  void Finish(Pending* p);
  // Runs groups, the first with `self` in it (none: only the queued), then
  // hands the lead on.
  void Lead(Writer* self);
  // On the runner: leads the ClaimThen callers a leader left queued, unless
  // someone leads already (or led them meanwhile).
  void Kick();
  // Takes the first queued caller that a thread waits for (not a
  // ClaimThen caller's) off the queue and tells it to lead; false when
  // there is none. mu_ held.
  bool Appoint();
  // Runs `group`, which may grow by sends that join late (JoinLate).
  void RunGroup(std::vector<Writer*>& group);
  // Moves the queued sends that may join `group`, a group of sends to one
  // queue, into it.
  void JoinLate(std::vector<Writer*>& group);
  // True when `w` is a send that may share a call with `lead`'s.
  static bool Joins(const Writer* w, const Writer& lead);
  // True when the group is sends to one queue that may share a call.
  static bool OneQueueSends(const std::vector<Writer*>& group);
  // group[first] and, when it is combinable, the later members of the
  // group not yet `done` that `joins` accepts, up to kMaxCombined messages
  // in all; marks them done. The callers of one send or publish.
  static std::vector<Writer*> Gather(
      const std::vector<Writer*>& group, std::size_t first,
      std::vector<char>& done, const std::function<bool(const Writer*)>& joins);
  // True when the group is small publishes to one topic (one publish).
  static bool OneTopicPublishes(const std::vector<Writer*>& group);
  // Hands each member the deliveries of its own messages (their
  // Delivery::message counted from its first), from those of the members'
  // messages joined in order.
  static void SlicePublished(const std::vector<Writer*>& members,
                             std::vector<Published> all);
  // Runs group[first]'s send together with the later sends of the group
  // to the same queue; marks them in `sent`.
  Status RunSends(Conn& conn, const std::vector<Writer*>& group,
                  std::size_t first, std::vector<char>& sent);
  // Runs group[first]'s claim together with the later claims of the group
  // it combines with; marks them in `done`.
  // The queues whose waiting messages its acks released go to `released`
  // (core/dependencies.h).
  Status RunClaims(Conn& conn, const std::vector<Writer*>& group,
                   std::size_t first, std::vector<char>& done,
                   std::vector<std::int64_t>& released);
  // group[first] and the later claims of the group it combines with (up
  // to kMaxCombinedClaim messages, `total`), marked in `done`, their
  // statuses and outcomes reset.
  static std::vector<Writer*> ClaimMembers(const std::vector<Writer*>& group,
                                           std::size_t first,
                                           std::vector<char>& done, int& total);
  // The receipts the members ack before their claim, in order: each one's
  // `ack`, then its `done`. `gates` (when not null) gets, for each, how
  // many messages its acceptance lets its member claim (0 for `done`).
  static std::vector<Receipt> ClaimReceipts(const std::vector<Writer*>& members,
                                            std::vector<int>* gates);
  // The acks of `receipts` under the rules of `lead`'s queue.
  static AckManyParams AcksOf(const ClaimRequest& lead,
                              std::span<const Receipt> receipts);
  // Gives each member its receipts' outcomes (`acked`, in ClaimReceipts's
  // order): a refused `ack` becomes the member's status. Returns how many
  // messages the members with a refused `ack` no longer claim.
  static int TakeAcks(const std::vector<Writer*>& members,
                      std::vector<Status> acked);
  // Hands the messages of claim `r` (made with `params`) out to the
  // members still ok, in claim order, each up to its max.
  static void HandOut(const std::vector<Writer*>& members,
                      const ClaimParams& params, ClaimOutcome& r);
  // A group of claims that combine, run by Engine::ClaimAndCommit, or of
  // such claims and sends to one queue that share a call, run by
  // Engine::SendsAndClaimAndCommit (fewer round trips): false when the
  // group is anything else or the engine cannot, with nothing done.
  bool ClaimAndCommit(std::vector<Writer*>& group);
  // Runs `group` in one transaction, each operation its own engine call
  // (sends to one queue and claims that combine still joined).
  void RunGeneral(const std::vector<Writer*>& group);
  // True when `group` is nothing but acks (claims of no message) and the
  // engine lets such a transaction commit without waiting for the disk
  // (Engine::acks_unflushed).
  bool Unflushed(const std::vector<Writer*>& group) const;
  static bool ClaimsCombine(const ClaimRequest& a, const ClaimRequest& b);
  // Runs group[first]'s publish together with the later publishes of the
  // group to the same topic; marks them in `done`.
  Status RunPublishes(Conn& conn, const std::vector<Writer*>& group,
                      std::size_t first, std::vector<char>& done);
  void Wake(Writer& w, State state);

  Engine& engine_;
  // Called after a commit with the queues whose waiting messages the
  // group's claim acks released (set once, before use).
  std::function<void(const std::vector<std::int64_t>&)> on_released_;
  PublishFn publish_;
  Runner runner_;
  const std::size_t max_group_;
  const int max_leaders_;
  mutable std::mutex mu_;
  // Callers not yet taken into a group; guarded by mu_. Not empty only
  // while a leader runs (which takes it next, or hands it the lead).
  std::deque<Writer*> queue_;
  std::size_t queued_weight_ = 0;  // guarded by mu_; of those in queue_
  int leaders_ = 0;                // guarded by mu_; leaders running groups now
  // Callers in Enter now, and claims among them (Enter).
  std::atomic<int> callers_{0};
  std::atomic<int> claimers_{0};
  // The most callers and claims seen in Enter at once, in this window of
  // entries and the one before; guarded by mu_.
  struct Seen {
    int callers = 0;
    int claims = 0;
  };
  Seen seen_;
  Seen seen_before_;
  std::size_t entries_ = 0;  // guarded by mu_
  int peak_leaders_ = 0;
  // Estimate of callers writing concurrently; guarded by mu_.
  std::size_t expected_ = 1;
  bool delaying_ = false;             // guarded by mu_: a leader waits
  std::size_t delay_until_ = 0;       // guarded by mu_: for this many queued
  std::condition_variable arrivals_;  // a caller queued while delaying_
  static constexpr std::chrono::microseconds kCommitDelay{150};
  std::size_t transactions_ = 0;
  std::size_t operations_ = 0;
};

}  // namespace sqlq::core

#endif  // SQLQ_CORE_WRITE_BATCHER_H_
