// SqlEngine (sql_engine.h): queues and the rows that name things, the
// transaction's clock and counters, the share lock on a queue's row,
// receipts refused, and the listing and pruning of dead letters and
// archive. Included only where an engine
// instantiates SqlEngine<D>.

#ifndef SQLQ_ENGINES_SHARED_SQL_QUEUE_H_
#define SQLQ_ENGINES_SHARED_SQL_QUEUE_H_

#include <fmt/format.h>

#include "core/errors.h"
#include "core/rows.h"
#include "engines/shared/message_sql.h"
#include "engines/shared/sql_engine.h"

namespace sqlq::engines::shared {

template <class D>
Result<std::int64_t> SqlEngine<D>::NowUs(DConn& conn) {
  if (clock_) return core::Us(clock_->Now());
  if (conn.tx_now_us) return *conn.tx_now_us;
  auto rows = conn.Run(D::kNowSql, Params(), "read the database clock");
  if (!rows.ok()) return rows.status();
  conn.tx_now_us = rows->Int(0, 0);
  return *conn.tx_now_us;
}

template <class D>
Status SqlEngine<D>::CheckQueue(DConn& conn, std::int64_t queue_id, bool lock) {
  if (conn.known_queues.contains(queue_id)) return Status::Ok();
  static const std::string kLook =
      D::Statement("SELECT 1 FROM sqlq_queues WHERE id = ?");
  static const std::string kLock(D::kLockQueue);
  lock = lock && !conn.read_only;
  auto rows =
      conn.Run(lock ? kLock : kLook, Params().Int(queue_id), "look up queue");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::QueueGone(queue_id);
  // Remembered only once locked: an unlocked look may be repeated by a
  // later operation of the transaction that wants the lock.
  if (lock) {
    conn.known_queues.insert(queue_id);
    // The flag as of this lock (DependencyOps::FlagDependents says why
    // that is late enough).
    conn.flags_read.insert(queue_id);
    if (rows->Int(0, 1) != 0) conn.dependent_queues.insert(queue_id);
    // The lock read the database's clock too: NowUs takes it from here.
    if (!clock_ && !conn.tx_now_us) conn.tx_now_us = rows->Int(0, 0);
  }
  return Status::Ok();
}

template <class D>
Status SqlEngine<D>::CheckKind(DConn& conn, std::int64_t id,
                               std::string_view kind) {
  if (conn.known_queues.contains(id)) return Status::Ok();
  Status s = CheckQueue(conn, id);
  if (s.code() == Code::kNotFound) return core::KindGone(kind, id);
  return s;
}

template <class D>
Result<std::int64_t> SqlEngine<D>::CheckedNow(DConn& conn,
                                              std::int64_t queue_id) {
  Status s = CheckQueue(conn, queue_id);
  if (!s.ok()) return s;
  return NowUs(conn);
}

template <class D>
Result<std::int64_t> SqlEngine<D>::Redrive(core::Conn& c,
                                           const core::RedriveParams& p) {
  DConn& conn = Native(c);
  const std::int64_t to = p.to_queue_id != 0 ? p.to_queue_id : p.queue_id;
  auto now = CheckedNow(conn, p.queue_id);
  if (!now.ok()) return now.status();
  if (to != p.queue_id) {
    Status s = CheckQueue(conn, to);
    if (!s.ok()) return s;
  }
  return MoveDeadLetters(conn, p, to, *now);
}

template <class D>
Status SqlEngine<D>::AddCounters(DConn& conn, std::int64_t queue_id,
                                 const core::QueueCounters& d) {
  if (conn.DeferCounters(queue_id, d)) return Status::Ok();
  return WriteCounters(conn, queue_id, d);
}

template <class D>
Status SqlEngine<D>::Missing(DConn& conn, std::string_view name,
                             std::string_view want) {
  auto rows = conn.Run(D::kKindOfName, Params().Text(name), "look up name");
  if (!rows.ok()) return rows.status();
  if (rows->size() > 0) return core::NotA(name, rows->Bytes(0, 0), want);
  return core::NotA(name, std::nullopt, want);
}

template <class D>
Status SqlEngine<D>::Taken(DConn& conn, std::string_view name) {
  auto rows = conn.Run(D::kKindOfName, Params().Text(name), "look up name");
  if (!rows.ok()) return rows.status();
  // Dropped again since our insert saw it: taken all the same.
  if (rows->size() == 0) return core::NameTaken(name, std::nullopt);
  return core::NameTaken(name, rows->Bytes(0, 0));
}

// A queue's options, in the order CreateQueue's and AlterQueue's
// statements take them.
template <class Params>
Params& AppendOptions(Params& p, const QueueOptions& o) {
  return p.Int(o.max_attempts)
      .Int(core::Us(o.lease))
      .Int(core::Us(o.backoff_base))
      .Int(core::Us(o.backoff_max))
      .Int(o.archive ? 1 : 0)  // PostgreSQL reads '1' and '0' as booleans
      .Int(core::Us(o.retention))
      .Int(static_cast<std::int64_t>(o.max_payload_bytes))
      .Int(core::Us(o.dead_retention))
      .Int(core::Us(o.unique_for))
      .Int(core::LimitColumn(o.max_leased))
      .Int(core::RateColumn(o.rate_limit))
      .Int(core::LimitColumn(o.rate_burst))
      .Int(core::LimitColumn(o.group_limit))
      .Text(o.dead_letter_queue)
      .TextOrNull(core::EncodeHeaders(o.labels));
}

// The sqlq_queues row of a queue, and of a ring or rotation, as
// D::InsertName runs them (after them D::kInsertNameTail: no row back when
// the name is taken, on the engines whose failed statement would abort the
// transaction; MariaDB's duplicate key leaves it usable).
inline constexpr const char* kInsertQueueSql = R"sql(
  INSERT INTO sqlq_queues (name, max_attempts, lease_us, backoff_base_us,
    backoff_max_us, archive, retention_us, max_payload, dead_retention_us,
    unique_for_us, max_leased, rate_u, rate_burst, group_limit,
    dead_letter_queue, labels, created_us, group_mode)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?))sql";
