// Statements of the PostgreSQL engine that tests run EXPLAIN on, to check
// that their plans hold whatever the table statistics say. The others live
// beside their callers in postgres_engine.cc.

#ifndef SQLQ_ENGINES_POSTGRES_STATEMENTS_H_
#define SQLQ_ENGINES_POSTGRES_STATEMENTS_H_

namespace sqlq::engines::postgres {

// A batch ack: $1 queue id; $2, $3, $4 the receipts' ids, tokens and
// attempts as arrays. Returns the ids deleted.
// "queue_id + 0" keeps the queue out of the index conditions: a prepared
// statement's generic plan, seeing few rows per queue in the statistics
// (many queues, or stale statistics), would otherwise read the queue's
// whole claim index and match it against every receipt, so that an ack
// batch cost the queue's depth times the batch size. This way each receipt
// is one primary-key look-up.
inline constexpr const char* kAckManySql = R"sql(
  DELETE FROM sqlq_messages m
  USING unnest($2::bigint[], $3::bigint[], $4::bigint[])
    AS r(id, token, attempts)
  WHERE m.id = r.id AND m.queue_id + 0 = $1 AND m.token = r.token
    AND m.attempts = r.attempts
  RETURNING m.id)sql";

// The same for a queue that keeps an archive; $5 is the completion time.
inline constexpr const char* kAckManyArchiveSql = R"sql(
  WITH d AS (
    DELETE FROM sqlq_messages m
    USING unnest($2::bigint[], $3::bigint[], $4::bigint[])
      AS r(id, token, attempts)
    WHERE m.id = r.id AND m.queue_id + 0 = $1 AND m.token = r.token
      AND m.attempts = r.attempts
    RETURNING m.id, m.queue_id, m.priority, m.attempts, m.enqueued_us,
              m.worker, m.payload)
  INSERT INTO sqlq_archive (id, queue_id, priority, attempts, enqueued_us,
    completed_us, worker, payload)
  SELECT id, queue_id, priority, attempts, enqueued_us, $5, worker, payload
  FROM d
  RETURNING id)sql";

// When a queue's next message is ready (its smallest ready_us; leased
// messages count at their lease's end), or NULL if it has none; $1 the queue
// id. min(ready_us) alone would read the queue's whole claim index, which
// leads with priority; this visits each priority present once (a loose index
// scan, which PostgreSQL does not do by itself) and takes the first entry of
// each, so a queue of many delayed messages costs a few index probes.
inline constexpr const char* kNextReadySql = R"sql(
  WITH RECURSIVE p(priority) AS (
    (SELECT priority FROM sqlq_messages WHERE queue_id = $1
     ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT m.priority FROM sqlq_messages m
            WHERE m.queue_id = $1 AND m.priority < p.priority
            ORDER BY m.priority DESC LIMIT 1)
    FROM p WHERE p.priority IS NOT NULL)
  SELECT min((SELECT m.ready_us FROM sqlq_messages m
              WHERE m.queue_id = $1 AND m.priority = p.priority
              ORDER BY m.ready_us LIMIT 1))
  FROM p WHERE p.priority IS NOT NULL)sql";

}  // namespace sqlq::engines::postgres

#endif  // SQLQ_ENGINES_POSTGRES_STATEMENTS_H_
