// SqlEngine (sql_engine.h): rings (docs/rings-and-rotations.md). Included
// only where an engine instantiates SqlEngine<D>.

#ifndef SQLQ_ENGINES_SHARED_SQL_RING_H_
#define SQLQ_ENGINES_SHARED_SQL_RING_H_

#include "core/errors.h"
#include "core/rows.h"
#include "engines/shared/kinds_sql.h"
#include "engines/shared/sql_engine.h"

namespace sqlq::engines::shared {

template <class D>
Result<core::RingRecord> SqlEngine<D>::CreateRing(
    core::Conn& c, const core::CreateRingParams& op) {
  const auto& [name, o] = op;
  auto id =
      InsertKind(Native(c), name, "ring", o.max_payload_bytes, o.capacity, 0);
  if (!id.ok()) return id.status();
  return core::RingRecord{.id = *id, .name = std::string(name), .options = o};
}

template <class D>
Result<core::RingRecord> SqlEngine<D>::GetRing(core::Conn& c,
                                               std::string_view name) {
  auto rows = FindKind(Native(c), name, "ring");
  if (!rows.ok()) return rows.status();
  return core::RingRecord{
      .id = rows->Int(0, 0),
      .name = std::string(name),
      .options = {
          .capacity = rows->Int(0, 1),
          .max_payload_bytes = static_cast<std::size_t>(rows->Int(0, 3))}};
}

template <class D>
Result<core::KindsRecord> SqlEngine<D>::ListRingsAndRotations(core::Conn& c) {
  static const std::string kSql = D::Statement(kListKindsSql);
  auto rows = Native(c).Run(kSql, Params(), "list rings and rotations");
  if (!rows.ok()) return rows.status();
  core::KindsRecord out;
  for (int i = 0; i < rows->size(); ++i) {
    core::DecodeKind(core::RowAt<Rows>{*rows, i}, out);
  }
  return out;
}

template <class D>
Status SqlEngine<D>::DropRing(core::Conn& c, std::int64_t ring_id) {
  // Groups, entries and counters go with the ring's row.
  static const std::string kEntries =
      D::Statement("DELETE FROM sqlq_ring_entries WHERE ring_id = ?");
  static const std::string kGroups =
      D::Statement("DELETE FROM sqlq_ring_groups WHERE ring_id = ?");
  static const std::string kSql =
      D::Statement("DELETE FROM sqlq_queues WHERE id = ? AND kind = 'ring'");
  return DropKindRow(Native(c), ring_id, kSql, {&kEntries, &kGroups},
                     "drop ring");
}

template <class D>
Result<RingEntry> SqlEngine<D>::PushToRing(core::Conn& c,
                                           const core::PushToRingParams& op) {
  const auto& [ring_id, group, payload] = op;
  DConn& conn = Native(c);
  // Checked (and locked against a concurrent drop) before writing: a
  // push to a dropped ring is a clean failure.
  Status s = CheckKind(conn, ring_id, "ring");
  if (!s.ok()) return s;
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  auto pushed = D::PushEntry(conn, ring_id, group, *now, payload);
  if (!pushed.ok()) return pushed.status();
  if (pushed->entries > pushed->capacity) {
    auto evicted =
        EvictOldest(conn, ring_id, group, pushed->entries - pushed->capacity);
    if (!evicted.ok()) return evicted.status();
  }
  s = AddCounters(conn, ring_id, {.pushes = 1});
  if (!s.ok()) return s;
  return RingEntry{.seq = pushed->seq,
                   .group = std::string(group),
                   .payload = std::string(payload),
                   .pushed_at = core::FromUs(*now)};
}

template <class D>
Result<std::vector<RingEntry>> SqlEngine<D>::ReadRing(
    core::Conn& c, const core::ReadRingParams& op) {
  const auto& [ring_id, group, o] = op;
  DConn& conn = Native(c);
  Status s = CheckQueue(conn, ring_id);
  if (!s.ok()) return s;
  static const std::string kNewest = D::Statement(R"sql(
    SELECT seq, pushed_us, payload FROM sqlq_ring_entries
    WHERE ring_id = ? AND grp = ? AND seq < ?
    ORDER BY seq DESC LIMIT ?)sql");
  static const std::string kOldest = D::Statement(R"sql(
    SELECT seq, pushed_us, payload FROM sqlq_ring_entries
    WHERE ring_id = ? AND grp = ? AND seq > ?
    ORDER BY seq LIMIT ?)sql");
  auto rows = conn.Run(o.oldest_first ? kOldest : kNewest,
                       Params()
                           .Int(ring_id)
                           .Bytes(group)
                           .Int(core::RingReadBound(o))
                           .Int(o.limit),
                       "read ring");
  if (!rows.ok()) return rows.status();
  // (A lambda names a structured binding through an init-capture: clang 14,
  // which builds the fuzz targets, cannot capture one directly.)
  return core::DecodeAll(*rows, [&grp = group](const auto& r) {
    return core::DecodeRingEntry(r, grp);
  });
}

template <class D>
Result<std::vector<RingGroup>> SqlEngine<D>::ListRingGroups(
    core::Conn& c, std::int64_t ring_id) {
  DConn& conn = Native(c);
  Status s = CheckQueue(conn, ring_id);
  if (!s.ok()) return s;
  static const std::string kSql = D::Statement(R"sql(
    SELECT grp, entries FROM sqlq_ring_groups
    WHERE ring_id = ? AND entries > 0 ORDER BY grp)sql");
  auto rows = conn.Run(kSql, Params().Int(ring_id), "list groups");
  if (!rows.ok()) return rows.status();
  std::vector<RingGroup> out;
  out.reserve(rows->size());
  for (int i = 0; i < rows->size(); ++i) {
    out.push_back({.group = rows->Bytes(i, 0), .entries = rows->Int(i, 1)});
  }
  return out;
}

template <class D>
Status SqlEngine<D>::DeleteRingEntry(core::Conn& c,
                                     const core::DeleteRingEntryParams& op) {
  const auto& [ring_id, group, seq] = op;
  DConn& conn = Native(c);
  Status s = CheckKind(conn, ring_id, "ring");
  if (!s.ok()) return s;
  auto locked = LockGroup(conn, ring_id, group);
  if (!locked.ok()) return locked.status();
  auto missing = [&grp = group, n = seq] { return core::NoRingEntry(grp, n); };
  if (!*locked) return missing();
  static const std::string kSql = D::Statement(R"sql(
    DELETE FROM sqlq_ring_entries
    WHERE ring_id = ? AND grp = ? AND seq = ?)sql");
  auto rows = conn.Run(kSql, Params().Int(ring_id).Bytes(group).Int(seq),
                       "delete entry");
  if (!rows.ok()) return rows.status();
  if (rows->affected() == 0) return missing();
  return AdjustEntries(conn, ring_id, group, -1);
}

template <class D>
Result<std::int64_t> SqlEngine<D>::DeleteRingGroup(
    core::Conn& c, const core::DeleteRingGroupParams& op) {
  const auto& [ring_id, group] = op;
  DConn& conn = Native(c);
  Status s = CheckKind(conn, ring_id, "ring");
  if (!s.ok()) return s;
  auto locked = LockGroup(conn, ring_id, group);
  if (!locked.ok()) return locked.status();
  if (!*locked) return std::int64_t{0};
  static const std::string kSql = D::Statement(
      "DELETE FROM sqlq_ring_entries WHERE ring_id = ? AND grp = ?");
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

template <class D>
Result<std::int64_t> SqlEngine<D>::SetRingCapacity(
    core::Conn& c, const core::SetRingCapacityParams& op) {
  const auto& [ring_id, capacity] = op;
  DConn& conn = Native(c);
  // FOR UPDATE conflicts with the share lock of pushes in flight: see
  // "Locking" in sql_engine.h.
  static const std::string kLock = D::Statement(
      std::string("SELECT 1 FROM sqlq_queues WHERE id = ? AND kind = 'ring'") +
      D::kForUpdate);
  auto locked = conn.Run(kLock, Params().Int(ring_id), "set capacity");
  if (!locked.ok()) return locked.status();
  if (locked->size() == 0) return core::KindGone("ring", ring_id);
  conn.known_queues.insert(ring_id);
  static const std::string kSet =
      D::Statement("UPDATE sqlq_queues SET capacity = ? WHERE id = ?");
  auto set =
      conn.Run(kSet, Params().Int(capacity).Int(ring_id), "set capacity");
  if (!set.ok()) return set.status();
  static const std::string kOver = D::Statement(std::string(R"sql(
    SELECT grp, entries FROM sqlq_ring_groups
    WHERE ring_id = ? AND entries > ? ORDER BY grp)sql") +
                                                D::kForUpdate);
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

template <class D>
Result<RingStats> SqlEngine<D>::GetRingStats(core::Conn& c,
                                             std::int64_t ring_id) {
  auto rows = Native(c).Run(D::kRingStats, Params().Int(ring_id), "ring stats");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::KindGone("ring", ring_id);
  return core::DecodeRingStats(core::RowAt<Rows>{*rows, 0});
}

template <class D>
Result<bool> SqlEngine<D>::LockGroup(DConn& conn, std::int64_t ring_id,
                                     std::string_view group) {
  static const std::string kSql = D::Statement(
      std::string(
          "SELECT 1 FROM sqlq_ring_groups WHERE ring_id = ? AND grp = ?") +
      D::kForUpdate);
  auto rows = conn.Run(kSql, Params().Int(ring_id).Bytes(group), "lock group");
  if (!rows.ok()) return rows.status();
  return rows->size() > 0;
}

template <class D>
Result<std::int64_t> SqlEngine<D>::EvictOldest(DConn& conn,
                                               std::int64_t ring_id,
                                               std::string_view group,
                                               std::int64_t n) {
  auto evicted = D::DeleteOldest(conn, ring_id, group, n);
  if (!evicted.ok()) return evicted.status();
  Status s = AdjustEntries(conn, ring_id, group, -*evicted);
  if (!s.ok()) return s;
  return *evicted;
}

template <class D>
Status SqlEngine<D>::AdjustEntries(DConn& conn, std::int64_t ring_id,
                                   std::string_view group, std::int64_t delta) {
  static const std::string kSql = D::Statement(R"sql(
    UPDATE sqlq_ring_groups SET entries = entries + ?
    WHERE ring_id = ? AND grp = ?)sql");
  auto rows = conn.Run(kSql, Params().Int(delta).Int(ring_id).Bytes(group),
                       "count entries");
  return rows.ok() ? Status::Ok() : rows.status();
}

}  // namespace sqlq::engines::shared

#endif  // SQLQ_ENGINES_SHARED_SQL_RING_H_
