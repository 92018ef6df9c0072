// SQLite engine: rotations (docs/rings-and-rotations.md).

#include "engines/sqlite/sqlite_engine_impl.h"

namespace sqlq::engines::sqlite {

Result<core::RotationRecord> SqliteEngine::CreateRotation(
    Conn& c, const core::CreateRotationParams& op) {
  const auto& [name, o] = op;
  auto id = InsertKind(Sql(c), name, "rotation", o.max_payload_bytes, 0,
                       o.max_failures);
  if (!id.ok()) return id.status();
  return core::RotationRecord{
      .id = *id, .name = std::string(name), .options = o};
}

Result<core::RotationRecord> SqliteEngine::GetRotation(Conn& c,
                                                       std::string_view name) {
  SqliteConn& conn = Sql(c);
  SQLQ_PREPARE(st, conn, R"sql(
    SELECT id, max_failures, max_payload FROM sqlq_queues
    WHERE name = ?1 AND kind = 'rotation')sql");
  st.BindText(1, name);
  int rc = st.Step();
  if (rc == SQLITE_ROW) {
    return core::RotationRecord{
        .id = st.Int(0),
        .name = std::string(name),
        .options = {.max_failures = static_cast<int>(st.Int(1)),
                    .max_payload_bytes = static_cast<std::size_t>(st.Int(2))}};
  }
  if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "look up rotation");
  return Missing(conn, name, "rotation");
}

Status SqliteEngine::DropRotation(Conn& c, std::int64_t rotation_id) {
  return DeleteAll(Sql(c), rotation_id,
                   {"DELETE FROM sqlq_rotation_items WHERE rotation_id = ?1",
                    "DELETE FROM sqlq_queues WHERE id = ?1"},
                   "drop rotation");
}

Status SqliteEngine::RotationAdd(Conn& c, const core::RotationAddParams& op) {
  const auto& [rotation_id, key, payload] = op;
  SqliteConn& conn = Sql(c);
  // Checked first, so that a refused add writes nothing (not even the
  // stamp): a clean failure (core/engine.h).
  {
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT 1 FROM sqlq_rotation_items
      WHERE rotation_id = ?1 AND key = ?2)sql");
    st.Bind(1, rotation_id).BindText(2, key);
    int rc = st.Step();
    if (rc == SQLITE_ROW) {
      return core::ItemExists(key);
    }
    if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "add item");
  }
  auto stamp = NextStamp(conn, rotation_id);
  if (!stamp.ok()) return stamp.status();
  SQLQ_PREPARE(st, conn, R"sql(
    INSERT INTO sqlq_rotation_items (rotation_id, key, payload, added)
    VALUES (?1, ?2, ?3, ?4))sql");
  st.Bind(1, rotation_id).BindText(2, key).BindBlob(3, payload).Bind(4, *stamp);
  return st.Run("add item");
}

Status SqliteEngine::RotationRemove(Conn& c,
                                    const core::RotationRemoveParams& op) {
  const auto& [rotation_id, key] = op;
  SqliteConn& conn = Sql(c);
  SQLQ_PREPARE(st, conn, R"sql(
    DELETE FROM sqlq_rotation_items WHERE rotation_id = ?1 AND key = ?2)sql");
  st.Bind(1, rotation_id).BindText(2, key);
  Status s = st.Run("remove item");
  if (!s.ok()) return s;
  if (conn.changes() == 0) return core::NoItem(key);
  return Status::Ok();
}

Result<std::vector<RotationItem>> SqliteEngine::RotationNext(
    Conn& c, const core::RotationNextParams& op) {
  const auto& [rotation_id, n] = op;
  SqliteConn& conn = Sql(c);
  Status s = CheckQueue(conn, rotation_id);
  if (!s.ok()) return s;
  std::vector<RotationItem> out;
  {
    // Served order: least recently served first (0 = never), then the
    // order of addition. Both are stamps of one counter, so the order is
    // total and exact at any rate.
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT key, payload, serves, failures FROM sqlq_rotation_items
      WHERE rotation_id = ?1 AND parked = 0
      ORDER BY last_served, added LIMIT ?2)sql");
    st.Bind(1, rotation_id).Bind(2, n);
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) {
      out.push_back({.key = st.Text(0),
                     .payload = st.Blob(1),
                     .served = st.Int(2) + 1,
                     .failures = static_cast<int>(st.Int(3))});
    }
    if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "next");
  }
  if (out.empty()) return out;
  // One stamp per item, in the order served: with one stamp for the whole
  // call, ties would fall back to the order of addition, and an item added
  // early that is served at the end of a call would come first again in
  // the next round, ahead of items served before it (starving others).
  const auto count = static_cast<std::int64_t>(out.size());
  auto last = NextStamp(conn, rotation_id, count);
  if (!last.ok()) return last.status();
  std::int64_t stamp = *last - count;
  for (const RotationItem& item : out) {
    SQLQ_PREPARE(st, conn, R"sql(
      UPDATE sqlq_rotation_items SET last_served = ?3, serves = serves + 1
      WHERE rotation_id = ?1 AND key = ?2)sql");
    st.Bind(1, rotation_id).BindText(2, item.key).Bind(3, ++stamp);
    s = st.Run("next");
    if (!s.ok()) return s;
  }
  s = AddCounters(conn, rotation_id,
                  {.serves = static_cast<std::int64_t>(out.size())});
  if (!s.ok()) return s;
  return out;
}

