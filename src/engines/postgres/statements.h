// Statements of the PostgreSQL engine that tests run EXPLAIN on, to check
// that their plans hold whatever the table statistics say, and the claims,
// built from parts. The others live beside their callers in the engine's
// files (postgres_engine_impl.h lists them).

#ifndef SQLQ_ENGINES_POSTGRES_STATEMENTS_H_
#define SQLQ_ENGINES_POSTGRES_STATEMENTS_H_

#include <string>
#include <string_view>

#include "sqlq/queue.h"

namespace sqlq::engines::postgres {

// `errors` (an SQL expression, a jsonb array or NULL) with one entry of the
// error history appended (core/columns.h): attempt, time and error text,
// each an SQL expression; the oldest entry is dropped past kErrorHistory.
inline std::string AppendError(std::string_view errors,
                               std::string_view attempt, std::string_view at,
                               std::string_view error) {
  const std::string e(errors);
  return "((CASE WHEN jsonb_array_length(coalesce(" + e +
         ", '[]')) >= 20 THEN " + e + " - 0 ELSE coalesce(" + e +
         ", '[]') END) || jsonb_build_array(jsonb_build_object('attempt', " +
         std::string(attempt) + ", 'at', " + std::string(at) + ", 'error', " +
         std::string(error) + ")))";
}
static_assert(kErrorHistory == 20);

// A batch ack (kAckManySql): $1 queue id; $2, $3, $4 the receipts' ids,
// tokens and attempts as arrays. Returns the ids deleted.
// Each receipt is looked up on its own by the primary key (LIMIT 1 keeps
// the look-up a subquery run per receipt, which the planner cannot turn
// into a join), and the rows found are deleted by their row addresses, as
// an array: one TID scan. As a join, the statement's plan would depend on
// the statistics: when they say the table is empty, reading the whole
// table once looks cheaper than a look-up per receipt; and joined to the
// look-ups, the TID scan is scanned again for each row found, which asks
// the kernel for the table's size each time (docs/benchmarks.md).
// "queue_id + 0" keeps the queue out of the index conditions, so that no
// plan reads the queue's claim index instead. A receipt named twice finds
// one row address twice, and the row is deleted once.
// AckDelete: `receipts` names the three arrays' parameters, `also` a
// further condition (or nothing).
inline std::string AckDelete(std::string_view receipts,
                             std::string_view also = "") {
  return R"sql(
  DELETE FROM sqlq_messages m
  WHERE m.ctid = ANY(ARRAY(
    SELECT x.ctid
    FROM unnest()sql" +
         std::string(receipts) + R"sql()
      AS r(id, token, attempts)
    CROSS JOIN LATERAL (
      SELECT ctid FROM sqlq_messages
      WHERE id = r.id AND queue_id + 0 = $1 AND token = r.token
        AND attempts = r.attempts
      LIMIT 1) x)))sql" +
         std::string(also);
}

inline const std::string kAckDeleteSql =
    AckDelete("$2::bigint[], $3::bigint[], $4::bigint[]");

inline const std::string kAckManySql =
    std::string(kAckDeleteSql) + " RETURNING m.id";
// With a dedup window: the ids and keys deleted.
inline const std::string kAckManyKeyedSql =
    std::string(kAckDeleteSql) + " RETURNING m.id, m.dedup";

// The same for a queue that keeps an archive; $5 is the completion time.
inline const std::string kAckManyArchiveSql =
    std::string("WITH d AS (") + kAckDeleteSql + R"sql(
    RETURNING m.id, m.queue_id, m.priority, m.attempts, m.enqueued_us,
              m.worker, m.payload, m.headers, m.errors)
  INSERT INTO sqlq_archive (id, queue_id, priority, attempts, enqueued_us,
    completed_us, worker, payload, headers, errors)
  SELECT id, queue_id, priority, attempts, enqueued_us, $5, worker, payload,
         headers, errors
  FROM d
  RETURNING id)sql";

// The same with a dedup window: the ids and keys deleted.
inline const std::string kAckManyArchiveKeyedSql =
    std::string("WITH d AS (") + kAckDeleteSql + R"sql(
    RETURNING m.id, m.queue_id, m.priority, m.attempts, m.enqueued_us,
              m.worker, m.payload, m.headers, m.errors, m.dedup),
  a AS (
    INSERT INTO sqlq_archive (id, queue_id, priority, attempts, enqueued_us,
      completed_us, worker, payload, headers, errors)
    SELECT id, queue_id, priority, attempts, enqueued_us, $5, worker,
           payload, headers, errors
    FROM d)
  SELECT id, dedup FROM d)sql";

