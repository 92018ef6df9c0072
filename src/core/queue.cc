// WorkQueue: validation, decisions (backoff, dead-lettering, lease tokens),
// batching and waiting; the engine persists. Semantics: docs/semantics.md.

#include "sqlq/queue.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/backoff.h"
#include "core/columns.h"
#include "core/dependencies.h"
#include "core/next_look.h"
#include "core/receipt.h"
#include "core/rows.h"
#include "core/store_impl.h"
#include "core/validate.h"
#include "sqlq/store.h"

namespace sqlq {

using core::Conn;
using core::Micros;

WorkQueue::WorkQueue(std::shared_ptr<core::QueueImpl> impl)
    : impl_(std::move(impl)) {}
WorkQueue::~WorkQueue() = default;

const std::string& WorkQueue::name() const { return impl_->name(); }
QueueOptions WorkQueue::options() const { return impl_->Current()->options; }
QueueInfo WorkQueue::info() const { return *impl_->Current(); }

namespace core {

std::shared_ptr<const QueueInfo> QueueImpl::Current() {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (now - read_at_ < kRefresh) return info_;
    // One caller reads; the others go on with the copy meanwhile.
    read_at_ = now;
  }
  auto fresh = SnapshotRead<QueueRecord>(*store_, [&](QueueOps& e, Conn& conn) {
    return e.GetQueue(conn, name_);
  });
  std::lock_guard<std::mutex> lock(mu_);
  if (fresh.ok() && fresh->id == id_) {
    info_ = std::make_shared<const QueueInfo>(std::move(fresh->info));
  }
  return info_;
}

void QueueImpl::Set(QueueInfo info) {
  std::lock_guard<std::mutex> lock(mu_);
  info_ = std::make_shared<const QueueInfo>(std::move(info));
  read_at_ = std::chrono::steady_clock::now();
}

}  // namespace core

namespace {

std::int64_t CountStored(const std::vector<SendResult>& results) {
  return std::count_if(results.begin(), results.end(),
                       [](const SendResult& r) { return !r.duplicate; });
}

std::string CutError(std::string_view error) {
  return std::string(error.substr(0, core::kMaxErrorText));
}

// The same as AfterAcks for dead letters of queues with a dead-letter
// retention, from a nack or a claim.
void MaybePruneDead(WorkQueue& q, core::QueueImpl& impl) {
  if (impl.Current()->options.dead_retention.count() != 0 &&
      impl.DeadPruneDue()) {
    (void)q.PruneDead();
  }
}

}  // namespace

namespace core {

void ForwardDeadLetters(StoreImpl& store, std::int64_t queue_id,
                        std::string_view name) {
  std::int64_t to_id = 0;
  auto moved = MergedWrite<std::int64_t>(
      store, [&](Engine& e, Conn& c) -> Result<std::int64_t> {
        // The link as stored now, not as a handle last read it: a drop
        // of the dead-letter queue elsewhere clears it (Store::DropQueue),
        // and a queue made again under that name must not receive them.
        auto self = e.GetQueue(c, name);
        if (!self.ok() || self->id != queue_id) return std::int64_t{0};
        const std::string& to = self->info.options.dead_letter_queue;
        if (to.empty()) return std::int64_t{0};
        auto target = e.GetQueue(c, to);
        // Not there (yet): they wait in this queue's dead letters.
        if (!target.ok()) return std::int64_t{0};
        to_id = target->id;
        // Messages that wait for them (IfDependencyDies::kWait) wait for
        // them there: acked in the dead-letter queue, they release them.
        // The flag is set in this transaction, which is enough here: no
        // ack of them in `to` can begin before it commits.
        auto parents = e.MoveParents(c, queue_id, to_id);
        if (!parents.ok()) return parents.status();
        if (*parents > 0) {
          Status s = e.FlagDependents(c, {}, std::span(&to_id, 1));
          if (!s.ok()) return s;
        }
        return e.Redrive(c, {.queue_id = queue_id, .to_queue_id = to_id});
      });
  if (moved.ok() && *moved > 0) store.hub().Notify(to_id, *moved);
}

void ForwardDead(QueueImpl& impl) {
  // A job ended: waits for its result look again (WorkQueue::ReadResult).
  impl.store().results().Ring();
  // What waited for them follows its policy, while they are dead letters
  // of this queue still.
  SettleEnded(impl.store(), impl.id());
  if (impl.Current()->options.dead_letter_queue.empty()) return;
  ForwardDeadLetters(impl.store(), impl.id(), impl.name());
}

Status CheckDeadLetterLoop(QueueOps& e, Conn& c, std::string_view name,
                           const QueueOptions& o) {
  // Names seen on the walk: a loop stored before this check existed, which
  // does not pass through `name`, ends it too.
  std::set<std::string, std::less<>> seen;
  std::string at = o.dead_letter_queue;
  while (!at.empty()) {
    if (at == name) {
      return Status::InvalidArgument(fmt::format(
          "queue '{}' cannot take the dead letters of '{}': its own dead "
          "letters lead back to '{}' (dead-letter queues cannot form a loop)",
          o.dead_letter_queue, name, name));
    }
    if (!seen.insert(at).second) return Status::Ok();
    auto next = e.GetQueue(c, at);
    if (!next.ok()) {
      const Code code = next.status().code();
      // Missing, or a name of another kind: its dead letters go nowhere.
      if (code == Code::kNotFound || code == Code::kFailedPrecondition) {
        return Status::Ok();
      }
      return next.status();
    }
    at = next->info.options.dead_letter_queue;
  }
  return Status::Ok();
}

bool AfterAcksTouchesStore(const QueueOptions& o) {
  return o.archive || o.unique_for.count() != 0;
}

void AfterAcks(WorkQueue& q, QueueImpl& impl) {
  const auto current = impl.Current();
  const QueueOptions& o = current->options;
  // An ack may let a message through that waits for its group or for a
  // limit: waiting claims look again.
  if (o.groups == GroupMode::kOrdered || o.group_limit || o.max_leased) {
    impl.store().hub().Notify(impl.id(), std::int64_t{1} << 30);
    impl.store().engine().WakeOthers();
  }
  if (o.archive && impl.PruneDue()) (void)q.PruneArchive();
  if (o.unique_for.count() != 0 && impl.HoldPruneDue()) {
    (void)MergedWrite<std::int64_t>(impl.store(), [&](MessageOps& e, Conn& c) {
      return e.PruneHolds(c, impl.id());
    });
  }
}

}  // namespace core

