// SqlEngine (sql_engine.h): batches, the same on every engine
// (core::BatchOps; the rules are core/batches.cc's). Included only where an
// engine instantiates SqlEngine<D>.
//
// A batch is a row of sqlq_batches: its name (unique), its callback's id
// (unique; NULL until the send that made it is done with it) and queue,
// the members' queue names, its counts, and when it was made, cancelled
// and done. The callback waits for each member through a row of sqlq_deps
// with on_dead = OnDead::kBatch (sql_deps.h releases it); each end of a
// member adds to the counts by the callback's id. The update takes the
// row's lock, so the counts of two members ended at once in two
// transactions add up, and the read after it sees both: on PostgreSQL and
// MariaDB at READ COMMITTED the read is a new statement, after the other
// committed; at REPEATABLE READ (MariaDB writing a statement binlog) a
// transaction reads its own update of the row, which was made on the row
// as the other left it.

#ifndef SQLQ_ENGINES_SHARED_SQL_BATCHES_H_
#define SQLQ_ENGINES_SHARED_SQL_BATCHES_H_

#include <algorithm>
#include <string>

#include "engines/shared/sql_deps.h"
#include "engines/shared/sql_engine.h"

namespace sqlq::engines::shared {

namespace batch_sql {

inline constexpr const char* kColumns =
    "b.id, b.name, COALESCE(b.callback_id, 0), b.callback_queue_id, "
    "b.queues, b.total, b.completed, b.dead, b.cancelled, b.created_us, "
    "COALESCE(b.done_us, 0), COALESCE(b.cancel_us, 0), "
    "COALESCE(b.expires_us, 0), b.ttl_us";

template <class Rows>
core::BatchRecord Record(const Rows& rows, int i) {
  return {.id = rows.Int(i, 0),
          .name = rows.Bytes(i, 1),
          .callback_id = rows.Int(i, 2),
          .callback_queue_id = rows.Int(i, 3),
          .queues = rows.Bytes(i, 4),
          .counts = {.total = rows.Int(i, 5),
                     .completed = rows.Int(i, 6),
                     .dead = rows.Int(i, 7),
                     .cancelled = rows.Int(i, 8)},
          .created_us = rows.Int(i, 9),
          .done_us = rows.Int(i, 10),
          .cancel_us = rows.Int(i, 11),
          .expires_us = rows.Int(i, 12),
          .ttl_us = rows.Int(i, 13)};
}

}  // namespace batch_sql

template <class D>
Result<std::optional<std::int64_t>> SqlEngine<D>::AddBatch(
    core::Conn& c, const core::AddBatchParams& p) {
  DConn& conn = Native(c);
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  static const std::string kFind = D::Statement(
      "SELECT id, COALESCE(expires_us, 0) FROM sqlq_batches WHERE name = ?");
  static const std::string kForget =
      D::Statement("DELETE FROM sqlq_batches WHERE id = ?");
  static const std::string kInsert = D::Statement(
      std::string("INSERT INTO sqlq_batches (name, callback_queue_id, queues, "
                  "total, completed, dead, cancelled, created_us, ttl_us) "
                  "VALUES (?, ?, ?, 0, 0, 0, 0, ?, ?)") +
      D::kInsertNameTail);
  auto found = conn.Run(kFind, Params().Text(p.name), "find batch");
  if (!found.ok()) return found.status();
  if (found->size() > 0) {
    const std::int64_t expires = found->Int(0, 1);
    if (expires == 0 || expires > *now) return std::optional<std::int64_t>();
    // Expired but not pruned yet: its name is free.
    auto gone =
        conn.Run(kForget, Params().Int(found->Int(0, 0)), "forget batch");
    if (!gone.ok()) return gone.status();
  }
  Params params;
  params.Text(p.name)
      .Int(p.callback_queue_id)
      .Text(p.queues)
      .Int(*now)
      .Int(p.ttl.count());
  return D::InsertName(conn, kInsert, params, "create batch");
}

template <class D>
Status SqlEngine<D>::SealBatch(core::Conn& c, const core::SealBatchParams& p) {
  static const std::string kSql = D::Statement(
      "UPDATE sqlq_batches SET callback_id = ?, total = ?, cancelled = ? "
      "WHERE id = ?");
  auto rows = Native(c).Run(
      kSql,
      Params().Int(p.callback_id).Int(p.total).Int(p.cancelled).Int(p.batch_id),
      "seal batch");
  return rows.ok() ? Status::Ok() : rows.status();
}

template <class D>
Result<std::optional<core::BatchRecord>> SqlEngine<D>::CountBatch(
    core::Conn& c, std::int64_t callback_id, const BatchCounts& delta) {
  DConn& conn = Native(c);
  static const std::string kAdd = D::Statement(
      "UPDATE sqlq_batches SET completed = completed + ?, dead = dead + ?, "
      "cancelled = cancelled + ? WHERE callback_id = ?");
  static const std::string kRead =
      D::Statement(std::string("SELECT ") + batch_sql::kColumns +
                   " FROM sqlq_batches b WHERE b.callback_id = ?");
  auto added = conn.Run(kAdd,
                        Params()
                            .Int(delta.completed)
                            .Int(delta.dead)
                            .Int(delta.cancelled)
                            .Int(callback_id),
                        "count batch");
  if (!added.ok()) return added.status();
  auto rows = conn.Run(kRead, Params().Int(callback_id), "read batch");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return std::optional<core::BatchRecord>();
  return std::optional<core::BatchRecord>(batch_sql::Record(*rows, 0));
}

template <class D>
Status SqlEngine<D>::FinishBatch(core::Conn& c,
                                 const core::FinishBatchParams& p) {
  DConn& conn = Native(c);
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  static const std::string kDone = D::Statement(
      "UPDATE sqlq_batches SET done_us = ?, expires_us = ? + ttl_us WHERE id "
      "= ? AND done_us IS NULL");
  static const std::string kHeaders =
      D::Statement("UPDATE sqlq_messages SET headers = ? WHERE id = ?");
  auto rows = conn.Run(kDone, Params().Int(*now).Int(*now).Int(p.batch_id),
                       "finish batch");
  if (!rows.ok()) return rows.status();
  if (!p.headers) return Status::Ok();
  rows = conn.Run(kHeaders, Params().Text(*p.headers).Int(p.callback_id),
                  "count batch into its callback");
  return rows.ok() ? Status::Ok() : rows.status();
}

template <class D>
Result<std::optional<core::BatchRecord>> SqlEngine<D>::FindBatch(
    core::Conn& c, std::string_view name) {
  DConn& conn = Native(c);
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  static const std::string kSql = D::Statement(
      std::string("SELECT ") + batch_sql::kColumns +
      ", q.name FROM sqlq_batches b JOIN sqlq_queues q ON q.id = "
      "b.callback_queue_id WHERE b.name = ? AND b.callback_id IS NOT NULL "
      "AND (b.expires_us IS NULL OR b.expires_us > ?)");
  auto rows = conn.Run(kSql, Params().Text(name).Int(*now), "read batch");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return std::optional<core::BatchRecord>();
  core::BatchRecord r = batch_sql::Record(*rows, 0);
  r.callback_queue = rows->Bytes(0, 14);
  return std::optional<core::BatchRecord>(std::move(r));
}

template <class D>
Result<std::vector<core::BatchMember>> SqlEngine<D>::PendingBatchMembers(
    core::Conn& c, std::int64_t callback_id) {
  static const std::string kSql = D::Statement(
      "SELECT d.parent_id, d.parent_queue_id, q.name FROM sqlq_deps d JOIN "
      "sqlq_queues q ON q.id = d.parent_queue_id WHERE d.child_id = ? AND "
      "d.parked = 0 ORDER BY d.parent_queue_id, d.parent_id");
  auto rows =
      Native(c).Run(kSql, Params().Int(callback_id), "find batch members");
  if (!rows.ok()) return rows.status();
  std::vector<core::BatchMember> out;
  out.reserve(rows->size());
  for (int i = 0; i < rows->size(); ++i) {
    out.push_back({.id = rows->Int(i, 0),
                   .queue_id = rows->Int(i, 1),
                   .queue = rows->Bytes(i, 2)});
  }
  return out;
}

template <class D>
Result<std::vector<core::EndedDependency>> SqlEngine<D>::EndedBatchMembers(
    core::Conn& c, std::int64_t callback_id) {
  static const std::string kSql = D::Statement(
      std::string("SELECT d.parent_id, d.child_id, d.child_queue_id, "
                  "d.on_dead, ") +
      deps_sql::kParentEnd +
      " FROM sqlq_deps d WHERE d.child_id = ? AND d.parked = 0 AND NOT "
      "EXISTS (SELECT 1 FROM sqlq_messages m WHERE m.id = d.parent_id) "
      "ORDER BY d.parent_id");
  auto rows = Native(c).Run(kSql, Params().Int(callback_id),
                            "find ended batch members");
  if (!rows.ok()) return rows.status();
  return deps_sql::Ended(*rows);
}

template <class D>
Status SqlEngine<D>::MarkBatchCancelled(core::Conn& c, std::int64_t batch_id) {
  DConn& conn = Native(c);
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  static const std::string kSql = D::Statement(
      "UPDATE sqlq_batches SET cancel_us = ? WHERE id = ? AND cancel_us IS "
      "NULL");
  auto rows = conn.Run(kSql, Params().Int(*now).Int(batch_id), "cancel batch");
  return rows.ok() ? Status::Ok() : rows.status();
}

template <class D>
Result<std::int64_t> SqlEngine<D>::PruneBatches(core::Conn& c) {
  DConn& conn = Native(c);
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  static const std::string kSql = D::Statement(
      "DELETE FROM sqlq_batches WHERE expires_us IS NOT NULL AND expires_us "
      "<= ?");
  auto rows = conn.Run(kSql, Params().Int(*now), "prune batches");
  if (!rows.ok()) return rows.status();
  return static_cast<std::int64_t>(rows->affected());
}

}  // namespace sqlq::engines::shared

#endif  // SQLQ_ENGINES_SHARED_SQL_BATCHES_H_
