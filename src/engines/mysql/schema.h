// The MariaDB/MySQL schema, as versioned migrations. Durable-format rules:
//  - A migration, once released, is never edited; changes go in a new one.
//  - sqlq_schema holds the versions applied; a database newer than this
//    build is refused rather than guessed at. DDL is not transactional in
//    MariaDB, so migrations run under GET_LOCK(kMigrationLock) (one process
//    at a time), every statement is idempotent (IF NOT EXISTS) and a
//    version is recorded only after all its statements ran: a migration cut
//    short is simply run again.
//  - Times are BIGINT microseconds since the Unix epoch (store clock: the
//    server's NOW(6) unless a test injects a clock), as in the other engines.
//  - sqlq_messages.ready_us is when the message may next be claimed: its
//    delay or backoff end while token = 0, its lease expiry while token != 0.
//    The claim order is (priority DESC, ready_us, id); the index stores
//    npriority = -priority so that an all-ascending index serves that order
//    on every server (descending index parts need MariaDB 10.8 / MySQL 8).
//  - Ids come from AUTO_INCREMENT, never reused; a redriven dead letter
//    keeps its id.
//  - Names, dedup keys, groups, item keys, worker names and errors are
//    VARBINARY/BLOB: any bytes, compared and ordered bytewise as in SQLite,
//    whatever the server's character set and collation.
//  - Counters live in sqlq_counters, in up to kCounterSlots rows per queue
//    (one per connection, MysqlEngine::ReadSession), so concurrent commits
//    rarely update the same row; Stats sums whatever rows there are.
//  - Every table has a primary key and no AUTO_INCREMENT other than the
//    ids, and every statement that picks rows does so in a total order, so
//    that statement-based replicas apply the same changes
//    (docs/engines/mysql.md).

#ifndef SQLQ_ENGINES_MYSQL_SCHEMA_H_
#define SQLQ_ENGINES_MYSQL_SCHEMA_H_

#include <cstdint>
#include <vector>

#include "engines/mysql/sql_api.h"

namespace sqlq::engines::mysql {

// GET_LOCK name that serialises migrations of concurrent processes.
inline constexpr const char* kMigrationLock = "sqlq_migrate";

// Slots per queue in sqlq_counters.
inline constexpr int kCounterSlots = 64;

// A send of one message, committed inside the server in one statement
// (MysqlEngine::SendAndCommit): the transaction's statements then run
// without being parsed or answered one by one. The caller checked the
// message and passes its counter slot; the clock is read here, once, as
// the library reads it at BEGIN. Returns the message's id.
inline constexpr char kSendCommitted[] = R"sql(
CREATE PROCEDURE sqlq__send_committed(
  IN p_queue_id BIGINT, IN p_slot INT, IN p_priority INT, IN p_delay_us BIGINT,
  IN p_not_before BIGINT, IN p_payload LONGBLOB,
  IN p_headers LONGTEXT CHARACTER SET utf8mb4, IN p_grp VARBINARY(255))
MODIFIES SQL DATA
BEGIN
  DECLARE v_now BIGINT;
  DECLARE v_id BIGINT;
  START TRANSACTION;
  SET v_now = CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED);
  INSERT INTO sqlq_messages (queue_id, priority, npriority, ready_us,
                             enqueued_us, payload, headers, grp)
    VALUES (p_queue_id, p_priority, -p_priority,
            GREATEST(v_now + p_delay_us, p_not_before), v_now, p_payload,
            p_headers, p_grp);
  SET v_id = LAST_INSERT_ID();
  INSERT INTO sqlq_counters (queue_id, slot, sends) VALUES (p_queue_id, p_slot, 1)
    ON DUPLICATE KEY UPDATE sends = sends + 1;
  COMMIT;
  SELECT v_id;
END)sql";

// A claim of at most one message, after the ack of at most one receipt,
// committed inside the server in one statement (MysqlEngine::
// ClaimAndCommit; a group's goes to kClaimsCommitted, below): the five round
// trips of a claim (begin with the clock, the candidates, their lock, the
// lease, the counters with COMMIT) and the ack's three become one. It takes the
// usual case only; anything else rolls back what it did and answers 1, and the
// caller goes the general way, which says why: a receipt that acks nothing
// (stale or gone), a queue whose acks release dependents (answer 3,
// remembered), a candidate whose lease ran out or whose attempts are used up
// (the general way records the expiry or buries it), or a queue so contended
// that eight candidates in a row were taken by others. Answers 2 when the queue
// is gone. Otherwise 0, the clock read, the receipts acked (0 or 1), the
// messages leased (0 or 1) and that message: its id, priority, attempt,
// enqueued time, payload, headers and group. The candidates are read and locked
// as MysqlEngine::Claim does (docs/engines/mysql.md, "Claims").
inline constexpr char kClaimCommitted[] = R"sql(
CREATE PROCEDURE sqlq__claim_committed(
  IN p_queue_id BIGINT, IN p_slot INT, IN p_max INT, IN p_lease_us BIGINT,
  IN p_token BIGINT, IN p_worker VARBINARY(255), IN p_max_attempts INT,
  IN p_ack_id BIGINT, IN p_ack_token BIGINT, IN p_ack_attempts INT)