Result<SendResult> WorkQueue::Send(const Message& message) {
  auto r = SendBatch(std::span<const Message>(&message, 1));
  if (!r.ok()) return r.status();
  return (*r)[0];
}

Result<std::vector<SendResult>> WorkQueue::SendBatch(
    std::span<const Message> messages) {
  const auto current = impl_->Current();
  const QueueOptions& qo = current->options;
  Status s =
      core::ValidateBatch(messages, qo.max_payload_bytes, impl_->store().Now());
  if (!s.ok()) return s;
  if (core::HasDependencies(messages)) {
    return core::SendWithDependencies(*impl_, messages);
  }
  auto r =
      impl_->store().batcher().Send({.queue_id = impl_->id(),
                                     .messages = messages,
                                     .unique_for = core::Micros(qo.unique_for),
                                     .grouped = qo.groups != GroupMode::kNone});
  if (r.ok()) impl_->store().hub().Notify(impl_->id(), CountStored(*r));
  return r;
}

namespace core {

namespace {

// The claim `params` (WriteBatcher::Claim) after the acks of `acks`, in
// the queue's rules `qo`; the statuses of acks.done go to
// acks.done_status.
Result<WriteBatcher::Claimed> ClaimAfter(QueueImpl& impl, ClaimParams params,
                                         const ClaimAcks& acks,
                                         const QueueOptions& qo) {
  const WriteBatcher::ClaimRequest request{.params = std::move(params),
                                           .ack = acks.ack,
                                           .done = acks.done,
                                           .archive = qo.archive};
  auto r = impl.store().batcher().Claim(request);
  if (!r.ok()) return r.status();
  if (acks.done_status != nullptr) *acks.done_status = std::move(r->done);
  return r;
}

// The acks of `acks` without a claim: a claim of no message, so that they
// share a statement with other callers' acks where the engine can
// (WriteBatcher::Claim, Engine::ClaimAndCommit). A refused `ack` is the
// result; `done` each have their own status.
Status AckOnly(QueueImpl& impl, const ClaimAcks& acks, const QueueOptions& qo) {
  if (!acks.ack && acks.done.empty()) return Status::Ok();
  auto r = ClaimAfter(
      impl,
      {.queue_id = impl.id(), .max = 0, .unique_for = Micros(qo.unique_for)},
      acks, qo);
  return r.ok() ? Status::Ok() : r.status();
}

// Only the acks of a claim, for a paused queue.
Result<std::vector<ClaimedMessage>> AcksOnly(QueueImpl& impl,
                                             const ClaimAcks& acks,
                                             const QueueOptions& qo) {
  Status s = AckOnly(impl, acks, qo);
  if (!s.ok()) return s;
  return std::vector<ClaimedMessage>();
}

// Until the queue's next message becomes ready, by the database's clock:
// <= 0 when one is ready now, nullopt when none is pending.
Result<std::optional<Micros>> ReadyIn(QueueImpl& impl) {
  return SnapshotRead<std::optional<Micros>>(
      impl.store(),
      [&](Engine& e, Conn& conn) -> Result<std::optional<Micros>> {
        auto at = e.NextReadyAt(conn, impl.id());
        if (!at.ok()) return at.status();
        // Only waiting messages (kWaitingUs): none pending by time.
        if (!at->has_value() || Us(**at) >= kWaitingUs) {
          return std::optional<Micros>();
        }
        auto db_now = e.Now(conn);
        if (!db_now.ok()) return db_now.status();
        return std::optional<Micros>(**at - *db_now);
      });
}

// True when a message of `messages` has limits of its own (ApplyJobLimits).
bool AnyJobLimits(const std::vector<ClaimedMessage>& messages) {
  return std::any_of(messages.begin(), messages.end(),
                     [](const ClaimedMessage& m) {
                       return m.timeout || m.expire_after || m.max_attempts;
                     });
}

// The limits of the jobs a claim leased (Message::timeout, expire_after):
// one that had to start before this claim is dead-lettered instead of
// handed out, or deleted as an ack would (its dedup key held, never
// archived) when its on_expiry is kDrop, and counted as expired either
// way; one whose timeout is shorter than `lease` gets a lease of its
// timeout, so that a worker that is gone or frozen loses it then. Each is a
// write of its own, made only for such jobs. One that fails (a receipt
// gone stale meanwhile) leaves its message leased: it comes back when that
// lease runs out, and the claim then looks again.
void ApplyJobLimits(QueueImpl& impl, std::vector<ClaimedMessage>& messages,
                    Micros lease, const QueueOptions& qo) {
  if (!AnyJobLimits(messages)) return;
  std::vector<ClaimedMessage> kept;
  kept.reserve(messages.size());
  bool buried = false;
  for (ClaimedMessage& m : messages) {
    auto parsed = ParseReceipt(m.receipt);
    if (!parsed.ok()) continue;
    const Timestamp claimed_at = m.lease_expires_at - lease;
    // Its first attempt (a retried one has started; a snoozed one gave its
    // attempt back, and has not).
    // Past its own max_attempts (a lease that ran out on its last attempt:
    // the queue's, which the claim keeps, can be higher).
    const bool used_up = m.max_attempts && m.attempt > *m.max_attempts;
    const bool expired = m.expire_after && m.attempt == 1 &&
                         claimed_at > m.enqueued_at + *m.expire_after;
    // (Never both: used_up needs a second attempt, expired the first.)
    if (expired && m.on_expiry == ExpiryAction::kDrop) {
      Status s = impl.store().batcher().Run([&](Conn& conn) {
        return impl.store().engine().Ack(conn,
                                         {.queue_id = impl.id(),
                                          .receipt = *parsed,
                                          .unique_for = Micros(qo.unique_for),
                                          .expired = true});
      });
      // A job ended: waits for its result look again (and find it gone).
      if (s.ok()) impl.store().results().Ring(impl.id(), parsed->id);
      continue;
    }
    if (used_up || expired) {
      const std::string why =
          used_up ? fmt::format("attempts used up: {} of {}", m.attempt - 1,
                                *m.max_attempts)
                  : fmt::format("expired: not started within {} ms",
                                m.expire_after->count());
      const std::string logged = CleanErrorText(why);
      Status s = impl.store().batcher().Run([&](Conn& conn) {
        return impl.store().engine().Bury(conn,
                                          {.queue_id = impl.id(),
                                           .receipt = *parsed,
                                           .error = why,
                                           .history_error = logged,
                                           .unique_for = Micros(qo.unique_for),
                                           .expired = expired});
      });
      buried = buried || s.ok();
      continue;
    }
    if (m.timeout && *m.timeout < lease) {
      auto until =
          MergedWrite<Timestamp>(impl.store(), [&](MessageOps& e, Conn& conn) {
            return e.Extend(conn, {impl.id(), *parsed, Micros(*m.timeout)});
          });
      if (until.ok()) m.lease_expires_at = *until;
    }
    kept.push_back(std::move(m));
  }
  messages = std::move(kept);
  if (buried) ForwardDead(impl);
}

// The claim of `options` on the queue, under its rules `qo`.
ClaimParams ClaimParamsOf(QueueImpl& impl, const ClaimOptions& options,
                          const QueueOptions& qo) {
  return {.queue_id = impl.id(),
          .max = options.max,
          .lease = options.lease.value_or(qo.lease),
          .token = NewLeaseToken(),
          .max_attempts = qo.max_attempts,
          .worker = options.worker,
          .max_bytes = options.max_bytes,
          .unique_for = Micros(qo.unique_for),
          .groups = qo.groups,
          .after_group =
              qo.groups == GroupMode::kNone ? std::nullopt : impl.GroupCursor(),
          .group_limit = qo.group_limit.value_or(0),
          .max_leased = LimitColumn(qo.max_leased),
          .rate_u = RateColumn(qo.rate_limit),
          .rate_burst = LimitColumn(qo.rate_burst)};
}

// True when FinishClaim of `r`, claimed under rules `qo`, reads or writes
// the store: dead letters to forward, jobs with limits of their own, or
// an empty claim of a queue whose groups can hold messages back.
bool FinishTouchesStore(const QueueOptions& qo, const ClaimOutcome& r) {
  return r.dead_lettered > 0 || AnyJobLimits(r.messages) ||
         (r.messages.empty() && r.limited_by.empty() && BlockedByGroups(qo));
}

// What a claim hands out once `r` (made with `params`) committed: the
// messages with their receipts, the note of what held it back.
Result<std::vector<ClaimedMessage>> FinishClaim(QueueImpl& impl,
                                                const ClaimParams& params,
                                                WriteBatcher::Claimed& r,
                                                const QueueOptions& qo,
                                                ClaimNote& note) {
  if (r.outcome.dead_lettered > 0) ForwardDead(impl);
  if (r.outcome.last_group) impl.SetGroupCursor(*r.outcome.last_group);
  if (!r.outcome.limited_by.empty()) {
    note.limited_by = r.outcome.limited_by;
    note.retry_after = std::chrono::ceil<Duration>(r.outcome.retry_after);
  }
  for (ClaimedMessage& m : r.outcome.messages) {
    m.receipt =
        FormatReceipt({.id = m.id, .attempt = m.attempt, .token = r.token});
  }
  ApplyJobLimits(impl, r.outcome.messages, params.lease, qo);
  // Nothing came from a queue whose groups can hold ready messages back:
  // say so when one is ready (a read, on this empty path only). The note
  // only informs: a failed read leaves it unset and the claim stands.
  if (r.outcome.messages.empty() && note.limited_by.empty() &&
      BlockedByGroups(qo)) {
    auto ready_in = ReadyIn(impl);
    note.groups_busy = ready_in.ok() && ready_in->has_value() &&
                       **ready_in <= std::chrono::microseconds(0);
  }
  return std::move(r.outcome.messages);
}

// Claims as `options` say in one merged write transaction (with the
// claims of other callers on this queue: WriteBatcher::Claim), after the
// acks of `acks` in the same transaction.
Result<std::vector<ClaimedMessage>> ClaimOnce(QueueImpl& impl,
                                              const ClaimOptions& options,
                                              const ClaimAcks& acks,
                                              ClaimNote& note) {
  note = {};
  const std::shared_ptr<const QueueInfo> info = impl.Current();
  const QueueOptions& qo = info->options;
  // Paused: nothing is claimed; the acks it carries are done all the same.
  if (info->paused) {
    note.paused = true;
    return AcksOnly(impl, acks, qo);
  }
  const ClaimParams params = ClaimParamsOf(impl, options, qo);
  auto r = ClaimAfter(impl, params, acks, qo);
  if (!r.ok()) return r.status();
  return FinishClaim(impl, params, *r, qo, note);
}

}  // namespace

Result<SteadyTime> NextLookAt(QueueImpl& impl, const ClaimNote* claim) {
  const std::shared_ptr<const QueueInfo> info = impl.Current();
  LookReport report{.claim = claim,
                    .blocked_by_groups = BlockedByGroups(info->options),
                    .paused = info->paused};
  // Held back by a limit or a pause, a claim waits for the limit or for
  // Resume, not for a ready time: nothing to read. Busy groups were read
  // by the claim itself: a message is ready now.
  if (claim != nullptr && claim->groups_busy && !info->paused) {
    report.ready_in = Micros(0);
  } else if (claim == nullptr || (claim->limited_by.empty() && !info->paused)) {
    auto ready_in = ReadyIn(impl);
    if (!ready_in.ok()) return ready_in.status();
    report.ready_in = *ready_in;
  }
  // The look is dated after the read, so that a ready time the read
  // measured from the database's clock is not reached early.
  return NextLook(std::chrono::steady_clock::now(),
                  impl.store().poll_interval(), report);
}

void ClaimOnceThen(const WorkQueue& q, std::shared_ptr<QueueImpl> impl,
                   const ClaimOptions& options, std::optional<Receipt> ack,
                   WorkQueue::ClaimedThen then) {
  const std::shared_ptr<const QueueInfo> info = impl->Current();
  const WriteBatcher::Runner& runner = impl->store().batcher().runner();
  // What runs after the commit: the acks' follow-up when there were acks,
  // then `then`.
  auto after = [queue = WorkQueue(q), impl, acked = ack.has_value()](
                   Result<std::vector<ClaimedMessage>> r, ClaimNote note,
                   const WorkQueue::ClaimedThen& done) mutable {
    // The ack committed unless the claim failed.
    if (acked && r.ok()) AfterAcks(queue, *impl);
    done(std::move(r), std::move(note));
  };
  if (info->paused || !runner) {
    // A paused queue's acks alone, or no runner: the claim as a thread
    // waiting for it makes it, on the runner when there is one.
    auto run = [impl, options, ack, after, then = std::move(then)]() mutable {
      ClaimNote note;
      auto r = ClaimOnce(*impl, options, {.ack = ack}, note);
      after(std::move(r), std::move(note), then);
    };
    if (runner) {
      runner(std::move(run));
    } else {
      run();
    }
    return;
  }
  const QueueOptions& qo = info->options;
  ClaimParams params = ClaimParamsOf(*impl, options, qo);
  WriteBatcher::ClaimRequest request{
      .params = params, .ack = ack, .archive = qo.archive};
  const bool follow_up = ack.has_value() && AfterAcksTouchesStore(qo);
  impl->store().batcher().ClaimThen(
      std::move(request),
      [impl, info, params = std::move(params), follow_up, after,
       then = std::move(then)](Result<WriteBatcher::Claimed> r) mutable {
        if (!r.ok()) return after(r.status(), ClaimNote(), then);
        // On the committing thread only when nothing more reads or writes
        // the store; else on the runner, so that the leader's next group
        // does not wait for it (and it does not wait for that group).
        const bool elsewhere =
            follow_up || FinishTouchesStore(info->options, r->outcome);
        auto finish = [impl, info, params = std::move(params),
                       after = std::move(after), then = std::move(then),
                       claimed = std::move(*r)]() mutable {
          ClaimNote note;
          auto messages =
              FinishClaim(*impl, params, claimed, info->options, note);
          after(std::move(messages), std::move(note), then);
        };
        if (elsewhere) {
          impl->store().batcher().runner()(std::move(finish));
        } else {
          finish();
        }
      });
}

Result<std::vector<ClaimedMessage>> ClaimWaiting(QueueImpl& impl,
                                                 const ClaimOptions& options,
                                                 const ClaimAcks& first,
                                                 ClaimNote* note_out) {
  ClaimNote local;
  ClaimNote& note = note_out != nullptr ? *note_out : local;
  if (options.wait.count() == 0) return ClaimOnce(impl, options, first, note);
  using SteadyClock = std::chrono::steady_clock;
  const auto deadline = SteadyClock::now() + options.wait;
  WakeHub& hub = impl.store().hub();
  WakeHub::Waiter waiter;
  // Registered before the first look, so no send can slip between a look
  // that found nothing and the sleep after it.
  hub.Register(waiter, impl.id());
  Result<std::vector<ClaimedMessage>> result =
      ClaimOnce(impl, options, first, note);
  while (result.ok() && result->empty()) {
    if (SteadyClock::now() >= deadline) break;
    auto next = NextLookAt(impl, &note);
    if (!next.ok()) {
      result = next.status();
      break;
    }
    hub.Wait(waiter, std::min(deadline, *next));
    result = ClaimOnce(impl, options, {}, note);
  }
  hub.Unregister(waiter);
  return result;
}

}  // namespace core

