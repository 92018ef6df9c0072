// SQLite engine: rings (docs/rings-and-rotations.md).

#include "engines/shared/kinds_sql.h"
#include "engines/sqlite/sqlite_engine_impl.h"

namespace sqlq::engines::sqlite {

Result<core::RingRecord> SqliteEngine::CreateRing(
    Conn& c, const core::CreateRingParams& op) {
  const auto& [name, o] = op;
  auto id =
      InsertKind(Sql(c), name, "ring", o.max_payload_bytes, o.capacity, 0);
  if (!id.ok()) return id.status();
  return core::RingRecord{.id = *id, .name = std::string(name), .options = o};
}

Result<core::RingRecord> SqliteEngine::GetRing(Conn& c, std::string_view name) {
  SqliteConn& conn = Sql(c);
  SQLQ_PREPARE(st, conn, R"sql(
    SELECT id, capacity, max_payload FROM sqlq_queues
    WHERE name = ?1 AND kind = 'ring')sql");
  st.BindText(1, name);
  int rc = st.Step();
  if (rc == SQLITE_ROW) {
    return core::RingRecord{
        .id = st.Int(0),
        .name = std::string(name),
        .options = {.capacity = st.Int(1),
                    .max_payload_bytes = static_cast<std::size_t>(st.Int(2))}};
  }
  if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "look up ring");
  return Missing(conn, name, "ring");
}

Result<core::KindsRecord> SqliteEngine::ListRingsAndRotations(Conn& c) {
  SqliteConn& conn = Sql(c);
  SQLQ_PREPARE(st, conn, kListKindsSql);
  core::KindsRecord out;
  for (;;) {
    int rc = st.Step();
    if (rc == SQLITE_DONE) return out;
    if (rc != SQLITE_ROW) {
      return Translate(rc, conn.db(), "list rings and rotations");
    }
    core::DecodeKind(st, out);
  }
}

Status SqliteEngine::DropRing(Conn& c, std::int64_t ring_id) {
  return DeleteAll(Sql(c), ring_id,
                   {"DELETE FROM sqlq_ring_entries WHERE ring_id = ?1",
                    "DELETE FROM sqlq_ring_groups WHERE ring_id = ?1",
                    "DELETE FROM sqlq_queues WHERE id = ?1"},
                   "drop ring");
}

Result<RingEntry> SqliteEngine::RingPush(Conn& c,
                                         const core::RingPushParams& op) {
  const auto& [ring_id, group, payload] = op;
  SqliteConn& conn = Sql(c);
  // The capacity as it is now, not as the caller's handle cached it.
  std::int64_t capacity = 0;
  {
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT capacity FROM sqlq_queues WHERE id = ?1 AND kind = 'ring')sql");
    st.Bind(1, ring_id);
    int rc = st.Step();
    if (rc == SQLITE_DONE) return core::KindGone("ring", ring_id);
    if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "push");
    capacity = st.Int(0);
  }
  RingEntry e{.group = std::string(group),
              .payload = std::string(payload),
              .pushed_at = clock_->Now()};
  std::int64_t entries = 0;
  {
    SQLQ_PREPARE(st, conn, R"sql(
      INSERT INTO sqlq_ring_groups (ring_id, grp, last_seq, entries)
      VALUES (?1, ?2, 1, 1)
      ON CONFLICT (ring_id, grp)
      DO UPDATE SET last_seq = last_seq + 1, entries = entries + 1
      RETURNING last_seq, entries)sql");
    st.Bind(1, ring_id).BindText(2, group);
    int rc = st.Step();
    if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "push");
    e.seq = st.Int(0);
    entries = st.Int(1);
    if ((rc = st.Step()) != SQLITE_DONE) {
      return Translate(rc, conn.db(), "push");
    }
  }
  {
    SQLQ_PREPARE(st, conn, R"sql(
      INSERT INTO sqlq_ring_entries (ring_id, grp, seq, pushed_us, payload)
      VALUES (?1, ?2, ?3, ?4, ?5))sql");
    st.Bind(1, ring_id)
        .BindText(2, group)
        .Bind(3, e.seq)
        .Bind(4, Us(e.pushed_at))
        .BindBlob(5, payload);
    Status s = st.Run("push");
    if (!s.ok()) return s;
  }
  if (entries > capacity) {
    Status s = EvictOldest(conn, ring_id, group, entries - capacity);
    if (!s.ok()) return s;
  }
  Status s = AddCounters(conn, ring_id, {.pushes = 1});
  if (!s.ok()) return s;
  return e;
}

Result<std::vector<RingEntry>> SqliteEngine::RingRead(
    Conn& c, const core::RingReadParams& op) {
  const auto& [ring_id, group, o] = op;
  SqliteConn& conn = Sql(c);
  Status s = CheckQueue(conn, ring_id);
  if (!s.ok()) return s;
  static constexpr const char* kNewest = R"sql(
    SELECT seq, pushed_us, payload FROM sqlq_ring_entries
    WHERE ring_id = ?1 AND grp = ?2 AND seq < ?4
    ORDER BY seq DESC LIMIT ?3)sql";
  static constexpr const char* kOldest = R"sql(
    SELECT seq, pushed_us, payload FROM sqlq_ring_entries
    WHERE ring_id = ?1 AND grp = ?2 AND seq > ?4
    ORDER BY seq LIMIT ?3)sql";
  SQLQ_PREPARE(st, conn, o.oldest_first ? kOldest : kNewest);
  st.Bind(1, ring_id)
      .BindText(2, group)
      .Bind(3, o.limit)
      .Bind(4, core::RingReadBound(o));
  return st.All([&, &grp = group](
                    const Stmt& r) { return core::DecodeRingEntry(r, grp); },
                "read ring");
}

