#include "core/schedules.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <deque>
#include <utility>

#include "core/errors.h"
#include "core/receipt.h"
#include "core/rows.h"
#include "core/store_impl.h"
#include "core/validate.h"
#include "sqlq/store.h"

namespace sqlq::core {

namespace {

// "2026-03-29T01:00:00Z": a tick's time (whole seconds) in UTC.
std::string TickTime(Timestamp t) {
  const auto secs = static_cast<std::time_t>(
      std::chrono::floor<std::chrono::seconds>(t).time_since_epoch().count());
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec);
}

}  // namespace

DueTicks TicksDue(const Cron& cron, const Zone& zone, const ScheduleInfo& info,
                  Timestamp now) {
  DueTicks due;
  const auto keep = static_cast<std::size_t>(info.options.catch_up);
  std::deque<Timestamp> missed;  // the latest `keep` missed ticks
  std::int64_t walked = 0;
  std::optional<Timestamp> t = info.next_tick;
  while (t && *t <= now && walked < kMaxWalk) {
    ++walked;
    if (now - *t <= kMisfireGrace) {
      due.send.push_back(*t);  // on time
    } else {
      missed.push_back(*t);
      if (missed.size() > keep) {
        missed.pop_front();
        ++due.skipped;
      }
    }
    t = cron.Next(*t, zone);
  }
  due.next = t;
  // The missed ticks kept go first: they are older.
  due.send.insert(due.send.begin(), missed.begin(), missed.end());
  return due;
}

Message TickMessage(const ScheduleInfo& info, Timestamp tick) {
  Message m = info.options.message;
  m.headers["sqlq-schedule"] = info.name;
  m.headers["sqlq-tick"] = TickTime(tick);
  m.dedup_key = fmt::format("sqlq-schedule:{}:{}", info.name, Us(tick));
  return m;
}

Result<std::optional<Timestamp>> ValidateSchedule(std::string_view name,
                                                  const ScheduleOptions& o,
                                                  Timestamp now) {
  Status s = ValidateName("schedule", name);
  if (!s.ok()) return s;
  s = ValidateName("queue", o.queue);
  if (!s.ok()) return s;
  auto cron = Cron::Parse(o.cron);
  if (!cron.ok()) return cron.status();
  // "localtime" is each host's own zone (the tz database links it to
  // /etc/localtime): the same schedule would fire at other instants on
  // servers set up differently, and move when a host's zone is changed.
  // A schedule stored with it before is still read and ticks as it did
  // (Zone::Load takes it); only a new or replaced one must name a zone.
  if (o.time_zone == "localtime") {
    return Status::InvalidArgument(
        "time zone 'localtime' means each server's own zone, so the "
        "schedule would fire at different times on different hosts: name "
        "a zone of the tz database, such as UTC or Europe/Berlin");
  }
  auto zone = Zone::Load(o.time_zone);
  if (!zone.ok()) return zone.status();
  if (o.catch_up < 0 || o.catch_up > kMaxCatchUp) {
    return Status::InvalidArgument(fmt::format(
        "catch_up {} is out of range [0, {}]", o.catch_up, kMaxCatchUp));
  }
  if (o.message.delay.count() != 0 || o.message.run_at ||
      !o.message.dedup_key.empty()) {
    return Status::InvalidArgument(
        "a schedule's message takes no delay, run_at or dedup key (each "
        "tick's dedup key is the schedule's)");
  }
  for (const char* h : {"sqlq-schedule", "sqlq-tick"}) {
    if (o.message.headers.count(h) != 0) {
      return Status::InvalidArgument(
          fmt::format("the header {} is the schedule's own", h));
    }
  }
  // A tick's message as it will be sent, against the largest payload any
  // queue takes (the queue's own limit is checked at each tick).
  ScheduleInfo probe{.name = std::string(name), .options = o};
  s = ValidateMessage(TickMessage(probe, now), kMaxPayloadLimit, now);
  if (!s.ok()) return s;
  auto first = cron->Next(now, *zone);
  if (!first) {
    return Status::InvalidArgument(
        fmt::format("cron '{}' never fires in the next five years", o.cron));
  }
  return first;
}