// `archive` bound as 0 (false: PostgreSQL reads '0' as a boolean).
inline constexpr const char* kInsertKindSql = R"sql(
  INSERT INTO sqlq_queues (name, kind, max_attempts, lease_us,
    backoff_base_us, backoff_max_us, archive, retention_us, max_payload,
    created_us, capacity, max_failures)
  VALUES (?, ?, 0, 0, 0, 0, ?, 0, ?, ?, ?, ?))sql";

template <class D>
Result<core::QueueRecord> SqlEngine<D>::CreateQueue(
    core::Conn& c, const core::CreateQueueParams& op) {
  const auto& [name, o] = op;
  DConn& conn = Native(c);
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  Params p;
  AppendOptions(p.Text(name), o).Int(*now).Int(static_cast<int>(o.groups));
  static const std::string kSql =
      D::Statement(std::string(kInsertQueueSql) + D::kInsertNameTail);
  auto id = D::InsertName(conn, kSql, p, "create queue");
  if (!id.ok()) return id.status();
  if (!*id) return Taken(conn, name);
  core::QueueRecord r;
  r.id = **id;
  r.info = {.name = std::string(name),
            .options = o,
            .created_at = core::FromUs(*now)};
  return r;
}

template <class D>
Result<core::QueueRecord> SqlEngine<D>::GetQueue(core::Conn& c,
                                                 std::string_view name) {
  DConn& conn = Native(c);
  static const std::string kSql =
      D::Statement(std::string("SELECT ") + core::kQueueColumns +
                   " FROM sqlq_queues WHERE name = ? AND kind = 'queue'");
  auto rows = conn.Run(kSql, Params().Text(name), "look up queue");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return Missing(conn, name, "queue");
  return core::DecodeQueue(core::RowAt<Rows>{*rows, 0});
}

template <class D>
Result<std::vector<core::QueueRecord>> SqlEngine<D>::ListQueues(core::Conn& c) {
  static const std::string kSql =
      D::Statement(std::string("SELECT ") + core::kQueueColumns +
                   " FROM sqlq_queues WHERE kind = 'queue' ORDER BY name");
  auto rows = Native(c).Run(kSql, Params(), "list queues");
  if (!rows.ok()) return rows.status();
  return core::DecodeAll(*rows,
                         [](const auto& r) { return core::DecodeQueue(r); });
}

