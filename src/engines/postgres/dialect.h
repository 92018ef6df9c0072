// PostgreSQL's side of the logic the server engines share
// (engines/shared/sql_engine.h): the statements whose text differs from
// MariaDB's, and the steps that PostgreSQL does in fewer statements.
// Parameters are numbered in the order the shared code binds them.

#ifndef SQLQ_ENGINES_POSTGRES_DIALECT_H_
#define SQLQ_ENGINES_POSTGRES_DIALECT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engines/postgres/pg_conn.h"
#include "engines/postgres/statements.h"
#include "engines/shared/message_sql.h"
#include "engines/shared/sql_engine.h"

namespace sqlq::engines::postgres {

struct Dialect {
  using Conn = PgConn;
  using Params = postgres::Params;
  using Rows = postgres::Rows;

  // The shared statements are written with ?: PostgreSQL numbers them.
  static std::string Statement(std::string_view sql) {
    return NumberPlaceholders(sql);
  }

  // Microseconds since the epoch of now(), the transaction's start.
  // MariaDB: NOW(6) through UNIX_TIMESTAMP.
  // jsonb columns come out as text (binary results would add a version
  // byte).
  static constexpr const char* kJsonColumns = "headers::text, errors::text";
  static constexpr shared::MessageSqlStyle kMessageStyle = {
      .placeholder = [](int n) { return "$" + std::to_string(n); },
      .header_equals =
          [](const std::string& key, const std::string& value) {
            return "(headers ->> " + key + "::text) = " + value + "::text";
          },
      .payload_starts =
          [](const std::string& len, const std::string& prefix) {
            return "substring(payload from 1 for " + len +
                   "::int) = " + prefix + "::bytea";
          },
      .headers_column = "headers::text",
      .errors_column = "errors::text",
      .null_int = "NULL::bigint",
      .null_bytes = "NULL::bytea",
      .queue_id_by_id = "queue_id + 0",
  };
  static Result<Rows> RunOnce(Conn& conn, const std::string& sql,
                              const Params& params, std::string_view what) {
    return conn.RunOnce(sql, params, what);
  }
  // Before the listing's statements, for the rest of the transaction: no
  // sequential scans and no sorts, so that they walk the primary key (or,
  // in the dead letters and archive, the queue's (queue_id, id) index) in
  // id order whatever the statistics say (with those of a vacuum of the
  // empty table, the planner sorts the whole table: docs/engines/
  // postgres.md, "Plans that do not depend on statistics").
  static constexpr const char* kListingSettings =
      "SELECT set_config('enable_seqscan', 'off', true), "
      "set_config('enable_sort', 'off', true)";
  static Status BeforeListing(Conn& conn) {
    auto r = conn.Run(kListingSettings, Params(), "find messages");
    return r.ok() ? Status::Ok() : r.status();
  }
  // Waiting claims of other processes are woken, and this store's claim
  // marks (claim_marks.h) start again from the queue's start: a message
  // may now be claimable before a mark.
  static void AfterSteer(Conn& conn, std::int64_t queue_id) {
    conn.notify = true;
    conn.MadeReady(queue_id, 0);
  }
  static constexpr const char* kNowSql =
      "SELECT (extract(epoch FROM now()) * 1000000)::bigint";

  // FOR KEY SHARE conflicts only with deleting the row (or changing its
  // key): not with other operations' share locks, nor with the FOR NO KEY
  // UPDATE of rotations. MariaDB has no lock that weak: LOCK IN SHARE MODE.
  // It also reads the clock (kNowSql), which the transaction's later
  // operations then take without a round trip of their own.
  static constexpr const char* kLockQueue =
      "SELECT (extract(epoch FROM now()) * 1000000)::bigint FROM sqlq_queues "
      "WHERE id = $1 FOR KEY SHARE";

