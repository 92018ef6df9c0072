// SQLite's side of the operations every engine shares
// (engines/shared/sql_engine.h): the statements whose text differs from
// the server engines'; what it writes as PostgreSQL does comes from
// shared::StandardSql. They run through SqliteConn::Run, off the hot paths
// (sends, claims and acks step their own statements: sqlite_claim.cc).
//
// What sets SQLite apart here: a write transaction holds the database's
// one write lock from its BEGIN IMMEDIATE to its end, so the locking reads
// of the server engines are plain reads (kForUpdate is empty); the tables
// have no foreign keys (kCascades); a queue's counters are columns of its
// sqlq_queues row; keys, groups and dedup keys are TEXT columns (Params::
// Bytes binds text), payloads BLOBs (Params::Payload).

#ifndef SQLQ_ENGINES_SQLITE_DIALECT_H_
#define SQLQ_ENGINES_SQLITE_DIALECT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "engines/shared/message_sql.h"
#include "engines/shared/sql_engine.h"
#include "engines/shared/standard_sql.h"
#include "engines/sqlite/sqlite_conn.h"

namespace sqlq::engines::sqlite {

struct Dialect : shared::QuestionMarks, shared::StandardSql<Dialect> {
  using Conn = SqliteConn;
  using Params = sqlite::Params;
  using Rows = sqlite::Rows;

  static constexpr const char* kJsonColumns = "headers, errors";
  static constexpr shared::MessageSqlStyle kMessageStyle = {
      .placeholder = [](int n) { return "?" + std::to_string(n); },
      .header_equals =
          [](const std::string& key, const std::string& value) {
            return "EXISTS (SELECT 1 FROM json_each(headers) WHERE key = " +
                   key + " AND value = " + value + ")";
          },
      // Bytes, not characters: a payload stored as text is cast first.
      .payload_starts =
          [](const std::string& len, const std::string& prefix) {
            return "substr(CAST(payload AS BLOB), 1, " + len + ") = CAST(" +
                   prefix + " AS BLOB)";
          },
      .headers_column = "headers",
      .errors_column = "errors",
      .null_int = "NULL",
      .null_bytes = "NULL",
      .queue_id_by_id = "+queue_id",
  };
  // Other processes' waiting claims learn of every commit from the file
  // (file_watcher.h); this process's from core.
  static void AfterSteer(Conn&, std::int64_t) {}
  static Status BeforeListing(Conn&) { return Status::Ok(); }

  // Not run: the SQLite engine always has a store clock (the system's
  // when the store was given none), which NowUs takes first.
  static constexpr const char* kNowSql =
      "SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS "
      "INTEGER)";
  // Reads lock nothing: a write transaction holds the database's one write
  // lock from its BEGIN IMMEDIATE, which keeps what it read from changing.
  static constexpr const char* kForUpdate = "";
  // LockSubscribers's lock: none (kForUpdate says why).
  static constexpr const char* kLockTopic = "";
  // No foreign keys: a ring's or rotation's rows are deleted by statement.
  static constexpr bool kCascades = false;
  // A plain read (kForUpdate). Its column is not a clock (see kNowSql).
  static constexpr const char* kLockQueue =
      "SELECT 1, dependents FROM sqlq_queues WHERE id = ?";
  static constexpr const char* kKindOfName =
      "SELECT kind FROM sqlq_queues WHERE name = ?";
  static constexpr const char* kLockRotation =
      "SELECT 1 FROM sqlq_queues WHERE id = ? AND kind = 'rotation'";

  // The counters are columns of the queue's own row.
  static constexpr const char* kRingStats = R"sql(
    SELECT name, capacity, pushes,
      (SELECT coalesce(sum(entries > 0), 0) FROM sqlq_ring_groups
       WHERE ring_id = ?1),
      (SELECT coalesce(sum(entries), 0) FROM sqlq_ring_groups
       WHERE ring_id = ?1)
    FROM sqlq_queues WHERE id = ?1 AND kind = 'ring')sql";
  static constexpr const char* kRotationStats = R"sql(
    SELECT name, max_failures, serves,
      (SELECT count(*) FROM sqlq_rotation_items WHERE rotation_id = ?1),
      (SELECT coalesce(sum(parked), 0) FROM sqlq_rotation_items
       WHERE rotation_id = ?1)
    FROM sqlq_queues WHERE id = ?1 AND kind = 'rotation')sql";

  // The counters from the queue's row; the messages in one pass of the
  // queue's part of the claim index. Parameters: now four times, the queue.
  static constexpr const char* kStats = R"sql(
    SELECT q.name, q.sends, q.claims, q.acks, q.nacks, q.expirations,
      q.dead_lettered, m.ready, m.delayed, m.leased, m.oldest,
      (SELECT count(*) FROM sqlq_dead WHERE queue_id = ?5),
      (SELECT count(*) FROM sqlq_archive WHERE queue_id = ?5), m.waiting,
      q.expired
    FROM sqlq_queues q,
      (SELECT coalesce(sum(ready_us <= ?1), 0) AS ready,
              coalesce(sum(ready_us > ?2 AND token = 0
                AND ready_us < )sql" SQLQ_WAITING_US R"sql(), 0) AS delayed,
              coalesce(sum(token = 0
                AND ready_us >= )sql" SQLQ_WAITING_US R"sql(), 0) AS waiting,
              coalesce(sum(ready_us > ?3 AND token != 0), 0) AS leased,
              min(CASE WHEN ready_us <= ?4 THEN ready_us END) AS oldest
       FROM sqlq_messages WHERE queue_id = ?5) m
    WHERE q.id = ?5)sql";

  static constexpr const char* kReceiptHolder =
      "SELECT token, attempts FROM sqlq_messages "
      "WHERE id = ?1 AND queue_id = ?2";
};

}  // namespace sqlq::engines::sqlite

#endif  // SQLQ_ENGINES_SQLITE_DIALECT_H_
