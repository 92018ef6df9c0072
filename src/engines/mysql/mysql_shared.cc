// MariaDB/MySQL engine: its side of the logic shared with PostgreSQL
// (dialect.h), and that logic's one instantiation for this engine.

#include <limits>

#include "engines/mysql/dialect.h"
#include "engines/mysql/mysql_engine_impl.h"
#include "engines/shared/sql_batches.h"
#include "engines/shared/sql_deps.h"
#include "engines/shared/sql_groups.h"
#include "engines/shared/sql_holds.h"
#include "engines/shared/sql_limits.h"
#include "engines/shared/sql_queue.h"
#include "engines/shared/sql_results.h"
#include "engines/shared/sql_ring.h"
#include "engines/shared/sql_rotation.h"
#include "engines/shared/sql_schedules.h"
#include "engines/shared/sql_topics.h"

namespace sqlq::engines::mysql {

Result<std::optional<std::int64_t>> Dialect::InsertName(MyConn& conn,
                                                        const std::string& sql,
                                                        Params& params,
                                                        std::string_view what) {
  auto rows = conn.Run(sql, params, what, /*clean_ok=*/true);
  if (rows.status().code() == Code::kAlreadyExists) {
    return std::optional<std::int64_t>();
  }
  if (!rows.ok()) return rows.status();
  return std::optional<std::int64_t>(
      static_cast<std::int64_t>(rows->insert_id()));
}

Result<shared::Pushed> Dialect::PushEntry(MyConn& conn, std::int64_t ring_id,
                                          std::string_view group,
                                          std::int64_t now_us,
                                          std::string_view payload) {
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
  const shared::Pushed out{.seq = grp->Int(0, 0),
                           .entries = grp->Int(0, 1),
                           .capacity = grp->Int(0, 2)};
  static const std::string kEntry = R"sql(
    INSERT INTO sqlq_ring_entries (ring_id, grp, seq, pushed_us, payload)
    VALUES (?, ?, ?, ?, ?))sql";
  auto ins = conn.Run(
      kEntry,
      Params().Int(ring_id).Bytes(group).Int(out.seq).Int(now_us).Bytes(
          payload),
      "push");
  if (!ins.ok()) return ins.status();
  return out;
}

Result<std::int64_t> Dialect::DeleteOldest(MyConn& conn, std::int64_t ring_id,
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
  return rows->affected();
}

Result<std::int64_t> Dialect::NextStamp(MyConn& conn, std::int64_t rotation_id,
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

Result<RotationItem> Dialect::UpdateItem(MyConn& conn, const std::string& sql,
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

Status Dialect::WriteHolds(MyConn& conn, std::int64_t queue_id,
                           const std::vector<shared::HeldKey>& keys,
                           std::int64_t until_us) {
  constexpr std::size_t kPage = 64;
  for (std::size_t at = 0; at < keys.size(); at += kPage) {
    const std::size_t n = std::min(kPage, keys.size() - at);
    std::string sql =
        "INSERT INTO sqlq_dedup_holds (queue_id, dedup, message_id, "
        "until_us) VALUES ";
    Params p;
    for (std::size_t i = 0; i < n; ++i) {
      sql += i == 0 ? "(?, ?, ?, ?)" : ", (?, ?, ?, ?)";
      p.Int(queue_id)
          .Bytes(keys[at + i].key)
          .Int(keys[at + i].message_id)
          .Int(until_us);
    }
    sql +=
        " ON DUPLICATE KEY UPDATE message_id = VALUES(message_id), "
        "until_us = VALUES(until_us)";
    auto rows = n == 1 ? conn.Run(sql, p, "hold dedup keys")
                       : conn.RunOnce(sql, p, "hold dedup keys");
    if (!rows.ok()) return rows.status();
  }
  return Status::Ok();
}

}  // namespace sqlq::engines::mysql

template class sqlq::engines::shared::SqlEngine<sqlq::engines::mysql::Dialect>;
template class sqlq::engines::shared::PooledSqlEngine<
    sqlq::engines::mysql::Dialect>;
