// The SQL-level API of the SQLite engine (docs/sql-api.md). Another process
// cannot call sqlq's C++ code, so sends, acks and publishes are INSERTs
// into views, sqlq_send, sqlq_ack and sqlq_publish, whose INSTEAD OF
// triggers do what the library's send, ack (with the release of
// dependents) and publish do (sqlite_queue.cc, sqlite_claim.cc,
// engines/shared/sql_deps.h, core/topic.cc) inside the caller's
// transaction: the same checks and limits (core/validate.h), the same rows,
// dedup holds and counters. Claims waiting in other processes wake as they
// do for the library's sends: the commit writes the database's WAL, which
// their FileWatcher sees.
//
// SQLite's RAISE takes a constant message, so the errors name what was
// wrong but not the values. Times: julianday('now'), the system clock, as
// the library's store clock.

#ifndef SQLQ_ENGINES_SQLITE_SQL_API_H_
#define SQLQ_ENGINES_SQLITE_SQL_API_H_

#include "engines/shared/joined_text.h"

namespace sqlq::engines::sqlite {

// Migration 12: the views sqlq_send and sqlq_ack, as released.
inline constexpr const char* kSqlApi12 = R"sql(
CREATE VIEW IF NOT EXISTS sqlq_send
  (queue, payload, priority, delay_ms, headers, dedup_key, "group", run_at)
  AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0;

CREATE TRIGGER IF NOT EXISTS sqlq_send INSTEAD OF INSERT ON sqlq_send
BEGIN
  SELECT RAISE(ABORT, 'sqlq: no queue of that name')
    WHERE NOT EXISTS (SELECT 1 FROM sqlq_queues
                      WHERE name = NEW.queue AND kind = 'queue');
  SELECT RAISE(ABORT, 'sqlq: the payload must not be NULL')
    WHERE NEW.payload IS NULL;
  SELECT RAISE(ABORT, 'sqlq: the payload exceeds the queue''s limit (max_payload_bytes)')
    WHERE length(CAST(NEW.payload AS BLOB)) >
          (SELECT max_payload FROM sqlq_queues WHERE name = NEW.queue);
  SELECT RAISE(ABORT, 'sqlq: priority must be a 32-bit integer')
    WHERE NEW.priority IS NOT NULL
      AND (typeof(NEW.priority) <> 'integer'
           OR NEW.priority NOT BETWEEN -2147483648 AND 2147483647);
  SELECT RAISE(ABORT, 'sqlq: delay_ms must be an integer in [0, 31536000000]')
    WHERE NEW.delay_ms IS NOT NULL
      AND (typeof(NEW.delay_ms) <> 'integer' OR NEW.delay_ms < 0
           OR NEW.delay_ms > 31536000000);
  SELECT RAISE(ABORT, 'sqlq: the dedup key is longer than 255 bytes')
    WHERE length(CAST(NEW.dedup_key AS BLOB)) > 255;
  SELECT RAISE(ABORT, 'sqlq: the group is longer than 255 bytes')
    WHERE length(CAST(NEW."group" AS BLOB)) > 255;
  SELECT RAISE(ABORT, 'sqlq: a message takes a delay or a run_at time, not both')
    WHERE NEW.run_at IS NOT NULL AND coalesce(NEW.delay_ms, 0) <> 0;
  SELECT RAISE(ABORT, 'sqlq: run_at must be a time such as 2026-12-01T09:00:00Z, within 365 days of now')
    WHERE NEW.run_at IS NOT NULL
      AND (julianday(NEW.run_at) IS NULL
           OR abs(julianday(NEW.run_at) - julianday('now')) > 365);
  SELECT RAISE(ABORT, 'sqlq: headers must be a JSON object of strings')
    WHERE NEW.headers IS NOT NULL
      AND (NOT json_valid(NEW.headers) OR json_type(NEW.headers) <> 'object'
           OR EXISTS (SELECT 1 FROM json_each(NEW.headers)
                      WHERE type <> 'text'));
  SELECT RAISE(ABORT, 'sqlq: a header name must be 1 to 128 letters, digits, ''_'', ''-'', ''.'' or '':''')
    WHERE NEW.headers IS NOT NULL
      AND EXISTS (SELECT 1 FROM json_each(NEW.headers)
                  WHERE length(key) NOT BETWEEN 1 AND 128
                     OR key GLOB '*[^A-Za-z0-9_.:-]*');
  SELECT RAISE(ABORT, 'sqlq: a header value must be at most 4096 bytes of UTF-8 without NUL')
    WHERE NEW.headers IS NOT NULL
      AND EXISTS (SELECT 1 FROM json_each(NEW.headers)
                  WHERE length(CAST(value AS BLOB)) > 4096
                     OR instr(CAST(value AS BLOB), x'00') > 0);
  SELECT RAISE(ABORT, 'sqlq: at most 64 headers of 16384 bytes (names and values) in all')
    WHERE NEW.headers IS NOT NULL
      AND (SELECT count(*) > 64
                  OR sum(length(CAST(key AS BLOB)) + length(CAST(value AS BLOB)))
                     > 16384
           FROM json_each(NEW.headers));
  -- Stored unless its dedup key is taken, by a message in the queue or by
  -- a hold of the queue's dedup window.
  INSERT INTO sqlq_messages
    (queue_id, priority, ready_us, enqueued_us, dedup, payload, headers, grp)
  SELECT q.id, coalesce(NEW.priority, 0),
         max(t.now + coalesce(NEW.delay_ms, 0) * 1000,
             coalesce(CAST((julianday(NEW.run_at) - 2440587.5) * 86400000000.0
                           AS INTEGER), 0)),
         t.now, nullif(CAST(NEW.dedup_key AS TEXT), ''), CAST(NEW.payload AS BLOB),
         CASE WHEN NEW.headers IS NOT NULL AND NEW.headers <> '{}'
              THEN json(NEW.headers) END,
         CASE WHEN coalesce(NEW."group", '') <> '' OR q.group_mode <> 0
              THEN CAST(coalesce(NEW."group", '') AS TEXT) END
  FROM sqlq_queues AS q,
       (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0
                    AS INTEGER) AS now) AS t
  WHERE q.name = NEW.queue
    AND NOT (coalesce(NEW.dedup_key, '') <> '' AND EXISTS (
      SELECT 1 FROM sqlq_messages AS m
      WHERE m.queue_id = q.id AND m.dedup = nullif(CAST(NEW.dedup_key AS TEXT), '')))
    AND NOT (coalesce(NEW.dedup_key, '') <> '' AND q.unique_for_us > 0 AND EXISTS (
      SELECT 1 FROM sqlq_dedup_holds AS h
      WHERE h.queue_id = q.id AND h.dedup = nullif(CAST(NEW.dedup_key AS TEXT), '')
        AND h.until_us > t.now));
  UPDATE sqlq_queues SET sends = sends + changes() WHERE name = NEW.queue;