template <class D>
Result<std::int64_t> SqlEngine<D>::PurgeQueue(core::Conn& c,
                                              std::int64_t queue_id) {
  DConn& conn = Native(c);
  Status s = CheckQueue(conn, queue_id);
  if (!s.ok()) return s;
  static const std::string kSql =
      D::Statement("DELETE FROM sqlq_messages WHERE queue_id = ?");
  auto rows = conn.Run(kSql, Params().Int(queue_id), "purge queue");
  if (!rows.ok()) return rows.status();
  return rows->affected();
}

template <class D>
Result<QueueStats> SqlEngine<D>::GetQueueStats(core::Conn& c,
                                               std::int64_t queue_id) {
  DConn& conn = Native(c);
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  auto rows = conn.Run(
      D::kStats, Params().Int(*now).Int(*now).Int(*now).Int(*now).Int(queue_id),
      "stats");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::QueueGone(queue_id);
  return core::DecodeStats(core::RowAt<Rows>{*rows, 0}, *now);
}

template <class D>
Result<Timestamp> SqlEngine<D>::Now(core::Conn& c) {
  auto now = NowUs(Native(c));
  if (!now.ok()) return now.status();
  return core::FromUs(*now);
}

template <class D>
Status SqlEngine<D>::Refused(DConn& conn, std::int64_t queue_id,
                             const core::Receipt& r) {
  auto rows = conn.Run(D::kReceiptHolder, Params().Int(r.id).Int(queue_id),
                       "check receipt");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::NotInQueue(r.id);
  return core::StaleReceipt(r, rows->Int(0, 0), rows->Int(0, 1));
}

template <class D>
Result<typename SqlEngine<D>::Rows> SqlEngine<D>::FindKind(
    DConn& conn, std::string_view name, const char* kind) {
  static const std::string kSql = D::Statement(R"sql(
    SELECT id, capacity, max_failures, max_payload FROM sqlq_queues
    WHERE name = ? AND kind = ?)sql");
  auto rows = conn.Run(kSql, Params().Text(name).Text(kind),
                       fmt::format("look up {}", kind));
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return Missing(conn, name, kind);
  return rows;
}

template <class D>
Status SqlEngine<D>::DropKindRow(
    DConn& conn, std::int64_t id, const std::string& drop,
    std::initializer_list<const std::string*> children, std::string_view what) {
  if constexpr (!D::kCascades) {
    for (const std::string* sql : children) {
      auto rows = conn.Run(*sql, Params().Int(id), what);
      if (!rows.ok()) return rows.status();
    }
  }
  auto rows = conn.Run(drop, Params().Int(id), what);
  return rows.ok() ? Status::Ok() : rows.status();
}

template <class D>
Result<std::int64_t> SqlEngine<D>::InsertKind(
    DConn& conn, std::string_view name, const char* kind,
    std::size_t max_payload, std::int64_t capacity, int max_failures) {
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  Params p;
  p.Text(name)
      .Text(kind)
      .Int(0)
      .Int(static_cast<std::int64_t>(max_payload))
      .Int(*now)
      .Int(capacity)
      .Int(max_failures);
  static const std::string kSql =
      D::Statement(std::string(kInsertKindSql) + D::kInsertNameTail);
  auto id = D::InsertName(conn, kSql, p, fmt::format("create {}", kind));
  if (!id.ok()) return id.status();
  if (!*id) return Taken(conn, name);
  return **id;
}

template <class D>
Result<std::vector<DeadLetter>> SqlEngine<D>::ListDead(
    core::Conn& c, const core::ListDeadParams& op) {
  const auto& [queue_id, o] = op;
  DConn& conn = Native(c);
  Status s = CheckQueue(conn, queue_id);
  if (!s.ok()) return s;
  static const std::string kSql = D::Statement(
      std::string(R"sql(
    SELECT id, priority, attempts, enqueued_us, died_us, last_error, payload,
    )sql") +
      D::kJsonColumns +
      " FROM sqlq_dead WHERE queue_id = ? AND id > ? ORDER BY id LIMIT ?");
  auto rows = conn.Run(
      kSql, Params().Int(queue_id).Int(o.after_id).Int(o.limit), "list dead");
  if (!rows.ok()) return rows.status();
  return core::DecodeAll(*rows,
                         [](const auto& r) { return core::DecodeDead(r); });
}

