#include "core/dependencies.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "core/batches.h"
#include "core/errors.h"
#include "core/store_impl.h"

namespace sqlq::core {

namespace {

OnDead StoredPolicy(IfDependencyDies v) {
  switch (v) {
    case IfDependencyDies::kCancel:
      return OnDead::kCancel;
    case IfDependencyDies::kRun:
      return OnDead::kRun;
    case IfDependencyDies::kWait:
      return OnDead::kWait;
  }
  return OnDead::kCancel;
}

// What message `index` of a batch, stored as `results`, depends on.
std::vector<std::int64_t> ParentsOf(const Message& m,
                                    const std::vector<SendResult>& results) {
  std::vector<std::int64_t> parents = m.depends_on;
  for (std::size_t k : m.depends_on_batch) parents.push_back(results[k].id);
  return parents;
}

// Locks what messages [from, to) of `messages` depend on (results holds
// what the sends of messages [0, from) stored), in one statement
// (DependencyOps::LockParents): by id, those still in a queue or dead.
Result<std::map<std::int64_t, ParentState>> LockRange(
    Engine& e, Conn& conn, std::span<const Message> messages,
    const std::vector<SendResult>& results, std::size_t from, std::size_t to) {
  std::vector<std::int64_t> all;
  for (std::size_t i = from; i < to; ++i) {
    const std::vector<std::int64_t> parents = ParentsOf(messages[i], results);
    all.insert(all.end(), parents.begin(), parents.end());
  }
  std::map<std::int64_t, ParentState> state;
  if (all.empty()) return state;
  auto found = e.LockParents(conn, all);
  if (!found.ok()) return found.status();
  for (const ParentState& p : *found) state[p.id] = p;
  return state;
}

// Messages [from, to) of `messages`, those that depend on others with
// their parents in kParentsHeader (ClaimedMessage::parents): by id, each
// once, with its queue's name where `state` (LockRange's) has its queue.
// `known` names queues already (the send's own); the others are looked up.
// When any of them depends on others, the messages are copied into
// `copies`; else the span is the range itself.
Result<std::span<const Message>> WithParents(
    Engine& e, Conn& conn, std::span<const Message> messages,
    const std::vector<SendResult>& results, std::size_t from, std::size_t to,
    const std::map<std::int64_t, ParentState>& state,
    std::map<std::int64_t, std::string> known, std::vector<Message>& copies) {
  const std::span<const Message> range = messages.subspan(from, to - from);
  if (!HasDependencies(range)) return range;
  std::vector<std::int64_t> unknown;
  for (const auto& [id, p] : state) {
    if (!known.contains(p.queue_id)) unknown.push_back(p.queue_id);
  }
  std::sort(unknown.begin(), unknown.end());
  unknown.erase(std::unique(unknown.begin(), unknown.end()), unknown.end());
  if (!unknown.empty()) {
    auto names = e.QueueNames(conn, unknown);
    if (!names.ok()) return names.status();
    known.merge(*names);
  }
  copies.assign(range.begin(), range.end());
  for (Message& m : copies) {
    if (m.depends_on.empty() && m.depends_on_batch.empty()) continue;
    std::vector<ParentRef> refs;
    std::set<std::int64_t> seen;
    for (std::int64_t id : ParentsOf(m, results)) {
      if (!seen.insert(id).second) continue;
      ParentRef& ref = refs.emplace_back(ParentRef{.id = id});
      auto it = state.find(id);
      if (it == state.end()) continue;  // in no queue: not known
      auto name = known.find(it->second.queue_id);
      if (name != known.end()) ref.queue = name->second;
    }
    m.headers.insert_or_assign(std::string(kParentsHeader), ParentsText(refs));
    if (m.if_dependency_dies != IfDependencyDies::kCancel) {
      m.headers.insert_or_assign(
          std::string(kIfDependencyDiesHeader),
          m.if_dependency_dies == IfDependencyDies::kRun ? "run" : "wait");
    }
  }
  return std::span<const Message>(copies);
}

// Links messages [from, to) of `messages` (all sent to queue `queue_id`;
// `results` holds what the sends of messages [0, to) stored) that depend
// on others, and cancels those with a dead one under
// IfDependencyDies::kCancel; `state` is LockRange's, taken before their
// send (no message of a range depends on another of it: SendRuns starts a
// new range there, and a later range's lock finds the cancelled one dead).
// The links are written and the children made waiting in a
// few statements for the whole range (DependencyOps). Returns how many of
// them now wait; adds the cancelled ones to `cancelled`.
Result<std::int64_t> LinkRange(Engine& e, Conn& conn, std::int64_t queue_id,
                               const QueueOptions& qo,
                               std::span<const Message> messages,
                               const std::vector<SendResult>& results,
                               std::size_t from, std::size_t to,
                               const std::map<std::int64_t, ParentState>& state,
                               std::int64_t& cancelled,
                               std::vector<bool>* cancelled_at = nullptr) {
  // A duplicate is the message already there, linked at its own send.
  auto linked = [&](std::size_t i) {
    const Message& m = messages[i];
    return !results[i].duplicate &&
           (!m.depends_on.empty() || !m.depends_on_batch.empty());
  };
  bool any = false;
  for (std::size_t i = from; i < to; ++i) any = any || linked(i);
  if (!any) return 0;
  std::vector<DependencyLink> links;
  std::vector<ChildWaits> waiting;
  // Cancelled here, each with the dead parent that made it so (and its
  // index in `messages`).
  std::vector<std::pair<std::int64_t, std::int64_t>> cancels;
  std::vector<std::size_t> cancel_at;
  for (std::size_t i = from; i < to; ++i) {
    if (!linked(i)) continue;
    const Message& m = messages[i];
    const OnDead policy = StoredPolicy(m.if_dependency_dies);
    std::vector<std::int64_t> parents = ParentsOf(m, results);
    std::sort(parents.begin(), parents.end());
    parents.erase(std::unique(parents.begin(), parents.end()), parents.end());
    std::optional<std::int64_t> dead_parent;
    std::vector<DependencyLink> mine;
    for (std::int64_t id : parents) {
      auto it = state.find(id);
      if (it == state.end()) continue;  // completed (or deleted): done
      const ParentState& p = it->second;
      if (!p.dead) {
        mine.push_back({.parent_id = id,
                        .child_id = results[i].id,
                        .parent_queue_id = p.queue_id,
                        .child_queue_id = queue_id,
                        .on_dead = policy});
      } else if (policy == OnDead::kCancel) {
        if (!dead_parent) dead_parent = id;
      } else if (policy == OnDead::kWait) {
        mine.push_back({.parent_id = id,
                        .child_id = results[i].id,
                        .parent_queue_id = p.queue_id,
                        .child_queue_id = queue_id,
                        .on_dead = policy,
                        .parked = true});
      }
    }
    if (dead_parent) {
      cancels.emplace_back(results[i].id, *dead_parent);
      cancel_at.push_back(i);
      continue;
    }
    if (mine.empty()) continue;
    waiting.push_back(
        {.child_id = results[i].id, .waits = static_cast<int>(mine.size())});
    links.insert(links.end(), mine.begin(), mine.end());
  }
  Status s = e.WriteLinks(conn, links, waiting);
  if (!s.ok()) return s;
  for (std::size_t k = 0; k < cancels.size(); ++k) {
    const auto& [id, parent] = cancels[k];
    const std::string why = DependencyDiedText(parent, true);
    auto n = e.Cancel(conn, {.queue_id = queue_id,
                             .ids = std::span<const std::int64_t>(&id, 1),
                             .error = why,
                             .unique_for = Micros(qo.unique_for)});
    if (!n.ok()) return n.status();
    cancelled += *n;
    if (cancelled_at != nullptr && *n > 0) (*cancelled_at)[cancel_at[k]] = true;
  }
  return static_cast<std::int64_t>(waiting.size());
}

// The queues a batch's dependencies must have flagged: those of the ids it
// names, and its own when it names earlier messages of the batch.
std::vector<std::int64_t> NamedParents(std::span<const Message> messages) {
  std::set<std::int64_t> ids;
  for (const Message& m : messages) {
    ids.insert(m.depends_on.begin(), m.depends_on.end());
  }
  return {ids.begin(), ids.end()};
}

}  // namespace

std::string DependencyDiedText(std::int64_t parent, bool dead) {
  return dead ? fmt::format("cancelled: message {}, which it depends on, died",
                            parent)
              : fmt::format(
                    "cancelled: message {}, which it depends on, was deleted",
                    parent);
}

bool HasDependencies(std::span<const Message> messages) {
  return std::any_of(messages.begin(), messages.end(), [](const Message& m) {
    return !m.depends_on.empty() || !m.depends_on_batch.empty();
  });
}

Status FlagAcross(StoreImpl& store, std::span<QueueImpl* const> queues,
                  std::span<const Message> messages,
                  std::span<const std::int64_t> more_queues) {
  // The queues of the batch's own messages that others of it wait for.
  std::set<std::int64_t> named(more_queues.begin(), more_queues.end());
  for (const Message& m : messages) {
    for (std::size_t k : m.depends_on_batch) named.insert(queues[k]->id());
  }
  const std::vector<std::int64_t> parents = NamedParents(messages);
  const std::vector<std::int64_t> own(named.begin(), named.end());
  if (parents.empty() && own.empty()) return Status::Ok();
  // Committed on its own (DependencyOps::FlagDependents says why).
  return store.batcher().Run([&](Conn& conn) {
    return store.engine().FlagDependents(conn, parents, own);
  });
}

Status SendRuns(Engine& e, Conn& conn, std::span<QueueImpl* const> queues,
                std::span<const Message> messages, SentRuns& out) {
  const std::size_t n = messages.size();
  out.results.assign(n, SendResult{});
  out.cancelled_at.assign(n, false);
  out.counts.clear();
  std::map<std::int64_t, std::string> names;
  for (QueueImpl* q : queues) names.emplace(q->id(), q->name());
  // Each run of messages to one queue is one send. A message that depends
  // on one of its own run starts another: its parents' ids, which go into
  // its headers, are known once their send is done.
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i + 1;
    while (j < n && queues[j] == queues[i] &&
           std::none_of(messages[j].depends_on_batch.begin(),
                        messages[j].depends_on_batch.end(),
                        [&](std::size_t k) { return k >= i; })) {
      ++j;
    }
    QueueImpl& q = *queues[i];
    const auto current = q.Current();
    const QueueOptions& qo = current->options;
    auto state = LockRange(e, conn, messages, out.results, i, j);
    if (!state.ok()) return state.status();
    std::vector<Message> copies;
    auto run = WithParents(e, conn, messages, out.results, i, j, *state, names,
                           copies);
    if (!run.ok()) return run.status();
    auto sent = e.Send(conn, {.queue_id = q.id(),
                              .messages = *run,
                              .unique_for = Micros(qo.unique_for),
                              .grouped = qo.groups != GroupMode::kNone});
    if (!sent.ok()) return sent.status();
    SentRuns::Counts& c = out.counts[q.id()];
    c.queue = &q;
    for (std::size_t k = i; k < j; ++k) {
      out.results[k] = (*sent)[k - i];
      if (!out.results[k].duplicate) ++c.stored;
    }
    auto w = LinkRange(e, conn, q.id(), qo, messages, out.results, i, j, *state,
                       c.cancelled, &out.cancelled_at);
    if (!w.ok()) return w.status();
    c.waiting += *w;
    i = j;
  }
  return Status::Ok();
}