END;

CREATE VIEW IF NOT EXISTS sqlq_ack (queue, receipt)
  AS SELECT NULL, NULL WHERE 0;

-- receipt = ID-ATTEMPT-TOKEN; below, with r the receipt after "ID-":
-- the id is substr(receipt, 1, instr(receipt, '-') - 1), the attempt
-- substr(r, 1, instr(r, '-') - 1), the token lower(substr(r, instr(r, '-') + 1)),
-- compared with the stored token as printf('%016x', token).
CREATE TRIGGER IF NOT EXISTS sqlq_ack INSTEAD OF INSERT ON sqlq_ack
BEGIN
  SELECT RAISE(ABORT, 'sqlq: no queue of that name')
    WHERE NOT EXISTS (SELECT 1 FROM sqlq_queues
                      WHERE name = NEW.queue AND kind = 'queue');
  SELECT RAISE(ABORT, 'sqlq: malformed receipt: expected ID-ATTEMPT-TOKEN as printed by claim')
    WHERE NEW.receipt IS NULL OR typeof(NEW.receipt) <> 'text'
       OR NEW.receipt NOT GLOB '[1-9]*-[1-9]*-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]'
       OR NEW.receipt GLOB '*-*-*-*'
       OR substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1) GLOB '*[^0-9]*'
       OR length(substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1)) > 18
       OR substr(NEW.receipt, instr(NEW.receipt, '-') + 1,
                 instr(substr(NEW.receipt, instr(NEW.receipt, '-') + 1), '-') - 1)
          GLOB '*[^0-9]*'
       OR length(substr(NEW.receipt, instr(NEW.receipt, '-') + 1,
                 instr(substr(NEW.receipt, instr(NEW.receipt, '-') + 1), '-') - 1)) > 9
       OR lower(substr(NEW.receipt, -16)) = '0000000000000000';
  SELECT RAISE(ABORT, 'sqlq: stale receipt: the message''s lease was lost (it expired and the message was claimed again, or it was nacked)')
    WHERE NOT EXISTS (SELECT 1 FROM sqlq_messages AS m, sqlq_queues AS q
      WHERE q.name = NEW.queue AND m.queue_id = q.id
        AND m.id = CAST(substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1) AS INTEGER)
        AND m.attempts = CAST(substr(NEW.receipt, instr(NEW.receipt, '-') + 1,
              instr(substr(NEW.receipt, instr(NEW.receipt, '-') + 1), '-') - 1) AS INTEGER)
        AND m.token <> 0
        AND printf('%016x', m.token) = lower(substr(NEW.receipt, -16)))
    AND EXISTS (SELECT 1 FROM sqlq_messages AS m, sqlq_queues AS q
      WHERE q.name = NEW.queue AND m.queue_id = q.id
        AND m.id = CAST(substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1) AS INTEGER));
  SELECT RAISE(ABORT, 'sqlq: the message is not in the queue (acked, dead-lettered or never there)')
    WHERE NOT EXISTS (SELECT 1 FROM sqlq_messages AS m, sqlq_queues AS q
      WHERE q.name = NEW.queue AND m.queue_id = q.id
        AND m.id = CAST(substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1) AS INTEGER));
  -- From here the receipt holds the message's live lease.
  INSERT OR REPLACE INTO sqlq_dedup_holds (queue_id, dedup, message_id, until_us)
  SELECT q.id, m.dedup, m.id,
         CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
           + q.unique_for_us
  FROM sqlq_messages AS m, sqlq_queues AS q
  WHERE q.name = NEW.queue AND m.queue_id = q.id AND q.unique_for_us > 0
    AND m.dedup IS NOT NULL
    AND m.id = CAST(substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1) AS INTEGER);
  INSERT INTO sqlq_archive (id, queue_id, priority, attempts, enqueued_us,
    completed_us, worker, payload, headers, errors)
  SELECT m.id, m.queue_id, m.priority, m.attempts, m.enqueued_us,
         CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER),
         m.worker, m.payload, m.headers, m.errors
  FROM sqlq_messages AS m, sqlq_queues AS q
  WHERE q.name = NEW.queue AND m.queue_id = q.id AND q.archive <> 0
    AND m.id = CAST(substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1) AS INTEGER);
  DELETE FROM sqlq_messages
  WHERE id = CAST(substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1) AS INTEGER);
  UPDATE sqlq_queues SET acks = acks + 1 WHERE name = NEW.queue;
