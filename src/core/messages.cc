// WorkQueue's operations on single messages and chosen sets of them: Get,
// ListMessages and the bulk changes (docs/semantics.md, "Finding
// messages" and "Steering messages"). The engines run the statements
// (engines/shared/message_sql.h); this file decides which table, pages and
// checks input.

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "core/columns.h"
#include "core/dependencies.h"
#include "core/errors.h"
#include "core/rows.h"
#include "core/store_impl.h"
#include "core/validate.h"
#include "sqlq/queue.h"

namespace sqlq {

namespace {

using core::Conn;
using core::MessageTable;

// Rows of the queue's part of a table one listing page looks at, at most:
// a page costs about the same whatever its filter.
constexpr int kListScan = 10000;
constexpr int kMaxListMessages = 1000;

MessageTable TableOf(const MessageFilter& f) {
  if (f.state == MessageState::kDead) return MessageTable::kDead;
  if (f.state == MessageState::kArchived) return MessageTable::kArchived;
  return MessageTable::kQueued;
}

Status ValidateFilter(const MessageFilter& f) {
  if (f.min_priority && f.max_priority && *f.min_priority > *f.max_priority) {
    return Status::InvalidArgument(
        fmt::format("min priority {} is above max priority {}", *f.min_priority,
                    *f.max_priority));
  }
  if (f.dedup_key.size() > core::kMaxDedupKey) {
    return Status::InvalidArgument(
        fmt::format("dedup key of {} bytes is longer than {}",
                    f.dedup_key.size(), core::kMaxDedupKey));
  }
  if (f.payload_prefix.size() > kMaxPayloadPrefix) {
    return Status::InvalidArgument(
        fmt::format("payload prefix of {} bytes is longer than {}",
                    f.payload_prefix.size(), kMaxPayloadPrefix));
  }
  if (f.group && f.group->size() > kMaxGroup) {
    return Status::InvalidArgument(fmt::format(
        "group of {} bytes is longer than {}", f.group->size(), kMaxGroup));
  }
  if (f.kind) {
    if (f.kind->empty()) {
      return Status::InvalidArgument("the kind filter is empty: name a kind");
    }
    Status s = core::ValidateKind(*f.kind);
    if (!s.ok()) return s;
  }
  if (f.header) {
    // The rules of a header sent with a message: a filter on a header no
    // message can have is a mistake worth saying.
    Status s = core::ValidateHeaders({{f.header->first, f.header->second}});
    if (!s.ok()) return s.WithContext("header filter");
  }
  if (f.enqueued_after && f.enqueued_before &&
      *f.enqueued_after > *f.enqueued_before) {
    return Status::InvalidArgument(
        "the enqueue-time range ends before it starts");
  }
  return Status::Ok();
}

Status ValidateSelection(const MessageSelection& sel) {
  if (sel.ids.size() > core::kMaxBatch) {
    return Status::TooLarge(fmt::format("{} ids exceed the limit of {}",
                                        sel.ids.size(), core::kMaxBatch));
  }
  for (std::int64_t id : sel.ids) {
    if (id <= 0) {
      return Status::InvalidArgument(
          fmt::format("message id {} is not positive", id));
    }
  }
  return ValidateFilter(sel.filter);
}

// FNV-1a over the filter's fields: a cursor remembers which listing it
// belongs to.
std::uint64_t FilterHash(const MessageFilter& f) {
  std::uint64_t h = 1469598103934665603ULL;
  auto mix = [&](std::string_view bytes) {
    for (unsigned char c : bytes) {
      h ^= c;
      h *= 1099511628211ULL;
    }
    h ^= 0xff;  // field separator
    h *= 1099511628211ULL;
  };
  auto opt = [&](const auto& v) {
    mix(v ? fmt::format("{}", core::Us(*v)) : std::string("-"));
  };
  mix(f.state ? MessageStateName(*f.state) : "-");
  mix(f.min_priority ? std::to_string(*f.min_priority) : "-");
  mix(f.max_priority ? std::to_string(*f.max_priority) : "-");
  mix(f.dedup_key);
  mix(f.group ? "=" + *f.group : "-");
  mix(f.header ? f.header->first : "-");
  mix(f.header ? f.header->second : "-");
  mix(f.kind ? "=" + *f.kind : "-");
  mix(f.payload_prefix);
  opt(f.enqueued_after);
  opt(f.enqueued_before);
  return h;
}

// "<queue id>.<after id>.<filter hash>", hex, with a version prefix.
std::string MakeCursor(std::int64_t queue_id, std::int64_t after,
                       const MessageFilter& f) {
  return fmt::format("m1.{:x}.{:x}.{:016x}", queue_id, after, FilterHash(f));
}

Result<std::int64_t> ParseCursor(std::string_view cursor, std::int64_t queue_id,
                                 const MessageFilter& f) {
  auto bad = [&] {
    return Status::InvalidArgument(
        fmt::format("cursor '{}' is malformed: pass next_cursor as it came",
                    cursor.substr(0, 64)));
  };
  if (cursor.substr(0, 3) != "m1.") return bad();
  std::uint64_t parts[3] = {};
  std::string_view rest = cursor.substr(3);
  for (int i = 0; i < 3; ++i) {
    const auto dot = rest.find('.');
    std::string_view part = i < 2 ? rest.substr(0, dot) : rest;
    if (part.empty() || (i < 2 && dot == std::string_view::npos)) return bad();
    auto [end, ec] =
        std::from_chars(part.data(), part.data() + part.size(), parts[i], 16);
    if (ec != std::errc() || end != part.data() + part.size()) return bad();
    if (i < 2) rest = rest.substr(dot + 1);
  }
  if (parts[1] > static_cast<std::uint64_t>(INT64_MAX)) return bad();
  if (parts[0] != static_cast<std::uint64_t>(queue_id) ||
      parts[2] != FilterHash(f)) {
    return Status::InvalidArgument(
        "the cursor belongs to another listing (another queue or filter)");
  }
  return static_cast<std::int64_t>(parts[1]);
}

Status OnlyInTheQueue(const MessageFilter& f, std::string_view what) {
  if (TableOf(f) != MessageTable::kQueued) {
    return Status::InvalidArgument(fmt::format(
        "{} applies to messages in the queue, not to {}", what,
        MessageStateName(*f.state) == "dead" ? "dead letters"
                                             : "archived messages"));
  }
  return Status::Ok();
}

}  // namespace

std::string_view MessageStateName(MessageState state) {
  switch (state) {
    case MessageState::kReady:
      return "ready";
    case MessageState::kDelayed:
      return "delayed";
    case MessageState::kLeased:
      return "leased";
    case MessageState::kDead:
      return "dead";
    case MessageState::kArchived:
      return "archived";
    case MessageState::kWaiting:
      return "waiting";
  }
  return "ready";
}

Result<MessageState> ParseMessageState(std::string_view name) {
  for (MessageState s :
       {MessageState::kReady, MessageState::kDelayed, MessageState::kLeased,
        MessageState::kDead, MessageState::kArchived, MessageState::kWaiting}) {
    if (MessageStateName(s) == name) return s;
  }
  return Status::InvalidArgument(
      fmt::format("unknown state '{}': expected ready, delayed, leased, "
                  "waiting, dead or archived",
                  name.substr(0, 64)));
}

std::string_view IfDependencyDiesName(IfDependencyDies v) {
  switch (v) {
    case IfDependencyDies::kCancel:
      return "cancel";
    case IfDependencyDies::kRun:
      return "run";
    case IfDependencyDies::kWait:
      return "wait";
  }
  return "cancel";
}

Result<IfDependencyDies> ParseIfDependencyDies(std::string_view name) {
  for (IfDependencyDies v : {IfDependencyDies::kCancel, IfDependencyDies::kRun,
                             IfDependencyDies::kWait}) {
    if (IfDependencyDiesName(v) == name) return v;
  }
  return Status::InvalidArgument(
      fmt::format("unknown policy '{}' for a dependency that dies: expected "
                  "cancel, run or wait",
                  name.substr(0, 64)));
}

std::string_view NackActionName(NackAction action) {
  switch (action) {
    case NackAction::kRetry:
      return "retry";
    case NackAction::kDead:
      return "dead";
    case NackAction::kSnooze:
      return "snooze";
  }
  return "retry";
}

Result<NackAction> ParseNackAction(std::string_view name) {
  for (NackAction a :
       {NackAction::kRetry, NackAction::kDead, NackAction::kSnooze}) {
    if (NackActionName(a) == name) return a;
  }
  return Status::InvalidArgument(
      fmt::format("unknown nack action '{}': expected retry, dead or snooze",
                  name.substr(0, 64)));
}

std::string_view ExpiryActionName(ExpiryAction action) {
  return action == ExpiryAction::kDrop ? "drop" : "dead";
}

Result<ExpiryAction> ParseExpiryAction(std::string_view name) {
  for (ExpiryAction a : {ExpiryAction::kDeadLetter, ExpiryAction::kDrop}) {
    if (ExpiryActionName(a) == name) return a;
  }
  return Status::InvalidArgument(fmt::format(
      "unknown expiry action '{}': expected dead or drop", name.substr(0, 64)));
}

std::string_view GroupModeName(GroupMode mode) {
  switch (mode) {
    case GroupMode::kNone:
      return "none";
    case GroupMode::kFair:
      return "fair";
    case GroupMode::kOrdered:
      return "ordered";
  }
  return "none";
}

Result<GroupMode> ParseGroupMode(std::string_view name) {
  for (GroupMode m :
       {GroupMode::kNone, GroupMode::kFair, GroupMode::kOrdered}) {
    if (GroupModeName(m) == name) return m;
  }
  return Status::InvalidArgument(
      fmt::format("unknown group mode '{}': expected none, fair or ordered",
                  name.substr(0, 64)));
}

Result<MessageInfo> WorkQueue::Get(std::int64_t id) {
  if (id <= 0) {
    return Status::InvalidArgument(
        fmt::format("message id {} is not positive", id));
  }
  const std::int64_t ids[] = {id};
  auto found = core::SnapshotRead<std::optional<MessageInfo>>(
      impl_->store(),
      [&](core::Engine& e, Conn& conn) -> Result<std::optional<MessageInfo>> {
        for (MessageTable t : {MessageTable::kQueued, MessageTable::kDead,
                               MessageTable::kArchived}) {
          auto r = e.FindMessages(
              conn, {.queue_id = impl_->id(), .table = t, .ids = ids});
          if (!r.ok()) return r.status();
          if (r->messages.empty()) continue;
          MessageInfo m = std::move(r->messages[0]);
          if (m.state == MessageState::kWaiting) {
            // What it waits for, in the same snapshot.
            auto deps = e.ListDependencies(conn, id);
            if (!deps.ok()) return deps.status();
            for (const core::DependencyRecord& d : *deps) {
              m.waits_for.push_back(d.parent_id);
              if (d.parked) m.waits_for_dead.push_back(d.parent_id);
            }
          }
          return std::optional<MessageInfo>(std::move(m));
        }
        return std::optional<MessageInfo>();
      });
  if (!found.ok()) return found.status();
  if (!*found) {
    return Status::NotFound(fmt::format(
        "message {} is not in queue '{}' (nor its dead letters or archive)", id,
        name()));
  }
  return std::move(**found);
}

Result<MessageLinks> WorkQueue::Links(std::int64_t id) {
  if (id <= 0) {
    return Status::InvalidArgument(
        fmt::format("message id {} is not positive", id));
  }
  auto links = core::SnapshotRead<std::vector<core::LinkRecord>>(
      impl_->store(), [&](core::Engine& e, Conn& conn) {
        return e.ListLinks(conn, impl_->id(), id, kMaxListMessages + 1);
      });
  if (!links.ok()) return links.status();
  MessageLinks out;
  for (core::LinkRecord& l : *links) {
    if (l.dependent &&
        static_cast<int>(out.dependents.size()) == kMaxListMessages) {
      out.more_dependents = true;
      break;
    }
    (l.dependent ? out.dependents : out.parents)
        .push_back({.queue = std::move(l.queue),
                    .id = l.id,
                    .dead = !l.dependent && l.parked});
  }
  return out;
}

Result<MessagePage> WorkQueue::ListMessages(
    const ListMessagesOptions& options) {
  if (options.limit < 1 || options.limit > kMaxListMessages) {
    return Status::InvalidArgument(fmt::format(
        "limit {} is out of range [1, {}]", options.limit, kMaxListMessages));
  }
  Status s = ValidateFilter(options.filter);
  if (!s.ok()) return s;
  std::int64_t after = 0;
  if (!options.cursor.empty()) {
    auto c = ParseCursor(options.cursor, impl_->id(), options.filter);
    if (!c.ok()) return c.status();
    after = *c;
  }
  auto found = core::SnapshotRead<core::FoundMessages>(
      impl_->store(), [&](core::MessageOps& e, Conn& conn) {
        return e.FindMessages(conn, {.queue_id = impl_->id(),
                                     .table = TableOf(options.filter),
                                     .filter = &options.filter,
                                     .after_id = after,
                                     .limit = options.limit,
                                     .scan = kListScan});
      });
  if (!found.ok()) return found.status();
  MessagePage page;
  page.messages = std::move(found->messages);
  if (static_cast<int>(page.messages.size()) == options.limit) {
    page.next_cursor =
        MakeCursor(impl_->id(), page.messages.back().id, options.filter);
  } else if (found->scanned_to) {
    page.next_cursor =
        MakeCursor(impl_->id(), *found->scanned_to, options.filter);
  }
  return page;
}

Result<MessageCount> WorkQueue::CountMessages(const MessageFilter& filter) {
  Status s = ValidateFilter(filter);
  if (!s.ok()) return s;
  return core::SnapshotRead<MessageCount>(
      impl_->store(), [&](core::Engine& e, Conn& conn) -> Result<MessageCount> {
        auto at = e.Now(conn);
        if (!at.ok()) return at.status();
        auto n = e.CountMessages(conn, {.queue_id = impl_->id(),
                                        .table = TableOf(filter),
                                        .filter = &filter});
        if (!n.ok()) return n.status();
        // Past every message counted, whose enqueue times are at most the
        // clock's now (MessageCount).
        return MessageCount{.count = *n,
                            .at = *at + std::chrono::microseconds(1)};
      });
}

namespace {

// Runs one bulk change as a merged write.
Result<std::int64_t> SteerWrite(core::QueueImpl& q, std::int64_t queue_id,
                                const MessageSelection& sel,
                                core::SteerAction action, std::int64_t at_us,
                                std::int32_t priority) {
  return core::MergedWrite<std::int64_t>(
      q.store(), [&](core::MessageOps& e, Conn& c) {
        return e.SteerMessages(c, {.queue_id = queue_id,
                                   .table = TableOf(sel.filter),
                                   .action = action,
                                   .filter = &sel.filter,
                                   .ids = sel.ids,
                                   .at_us = at_us,
                                   .priority = priority});
      });
}

}  // namespace

Result<std::int64_t> WorkQueue::Delete(const MessageSelection& selection) {
  Status s = ValidateSelection(selection);
  if (!s.ok()) return s;
  auto deleted = SteerWrite(*impl_, impl_->id(), selection,
                            core::SteerAction::kDelete, 0, 0);
  // What waited for them follows its policy.
  if (deleted.ok() && *deleted > 0 &&
      TableOf(selection.filter) == MessageTable::kQueued) {
    core::SettleEnded(impl_->store(), impl_->id());
  }
  return deleted;
}

Result<std::int64_t> WorkQueue::RetryNow(const MessageSelection& selection) {
  Status s = ValidateSelection(selection);
  if (!s.ok()) return s;
  const MessageTable table = TableOf(selection.filter);
  if (table == MessageTable::kArchived) {
    return Status::InvalidArgument(
        "retry applies to messages in the queue and dead letters, not to "
        "archived messages");
  }
  Result<std::int64_t> changed = 0;
  if (table == MessageTable::kQueued) {
    changed = SteerWrite(*impl_, impl_->id(), selection,
                         core::SteerAction::kMakeReady, 0, 0);
  } else if (!selection.ids.empty()) {
    changed = Redrive(selection.ids);
    return changed;  // Redrive wakes the queue's waiting claims
  } else {
    // Dead letters chosen by a filter: their ids, page by page, then
    // redriven in batches.
    std::vector<std::int64_t> ids;
    std::int64_t after = 0;
    for (;;) {
      auto page = core::SnapshotRead<core::FoundMessages>(
          impl_->store(), [&](core::MessageOps& e, Conn& conn) {
            return e.FindMessages(conn, {.queue_id = impl_->id(),
                                         .table = MessageTable::kDead,
                                         .filter = &selection.filter,
                                         .after_id = after,
                                         .limit = kMaxListMessages,
                                         .scan = kListScan});
          });
      if (!page.ok()) return page.status();
      for (const MessageInfo& m : page->messages) ids.push_back(m.id);
      if (static_cast<int>(page->messages.size()) == kMaxListMessages) {
        after = page->messages.back().id;
      } else if (page->scanned_to) {
        after = *page->scanned_to;
      } else {
        break;
      }
    }
    std::int64_t moved = 0;
    for (std::size_t at = 0; at < ids.size(); at += core::kMaxBatch) {
      const std::size_t n = std::min(core::kMaxBatch, ids.size() - at);
      auto r = Redrive(std::span<const std::int64_t>(ids.data() + at, n));
      if (!r.ok()) return r.status();
      moved += *r;
    }
    return moved;
  }
  if (changed.ok() && *changed > 0) {
    impl_->store().hub().Notify(impl_->id(), *changed);
  }
  return changed;
}

Result<std::int64_t> WorkQueue::Reschedule(const MessageSelection& selection,
                                           Timestamp at) {
  Status s = ValidateSelection(selection);
  if (!s.ok()) return s;
  s = OnlyInTheQueue(selection.filter, "reschedule");
  if (!s.ok()) return s;
  const Timestamp now = impl_->store().Now();
  if (at > now + kMaxDelay || at < now - kMaxDelay) {
    return Status::InvalidArgument(
        fmt::format("reschedule time is more than {} days from now",
                    kMaxDelay.count() / 86400000));
  }
  auto changed = SteerWrite(*impl_, impl_->id(), selection,
                            core::SteerAction::kReschedule, core::Us(at), 0);
  if (changed.ok() && *changed > 0 && at <= now) {
    impl_->store().hub().Notify(impl_->id(), *changed);
  }
  return changed;
}

Result<std::int64_t> WorkQueue::Cancel(const MessageSelection& selection) {
  Status s = ValidateSelection(selection);
  if (!s.ok()) return s;
  s = OnlyInTheQueue(selection.filter, "cancel");
  if (!s.ok()) return s;
  const auto unique_for = core::Micros(impl_->Current()->options.unique_for);
  // The chosen messages page by page, each page moved as it is found, in
  // one transaction.
  auto moved = core::MergedWrite<std::int64_t>(
      impl_->store(),
      [&](core::MessageOps& e, Conn& conn) -> Result<std::int64_t> {
        std::int64_t total = 0, after = 0;
        for (;;) {
          auto page = e.FindMessages(
              conn, {.queue_id = impl_->id(),
                     .table = MessageTable::kQueued,
                     .filter = &selection.filter,
                     .ids = selection.ids,
                     .after_id = after,
                     .limit = static_cast<int>(core::kMaxBatch)});
          if (!page.ok()) return page.status();
          std::vector<std::int64_t> ids;
          for (const MessageInfo& m : page->messages) ids.push_back(m.id);
          if (ids.empty()) break;
          auto n = e.Cancel(conn, {.queue_id = impl_->id(),
                                   .ids = ids,
                                   .error = kCancelled,
                                   .unique_for = unique_for});
          if (!n.ok()) return n.status();
          total += *n;
          if (ids.size() < core::kMaxBatch) break;
          after = ids.back();
        }
        return total;
      });
  if (moved.ok() && *moved > 0) {
    // A group's next message, or a place under a limit, may be free now.
    core::AfterAcks(*this, *impl_);
    core::ForwardDead(*impl_);
  }
  return moved;
}

Result<std::int64_t> WorkQueue::SetPriority(const MessageSelection& selection,
                                            std::int32_t priority) {
  Status s = ValidateSelection(selection);
  if (!s.ok()) return s;
  s = OnlyInTheQueue(selection.filter, "a priority change");
  if (!s.ok()) return s;
  return SteerWrite(*impl_, impl_->id(), selection,
                    core::SteerAction::kSetPriority, 0, priority);
}

}  // namespace sqlq
