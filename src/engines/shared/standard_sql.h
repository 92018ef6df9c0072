// What PostgreSQL's and SQLite's dialects (sql_engine.h) write alike:
// both return the rows an INSERT or UPDATE wrote (RETURNING), skip a taken
// name with ON CONFLICT DO NOTHING, and take LIMIT in a subquery, where
// MariaDB's dialect reads rows back, relies on a duplicate key and cuts in
// two steps. A dialect D derives from StandardSql<D>; the statements are
// written with ? and go through D::Statement, and their locking reads end
// with D::kForUpdate (empty on SQLite, whose write transaction holds the
// database's one write lock).

#ifndef SQLQ_ENGINES_SHARED_STANDARD_SQL_H_
#define SQLQ_ENGINES_SHARED_STANDARD_SQL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/errors.h"
#include "core/rows.h"
#include "engines/shared/sql_engine.h"

namespace sqlq::engines::shared {

template <class D>
struct StandardSql {
  // What an insert of a named row (InsertName) ends with: no row back when
  // the name is taken (a failed statement would abort a PostgreSQL
  // transaction).
  static constexpr const char* kInsertNameTail =
      " ON CONFLICT (name) DO NOTHING RETURNING id";

  // Runs an insert of a named row (sql_queue.h): the new row's id, or
  // nullopt when the name is taken.
  template <class Conn, class Params>
  static Result<std::optional<std::int64_t>> InsertName(Conn& conn,
                                                        const std::string& sql,
                                                        const Params& params,
                                                        std::string_view what) {
    auto rows = conn.Run(sql, params, what);
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return std::optional<std::int64_t>();
    return std::optional<std::int64_t>(rows->Int(0, 0));
  }

  // Adds an entry to a ring's group. The upsert of the group's row returns
  // the entry's seq, and its row lock (held to commit) serialises the
  // pushes to the group; the insert of the entry returns the ring's
  // capacity as it is now (on PostgreSQL the statement's snapshot is taken
  // after the group lock was granted).
  template <class Conn>
  static Result<Pushed> PushEntry(Conn& conn, std::int64_t ring_id,
                                  std::string_view group, std::int64_t now_us,
                                  std::string_view payload) {
    static const std::string kGroup = D::Statement(R"sql(
      INSERT INTO sqlq_ring_groups AS g (ring_id, grp, last_seq, entries)
      VALUES (?, ?, 1, 1)
      ON CONFLICT (ring_id, grp)
      DO UPDATE SET last_seq = g.last_seq + 1, entries = g.entries + 1
      RETURNING last_seq, entries)sql");
    auto grp = conn.Run(kGroup, typename D::Params().Int(ring_id).Bytes(group),
                        "push");
    if (!grp.ok()) return grp.status();
    Pushed out{.seq = grp->Int(0, 0), .entries = grp->Int(0, 1)};
    static const std::string kEntry = D::Statement(R"sql(
      INSERT INTO sqlq_ring_entries (ring_id, grp, seq, pushed_us, payload)
      VALUES (?, ?, ?, ?, ?)
      RETURNING (SELECT capacity FROM sqlq_queues WHERE id = ?))sql");
    auto ins = conn.Run(kEntry,
                        typename D::Params()
                            .Int(ring_id)
                            .Bytes(group)
                            .Int(out.seq)
                            .Int(now_us)
                            .Payload(payload)
                            .Int(ring_id),
                        "push");
    if (!ins.ok()) return ins.status();
    out.capacity = ins->Int(0, 0);
    return out;
  }

  // Deletes the group's `n` oldest entries (lowest seq: a total order) in
  // one statement.
  template <class Conn>
  static Result<std::int64_t> DeleteOldest(Conn& conn, std::int64_t ring_id,
                                           std::string_view group,
                                           std::int64_t n) {
    static const std::string kSql = D::Statement(R"sql(
      DELETE FROM sqlq_ring_entries
      WHERE ring_id = ? AND grp = ? AND seq IN (
        SELECT seq FROM sqlq_ring_entries
        WHERE ring_id = ? AND grp = ? ORDER BY seq LIMIT ?))sql");
    auto rows = conn.Run(kSql,
                         typename D::Params()
                             .Int(ring_id)
                             .Bytes(group)
                             .Int(ring_id)
                             .Bytes(group)
                             .Int(n),
                         "evict");
    if (!rows.ok()) return rows.status();
    return rows->affected();
  }

  // Takes the rotation's next `count` stamps and returns the last.
  // REQUIRES: the rotation locked.
  template <class Conn>
  static Result<std::int64_t> NextStamp(Conn& conn, std::int64_t rotation_id,
                                        std::int64_t count) {
    static const std::string kSql = D::Statement(R"sql(
      UPDATE sqlq_queues SET next_stamp = next_stamp + ?
      WHERE id = ? AND kind = 'rotation' RETURNING next_stamp)sql");
    auto rows = conn.Run(kSql, typename D::Params().Int(count).Int(rotation_id),
                         "stamp");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::KindGone("rotation", rotation_id);
    return rows->Int(0, 0);
  }