END;
)sql";

// Migration 20: the ack releases the acked message's dependents (as the
// library's ack does, engines/shared/sql_deps.h), and the view
// sqlq_publish publishes to a topic (core/topic.cc). The ack's trigger is
// made again: migration 12's, then the release. A write transaction holds
// the database's one write lock, so nothing reads or writes the rows in
// between.
// Migration 20's texts, as released, in pieces that migration 21 reuses.
inline constexpr char kAckTrigger20[] = R"sql(
DROP TRIGGER IF EXISTS sqlq_ack;
CREATE TRIGGER sqlq_ack INSTEAD OF INSERT ON sqlq_ack
BEGIN
  SELECT RAISE(ABORT, 'sqlq: no queue of that name')
    WHERE NOT EXISTS (SELECT 1 FROM sqlq_queues
                      WHERE name = NEW.queue AND kind = 'queue');
  SELECT RAISE(ABORT, 'sqlq: malformed receipt: expected ID-ATTEMPT-TOKEN as printed by claim')
    WHERE NEW.receipt IS NULL OR typeof(NEW.receipt) <> 'text'
       OR NEW.receipt NOT GLOB '[1-9]*-[1-9]*-[0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F][0-9a-fA-F]'
       OR NEW.receipt GLOB '*-*-*-*'
       OR substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1) GLOB '*[^0-9]*'
       OR length(substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1)) > 18
       OR substr(NEW.receipt, instr(NEW.receipt, '-') + 1,
                 instr(substr(NEW.receipt, instr(NEW.receipt, '-') + 1), '-') - 1)
          GLOB '*[^0-9]*'
       OR length(substr(NEW.receipt, instr(NEW.receipt, '-') + 1,
                 instr(substr(NEW.receipt, instr(NEW.receipt, '-') + 1), '-') - 1)) > 9
       OR lower(substr(NEW.receipt, -16)) = '0000000000000000';
  SELECT RAISE(ABORT, 'sqlq: stale receipt: the message''s lease was lost (it expired and the message was claimed again, or it was nacked)')
    WHERE NOT EXISTS (SELECT 1 FROM sqlq_messages AS m, sqlq_queues AS q
      WHERE q.name = NEW.queue AND m.queue_id = q.id
        AND m.id = CAST(substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1) AS INTEGER)
        AND m.attempts = CAST(substr(NEW.receipt, instr(NEW.receipt, '-') + 1,
              instr(substr(NEW.receipt, instr(NEW.receipt, '-') + 1), '-') - 1) AS INTEGER)
        AND m.token <> 0
        AND printf('%016x', m.token) = lower(substr(NEW.receipt, -16)))
    AND EXISTS (SELECT 1 FROM sqlq_messages AS m, sqlq_queues AS q
      WHERE q.name = NEW.queue AND m.queue_id = q.id
        AND m.id = CAST(substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1) AS INTEGER));
  SELECT RAISE(ABORT, 'sqlq: the message is not in the queue (acked, dead-lettered or never there)')
    WHERE NOT EXISTS (SELECT 1 FROM sqlq_messages AS m, sqlq_queues AS q
      WHERE q.name = NEW.queue AND m.queue_id = q.id
        AND m.id = CAST(substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1) AS INTEGER));
)sql";
inline constexpr char kAckRefusesBatches20[] =
    R"sql(  -- A member of a batch (OnDead::kBatch, 3): its ack also counts it in
  -- the batch, which only the library does.
  SELECT RAISE(ABORT, 'sqlq: the message is a member of a batch, whose counts only the library keeps: ack it through the library, the HTTP API, the CLI or a client')
    WHERE (SELECT dependents FROM sqlq_queues WHERE name = NEW.queue) <> 0
      AND EXISTS (SELECT 1 FROM sqlq_deps
        WHERE parent_id = CAST(substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1) AS INTEGER)
          AND on_dead = 3);
)sql";
inline constexpr char kAckMiddle20[] =
    R"sql(  -- From here the receipt holds the message's live lease.
  INSERT OR REPLACE INTO sqlq_dedup_holds (queue_id, dedup, message_id, until_us)
  SELECT q.id, m.dedup, m.id,
         CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
           + q.unique_for_us
  FROM sqlq_messages AS m, sqlq_queues AS q
  WHERE q.name = NEW.queue AND m.queue_id = q.id AND q.unique_for_us > 0
    AND m.dedup IS NOT NULL
    AND m.id = CAST(substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1) AS INTEGER);
  INSERT INTO sqlq_archive (id, queue_id, priority, attempts, enqueued_us,
    completed_us, worker, payload, headers, errors)
  SELECT m.id, m.queue_id, m.priority, m.attempts, m.enqueued_us,
         CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER),
         m.worker, m.payload, m.headers, m.errors
  FROM sqlq_messages AS m, sqlq_queues AS q
  WHERE q.name = NEW.queue AND m.queue_id = q.id AND q.archive <> 0
    AND m.id = CAST(substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1) AS INTEGER);
  DELETE FROM sqlq_messages
  WHERE id = CAST(substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1) AS INTEGER);
  UPDATE sqlq_queues SET acks = acks + 1 WHERE name = NEW.queue;
  -- In a queue whose messages others were ever made to wait for (its
  -- dependents flag): each message waiting for this one waits for one
  -- less, and one that waits for none is ready now; the links go.
  UPDATE sqlq_messages
    SET ready_us = CASE WHEN waits = 1
                        THEN CAST((julianday('now') - 2440587.5) * 86400000000.0
                                  AS INTEGER)
                        ELSE ready_us END,
        waits = waits - 1
  WHERE id IN (SELECT child_id FROM sqlq_deps
               WHERE parent_id = CAST(substr(NEW.receipt, 1,
                                   instr(NEW.receipt, '-') - 1) AS INTEGER))
    AND waits > 0
    AND (SELECT dependents FROM sqlq_queues WHERE name = NEW.queue) <> 0;
)sql";
inline constexpr char kAckUnlink20[] = R"sql(  DELETE FROM sqlq_deps
  WHERE parent_id = CAST(substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1) AS INTEGER)
    AND (SELECT dependents FROM sqlq_queues WHERE name = NEW.queue) <> 0;