  // A plain read sees what committed before the statement (READ
  // COMMITTED). MariaDB locks, as its plain reads may come from an older
  // snapshot (REPEATABLE READ under statement-based logging).
  static constexpr const char* kKindOfName =
      "SELECT kind FROM sqlq_queues WHERE name = $1";

  // Serialises next() and add() per rotation (sql_engine.h, "Locking").
  // FOR NO KEY UPDATE does not conflict with the FOR KEY SHARE of other
  // operations; MariaDB's FOR UPDATE does, which only costs it concurrency.
  static constexpr const char* kLockRotation = R"sql(
    SELECT 1 FROM sqlq_queues WHERE id = $1 AND kind = 'rotation'
    FOR NO KEY UPDATE)sql";

  // Stats: sqlq_counts is the view that adds the counter deltas not yet
  // folded in (schema.h); sum() of bigint is numeric, hence the casts.
  // MariaDB reads its counter table directly.
  static constexpr const char* kRingStats = R"sql(
    SELECT q.name, q.capacity,
      (SELECT coalesce(sum(pushes), 0)::bigint FROM sqlq_counts k
       WHERE k.queue_id = q.id),
      (SELECT count(*) FROM sqlq_ring_groups g
       WHERE g.ring_id = q.id AND g.entries > 0),
      (SELECT coalesce(sum(entries), 0)::bigint FROM sqlq_ring_groups g
       WHERE g.ring_id = q.id)
    FROM sqlq_queues q WHERE q.id = $1 AND q.kind = 'ring')sql";
  static constexpr const char* kRotationStats = R"sql(
    SELECT q.name, q.max_failures,
      (SELECT coalesce(sum(serves), 0)::bigint FROM sqlq_counts k
       WHERE k.queue_id = q.id),
      (SELECT count(*) FROM sqlq_rotation_items i
       WHERE i.rotation_id = q.id),
      (SELECT count(*) FROM sqlq_rotation_items i
       WHERE i.rotation_id = q.id AND i.parked)
    FROM sqlq_queues q WHERE q.id = $1 AND q.kind = 'rotation')sql";

  // Rotation items: the key column is `key` (MariaDB: item_key) and
  // `parked` a boolean (MariaDB: 0 or 1). Updates return the item
  // (RETURNING); MariaDB reads it again.
  static constexpr const char* kItemExists = R"sql(
    SELECT 1 FROM sqlq_rotation_items
    WHERE rotation_id = $1 AND key = $2)sql";
  static constexpr const char* kInsertItem = R"sql(
    INSERT INTO sqlq_rotation_items (rotation_id, key, payload, added)
    VALUES ($1, $2, $3, $4))sql";
  static constexpr const char* kRemoveItem = R"sql(
    DELETE FROM sqlq_rotation_items WHERE rotation_id = $1 AND key = $2)sql";
  static constexpr const char* kNextItems = R"sql(
    SELECT key, payload, serves, failures FROM sqlq_rotation_items
    WHERE rotation_id = $1 AND NOT parked
    ORDER BY last_served, added LIMIT $2
    FOR UPDATE)sql";
  static constexpr const char* kServeItem = R"sql(
    UPDATE sqlq_rotation_items SET last_served = $1, serves = serves + 1
    WHERE rotation_id = $2 AND key = $3)sql";
  // Both assignments read the row as it was.
  static constexpr const char* kFailItem = R"sql(
    UPDATE sqlq_rotation_items
    SET failures = failures + 1, parked = (failures + 1 >= $1)
    WHERE rotation_id = $2 AND key = $3
    RETURNING key, payload, serves, failures, parked)sql";
  static constexpr const char* kItemParked = R"sql(
    SELECT parked FROM sqlq_rotation_items
    WHERE rotation_id = $1 AND key = $2 FOR UPDATE)sql";
  static constexpr const char* kOkItem = R"sql(
    UPDATE sqlq_rotation_items SET failures = 0
    WHERE rotation_id = $1 AND key = $2
    RETURNING key, payload, serves, failures, parked)sql";
  static constexpr const char* kResetItem = R"sql(
    UPDATE sqlq_rotation_items SET failures = 0, parked = false
    WHERE rotation_id = $1 AND key = $2
    RETURNING key, payload, serves, failures, parked)sql";
  static constexpr const char* kListItems = R"sql(
    SELECT key, payload, serves, failures, parked FROM sqlq_rotation_items
    WHERE rotation_id = $1 ORDER BY parked, last_served, added)sql";

  // The sqlq_queues row of a queue, and of a ring or rotation. ON
  // CONFLICT DO NOTHING RETURNING id: no row back when the name is taken,
  // as a failed statement would abort the transaction (MariaDB's duplicate
  // key leaves it usable).
  static constexpr const char* kInsertQueue = R"sql(
    INSERT INTO sqlq_queues (name, max_attempts, lease_us, backoff_base_us,
      backoff_max_us, archive, retention_us, max_payload, dead_retention_us,
      unique_for_us, max_leased, rate_u, rate_burst, group_limit,
      dead_letter_queue, labels, created_us, group_mode)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15,
      $16, $17, $18)
    ON CONFLICT (name) DO NOTHING
    RETURNING id)sql";
  static constexpr const char* kInsertKind = R"sql(
    INSERT INTO sqlq_queues (name, kind, max_attempts, lease_us,
      backoff_base_us, backoff_max_us, archive, retention_us, max_payload,
      created_us, capacity, max_failures)
    VALUES ($1, $2, 0, 0, 0, 0, false, 0, $3, $4, $5, $6)
    ON CONFLICT (name) DO NOTHING
    RETURNING id)sql";

  // One pass over the counters (sqlq_counts adds the deltas not yet
  // folded in; the deltas table has no index, so each separate sum would
  // read it whole again), one over the queue's messages with FILTER.
  // sum() of bigint is numeric, hence the casts. MariaDB: one subquery per
  // figure. Parameters: now four times (as MariaDB binds it), the queue.
  static constexpr const char* kStats = R"sql(
    SELECT q.name, k.sends, k.claims, k.acks, k.nacks, k.expirations,
      k.dead_lettered,
      m.ready, m.delayed, m.leased, m.oldest,
      (SELECT count(*) FROM sqlq_dead d WHERE d.queue_id = q.id),
      (SELECT count(*) FROM sqlq_archive a WHERE a.queue_id = q.id)
    FROM sqlq_queues q,
      LATERAL (SELECT coalesce(sum(sends), 0)::bigint AS sends,
                 coalesce(sum(claims), 0)::bigint AS claims,
                 coalesce(sum(acks), 0)::bigint AS acks,
                 coalesce(sum(nacks), 0)::bigint AS nacks,
                 coalesce(sum(expirations), 0)::bigint AS expirations,
                 coalesce(sum(dead_lettered), 0)::bigint AS dead_lettered
               FROM sqlq_counts WHERE queue_id = q.id) k,
      LATERAL (SELECT count(*) FILTER (WHERE ready_us <= $1) AS ready,
                 count(*) FILTER (WHERE ready_us > $2 AND token = 0)
                   AS delayed,
                 count(*) FILTER (WHERE ready_us > $3 AND token <> 0)
                   AS leased,
                 min(ready_us) FILTER (WHERE ready_us <= $4) AS oldest
               FROM sqlq_messages WHERE queue_id = q.id) m
    WHERE q.id = $5)sql";

  // Who holds a refused receipt's message. `queue_id + 0` keeps the
  // planner on the primary key (the claim index starts with queue_id);
  // MariaDB locks the row it reads.
  static constexpr const char* kReceiptHolder = R"sql(
    SELECT token, attempts FROM sqlq_messages
    WHERE id = $1 AND queue_id + 0 = $2)sql";

  // Runs one of the inserts above: the new row's id, or nullopt when the
  // name is taken.
  static Result<std::optional<std::int64_t>> InsertName(PgConn& conn,
                                                        const char* sql,
                                                        const Params& params,
                                                        std::string_view what);

  // Adds an entry to a ring's group: the upsert of the group row returns
  // the entry's seq (RETURNING; MariaDB reads it back).
  static Result<shared::Pushed> PushEntry(PgConn& conn, std::int64_t ring_id,
                                          std::string_view group,
                                          std::int64_t now_us,
                                          std::string_view payload);

  // Deletes the group's `n` oldest entries in one statement (MariaDB
  // refuses LIMIT in such a subquery).
  static Result<std::int64_t> DeleteOldest(PgConn& conn, std::int64_t ring_id,
                                           std::string_view group,
                                           std::int64_t n);

  // Takes the rotation's next `count` stamps and returns the last.
  // REQUIRES: the rotation locked.
  static Result<std::int64_t> NextStamp(PgConn& conn, std::int64_t rotation_id,
                                        std::int64_t count);

  // Runs an item update that returns the item.
  static Result<RotationItem> UpdateItem(PgConn& conn, const char* sql,
                                         const Params& params,
                                         std::int64_t rotation_id,
                                         std::string_view key);

  // Leases the messages a grouped claim locked (sql_groups.h), with the
  // ids after it (IdsIn): token, lease end, worker. A lease that ran out is
  // a failed attempt in the history (SET reads the row as it was).
  static inline const std::string kLeaseSet =
      "UPDATE sqlq_messages SET errors = CASE WHEN token = 0 THEN errors "
      "ELSE " +
      AppendError("errors", "attempts", "ready_us", "'lease expired'") +
      " END, token = ?, attempts = attempts + 1, ready_us = ?, worker = ? "
      "WHERE id ";

  // A list of ids as a condition on a column: one array parameter.
  static std::string IdsIn(std::size_t) { return "= ANY(?::bigint[])"; }
  static void AddIds(Params& p, const std::vector<std::int64_t>& ids) {
    p.IntArray(ids);
  }

  // A grouped claim's look at the next groups (sql_groups.h) in one
  // statement: a recursive walk of the group index, one seek per group
  // (the group after the previous one, and its head: its lowest id), from
  // the first group when none is after `after`, and each group's
  // candidates: one row per candidate, or a row with id 0 for a group
  // without (in no particular order: the caller sorts them, which spares a
  // plan its sort); column 2 is 1 when the walk began at the first group.
  // A fair walk that began at the first group and found fewer groups than
  // it may look at has seen every group: it reads each group's first
  // core::PerGroup(want, groups) ready messages, one otherwise. A fair
  // look without a window locks its candidates as it finds them (FOR
  // UPDATE SKIP LOCKED: one another claim holds is passed over for the
  // group's next) and returns them whole from column 3, in the columns of
  // the claim's lock statement (sql_groups.h), which it then spares. The
  // start
  // is the first row of two: the group after `after`, then the first group
  // (PostgreSQL reads a UNION ALL's parts in order and stops at the
  // limit; either row is a start the walk can use, column 2 says which).
  // Parameters: queue, after (the walk starts at groups >= it when
  // `first`), how many groups, now, and, when fair, the claim's want and,
  // for a window, the group limit.
  static constexpr bool kGroupLookInOneStatement = true;
  static constexpr bool kGroupLookLocks = true;
  static const std::string& GroupLookSql(bool first, bool ordered,
                                         bool window) {
    auto build = [](bool from_first, bool heads, bool windowed) {
      const std::string anchor = from_first ? R"sql(
          (SELECT 1, grp, id, ready_us, 1 FROM sqlq_messages
           WHERE queue_id = $1 AND grp >= $2 ORDER BY grp, id LIMIT 1))sql"
                                            : R"sql(
          (SELECT 1, grp, id, ready_us, first FROM (
             (SELECT grp, id, ready_us, 0 AS first FROM sqlq_messages
              WHERE queue_id = $1 AND grp > $2 ORDER BY grp, id LIMIT 1)
             UNION ALL
             (SELECT grp, id, ready_us, 1 FROM sqlq_messages
              WHERE queue_id = $1 AND grp IS NOT NULL
              ORDER BY grp, id LIMIT 1)) a
           LIMIT 1))sql";
      std::string walk =
          "WITH RECURSIVE walk (n, grp, id, ready_us, first) "
          "AS (" +
          anchor + R"sql(
          UNION ALL
          SELECT w.n + 1, x.grp, x.id, x.ready_us, w.first
          FROM walk w, LATERAL (
            SELECT grp, id, ready_us FROM sqlq_messages
            WHERE queue_id = $1 AND grp > w.grp
            ORDER BY grp, id LIMIT 1) x
          WHERE w.n < $3))sql";
      if (heads) {
        return walk +
               " SELECT grp, CASE WHEN ready_us <= $4 THEN id ELSE 0 END, "
               "first FROM walk";
      }
      const std::string ready = windowed ? R"sql(
            SELECT id FROM (
              SELECT id, ready_us FROM sqlq_messages
              WHERE queue_id = $1 AND grp = w.grp ORDER BY id LIMIT $6) k
            WHERE ready_us <= $4 ORDER BY id
            LIMIT (SELECT k FROM per))sql"
                                         : R"sql(
            SELECT id, priority, ready_us, token, attempts, enqueued_us,
                   payload, headers::text FROM sqlq_messages
            WHERE queue_id = $1 AND grp = w.grp AND ready_us <= $4
            ORDER BY id LIMIT (SELECT k FROM per)
            FOR UPDATE SKIP LOCKED)sql";
      return walk + R"sql(,
        per (k) AS (
          SELECT CASE WHEN min(first) = 1 AND count(*) < $3
                      THEN ($5::bigint + count(*) - 1) / count(*)
                      ELSE 1 END
          FROM walk)
        SELECT w.grp, coalesce(c.id, 0), w.first)sql" +
             (windowed ? "" : ", c.*") + " FROM walk w LEFT JOIN LATERAL (" +
             ready + ") c ON true";
    };
    static const std::string kSql[2][2][2] = {
        {{build(false, false, false), build(false, false, true)},
         {build(false, true, false), build(false, true, true)}},
        {{build(true, false, false), build(true, false, true)},
         {build(true, true, false), build(true, true, true)}}};
    return kSql[first][ordered][window];
  }

  // What an insert of a named row (InsertName) ends with: no row back when
  // the name is taken.
  static constexpr const char* kInsertNameTail =
      " ON CONFLICT (name) DO NOTHING RETURNING id";

  // Limits (sql_limits.h): a queue's limit row, made when missing (queue);
  // a lease recorded for max_leased (queue, message, token).
  static constexpr const char* kMakeLimits = R"sql(
    INSERT INTO sqlq_limits (queue_id, tokens_u, at_us) VALUES (?, 0, 0)
    ON CONFLICT (queue_id) DO NOTHING)sql";
  static constexpr const char* kRecordLease = R"sql(
    INSERT INTO sqlq_leases (queue_id, message_id, token) VALUES (?, ?, ?)
    ON CONFLICT (queue_id, message_id) DO UPDATE SET token = excluded.token)sql";

  // The message holding a dedup key by an unexpired hold: queue, key, now.
  // A statement of READ COMMITTED sees every hold committed before it.
  static constexpr const char* kHeldBy = R"sql(
    SELECT message_id FROM sqlq_dedup_holds
    WHERE queue_id = ? AND dedup = ? AND until_us > ?)sql";
  // Holds `keys` until `until_us`, replacing earlier holds, in one
  // statement (arrays; MariaDB: rows of VALUES).
  static Status WriteHolds(PgConn& conn, std::int64_t queue_id,
                           const std::vector<shared::HeldKey>& keys,
                           std::int64_t until_us);
};

}  // namespace sqlq::engines::postgres

#endif  // SQLQ_ENGINES_POSTGRES_DIALECT_H_