Result<RotationItem> SqliteEngine::RotationFail(
    Conn& c, const core::RotationFailParams& op) {
  const auto& [rotation_id, key, max_failures] = op;
  static constexpr const char* kSql = R"sql(
    UPDATE sqlq_rotation_items
    SET failures = failures + 1, parked = (failures + 1 >= ?3)
    WHERE rotation_id = ?1 AND key = ?2
    RETURNING key, payload, serves, failures, parked)sql";
  return UpdateItem(Sql(c), kSql, rotation_id, key, max_failures);
}

Result<RotationItem> SqliteEngine::RotationOk(
    Conn& c, const core::RotationOkParams& op) {
  const auto& [rotation_id, key] = op;
  SqliteConn& conn = Sql(c);
  {
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT parked FROM sqlq_rotation_items
      WHERE rotation_id = ?1 AND key = ?2)sql");
    st.Bind(1, rotation_id).BindText(2, key);
    int rc = st.Step();
    if (rc == SQLITE_DONE) return core::NoItem(key);
    if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "ok");
    if (st.Int(0) != 0) {
      return core::ItemParked(key);
    }
  }
  static constexpr const char* kSql = R"sql(
    UPDATE sqlq_rotation_items SET failures = 0
    WHERE rotation_id = ?1 AND key = ?2
    RETURNING key, payload, serves, failures, parked)sql";
  return UpdateItem(conn, kSql, rotation_id, key, 0);
}

Result<RotationItem> SqliteEngine::RotationReset(
    Conn& c, const core::RotationResetParams& op) {
  const auto& [rotation_id, key] = op;
  static constexpr const char* kSql = R"sql(
    UPDATE sqlq_rotation_items SET failures = 0, parked = 0
    WHERE rotation_id = ?1 AND key = ?2
    RETURNING key, payload, serves, failures, parked)sql";
  return UpdateItem(Sql(c), kSql, rotation_id, key, 0);
}

Result<std::vector<RotationItem>> SqliteEngine::RotationList(
    Conn& c, std::int64_t rotation_id) {
  SqliteConn& conn = Sql(c);
  Status s = CheckQueue(conn, rotation_id);
  if (!s.ok()) return s;
  SQLQ_PREPARE(st, conn, R"sql(
    SELECT key, payload, serves, failures, parked FROM sqlq_rotation_items
    WHERE rotation_id = ?1 ORDER BY parked, last_served, added)sql");
  st.Bind(1, rotation_id);
  return st.All([](const Stmt& r) { return core::DecodeItem(r); },
                "list items");
}

Result<RotationStats> SqliteEngine::RotationStatsOf(Conn& c,
                                                    std::int64_t rotation_id) {
  SqliteConn& conn = Sql(c);
  RotationStats out;
  {
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT name, max_failures, serves FROM sqlq_queues
      WHERE id = ?1 AND kind = 'rotation')sql");
    st.Bind(1, rotation_id);
    int rc = st.Step();
    if (rc == SQLITE_DONE) return core::KindGone("rotation", rotation_id);
    if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "rotation stats");
    out.name = st.Text(0);
    out.max_failures = static_cast<int>(st.Int(1));
    out.serves = st.Int(2);
  }
  SQLQ_PREPARE(st, conn, R"sql(
    SELECT count(*), coalesce(sum(parked), 0) FROM sqlq_rotation_items
    WHERE rotation_id = ?1)sql");
  st.Bind(1, rotation_id);
  int rc = st.Step();
  if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "rotation stats");
  out.items = st.Int(0);
  out.parked = st.Int(1);
  return out;
}

Result<std::int64_t> SqliteEngine::NextStamp(SqliteConn& conn,
                                             std::int64_t rotation_id,
                                             std::int64_t count) {
  SQLQ_PREPARE(st, conn, R"sql(
    UPDATE sqlq_queues SET next_stamp = next_stamp + ?2
    WHERE id = ?1 AND kind = 'rotation' RETURNING next_stamp)sql");
  st.Bind(1, rotation_id).Bind(2, count);
  int rc = st.Step();
  if (rc == SQLITE_DONE) return core::KindGone("rotation", rotation_id);
  if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "stamp");
  std::int64_t stamp = st.Int(0);
  if ((rc = st.Step()) != SQLITE_DONE) {
    return Translate(rc, conn.db(), "stamp");
  }
  return stamp;
}

Result<RotationItem> SqliteEngine::UpdateItem(SqliteConn& conn, const char* sql,
                                              std::int64_t rotation_id,
                                              std::string_view key, int param) {
  SQLQ_PREPARE(st, conn, sql);
  st.Bind(1, rotation_id).BindText(2, key);
  if (param != 0) st.Bind(3, param);
  int rc = st.Step();
  if (rc == SQLITE_DONE) return core::NoItem(key);
  if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "update item");
  RotationItem item = core::DecodeItem(st);
  if ((rc = st.Step()) != SQLITE_DONE) {
    return Translate(rc, conn.db(), "update item");
  }
  return item;
}

}  // namespace sqlq::engines::sqlite