Result<std::vector<ClaimedMessage>> WorkQueue::Claim(
    const ClaimOptions& options, ClaimNote* note) {
  Status s = core::ValidateClaim(options);
  if (!s.ok()) return s;
  return core::ClaimWaiting(*impl_, options, {}, note);
}

Result<std::vector<ClaimedMessage>> WorkQueue::AckAndClaim(
    std::string_view receipt, const ClaimOptions& options, ClaimNote* note) {
  auto parsed = core::ParseReceipt(receipt);
  if (!parsed.ok()) return parsed.status();
  Status s = core::ValidateClaim(options);
  if (!s.ok()) return s;
  auto r = core::ClaimWaiting(*impl_, options, {.ack = *parsed}, note);
  // The ack committed unless the first look failed; a failure of a later
  // look (while waiting) comes after the committed ack.
  if (r.ok()) core::AfterAcks(*this, *impl_);
  return r;
}

void WorkQueue::ClaimThen(std::string_view ack, const ClaimOptions& options,
                          ClaimedThen then) {
  std::optional<core::Receipt> parsed;
  if (!ack.empty()) {
    auto r = core::ParseReceipt(ack);
    if (!r.ok()) return then(r.status(), {});
    parsed = *r;
  }
  Status s = core::ValidateClaim(options);
  if (s.ok() && options.wait.count() != 0) {
    s = Status(Code::kInvalidArgument,
               "ClaimThen takes no wait: a waiting claim parks a thread");
  }
  if (!s.ok()) return then(s, {});
  core::ClaimOnceThen(*this, impl_, options, parsed, std::move(then));
}