Result<std::vector<RingGroup>> SqliteEngine::RingGroups(Conn& c,
                                                        std::int64_t ring_id) {
  SqliteConn& conn = Sql(c);
  Status s = CheckQueue(conn, ring_id);
  if (!s.ok()) return s;
  SQLQ_PREPARE(st, conn, R"sql(
    SELECT grp, entries FROM sqlq_ring_groups
    WHERE ring_id = ?1 AND entries > 0 ORDER BY grp)sql");
  st.Bind(1, ring_id);
  return st.All(
      [](const Stmt& r) {
        return RingGroup{.group = r.Text(0), .entries = r.Int(1)};
      },
      "list groups");
}

Status SqliteEngine::RingDelete(Conn& c, const core::RingDeleteParams& op) {
  const auto& [ring_id, group, seq] = op;
  SqliteConn& conn = Sql(c);
  {
    SQLQ_PREPARE(st, conn, R"sql(
      DELETE FROM sqlq_ring_entries
      WHERE ring_id = ?1 AND grp = ?2 AND seq = ?3)sql");
    st.Bind(1, ring_id).BindText(2, group).Bind(3, seq);
    Status s = st.Run("delete entry");
    if (!s.ok()) return s;
  }
  if (conn.changes() == 0) {
    return core::NoRingEntry(group, seq);
  }
  return AdjustEntries(conn, ring_id, group, -1);
}

Result<std::int64_t> SqliteEngine::RingDeleteGroup(
    Conn& c, const core::RingDeleteGroupParams& op) {
  const auto& [ring_id, group] = op;
  SqliteConn& conn = Sql(c);
  Status s = CheckQueue(conn, ring_id);
  if (!s.ok()) return s;
  {
    SQLQ_PREPARE(st, conn, R"sql(
      DELETE FROM sqlq_ring_entries WHERE ring_id = ?1 AND grp = ?2)sql");
    st.Bind(1, ring_id).BindText(2, group);
    s = st.Run("delete group");
    if (!s.ok()) return s;
  }
  std::int64_t deleted = conn.changes();
  if (deleted > 0) {
    s = AdjustEntries(conn, ring_id, group, -deleted);
    if (!s.ok()) return s;
  }
  return deleted;
}

Result<std::int64_t> SqliteEngine::RingSetCapacity(
    Conn& c, const core::RingSetCapacityParams& op) {
  const auto& [ring_id, capacity] = op;
  SqliteConn& conn = Sql(c);
  {
    SQLQ_PREPARE(st, conn, R"sql(
      UPDATE sqlq_queues SET capacity = ?2
      WHERE id = ?1 AND kind = 'ring')sql");
    st.Bind(1, ring_id).Bind(2, capacity);
    Status s = st.Run("set capacity");
    if (!s.ok()) return s;
    if (conn.changes() == 0) return core::KindGone("ring", ring_id);
  }
  std::vector<std::pair<std::string, std::int64_t>> over;
  {
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT grp, entries FROM sqlq_ring_groups
      WHERE ring_id = ?1 AND entries > ?2 ORDER BY grp)sql");
    st.Bind(1, ring_id).Bind(2, capacity);
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) {
      over.emplace_back(st.Text(0), st.Int(1) - capacity);
    }
    if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "set capacity");
  }
  std::int64_t evicted = 0;
  for (const auto& [group, n] : over) {
    Status s = EvictOldest(conn, ring_id, group, n);
    if (!s.ok()) return s;
    evicted += n;
  }
  return evicted;
}

Result<RingStats> SqliteEngine::RingStatsOf(Conn& c, std::int64_t ring_id) {
  SqliteConn& conn = Sql(c);
  RingStats out;
  {
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT name, capacity, pushes FROM sqlq_queues
      WHERE id = ?1 AND kind = 'ring')sql");
    st.Bind(1, ring_id);
    int rc = st.Step();
    if (rc == SQLITE_DONE) return core::KindGone("ring", ring_id);
    if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "ring stats");
    out.name = st.Text(0);
    out.capacity = st.Int(1);
    out.pushes = st.Int(2);
  }
  SQLQ_PREPARE(st, conn, R"sql(
    SELECT coalesce(sum(entries > 0), 0), coalesce(sum(entries), 0)
    FROM sqlq_ring_groups WHERE ring_id = ?1)sql");
  st.Bind(1, ring_id);
  int rc = st.Step();
  if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "ring stats");
  out.groups = st.Int(0);
  out.entries = st.Int(1);
  return out;
}

Status SqliteEngine::EvictOldest(SqliteConn& conn, std::int64_t ring_id,
                                 std::string_view group, std::int64_t n) {
  {
    SQLQ_PREPARE(st, conn, R"sql(
      DELETE FROM sqlq_ring_entries
      WHERE ring_id = ?1 AND grp = ?2 AND seq IN (
        SELECT seq FROM sqlq_ring_entries
        WHERE ring_id = ?1 AND grp = ?2 ORDER BY seq LIMIT ?3))sql");
    st.Bind(1, ring_id).BindText(2, group).Bind(3, n);
    Status s = st.Run("evict");
    if (!s.ok()) return s;
  }
  return AdjustEntries(conn, ring_id, group, -conn.changes());
}

Status SqliteEngine::AdjustEntries(SqliteConn& conn, std::int64_t ring_id,
                                   std::string_view group, std::int64_t delta) {
  SQLQ_PREPARE(st, conn, R"sql(
    UPDATE sqlq_ring_groups SET entries = entries + ?3
    WHERE ring_id = ?1 AND grp = ?2)sql");
  st.Bind(1, ring_id).BindText(2, group).Bind(3, delta);
  return st.Run("count entries");
}

}  // namespace sqlq::engines::sqlite