END;
)sql";
inline constexpr char kPublish20[] = R"sql(
CREATE VIEW IF NOT EXISTS sqlq_publish
  (topic, payload, priority, delay_ms, headers, dedup_key, "group", run_at)
  AS SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL WHERE 0;

-- One message to every queue subscribed to the topic whose filter its
-- headers match (each of the filter's headers with exactly that value),
-- as the view sqlq_send stores one in each: the same checks first, then
-- each subscriber's payload limit, then the counters (of the queues that
-- store it: not a duplicate there), then the rows.
CREATE TRIGGER IF NOT EXISTS sqlq_publish INSTEAD OF INSERT ON sqlq_publish
BEGIN
  SELECT RAISE(ABORT, 'sqlq: no topic of that name')
    WHERE NOT EXISTS (SELECT 1 FROM sqlq_queues
                      WHERE name = NEW.topic AND kind = 'topic');
  SELECT RAISE(ABORT, 'sqlq: the payload must not be NULL')
    WHERE NEW.payload IS NULL;
  SELECT RAISE(ABORT, 'sqlq: priority must be a 32-bit integer')
    WHERE NEW.priority IS NOT NULL
      AND (typeof(NEW.priority) <> 'integer'
           OR NEW.priority NOT BETWEEN -2147483648 AND 2147483647);
  SELECT RAISE(ABORT, 'sqlq: delay_ms must be an integer in [0, 31536000000]')
    WHERE NEW.delay_ms IS NOT NULL
      AND (typeof(NEW.delay_ms) <> 'integer' OR NEW.delay_ms < 0
           OR NEW.delay_ms > 31536000000);
  SELECT RAISE(ABORT, 'sqlq: the dedup key is longer than 255 bytes')
    WHERE length(CAST(NEW.dedup_key AS BLOB)) > 255;
  SELECT RAISE(ABORT, 'sqlq: the group is longer than 255 bytes')
    WHERE length(CAST(NEW."group" AS BLOB)) > 255;
  SELECT RAISE(ABORT, 'sqlq: a message takes a delay or a run_at time, not both')
    WHERE NEW.run_at IS NOT NULL AND coalesce(NEW.delay_ms, 0) <> 0;
  SELECT RAISE(ABORT, 'sqlq: run_at must be a time such as 2026-12-01T09:00:00Z, within 365 days of now')
    WHERE NEW.run_at IS NOT NULL
      AND (julianday(NEW.run_at) IS NULL
           OR abs(julianday(NEW.run_at) - julianday('now')) > 365);
  SELECT RAISE(ABORT, 'sqlq: headers must be a JSON object of strings')
    WHERE NEW.headers IS NOT NULL
      AND (NOT json_valid(NEW.headers) OR json_type(NEW.headers) <> 'object'
           OR EXISTS (SELECT 1 FROM json_each(NEW.headers)
                      WHERE type <> 'text'));
  SELECT RAISE(ABORT, 'sqlq: a header name must be 1 to 128 letters, digits, ''_'', ''-'', ''.'' or '':''')
    WHERE NEW.headers IS NOT NULL
      AND EXISTS (SELECT 1 FROM json_each(NEW.headers)
                  WHERE length(key) NOT BETWEEN 1 AND 128
                     OR key GLOB '*[^A-Za-z0-9_.:-]*');
  SELECT RAISE(ABORT, 'sqlq: a header value must be at most 4096 bytes of UTF-8 without NUL')
    WHERE NEW.headers IS NOT NULL
      AND EXISTS (SELECT 1 FROM json_each(NEW.headers)
                  WHERE length(CAST(value AS BLOB)) > 4096
                     OR instr(CAST(value AS BLOB), x'00') > 0);
  SELECT RAISE(ABORT, 'sqlq: at most 64 headers of 16384 bytes (names and values) in all')
    WHERE NEW.headers IS NOT NULL
      AND (SELECT count(*) > 64
                  OR sum(length(CAST(key AS BLOB)) + length(CAST(value AS BLOB)))
                     > 16384
           FROM json_each(NEW.headers));
  SELECT RAISE(ABORT, 'sqlq: the payload exceeds the limit (max_payload_bytes) of a queue subscribed to the topic')
    WHERE EXISTS (
      SELECT 1 FROM sqlq_queues AS t, sqlq_subscriptions AS s, sqlq_queues AS q
      WHERE t.name = NEW.topic AND t.kind = 'topic' AND s.topic_id = t.id
        AND q.id = s.queue_id AND q.kind = 'queue'
        AND length(CAST(NEW.payload AS BLOB)) > q.max_payload
        AND NOT EXISTS (
          SELECT 1 FROM json_each(nullif(s.header_filter, '')) AS f
          WHERE NOT EXISTS (
            SELECT 1 FROM json_each(NEW.headers) AS h
            WHERE h.key = f.key AND h.type = 'text' AND h.value = f.value)));
  UPDATE sqlq_queues SET sends = sends + 1
  WHERE id IN (
    SELECT q.id FROM sqlq_queues AS t, sqlq_subscriptions AS s, sqlq_queues AS q
    WHERE t.name = NEW.topic AND t.kind = 'topic' AND s.topic_id = t.id
      AND q.id = s.queue_id AND q.kind = 'queue'
      AND NOT EXISTS (
        SELECT 1 FROM json_each(nullif(s.header_filter, '')) AS f
        WHERE NOT EXISTS (
          SELECT 1 FROM json_each(NEW.headers) AS h
          WHERE h.key = f.key AND h.type = 'text' AND h.value = f.value))
      AND NOT (coalesce(NEW.dedup_key, '') <> '' AND EXISTS (
        SELECT 1 FROM sqlq_messages AS m
        WHERE m.queue_id = q.id
          AND m.dedup = nullif(CAST(NEW.dedup_key AS TEXT), '')))
      AND NOT (coalesce(NEW.dedup_key, '') <> '' AND q.unique_for_us > 0
        AND EXISTS (
          SELECT 1 FROM sqlq_dedup_holds AS h
          WHERE h.queue_id = q.id
            AND h.dedup = nullif(CAST(NEW.dedup_key AS TEXT), '')
            AND h.until_us > CAST((julianday('now') - 2440587.5)
                                  * 86400000000.0 AS INTEGER))));
  INSERT INTO sqlq_messages
    (queue_id, priority, ready_us, enqueued_us, dedup, payload, headers, grp)
  SELECT q.id, coalesce(NEW.priority, 0),
         max(tm.now + coalesce(NEW.delay_ms, 0) * 1000,
             coalesce(CAST((julianday(NEW.run_at) - 2440587.5) * 86400000000.0
                           AS INTEGER), 0)),
         tm.now, nullif(CAST(NEW.dedup_key AS TEXT), ''),
         CAST(NEW.payload AS BLOB),
         CASE WHEN NEW.headers IS NOT NULL AND NEW.headers <> '{}'
              THEN json(NEW.headers) END,
         CASE WHEN coalesce(NEW."group", '') <> '' OR q.group_mode <> 0
              THEN CAST(coalesce(NEW."group", '') AS TEXT) END
  FROM sqlq_queues AS t, sqlq_subscriptions AS s, sqlq_queues AS q,
       (SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0
                    AS INTEGER) AS now) AS tm
  WHERE t.name = NEW.topic AND t.kind = 'topic' AND s.topic_id = t.id
    AND q.id = s.queue_id AND q.kind = 'queue'
    AND NOT EXISTS (
      SELECT 1 FROM json_each(nullif(s.header_filter, '')) AS f
      WHERE NOT EXISTS (
        SELECT 1 FROM json_each(NEW.headers) AS h
        WHERE h.key = f.key AND h.type = 'text' AND h.value = f.value))
    AND NOT (coalesce(NEW.dedup_key, '') <> '' AND EXISTS (
      SELECT 1 FROM sqlq_messages AS m
      WHERE m.queue_id = q.id
        AND m.dedup = nullif(CAST(NEW.dedup_key AS TEXT), '')))
    AND NOT (coalesce(NEW.dedup_key, '') <> '' AND q.unique_for_us > 0
      AND EXISTS (
        SELECT 1 FROM sqlq_dedup_holds AS h
        WHERE h.queue_id = q.id
          AND h.dedup = nullif(CAST(NEW.dedup_key AS TEXT), '')
          AND h.until_us > tm.now))
  ORDER BY q.name;
