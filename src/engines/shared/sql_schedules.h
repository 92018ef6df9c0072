// SqlEngine (sql_engine.h): the rows of schedules and of the scheduler
// lease (core/schedules.cc decides what to send), the same on PostgreSQL
// and MariaDB. Included only where an engine instantiates SqlEngine<D>.

#ifndef SQLQ_ENGINES_SHARED_SQL_SCHEDULES_H_
#define SQLQ_ENGINES_SHARED_SQL_SCHEDULES_H_

#include <string>

#include "core/columns.h"
#include "core/errors.h"
#include "core/rows.h"
#include "engines/shared/sql_engine.h"

namespace sqlq::engines::shared {

template <class D>
Result<std::int64_t> SqlEngine<D>::CreateSchedule(core::Conn& c,
                                                  const ScheduleInfo& info) {
  DConn& conn = Native(c);
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  static const std::string kSql = D::Statement(R"sql(
    INSERT INTO sqlq_schedules (name, cron, time_zone, queue, payload,
      priority, headers, grp, catch_up, paused, next_us, created_us)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?))sql") +
                                  D::kInsertNameTail;
  const ScheduleOptions& o = info.options;
  Params p;
  p.Text(info.name)
      .Text(o.cron)
      .Text(o.time_zone)
      .Text(o.queue)
      .Payload(o.message.payload)
      .Int(o.message.priority);
  const std::string headers = core::EncodeMessageHeaders(o.message);
  if (headers.empty()) {
    p.Null();
  } else {
    p.Text(headers);
  }
  if (o.message.group.empty()) {
    p.Null();
  } else {
    p.Bytes(o.message.group);
  }
  p.Int(o.catch_up)
      .Int(info.paused ? 1 : 0)
      .Int(info.next_tick ? core::Us(*info.next_tick) : 0)
      .Int(*now);
  auto id = D::InsertName(conn, kSql, p, "create schedule");
  if (!id.ok()) return id.status();
  if (!*id) {
    return Status::AlreadyExists("schedule '" + info.name + "' already exists");
  }
  return **id;
}

template <class D>
Result<std::vector<core::ScheduleRecord>> SqlEngine<D>::ListSchedules(
    core::Conn& c) {
  static const std::string kSql =
      D::Statement(std::string("SELECT ") + core::kScheduleColumns +
                   " FROM sqlq_schedules ORDER BY name");
  auto rows = Native(c).Run(kSql, Params(), "list schedules");
  if (!rows.ok()) return rows.status();
  return core::DecodeAll(*rows,
                         [](const auto& r) { return core::DecodeSchedule(r); });
}

template <class D>
Status SqlEngine<D>::DropSchedule(core::Conn& c, std::string_view name) {
  static const std::string kSql =
      D::Statement("DELETE FROM sqlq_schedules WHERE name = ?");
  auto rows = Native(c).Run(kSql, Params().Text(name), "drop schedule");
  if (!rows.ok()) return rows.status();
  if (rows->affected() == 0) return core::ScheduleMissing(name);
  return Status::Ok();
}

template <class D>
Status SqlEngine<D>::SetSchedulePaused(core::Conn& c,
                                       const core::SetSchedulePausedParams& p) {
  const auto& [name, paused, next_us] = p;
  DConn& conn = Native(c);
  static const std::string kPause =
      D::Statement("UPDATE sqlq_schedules SET paused = 1 WHERE name = ?");
  static const std::string kResume = D::Statement(
      "UPDATE sqlq_schedules SET paused = 0, next_us = ? WHERE name = ?");
  auto rows = paused ? conn.Run(kPause, Params().Text(name), "pause schedule")
                     : conn.Run(kResume, Params().Int(next_us).Text(name),
                                "resume schedule");
  if (!rows.ok()) return rows.status();
  if (rows->affected() > 0) return Status::Ok();
  // MariaDB counts rows changed: a schedule paused twice is there.
  static const std::string kThere =
      D::Statement("SELECT 1 FROM sqlq_schedules WHERE name = ?");
  auto there = conn.Run(kThere, Params().Text(name), "find schedule");
  if (!there.ok()) return there.status();
  if (there->size() == 0) return core::ScheduleMissing(name);
  return Status::Ok();
}

template <class D>
Result<bool> SqlEngine<D>::TakeSchedulerLease(
    core::Conn& c, const core::TakeSchedulerLeaseParams& p) {
  const auto& [holder, lease] = p;
  DConn& conn = Native(c);
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  static const std::string kTake = D::Statement(R"sql(
    UPDATE sqlq_scheduler SET holder = ?, until_us = ?
    WHERE id = 1 AND (holder = ? OR until_us <= ?))sql");
  auto taken = conn.Run(
      kTake,
      Params().Text(holder).Int(*now + lease.count()).Text(holder).Int(*now),
      "take the scheduler lease");
  if (!taken.ok()) return taken.status();
  if (taken->affected() > 0) return true;
  // Not changed: another's live lease, or (MariaDB counts rows changed)
  // ours renewed to the same end.
  static const std::string kHolder =
      D::Statement("SELECT holder FROM sqlq_scheduler WHERE id = 1");
  auto rows = conn.Run(kHolder, Params(), "read the scheduler lease");
  if (!rows.ok()) return rows.status();
  return rows->size() > 0 && rows->Bytes(0, 0) == holder;
}

template <class D>
Result<bool> SqlEngine<D>::AdvanceSchedule(
    core::Conn& c, const core::AdvanceScheduleParams& a) {
  static const std::string kSql = D::Statement(R"sql(
    UPDATE sqlq_schedules SET next_us = ?,
      last_us = CASE WHEN ? = 1 THEN ? ELSE last_us END,
      sent = sent + ?, skipped = skipped + ?,
      last_error = CASE WHEN ? = 1 THEN last_error ELSE ? END
    WHERE id = ? AND next_us = ? AND paused = 0)sql");
  const bool keep_error = a.last_error.empty() && a.sent == 0;
  Params p;
  p.Int(a.next_us).Int(a.last_us != 0 ? 1 : 0).Int(a.last_us);
  p.Int(a.sent).Int(a.skipped);
  p.Int(keep_error ? 1 : 0);
  if (a.last_error.empty()) {
    p.Null();
  } else {
    p.Text(a.last_error);
  }
  p.Int(a.id).Int(a.from_us);
  auto rows = Native(c).Run(kSql, p, "advance schedule");
  if (!rows.ok()) return rows.status();
  return rows->affected() > 0;
}

}  // namespace sqlq::engines::shared

#endif  // SQLQ_ENGINES_SHARED_SQL_SCHEDULES_H_