void AfterSendRuns(StoreImpl& store, const SentRuns& sent) {
  for (const auto& [id, c] : sent.counts) {
    const std::int64_t ready = c.stored - c.waiting - c.cancelled;
    if (ready > 0) store.hub().Notify(id, ready);
  }
  // The cancelled ones are dead letters: forwarded, and what waits for
  // them settled (ForwardDead does both).
  for (const auto& [id, c] : sent.counts) {
    if (c.cancelled > 0) ForwardDead(*c.queue);
  }
}

Result<std::vector<SendResult>> SendAcross(StoreImpl& store,
                                           std::span<QueueImpl* const> queues,
                                           std::span<const Message> messages) {
  Status s = FlagAcross(store, queues, messages, {});
  if (!s.ok()) return s;
  SentRuns sent;
  s = store.batcher().Run([&](Conn& conn) -> Status {
    return SendRuns(store.engine(), conn, queues, messages, sent);
  });
  if (!s.ok()) return s;
  AfterSendRuns(store, sent);
  return std::move(sent.results);
}

Result<std::int64_t> RedriveLinked(QueueImpl& impl,
                                   std::span<const std::int64_t> ids) {
  StoreImpl& store = impl.store();
  Engine& e = store.engine();
  // What the dead dependents were sent to wait for, as a send's messages
  // would name it (their ids as the "results" LinkRange links).
  std::vector<Message> asked;
  std::vector<SendResult> children;
  auto read = [&](Conn& conn, bool unlink) -> Status {
    asked.clear();
    children.clear();
    auto found = e.TakeDeadDependents(conn, impl.id(), ids, unlink);
    if (!found.ok()) return found.status();
    for (const DeadDependent& d : *found) {
      const Headers h = DecodeHeaders(d.headers);
      Message& m = asked.emplace_back();
      if (auto it = h.find(std::string(kParentsHeader)); it != h.end()) {
        for (const ParentRef& p : ParseParents(it->second)) {
          m.depends_on.push_back(p.id);
        }
      }
      if (auto it = h.find(std::string(kIfDependencyDiesHeader));
          it != h.end()) {
        if (it->second == "run") m.if_dependency_dies = IfDependencyDies::kRun;
        if (it->second == "wait") {
          m.if_dependency_dies = IfDependencyDies::kWait;
        }
      }
      children.push_back({.id = d.id});
    }
    return Status::Ok();
  };
  // The parents' queues flagged first, committed on their own
  // (DependencyOps::FlagDependents says why): usually flagged already,
  // since the first send, unless a parent moved on to a dead-letter queue.
  Status s = store.batcher().Run([&](Conn& conn) -> Status {
    Status r = read(conn, false);
    if (!r.ok() || asked.empty()) return r;
    return e.FlagDependents(conn, NamedParents(asked), {});
  });
  if (!s.ok()) return s;
  std::int64_t moved = 0, waiting = 0, cancelled = 0;
  const auto current = impl.Current();
  s = store.batcher().Run([&](Conn& conn) -> Status {
    moved = waiting = cancelled = 0;
    Status r = read(conn, true);
    if (!r.ok()) return r;
    auto n = e.Redrive(conn, {.queue_id = impl.id(), .ids = ids});
    if (!n.ok()) return n.status();
    moved = *n;
    if (asked.empty()) return Status::Ok();
    // Locked after the move: a parent redriven with its dependent is live.
    auto state = LockRange(e, conn, asked, children, 0, asked.size());
    if (!state.ok()) return state.status();
    auto w = LinkRange(e, conn, impl.id(), current->options, asked, children, 0,
                       asked.size(), *state, cancelled);
    if (!w.ok()) return w.status();
    waiting = *w;
    return Status::Ok();
  });
  if (!s.ok()) return s;
  const std::int64_t ready = moved - waiting - cancelled;
  if (ready > 0) store.hub().Notify(impl.id(), ready);
  // Cancelled again (a parent still dead): forwarded and settled.
  if (cancelled > 0) ForwardDead(impl);
  return moved;
}