// `insert`, an INSERT ... SELECT ... FROM d, fed by `returning`, a DELETE
// ... RETURNING the columns it reads, as d. `keyed` (a dedup window):
// d returns the dedup key too and the statement returns each deleted
// row's id and key (core/engine.h, SendParams).
inline std::string FromDeleted(std::string_view returning,
                               std::string_view insert, bool keyed) {
  const std::string d =
      "WITH d AS (" + std::string(returning) + (keyed ? ", dedup)" : ")");
  if (!keyed) return d + " " + std::string(insert);
  return d + ", moved AS (" + std::string(insert) + ") SELECT id, dedup FROM d";
}

// What a DELETE from sqlq_messages returns for InsertDead.
inline constexpr const char* kDeadColumns =
    "id, queue_id, priority, attempts, enqueued_us, payload, headers, "
    "errors, grp";

// The dead letters of the rows of d (a DELETE ... RETURNING kDeadColumns),
// died at `died` (a bigint parameter), with `last_error` (bytea) and an
// entry of the error history saying `error` (text), SQL expressions.
inline std::string InsertDead(std::string_view died,
                              std::string_view last_error,
                              std::string_view error) {
  const std::string at = std::string(died) + "::bigint";
  return "INSERT INTO sqlq_dead (id, queue_id, priority, attempts, "
         "enqueued_us, died_us, last_error, payload, headers, grp, errors) "
         "SELECT id, queue_id, priority, attempts, enqueued_us, " +
         at + ", " + std::string(last_error) + ", payload, headers, grp, " +
         AppendError("errors", "attempts", at, error) + " FROM d";
}

// The dead letters of messages whose last lease ran out, from the rows of
// `from` (a CTE deleted from sqlq_messages, with its columns): died at
// `died`, out of `max_attempts`, the failed attempt's lease having ended
// at `lease_end` (SQL expressions).
inline std::string InsertLeaseExpiredDead(std::string_view from,
                                          std::string_view died,
                                          std::string_view max_attempts,
                                          std::string_view lease_end) {
  return "INSERT INTO sqlq_dead (id, queue_id, priority, attempts, "
         "enqueued_us, died_us, last_error, payload, headers, grp, errors) "
         "SELECT id, queue_id, priority, attempts, enqueued_us, " +
         std::string(died) +
         ", convert_to('lease expired on attempt ' || attempts || ' of ' || " +
         std::string(max_attempts) +
         "::integer, 'UTF8'), payload, headers, "
         "grp, " +
         AppendError("errors", "attempts", lease_end, "'lease expired'") +
         " FROM " + std::string(from);
}

