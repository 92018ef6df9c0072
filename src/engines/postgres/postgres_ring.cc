// PostgreSQL engine: rings (docs/rings-and-rotations.md).

#include "engines/postgres/postgres_engine_impl.h"

namespace sqlq::engines::postgres {

Result<core::RingRecord> PostgresEngine::CreateRing(
    Conn& c, const core::CreateRingParams& op) {
  const auto& [name, o] = op;
  auto id = InsertKind(Pg(c), name, "ring", o.max_payload_bytes, o.capacity, 0);
  if (!id.ok()) return id.status();
  return core::RingRecord{.id = *id, .name = std::string(name), .options = o};
}

Result<core::RingRecord> PostgresEngine::GetRing(Conn& c,
                                                 std::string_view name) {
  PgConn& conn = Pg(c);
  static constexpr const char* kSql = R"sql(
    SELECT id, capacity, max_payload FROM sqlq_queues
    WHERE name = $1 AND kind = 'ring')sql";
  auto rows = conn.Run(kSql, Params().Text(name), "look up ring");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return Missing(conn, name, "ring");
  return core::RingRecord{
      .id = rows->Int(0, 0),
      .name = std::string(name),
      .options = {
          .capacity = rows->Int(0, 1),
          .max_payload_bytes = static_cast<std::size_t>(rows->Int(0, 2))}};
}

Status PostgresEngine::DropRing(Conn& c, std::int64_t ring_id) {
  // Groups, entries and counters go by ON DELETE CASCADE.
  static constexpr const char* kSql =
      "DELETE FROM sqlq_queues WHERE id = $1 AND kind = 'ring'";
  auto rows = Pg(c).Run(kSql, Params().Int(ring_id), "drop ring");
  return rows.ok() ? Status::Ok() : rows.status();
}

Result<RingEntry> PostgresEngine::RingPush(Conn& c,
                                           const core::RingPushParams& op) {
  const auto& [ring_id, group, payload] = op;
  PgConn& conn = Pg(c);
  // Checked (and locked against a concurrent drop) before writing: a
  // push to a dropped ring is a clean failure.
  Status s = CheckKind(conn, ring_id, "ring");
  if (!s.ok()) return s;
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  RingEntry e{.group = std::string(group),
              .payload = std::string(payload),
              .pushed_at = FromUs(*now)};
  // The group's row lock (taken here, held to commit) serialises the
  // pushes to the group.
  static constexpr const char* kGroup = R"sql(
    INSERT INTO sqlq_ring_groups AS g (ring_id, grp, last_seq, entries)
    VALUES ($1, $2, 1, 1)
    ON CONFLICT (ring_id, grp)
    DO UPDATE SET last_seq = g.last_seq + 1, entries = g.entries + 1
    RETURNING last_seq, entries)sql";
  auto grp = conn.Run(kGroup, Params().Int(ring_id).Bytes(group), "push");
  if (!grp.ok()) return grp.status();
  e.seq = grp->Int(0, 0);
  const std::int64_t entries = grp->Int(0, 1);
  // The capacity as it is now (this statement's snapshot is taken after
  // the group lock was granted), not as the caller's handle cached it.
  static constexpr const char* kEntry = R"sql(
    INSERT INTO sqlq_ring_entries (ring_id, grp, seq, pushed_us, payload)
    VALUES ($1, $2, $3, $4, $5)
    RETURNING (SELECT capacity FROM sqlq_queues WHERE id = $1))sql";
  auto ins = conn.Run(
      kEntry,
      Params().Int(ring_id).Bytes(group).Int(e.seq).Int(*now).Bytes(payload),
      "push");
  if (!ins.ok()) return ins.status();
  const std::int64_t capacity = ins->Int(0, 0);
  if (entries > capacity) {
    auto evicted = EvictOldest(conn, ring_id, group, entries - capacity);
    if (!evicted.ok()) return evicted.status();
  }
  s = AddCounters(conn, ring_id, {.pushes = 1});
  if (!s.ok()) return s;
  return e;
}