template <class D>
Status SqlEngine<D>::AlterQueue(core::Conn& c,
                                const core::AlterQueueParams& op) {
  const auto& [queue_id, o] = op;
  DConn& conn = Native(c);
  static const std::string kSql = D::Statement(R"sql(
    UPDATE sqlq_queues SET max_attempts = ?, lease_us = ?,
      backoff_base_us = ?, backoff_max_us = ?, archive = ?,
      retention_us = ?, max_payload = ?, dead_retention_us = ?,
      unique_for_us = ?, max_leased = ?, rate_u = ?, rate_burst = ?,
      group_limit = ?, dead_letter_queue = ?, labels = ?
    WHERE id = ? AND kind = 'queue')sql");
  Params p;
  AppendOptions(p, o).Int(queue_id);
  auto rows = conn.Run(kSql, p, "alter queue");
  if (!rows.ok()) return rows.status();
  // MariaDB counts rows changed, not matched: a row set to what it was
  // is there all the same.
  if (rows->affected() == 0) return CheckQueue(conn, queue_id);
  return Status::Ok();
}

template <class D>
Result<std::int64_t> SqlEngine<D>::UnlinkDeadLetterQueue(
    core::Conn& c, std::string_view name) {
  static const std::string kSql = D::Statement(R"sql(
    UPDATE sqlq_queues SET dead_letter_queue = ''
    WHERE dead_letter_queue = ? AND kind = 'queue')sql");
  auto rows = Native(c).Run(kSql, Params().Text(name), "unlink dead letters");
  if (!rows.ok()) return rows.status();
  return static_cast<std::int64_t>(rows->affected());
}

template <class D>
Status SqlEngine<D>::SetQueuePaused(core::Conn& c,
                                    const core::SetQueuePausedParams& p) {
  DConn& conn = Native(c);
  static const std::string kSql = D::Statement(
      "UPDATE sqlq_queues SET paused = ? WHERE id = ? AND kind = 'queue'");
  auto rows = conn.Run(kSql, Params().Int(p.paused ? 1 : 0).Int(p.queue_id),
                       p.paused ? "pause queue" : "resume queue");
  if (!rows.ok()) return rows.status();
  if (rows->affected() == 0) return CheckQueue(conn, p.queue_id);
  // Resumed: waiting claims in other processes look again.
  if (!p.paused) D::AfterSteer(conn, p.queue_id);
  return Status::Ok();
}

template <class D>
Result<std::int64_t> SqlEngine<D>::PruneDead(core::Conn& c,
                                             const core::PruneDeadParams& op) {
  const auto& [queue_id, retention] = op;
  DConn& conn = Native(c);
  auto now = CheckedNow(conn, queue_id);
  if (!now.ok()) return now.status();
  static const std::string kSql =
      D::Statement("DELETE FROM sqlq_dead WHERE queue_id = ? AND died_us < ?");
  auto rows =
      conn.Run(kSql, Params().Int(queue_id).Int(*now - retention.count()),
               "prune dead letters");
  if (!rows.ok()) return rows.status();
  return rows->affected();
}

template <class D>
Result<std::int64_t> SqlEngine<D>::PruneHolds(core::Conn& c,
                                              std::int64_t queue_id) {
  DConn& conn = Native(c);
  auto now = CheckedNow(conn, queue_id);
  if (!now.ok()) return now.status();
  static const std::string kSql = D::Statement(
      "DELETE FROM sqlq_dedup_holds WHERE queue_id = ? AND until_us <= ?");
  auto rows =
      conn.Run(kSql, Params().Int(queue_id).Int(*now), "prune dedup holds");
  if (!rows.ok()) return rows.status();
  return rows->affected();
}

