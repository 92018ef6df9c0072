// MariaDB/MySQL engine: rotations (docs/rings-and-rotations.md).

#include "engines/mysql/mysql_engine_impl.h"

namespace sqlq::engines::mysql {

Result<core::RotationRecord> MysqlEngine::CreateRotation(
    Conn& c, const core::CreateRotationParams& op) {
  const auto& [name, o] = op;
  auto id = InsertKind(My(c), name, "rotation", o.max_payload_bytes, 0,
                       o.max_failures);
  if (!id.ok()) return id.status();
  return core::RotationRecord{
      .id = *id, .name = std::string(name), .options = o};
}

Result<core::RotationRecord> MysqlEngine::GetRotation(Conn& c,
                                                      std::string_view name) {
  MyConn& conn = My(c);
  static const std::string kSql = R"sql(
    SELECT id, max_failures, max_payload FROM sqlq_queues
    WHERE name = ? AND kind = 'rotation')sql";
  auto rows = conn.Run(kSql, Params().Text(name), "look up rotation");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return Missing(conn, name, "rotation");
  return core::RotationRecord{
      .id = rows->Int(0, 0),
      .name = std::string(name),
      .options = {
          .max_failures = static_cast<int>(rows->Int(0, 1)),
          .max_payload_bytes = static_cast<std::size_t>(rows->Int(0, 2))}};
}

Status MysqlEngine::DropRotation(Conn& c, std::int64_t rotation_id) {
  static const std::string kSql =
      "DELETE FROM sqlq_queues WHERE id = ? AND kind = 'rotation'";
  auto rows = My(c).Run(kSql, Params().Int(rotation_id), "drop rotation");
  return rows.ok() ? Status::Ok() : rows.status();
}

Status MysqlEngine::RotationAdd(Conn& c, const core::RotationAddParams& op) {
  const auto& [rotation_id, key, payload] = op;
  MyConn& conn = My(c);
  Status s = LockRotation(conn, rotation_id);
  if (!s.ok()) return s;
  static const std::string kExists = R"sql(
    SELECT 1 FROM sqlq_rotation_items
    WHERE rotation_id = ? AND item_key = ? LOCK IN SHARE MODE)sql";
  auto exists =
      conn.Run(kExists, Params().Int(rotation_id).Bytes(key), "add item");
  if (!exists.ok()) return exists.status();
  if (exists->size() > 0) {
    return core::ItemExists(key);
  }
  auto stamp = NextStamp(conn, rotation_id, 1);
  if (!stamp.ok()) return stamp.status();
  static const std::string kSql = R"sql(
    INSERT INTO sqlq_rotation_items (rotation_id, item_key, payload, added)
    VALUES (?, ?, ?, ?))sql";
  auto rows = conn.Run(
      kSql, Params().Int(rotation_id).Bytes(key).Bytes(payload).Int(*stamp),
      "add item");
  return rows.ok() ? Status::Ok() : rows.status();
}

Status MysqlEngine::RotationRemove(Conn& c,
                                   const core::RotationRemoveParams& op) {
  const auto& [rotation_id, key] = op;
  static const std::string kSql = R"sql(
    DELETE FROM sqlq_rotation_items
    WHERE rotation_id = ? AND item_key = ?)sql";
  auto rows =
      My(c).Run(kSql, Params().Int(rotation_id).Bytes(key), "remove item");
  if (!rows.ok()) return rows.status();
  if (rows->affected() == 0) return core::NoItem(key);
  return Status::Ok();
}

Result<std::vector<RotationItem>> MysqlEngine::RotationNext(
    Conn& c, const core::RotationNextParams& op) {
  const auto& [rotation_id, n] = op;
  MyConn& conn = My(c);
  Status s = LockRotation(conn, rotation_id);
  if (!s.ok()) return s;
  // Served order: least recently served first (0 = never), then the
  // order of addition; both stamps of one counter: a total order. A
  // locking read, not logged; the updates below go by primary key.
  static const std::string kSelect = R"sql(
    SELECT item_key, payload, serves, failures FROM sqlq_rotation_items
    WHERE rotation_id = ? AND parked = 0
    ORDER BY last_served, added LIMIT ?
    FOR UPDATE)sql";
  auto rows = conn.Run(kSelect, Params().Int(rotation_id).Int(n), "next");
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
  const auto count = static_cast<std::int64_t>(out.size());
  auto last = NextStamp(conn, rotation_id, count);
  if (!last.ok()) return last.status();
  std::int64_t stamp = *last - count;
  static const std::string kServe = R"sql(
    UPDATE sqlq_rotation_items SET last_served = ?, serves = serves + 1
    WHERE rotation_id = ? AND item_key = ?)sql";
  for (const RotationItem& item : out) {
    auto served = conn.Run(
        kServe, Params().Int(++stamp).Int(rotation_id).Bytes(item.key), "next");
    if (!served.ok()) return served.status();
  }
  s = AddCounters(conn, rotation_id, {.serves = count});
  if (!s.ok()) return s;
  return out;
}

Result<RotationItem> MysqlEngine::RotationFail(
    Conn& c, const core::RotationFailParams& op) {
  const auto& [rotation_id, key, max_failures] = op;
  // parked first: MariaDB assigns left to right (unless the session has
  // SIMULTANEOUS_ASSIGNMENT), so both orders of evaluation agree here.
  static const std::string kSql = R"sql(
    UPDATE sqlq_rotation_items
    SET parked = (failures + 1 >= ?), failures = failures + 1
    WHERE rotation_id = ? AND item_key = ?)sql";
  Params p;
  p.Int(max_failures).Int(rotation_id).Bytes(key);
  return UpdateItem(My(c), kSql, p, rotation_id, key);
}