namespace core {
struct SubscriptionState {
  std::shared_ptr<QueueImpl> queue;
  WakeHub::Waiter waiter;
};
}  // namespace core

ReadySubscription::ReadySubscription(
    std::unique_ptr<core::SubscriptionState> state)
    : state_(std::move(state)) {}

ReadySubscription::~ReadySubscription() {
  state_->queue->store().hub().Unregister(state_->waiter);
}

bool ReadySubscription::TakeSignal() {
  return state_->queue->store().hub().Consume(state_->waiter);
}

std::unique_ptr<ReadySubscription> WorkQueue::Subscribe(
    std::function<void()> on_ready) {
  auto state = std::make_unique<core::SubscriptionState>();
  state->queue = impl_;
  state->waiter.on_signal = std::move(on_ready);
  impl_->store().hub().Register(state->waiter, impl_->id());
  return std::unique_ptr<ReadySubscription>(
      new ReadySubscription(std::move(state)));
}

Result<std::chrono::steady_clock::time_point> WorkQueue::NextLook(
    const ClaimNote* after_claim) {
  return core::NextLookAt(*impl_, after_claim);
}

Status WorkQueue::Ack(std::string_view receipt) {
  return Ack(receipt, AckOptions{});
}

Status WorkQueue::Ack(std::string_view receipt, const AckOptions& options) {
  if (options.result && (options.result_ttl < kMinResultTtl ||
                         options.result_ttl > kMaxResultTtl)) {
    return Status::InvalidArgument(
        fmt::format("result_ttl {} ms is out of range ({}..{} ms)",
                    options.result_ttl.count(), kMinResultTtl.count(),
                    kMaxResultTtl.count()));
  }
  auto parsed = core::ParseReceipt(receipt);
  if (!parsed.ok()) return parsed.status();
  const auto current = impl_->Current();
  const QueueOptions& qo = current->options;
  if (options.result && options.result->size() > qo.max_payload_bytes) {
    return Status::TooLarge(
        fmt::format("a result of {} bytes exceeds queue '{}''s limit of {}",
                    options.result->size(), name(), qo.max_payload_bytes));
  }
  core::StoreImpl& store = impl_->store();
  if (!options.result) {
    Status s = core::AckOnly(*impl_, {.ack = *parsed}, qo);
    if (!s.ok()) return s;
    core::AfterAcks(*this, *impl_);
    return Status::Ok();
  }
  core::Released released;
  Status s = store.batcher().Run([&](Conn& conn) {
    released.clear();
    Status acked =
        core::AckAndRelease(store.engine(), conn,
                            {.queue_id = impl_->id(),
                             .receipt = *parsed,
                             .archive = qo.archive,
                             .unique_for = core::Micros(qo.unique_for)},
                            released);
    // The result in the ack's own transaction.
    if (!acked.ok()) return acked;
    return store.engine().SaveResult(conn,
                                     {.queue_id = impl_->id(),
                                      .message_id = parsed->id,
                                      .result = *options.result,
                                      .ttl = core::Micros(options.result_ttl)});
  });
  if (!s.ok()) return s;
  core::WakeReleased(store, released);
  store.results().Ring(impl_->id(), parsed->id);
  if (impl_->ResultPruneDue()) {
    (void)core::MergedWrite<std::int64_t>(
        store, [](core::ResultOps& e, Conn& c) { return e.PruneResults(c); });
  }
  core::AfterAcks(*this, *impl_);
  return Status::Ok();
}