MODIFIES SQL DATA
body: BEGIN
  DECLARE v_now BIGINT;
  DECLARE v_id BIGINT DEFAULT NULL;
  DECLARE v_np BIGINT;
  DECLARE v_ready BIGINT;
  DECLARE v_token BIGINT;
  DECLARE v_enqueued BIGINT;
  DECLARE v_priority INT;
  DECLARE v_attempts INT;
  DECLARE v_payload LONGBLOB;
  DECLARE v_headers LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_grp VARBINARY(255);
  DECLARE v_dependents INT;
  DECLARE v_acked INT DEFAULT 0;
  DECLARE v_claimed INT DEFAULT 0;
  DECLARE v_tries INT DEFAULT 0;
  DECLARE v_none INT DEFAULT 0;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_none = 1;
  START TRANSACTION;
  SET v_now = CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED);
  IF p_ack_id IS NOT NULL THEN
    SELECT dependents INTO v_dependents FROM sqlq_queues
      WHERE id = p_queue_id LOCK IN SHARE MODE;
    IF v_none = 1 THEN
      ROLLBACK;
      SELECT 2;
      LEAVE body;
    END IF;
    IF v_dependents <> 0 THEN
      ROLLBACK;
      SELECT 3;
      LEAVE body;
    END IF;
    DELETE FROM sqlq_messages
      WHERE id = p_ack_id AND queue_id = p_queue_id AND token = p_ack_token
        AND attempts = p_ack_attempts;
    SET v_acked = ROW_COUNT();
    IF v_acked = 0 THEN
      ROLLBACK;
      SELECT 1;
      LEAVE body;
    END IF;
  END IF;
  IF p_max > 0 THEN
    candidates: LOOP
      SET v_none = 0;
      IF v_id IS NULL THEN
        SELECT id, npriority, ready_us INTO v_id, v_np, v_ready
          FROM sqlq_messages FORCE INDEX (sqlq_messages_claim)
          WHERE queue_id = p_queue_id AND ready_us <= v_now
          ORDER BY npriority, ready_us, id LIMIT 1;
      ELSE
        SELECT id, npriority, ready_us INTO v_id, v_np, v_ready
          FROM sqlq_messages FORCE INDEX (sqlq_messages_claim)
          WHERE queue_id = p_queue_id AND ready_us <= v_now
            AND (npriority > v_np OR (npriority = v_np AND
                 (ready_us > v_ready OR (ready_us = v_ready AND id > v_id))))
          ORDER BY npriority, ready_us, id LIMIT 1;
      END IF;
      IF v_none = 1 THEN
        LEAVE candidates;
      END IF;
      SET v_tries = v_tries + 1;
      SELECT priority, token, attempts, enqueued_us, payload, headers, grp
        INTO v_priority, v_token, v_attempts, v_enqueued, v_payload,
             v_headers, v_grp
        FROM sqlq_messages FORCE INDEX (PRIMARY)
        WHERE id = v_id AND queue_id = p_queue_id AND ready_us <= v_now
        FOR UPDATE SKIP LOCKED;
      IF v_none = 0 THEN
        IF v_token <> 0 OR v_attempts >= p_max_attempts THEN
          ROLLBACK;
          SELECT 1;
          LEAVE body;
        END IF;
        UPDATE sqlq_messages
          SET token = p_token, attempts = attempts + 1,
              ready_us = v_now + p_lease_us, worker = p_worker
          WHERE id = v_id;
        SET v_claimed = 1;
        LEAVE candidates;
      END IF;
      IF v_tries = 8 THEN
        ROLLBACK;
        SELECT 1;
        LEAVE body;
      END IF;
    END LOOP;
  END IF;
  IF v_acked + v_claimed = 0 THEN
    IF NOT EXISTS (SELECT 1 FROM sqlq_queues WHERE id = p_queue_id) THEN
      ROLLBACK;
      SELECT 2;
      LEAVE body;
    END IF;
  ELSE
    INSERT INTO sqlq_counters (queue_id, slot, claims, acks)
      VALUES (p_queue_id, p_slot, v_claimed, v_acked)
      ON DUPLICATE KEY UPDATE claims = claims + v_claimed,
                              acks = acks + v_acked;
  END IF;
  COMMIT;
  SELECT 0, v_now, v_acked, v_claimed, v_id, v_priority, v_attempts + 1,
         v_enqueued, v_payload, v_headers, v_grp;
END)sql";

// The acks of a group's receipts and a claim of up to p_max messages,
// committed inside the server in one statement (MysqlEngine::
// ClaimAndCommit and SendsAndClaimAndCommit): the round trips of the
// general way (begin with the clock, the queue's row, the acks, the
// candidates, their lock, the lease, the counters with COMMIT) become one.
// Like kClaimCommitted (which takes one message after one receipt with
// fewer statements), it takes the usual case only and hands anything else back
// undone (answer 1), for the general way, which says why: a receipt that acks
// nothing (stale, gone, or given twice), a candidate whose lease ran out or
// whose attempts are used up, or candidates all taken by others meanwhile (with
// some of them left, it leases those, as a claim that finds fewer
// messages). Answers 2 when the queue is gone and 3 when its acks release
// dependents.
// p_acks: the receipts, a JSON array of [id, token, attempts] written by
// the caller (integers only). p_in_tx: 0, the procedure begins and commits
// its own transaction; 1, the caller began it in the same packet, sent
// messages first, and set @sqlq_now to the clock they were stored with;
// what the procedure hands back is then undone to its savepoint and the
// sends are committed alone. Its one result set has a row per message
// leased, in claim order (or one row without a message): the answer, the
// clock read, the receipts acked, the messages leased, then the message's
// id, priority, attempt, enqueued time, payload, headers and group. The
// candidates are read and locked as MysqlEngine::Claim does
// (docs/engines/mysql.md, "Claims").
inline constexpr char kClaimsCommitted[] = R"sql(
CREATE PROCEDURE sqlq__claims_committed(
  IN p_queue_id BIGINT, IN p_slot INT, IN p_max INT, IN p_lease_us BIGINT,
  IN p_token BIGINT, IN p_worker VARBINARY(255), IN p_max_attempts INT,
  IN p_acks LONGTEXT, IN p_in_tx INT)