template <class D>
Result<std::int64_t> SqlEngine<D>::PurgeDead(core::Conn& c,
                                             std::int64_t queue_id) {
  DConn& conn = Native(c);
  Status s = CheckQueue(conn, queue_id);
  if (!s.ok()) return s;
  static const std::string kSql =
      D::Statement("DELETE FROM sqlq_dead WHERE queue_id = ?");
  auto rows = conn.Run(kSql, Params().Int(queue_id), "purge dead letters");
  if (!rows.ok()) return rows.status();
  return rows->affected();
}

template <class D>
Result<std::vector<ArchivedMessage>> SqlEngine<D>::ListArchive(
    core::Conn& c, const core::ListArchiveParams& op) {
  const auto& [queue_id, o] = op;
  DConn& conn = Native(c);
  Status s = CheckQueue(conn, queue_id);
  if (!s.ok()) return s;
  static const std::string kSql = D::Statement(
      std::string(R"sql(
    SELECT id, priority, attempts, enqueued_us, completed_us, worker, payload,
    )sql") +
      D::kJsonColumns +
      " FROM sqlq_archive WHERE queue_id = ? AND id > ? ORDER BY id LIMIT ?");
  auto rows =
      conn.Run(kSql, Params().Int(queue_id).Int(o.after_id).Int(o.limit),
               "list archive");
  if (!rows.ok()) return rows.status();
  return core::DecodeAll(*rows,
                         [](const auto& r) { return core::DecodeArchived(r); });
}

template <class D>
Result<std::int64_t> SqlEngine<D>::PruneArchive(
    core::Conn& c, const core::PruneArchiveParams& op) {
  const auto& [queue_id, retention] = op;
  DConn& conn = Native(c);
  auto now = CheckedNow(conn, queue_id);
  if (!now.ok()) return now.status();
  static const std::string kSql = D::Statement(
      "DELETE FROM sqlq_archive WHERE queue_id = ? AND completed_us < ?");
  auto rows =
      conn.Run(kSql, Params().Int(queue_id).Int(*now - retention.count()),
               "prune archive");
  if (!rows.ok()) return rows.status();
  return rows->affected();
}

namespace message_sql {

// The dialect's Params holding `args`, which must outlive them.
template <class Params>
Params ParamsOf(const std::vector<SqlArg>& args) {
  Params p;
  for (const SqlArg& a : args) {
    switch (a.kind) {
      case SqlArg::kInt:
        p.Int(a.i);
        break;
      case SqlArg::kText:
        p.Text(a.s);
        break;
      case SqlArg::kBytes:
        p.Bytes(a.s);
        break;
    }
  }
  return p;
}

// Runs a built statement once (its text varies: not prepared).
template <class D>
Result<typename D::Rows> RunBuilt(typename D::Conn& conn, const BuiltSql& b,
                                  const char* what) {
  auto params = ParamsOf<typename D::Params>(b.args);
  return conn.RunOnce(b.sql, params, what);
}

}  // namespace message_sql

template <class D>
Result<core::FoundMessages> SqlEngine<D>::FindMessages(
    core::Conn& c, const core::FindMessagesParams& p) {
  DConn& conn = Native(c);
  auto now = CheckedNow(conn, p.queue_id);
  if (!now.ok()) return now.status();
  Status s = D::BeforeListing(conn);
  if (!s.ok()) return s;
  auto run = [&](const BuiltSql& b) {
    return message_sql::RunBuilt<D>(conn, b, "find messages");
  };
  return FindMessagesWith(
      MessageStyle(), p, *now,
      [&](const BuiltSql& b) -> Result<std::pair<std::int64_t, std::int64_t>> {
        auto rows = run(b);
        if (!rows.ok()) return rows.status();
        if (rows->size() == 0 || rows->IsNull(0, 1)) {
          return std::pair<std::int64_t, std::int64_t>(0, 0);
        }
        return std::pair(rows->Int(0, 0), rows->Int(0, 1));
      },
      [&](const BuiltSql& b) -> Result<std::vector<MessageInfo>> {
        auto rows = run(b);
        if (!rows.ok()) return rows.status();
        return core::DecodeAll(*rows, [&](const auto& r) {
          return core::DecodeMessageInfo(r, p.table, *now);
        });
      });
}

