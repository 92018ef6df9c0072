// MariaDB/MySQL's side of the logic the server engines share
// (engines/shared/sql_engine.h): the statements whose text differs from
// PostgreSQL's, and the steps that take MariaDB more statements (it has no
// RETURNING on UPDATE or INSERT ... ON DUPLICATE KEY).

#ifndef SQLQ_ENGINES_MYSQL_DIALECT_H_
#define SQLQ_ENGINES_MYSQL_DIALECT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engines/mysql/my_conn.h"
#include "engines/shared/message_sql.h"
#include "engines/shared/pooled_sql_engine.h"

namespace sqlq::engines::mysql {

// The errors column with one entry appended for the row's current attempt
// (core/columns.h): at `at`, error `error`, each an SQL expression; the
// oldest entry is dropped past kErrorHistory.
inline std::string AppendError(std::string_view at, std::string_view error) {
  static_assert(kErrorHistory == 20);
  return "JSON_ARRAY_APPEND(CASE WHEN JSON_LENGTH(COALESCE(errors, '[]')) "
         ">= 20 THEN JSON_REMOVE(errors, '$[0]') ELSE COALESCE(errors, '[]') "
         "END, '$', JSON_OBJECT('attempt', attempts, 'at', " +
         std::string(at) + ", 'error', " + std::string(error) + "))";
}

// "?, ?, ?" for `n` placeholders.
inline std::string Marks(std::size_t n) {
  std::string s;
  s.reserve(n * 3);
  for (std::size_t i = 0; i < n; ++i) s += i == 0 ? "?" : ", ?";
  return s;
}

// IN lists are padded (by repeating the last id) to a power of two, so that
// a connection prepares at most a dozen variants of each statement.
inline std::size_t Bucket(std::size_t n) {
  std::size_t b = 1;
  while (b < n) b <<= 1;
  return b;
}

inline void AddIds(Params& p, const std::vector<std::int64_t>& ids) {
  for (std::int64_t id : ids) p.Int(id);
  for (std::size_t i = ids.size(); i < Bucket(ids.size()); ++i) {
    p.Int(ids.back());
  }
}

struct Dialect : shared::QuestionMarks {
  using Conn = MyConn;
  using Params = mysql::Params;
  using Rows = mysql::Rows;

  // A read that locks the rows it reads until the transaction ends.
  static constexpr const char* kForUpdate = " FOR UPDATE";
  // LockSubscribers's lock: the topic's row as kLockQueue locks a queue's
  // (and the subscriptions and queues it reads, which a publish's inserts
  // share-lock anyway).
  static constexpr const char* kLockTopic = " LOCK IN SHARE MODE";
  // The rows of a ring or rotation go with its sqlq_queues row (foreign
  // keys ON DELETE CASCADE).
  static constexpr bool kCascades = true;

  // Header names are checked (letters, digits, _-.:), so $."name" is a
  // path to that key; it goes in as a parameter all the same.
  static constexpr shared::MessageSqlStyle kMessageStyle = {
      .placeholder = [](int) { return std::string("?"); },
      .header_equals =
          [](const std::string& path, const std::string& value) {
            // Compared as bytes: the connection's collation may ignore
            // case.
            return "CAST(JSON_UNQUOTE(JSON_EXTRACT(headers, " + path +
                   ")) AS BINARY) = CAST(" + value + " AS BINARY)";
          },
      .payload_starts =
          [](const std::string& len, const std::string& prefix) {
            return "LEFT(payload, " + len + ") = CAST(" + prefix +
                   " AS BINARY)";
          },
      .header_key_is_path = true,
      .headers_column = "headers",
      .errors_column = "errors",
      .null_int = "NULL",
      .null_bytes = "NULL",
      .has_npriority = true,
      .by_id = " FORCE INDEX (PRIMARY)",
  };
  // The same, where dedup keys are held in sqlq_dedup_keys (schema.h,
  // version 25).
  static constexpr shared::MessageSqlStyle kMessageStyleKeysApart = [] {
    shared::MessageSqlStyle style = kMessageStyle;
    style.dedup_keys_apart = true;
    return style;
  }();
  static void AfterSteer(Conn&, std::int64_t) {}
  // The listing's statements name their index (kMessageStyle.by_id), or
  // have one whose order their ORDER BY ... LIMIT takes.
  static Status BeforeListing(Conn&) { return Status::Ok(); }

  // Text columns already (PostgreSQL: jsonb, cast to text).
  static constexpr const char* kJsonColumns = "headers, errors";