MODIFIES SQL DATA
body: BEGIN
  DECLARE v_now BIGINT;
  DECLARE v_dependents INT;
  DECLARE v_acks INT;
  DECLARE v_cands LONGTEXT DEFAULT NULL;
  DECLARE v_odd INT DEFAULT 0;
  DECLARE v_acked INT DEFAULT 0;
  DECLARE v_claimed INT DEFAULT 0;
  DECLARE v_answer INT DEFAULT 0;
  DECLARE v_ids LONGTEXT DEFAULT '';
  DECLARE v_none INT DEFAULT 0;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_none = 1;
  IF p_in_tx = 0 THEN
    START TRANSACTION;
    SET v_now = CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED);
  ELSE
    SET v_now = @sqlq_now;
    SAVEPOINT sqlq_claims;
  END IF;
  SET v_acks = JSON_LENGTH(p_acks);
  work: BEGIN
    IF v_acks > 0 THEN
      SELECT dependents INTO v_dependents FROM sqlq_queues
        WHERE id = p_queue_id LOCK IN SHARE MODE;
      IF v_none = 1 THEN
        SET v_answer = 2;
        LEAVE work;
      END IF;
      IF v_dependents <> 0 THEN
        SET v_answer = 3;
        LEAVE work;
      END IF;
      -- By primary key, in the receipts' order (the JSON table first).
      DELETE m FROM JSON_TABLE(p_acks, '$[*]' COLUMNS (
                        id BIGINT PATH '$[0]', token BIGINT PATH '$[1]',
                        attempts INT PATH '$[2]')) j
        STRAIGHT_JOIN sqlq_messages m FORCE INDEX (PRIMARY)
          ON m.id = j.id AND m.token = j.token AND m.attempts = j.attempts
        WHERE m.queue_id = p_queue_id;
      SET v_acked = ROW_COUNT();
      IF v_acked <> v_acks THEN
        SET v_answer = 1;
        LEAVE work;
      END IF;
    END IF;
    IF p_max > 0 THEN
      -- The candidates, a plain read of the claim index in claim order;
      -- then those still claimable, locked by primary key (others'
      -- skipped); then their lease.
      SELECT GROUP_CONCAT(id ORDER BY npriority, ready_us, id) INTO v_cands
        FROM (SELECT id, npriority, ready_us
              FROM sqlq_messages FORCE INDEX (sqlq_messages_claim)
              WHERE queue_id = p_queue_id AND ready_us <= v_now
              ORDER BY npriority, ready_us, id LIMIT p_max) c;
      IF v_cands IS NOT NULL THEN
        SELECT GROUP_CONCAT(m.id ORDER BY j.n), COUNT(*),
               COALESCE(SUM(m.token <> 0 OR m.attempts >= p_max_attempts), 0)
          INTO v_ids, v_claimed, v_odd
          FROM JSON_TABLE(CONCAT('[', v_cands, ']'), '$[*]' COLUMNS (
                 n FOR ORDINALITY, id BIGINT PATH '$')) j
          STRAIGHT_JOIN sqlq_messages m FORCE INDEX (PRIMARY) ON m.id = j.id
          WHERE m.queue_id = p_queue_id AND m.ready_us <= v_now
          FOR UPDATE SKIP LOCKED;
        IF v_odd > 0 OR v_claimed = 0 THEN
          SET v_answer = 1;
          LEAVE work;
        END IF;
        UPDATE JSON_TABLE(CONCAT('[', v_ids, ']'), '$[*]' COLUMNS (
                 id BIGINT PATH '$')) j
          STRAIGHT_JOIN sqlq_messages m FORCE INDEX (PRIMARY) ON m.id = j.id
          SET m.token = p_token, m.attempts = m.attempts + 1,
              m.ready_us = v_now + p_lease_us, m.worker = p_worker;
      END IF;
    END IF;
    IF v_acked + v_claimed = 0 THEN
      IF NOT EXISTS (SELECT 1 FROM sqlq_queues WHERE id = p_queue_id) THEN
        SET v_answer = 2;
        LEAVE work;
      END IF;
    END IF;
  END work;
  IF v_answer <> 0 THEN
    IF p_in_tx = 0 THEN
      ROLLBACK;
    ELSE
      ROLLBACK TO SAVEPOINT sqlq_claims;
      COMMIT;
    END IF;
    SELECT v_answer, v_now, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL;
    LEAVE body;
  END IF;
  IF v_acked + v_claimed > 0 THEN
    INSERT INTO sqlq_counters (queue_id, slot, claims, acks)
      VALUES (p_queue_id, p_slot, v_claimed, v_acked)
      ON DUPLICATE KEY UPDATE claims = claims + v_claimed,
                              acks = acks + v_acked;
  END IF;
  IF v_claimed = 0 THEN
    SELECT 0, v_now, v_acked, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL;
  ELSE
    SELECT 0, v_now, v_acked, v_claimed, m.id, m.priority, m.attempts,
           m.enqueued_us, m.payload, m.headers, m.grp
      FROM JSON_TABLE(CONCAT('[', v_ids, ']'), '$[*]'
                      COLUMNS (n FOR ORDINALITY, id BIGINT PATH '$')) j
      STRAIGHT_JOIN sqlq_messages m FORCE INDEX (PRIMARY) ON m.id = j.id
      ORDER BY j.n;
  END IF;
  COMMIT;
