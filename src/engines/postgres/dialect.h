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
#include "engines/shared/pooled_sql_engine.h"
#include "engines/shared/standard_sql.h"

namespace sqlq::engines::postgres {

struct Dialect : shared::StandardSql<Dialect> {
  using Conn = PgConn;
  using Params = postgres::Params;
  using Rows = postgres::Rows;

  // The shared statements are written with ?: PostgreSQL numbers them.
  static std::string Statement(std::string_view sql) {
    return NumberPlaceholders(sql);
  }

  // A read that locks the rows it reads until the transaction ends.
  static constexpr const char* kForUpdate = " FOR UPDATE";
  // LockSubscribers's lock: the topic's row (alias t) as kLockQueue locks a
  // queue's, not the rows joined to it.
  static constexpr const char* kLockTopic = " FOR KEY SHARE OF t";
  // The rows of a ring or rotation go with its sqlq_queues row (foreign
  // keys ON DELETE CASCADE).
  static constexpr bool kCascades = true;

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
      "SELECT (extract(epoch FROM now()) * 1000000)::bigint, dependents "
      "FROM sqlq_queues WHERE id = $1 FOR KEY SHARE";

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
      (SELECT count(*) FROM sqlq_archive a WHERE a.queue_id = q.id),
      m.waiting,
      k.expired
    FROM sqlq_queues q,
      LATERAL (SELECT coalesce(sum(sends), 0)::bigint AS sends,
                 coalesce(sum(claims), 0)::bigint AS claims,
                 coalesce(sum(acks), 0)::bigint AS acks,
                 coalesce(sum(nacks), 0)::bigint AS nacks,
                 coalesce(sum(expirations), 0)::bigint AS expirations,
                 coalesce(sum(dead_lettered), 0)::bigint AS dead_lettered,
                 coalesce(sum(expired), 0)::bigint AS expired
               FROM sqlq_counts WHERE queue_id = q.id) k,
      LATERAL (SELECT count(*) FILTER (WHERE ready_us <= $1) AS ready,
                 count(*) FILTER (WHERE ready_us > $2 AND token = 0
                   AND ready_us < )sql" SQLQ_WAITING_US R"sql() AS delayed,
                 count(*) FILTER (WHERE token = 0
                   AND ready_us >= )sql" SQLQ_WAITING_US R"sql() AS waiting,
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

  // Whether sqlq_schema exists, and the newest version it records
  // (PooledSqlEngine::SchemaVersion).
  static constexpr const char* kSchemaExistsSql =
      "SELECT to_regclass('sqlq_schema') IS NOT NULL";
  static constexpr const char* kSchemaVersionSql =
      "SELECT coalesce(max(version), 0) FROM sqlq_schema";

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