Result<std::vector<SendResult>> SendWithDependencies(
    QueueImpl& impl, std::span<const Message> messages) {
  std::vector<QueueImpl*> queues(messages.size(), &impl);
  return SendAcross(impl.store(), queues, messages);
}

Result<SendResult> SendWithDependencies(Engine& e, Conn& conn,
                                        std::int64_t queue_id,
                                        const QueueOptions& qo,
                                        const Message& message) {
  const std::span<const Message> one(&message, 1);
  Status s = e.FlagDependents(conn, NamedParents(one), {});
  if (!s.ok()) return s;
  const std::vector<SendResult> none;
  auto state = LockRange(e, conn, one, none, 0, 1);
  if (!state.ok()) return state.status();
  std::vector<Message> copies;
  auto run = WithParents(e, conn, one, none, 0, 1, *state, {}, copies);
  if (!run.ok()) return run.status();
  auto sent = e.Send(conn, {.queue_id = queue_id,
                            .messages = *run,
                            .unique_for = Micros(qo.unique_for),
                            .grouped = qo.groups != GroupMode::kNone});
  if (!sent.ok()) return sent.status();
  std::int64_t cancelled = 0;
  auto w =
      LinkRange(e, conn, queue_id, qo, one, *sent, 0, 1, *state, cancelled);
  if (!w.ok()) return w.status();
  return (*sent)[0];
}

