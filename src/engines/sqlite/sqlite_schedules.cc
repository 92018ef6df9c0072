// SQLite engine: the rows of schedules and of the scheduler lease
// (core/schedules.cc decides what to send).

#include "core/errors.h"
#include "core/rows.h"
#include "engines/sqlite/sqlite_engine_impl.h"

namespace sqlq::engines::sqlite {

Result<std::int64_t> SqliteEngine::CreateSchedule(Conn& c,
                                                  const ScheduleInfo& info) {
  SqliteConn& conn = Sql(c);
  const ScheduleOptions& o = info.options;
  SQLQ_PREPARE(st, conn, R"sql(
    INSERT INTO sqlq_schedules (name, cron, time_zone, queue, payload,
      priority, headers, grp, catch_up, paused, next_us, created_us)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
    ON CONFLICT (name) DO NOTHING)sql");
  const std::string headers = o.message.headers.empty()
                                  ? std::string()
                                  : core::EncodeHeaders(o.message.headers);
  st.BindText(1, info.name)
      .BindText(2, o.cron)
      .BindText(3, o.time_zone)
      .BindText(4, o.queue)
      .BindBlob(5, o.message.payload)
      .Bind(6, o.message.priority)
      .BindTextOrNull(7, headers)
      .BindTextOrNull(8, o.message.group)
      .Bind(9, o.catch_up)
      .Bind(10, info.paused ? 1 : 0)
      .Bind(11, info.next_tick ? Us(*info.next_tick) : 0)
      .Bind(12, Us(clock_->Now()));
  Status s = st.Run("create schedule");
  if (!s.ok()) return s;
  if (conn.changes() == 0) {
    return Status::AlreadyExists("schedule '" + info.name + "' already exists");
  }
  return sqlite3_last_insert_rowid(conn.db());
}

Result<std::vector<core::ScheduleRecord>> SqliteEngine::ListSchedules(Conn& c) {
  static const std::string sql = std::string("SELECT ") +
                                 core::kScheduleColumns +
                                 " FROM sqlq_schedules ORDER BY name";
  SqliteConn& conn = Sql(c);
  SQLQ_PREPARE(st, conn, sql.c_str());
  return st.All([](const Stmt& r) { return core::DecodeSchedule(r); },
                "list schedules");
}

Status SqliteEngine::DropSchedule(Conn& c, std::string_view name) {
  SqliteConn& conn = Sql(c);
  SQLQ_PREPARE(st, conn, "DELETE FROM sqlq_schedules WHERE name = ?1");
  st.BindText(1, name);
  Status s = st.Run("drop schedule");
  if (!s.ok()) return s;
  if (conn.changes() == 0) return core::ScheduleMissing(name);
  return Status::Ok();
}

Status SqliteEngine::SetSchedulePaused(Conn& c, std::string_view name,
                                       bool paused, std::int64_t next_us) {
  SqliteConn& conn = Sql(c);
  SQLQ_PREPARE(st, conn, R"sql(
    UPDATE sqlq_schedules SET paused = ?1,
      next_us = CASE WHEN ?1 = 1 THEN next_us ELSE ?2 END
    WHERE name = ?3)sql");
  st.Bind(1, paused ? 1 : 0).Bind(2, next_us).BindText(3, name);
  Status s = st.Run(paused ? "pause schedule" : "resume schedule");
  if (!s.ok()) return s;
  if (conn.changes() == 0) return core::ScheduleMissing(name);
  return Status::Ok();
}

Result<bool> SqliteEngine::TakeSchedulerLease(Conn& c, std::string_view holder,
                                              core::Micros lease) {
  SqliteConn& conn = Sql(c);
  const std::int64_t now = Us(clock_->Now());
  SQLQ_PREPARE(st, conn, R"sql(
    UPDATE sqlq_scheduler SET holder = ?1, until_us = ?2
    WHERE id = 1 AND (holder = ?1 OR until_us <= ?3))sql");
  st.BindText(1, holder).Bind(2, now + lease.count()).Bind(3, now);
  Status s = st.Run("take the scheduler lease");
  if (!s.ok()) return s;
  return conn.changes() > 0;
}

Result<bool> SqliteEngine::AdvanceSchedule(Conn& c,
                                           const core::ScheduleAdvance& a) {
  SqliteConn& conn = Sql(c);
  SQLQ_PREPARE(st, conn, R"sql(
    UPDATE sqlq_schedules SET next_us = ?1,
      last_us = CASE WHEN ?2 = 0 THEN last_us ELSE ?2 END,
      sent = sent + ?3, skipped = skipped + ?4,
      last_error = CASE WHEN ?5 = 1 THEN last_error ELSE ?6 END
    WHERE id = ?7 AND next_us = ?8 AND paused = 0)sql");
  const bool keep_error = a.last_error.empty() && a.sent == 0;
  st.Bind(1, a.next_us)
      .Bind(2, a.last_us)
      .Bind(3, a.sent)
      .Bind(4, a.skipped)
      .Bind(5, keep_error ? 1 : 0)
      .BindTextOrNull(6, a.last_error)
      .Bind(7, a.id)
      .Bind(8, a.from_us);
  Status s = st.Run("advance schedule");
  if (!s.ok()) return s;
  return conn.changes() > 0;
}

}  // namespace sqlq::engines::sqlite