END;
)sql";
inline constexpr auto kSqlApi20Text =
    shared::Joined(kAckTrigger20, kAckRefusesBatches20, kAckMiddle20,
                   kAckUnlink20, kPublish20);
inline constexpr const char* kSqlApi20 = kSqlApi20Text.data();

// Migration 21: the ack's trigger made again, migration 20's but that a
// member of a batch is counted in its batch rather than refused.
inline constexpr char kAckCountsBatches21[] =
    R"sql(  -- A member of a batch is counted in its batch (completed), by the
  -- callback it releases (the dependent linked with on_dead 3,
  -- OnDead::kBatch); the ack of the last member writes the counts into the
  -- callback's headers and marks the batch done (core/batches.cc). No
  -- batch row: the batch was forgotten with its callback's queue.
  UPDATE sqlq_batches SET completed = completed + 1
  WHERE callback_id IN (SELECT child_id FROM sqlq_deps
                        WHERE parent_id = CAST(substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1) AS INTEGER)
                          AND on_dead = 3)
    AND (SELECT dependents FROM sqlq_queues WHERE name = NEW.queue) <> 0;
  UPDATE sqlq_messages
    SET headers = (SELECT json_set(
          CASE WHEN sqlq_messages.headers IS NULL
                 OR sqlq_messages.headers = '' THEN '{}'
               ELSE sqlq_messages.headers END,
          '$."sqlq:batch_total"', CAST(b.total AS TEXT),
          '$."sqlq:batch_completed"', CAST(b.completed AS TEXT),
          '$."sqlq:batch_dead"', CAST(b.dead AS TEXT),
          '$."sqlq:batch_cancelled"', CAST(b.cancelled AS TEXT))
        FROM sqlq_batches AS b WHERE b.callback_id = sqlq_messages.id)
  WHERE id IN (SELECT b.callback_id FROM sqlq_batches AS b, sqlq_deps AS d
               WHERE d.parent_id = CAST(substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1) AS INTEGER)
                 AND d.on_dead = 3 AND b.callback_id = d.child_id
                 AND b.done_us IS NULL
                 AND b.completed + b.dead + b.cancelled >= b.total)
    AND (SELECT dependents FROM sqlq_queues WHERE name = NEW.queue) <> 0;
  UPDATE sqlq_batches
    SET done_us = CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER),
        expires_us = CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) + ttl_us
  WHERE callback_id IN (SELECT child_id FROM sqlq_deps
                        WHERE parent_id = CAST(substr(NEW.receipt, 1, instr(NEW.receipt, '-') - 1) AS INTEGER)
                          AND on_dead = 3)
    AND done_us IS NULL AND completed + dead + cancelled >= total
    AND (SELECT dependents FROM sqlq_queues WHERE name = NEW.queue) <> 0;
)sql";
inline constexpr auto kSqlApi21Text = shared::Joined(
    kAckTrigger20, kAckMiddle20, kAckCountsBatches21, kAckUnlink20);
inline constexpr const char* kSqlApi21 = kSqlApi21Text.data();

}  // namespace sqlq::engines::sqlite

#endif  // SQLQ_ENGINES_SQLITE_SQL_API_H_
