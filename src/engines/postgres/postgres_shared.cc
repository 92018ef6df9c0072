// PostgreSQL engine: its side of the logic shared with MariaDB
// (dialect.h), and that logic's one instantiation for this engine.

#include "engines/postgres/dialect.h"
#include "engines/postgres/postgres_engine_impl.h"
#include "engines/shared/sql_groups.h"
#include "engines/shared/sql_limits.h"
#include "engines/shared/sql_queue.h"
#include "engines/shared/sql_ring.h"
#include "engines/shared/sql_rotation.h"
#include "engines/shared/sql_schedules.h"

namespace sqlq::engines::postgres {

Result<std::optional<std::int64_t>> Dialect::InsertName(PgConn& conn,
                                                        const char* sql,
                                                        const Params& params,
                                                        std::string_view what) {
  auto rows = conn.Run(sql, params, what);
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return std::optional<std::int64_t>();
  return std::optional<std::int64_t>(rows->Int(0, 0));
}

Result<shared::Pushed> Dialect::PushEntry(PgConn& conn, std::int64_t ring_id,
                                          std::string_view group,
                                          std::int64_t now_us,
                                          std::string_view payload) {
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
  shared::Pushed out{.seq = grp->Int(0, 0), .entries = grp->Int(0, 1)};
  // The capacity as it is now: this statement's snapshot is taken after
  // the group lock was granted.
  static constexpr const char* kEntry = R"sql(
    INSERT INTO sqlq_ring_entries (ring_id, grp, seq, pushed_us, payload)
    VALUES ($1, $2, $3, $4, $5)
    RETURNING (SELECT capacity FROM sqlq_queues WHERE id = $1))sql";
  auto ins = conn.Run(
      kEntry,
      Params().Int(ring_id).Bytes(group).Int(out.seq).Int(now_us).Bytes(
          payload),
      "push");
  if (!ins.ok()) return ins.status();
  out.capacity = ins->Int(0, 0);
  return out;
}

Result<std::int64_t> Dialect::DeleteOldest(PgConn& conn, std::int64_t ring_id,
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
  return rows->affected();
}

Result<std::int64_t> Dialect::NextStamp(PgConn& conn, std::int64_t rotation_id,
                                        std::int64_t count) {
  static constexpr const char* kSql = R"sql(
    UPDATE sqlq_queues SET next_stamp = next_stamp + $2
    WHERE id = $1 RETURNING next_stamp)sql";
  auto rows = conn.Run(kSql, Params().Int(rotation_id).Int(count), "stamp");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::KindGone("rotation", rotation_id);
  return rows->Int(0, 0);
}

Result<RotationItem> Dialect::UpdateItem(PgConn& conn, const char* sql,
                                         const Params& params,
                                         std::int64_t /*rotation_id*/,
                                         std::string_view key) {
  auto rows = conn.Run(sql, params, "update item");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return core::NoItem(key);
  return core::DecodeItem(core::RowAt<Rows>{*rows, 0});
}

Status Dialect::WriteHolds(PgConn& conn, std::int64_t queue_id,
                           const std::vector<shared::HeldKey>& keys,
                           std::int64_t until_us) {
  static constexpr const char* kSql = R"sql(
    INSERT INTO sqlq_dedup_holds (queue_id, dedup, message_id, until_us)
    SELECT $1, h.dedup, h.id, $4
    FROM unnest($2::bytea[], $3::bigint[]) AS h(dedup, id)
    ON CONFLICT (queue_id, dedup) DO UPDATE
      SET message_id = excluded.message_id, until_us = excluded.until_us)sql";
  std::vector<std::optional<std::string_view>> dedup;
  std::vector<std::int64_t> ids;
  for (const shared::HeldKey& k : keys) {
    dedup.emplace_back(k.key);
    ids.push_back(k.message_id);
  }
  auto rows = conn.Run(
      kSql,
      Params().Int(queue_id).BytesArray(dedup).IntArray(ids).Int(until_us),
      "hold dedup keys");
  return rows.ok() ? Status::Ok() : rows.status();
}

}  // namespace sqlq::engines::postgres

template class sqlq::engines::shared::SqlEngine<
    sqlq::engines::postgres::Dialect>;