  // Microseconds since the epoch of NOW(6), exact: UNIX_TIMESTAMP of a
  // DATETIME(6) is a DECIMAL with six digits. PostgreSQL: now().
  static inline const std::string kNowSql =
      "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)";

  // A shared lock: MariaDB has nothing weaker that keeps the row from
  // being deleted (PostgreSQL: FOR KEY SHARE).
  // It also reads the clock (kNowSql), which the transaction's later
  // operations then take without a round trip of their own.
  static inline const std::string kLockQueue =
      "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED), dependents "
      "FROM sqlq_queues WHERE id = ? LOCK IN SHARE MODE";

  // A locking read sees the latest committed row, where a plain read may
  // see the transaction's snapshot (REPEATABLE READ, under statement-based
  // logging). PostgreSQL reads at READ COMMITTED without a lock.
  static inline const std::string kKindOfName =
      "SELECT kind FROM sqlq_queues WHERE name = ? LOCK IN SHARE MODE";

  // Serialises next() and add() per rotation (sql_engine.h, "Locking").
  // PostgreSQL takes FOR NO KEY UPDATE, which lets other operations' share
  // locks through; MariaDB has only FOR UPDATE.
  static inline const std::string kLockRotation = R"sql(
    SELECT 1 FROM sqlq_queues WHERE id = ? AND kind = 'rotation'
    FOR UPDATE)sql";

