// PostgreSQL engine: rotations (docs/rings-and-rotations.md).

#include "engines/postgres/postgres_engine_impl.h"

namespace sqlq::engines::postgres {

Result<core::RotationRecord> PostgresEngine::CreateRotation(
    Conn& c, const core::CreateRotationParams& op) {
  const auto& [name, o] = op;
  auto id = InsertKind(Pg(c), name, "rotation", o.max_payload_bytes, 0,
                       o.max_failures);
  if (!id.ok()) return id.status();
  return core::RotationRecord{
      .id = *id, .name = std::string(name), .options = o};
}

Result<core::RotationRecord> PostgresEngine::GetRotation(
    Conn& c, std::string_view name) {
  PgConn& conn = Pg(c);
  static constexpr const char* kSql = R"sql(
    SELECT id, max_failures, max_payload FROM sqlq_queues
    WHERE name = $1 AND kind = 'rotation')sql";
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

Status PostgresEngine::DropRotation(Conn& c, std::int64_t rotation_id) {
  // Items and counters go by ON DELETE CASCADE.
  static constexpr const char* kSql =
      "DELETE FROM sqlq_queues WHERE id = $1 AND kind = 'rotation'";
  auto rows = Pg(c).Run(kSql, Params().Int(rotation_id), "drop rotation");
  return rows.ok() ? Status::Ok() : rows.status();
}

Status PostgresEngine::RotationAdd(Conn& c, const core::RotationAddParams& op) {
  const auto& [rotation_id, key, payload] = op;
  PgConn& conn = Pg(c);
  Status s = LockRotation(conn, rotation_id);
  if (!s.ok()) return s;
  // Checked under the rotation's lock, before writing, so that a refused
  // add writes nothing (not even the stamp): a clean failure.
  static constexpr const char* kExists = R"sql(
    SELECT 1 FROM sqlq_rotation_items
    WHERE rotation_id = $1 AND key = $2)sql";
  auto exists =
      conn.Run(kExists, Params().Int(rotation_id).Bytes(key), "add item");
  if (!exists.ok()) return exists.status();
  if (exists->size() > 0) {
    return core::ItemExists(key);
  }
  auto stamp = NextStamp(conn, rotation_id, 1);
  if (!stamp.ok()) return stamp.status();
  static constexpr const char* kSql = R"sql(
    INSERT INTO sqlq_rotation_items (rotation_id, key, payload, added)
    VALUES ($1, $2, $3, $4))sql";
  auto rows = conn.Run(
      kSql, Params().Int(rotation_id).Bytes(key).Bytes(payload).Int(*stamp),
      "add item");
  return rows.ok() ? Status::Ok() : rows.status();
}

Status PostgresEngine::RotationRemove(Conn& c,
                                      const core::RotationRemoveParams& op) {
  const auto& [rotation_id, key] = op;
  PgConn& conn = Pg(c);
  static constexpr const char* kSql = R"sql(
    DELETE FROM sqlq_rotation_items WHERE rotation_id = $1 AND key = $2)sql";
  auto rows =
      conn.Run(kSql, Params().Int(rotation_id).Bytes(key), "remove item");
  if (!rows.ok()) return rows.status();
  if (rows->affected() == 0) return core::NoItem(key);
  return Status::Ok();
}

Result<std::vector<RotationItem>> PostgresEngine::RotationNext(
    Conn& c, const core::RotationNextParams& op) {
  const auto& [rotation_id, n] = op;
  PgConn& conn = Pg(c);
  // Serialises next() per rotation: see "rotations" above.
  Status s = LockRotation(conn, rotation_id);
  if (!s.ok()) return s;
  // Served order: least recently served first (0 = never), then the
  // order of addition. Both are stamps of one counter, so the order is
  // total and exact at any rate.
  static constexpr const char* kSelect = R"sql(
    SELECT key, payload, serves, failures FROM sqlq_rotation_items
    WHERE rotation_id = $1 AND NOT parked
    ORDER BY last_served, added LIMIT $2
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
  // One stamp per item, in the order served (engine.h): with one stamp
  // for the whole call, ties would fall back to the order of addition.
  const auto count = static_cast<std::int64_t>(out.size());
  auto last = NextStamp(conn, rotation_id, count);
  if (!last.ok()) return last.status();
  std::int64_t stamp = *last - count;
  static constexpr const char* kServe = R"sql(
    UPDATE sqlq_rotation_items SET last_served = $3, serves = serves + 1
    WHERE rotation_id = $1 AND key = $2)sql";
  std::vector<Params> all;
  all.reserve(out.size());
  for (const RotationItem& item : out) {
    Params p;
    p.Int(rotation_id).Bytes(item.key).Int(++stamp);
    all.push_back(std::move(p));
  }
  auto served = conn.RunAll(kServe, all, "next");
  if (!served.ok()) return served.status();
  s = AddCounters(conn, rotation_id, {.serves = count});
  if (!s.ok()) return s;
  return out;
}