Result<std::vector<Status>> WorkQueue::AckBatch(
    std::span<const std::string> receipts) {
  if (receipts.empty()) return std::vector<Status>();
  if (receipts.size() > core::kMaxBatch) {
    return Status::TooLarge(fmt::format("{} receipts exceed the limit of {}",
                                        receipts.size(), core::kMaxBatch));
  }
  std::vector<Status> out(receipts.size());
  std::vector<std::optional<core::Receipt>> parsed(receipts.size());
  for (size_t i = 0; i < receipts.size(); ++i) {
    auto p = core::ParseReceipt(receipts[i]);
    if (p.ok()) {
      parsed[i] = *p;
    } else {
      out[i] = p.status();
    }
  }
  // The valid receipts go to the engine together (one statement where the
  // engine can); a clean failure (stale, gone) changed nothing, so the other
  // acks still commit; any other failure undoes the whole group.
  std::vector<core::Receipt> valid;
  std::vector<size_t> where;
  for (size_t i = 0; i < receipts.size(); ++i) {
    if (!parsed[i]) continue;
    valid.push_back(*parsed[i]);
    where.push_back(i);
  }
  const auto current = impl_->Current();
  const QueueOptions& qo = current->options;
  std::vector<Status> acked;
  Status s = core::AckOnly(*impl_, {.done = valid, .done_status = &acked}, qo);
  if (!s.ok()) return s;
  for (size_t k = 0; k < where.size() && k < acked.size(); ++k) {
    out[where[k]] = std::move(acked[k]);
  }
  core::AfterAcks(*this, *impl_);
  return out;
}