Status AckAndRelease(Engine& e, Conn& conn, const AckParams& p,
                     Released& released) {
  Status s = e.Ack(conn, p);
  if (!s.ok()) return s;
  const std::int64_t id = p.receipt.id;
  auto r = e.ReleaseDependents(conn, p.queue_id,
                               std::span<const std::int64_t>(&id, 1));
  if (!r.ok()) return r.status();
  released.insert(released.end(), r->queues.begin(), r->queues.end());
  return CountBatchesCompleted(e, conn, r->batches);
}

Result<std::vector<Status>> AckManyAndRelease(Engine& e, Conn& conn,
                                              const AckManyParams& p,
                                              Released& released) {
  auto acked = e.AckMany(conn, p);
  if (!acked.ok()) return acked.status();
  std::vector<std::int64_t> ids;
  for (std::size_t i = 0; i < acked->size(); ++i) {
    if ((*acked)[i].ok()) ids.push_back(p.receipts[i].id);
  }
  auto r = e.ReleaseDependents(conn, p.queue_id, ids);
  if (!r.ok()) return r.status();
  released.insert(released.end(), r->queues.begin(), r->queues.end());
  Status s = CountBatchesCompleted(e, conn, r->batches);
  if (!s.ok()) return s;
  return acked;
}

void WakeReleased(StoreImpl& store, const Released& released) {
  if (released.empty()) return;
  std::set<std::int64_t> queues(released.begin(), released.end());
  for (std::int64_t q : queues) store.hub().Notify(q, std::int64_t{1} << 30);
  store.engine().WakeOthers();
}