END)sql";

// Version n is kMigrations[n - 1]: its statements, run in order.
inline const std::vector<std::vector<const char*>> kMigrations = {
    // Version 1: work queues, rings and rotations.
    {
        R"sql(
CREATE TABLE IF NOT EXISTS sqlq_queues (
  id              BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  name            VARBINARY(255) NOT NULL,
  kind            VARBINARY(16)  NOT NULL DEFAULT 'queue',
  max_attempts    INT     NOT NULL,
  lease_us        BIGINT  NOT NULL,
  backoff_base_us BIGINT  NOT NULL,
  backoff_max_us  BIGINT  NOT NULL,
  archive         TINYINT NOT NULL,
  retention_us    BIGINT  NOT NULL,
  max_payload     BIGINT  NOT NULL,
  created_us      BIGINT  NOT NULL,
  capacity        BIGINT  NOT NULL DEFAULT 0,
  max_failures    INT     NOT NULL DEFAULT 0,
  next_stamp      BIGINT  NOT NULL DEFAULT 0,
  UNIQUE KEY sqlq_queues_name (name)
) ENGINE=InnoDB)sql",
        R"sql(
CREATE TABLE IF NOT EXISTS sqlq_counters (
  queue_id      BIGINT NOT NULL,
  slot          INT    NOT NULL,
  sends         BIGINT NOT NULL DEFAULT 0,
  claims        BIGINT NOT NULL DEFAULT 0,
  acks          BIGINT NOT NULL DEFAULT 0,
  nacks         BIGINT NOT NULL DEFAULT 0,
  expirations   BIGINT NOT NULL DEFAULT 0,
  dead_lettered BIGINT NOT NULL DEFAULT 0,
  pushes        BIGINT NOT NULL DEFAULT 0,
  serves        BIGINT NOT NULL DEFAULT 0,
  PRIMARY KEY (queue_id, slot),
  FOREIGN KEY (queue_id) REFERENCES sqlq_queues (id) ON DELETE CASCADE
) ENGINE=InnoDB)sql",
        R"sql(
CREATE TABLE IF NOT EXISTS sqlq_messages (
  id          BIGINT  NOT NULL AUTO_INCREMENT PRIMARY KEY,
  queue_id    BIGINT  NOT NULL,
  priority    INT     NOT NULL,
  npriority   BIGINT  NOT NULL,
  ready_us    BIGINT  NOT NULL,
  token       BIGINT  NOT NULL DEFAULT 0,
  attempts    INT     NOT NULL DEFAULT 0,
  enqueued_us BIGINT  NOT NULL,
  dedup       VARBINARY(255) NULL,
  worker      VARBINARY(255) NULL,
  last_error  BLOB NULL,
  payload     LONGBLOB NOT NULL,
  KEY sqlq_messages_claim (queue_id, npriority, ready_us, id),
  UNIQUE KEY sqlq_messages_dedup (queue_id, dedup),
  FOREIGN KEY (queue_id) REFERENCES sqlq_queues (id) ON DELETE CASCADE
) ENGINE=InnoDB)sql",
        R"sql(
CREATE TABLE IF NOT EXISTS sqlq_dead (
  id          BIGINT NOT NULL PRIMARY KEY,
  queue_id    BIGINT NOT NULL,
  priority    INT    NOT NULL,
  attempts    INT    NOT NULL,
  enqueued_us BIGINT NOT NULL,
  died_us     BIGINT NOT NULL,
  last_error  BLOB   NOT NULL,
  payload     LONGBLOB NOT NULL,
  KEY sqlq_dead_queue (queue_id, id),
  FOREIGN KEY (queue_id) REFERENCES sqlq_queues (id) ON DELETE CASCADE
) ENGINE=InnoDB)sql",
        R"sql(
CREATE TABLE IF NOT EXISTS sqlq_archive (
  id           BIGINT NOT NULL PRIMARY KEY,
  queue_id     BIGINT NOT NULL,
  priority     INT    NOT NULL,
  attempts     INT    NOT NULL,
  enqueued_us  BIGINT NOT NULL,
  completed_us BIGINT NOT NULL,
  worker       VARBINARY(255) NULL,
  payload      LONGBLOB NOT NULL,
  KEY sqlq_archive_queue (queue_id, id),
  KEY sqlq_archive_completed (queue_id, completed_us),
  FOREIGN KEY (queue_id) REFERENCES sqlq_queues (id) ON DELETE CASCADE
) ENGINE=InnoDB)sql",
        // A ring group's row outlives its entries (entries = 0) so that its
        // sequence never restarts, and its lock serialises the pushes to
        // the group.
        R"sql(