Result<RotationItem> MysqlEngine::RotationOk(Conn& c,
                                             const core::RotationOkParams& op) {
  const auto& [rotation_id, key] = op;
  MyConn& conn = My(c);
  static const std::string kParked = R"sql(
    SELECT parked FROM sqlq_rotation_items
    WHERE rotation_id = ? AND item_key = ? FOR UPDATE)sql";
  auto rows = conn.Run(kParked, Params().Int(rotation_id).Bytes(key), "ok");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::NoItem(key);
  if (rows->Int(0, 0) != 0) {
    return core::ItemParked(key);
  }
  static const std::string kSql = R"sql(
    UPDATE sqlq_rotation_items SET failures = 0
    WHERE rotation_id = ? AND item_key = ?)sql";
  Params p;
  p.Int(rotation_id).Bytes(key);
  return UpdateItem(conn, kSql, p, rotation_id, key);
}

Result<RotationItem> MysqlEngine::RotationReset(
    Conn& c, const core::RotationResetParams& op) {
  const auto& [rotation_id, key] = op;
  static const std::string kSql = R"sql(
    UPDATE sqlq_rotation_items SET failures = 0, parked = 0
    WHERE rotation_id = ? AND item_key = ?)sql";
  Params p;
  p.Int(rotation_id).Bytes(key);
  return UpdateItem(My(c), kSql, p, rotation_id, key);
}

Result<std::vector<RotationItem>> MysqlEngine::RotationList(
    Conn& c, std::int64_t rotation_id) {
  MyConn& conn = My(c);
  Status s = CheckQueue(conn, rotation_id);
  if (!s.ok()) return s;
  static const std::string kSql = R"sql(
    SELECT item_key, payload, serves, failures, parked
    FROM sqlq_rotation_items
    WHERE rotation_id = ? ORDER BY parked, last_served, added)sql";
  auto rows = conn.Run(kSql, Params().Int(rotation_id), "list items");
  if (!rows.ok()) return rows.status();
  std::vector<RotationItem> out;
  out.reserve(rows->size());
  for (int i = 0; i < rows->size(); ++i) {
    out.push_back(core::DecodeItem(core::RowAt<Rows>{*rows, i}));
  }
  return out;
}

Result<RotationStats> MysqlEngine::RotationStatsOf(Conn& c,
                                                   std::int64_t rotation_id) {
  static const std::string kSql = R"sql(
    SELECT q.name, q.max_failures,
      (SELECT COALESCE(SUM(serves), 0) FROM sqlq_counters k
       WHERE k.queue_id = q.id),
      (SELECT COUNT(*) FROM sqlq_rotation_items i
       WHERE i.rotation_id = q.id),
      (SELECT COUNT(*) FROM sqlq_rotation_items i
       WHERE i.rotation_id = q.id AND i.parked <> 0)
    FROM sqlq_queues q WHERE q.id = ? AND q.kind = 'rotation')sql";
  auto rows = My(c).Run(kSql, Params().Int(rotation_id), "rotation stats");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::KindGone("rotation", rotation_id);
  return core::DecodeRotationStats(core::RowAt<Rows>{*rows, 0});
}

Status MysqlEngine::LockRotation(MyConn& conn, std::int64_t rotation_id) {
  static const std::string kSql = R"sql(
    SELECT 1 FROM sqlq_queues WHERE id = ? AND kind = 'rotation'
    FOR UPDATE)sql";
  auto rows = conn.Run(kSql, Params().Int(rotation_id), "lock rotation");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::KindGone("rotation", rotation_id);
  conn.known_queues.insert(rotation_id);
  return Status::Ok();
}

Result<std::int64_t> MysqlEngine::NextStamp(MyConn& conn,
                                            std::int64_t rotation_id,
                                            std::int64_t count) {
  static const std::string kUpdate =
      "UPDATE sqlq_queues SET next_stamp = next_stamp + ? WHERE id = ?";
  auto up = conn.Run(kUpdate, Params().Int(count).Int(rotation_id), "stamp");
  if (!up.ok()) return up.status();
  static const std::string kRead =
      "SELECT next_stamp FROM sqlq_queues WHERE id = ?";
  auto rows = conn.Run(kRead, Params().Int(rotation_id), "stamp");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::KindGone("rotation", rotation_id);
  return rows->Int(0, 0);
}

Result<RotationItem> MysqlEngine::UpdateItem(MyConn& conn,
                                             const std::string& sql,
                                             Params& params,
                                             std::int64_t rotation_id,
                                             std::string_view key) {
  auto up = conn.Run(sql, params, "update item");
  if (!up.ok()) return up.status();
  if (up->affected() == 0) return core::NoItem(key);
  static const std::string kRead = R"sql(
    SELECT item_key, payload, serves, failures, parked
    FROM sqlq_rotation_items WHERE rotation_id = ? AND item_key = ?)sql";
  auto rows =
      conn.Run(kRead, Params().Int(rotation_id).Bytes(key), "update item");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::NoItem(key);
  return core::DecodeItem(core::RowAt<Rows>{*rows, 0});
}

}  // namespace sqlq::engines::mysql