Result<RotationItem> PostgresEngine::RotationFail(
    Conn& c, const core::RotationFailParams& op) {
  const auto& [rotation_id, key, max_failures] = op;
  static constexpr const char* kSql = R"sql(
    UPDATE sqlq_rotation_items
    SET failures = failures + 1, parked = (failures + 1 >= $3)
    WHERE rotation_id = $1 AND key = $2
    RETURNING key, payload, serves, failures, parked)sql";
  Params p;
  p.Int(rotation_id).Bytes(key).Int(max_failures);
  return UpdateItem(Pg(c), kSql, p, key);
}

Result<RotationItem> PostgresEngine::RotationOk(
    Conn& c, const core::RotationOkParams& op) {
  const auto& [rotation_id, key] = op;
  PgConn& conn = Pg(c);
  static constexpr const char* kParked = R"sql(
    SELECT parked FROM sqlq_rotation_items
    WHERE rotation_id = $1 AND key = $2 FOR UPDATE)sql";
  auto rows = conn.Run(kParked, Params().Int(rotation_id).Bytes(key), "ok");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::NoItem(key);
  if (rows->Int(0, 0) != 0) {
    return core::ItemParked(key);
  }
  static constexpr const char* kSql = R"sql(
    UPDATE sqlq_rotation_items SET failures = 0
    WHERE rotation_id = $1 AND key = $2
    RETURNING key, payload, serves, failures, parked)sql";
  Params p;
  p.Int(rotation_id).Bytes(key);
  return UpdateItem(conn, kSql, p, key);
}

Result<RotationItem> PostgresEngine::RotationReset(
    Conn& c, const core::RotationResetParams& op) {
  const auto& [rotation_id, key] = op;
  static constexpr const char* kSql = R"sql(
    UPDATE sqlq_rotation_items SET failures = 0, parked = false
    WHERE rotation_id = $1 AND key = $2
    RETURNING key, payload, serves, failures, parked)sql";
  Params p;
  p.Int(rotation_id).Bytes(key);
  return UpdateItem(Pg(c), kSql, p, key);
}

Result<std::vector<RotationItem>> PostgresEngine::RotationList(
    Conn& c, std::int64_t rotation_id) {
  PgConn& conn = Pg(c);
  Status s = CheckQueue(conn, rotation_id);
  if (!s.ok()) return s;
  static constexpr const char* kSql = R"sql(
    SELECT key, payload, serves, failures, parked FROM sqlq_rotation_items
    WHERE rotation_id = $1 ORDER BY parked, last_served, added)sql";
  auto rows = conn.Run(kSql, Params().Int(rotation_id), "list items");
  if (!rows.ok()) return rows.status();
  std::vector<RotationItem> out;
  out.reserve(rows->size());
  for (int i = 0; i < rows->size(); ++i) {
    out.push_back(core::DecodeItem(core::RowAt<Rows>{*rows, i}));
  }
  return out;
}

Result<RotationStats> PostgresEngine::RotationStatsOf(
    Conn& c, std::int64_t rotation_id) {
  static constexpr const char* kSql = R"sql(
    SELECT q.name, q.max_failures,
      (SELECT coalesce(sum(serves), 0)::bigint FROM sqlq_counts k
       WHERE k.queue_id = q.id),
      (SELECT count(*) FROM sqlq_rotation_items i
       WHERE i.rotation_id = q.id),
      (SELECT count(*) FROM sqlq_rotation_items i
       WHERE i.rotation_id = q.id AND i.parked)
    FROM sqlq_queues q WHERE q.id = $1 AND q.kind = 'rotation')sql";
  auto rows = Pg(c).Run(kSql, Params().Int(rotation_id), "rotation stats");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::KindGone("rotation", rotation_id);
  return core::DecodeRotationStats(core::RowAt<Rows>{*rows, 0});
}

Status PostgresEngine::LockRotation(PgConn& conn, std::int64_t rotation_id) {
  static constexpr const char* kSql = R"sql(
    SELECT 1 FROM sqlq_queues WHERE id = $1 AND kind = 'rotation'
    FOR NO KEY UPDATE)sql";
  auto rows = conn.Run(kSql, Params().Int(rotation_id), "lock rotation");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::KindGone("rotation", rotation_id);
  conn.known_queues.insert(rotation_id);
  return Status::Ok();
}

Result<std::int64_t> PostgresEngine::NextStamp(PgConn& conn,
                                               std::int64_t rotation_id,
                                               std::int64_t count) {
  static constexpr const char* kSql = R"sql(
    UPDATE sqlq_queues SET next_stamp = next_stamp + $2
    WHERE id = $1 RETURNING next_stamp)sql";
  auto rows = conn.Run(kSql, Params().Int(rotation_id).Int(count), "stamp");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::KindGone("rotation", rotation_id);
  return rows->Int(0, 0);
}

Result<RotationItem> PostgresEngine::UpdateItem(PgConn& conn, const char* sql,
                                                const Params& params,
                                                std::string_view key) {
  auto rows = conn.Run(sql, params, "update item");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::NoItem(key);
  return core::DecodeItem(core::RowAt<Rows>{*rows, 0});
}

}  // namespace sqlq::engines::postgres