CREATE TABLE IF NOT EXISTS sqlq_ring_groups (
  ring_id  BIGINT NOT NULL,
  grp      VARBINARY(255) NOT NULL,
  last_seq BIGINT NOT NULL,
  entries  BIGINT NOT NULL,
  PRIMARY KEY (ring_id, grp),
  FOREIGN KEY (ring_id) REFERENCES sqlq_queues (id) ON DELETE CASCADE
) ENGINE=InnoDB)sql",
        R"sql(
CREATE TABLE IF NOT EXISTS sqlq_ring_entries (
  ring_id   BIGINT NOT NULL,
  grp       VARBINARY(255) NOT NULL,
  seq       BIGINT NOT NULL,
  pushed_us BIGINT NOT NULL,
  payload   LONGBLOB NOT NULL,
  PRIMARY KEY (ring_id, grp, seq),
  FOREIGN KEY (ring_id) REFERENCES sqlq_queues (id) ON DELETE CASCADE
) ENGINE=InnoDB)sql",
        R"sql(
CREATE TABLE IF NOT EXISTS sqlq_rotation_items (
  rotation_id BIGINT NOT NULL,
  item_key    VARBINARY(255) NOT NULL,
  payload     LONGBLOB NOT NULL,
  added       BIGINT NOT NULL,
  last_served BIGINT NOT NULL DEFAULT 0,
  serves      BIGINT NOT NULL DEFAULT 0,
  failures    INT    NOT NULL DEFAULT 0,
  parked      TINYINT NOT NULL DEFAULT 0,
  PRIMARY KEY (rotation_id, item_key),
  KEY sqlq_rotation_order (rotation_id, parked, last_served, added),
  FOREIGN KEY (rotation_id) REFERENCES sqlq_queues (id) ON DELETE CASCADE
) ENGINE=InnoDB)sql",
    },
    // Version 2: headers and error history (core/columns.h): JSON text,
    // NULL while a message has none, kept by a message wherever it goes.
    // utf8mb4 and a binary collation whatever the server's defaults, so
    // that any header text is stored as given. ADD COLUMN IF NOT EXISTS
    // keeps the step safe to run again (schema.h's rule above).
    {
        R"sql(
ALTER TABLE sqlq_messages
  ADD COLUMN IF NOT EXISTS headers LONGTEXT CHARACTER SET utf8mb4
    COLLATE utf8mb4_bin NULL,
  ADD COLUMN IF NOT EXISTS errors LONGTEXT CHARACTER SET utf8mb4
    COLLATE utf8mb4_bin NULL)sql",
        R"sql(
ALTER TABLE sqlq_dead
  ADD COLUMN IF NOT EXISTS headers LONGTEXT CHARACTER SET utf8mb4
    COLLATE utf8mb4_bin NULL,
  ADD COLUMN IF NOT EXISTS errors LONGTEXT CHARACTER SET utf8mb4
    COLLATE utf8mb4_bin NULL)sql",
        R"sql(
ALTER TABLE sqlq_archive
  ADD COLUMN IF NOT EXISTS headers LONGTEXT CHARACTER SET utf8mb4
    COLLATE utf8mb4_bin NULL,
  ADD COLUMN IF NOT EXISTS errors LONGTEXT CHARACTER SET utf8mb4
    COLLATE utf8mb4_bin NULL)sql",
    },
    // Version 3: a queue can be paused, and keep its dead letters for a
    // while only (pruned by time of death, hence the index).
    {
        R"sql(
ALTER TABLE sqlq_queues
  ADD COLUMN IF NOT EXISTS paused TINYINT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS dead_retention_us BIGINT NOT NULL DEFAULT 0)sql",
        R"sql(
CREATE INDEX IF NOT EXISTS sqlq_dead_died ON sqlq_dead (queue_id, died_us))sql",
    },
    // Version 4: dedup windows. A queue's window, and the keys held after
    // their message was acked or dead-lettered, until until_us (pruned by
    // that time, hence the index).
    {
        R"sql(
ALTER TABLE sqlq_queues
  ADD COLUMN IF NOT EXISTS unique_for_us BIGINT NOT NULL DEFAULT 0)sql",
        R"sql(
CREATE TABLE IF NOT EXISTS sqlq_dedup_holds (
  queue_id   BIGINT NOT NULL,
  dedup      VARBINARY(255) NOT NULL,
  message_id BIGINT NOT NULL,
  until_us   BIGINT NOT NULL,
  PRIMARY KEY (queue_id, dedup),
  KEY sqlq_dedup_holds_until (queue_id, until_us),
  FOREIGN KEY (queue_id) REFERENCES sqlq_queues (id) ON DELETE CASCADE
) ENGINE=InnoDB)sql",
    },
    // Version 5: groups. A queue's group mode (0 none, 1 fair, 2 ordered)
    // and each message's group, which follows it into the dead letters;
    // the claims of grouped queues walk the groups through the index.
    {
        R"sql(
ALTER TABLE sqlq_queues
  ADD COLUMN IF NOT EXISTS group_mode TINYINT NOT NULL DEFAULT 0)sql",
        R"sql(