Result<NackOutcome> WorkQueue::Nack(std::string_view receipt,
                                    const NackOptions& options) {
  auto parsed = core::ParseReceipt(receipt);
  if (!parsed.ok()) return parsed.status();
  if (options.delay) {
    if (*options.delay < Duration(0) || *options.delay > core::kMaxDelay) {
      return Status::InvalidArgument(
          fmt::format("delay {}ms is out of range [0ms, {}ms]",
                      options.delay->count(), core::kMaxDelay.count()));
    }
  }
  const auto current = impl_->Current();
  const QueueOptions& qo = current->options;
  std::string error = CutError(options.error);
  if (options.action == NackAction::kSnooze) {
    const Duration delay = options.delay.value_or(Duration(0));
    bool snoozed = false;
    Status s = impl_->store().batcher().Run([&](Conn& conn) {
      return impl_->store().engine().Retry(conn, {.queue_id = impl_->id(),
                                                  .receipt = *parsed,
                                                  .delay = delay,
                                                  .snooze = true,
                                                  .snoozed = &snoozed});
    });
    if (!s.ok()) return s;
    if (snoozed) {
      if (delay.count() == 0) impl_->store().hub().Notify(impl_->id(), 1);
      return NackOutcome::kSnoozed;
    }
    // Snoozed kMaxSnoozes times already (or a stale receipt, which the
    // nack below refuses): this one is a failed attempt.
    error = fmt::format("snoozed {} times", kMaxSnoozes);
  }
  // Core decides the message's fate, from the job's own retry policy
  // (read in the same transaction) or the queue's; the engine stores it.
  NackOutcome outcome = NackOutcome::kRetry;
  Duration delay{0};
  Status s = impl_->store().batcher().Run([&](Conn& conn) -> Status {
    // A job's policy can only lower its queue's attempts: at the queue's
    // last attempt, or for a dead letter asked for, there is nothing to read.
    core::JobFields job;
    if (options.action != NackAction::kDead &&
        parsed->attempt < qo.max_attempts) {
      auto text =
          impl_->store().engine().ReadHeaders(conn, impl_->id(), parsed->id);
      if (!text.ok()) return text.status();
      // A message gone is refused by the Retry below, which says why.
      if (*text) (void)core::DecodeMessageHeaders(**text, job);
    }
    const int max_attempts =
        std::min(job.max_attempts.value_or(qo.max_attempts), qo.max_attempts);
    if (options.action == NackAction::kDead ||
        parsed->attempt >= max_attempts) {
      outcome = NackOutcome::kDead;
      const std::string why =
          !error.empty() ? error
          : options.action == NackAction::kDead
              ? fmt::format("failed permanently at attempt {}", parsed->attempt)
              : fmt::format("failed attempt {} of {}", parsed->attempt,
                            max_attempts);
      const std::string logged = core::CleanErrorText(why);
      return impl_->store().engine().Bury(
          conn, {.queue_id = impl_->id(),
                 .receipt = *parsed,
                 .error = why,
                 .history_error = logged,
                 .unique_for = core::Micros(qo.unique_for)});
    }
    outcome = NackOutcome::kRetry;
    delay = options.delay.value_or(core::BackoffDelay(
        job.backoff_base.value_or(qo.backoff_base),
        job.backoff_max.value_or(qo.backoff_max), parsed->attempt));
    const std::string logged = core::CleanErrorText(error);
    return impl_->store().engine().Retry(conn, {.queue_id = impl_->id(),
                                                .receipt = *parsed,
                                                .delay = delay,
                                                .error = error,
                                                .history_error = logged});
  });
  if (!s.ok()) return s;
  if (outcome == NackOutcome::kDead) {
    core::ForwardDead(*impl_);
    MaybePruneDead(*this, *impl_);
    core::AfterAcks(*this, *impl_);
    return NackOutcome::kDead;
  }
  if (delay.count() == 0) impl_->store().hub().Notify(impl_->id(), 1);
  return NackOutcome::kRetry;
}