// Claims: $1 queue id, $2 now, $3 how many, $4 the lease token, $5 the
// lease's end, $6 the worker, $7 max attempts. One statement locks up to $3
// candidates in claim order, skipping rows other consumers hold; moves those
// out of attempts to the dead letters; leases the others. RETURNING gives
// rows in no particular order, so the candidates' old ready_us comes back
// too, for sorting. Two forms differ in where they read the claim index:
// kClaimSql from the queue's start, kClaimFromSql from a mark
// (claim_marks.h) $8 priority, $9 ready_us, $10 id: the priorities above
// the mark's whole, the mark's own from the mark on (an index bound, so the
// entries below it are never visited), then the priorities below it. Each
// branch locks only the rows the outer LIMIT takes: Append runs its
// branches in turn and stops pulling once the limit is reached.
// The last parameter, $8 or $11 (`budget`), is what is left of
// ClaimParams::max_bytes: 0 for no limit, positive when the first message
// is taken whatever its size, negative (minus what is left) when not. b
// adds up the payload sizes of the candidates to lease, in claim order
// (octet_length reads a stored value's size, not the value), and only
// those within the budget are leased; the others stay locked, unchanged,
// until the commit. A dead-lettered row comes back with its dedup key in
// the payload's place (for a dedup window: core/engine.h, SendParams).
// The dead letters are deleted, and the others leased (upd), by their row
// addresses as an array (one TID scan): as a join with c, a plan that
// expects many candidates (a generic plan cannot know how many) reads the
// whole table to find them, or scans a TID scan again for each candidate,
// each scan reading the table's size with lseek. The lease's SET reads the
// row's old token and ready_us (the row is locked since c read it, so they
// are c's); leased adds them from c to upd's rows, since RETURNING gives
// only the new ones.
// The claim's statement after its candidates c: ClaimCtes, then
// kClaimSelect. Without `budgeted` (a claim the byte limit cannot bind: none
// set, or one message, whose first is always taken) b is left out and the
// budget must be 0: its window, a sort and a WindowAgg, costs a claim of one
// message about a sixth of the statement's time (docs/benchmarks.md).
inline std::string ClaimCtes(const std::string& budget, bool budgeted) {
  const std::string within = budgeted ? budget + " = 0 OR b.upto <= abs(" +
                                            budget + ") OR (" + budget +
                                            " > 0 AND b.upto = b.len)"
                                      : budget + " = 0";
  return std::string(budgeted ? R"sql(,
  b AS (
    SELECT c.*, coalesce(sum(len) FILTER (WHERE attempts < $7) OVER (
             ORDER BY priority DESC, ready_us, id ROWS UNBOUNDED PRECEDING),
           0) AS upto
    FROM c))sql"
                              : "") +
         R"sql(,
  dead AS (
    DELETE FROM sqlq_messages m
    WHERE m.ctid = ANY(ARRAY(SELECT ctid FROM c WHERE attempts >= $7))
    RETURNING m.id, m.queue_id, m.priority, m.attempts, m.enqueued_us,
              m.payload, m.headers, m.errors, m.dedup, m.grp,
              m.ready_us AS old_ready, m.token AS old_token),
  buried AS ()sql" +
         InsertLeaseExpiredDead("dead", "$2", "$7", "old_ready") + R"sql(),
  upd AS (
    UPDATE sqlq_messages m
    SET token = $4, attempts = m.attempts + 1, ready_us = $5, worker = $6,
        errors = CASE WHEN m.token = 0 THEN m.errors ELSE )sql" +
         AppendError("m.errors", "m.attempts", "m.ready_us",
                     "'lease expired'") +
         R"sql( END
    WHERE m.ctid = ANY(ARRAY(
      SELECT ctid FROM )sql" +
         std::string(budgeted ? "b" : "c b") +
         R"sql( WHERE b.attempts < $7 AND ()sql" + within + R"sql()))
    RETURNING m.id, m.priority, m.attempts, m.enqueued_us, m.payload,
              m.headers::text AS headers, m.grp),
  leased AS (
    SELECT u.id, u.priority, c.ready_us AS old_ready, c.token AS old_token,
           u.attempts, u.enqueued_us, u.payload, u.headers, u.grp
    FROM upd u JOIN c ON c.id = u.id))sql";
}

inline constexpr const char* kClaimSelect = R"sql(
  SELECT false, id, priority, old_ready, old_token, attempts, enqueued_us,
         payload, headers, grp
  FROM leased
  UNION ALL
  SELECT true, id, 0, 0, old_token, 0, 0, dedup, NULL, NULL FROM dead)sql";

inline std::string ClaimRest(const std::string& budget, bool budgeted) {
  return ClaimCtes(budget, budgeted) + kClaimSelect;
}

// The candidates of one branch: `where` selects the part of the index.
// `limit`: how many (an SQL expression).
inline std::string ClaimCandidates(std::string_view where,
                                   std::string_view limit = "$3") {
  return std::string(
             "SELECT ctid, id, priority, ready_us, token, attempts, "
             "octet_length(payload) AS len FROM sqlq_messages WHERE ") +
         std::string(where) +
         " ORDER BY priority DESC, ready_us, id + 0 LIMIT " +
         std::string(limit) + " FOR UPDATE SKIP LOCKED";
}

// The candidates c of a claim in one statement: `ready` the condition on
// every branch beyond the queue, `limit` how many (SQL expressions); with
// a mark, `mark` names its three parameters (priority, then ready_us and
// id), the three branches of kClaimFromSql.
inline std::string ClaimCandidatesCte(const std::string& ready,
                                      const std::string& limit,
                                      const std::string* mark) {
  if (mark == nullptr) {
    return "c AS MATERIALIZED (" +
           ClaimCandidates("queue_id = $1 AND " + ready, limit) + ")";
  }
  const std::string prio = mark->substr(0, mark->find(','));
  const std::string rest = mark->substr(mark->find(',') + 2);
  return "c AS MATERIALIZED (SELECT * FROM (" +
         ClaimCandidates(
             "queue_id = $1 AND priority > " + prio + " AND " + ready, limit) +
         ") above UNION ALL SELECT * FROM (" +
         ClaimCandidates("queue_id = $1 AND priority = " + prio +
                             " AND (ready_us, id + 0) >= (" + rest + ") AND " +
                             ready,
                         limit) +
         ") at_mark UNION ALL SELECT * FROM (" +
         ClaimCandidates(
             "queue_id = $1 AND priority < " + prio + " AND " + ready, limit) +
         ") below LIMIT " + limit + ")";
}

