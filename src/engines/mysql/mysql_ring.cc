// MariaDB/MySQL engine: rings (docs/rings-and-rotations.md).

#include "engines/mysql/mysql_engine_impl.h"

namespace sqlq::engines::mysql {

Result<core::RingRecord> MysqlEngine::CreateRing(
    Conn& c, const core::CreateRingParams& op) {
  const auto& [name, o] = op;
  auto id = InsertKind(My(c), name, "ring", o.max_payload_bytes, o.capacity, 0);
  if (!id.ok()) return id.status();
  return core::RingRecord{.id = *id, .name = std::string(name), .options = o};
}

Result<core::RingRecord> MysqlEngine::GetRing(Conn& c, std::string_view name) {
  MyConn& conn = My(c);
  static const std::string kSql = R"sql(
    SELECT id, capacity, max_payload FROM sqlq_queues
    WHERE name = ? AND kind = 'ring')sql";
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

Status MysqlEngine::DropRing(Conn& c, std::int64_t ring_id) {
  static const std::string kSql =
      "DELETE FROM sqlq_queues WHERE id = ? AND kind = 'ring'";
  auto rows = My(c).Run(kSql, Params().Int(ring_id), "drop ring");
  return rows.ok() ? Status::Ok() : rows.status();
}

Result<RingEntry> MysqlEngine::RingPush(Conn& c,
                                        const core::RingPushParams& op) {
  const auto& [ring_id, group, payload] = op;
  MyConn& conn = My(c);
  Status s = CheckKind(conn, ring_id, "ring");
  if (!s.ok()) return s;
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  RingEntry e{.group = std::string(group),
              .payload = std::string(payload),
              .pushed_at = FromUs(*now)};
  // The group's row lock (taken here, held to commit) serialises the
  // pushes to the group. The table has one unique key (its primary key),
  // so the upsert is safe for statement-based replication.
  static const std::string kGroup = R"sql(
    INSERT INTO sqlq_ring_groups (ring_id, grp, last_seq, entries)
    VALUES (?, ?, 1, 1)
    ON DUPLICATE KEY UPDATE last_seq = last_seq + 1, entries = entries + 1)sql";
  auto up = conn.Run(kGroup, Params().Int(ring_id).Bytes(group), "push");
  if (!up.ok()) return up.status();
  // Read under our lock: READ COMMITTED reads the latest version, ours.
  static const std::string kRead = R"sql(
    SELECT g.last_seq, g.entries, q.capacity
    FROM sqlq_ring_groups g JOIN sqlq_queues q ON q.id = g.ring_id
    WHERE g.ring_id = ? AND g.grp = ?)sql";
  auto grp = conn.Run(kRead, Params().Int(ring_id).Bytes(group), "push");
  if (!grp.ok()) return grp.status();
  if (grp->size() == 0) return core::KindGone("ring", ring_id);
  e.seq = grp->Int(0, 0);
  const std::int64_t entries = grp->Int(0, 1);
  const std::int64_t capacity = grp->Int(0, 2);
  static const std::string kEntry = R"sql(
    INSERT INTO sqlq_ring_entries (ring_id, grp, seq, pushed_us, payload)
    VALUES (?, ?, ?, ?, ?))sql";
  auto ins = conn.Run(
      kEntry,
      Params().Int(ring_id).Bytes(group).Int(e.seq).Int(*now).Bytes(payload),
      "push");
  if (!ins.ok()) return ins.status();
  if (entries > capacity) {
    auto evicted = EvictOldest(conn, ring_id, group, entries - capacity);
    if (!evicted.ok()) return evicted.status();
  }
  s = AddCounters(conn, ring_id, {.pushes = 1});
  if (!s.ok()) return s;
  return e;
}

Result<std::vector<RingEntry>> MysqlEngine::RingRead(
    Conn& c, const core::RingReadParams& op) {
  const auto& [ring_id, group, o] = op;
  MyConn& conn = My(c);
  Status s = CheckQueue(conn, ring_id);
  if (!s.ok()) return s;
  static const std::string kNewest = R"sql(
    SELECT seq, pushed_us, payload FROM sqlq_ring_entries
    WHERE ring_id = ? AND grp = ? AND seq < ?
    ORDER BY seq DESC LIMIT ?)sql";
  static const std::string kOldest = R"sql(
    SELECT seq, pushed_us, payload FROM sqlq_ring_entries
    WHERE ring_id = ? AND grp = ? AND seq > ?
    ORDER BY seq LIMIT ?)sql";
  auto rows = conn.Run(o.oldest_first ? kOldest : kNewest,
                       Params()
                           .Int(ring_id)
                           .Bytes(group)
                           .Int(core::RingReadBound(o))
                           .Int(o.limit),
                       "read ring");
  if (!rows.ok()) return rows.status();
  return core::DecodeAll(
      *rows, [&](const auto& r) { return core::DecodeRingEntry(r, group); });
}

Result<std::vector<RingGroup>> MysqlEngine::RingGroups(Conn& c,
                                                       std::int64_t ring_id) {
  MyConn& conn = My(c);
  Status s = CheckQueue(conn, ring_id);
  if (!s.ok()) return s;
  static const std::string kSql = R"sql(
    SELECT grp, entries FROM sqlq_ring_groups
    WHERE ring_id = ? AND entries > 0 ORDER BY grp)sql";
  auto rows = conn.Run(kSql, Params().Int(ring_id), "list groups");
  if (!rows.ok()) return rows.status();
  std::vector<RingGroup> out;
  out.reserve(rows->size());
  for (int i = 0; i < rows->size(); ++i) {
    out.push_back({.group = rows->Bytes(i, 0), .entries = rows->Int(i, 1)});
  }
  return out;
}