void SettleEnded(StoreImpl& store, std::int64_t queue_id) {
  std::deque<std::int64_t> todo = {queue_id};
  Released released;
  // Each round settles the queue's ended dependencies; a cancel ends more,
  // in the cancelled message's queue. The rounds are bounded by the graph,
  // which has no cycles; the cap is a guard against a runaway.
  // The queues where dependents were cancelled: their dead letters go on
  // to their dead-letter queues, as a cancel's do (WorkQueue::Cancel).
  std::set<std::int64_t> forward;
  for (int round = 0; !todo.empty() && round < 10000; ++round) {
    const std::int64_t q = todo.front();
    todo.pop_front();
    // A read first: a queue without dependents costs no write.
    auto ended = SnapshotRead<std::vector<EndedDependency>>(
        store,
        [&](Engine& e, Conn& conn) { return e.EndedDependencies(conn, q); });
    if (!ended.ok() || ended->empty()) continue;
    std::set<std::int64_t> cancelled_in;
    Released round_released;
    Status s = store.batcher().Run([&](Conn& conn) -> Status {
      cancelled_in.clear();
      round_released.clear();
      Engine& e = store.engine();
      auto again = e.EndedDependencies(conn, q);
      if (!again.ok()) return again.status();
      for (const EndedDependency& d : *again) {
        auto settled = e.SettleDependency(conn, d);
        if (!settled.ok()) return settled.status();
        if (!*settled) continue;
        if (d.on_dead == OnDead::kRun) {
          round_released.push_back(d.child_queue_id);
        } else if (d.on_dead == OnDead::kBatch) {
          round_released.push_back(d.child_queue_id);
          Status counted = CountBatchEnd(e, conn, d.child_id, EndOf(d));
          if (!counted.ok()) return counted;
        } else if (d.on_dead == OnDead::kCancel) {
          const std::string why = DependencyDiedText(d.parent_id, d.dead);
          auto n = e.Cancel(
              conn, {.queue_id = d.child_queue_id,
                     .ids = std::span<const std::int64_t>(&d.child_id, 1),
                     .error = why});
          if (!n.ok() && !IsCleanFailure(n.status())) return n.status();
          if (n.ok() && *n > 0) cancelled_in.insert(d.child_queue_id);
        }
      }
      return Status::Ok();
    });
    if (!s.ok()) continue;
    released.insert(released.end(), round_released.begin(),
                    round_released.end());
    for (std::int64_t c : cancelled_in) todo.push_back(c);
    forward.insert(cancelled_in.begin(), cancelled_in.end());
    if (!cancelled_in.empty()) store.results().Ring();
    // A full page: there may be more.
    if (ended->size() >= 1000) todo.push_back(q);
  }
  WakeReleased(store, released);
  // After every round: a cancelled dependent's own dependents were settled
  // while it was a dead letter of its queue still.
  if (forward.empty()) return;
  auto queues = SnapshotRead<std::vector<QueueRecord>>(
      store, [](Engine& e, Conn& conn) { return e.ListQueues(conn); });
  if (!queues.ok()) return;  // they wait in their queues' dead letters
  for (const QueueRecord& r : *queues) {
    if (forward.contains(r.id) && !r.info.options.dead_letter_queue.empty()) {
      ForwardDeadLetters(store, r.id, r.info.name);
    }
  }
}

}  // namespace sqlq::core
