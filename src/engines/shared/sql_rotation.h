// SqlEngine (sql_engine.h): rotations (docs/rings-and-rotations.md).
// Included only where an engine instantiates SqlEngine<D>. The item
// statements are the dialect's: the item's key column is `key` on
// PostgreSQL and `item_key` on MariaDB, where KEY is a reserved word.

#ifndef SQLQ_ENGINES_SHARED_SQL_ROTATION_H_
#define SQLQ_ENGINES_SHARED_SQL_ROTATION_H_

#include "core/errors.h"
#include "core/rows.h"
#include "engines/shared/sql_engine.h"

namespace sqlq::engines::shared {

template <class D>
Result<core::RotationRecord> SqlEngine<D>::CreateRotation(
    core::Conn& c, const core::CreateRotationParams& op) {
  const auto& [name, o] = op;
  auto id = InsertKind(Native(c), name, "rotation", o.max_payload_bytes, 0,
                       o.max_failures);
  if (!id.ok()) return id.status();
  return core::RotationRecord{
      .id = *id, .name = std::string(name), .options = o};
}

template <class D>
Result<core::RotationRecord> SqlEngine<D>::GetRotation(core::Conn& c,
                                                       std::string_view name) {
  auto rows = FindKind(Native(c), name, "rotation");
  if (!rows.ok()) return rows.status();
  return core::RotationRecord{
      .id = rows->Int(0, 0),
      .name = std::string(name),
      .options = {
          .max_failures = static_cast<int>(rows->Int(0, 2)),
          .max_payload_bytes = static_cast<std::size_t>(rows->Int(0, 3))}};
}

template <class D>
Status SqlEngine<D>::DropRotation(core::Conn& c, std::int64_t rotation_id) {
  // Items and counters go with the rotation's row.
  static const std::string kItems =
      D::Statement("DELETE FROM sqlq_rotation_items WHERE rotation_id = ?");
  static const std::string kSql = D::Statement(
      "DELETE FROM sqlq_queues WHERE id = ? AND kind = 'rotation'");
  return DropKindRow(Native(c), rotation_id, kSql, {&kItems}, "drop rotation");
}

template <class D>
Status SqlEngine<D>::AddToRotation(core::Conn& c,
                                   const core::AddToRotationParams& op) {
  const auto& [rotation_id, key, payload] = op;
  DConn& conn = Native(c);
  Status s = LockRotation(conn, rotation_id);
  if (!s.ok()) return s;
  // Checked under the rotation's lock, before writing, so that a refused
  // add writes nothing (not even the stamp): a clean failure.
  auto exists = conn.Run(D::kItemExists, Params().Int(rotation_id).Bytes(key),
                         "add item");
  if (!exists.ok()) return exists.status();
  if (exists->size() > 0) return core::ItemExists(key);
  auto stamp = D::NextStamp(conn, rotation_id, 1);
  if (!stamp.ok()) return stamp.status();
  auto rows = conn.Run(
      D::kInsertItem,
      Params().Int(rotation_id).Bytes(key).Payload(payload).Int(*stamp),
      "add item");
  return rows.ok() ? Status::Ok() : rows.status();
}

template <class D>
Status SqlEngine<D>::RemoveFromRotation(
    core::Conn& c, const core::RemoveFromRotationParams& op) {
  const auto& [rotation_id, key] = op;
  auto rows = Native(c).Run(
      D::kRemoveItem, Params().Int(rotation_id).Bytes(key), "remove item");
  if (!rows.ok()) return rows.status();
  if (rows->affected() == 0) return core::NoItem(key);
  return Status::Ok();
}

template <class D>
Result<std::vector<RotationItem>> SqlEngine<D>::ServeFromRotation(
    core::Conn& c, const core::ServeFromRotationParams& op) {
  const auto& [rotation_id, n] = op;
  DConn& conn = Native(c);
  // Serialises next() per rotation: see "Locking" in sql_engine.h.
  Status s = LockRotation(conn, rotation_id);
  if (!s.ok()) return s;
  // Served order: least recently served first (0 = never), then the order
  // of addition. Both are stamps of one counter, so the order is total
  // and exact at any rate. The read locks the items (FOR UPDATE); the
  // updates below go by primary key.
  auto rows = conn.Run(D::kNextItems, Params().Int(rotation_id).Int(n), "next");
  if (!rows.ok()) return rows.status();
  std::vector<RotationItem> out;
  out.reserve(rows->size());
  for (int i = 0; i < rows->size(); ++i) {
    out.push_back({.key = rows->Bytes(i, 0),
                   .payload = rows->Bytes(i, 1),
                   .served = rows->Int(i, 2) + 1,
                   .failures = static_cast<int>(rows->Int(i, 3))});
  }
  if (out.empty()) return out;
  // One stamp per item, in the order served (engine.h): with one stamp
  // for the whole call, ties would fall back to the order of addition.
  const auto count = static_cast<std::int64_t>(out.size());
  auto last = D::NextStamp(conn, rotation_id, count);
  if (!last.ok()) return last.status();
  std::int64_t stamp = *last - count;
  std::vector<Params> all;
  all.reserve(out.size());
  for (const RotationItem& item : out) {
    Params p;
    p.Int(++stamp).Int(rotation_id).Bytes(item.key);
    all.push_back(std::move(p));
  }
  auto served = conn.RunAll(D::kServeItem, all, "next");
  if (!served.ok()) return served.status();
  s = AddCounters(conn, rotation_id, {.serves = count});
  if (!s.ok()) return s;
  return out;
}

template <class D>
Result<RotationItem> SqlEngine<D>::ReportRotationFailure(
    core::Conn& c, const core::ReportRotationFailureParams& op) {
  const auto& [rotation_id, key, max_failures] = op;
  Params p;
  p.Int(max_failures).Int(rotation_id).Bytes(key);
  return D::UpdateItem(Native(c), D::kFailItem, p, rotation_id, key);
}

template <class D>
Result<RotationItem> SqlEngine<D>::ReportRotationSuccess(
    core::Conn& c, const core::ReportRotationSuccessParams& op) {
  const auto& [rotation_id, key] = op;
  DConn& conn = Native(c);
  auto rows =
      conn.Run(D::kItemParked, Params().Int(rotation_id).Bytes(key), "ok");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::NoItem(key);
  if (rows->Int(0, 0) != 0) return core::ItemParked(key);
  Params p;
  p.Int(rotation_id).Bytes(key);
  return D::UpdateItem(conn, D::kOkItem, p, rotation_id, key);
}

template <class D>
Result<RotationItem> SqlEngine<D>::ResetRotationItem(
    core::Conn& c, const core::ResetRotationItemParams& op) {
  const auto& [rotation_id, key] = op;
  Params p;
  p.Int(rotation_id).Bytes(key);
  return D::UpdateItem(Native(c), D::kResetItem, p, rotation_id, key);
}

template <class D>
Result<std::vector<RotationItem>> SqlEngine<D>::ListRotationItems(
    core::Conn& c, std::int64_t rotation_id) {
  DConn& conn = Native(c);
  Status s = CheckQueue(conn, rotation_id);
  if (!s.ok()) return s;
  auto rows = conn.Run(D::kListItems, Params().Int(rotation_id), "list items");
  if (!rows.ok()) return rows.status();
  return core::DecodeAll(*rows,
                         [](const auto& r) { return core::DecodeItem(r); });
}

template <class D>
Result<RotationStats> SqlEngine<D>::GetRotationStats(core::Conn& c,
                                                     std::int64_t rotation_id) {
  auto rows = Native(c).Run(D::kRotationStats, Params().Int(rotation_id),
                            "rotation stats");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::KindGone("rotation", rotation_id);
  return core::DecodeRotationStats(core::RowAt<Rows>{*rows, 0});
}

template <class D>
Status SqlEngine<D>::LockRotation(DConn& conn, std::int64_t rotation_id) {
  auto rows =
      conn.Run(D::kLockRotation, Params().Int(rotation_id), "lock rotation");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::KindGone("rotation", rotation_id);
  conn.known_queues.insert(rotation_id);
  return Status::Ok();
}

}  // namespace sqlq::engines::shared

#endif  // SQLQ_ENGINES_SHARED_SQL_ROTATION_H_