template <class D>
Result<std::int64_t> SqlEngine<D>::CountMessages(
    core::Conn& c, const core::FindMessagesParams& p) {
  DConn& conn = Native(c);
  auto now = CheckedNow(conn, p.queue_id);
  if (!now.ok()) return now.status();
  const BuiltSql b = CountSql(MessageStyle(), p, *now);
  auto rows = message_sql::RunBuilt<D>(conn, b, "count messages");
  if (!rows.ok()) return rows.status();
  return rows->Int(0, 0);
}

template <class D>
Status SqlEngine<D>::ReportWaiting(core::Conn& c,
                                   const core::ReportWaitingParams& r) {
  DConn& conn = Native(c);
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  for (const BuiltSql& b : ReportWaitingSql(D::kMessageStyle, r, *now)) {
    auto rows = message_sql::RunBuilt<D>(conn, b, "report waiting claims");
    if (!rows.ok()) return rows.status();
  }
  return Status::Ok();
}

template <class D>
Result<std::map<std::string, std::int64_t>> SqlEngine<D>::ReadWaiting(
    core::Conn& c, const core::ReadWaitingParams& p) {
  DConn& conn = Native(c);
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  const BuiltSql b = ReadWaitingSql(D::kMessageStyle, *now - p.fresh.count());
  auto rows = message_sql::RunBuilt<D>(conn, b, "read waiting claims");
  if (!rows.ok()) return rows.status();
  std::map<std::string, std::int64_t> out;
  for (int i = 0; i < rows->size(); ++i) {
    out[rows->Bytes(i, 0)] = rows->Int(i, 1);
  }
  return out;
}

template <class D>
Status SqlEngine<D>::ReportWorker(core::Conn& c,
                                  const core::ReportWorkerParams& p) {
  DConn& conn = Native(c);
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  for (const BuiltSql& b : ReportWorkerSql(D::kMessageStyle, p, *now)) {
    auto rows = message_sql::RunBuilt<D>(conn, b, "report worker");
    if (!rows.ok()) return rows.status();
  }
  return Status::Ok();
}

template <class D>
Result<bool> SqlEngine<D>::RemoveWorker(core::Conn& c, std::string_view id) {
  DConn& conn = Native(c);
  auto rows = message_sql::RunBuilt<D>(
      conn, RemoveWorkerSql(D::kMessageStyle, id), "remove worker");
  if (!rows.ok()) return rows.status();
  return rows->affected() > 0;
}

template <class D>
Result<std::vector<core::WorkerRecord>> SqlEngine<D>::ListWorkers(
    core::Conn& c) {
  DConn& conn = Native(c);
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  auto rows = message_sql::RunBuilt<D>(
      conn, ListWorkersSql(D::kMessageStyle, *now), "list workers");
  if (!rows.ok()) return rows.status();
  std::vector<core::WorkerRecord> out;
  out.reserve(static_cast<std::size_t>(rows->size()));
  for (int i = 0; i < rows->size(); ++i) {
    out.push_back({.id = rows->Bytes(i, 0),
                   .info = rows->Bytes(i, 1),
                   .seen_us = rows->Int(i, 2),
                   .expires_us = rows->Int(i, 3)});
  }
  return out;
}

template <class D>
Result<std::int64_t> SqlEngine<D>::SteerMessages(
    core::Conn& c, const core::SteerMessagesParams& p) {
  DConn& conn = Native(c);
  auto now = CheckedNow(conn, p.queue_id);
  if (!now.ok()) return now.status();
  // Not MessageStyle(): a change by dedup key reads the key off each row,
  // not through sqlq_dedup_keys, which MariaDB's trigger writes when a
  // message is deleted (a statement may not read the table its trigger
  // writes) and which statement-based replication would log as unsafe
  // in an UPDATE.
  const BuiltSql b = SteerSql(D::kMessageStyle, p, *now);
  auto rows = message_sql::RunBuilt<D>(conn, b, "change messages");
  if (!rows.ok()) return rows.status();
  if (rows->affected() > 0) D::AfterSteer(conn, p.queue_id);
  return rows->affected();
}

}  // namespace sqlq::engines::shared

#endif  // SQLQ_ENGINES_SHARED_SQL_QUEUE_H_