Result<ScheduleRun> RunSchedulesOnce(StoreImpl& store,
                                     const std::string& holder) {
  ScheduleRun run;
  struct Seen {
    std::vector<ScheduleRecord> schedules;
    Timestamp now;
  };
  auto seen = SnapshotRead<Seen>(store, [](Engine& e, Conn& c) -> Result<Seen> {
    auto list = e.ListSchedules(c);
    if (!list.ok()) return list.status();
    auto now = e.Now(c);
    if (!now.ok()) return now.status();
    return Seen{std::move(*list), *now};
  });
  if (!seen.ok()) return seen.status();
  const Timestamp now = seen->now;
  // Without a schedule that ticks there is nothing to lead: no lease is
  // taken, so an idle database gets no write a second from each server.
  bool active = false;
  for (const ScheduleRecord& r : seen->schedules) {
    active = active || (!r.info.paused && r.info.next_tick);
  }
  if (active) {
    auto leader = MergedWrite<bool>(store, [&](ScheduleOps& e, Conn& c) {
      return e.TakeSchedulerLease(
          c, {.holder = holder, .lease = Micros(Store::kSchedulerLease)});
    });
    if (!leader.ok()) return leader.status();
    run.leader = *leader;
  }
  store.set_scheduler_leader(run.leader);
  auto note_next = [&](const std::optional<Timestamp>& t) {
    if (t && (!run.next_tick || *t < *run.next_tick)) run.next_tick = t;
  };
  for (ScheduleRecord& r : seen->schedules) {
    ScheduleInfo& info = r.info;
    if (info.paused || !info.next_tick) continue;
    if (!run.leader || *info.next_tick > now) {
      note_next(info.next_tick);
      continue;
    }
    auto cron = Cron::Parse(info.options.cron);
    auto zone = Zone::Load(info.options.time_zone);
    if (!cron.ok() || !zone.ok()) continue;  // checked when it was made
    DueTicks due = TicksDue(*cron, *zone, info, now);
    std::vector<Message> messages;
    for (Timestamp t : due.send) messages.push_back(TickMessage(info, t));
    std::int64_t queue_id = 0;
    std::int64_t sent = 0;
    Status s = store.batcher().Run([&](Conn& c) -> Status {
      Engine& e = store.engine();
      AdvanceScheduleParams a{
          .id = r.id,
          .from_us = Us(*info.next_tick),
          .next_us = due.next ? Us(*due.next) : 0,
          .last_us = due.send.empty() ? 0 : Us(due.send.back()),
          .skipped = due.skipped};
      std::string error;
      std::optional<QueueRecord> q;
      if (!messages.empty()) {
        auto found = e.GetQueue(c, info.options.queue);
        if (found.ok()) {
          q = std::move(*found);
          for (const Message& m : messages) {
            Status valid =
                ValidateMessage(m, q->info.options.max_payload_bytes, now);
            if (!valid.ok()) error = valid.message();
          }
        } else if (found.status().code() == Code::kNotFound) {
          error = found.status().message();
        } else {
          return found.status();
        }
      }
      if (!error.empty()) {
        // Not sent: the ticks count as skipped, and say why.
        a.skipped += static_cast<std::int64_t>(messages.size());
        a.last_us = 0;
        a.last_error = error;
        q.reset();
      } else {
        a.sent = static_cast<std::int64_t>(messages.size());
      }
      auto moved = e.AdvanceSchedule(c, a);
      if (!moved.ok()) return moved.status();
      // Another pass moved it first, or it was paused or dropped since
      // this pass read it: that pass sends these ticks, or nobody does.
      if (!*moved || !q) return Status::Ok();
      const QueueOptions& qo = q->info.options;
      auto r2 = e.Send(c, {.queue_id = q->id,
                           .messages = messages,
                           .unique_for = Micros(qo.unique_for),
                           .grouped = qo.groups != GroupMode::kNone});
      if (!r2.ok()) return r2.status();
      queue_id = q->id;
      for (const SendResult& one : *r2) sent += one.duplicate ? 0 : 1;
      run.sent += static_cast<std::int64_t>(messages.size());
      run.skipped += a.skipped;
      return Status::Ok();
    });
    if (!s.ok()) return s;
    if (queue_id != 0 && sent > 0) store.hub().Notify(queue_id, sent);
    note_next(due.next);
  }
  return run;
}

std::string NewSchedulerHolder() {
  char host[64] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return fmt::format("{}:{}:{:08x}", std::string(host).substr(0, 32), getpid(),
                     static_cast<std::uint32_t>(NewLeaseToken()));
}