Result<std::vector<RingEntry>> PostgresEngine::RingRead(
    Conn& c, const core::RingReadParams& op) {
  const auto& [ring_id, group, o] = op;
  PgConn& conn = Pg(c);
  Status s = CheckQueue(conn, ring_id);
  if (!s.ok()) return s;
  static constexpr const char* kNewest = R"sql(
    SELECT seq, pushed_us, payload FROM sqlq_ring_entries
    WHERE ring_id = $1 AND grp = $2 AND seq < $4
    ORDER BY seq DESC LIMIT $3)sql";
  static constexpr const char* kOldest = R"sql(
    SELECT seq, pushed_us, payload FROM sqlq_ring_entries
    WHERE ring_id = $1 AND grp = $2 AND seq > $4
    ORDER BY seq LIMIT $3)sql";
  auto rows = conn.Run(o.oldest_first ? kOldest : kNewest,
                       Params().Int(ring_id).Bytes(group).Int(o.limit).Int(
                           core::RingReadBound(o)),
                       "read ring");
  if (!rows.ok()) return rows.status();
  return core::DecodeAll(
      *rows, [&](const auto& r) { return core::DecodeRingEntry(r, group); });
}

Result<std::vector<RingGroup>> PostgresEngine::RingGroups(
    Conn& c, std::int64_t ring_id) {
  PgConn& conn = Pg(c);
  Status s = CheckQueue(conn, ring_id);
  if (!s.ok()) return s;
  static constexpr const char* kSql = R"sql(
    SELECT grp, entries FROM sqlq_ring_groups
    WHERE ring_id = $1 AND entries > 0 ORDER BY grp)sql";
  auto rows = conn.Run(kSql, Params().Int(ring_id), "list groups");
  if (!rows.ok()) return rows.status();
  std::vector<RingGroup> out;
  out.reserve(rows->size());
  for (int i = 0; i < rows->size(); ++i) {
    out.push_back({.group = rows->Bytes(i, 0), .entries = rows->Int(i, 1)});
  }
  return out;
}

Status PostgresEngine::RingDelete(Conn& c, const core::RingDeleteParams& op) {
  const auto& [ring_id, group, seq] = op;
  PgConn& conn = Pg(c);
  Status s = CheckKind(conn, ring_id, "ring");
  if (!s.ok()) return s;
  auto locked = LockGroup(conn, ring_id, group);
  if (!locked.ok()) return locked.status();
  auto missing = [&] { return core::NoRingEntry(group, seq); };
  if (!*locked) return missing();
  static constexpr const char* kSql = R"sql(
    DELETE FROM sqlq_ring_entries
    WHERE ring_id = $1 AND grp = $2 AND seq = $3)sql";
  auto rows = conn.Run(kSql, Params().Int(ring_id).Bytes(group).Int(seq),
                       "delete entry");
  if (!rows.ok()) return rows.status();
  if (rows->affected() == 0) return missing();
  return AdjustEntries(conn, ring_id, group, -1);
}

Result<std::int64_t> PostgresEngine::RingDeleteGroup(
    Conn& c, const core::RingDeleteGroupParams& op) {
  const auto& [ring_id, group] = op;
  PgConn& conn = Pg(c);
  Status s = CheckKind(conn, ring_id, "ring");
  if (!s.ok()) return s;
  auto locked = LockGroup(conn, ring_id, group);
  if (!locked.ok()) return locked.status();
  if (!*locked) return std::int64_t{0};
  static constexpr const char* kSql = R"sql(
    DELETE FROM sqlq_ring_entries WHERE ring_id = $1 AND grp = $2)sql";
  auto rows =
      conn.Run(kSql, Params().Int(ring_id).Bytes(group), "delete group");
  if (!rows.ok()) return rows.status();
  const std::int64_t deleted = rows->affected();
  if (deleted > 0) {
    s = AdjustEntries(conn, ring_id, group, -deleted);
    if (!s.ok()) return s;
  }
  return deleted;
}