// kClaimFromSql's mark: $8 priority, $9 ready_us, $10 id.
inline const std::string kClaimMark = "$8, $9, $10";
// [budgeted] (ClaimCtes)
inline const std::string kClaimSql[2] = {
    "WITH " + ClaimCandidatesCte("ready_us <= $2", "$3", nullptr) +
        ClaimRest("$8::bigint", false),
    "WITH " + ClaimCandidatesCte("ready_us <= $2", "$3", nullptr) +
        ClaimRest("$8::bigint", true)};

inline const std::string kClaimFromSql[2] = {
    "WITH " + ClaimCandidatesCte("ready_us <= $2", "$3", &kClaimMark) +
        ClaimRest("$11::bigint", false),
    "WITH " + ClaimCandidatesCte("ready_us <= $2", "$3", &kClaimMark) +
        ClaimRest("$11::bigint", true)};

// A claim, the acks that go before it, or acks alone, for a transaction
// that is this call alone, BEGIN and COMMIT sent with it
// (PostgresEngine::ClaimCommit): one call of the function
// sqlq__claim_commit (schema.h, migration 26), which reads the clock, acks
// the receipts, claims and adds the counters in one round trip. It was one
// statement of common table expressions; PostgreSQL set up all of that
// statement's plan, about 60 nodes, at every execution, parts for dead
// letters and refused receipts included, which cost more of the server's
// time than running it (docs/benchmarks.md). The function runs each part
// as a statement of its own, and only the parts that have work.
// $1 queue id, $2 the lease (microseconds), $3 how many to claim whatever
// the acks, $4 the lease token, $5 the receipts' ids (NULL for none: the
// queue row is then only read, so that an empty claim writes nothing; with
// receipts it is share-locked first, CheckQueue says why, and nothing is
// done when the queue's acks release dependents, sqlq_queues.dependents:
// those need the general way), $6 the worker, $7 max attempts, $8 the byte
// budget (ClaimRest), $9 and $10 the receipts' tokens and attempts, $11
// how many more to claim for each receipt acked (NULL for acks alone; a
// receipt named twice is acked once, by its first place), $12 the store's
// clock (NULL: the database's), $13 priority, $14 ready_us and $15 id of
// the mark to claim from (NULL: the queue's start; kClaimFromSql).
// The receipts' messages are kept out of the candidates: a call must not
// both delete and lease a row. Receipts are looked up as kAckDeleteSql
// does, and dead letters and leases found by their row addresses.
// Rows: (0, id, priority, old ready_us, old token, attempts, enqueued_us,
// payload, headers, group) each message leased; (1, id, 0, 0, old token)
// each dead-lettered; (2, id) each receipt acked; (3, id, 0, 0, token,
// attempts) each receipt not acked, with its message's token and attempts
// (NULL when it is not in the queue); (4, whether the queue is there,
// dependents flag, clock, how many were to be claimed) once, last.
inline constexpr const char* kClaimCommitCall =
    "SELECT * FROM sqlq__claim_commit($1::bigint, $2::bigint, $3::bigint, "
    "$4::bigint, $5::bigint[], $6::bytea, $7::integer, $8::bigint, "
    "$9::bigint[], $10::bigint[], $11::bigint[], $12::bigint, $13::integer, "
    "$14::bigint, $15::bigint)";

// When a queue's next message is ready (its smallest ready_us; leased
// messages count at their lease's end) and its priority, or no row if it
// has none; $1 the queue id. min(ready_us) alone would read the queue's whole
// claim index, which leads with priority; this visits each priority present
// once (a loose index scan, which PostgreSQL does not do by itself) and takes
// the first entry of each, so a queue of many delayed messages costs a few
// index probes.
inline constexpr const char* kNextReadySql = R"sql(
  WITH RECURSIVE p(priority) AS (
    (SELECT priority FROM sqlq_messages WHERE queue_id = $1
     ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT m.priority FROM sqlq_messages m
            WHERE m.queue_id = $1 AND m.priority < p.priority
            ORDER BY m.priority DESC LIMIT 1)
    FROM p WHERE p.priority IS NOT NULL)
  SELECT r.ready_us, p.priority
  FROM p CROSS JOIN LATERAL (
    SELECT m.ready_us FROM sqlq_messages m
    WHERE m.queue_id = $1 AND m.priority = p.priority
    ORDER BY m.ready_us LIMIT 1) r
  WHERE p.priority IS NOT NULL
  ORDER BY r.ready_us LIMIT 1)sql";

}  // namespace sqlq::engines::postgres

#endif  // SQLQ_ENGINES_POSTGRES_STATEMENTS_H_