ALTER TABLE sqlq_messages ADD COLUMN IF NOT EXISTS grp VARBINARY(255) NULL)sql",
        R"sql(
ALTER TABLE sqlq_dead ADD COLUMN IF NOT EXISTS grp VARBINARY(255) NULL)sql",
        R"sql(
CREATE INDEX IF NOT EXISTS sqlq_messages_group
  ON sqlq_messages (queue_id, grp, id))sql",
    },
    // Version 6: limits (0 for none; rate_u is claims per second times
    // 10^6). A limited queue's claims lock its row in sqlq_limits (one
    // limited claim at a time per queue), which holds the rate bucket
    // (tokens_u, claims times 10^6, as of at_us; at_us 0 for a full
    // bucket); sqlq_leases holds the messages they leased with the lease's
    // token, which is what counts the queue's leases for max_leased (a row
    // whose message no longer carries that live lease counts for nothing).
    {
        R"sql(
ALTER TABLE sqlq_queues
  ADD COLUMN IF NOT EXISTS max_leased BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS rate_u BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS rate_burst BIGINT NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS group_limit INT NOT NULL DEFAULT 0)sql",
        R"sql(
CREATE TABLE IF NOT EXISTS sqlq_limits (
  queue_id BIGINT NOT NULL PRIMARY KEY,
  tokens_u BIGINT NOT NULL,
  at_us    BIGINT NOT NULL,
  FOREIGN KEY (queue_id) REFERENCES sqlq_queues (id) ON DELETE CASCADE
) ENGINE=InnoDB)sql",
        R"sql(
CREATE TABLE IF NOT EXISTS sqlq_leases (
  queue_id   BIGINT NOT NULL,
  message_id BIGINT NOT NULL,
  token      BIGINT NOT NULL,
  PRIMARY KEY (queue_id, message_id),
  FOREIGN KEY (queue_id) REFERENCES sqlq_queues (id) ON DELETE CASCADE
) ENGINE=InnoDB)sql",
    },
    // Version 7: schedules (include/sqlq/schedule.h): each with its cron,
    // zone, queue, message and where it stands (next_us, the next tick to
    // send; 0 for none), and the scheduler lease, one row: who holds it
    // until when.
    {
        R"sql(
CREATE TABLE IF NOT EXISTS sqlq_schedules (
  id         BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  name       VARBINARY(64)  NOT NULL UNIQUE,
  cron       VARBINARY(256) NOT NULL,
  time_zone  VARBINARY(64)  NOT NULL,
  queue      VARBINARY(64)  NOT NULL,
  payload    LONGBLOB       NOT NULL,
  priority   INT            NOT NULL,
  headers    BLOB           NULL,
  grp        VARBINARY(255) NULL,
  catch_up   INT            NOT NULL,
  paused     TINYINT        NOT NULL DEFAULT 0,
  next_us    BIGINT         NOT NULL,
  last_us    BIGINT         NOT NULL DEFAULT 0,
  sent       BIGINT         NOT NULL DEFAULT 0,
  skipped    BIGINT         NOT NULL DEFAULT 0,
  last_error BLOB           NULL,
  created_us BIGINT         NOT NULL
) ENGINE=InnoDB)sql",
        R"sql(
CREATE TABLE IF NOT EXISTS sqlq_scheduler (
  id       INT           NOT NULL PRIMARY KEY,
  holder   VARBINARY(64) NOT NULL,
  until_us BIGINT        NOT NULL
) ENGINE=InnoDB)sql",
        R"sql(