Result<Timestamp> WorkQueue::Extend(std::string_view receipt, Duration lease) {
  auto parsed = core::ParseReceipt(receipt);
  if (!parsed.ok()) return parsed.status();
  Status s = core::ValidateLease(lease);
  if (!s.ok()) return s;
  return core::MergedWrite<Timestamp>(
      impl_->store(), [&](core::MessageOps& e, Conn& conn) {
        return e.Extend(conn, {impl_->id(), *parsed, lease});
      });
}

Result<std::int64_t> WorkQueue::Purge() {
  auto purged = core::MergedWrite<std::int64_t>(
      impl_->store(), [&](core::QueueOps& e, Conn& conn) {
        return e.PurgeQueue(conn, impl_->id());
      });
  // What waited for them follows its policy.
  if (purged.ok() && *purged > 0)
    core::SettleEnded(impl_->store(), impl_->id());
  return purged;
}

Result<QueueStats> WorkQueue::Stats() {
  return core::SnapshotRead<QueueStats>(
      impl_->store(), [&](core::QueueOps& e, Conn& conn) -> Result<QueueStats> {
        auto stats = e.GetQueueStats(conn, impl_->id());
        if (!stats.ok()) return stats.status();
        // Paused or not as the store says now, in the same snapshot.
        auto record = e.GetQueue(conn, impl_->name());
        if (!record.ok()) return record.status();
        stats->paused = record->info.paused;
        return stats;
      });
}

Status WorkQueue::Alter(const QueueOptions& options) {
  Status s = core::ValidateQueueOptions(options);
  if (!s.ok()) return s;
  s = core::ValidateDeadLetterQueue(name(), options);
  if (!s.ok()) return s;
  if (options.groups != impl_->Current()->options.groups) {
    return Status::InvalidArgument(fmt::format(
        "a queue's group mode is set when it is created ({}), not changed",
        GroupModeName(impl_->Current()->options.groups)));
  }
  s = impl_->store().batcher().Run([&](Conn& conn) {
    core::Engine& e = impl_->store().engine();
    Status loop = core::CheckDeadLetterLoop(e, conn, name(), options);
    if (!loop.ok()) return loop;
    return e.AlterQueue(conn, {.queue_id = impl_->id(), .options = options});
  });
  if (!s.ok()) return s;
  QueueInfo info = *impl_->Current();
  info.options = options;
  impl_->Set(std::move(info));
  return Status::Ok();
}

namespace {

Status SetPaused(core::QueueImpl& impl, bool paused) {
  Status s = impl.store().batcher().Run([&](Conn& conn) {
    return impl.store().engine().SetQueuePaused(
        conn, {.queue_id = impl.id(), .paused = paused});
  });
  if (!s.ok()) return s;
  QueueInfo info = *impl.Current();
  info.paused = paused;
  impl.Set(std::move(info));
  // Waiting claims of this process look again (those of other processes
  // see the commit as any other write, and their handles the state within
  // QueueImpl::kRefresh).
  if (!paused) impl.store().hub().NotifyAll();
  return Status::Ok();
}

}  // namespace

Status WorkQueue::Pause() { return SetPaused(*impl_, true); }
Status WorkQueue::Resume() { return SetPaused(*impl_, false); }