Status MysqlEngine::RingDelete(Conn& c, const core::RingDeleteParams& op) {
  const auto& [ring_id, group, seq] = op;
  MyConn& conn = My(c);
  Status s = CheckKind(conn, ring_id, "ring");
  if (!s.ok()) return s;
  auto locked = LockGroup(conn, ring_id, group);
  if (!locked.ok()) return locked.status();
  auto missing = [&] { return core::NoRingEntry(group, seq); };
  if (!*locked) return missing();
  static const std::string kSql = R"sql(
    DELETE FROM sqlq_ring_entries
    WHERE ring_id = ? AND grp = ? AND seq = ?)sql";
  auto rows = conn.Run(kSql, Params().Int(ring_id).Bytes(group).Int(seq),
                       "delete entry");
  if (!rows.ok()) return rows.status();
  if (rows->affected() == 0) return missing();
  return AdjustEntries(conn, ring_id, group, -1);
}

Result<std::int64_t> MysqlEngine::RingDeleteGroup(
    Conn& c, const core::RingDeleteGroupParams& op) {
  const auto& [ring_id, group] = op;
  MyConn& conn = My(c);
  Status s = CheckKind(conn, ring_id, "ring");
  if (!s.ok()) return s;
  auto locked = LockGroup(conn, ring_id, group);
  if (!locked.ok()) return locked.status();
  if (!*locked) return std::int64_t{0};
  static const std::string kSql = R"sql(
    DELETE FROM sqlq_ring_entries WHERE ring_id = ? AND grp = ?)sql";
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

Result<std::int64_t> MysqlEngine::RingSetCapacity(
    Conn& c, const core::RingSetCapacityParams& op) {
  const auto& [ring_id, capacity] = op;
  MyConn& conn = My(c);
  static const std::string kLock = R"sql(
    SELECT 1 FROM sqlq_queues WHERE id = ? AND kind = 'ring' FOR UPDATE)sql";
  auto locked = conn.Run(kLock, Params().Int(ring_id), "set capacity");
  if (!locked.ok()) return locked.status();
  if (locked->size() == 0) return core::KindGone("ring", ring_id);
  conn.known_queues.insert(ring_id);
  static const std::string kSet =
      "UPDATE sqlq_queues SET capacity = ? WHERE id = ?";
  auto set =
      conn.Run(kSet, Params().Int(capacity).Int(ring_id), "set capacity");
  if (!set.ok()) return set.status();
  static const std::string kOver = R"sql(
    SELECT grp, entries FROM sqlq_ring_groups
    WHERE ring_id = ? AND entries > ? ORDER BY grp FOR UPDATE)sql";
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

Result<RingStats> MysqlEngine::RingStatsOf(Conn& c, std::int64_t ring_id) {
  static const std::string kSql = R"sql(
    SELECT q.name, q.capacity,
      (SELECT COALESCE(SUM(pushes), 0) FROM sqlq_counters k
       WHERE k.queue_id = q.id),
      (SELECT COUNT(*) FROM sqlq_ring_groups g
       WHERE g.ring_id = q.id AND g.entries > 0),
      (SELECT COALESCE(SUM(entries), 0) FROM sqlq_ring_groups g
       WHERE g.ring_id = q.id)
    FROM sqlq_queues q WHERE q.id = ? AND q.kind = 'ring')sql";
  auto rows = My(c).Run(kSql, Params().Int(ring_id), "ring stats");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::KindGone("ring", ring_id);
  return core::DecodeRingStats(core::RowAt<Rows>{*rows, 0});
}

Result<bool> MysqlEngine::LockGroup(MyConn& conn, std::int64_t ring_id,
                                    std::string_view group) {
  static const std::string kSql = R"sql(
    SELECT 1 FROM sqlq_ring_groups WHERE ring_id = ? AND grp = ?
    FOR UPDATE)sql";
  auto rows = conn.Run(kSql, Params().Int(ring_id).Bytes(group), "lock group");
  if (!rows.ok()) return rows.status();
  return rows->size() > 0;
}

Result<std::int64_t> MysqlEngine::EvictOldest(MyConn& conn,
                                              std::int64_t ring_id,
                                              std::string_view group,
                                              std::int64_t n) {
  static const std::string kCut = R"sql(
    SELECT seq FROM sqlq_ring_entries WHERE ring_id = ? AND grp = ?
    ORDER BY seq LIMIT 1 OFFSET ? LOCK IN SHARE MODE)sql";
  auto cut =
      conn.Run(kCut, Params().Int(ring_id).Bytes(group).Int(n - 1), "evict");
  if (!cut.ok()) return cut.status();
  const std::int64_t upto = cut->size() > 0
                                ? cut->Int(0, 0)
                                : std::numeric_limits<std::int64_t>::max();
  static const std::string kSql = R"sql(
    DELETE FROM sqlq_ring_entries
    WHERE ring_id = ? AND grp = ? AND seq <= ?)sql";
  auto rows =
      conn.Run(kSql, Params().Int(ring_id).Bytes(group).Int(upto), "evict");
  if (!rows.ok()) return rows.status();
  const std::int64_t evicted = rows->affected();
  Status s = AdjustEntries(conn, ring_id, group, -evicted);
  if (!s.ok()) return s;
  return evicted;
}

Status MysqlEngine::AdjustEntries(MyConn& conn, std::int64_t ring_id,
                                  std::string_view group, std::int64_t delta) {
  static const std::string kSql = R"sql(
    UPDATE sqlq_ring_groups SET entries = entries + ?
    WHERE ring_id = ? AND grp = ?)sql";
  auto rows = conn.Run(kSql, Params().Int(delta).Int(ring_id).Bytes(group),
                       "count entries");
  return rows.ok() ? Status::Ok() : rows.status();
}

}  // namespace sqlq::engines::mysql