INSERT IGNORE INTO sqlq_scheduler (id, holder, until_us) VALUES (1, '', 0))sql",
    },
    // Version 8: the group index only once a queue has groups. MariaDB
    // has no partial indexes, so the index of version 5 took an entry for
    // every message of every queue (13-17 % of a plain queue's mixed
    // workload, docs/benchmarks.md); MysqlEngine::PrepareGroups makes it
    // when a grouped queue is created. Dropped here unless one exists.
    {
        R"sql(
SET @sqlq_group_index = IF(
  EXISTS (SELECT 1 FROM sqlq_queues WHERE group_mode <> 0), 'DO 0',
  'DROP INDEX IF EXISTS sqlq_messages_group ON sqlq_messages'))sql",
        "PREPARE sqlq_group_index FROM @sqlq_group_index",
        "EXECUTE sqlq_group_index",
        "DEALLOCATE PREPARE sqlq_group_index",
    },
    // Version 9: a queue's dead-letter queue ('' for none) and labels
    // (core/columns.h's header text, NULL for none).
    {
        R"sql(
ALTER TABLE sqlq_queues
  ADD COLUMN IF NOT EXISTS dead_letter_queue VARBINARY(64) NOT NULL
    DEFAULT '',
  ADD COLUMN IF NOT EXISTS labels MEDIUMBLOB NULL)sql",
    },
    // Version 10: the claims waiting for each queue in each process, as
    // each reports them (core/waiting_report.h).
    {
        R"sql(
CREATE TABLE IF NOT EXISTS sqlq_waiting (
  process     VARBINARY(64) NOT NULL,
  queue_id    BIGINT        NOT NULL,
  waiting     BIGINT        NOT NULL,
  reported_us BIGINT        NOT NULL,
  PRIMARY KEY (process, queue_id)
) ENGINE=InnoDB)sql",
    },
    // Version 11: the SQL-level API, stored procedures (sql_api.h,
    // docs/sql-api.md). A user without CREATE ROUTINE skips it
    // (MysqlEngine::Migrate).
    kSqlApi11,
    // Version 12: the SQL-level API again, each procedure that uses sqlq's
    // tables first dropping the session's temporary tables of their names
    // (sql_api.h, kOwnTables).
    kSqlApi12,
    // Version 13: how many times each message was snoozed (a handler's
    // "not now", NackAction::kSnooze), which bounds the snoozes that give
    // back their attempt. An instant ADD COLUMN: no table copy.
    {
        R"sql(
ALTER TABLE sqlq_messages
  ADD COLUMN IF NOT EXISTS snoozes INT NOT NULL DEFAULT 0)sql",
    },
    // Version 14: live workers, each one's last report (core/workers.cc
    // encodes `info`) and when it runs out.
    {
        R"sql(
CREATE TABLE IF NOT EXISTS sqlq_workers (
  id         VARBINARY(128) NOT NULL PRIMARY KEY,
  info       MEDIUMBLOB     NOT NULL,
  seen_us    BIGINT         NOT NULL,
  expires_us BIGINT         NOT NULL
) ENGINE=InnoDB)sql",
    },
    // Version 15: jobs' results and progress (engines/shared/sql_results.h),
    // each kept until expires_us; the queue's rows go with it.
    {
        R"sql(
CREATE TABLE IF NOT EXISTS sqlq_results (
  queue_id     BIGINT   NOT NULL,
  message_id   BIGINT   NOT NULL,
  progress     MEDIUMBLOB,
  progress_us  BIGINT,
  result       LONGBLOB,
  completed_us BIGINT,
  expires_us   BIGINT   NOT NULL,
  PRIMARY KEY (queue_id, message_id),
  KEY sqlq_results_expiry (expires_us),
  FOREIGN KEY (queue_id) REFERENCES sqlq_queues (id) ON DELETE CASCADE
) ENGINE=InnoDB)sql",
    },
    // Version 16: dependencies (engines/shared/sql_deps.h). A message
    // waiting for others has waits > 0 (how many have not completed) and
    // ready_us = kWaitingUs; sqlq_deps holds one row per message it waits
    // for (on_dead: what a death of that one does to it, 0 cancel, 1 run,
    // 2 wait; parked: that one died and it waits for a redrive). A queue's
    // dependents = 1 once any message waited for one of its messages: only
    // the acks of such queues look for dependents to release. Instant ADD
    // COLUMNs: no table copy.
    {
        R"sql(
ALTER TABLE sqlq_queues
  ADD COLUMN IF NOT EXISTS dependents SMALLINT NOT NULL DEFAULT 0)sql",
        R"sql(
ALTER TABLE sqlq_messages
  ADD COLUMN IF NOT EXISTS waits INT NOT NULL DEFAULT 0)sql",
        R"sql(
