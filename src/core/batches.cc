#include "core/batches.h"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "core/columns.h"
#include "core/dependencies.h"
#include "core/receipt.h"
#include "core/rows.h"
#include "core/store_impl.h"
#include "core/validate.h"
#include "sqlq/batch.h"
#include "sqlq/store.h"

namespace sqlq {

Status CheckBatchId(std::string_view id) {
  if (id.empty()) return Status::InvalidArgument("a batch id is empty");
  if (id.size() > kMaxBatchId) {
    return Status::InvalidArgument(fmt::format(
        "batch id of {} bytes is longer than {}", id.size(), kMaxBatchId));
  }
  for (unsigned char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                    c == '.' || c == ':';
    if (!ok) {
      return Status::InvalidArgument(
          "a batch id may hold only ASCII letters, digits and '_', '-', '.', "
          "':'");
    }
  }
  return Status::Ok();
}

namespace core {

namespace {

// The callback's headers column with the batch's counts added.
std::string WithCounts(std::string_view text, const BatchCounts& c) {
  Headers h = DecodeHeaders(text);
  h[std::string(kBatchTotalHeader)] = fmt::to_string(c.total);
  h[std::string(kBatchCompletedHeader)] = fmt::to_string(c.completed);
  h[std::string(kBatchDeadHeader)] = fmt::to_string(c.dead);
  h[std::string(kBatchCancelledHeader)] = fmt::to_string(c.cancelled);
  return EncodeHeaders(h);
}

// Finishes the batch of `r` when none of its members is pending: done,
// and its counts in the callback (when the callback is still in its queue).
Status FinishIfDone(Engine& e, Conn& conn, const BatchRecord& r) {
  if (r.done_us != 0 || r.counts.pending() > 0) return Status::Ok();
  auto text = e.ReadHeaders(conn, r.callback_queue_id, r.callback_id);
  if (!text.ok()) return text.status();
  FinishBatchParams p{.batch_id = r.id, .callback_id = r.callback_id};
  if (*text) p.headers = WithCounts(**text, r.counts);
  return e.FinishBatch(conn, p);
}

std::string NewBatchId() {
  return fmt::format("{:016x}{:016x}", NewLeaseToken(), NewLeaseToken());
}

BatchStatus StatusOf(const BatchRecord& r) {
  BatchStatus s{.id = r.name,
                .counts = r.counts,
                .done = r.done_us != 0,
                .callback_queue = r.callback_queue,
                .callback_id = r.callback_id,
                .created_at = FromUs(r.created_us)};
  if (r.done_us != 0) s.done_at = FromUs(r.done_us);
  if (r.cancel_us != 0) s.cancelled_at = FromUs(r.cancel_us);
  if (r.expires_us != 0) s.expires_at = FromUs(r.expires_us);
  auto list = nlohmann::json::parse(r.queues, nullptr, false);
  if (list.is_array()) {
    for (const auto& q : list) {
      if (q.is_string()) s.queues.push_back(q.get<std::string>());
    }
  }
  return s;
}

Status NoSuchBatch(std::string_view id) {
  return Status::NotFound(fmt::format(
      "no batch '{}' (never sent, done longer ago than its retention, or its "
      "callback's queue was dropped)",
      id));
}

}  // namespace

BatchCounts EndOf(const EndedDependency& d) {
  if (d.dead && !d.cancelled) return {.dead = 1};
  return {.cancelled = 1};
}

Status CountBatchEnd(Engine& e, Conn& conn, std::int64_t callback_id,
                     const BatchCounts& delta) {
  auto r = e.CountBatch(conn, callback_id, delta);
  if (!r.ok()) return r.status();
  if (!*r) return Status::Ok();
  return FinishIfDone(e, conn, **r);
}

Status CountBatchesCompleted(Engine& e, Conn& conn,
                             std::span<const std::int64_t> callbacks) {
  if (callbacks.empty()) return Status::Ok();
  std::map<std::int64_t, std::int64_t> ended;
  for (std::int64_t c : callbacks) ++ended[c];
  for (const auto& [callback, n] : ended) {
    Status s = CountBatchEnd(e, conn, callback, {.completed = n});
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace core

Result<BatchSent> Store::CreateBatch(const BatchSpec& spec) {
  std::string id = spec.id;
  Status s = id.empty() ? Status::Ok() : CheckBatchId(id);
  if (!s.ok()) return s;
  if (id.empty()) id = core::NewBatchId();
  if (spec.members.empty()) {
    return Status::InvalidArgument("a batch needs at least one member");
  }
  if (spec.members.size() > kMaxBatchMembers) {
    return Status::TooLarge(fmt::format("batch of {} members exceeds {}",
                                        spec.members.size(), kMaxBatchMembers));
  }
  if (spec.retention < kMinBatchRetention ||
      spec.retention > kMaxBatchRetention) {
    return Status::InvalidArgument(fmt::format(
        "batch retention of {} ms is out of range ({} ms to {} days)",
        spec.retention.count(), kMinBatchRetention.count(),
        std::chrono::duration_cast<std::chrono::hours>(kMaxBatchRetention)
                .count() /
            24));
  }
  // Each queue looked up once; the handles live until the send is done.
  std::map<std::string, WorkQueue, std::less<>> handles;
  auto handle = [&](const std::string& name) -> Result<core::QueueImpl*> {
    auto it = handles.find(name);
    if (it == handles.end()) {
      auto q = Queue(name);
      if (!q.ok()) return q.status();
      it = handles.emplace(name, std::move(*q)).first;
    }
    return it->second.impl_.get();
  };
  const Timestamp now = impl_->Now();
  std::vector<core::QueueImpl*> queues;
  std::vector<Message> members;
  std::vector<std::string> names;  // the members' queues, first seen first
  std::set<std::int64_t> member_queues;
  queues.reserve(spec.members.size());
  members.reserve(spec.members.size());
  for (std::size_t i = 0; i < spec.members.size(); ++i) {
    const QueuedMessage& m = spec.members[i];
    const std::string what = fmt::format("member {}", i + 1);
    auto q = handle(m.queue);
    if (!q.ok()) return q.status().WithContext(what);
    const auto current = (*q)->Current();
    s = core::ValidateMessage(m.message, current->options.max_payload_bytes,
                              now);
    if (s.ok()) s = core::ValidateDependencies(m.message, i);
    if (s.ok() && !m.message.dedup_key.empty()) {
      s = Status::InvalidArgument(
          "a member of a batch cannot carry a dedup key (a duplicate would "
          "be another message, not a member)");
    }
    if (!s.ok()) return s.WithContext(what);
    if (member_queues.insert((*q)->id()).second) names.push_back(m.queue);
    queues.push_back(*q);
    members.push_back(m.message);
    members.back().headers[std::string(core::kBatchHeader)] = id;
  }
  const QueuedMessage& cb = spec.callback;
  auto cbq = handle(cb.queue);
  if (!cbq.ok()) return cbq.status().WithContext("callback");
  {
    const auto current = (*cbq)->Current();
    s = core::ValidateMessage(cb.message, current->options.max_payload_bytes,
                              now);
    if (s.ok() && (!cb.message.depends_on.empty() ||
                   !cb.message.depends_on_batch.empty())) {
      s = Status::InvalidArgument(
          "a batch's callback waits for the members: it cannot depend on "
          "other messages");
    }
    if (s.ok() && (cb.message.delay.count() != 0 || cb.message.run_at)) {
      s = Status::InvalidArgument(
          "a batch's callback is ready when the last member ends: it takes no "
          "delay or run_at");
    }
    if (s.ok() && !cb.message.dedup_key.empty()) {
      s = Status::InvalidArgument(
          "a batch's callback cannot carry a dedup key");
    }
    if (!s.ok()) return s.WithContext("callback");
  }
  Message callback = cb.message;
  callback.headers[std::string(core::kBatchHeader)] = id;
  // Built as a std::string first: gcc 12 at -O2 misreads an assignment from a
  // literal here as an overlapping copy (-Wrestrict, gcc bug 105329).
  callback.headers.insert_or_assign(std::string(core::kBatchCallbackHeader),
                                    std::string(1, '1'));
  const std::string queue_list = nlohmann::json(names).dump();
  const std::vector<std::int64_t> flag(member_queues.begin(),
                                       member_queues.end());
  s = core::FlagAcross(*impl_, queues, members, flag);
  if (!s.ok()) return s;

  core::Engine& e = impl_->engine();
  core::SentRuns sent;
  std::int64_t callback_id = 0;
  bool callback_ready = false;
  // A transaction of its own (not merged with others'): whatever fails in
  // it, nothing of the batch is stored.
  s = e.Write([&](core::Conn& conn) -> Status {
    callback_ready = false;
    auto row = e.AddBatch(conn, {.name = id,
                                 .callback_queue_id = (*cbq)->id(),
                                 .queues = queue_list,
                                 .ttl = core::Micros(spec.retention)});
    if (!row.ok()) return row.status();
    if (!*row) {
      return Status::AlreadyExists(fmt::format(
          "batch '{}' exists already (a batch id is free again once its "
          "batch has been done for its retention)",
          id));
    }
    Status st = core::SendRuns(e, conn, queues, members, sent);
    if (!st.ok()) return st;
    const auto current = (*cbq)->Current();
    const QueueOptions& qo = current->options;
    auto cb_sent =
        e.Send(conn, {.queue_id = (*cbq)->id(),
                      .messages = std::span<const Message>(&callback, 1),
                      .unique_for = core::Micros(qo.unique_for),
                      .grouped = qo.groups != GroupMode::kNone});
    if (!cb_sent.ok()) return cb_sent.status();
    callback_id = (*cb_sent)[0].id;
    // The callback waits for every member but those cancelled at the send
    // (a dependency dead already), which count as cancelled now. They were
    // all sent in this transaction: no other can end one before it
    // commits, so they are linked without DependencyOps::LockParents.
    std::vector<core::DependencyLink> links;
    std::int64_t cancelled = 0;
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (sent.cancelled_at[i]) {
        ++cancelled;
        continue;
      }
      links.push_back({.parent_id = sent.results[i].id,
                       .child_id = callback_id,
                       .parent_queue_id = queues[i]->id(),
                       .child_queue_id = (*cbq)->id(),
                       .on_dead = core::OnDead::kBatch});
    }
    const core::ChildWaits waits{.child_id = callback_id,
                                 .waits = static_cast<int>(links.size())};
    st = e.WriteLinks(conn, links,
                      links.empty()
                          ? std::span<const core::ChildWaits>()
                          : std::span<const core::ChildWaits>(&waits, 1));
    if (!st.ok()) return st;
    const auto total = static_cast<std::int64_t>(members.size());
    st = e.SealBatch(conn, {.batch_id = **row,
                            .callback_id = callback_id,
                            .total = total,
                            .cancelled = cancelled});
    if (!st.ok()) return st;
    if (!links.empty()) return Status::Ok();
    // Every member was cancelled at the send (a dependency dead
    // already): the batch is done now.
    callback_ready = true;
    return core::CountBatchEnd(e, conn, callback_id, {});
  });
  if (!s.ok()) return s;
  core::AfterSendRuns(*impl_, sent);
  if (callback_ready) impl_->hub().Notify((*cbq)->id(), 1);
  if (impl_->BatchPruneDue()) {
    (void)impl_->engine().Write([&](core::Conn& conn) -> Status {
      auto n = e.PruneBatches(conn);
      return n.ok() ? Status::Ok() : n.status();
    });
  }
  BatchSent out{.id = id, .callback_id = callback_id};
  out.members.reserve(sent.results.size());
  for (const SendResult& r : sent.results) out.members.push_back(r.id);
  return out;
}

Result<BatchStatus> Store::GetBatch(std::string_view id) {
  Status s = CheckBatchId(id);
  if (!s.ok()) return s;
  auto r = core::SnapshotRead<std::optional<core::BatchRecord>>(
      *impl_,
      [&](core::Engine& e, core::Conn& conn) { return e.FindBatch(conn, id); });
  if (!r.ok()) return r.status();
  if (!*r) return core::NoSuchBatch(id);
  return core::StatusOf(**r);
}

Result<BatchStatus> Store::CancelBatch(std::string_view id) {
  Status s = CheckBatchId(id);
  if (!s.ok()) return s;
  core::Engine& e = impl_->engine();
  const std::string why = fmt::format("cancelled: batch {} was cancelled", id);
  std::optional<core::BatchRecord> found;
  std::map<std::int64_t, std::string> cancelled_in;  // queue id: name
  core::Released released;
  s = e.Write([&](core::Conn& conn) -> Status {
    cancelled_in.clear();
    released.clear();
    auto r = e.FindBatch(conn, id);
    if (!r.ok()) return r.status();
    found = std::move(*r);
    if (!found || found->done_us != 0) return Status::Ok();
    // Locks in the order of an ack's: the members, the callback, the
    // batch's row (marked last).
    auto pending = e.PendingBatchMembers(conn, found->callback_id);
    if (!pending.ok()) return pending.status();
    // By queue (the list is in queue order), each queue's ids in one call.
    for (std::size_t i = 0; i < pending->size();) {
      std::size_t j = i;
      std::vector<std::int64_t> ids;
      while (j < pending->size() &&
             (*pending)[j].queue_id == (*pending)[i].queue_id) {
        ids.push_back((*pending)[j].id);
        ++j;
      }
      auto n = e.Cancel(
          conn, {.queue_id = (*pending)[i].queue_id, .ids = ids, .error = why});
      if (!n.ok() && n.status().code() != Code::kNotFound) return n.status();
      if (n.ok() && *n > 0) {
        cancelled_in[(*pending)[i].queue_id] = (*pending)[i].queue;
      }
      i = j;
    }
    // Counted here, in the cancel's transaction: the callback is released
    // with it.
    auto ended = e.EndedBatchMembers(conn, found->callback_id);
    if (!ended.ok()) return ended.status();
    for (const core::EndedDependency& d : *ended) {
      auto settled = e.SettleDependency(conn, d);
      if (!settled.ok()) return settled.status();
      if (!*settled) continue;
      released.push_back(d.child_queue_id);
      Status st = core::CountBatchEnd(e, conn, d.child_id, core::EndOf(d));
      if (!st.ok()) return st;
    }
    return e.MarkBatchCancelled(conn, found->id);
  });
  if (!s.ok()) return s;
  if (!found) return core::NoSuchBatch(id);
  core::WakeReleased(*impl_, released);
  if (!cancelled_in.empty()) impl_->results().Ring();
  for (const auto& [queue_id, name] : cancelled_in) {
    // What else waited for the cancelled members follows its policy, and
    // they go on to a dead-letter queue, as after WorkQueue::Cancel.
    auto q = Queue(name);
    if (!q.ok() || q->impl_->id() != queue_id) {
      core::SettleEnded(*impl_, queue_id);
      continue;
    }
    core::AfterAcks(*q, *q->impl_);
    core::ForwardDead(*q->impl_);
  }
  return GetBatch(id);
}

}  // namespace sqlq