std::chrono::steady_clock::duration SchedulerPass(StoreImpl& store) {
  auto run = RunSchedulesOnce(store, store.scheduler_holder());
  // A pass a second renews the lease (it lasts kSchedulerLease) and sees
  // new schedules; sooner when a tick is due sooner.
  auto wait = std::chrono::milliseconds(1000);
  if (run.ok() && run->leader && run->next_tick) {
    const auto in = std::chrono::ceil<std::chrono::milliseconds>(
        *run->next_tick - store.Now());
    wait = std::clamp(in, std::chrono::milliseconds(1), wait);
  }
  return wait;
}

}  // namespace sqlq::core

namespace sqlq {

namespace {

ScheduleInfo Strip(core::ScheduleRecord r) { return std::move(r.info); }

Result<ScheduleInfo> Find(core::StoreImpl& store, std::string_view name) {
  auto list = core::SnapshotRead<std::vector<core::ScheduleRecord>>(
      store,
      [](core::ScheduleOps& e, core::Conn& c) { return e.ListSchedules(c); });
  if (!list.ok()) return list.status();
  for (auto& r : *list) {
    if (r.info.name == name) return Strip(std::move(r));
  }
  return core::ScheduleMissing(name);
}

}  // namespace

Result<ScheduleInfo> Store::CreateSchedule(std::string_view name,
                                           const ScheduleOptions& options) {
  auto now = core::SnapshotRead<Timestamp>(
      *impl_, [](core::Transactions& e, core::Conn& c) { return e.Now(c); });
  if (!now.ok()) return now.status();
  auto first = core::ValidateSchedule(name, options, *now);
  if (!first.ok()) return first.status();
  ScheduleInfo info{
      .name = std::string(name), .options = options, .next_tick = *first};
  auto made = core::MergedWrite<std::int64_t>(
      *impl_, [&](core::Engine& e, core::Conn& c) -> Result<std::int64_t> {
        auto q = e.GetQueue(c, options.queue);
        if (!q.ok()) return q.status();
        return e.CreateSchedule(c, info);
      });
  if (!made.ok()) return made.status();
  return Find(*impl_, name);
}

Result<ScheduleInfo> Store::GetSchedule(std::string_view name) {
  Status s = core::ValidateName("schedule", name);
  if (!s.ok()) return s;
  return Find(*impl_, name);
}

Result<std::vector<ScheduleInfo>> Store::ListSchedules() {
  auto list = core::SnapshotRead<std::vector<core::ScheduleRecord>>(
      *impl_,
      [](core::ScheduleOps& e, core::Conn& c) { return e.ListSchedules(c); });
  if (!list.ok()) return list.status();
  std::vector<ScheduleInfo> out;
  for (auto& r : *list) out.push_back(Strip(std::move(r)));
  return out;
}

namespace {

Status SetPaused(core::StoreImpl& store, std::string_view name, bool paused) {
  Status s = core::ValidateName("schedule", name);
  if (!s.ok()) return s;
  return store.batcher().Run([&](core::Conn& c) -> Status {
    core::Engine& e = store.engine();
    std::int64_t next_us = 0;
    if (!paused) {
      // Resumed: from its first tick after now.
      auto list = e.ListSchedules(c);
      if (!list.ok()) return list.status();
      auto now = e.Now(c);
      if (!now.ok()) return now.status();
      for (const auto& r : *list) {
        if (r.info.name != name) continue;
        auto cron = core::Cron::Parse(r.info.options.cron);
        auto zone = core::Zone::Load(r.info.options.time_zone);
        if (!cron.ok()) return cron.status();
        if (!zone.ok()) return zone.status();
        auto next = cron->Next(*now, *zone);
        next_us = next ? core::Us(*next) : 0;
      }
    }
    return e.SetSchedulePaused(
        c, {.name = name, .paused = paused, .next_us = next_us});
  });
}

}  // namespace

Status Store::PauseSchedule(std::string_view name) {
  return SetPaused(*impl_, name, true);
}

Status Store::ResumeSchedule(std::string_view name) {
  return SetPaused(*impl_, name, false);
}

Status Store::DropSchedule(std::string_view name) {
  Status s = core::ValidateName("schedule", name);
  if (!s.ok()) return s;
  return impl_->batcher().Run([&](core::Conn& c) -> Status {
    return impl_->engine().DropSchedule(c, name);
  });
}

Result<ScheduleRun> Store::RunSchedules() {
  return core::RunSchedulesOnce(*impl_, impl_->scheduler_holder());
}

bool Store::HoldsSchedulerLease() const { return impl_->scheduler_leader(); }

}  // namespace sqlq