CREATE TABLE IF NOT EXISTS sqlq_deps (
  parent_id       BIGINT   NOT NULL,
  child_id        BIGINT   NOT NULL,
  parent_queue_id BIGINT   NOT NULL,
  child_queue_id  BIGINT   NOT NULL,
  on_dead         SMALLINT NOT NULL,
  parked          SMALLINT NOT NULL DEFAULT 0,
  PRIMARY KEY (parent_id, child_id),
  KEY sqlq_deps_child (child_id),
  KEY sqlq_deps_parent_queue (parent_queue_id)
) ENGINE=InnoDB)sql",
    },
    // Version 17: topics (engines/shared/sql_topics.h). A topic is a row of
    // sqlq_queues of kind 'topic' (one namespace with queues); each queue
    // subscribed to it is a row here, with its header filter (core/columns.h's
    // header text, NULL for none: every message). They go with the topic or the
    // queue.
    {
        R"sql(
CREATE TABLE IF NOT EXISTS sqlq_subscriptions (
  topic_id      BIGINT NOT NULL,
  queue_id      BIGINT NOT NULL,
  header_filter BLOB   NULL,
  subscribed_us BIGINT NOT NULL,
  PRIMARY KEY (topic_id, queue_id),
  KEY sqlq_subscriptions_queue (queue_id),
  FOREIGN KEY (topic_id) REFERENCES sqlq_queues (id) ON DELETE CASCADE,
  FOREIGN KEY (queue_id) REFERENCES sqlq_queues (id) ON DELETE CASCADE
) ENGINE=InnoDB)sql",
    },
    // Version 18 (counter `expired`): each queue's jobs not started by their
    // expiry (Message::expire_after), dead-lettered or dropped. An instant
    // ADD COLUMN: no table copy.
    {
        R"sql(
ALTER TABLE sqlq_counters
  ADD COLUMN IF NOT EXISTS expired BIGINT NOT NULL DEFAULT 0)sql",
    },
    // Version 19: batches (engines/shared/sql_batches.h). One row per batch,
    // found by its name and by its callback's id (NULL until the send that
    // made it links the callback); the members' ends add to its counts;
    // done_us and expires_us are set when the last one ended, and expired
    // rows are pruned by expires_us. The members' queue names are a JSON
    // array. They go with the callback's queue.
    {
        R"sql(
CREATE TABLE IF NOT EXISTS sqlq_batches (
  id                BIGINT         NOT NULL AUTO_INCREMENT PRIMARY KEY,
  name              VARBINARY(128) NOT NULL,
  callback_id       BIGINT         NULL,
  callback_queue_id BIGINT         NOT NULL,
  queues            LONGBLOB       NOT NULL,
  total             BIGINT         NOT NULL,
  completed         BIGINT         NOT NULL,
  dead              BIGINT         NOT NULL,
  cancelled         BIGINT         NOT NULL,
  created_us        BIGINT         NOT NULL,
  ttl_us            BIGINT         NOT NULL,
  cancel_us         BIGINT         NULL,
  done_us           BIGINT         NULL,
  expires_us        BIGINT         NULL,
  UNIQUE KEY sqlq_batches_name (name),
  UNIQUE KEY sqlq_batches_callback (callback_id),
  KEY sqlq_batches_queue (callback_queue_id),
  KEY sqlq_batches_expiry (expires_us),
  FOREIGN KEY (callback_queue_id) REFERENCES sqlq_queues (id) ON DELETE CASCADE
) ENGINE=InnoDB)sql",
    },
    // Version 20: the SQL-level API again: the ack releases dependents,
    // and sqlq_publish publishes to a topic (sql_api.h, kAckBody20).
    kSqlApi20,
    // Version 21: the SQL-level API's ack counts a member of a batch in its
    // batch (sql_api.h, kAckCountEnd21).
    kSqlApi21,
    // Version 22: the one-message send as a procedure (kSendCommitted).
    {"DROP PROCEDURE IF EXISTS sqlq__send_committed", kSendCommitted},
    // Version 23: the claim of one message, after the ack of one receipt,
    // as a procedure (kClaimCommitted).
    {"DROP PROCEDURE IF EXISTS sqlq__claim_committed", kClaimCommitted},
    // Version 24: the acks of a group and its claim of several messages as
    // a procedure, also after sends in the same transaction
    // (kClaimsCommitted).
    {"DROP PROCEDURE IF EXISTS sqlq__claims_committed", kClaimsCommitted},
    // Version 25: dedup keys in a table of their own, written only for the
    // messages that have one, instead of the unique index (queue_id,
    // dedup), which MariaDB (no partial indexes) gave an entry for every
    // message: a fifth to a third of a send of many
    // (docs/engines/mysql.md, "Dedup keys"). A trigger deletes a message's
    // key with the message, whichever statement deletes it; sends take a
    // key over from a message that is gone all the same (sql_api.h,
    // kSendOneKeys25). The trigger comes first: a user that may not make
    // it (no TRIGGER privilege, or a binary log without SUPER or
    // log_bin_trust_function_creators) skips the rest, and the store keeps
    // the index and works as before (MysqlEngine::FindDedupIndex). The
    // index goes last, once the send's procedure and the keys of the
    // messages already stored are in place.
    {
        "DROP TRIGGER IF EXISTS sqlq_messages_key_gone",
        kKeyGoneTrigger,
        R"sql(
CREATE TABLE IF NOT EXISTS sqlq_dedup_keys (
  queue_id   BIGINT         NOT NULL,
  dedup      VARBINARY(255) NOT NULL,
  message_id BIGINT         NOT NULL,
  PRIMARY KEY (queue_id, dedup),
  FOREIGN KEY (queue_id) REFERENCES sqlq_queues (id) ON DELETE CASCADE
) ENGINE=InnoDB)sql",
        "DROP PROCEDURE IF EXISTS sqlq__send_one",
        kSendOneGuarded25.data(),
        R"sql(
INSERT INTO sqlq_dedup_keys (queue_id, dedup, message_id)
SELECT m.queue_id, m.dedup, m.id FROM sqlq_messages m
WHERE m.dedup IS NOT NULL AND NOT EXISTS (
  SELECT 1 FROM sqlq_dedup_keys k
  WHERE k.queue_id = m.queue_id AND k.dedup = m.dedup)
ORDER BY m.id)sql",
        R"sql(
SET @sqlq_dedup_index = IF(
  EXISTS (SELECT 1 FROM information_schema.STATISTICS
          WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'sqlq_messages'
            AND INDEX_NAME = 'sqlq_messages_dedup'),
  'ALTER TABLE sqlq_messages DROP INDEX sqlq_messages_dedup', 'DO 0'))sql",
        "PREPARE sqlq_dedup_index FROM @sqlq_dedup_index",
        "EXECUTE sqlq_dedup_index",
        "DEALLOCATE PREPARE sqlq_dedup_index",
    },
};

// Whether version `v` installs procedures (the SQL-level API, the send's
// and the claim's procedures) or a trigger (version 25): a user that may
// not create (or replace) them skips the rest of the version
// (MysqlEngine::Migrate), and the store works on without them.
inline constexpr bool InstallsRoutines(std::int64_t v) {
  return v == 11 || v == 12 || v == 20 || v == 21 || v == 22 || v == 23 ||
         v == 24 || v == 25;
}

inline const int kSchemaVersion = static_cast<int>(kMigrations.size());

}  // namespace sqlq::engines::mysql

#endif  // SQLQ_ENGINES_MYSQL_SCHEMA_H_