  // Rotation items: the key column is `key` (a reserved word on MariaDB,
  // whose column is item_key); `parked` is compared with false, which is
  // PostgreSQL's boolean and SQLite's 0, so that both seek the rotation's
  // order index. Updates return the item (UpdateItem).
  static inline const std::string kItemExists = D::Statement(
      "SELECT 1 FROM sqlq_rotation_items WHERE rotation_id = ? AND key = ?");
  static inline const std::string kInsertItem = D::Statement(R"sql(
    INSERT INTO sqlq_rotation_items (rotation_id, key, payload, added)
    VALUES (?, ?, ?, ?))sql");
  static inline const std::string kRemoveItem = D::Statement(
      "DELETE FROM sqlq_rotation_items WHERE rotation_id = ? AND key = ?");
  static inline const std::string kNextItems = D::Statement(std::string(R"sql(
    SELECT key, payload, serves, failures FROM sqlq_rotation_items
    WHERE rotation_id = ? AND parked = false
    ORDER BY last_served, added LIMIT ?)sql") + D::kForUpdate);
  static inline const std::string kServeItem = D::Statement(R"sql(
    UPDATE sqlq_rotation_items SET last_served = ?, serves = serves + 1
    WHERE rotation_id = ? AND key = ?)sql");
  // Both assignments read the row as it was.
  static inline const std::string kFailItem = D::Statement(R"sql(
    UPDATE sqlq_rotation_items
    SET failures = failures + 1, parked = (failures + 1 >= ?)
    WHERE rotation_id = ? AND key = ?
    RETURNING key, payload, serves, failures, parked)sql");
  static inline const std::string kItemParked =
      D::Statement(std::string("SELECT parked FROM sqlq_rotation_items "
                               "WHERE rotation_id = ? AND key = ?") +
                   D::kForUpdate);
  static inline const std::string kOkItem = D::Statement(R"sql(
    UPDATE sqlq_rotation_items SET failures = 0
    WHERE rotation_id = ? AND key = ?
    RETURNING key, payload, serves, failures, parked)sql");
  static inline const std::string kResetItem = D::Statement(R"sql(
    UPDATE sqlq_rotation_items SET failures = 0, parked = false
    WHERE rotation_id = ? AND key = ?
    RETURNING key, payload, serves, failures, parked)sql");
  static inline const std::string kListItems = D::Statement(R"sql(
    SELECT key, payload, serves, failures, parked FROM sqlq_rotation_items
    WHERE rotation_id = ? ORDER BY parked, last_served, added)sql");

  // Runs an item update that returns the item.
  template <class Conn, class P>
  static Result<RotationItem> UpdateItem(Conn& conn, const std::string& sql,
                                         const P& params,
                                         std::int64_t /*rotation_id*/,
                                         std::string_view key) {
    auto rows = conn.Run(sql, params, "update item");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::NoItem(key);
    return core::DecodeItem(core::RowAt<typename D::Rows>{*rows, 0});
  }

  // Limits (sql_limits.h): a queue's limit row, made when missing (queue);
  // a lease recorded for max_leased (queue, message, token).
  static constexpr const char* kMakeLimits = R"sql(
    INSERT INTO sqlq_limits (queue_id, tokens_u, at_us) VALUES (?, 0, 0)
    ON CONFLICT (queue_id) DO NOTHING)sql";
  static constexpr const char* kRecordLease = R"sql(
    INSERT INTO sqlq_leases (queue_id, message_id, token) VALUES (?, ?, ?)
    ON CONFLICT (queue_id, message_id) DO UPDATE SET token = excluded.token)sql";

  // Results (sql_results.h): a message's progress (queue, message,
  // progress, progress_us, expires_us) or its result (queue, message,
  // result, completed_us, expires_us), over what the row had.
  static constexpr const char* kSaveProgress = R"sql(
    INSERT INTO sqlq_results
      (queue_id, message_id, progress, progress_us, expires_us)
    VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (queue_id, message_id) DO UPDATE SET
      progress = excluded.progress, progress_us = excluded.progress_us,
      expires_us = excluded.expires_us)sql";
  static constexpr const char* kSaveResult = R"sql(
    INSERT INTO sqlq_results
      (queue_id, message_id, result, completed_us, expires_us)
    VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (queue_id, message_id) DO UPDATE SET
      result = excluded.result, completed_us = excluded.completed_us,
      expires_us = excluded.expires_us)sql";
};

}  // namespace sqlq::engines::shared

#endif  // SQLQ_ENGINES_SHARED_STANDARD_SQL_H_