  // Stats from the counter table itself (PostgreSQL reads a view that adds
  // the deltas not yet folded in); SUM is a DECIMAL, which Rows::Int
  // reads.
  static inline const std::string kRingStats = R"sql(
    SELECT q.name, q.capacity,
      (SELECT COALESCE(SUM(pushes), 0) FROM sqlq_counters k
       WHERE k.queue_id = q.id),
      (SELECT COUNT(*) FROM sqlq_ring_groups g
       WHERE g.ring_id = q.id AND g.entries > 0),
      (SELECT COALESCE(SUM(entries), 0) FROM sqlq_ring_groups g
       WHERE g.ring_id = q.id)
    FROM sqlq_queues q WHERE q.id = ? AND q.kind = 'ring')sql";
  static inline const std::string kRotationStats = R"sql(
    SELECT q.name, q.max_failures,
      (SELECT COALESCE(SUM(serves), 0) FROM sqlq_counters k
       WHERE k.queue_id = q.id),
      (SELECT COUNT(*) FROM sqlq_rotation_items i
       WHERE i.rotation_id = q.id),
      (SELECT COUNT(*) FROM sqlq_rotation_items i
       WHERE i.rotation_id = q.id AND i.parked <> 0)
    FROM sqlq_queues q WHERE q.id = ? AND q.kind = 'rotation')sql";

  // Rotation items: the key column is item_key (KEY is reserved; on
  // PostgreSQL it is `key`) and `parked` is 0 or 1 (a boolean there).
  // Updates are read back by UpdateItem (PostgreSQL returns the row).
  static inline const std::string kItemExists = R"sql(
    SELECT 1 FROM sqlq_rotation_items
    WHERE rotation_id = ? AND item_key = ? LOCK IN SHARE MODE)sql";
  static inline const std::string kInsertItem = R"sql(
    INSERT INTO sqlq_rotation_items (rotation_id, item_key, payload, added)
    VALUES (?, ?, ?, ?))sql";
  static inline const std::string kRemoveItem = R"sql(
    DELETE FROM sqlq_rotation_items
    WHERE rotation_id = ? AND item_key = ?)sql";
  // A locking read, not logged; the updates that follow go by primary key,
  // so statement-based replicas apply the same changes.
  static inline const std::string kNextItems = R"sql(
    SELECT item_key, payload, serves, failures FROM sqlq_rotation_items
    WHERE rotation_id = ? AND parked = 0
    ORDER BY last_served, added LIMIT ?
    FOR UPDATE)sql";
  static inline const std::string kServeItem = R"sql(
    UPDATE sqlq_rotation_items SET last_served = ?, serves = serves + 1
    WHERE rotation_id = ? AND item_key = ?)sql";
  // parked first: MariaDB assigns left to right (unless the session has
  // SIMULTANEOUS_ASSIGNMENT), so both orders of evaluation agree here.
  static inline const std::string kFailItem = R"sql(
    UPDATE sqlq_rotation_items
    SET parked = (failures + 1 >= ?), failures = failures + 1
    WHERE rotation_id = ? AND item_key = ?)sql";
  static inline const std::string kItemParked = R"sql(
    SELECT parked FROM sqlq_rotation_items
    WHERE rotation_id = ? AND item_key = ? FOR UPDATE)sql";
  static inline const std::string kOkItem = R"sql(
    UPDATE sqlq_rotation_items SET failures = 0
    WHERE rotation_id = ? AND item_key = ?)sql";
  static inline const std::string kResetItem = R"sql(
    UPDATE sqlq_rotation_items SET failures = 0, parked = 0
    WHERE rotation_id = ? AND item_key = ?)sql";
  static inline const std::string kListItems = R"sql(
    SELECT item_key, payload, serves, failures, parked
    FROM sqlq_rotation_items
    WHERE rotation_id = ? ORDER BY parked, last_served, added)sql";

  // One subquery per figure (PostgreSQL sums its counters in one pass and
  // counts messages with FILTER, which MariaDB lacks). Parameters: now
  // four times, the queue.
  static inline const std::string kStats = R"sql(
    SELECT q.name,
      (SELECT COALESCE(SUM(sends), 0) FROM sqlq_counters k
       WHERE k.queue_id = q.id),
      (SELECT COALESCE(SUM(claims), 0) FROM sqlq_counters k
       WHERE k.queue_id = q.id),
      (SELECT COALESCE(SUM(acks), 0) FROM sqlq_counters k
       WHERE k.queue_id = q.id),
      (SELECT COALESCE(SUM(nacks), 0) FROM sqlq_counters k
       WHERE k.queue_id = q.id),
      (SELECT COALESCE(SUM(expirations), 0) FROM sqlq_counters k
       WHERE k.queue_id = q.id),
      (SELECT COALESCE(SUM(dead_lettered), 0) FROM sqlq_counters k
       WHERE k.queue_id = q.id),
      (SELECT COUNT(*) FROM sqlq_messages m
       WHERE m.queue_id = q.id AND m.ready_us <= ?),
      (SELECT COUNT(*) FROM sqlq_messages m
       WHERE m.queue_id = q.id AND m.ready_us > ? AND m.token = 0
         AND m.ready_us < )sql" SQLQ_WAITING_US R"sql(),
      (SELECT COUNT(*) FROM sqlq_messages m
       WHERE m.queue_id = q.id AND m.ready_us > ? AND m.token <> 0),
      (SELECT MIN(ready_us) FROM sqlq_messages m
       WHERE m.queue_id = q.id AND m.ready_us <= ?),
      (SELECT COUNT(*) FROM sqlq_dead d WHERE d.queue_id = q.id),
      (SELECT COUNT(*) FROM sqlq_archive a WHERE a.queue_id = q.id),
      (SELECT COUNT(*) FROM sqlq_messages m
       WHERE m.queue_id = q.id AND m.token = 0
         AND m.ready_us >= )sql" SQLQ_WAITING_US R"sql(),
      (SELECT COALESCE(SUM(expired), 0) FROM sqlq_counters k
       WHERE k.queue_id = q.id)
    FROM sqlq_queues q WHERE q.id = ?)sql";

  // Who holds a refused receipt's message: a locking read, which sees the
  // latest committed row (PostgreSQL reads it at READ COMMITTED).
  static inline const std::string kReceiptHolder = R"sql(
    SELECT token, attempts FROM sqlq_messages
    WHERE id = ? AND queue_id = ? LOCK IN SHARE MODE)sql";

  // Runs an insert of a named row (sql_queue.h): the new row's id, or
  // nullopt when the name is taken (a duplicate key, which leaves the
  // transaction usable; PostgreSQL and SQLite use ON CONFLICT DO NOTHING
  // and RETURNING, shared::StandardSql).
  static Result<std::optional<std::int64_t>> InsertName(MyConn& conn,
                                                        const std::string& sql,
                                                        Params& params,
                                                        std::string_view what);

  // Adds an entry to a ring's group: the upsert, then a read of the
  // group's row under the lock the upsert took (PostgreSQL returns it).
  static Result<shared::Pushed> PushEntry(MyConn& conn, std::int64_t ring_id,
                                          std::string_view group,
                                          std::int64_t now_us,
                                          std::string_view payload);

  // Deletes the group's `n` oldest entries: finds the n-th seq, then
  // deletes up to it (MariaDB refuses LIMIT in an IN subquery, and a
  // DELETE ... LIMIT is unsafe for statement-based replication).
  static Result<std::int64_t> DeleteOldest(MyConn& conn, std::int64_t ring_id,
                                           std::string_view group,
                                           std::int64_t n);

  // Takes the rotation's next `count` stamps and returns the last.
  // REQUIRES: the rotation locked.
  static Result<std::int64_t> NextStamp(MyConn& conn, std::int64_t rotation_id,
                                        std::int64_t count);

  // Runs an item update (by rotation and key), then reads the item.
  static Result<RotationItem> UpdateItem(MyConn& conn, const std::string& sql,
                                         Params& params,
                                         std::int64_t rotation_id,
                                         std::string_view key);

  // Leases the messages a grouped claim locked (sql_groups.h), with the
  // ids after it (IdsIn): token, lease end, worker. A lease that ran out is
  // a failed attempt in the history; first in SET, as MariaDB assigns left
  // to right.
  static inline const std::string kLeaseSet =
      "UPDATE sqlq_messages SET errors = CASE WHEN token = 0 THEN errors "
      "ELSE " +
      AppendError("ready_us", "'lease expired'") +
      " END, token = ?, attempts = attempts + 1, ready_us = ?, worker = ? "
      "WHERE id ";

  // A list of `n` ids as a condition on a column: "IN (?, ...)", padded
  // (Bucket), and its parameters.
  static std::string IdsIn(std::size_t n) {
    return "IN (" + Marks(Bucket(n)) + ")";
  }
  static void AddIds(Params& p, const std::vector<std::int64_t>& ids) {
    mysql::AddIds(p, ids);
  }

  // A grouped claim's look at the next groups (sql_groups.h) is a loose
  // index scan here (kGroupListSql), then a statement per fair group for
  // its candidates: MariaDB reads a correlated subquery's range (grp > the
  // previous group) from the start of the queue's index, so a recursive
  // walk would cost a scan per step.
  static constexpr bool kGroupLookInOneStatement = false;
  static constexpr bool kGroupLookLocks = false;

  // What an insert of a named row (InsertName) ends with: nothing, a taken
  // name is a duplicate key.
  static constexpr const char* kInsertNameTail = "";

  // Limits (sql_limits.h): a queue's limit row, made when missing (queue);
  // a lease recorded for max_leased (queue, message, token).
  static constexpr const char* kMakeLimits = R"sql(
    INSERT INTO sqlq_limits (queue_id, tokens_u, at_us) VALUES (?, 0, 0)
    ON DUPLICATE KEY UPDATE queue_id = queue_id)sql";
  static constexpr const char* kRecordLease = R"sql(
    INSERT INTO sqlq_leases (queue_id, message_id, token) VALUES (?, ?, ?)
    ON DUPLICATE KEY UPDATE token = VALUES(token))sql";
  // Results (sql_results.h), as standard_sql.h has them.
  static constexpr const char* kSaveProgress = R"sql(
    INSERT INTO sqlq_results
      (queue_id, message_id, progress, progress_us, expires_us)
    VALUES (?, ?, ?, ?, ?)
    ON DUPLICATE KEY UPDATE
      progress = VALUES(progress), progress_us = VALUES(progress_us),
      expires_us = VALUES(expires_us))sql";
  static constexpr const char* kSaveResult = R"sql(
    INSERT INTO sqlq_results
      (queue_id, message_id, result, completed_us, expires_us)
    VALUES (?, ?, ?, ?, ?)
    ON DUPLICATE KEY UPDATE
      result = VALUES(result), completed_us = VALUES(completed_us),
      expires_us = VALUES(expires_us))sql";

  // Whether sqlq_schema exists, and the newest version it records
  // (PooledSqlEngine::SchemaVersion).
  static constexpr const char* kSchemaExistsSql = R"sql(
    SELECT COUNT(*) FROM information_schema.tables
    WHERE table_schema = DATABASE() AND table_name = 'sqlq_schema')sql";
  static constexpr const char* kSchemaVersionSql =
      "SELECT COALESCE(MAX(version), 0) FROM sqlq_schema";

  // The message holding a dedup key by an unexpired hold: queue, key, now.
  // A locking read, which sees the latest committed holds, not the
  // transaction's snapshot.
  static constexpr const char* kHeldBy = R"sql(
    SELECT message_id FROM sqlq_dedup_holds
    WHERE queue_id = ? AND dedup = ? AND until_us > ?
    LOCK IN SHARE MODE)sql";
  // Holds `keys` until `until_us`, replacing earlier holds: rows of VALUES
  // (the table's only unique key is its primary key, so the upsert is safe
  // for statement-based replication), in pages of at most 64.
  static Status WriteHolds(MyConn& conn, std::int64_t queue_id,
                           const std::vector<shared::HeldKey>& keys,
                           std::int64_t until_us);
};

}  // namespace sqlq::engines::mysql

#endif  // SQLQ_ENGINES_MYSQL_DIALECT_H_