Result<std::int64_t> PostgresEngine::RingSetCapacity(
    Conn& c, const core::RingSetCapacityParams& op) {
  const auto& [ring_id, capacity] = op;
  PgConn& conn = Pg(c);
  // FOR UPDATE conflicts with the FOR KEY SHARE of pushes in flight: see
  // "rings" above.
  static constexpr const char* kLock = R"sql(
    SELECT 1 FROM sqlq_queues WHERE id = $1 AND kind = 'ring'
    FOR UPDATE)sql";
  auto locked = conn.Run(kLock, Params().Int(ring_id), "set capacity");
  if (!locked.ok()) return locked.status();
  if (locked->size() == 0) return core::KindGone("ring", ring_id);
  conn.known_queues.insert(ring_id);
  static constexpr const char* kSet =
      "UPDATE sqlq_queues SET capacity = $2 WHERE id = $1";
  auto set =
      conn.Run(kSet, Params().Int(ring_id).Int(capacity), "set capacity");
  if (!set.ok()) return set.status();
  static constexpr const char* kOver = R"sql(
    SELECT grp, entries FROM sqlq_ring_groups
    WHERE ring_id = $1 AND entries > $2 ORDER BY grp FOR UPDATE)sql";
  auto over =
      conn.Run(kOver, Params().Int(ring_id).Int(capacity), "set capacity");
  if (!over.ok()) return over.status();
  std::int64_t evicted = 0;
  for (int i = 0; i < over->size(); ++i) {
    const std::string group = over->Bytes(i, 0);
    auto n = EvictOldest(conn, ring_id, group, over->Int(i, 1) - capacity);
    if (!n.ok()) return n.status();
    evicted += *n;
  }
  return evicted;
}

Result<RingStats> PostgresEngine::RingStatsOf(Conn& c, std::int64_t ring_id) {
  static constexpr const char* kSql = R"sql(
    SELECT q.name, q.capacity,
      (SELECT coalesce(sum(pushes), 0)::bigint FROM sqlq_counts k
       WHERE k.queue_id = q.id),
      (SELECT count(*) FROM sqlq_ring_groups g
       WHERE g.ring_id = q.id AND g.entries > 0),
      (SELECT coalesce(sum(entries), 0)::bigint FROM sqlq_ring_groups g
       WHERE g.ring_id = q.id)
    FROM sqlq_queues q WHERE q.id = $1 AND q.kind = 'ring')sql";
  auto rows = Pg(c).Run(kSql, Params().Int(ring_id), "ring stats");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::KindGone("ring", ring_id);
  return core::DecodeRingStats(core::RowAt<Rows>{*rows, 0});
}

Result<bool> PostgresEngine::LockGroup(PgConn& conn, std::int64_t ring_id,
                                       std::string_view group) {
  static constexpr const char* kSql = R"sql(
    SELECT 1 FROM sqlq_ring_groups WHERE ring_id = $1 AND grp = $2
    FOR UPDATE)sql";
  auto rows = conn.Run(kSql, Params().Int(ring_id).Bytes(group), "lock group");
  if (!rows.ok()) return rows.status();
  return rows->size() > 0;
}

Result<std::int64_t> PostgresEngine::EvictOldest(PgConn& conn,
                                                 std::int64_t ring_id,
                                                 std::string_view group,
                                                 std::int64_t n) {
  static constexpr const char* kSql = R"sql(
    DELETE FROM sqlq_ring_entries
    WHERE ring_id = $1 AND grp = $2 AND seq IN (
      SELECT seq FROM sqlq_ring_entries
      WHERE ring_id = $1 AND grp = $2 ORDER BY seq LIMIT $3))sql";
  auto rows =
      conn.Run(kSql, Params().Int(ring_id).Bytes(group).Int(n), "evict");
  if (!rows.ok()) return rows.status();
  const std::int64_t evicted = rows->affected();
  Status s = AdjustEntries(conn, ring_id, group, -evicted);
  if (!s.ok()) return s;
  return evicted;
}

Status PostgresEngine::AdjustEntries(PgConn& conn, std::int64_t ring_id,
                                     std::string_view group,
                                     std::int64_t delta) {
  static constexpr const char* kSql = R"sql(
    UPDATE sqlq_ring_groups SET entries = entries + $3
    WHERE ring_id = $1 AND grp = $2)sql";
  auto rows = conn.Run(kSql, Params().Int(ring_id).Bytes(group).Int(delta),
                       "count entries");
  return rows.ok() ? Status::Ok() : rows.status();
}

}  // namespace sqlq::engines::postgres