Result<std::vector<DeadLetter>> WorkQueue::ListDead(
    const ListOptions& options) {
  Status s = core::ValidateList(options);
  if (!s.ok()) return s;
  return core::SnapshotRead<std::vector<DeadLetter>>(
      impl_->store(), [&](core::MessageOps& e, Conn& conn) {
        return e.ListDead(conn, {impl_->id(), options});
      });
}

Result<std::int64_t> WorkQueue::Redrive(std::span<const std::int64_t> ids) {
  if (ids.empty()) {
    return Status::InvalidArgument(
        "redrive needs at least one id (or use RedriveAll)");
  }
  if (ids.size() > core::kMaxBatch) {
    return Status::TooLarge(fmt::format("{} ids exceed the limit of {}",
                                        ids.size(), core::kMaxBatch));
  }
  return core::RedriveLinked(*impl_, ids);
}

Result<std::int64_t> WorkQueue::RedriveAll() {
  return core::RedriveLinked(*impl_, {});
}

Result<std::int64_t> WorkQueue::PruneDead() {
  const Duration retention = impl_->Current()->options.dead_retention;
  if (retention.count() == 0) return 0;
  return core::MergedWrite<std::int64_t>(
      impl_->store(), [&](core::MessageOps& e, Conn& c) {
        return e.PruneDead(
            c, {.queue_id = impl_->id(), .retention = core::Micros(retention)});
      });
}

Result<std::int64_t> WorkQueue::PurgeDead() {
  return core::MergedWrite<std::int64_t>(impl_->store(),
                                         [&](core::MessageOps& e, Conn& c) {
                                           return e.PurgeDead(c, impl_->id());
                                         });
}

Result<std::vector<ArchivedMessage>> WorkQueue::ListArchive(
    const ListOptions& options) {
  Status s = core::ValidateList(options);
  if (!s.ok()) return s;
  return core::SnapshotRead<std::vector<ArchivedMessage>>(
      impl_->store(), [&](core::MessageOps& e, Conn& conn) {
        return e.ListArchive(conn, {impl_->id(), options});
      });
}

Result<std::int64_t> WorkQueue::PruneArchive() {
  return core::MergedWrite<std::int64_t>(
      impl_->store(), [&](core::MessageOps& e, Conn& c) {
        return e.PruneArchive(
            c, {impl_->id(), impl_->Current()->options.retention});
      });
}

namespace {

Status CheckTx(Tx& tx, core::TxImpl* impl, core::StoreImpl& store) {
  if (impl == nullptr || impl->conn() == nullptr) {
    return Status::FailedPrecondition("transaction is closed");
  }
  if (&impl->store() != &store) {
    return Status::InvalidArgument(
        "transaction belongs to another store than this queue");
  }
  (void)tx;
  return Status::Ok();
}

}  // namespace

Result<SendResult> WorkQueue::Send(Tx& tx, const Message& message) {
  Status s = CheckTx(tx, tx.impl_.get(), impl_->store());
  if (!s.ok()) return s;
  const auto current = impl_->Current();
  const QueueOptions& qo = current->options;
  s = core::ValidateMessage(message, qo.max_payload_bytes,
                            impl_->store().Now());
  if (s.ok()) s = core::ValidateDependencies(message, 0);
  if (!s.ok()) return s;
  const std::span<const Message> one(&message, 1);
  if (core::HasDependencies(one)) {
    auto r = core::SendWithDependencies(
        impl_->store().engine(), *tx.impl_->conn(), impl_->id(), qo, message);
    // Its links are part of the transaction: a failure spoils it whole.
    if (!r.ok()) tx.impl_->Poison(r.status());
    return r;
  }
  auto r = impl_->store().engine().Send(
      *tx.impl_->conn(), {.queue_id = impl_->id(),
                          .messages = one,
                          .unique_for = core::Micros(qo.unique_for),
                          .grouped = qo.groups != GroupMode::kNone});
  if (!r.ok()) {
    if (!core::IsCleanFailure(r.status())) tx.impl_->Poison(r.status());
    return r.status();
  }
  tx.impl_->sent()[impl_->id()] += CountStored(*r);
  return (*r)[0];
}

Status WorkQueue::Ack(Tx& tx, std::string_view receipt) {
  Status s = CheckTx(tx, tx.impl_.get(), impl_->store());
  if (!s.ok()) return s;
  auto parsed = core::ParseReceipt(receipt);
  if (!parsed.ok()) return parsed.status();
  const auto current = impl_->Current();
  const QueueOptions& qo = current->options;
  core::Released released;
  s = core::AckAndRelease(impl_->store().engine(), *tx.impl_->conn(),
                          {.queue_id = impl_->id(),
                           .receipt = *parsed,
                           .archive = qo.archive,
                           .unique_for = core::Micros(qo.unique_for)},
                          released);
  // The queues it released wake with the transaction's commit.
  for (std::int64_t q : released) tx.impl_->sent()[q] += 1;
  if (!s.ok() && !core::IsCleanFailure(s)) tx.impl_->Poison(s);
  return s;
}

}  // namespace sqlq
