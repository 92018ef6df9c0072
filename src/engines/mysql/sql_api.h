// The SQL-level API of the MariaDB/MySQL engine (docs/sql-api.md): stored
// procedures that send and ack from any client, inside the caller's own
// transaction. They do what the library's send and ack do (mysql_queue.cc,
// mysql_claim.cc): the same checks and limits (core/validate.h), the same
// rows, dedup holds and counters. Claims waiting in other processes notice
// a committed send as they notice the library's: the Poller watches the
// sum of sqlq_counters' sends, which the procedures add to.
//
// Errors are raised with SQLSTATEs of class 45: 45400 invalid argument,
// 45404 no such queue or message, 45409 stale receipt, 45413 too large,
// 45503 busy (try again).
//
// Installed by migration 11, and again by migration 12 with the guard
// kOwnTables, and by migration 20, whose ack releases dependents (as the
// library's ack does, engines/shared/sql_deps.h) and which adds
// sqlq_publish (as the library's publish, core/topic.cc); a database user
// without the CREATE ROUTINE privilege (or, for 12 and 20, the right to
// replace procedures an administrator made) opens the store as before,
// without them (mysql_migrate.cc).
//
// What names find: a routine runs in its own database, so its unqualified
// tables and CALLs are the store's whatever the caller's current database;
// built-in functions cannot be shadowed by stored ones; the session's
// temporary tables can (kOwnTables).
// Local names begin p_, v_ or o_: in MariaDB a variable named like a column
// would win over the column.

#ifndef SQLQ_ENGINES_MYSQL_SQL_API_H_
#define SQLQ_ENGINES_MYSQL_SQL_API_H_

#include <vector>

#include "engines/shared/joined_text.h"

namespace sqlq::engines::mysql {

// The procedures' texts. Those that use sqlq's tables are kept as head
// and body, so that the current API can run its guard (kOwnTables) before
// the body that migration 11 released.

// One message: checks it as the library does, inserts it (or finds the
// message holding its dedup key). Counting is the caller's.
inline constexpr char kSendOneHead[] = R"sql(
CREATE PROCEDURE sqlq__send_one(
  IN p_queue VARBINARY(255), IN p_payload LONGBLOB, IN p_priority INT,
  IN p_delay_ms BIGINT, IN p_headers LONGTEXT CHARACTER SET utf8mb4,
  IN p_dedup VARBINARY(4096), IN p_group VARBINARY(4096),
  IN p_run_at DATETIME(6),
  OUT o_queue_id BIGINT, OUT o_id BIGINT, OUT o_stored INT)
MODIFIES SQL DATA
)sql";
inline constexpr char kSendOneBegin[] = "BEGIN\n";
inline constexpr char kSendOneDeclares[] =
    R"sql(  DECLARE v_kind VARBINARY(16) DEFAULT NULL;
  DECLARE v_max BIGINT DEFAULT 0;
  DECLARE v_unique BIGINT DEFAULT 0;
  DECLARE v_mode INT DEFAULT 0;
  DECLARE v_now BIGINT;
  DECLARE v_run BIGINT DEFAULT 0;
  DECLARE v_headers LONGTEXT CHARACTER SET utf8mb4 DEFAULT NULL;
  DECLARE v_grp VARBINARY(255) DEFAULT NULL;
  DECLARE v_keys LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_key LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_val LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_n INT DEFAULT 0;
  DECLARE v_i INT DEFAULT 0;
  DECLARE v_total BIGINT DEFAULT 0;
  DECLARE v_dup INT DEFAULT 0;
  DECLARE v_attempt INT DEFAULT 0;
  DECLARE v_holder BIGINT DEFAULT NULL;
  DECLARE v_msg VARCHAR(512);
)sql";
inline constexpr char kSendOneStart[] =
    R"sql(  DECLARE CONTINUE HANDLER FOR 1062 SET v_dup = 1;
  SET o_queue_id = NULL, o_id = NULL, o_stored = 0;
  -- An empty key is no key, as for the library.
  SET p_dedup = NULLIF(p_dedup, '');
  -- UTC, whatever the session's time zone (the library's sessions are
  -- '+00:00'): a local time would be ambiguous when clocks go back.
  SET v_now = TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00',
                            UTC_TIMESTAMP(6));
  SELECT id, kind, max_payload, unique_for_us, group_mode
    INTO o_queue_id, v_kind, v_max, v_unique, v_mode
    FROM sqlq_queues WHERE name = p_queue LOCK IN SHARE MODE;
  IF o_queue_id IS NULL OR v_kind <> 'queue' THEN
    SET v_msg = CONCAT('sqlq: queue ''', LEFT(p_queue, 80), ''' not found');
    SIGNAL SQLSTATE '45404' SET MESSAGE_TEXT = v_msg;
  END IF;
  IF p_payload IS NULL THEN
    SIGNAL SQLSTATE '45400'
      SET MESSAGE_TEXT = 'sqlq: the payload must not be NULL';
  END IF;
  IF LENGTH(p_payload) > v_max THEN
    SET v_msg = CONCAT('sqlq: payload of ', LENGTH(p_payload),
      ' bytes exceeds the queue''s limit of ', v_max, ' bytes');
    SIGNAL SQLSTATE '45413' SET MESSAGE_TEXT = v_msg;
  END IF;
  IF p_priority IS NULL OR p_delay_ms IS NULL THEN
    SIGNAL SQLSTATE '45400'
      SET MESSAGE_TEXT = 'sqlq: priority and delay_ms must not be NULL';
  END IF;
  IF p_delay_ms < 0 OR p_delay_ms > 31536000000 THEN
    SET v_msg = CONCAT('sqlq: delay ', p_delay_ms,
      'ms is out of range [0ms, 31536000000ms]');
    SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
  END IF;
  IF LENGTH(p_dedup) > 255 THEN
    SET v_msg = CONCAT('sqlq: dedup key of ', LENGTH(p_dedup),
      ' bytes is longer than 255');
    SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
  END IF;
  IF LENGTH(p_group) > 255 THEN
    SET v_msg = CONCAT('sqlq: group of ', LENGTH(p_group),
      ' bytes is longer than 255');
    SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
  END IF;
  IF p_run_at IS NOT NULL THEN
    IF p_delay_ms <> 0 THEN
      SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT =
        'sqlq: a message takes a delay or a run_at time, not both';
    END IF;
    SET v_run = CAST(UNIX_TIMESTAMP(p_run_at) * 1000000 AS SIGNED);
    IF v_run IS NULL OR ABS(v_run - v_now) > 31536000000000 THEN
      SIGNAL SQLSTATE '45400'
        SET MESSAGE_TEXT = 'sqlq: run_at is more than 365 days from now';
    END IF;
  END IF;
  IF p_headers IS NOT NULL THEN
    IF JSON_VALID(p_headers) = 0 OR JSON_TYPE(p_headers) <> 'OBJECT' THEN
      SIGNAL SQLSTATE '45400'
        SET MESSAGE_TEXT = 'sqlq: headers must be a JSON object of strings';
    END IF;
    SET v_keys = JSON_KEYS(p_headers);
    SET v_n = JSON_LENGTH(v_keys);
    WHILE v_i < v_n DO
      SET v_key = JSON_UNQUOTE(JSON_EXTRACT(v_keys, CONCAT('$[', v_i, ']')));
      -- No backslash in these patterns: the procedures are parsed in the
      -- installing session's sql_mode, which may be NO_BACKSLASH_ESCAPES.
      IF NOT (BINARY v_key REGEXP '^[A-Za-z0-9_.:-]{1,128}$')
         OR LOCATE(CHAR(10), v_key) > 0 THEN
        SET v_msg = CONCAT('sqlq: header name ''', LEFT(v_key, 80),
          ''' must be 1 to 128 letters, digits, ''_'', ''-'', ''.'' or '':''');
        SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
      END IF;
      SET v_val = JSON_EXTRACT(p_headers, CONCAT('$."', v_key, '"'));
      IF JSON_TYPE(v_val) <> 'STRING' THEN
        SET v_msg = CONCAT('sqlq: header ''', v_key,
          ''' must have a string value');
        SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
      END IF;
      SET v_val = JSON_UNQUOTE(v_val);
      IF LENGTH(v_val) > 4096 THEN
        SET v_msg = CONCAT('sqlq: header ''', v_key, ''' has a value of ',
          LENGTH(v_val), ' bytes, more than 4096');
        SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
      END IF;
      IF INSTR(CAST(v_val AS BINARY), CHAR(0)) > 0 THEN
        SET v_msg = CONCAT('sqlq: header ''', v_key,
          ''' must have a UTF-8 value without NUL bytes');
        SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
      END IF;
      SET v_total = v_total + LENGTH(v_key) + LENGTH(v_val);
      SET v_i = v_i + 1;
    END WHILE;
    IF v_n > 64 THEN
      SET v_msg = CONCAT('sqlq: ', v_n, ' headers are more than the 64 allowed');
      SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
    END IF;
    IF v_total > 16384 THEN
      SET v_msg = CONCAT('sqlq: headers of ', v_total,
        ' bytes (names and values) exceed 16384');
      SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
    END IF;
    IF v_n > 0 THEN SET v_headers = p_headers; END IF;
  END IF;
  -- The group column: the message's group; '' in a grouped queue for a
  -- message without one; else NULL.
  IF COALESCE(p_group, '') <> '' OR v_mode <> 0 THEN
    SET v_grp = COALESCE(p_group, '');
  END IF;
)sql";
// How migration 11's body stores the message: the unique index on
// (queue_id, dedup) tells a duplicate.
inline constexpr char kSendOneInsert11[] =
    R"sql(  -- A duplicate key (1062) rolls back the INSERT alone; its holder may be
  -- acked before the look-up: then insert again.
  WHILE o_id IS NULL AND v_attempt < 4 DO
    SET v_dup = 0;
    INSERT INTO sqlq_messages
      (queue_id, priority, npriority, ready_us, enqueued_us, dedup, payload,
       headers, grp)
    VALUES (o_queue_id, p_priority, -p_priority,
            GREATEST(v_now + p_delay_ms * 1000, v_run), v_now, p_dedup,
            p_payload, v_headers, v_grp);
    IF v_dup = 0 THEN
      SET o_id = LAST_INSERT_ID(), o_stored = 1;
    ELSE
      SELECT id INTO o_id FROM sqlq_messages
        WHERE queue_id = o_queue_id AND dedup = p_dedup LOCK IN SHARE MODE;
    END IF;
    SET v_attempt = v_attempt + 1;
  END WHILE;
  IF o_id IS NULL THEN
    SIGNAL SQLSTATE '45503' SET MESSAGE_TEXT =
      'sqlq: send: the dedup key''s message kept changing; try again';
  END IF;
)sql";
inline constexpr char kSendOneEnd[] =
    R"sql(  -- A dedup window: a key held after its message was acked or
  -- dead-lettered is a duplicate of that message.
  IF o_stored = 1 AND v_unique > 0 AND p_dedup IS NOT NULL THEN
    SELECT message_id INTO v_holder FROM sqlq_dedup_holds
      WHERE queue_id = o_queue_id AND dedup = p_dedup AND until_us > v_now
      LOCK IN SHARE MODE;
    IF v_holder IS NOT NULL THEN
      DELETE FROM sqlq_messages WHERE id = o_id;
      SET o_id = v_holder, o_stored = 0;
    END IF;
  END IF;
END)sql";

// Counts what a send stored, in this connection's counter slot (as the
// library does): the Poller of every other process sees the sum move.
inline constexpr char kSentHead[] = R"sql(
CREATE PROCEDURE sqlq__sent(IN p_queue_id BIGINT, IN p_stored BIGINT)
MODIFIES SQL DATA
)sql";
inline constexpr char kSentBody[] = R"sql(BEGIN
  IF p_stored > 0 THEN
    INSERT INTO sqlq_counters (queue_id, slot, sends)
      VALUES (p_queue_id, CONNECTION_ID() % 64, p_stored)
      ON DUPLICATE KEY UPDATE sends = sends + VALUES(sends);
  END IF;
END)sql";

inline constexpr char kSendWith[] = R"sql(
CREATE PROCEDURE sqlq_send_with(
  IN p_queue VARBINARY(255), IN p_payload LONGBLOB, IN p_priority INT,
  IN p_delay_ms BIGINT, IN p_headers LONGTEXT CHARACTER SET utf8mb4,
  IN p_dedup VARBINARY(4096), IN p_group VARBINARY(4096),
  IN p_run_at DATETIME(6))
MODIFIES SQL DATA
BEGIN
  DECLARE v_queue_id BIGINT;
  DECLARE v_id BIGINT;
  DECLARE v_stored INT;
  CALL sqlq__send_one(p_queue, p_payload, p_priority, p_delay_ms, p_headers,
                      p_dedup, p_group, p_run_at, v_queue_id, v_id, v_stored);
  CALL sqlq__sent(v_queue_id, v_stored);
  SELECT v_id AS id, v_stored = 0 AS duplicate;
END)sql";

inline constexpr char kSend[] = R"sql(
CREATE PROCEDURE sqlq_send(IN p_queue VARBINARY(255), IN p_payload LONGBLOB)
MODIFIES SQL DATA
BEGIN
  CALL sqlq_send_with(p_queue, p_payload, 0, 0, NULL, NULL, NULL, NULL);
END)sql";

// Many messages to one queue with the same options: a JSON array of
// strings; their ids, in order, as a JSON array.
inline constexpr char kSendBatch[] = R"sql(
CREATE PROCEDURE sqlq_send_batch(
  IN p_queue VARBINARY(255), IN p_payloads LONGTEXT CHARACTER SET utf8mb4,
  IN p_priority INT, IN p_delay_ms BIGINT,
  IN p_headers LONGTEXT CHARACTER SET utf8mb4)
MODIFIES SQL DATA
BEGIN
  DECLARE v_n INT DEFAULT 0;
  DECLARE v_i INT DEFAULT 0;
  DECLARE v_item LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_queue_id BIGINT;
  DECLARE v_id BIGINT;
  DECLARE v_stored INT;
  DECLARE v_count BIGINT DEFAULT 0;
  DECLARE v_ids LONGTEXT DEFAULT '';
  DECLARE v_msg VARCHAR(512);
  IF p_payloads IS NULL OR JSON_VALID(p_payloads) = 0
     OR JSON_TYPE(p_payloads) <> 'ARRAY' THEN
    SIGNAL SQLSTATE '45400'
      SET MESSAGE_TEXT = 'sqlq: payloads must be a JSON array of strings';
  END IF;
  SET v_n = JSON_LENGTH(p_payloads);
  IF v_n < 1 THEN
    SIGNAL SQLSTATE '45400'
      SET MESSAGE_TEXT = 'sqlq: a batch needs at least one message';
  END IF;
  IF v_n > 10000 THEN
    SET v_msg = CONCAT('sqlq: batch of ', v_n, ' messages exceeds 10000');
    SIGNAL SQLSTATE '45413' SET MESSAGE_TEXT = v_msg;
  END IF;
  WHILE v_i < v_n DO
    SET v_item = JSON_EXTRACT(p_payloads, CONCAT('$[', v_i, ']'));
    IF JSON_TYPE(v_item) <> 'STRING' THEN
      SET v_msg = CONCAT('sqlq: message ', v_i + 1, ': a payload must be a string');
      SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
    END IF;
    CALL sqlq__send_one(p_queue, CAST(JSON_UNQUOTE(v_item) AS BINARY),
                        p_priority, p_delay_ms, p_headers, NULL, NULL, NULL,
                        v_queue_id, v_id, v_stored);
    SET v_count = v_count + v_stored;
    SET v_ids = CONCAT(v_ids, IF(v_i = 0, '', ','), v_id);
    SET v_i = v_i + 1;
  END WHILE;
  CALL sqlq__sent(v_queue_id, v_count);
  SELECT CONCAT('[', v_ids, ']') AS ids;
END)sql";

// Acks a claimed message by the receipt its claim returned: removed (or
// archived), its dedup key held for the queue's window, counted; a
// receipt whose lease was lost is refused (45409) and changes nothing.
inline constexpr char kAckHead[] = R"sql(
CREATE PROCEDURE sqlq_ack(IN p_queue VARBINARY(255), IN p_receipt VARCHAR(64))
MODIFIES SQL DATA
)sql";
inline constexpr char kAckBody[] = R"sql(BEGIN
  DECLARE v_queue_id BIGINT DEFAULT NULL;
  DECLARE v_kind VARBINARY(16);
  DECLARE v_archive INT DEFAULT 0;
  DECLARE v_unique BIGINT DEFAULT 0;
  DECLARE v_idd DECIMAL(25, 0);
  DECLARE v_id BIGINT;
  DECLARE v_attempt BIGINT;
  DECLARE v_tok DECIMAL(25, 0);
  DECLARE v_token BIGINT;
  DECLARE v_found INT DEFAULT 0;
  DECLARE v_dedup VARBINARY(255) DEFAULT NULL;
  DECLARE v_now BIGINT;
  DECLARE v_msg VARCHAR(512);
  IF p_receipt IS NULL OR NOT (BINARY p_receipt REGEXP
      '^[0-9]{1,19}-[0-9]{1,10}-[0-9a-fA-F]{16}$')
     OR LOCATE(CHAR(10), p_receipt) > 0 THEN
    SET v_msg = CONCAT('sqlq: malformed receipt ''', LEFT(COALESCE(p_receipt, ''), 80),
      ''': expected ID-ATTEMPT-TOKEN as printed by claim');
    SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
  END IF;
  SET v_idd = CAST(SUBSTRING_INDEX(p_receipt, '-', 1) AS DECIMAL(25, 0));
  SET v_attempt = CAST(SUBSTRING_INDEX(SUBSTRING_INDEX(p_receipt, '-', 2), '-', -1)
                       AS DECIMAL(25, 0));
  SET v_tok = CAST(CONV(SUBSTRING_INDEX(p_receipt, '-', -1), 16, 10)
                   AS DECIMAL(25, 0));
  IF v_idd < 1 OR v_idd > 9223372036854775807 OR v_attempt < 1
     OR v_attempt > 2147483647 OR v_tok = 0 THEN
    SET v_msg = CONCAT('sqlq: malformed receipt ''', LEFT(p_receipt, 80),
      ''': expected ID-ATTEMPT-TOKEN as printed by claim');
    SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
  END IF;
  SET v_id = CAST(v_idd AS SIGNED);
  IF v_tok > 9223372036854775807 THEN
    SET v_tok = v_tok - 18446744073709551616;
  END IF;
  SET v_token = CAST(v_tok AS SIGNED);
  SELECT id, kind, archive, unique_for_us
    INTO v_queue_id, v_kind, v_archive, v_unique
    FROM sqlq_queues WHERE name = p_queue LOCK IN SHARE MODE;
  IF v_queue_id IS NULL OR v_kind <> 'queue' THEN
    SET v_msg = CONCAT('sqlq: queue ''', LEFT(p_queue, 80), ''' not found');
    SIGNAL SQLSTATE '45404' SET MESSAGE_TEXT = v_msg;
  END IF;
  SELECT 1, dedup INTO v_found, v_dedup FROM sqlq_messages
    WHERE id = v_id AND queue_id = v_queue_id AND token = v_token
      AND attempts = v_attempt
    FOR UPDATE;
  IF v_found = 0 THEN
    IF EXISTS (SELECT 1 FROM sqlq_messages
               WHERE id = v_id AND queue_id = v_queue_id) THEN
      SET v_msg = CONCAT('sqlq: stale receipt ''', p_receipt,
        ''': the message''s lease was lost (it expired and the message was claimed again, or it was nacked)');
      SIGNAL SQLSTATE '45409' SET MESSAGE_TEXT = v_msg;
    END IF;
    SET v_msg = CONCAT('sqlq: message ', v_id, ' is not in queue ''',
      LEFT(p_queue, 80), ''' (acked, dead-lettered or never there)');
    SIGNAL SQLSTATE '45404' SET MESSAGE_TEXT = v_msg;
  END IF;
  SET v_now = TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00',
                            UTC_TIMESTAMP(6));
  IF v_unique > 0 AND v_dedup IS NOT NULL THEN
    INSERT INTO sqlq_dedup_holds (queue_id, dedup, message_id, until_us)
      VALUES (v_queue_id, v_dedup, v_id, v_now + v_unique)
      ON DUPLICATE KEY UPDATE message_id = VALUES(message_id),
                              until_us = VALUES(until_us);
  END IF;
  IF v_archive <> 0 THEN
    INSERT INTO sqlq_archive (id, queue_id, priority, attempts, enqueued_us,
      completed_us, worker, payload, headers, errors)
    SELECT id, queue_id, priority, attempts, enqueued_us, v_now, worker,
           payload, headers, errors
    FROM sqlq_messages WHERE id = v_id;
  END IF;
  DELETE FROM sqlq_messages WHERE id = v_id;
  INSERT INTO sqlq_counters (queue_id, slot, acks)
    VALUES (v_queue_id, CONNECTION_ID() % 64, 1)
    ON DUPLICATE KEY UPDATE acks = acks + 1;
END)sql";

// Migration 11's texts of those, as released.
inline constexpr auto kSendOne11 =
    shared::Joined(kSendOneHead, kSendOneBegin, kSendOneDeclares, kSendOneStart,
                   kSendOneInsert11, kSendOneEnd);
inline constexpr auto kSent11 = shared::Joined(kSentHead, kSentBody);
inline constexpr auto kAck11 = shared::Joined(kAckHead, kAckBody);

// In MariaDB a TEMPORARY table of the session stands in for the table of
// the same name in the same database, also in a routine and also when named
// with its database. These procedures run with their definer's rights
// (MariaDB's default SQL SECURITY DEFINER), so a caller that may create
// temporary tables in the store's database could otherwise make them read
// a queue of its own making (and store what the queue's limits refuse) or
// write where no consumer looks: each drops any such table of the session
// before its body, which then finds sqlq's own. DROP TEMPORARY TABLE never
// touches a base table and does not end the caller's transaction.
inline constexpr char kOwnTables[] = R"sql(BEGIN
  DROP TEMPORARY TABLE IF EXISTS sqlq_queues, sqlq_messages,
    sqlq_dedup_holds, sqlq_archive, sqlq_counters;
)sql";
inline constexpr char kOwnTablesEnd[] = ";\nEND";
inline constexpr auto kSendOneGuarded =
    shared::Joined(kSendOneHead, kOwnTables, kSendOneBegin, kSendOneDeclares,
                   kSendOneStart, kSendOneInsert11, kSendOneEnd, kOwnTablesEnd);
inline constexpr auto kSentGuarded =
    shared::Joined(kSentHead, kOwnTables, kSentBody, kOwnTablesEnd);
inline constexpr auto kAckGuarded =
    shared::Joined(kAckHead, kOwnTables, kAckBody, kOwnTablesEnd);

// Migration 11: the API as first released.
inline const std::vector<const char*> kSqlApi11 = {
    "DROP PROCEDURE IF EXISTS sqlq__send_one",  kSendOne11.data(),
    "DROP PROCEDURE IF EXISTS sqlq__sent",      kSent11.data(),
    "DROP PROCEDURE IF EXISTS sqlq_send_with",  kSendWith,
    "DROP PROCEDURE IF EXISTS sqlq_send",       kSend,
    "DROP PROCEDURE IF EXISTS sqlq_send_batch", kSendBatch,
    "DROP PROCEDURE IF EXISTS sqlq_ack",        kAck11.data(),
};

// Migration 12: the API with the guard, as released.
inline const std::vector<const char*> kSqlApi12 = {
    "DROP PROCEDURE IF EXISTS sqlq__send_one",  kSendOneGuarded.data(),
    "DROP PROCEDURE IF EXISTS sqlq__sent",      kSentGuarded.data(),
    "DROP PROCEDURE IF EXISTS sqlq_send_with",  kSendWith,
    "DROP PROCEDURE IF EXISTS sqlq_send",       kSend,
    "DROP PROCEDURE IF EXISTS sqlq_send_batch", kSendBatch,
    "DROP PROCEDURE IF EXISTS sqlq_ack",        kAckGuarded.data(),
};

// Migration 20: the ack releases the acked message's dependents (as the
// library's ack does, engines/shared/sql_deps.h) and a topic can be
// published to (core/topic.cc). They use two more of sqlq's tables, which
// the guard drops temporary stand-ins for too; every procedure is made
// again with it.
inline constexpr char kOwnTables20[] = R"sql(BEGIN
  DROP TEMPORARY TABLE IF EXISTS sqlq_queues, sqlq_messages,
    sqlq_dedup_holds, sqlq_archive, sqlq_counters, sqlq_deps,
    sqlq_subscriptions;
)sql";

// The checks of a message that do not depend on its queue, as
// sqlq__send_one makes them: a publish makes them before it writes
// anything, as the library validates a publish before its transaction
// (a procedure's error does not undo its earlier statements).
inline constexpr char kCheck[] = R"sql(
CREATE PROCEDURE sqlq__check(
  IN p_payload LONGBLOB, IN p_priority INT, IN p_delay_ms BIGINT,
  IN p_headers LONGTEXT CHARACTER SET utf8mb4, IN p_dedup VARBINARY(4096),
  IN p_group VARBINARY(4096), IN p_run_at DATETIME(6))
NO SQL
BEGIN
  DECLARE v_now BIGINT;
  DECLARE v_run BIGINT DEFAULT 0;
  DECLARE v_keys LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_key LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_val LONGTEXT CHARACTER SET utf8mb4;
  DECLARE v_n INT DEFAULT 0;
  DECLARE v_i INT DEFAULT 0;
  DECLARE v_total BIGINT DEFAULT 0;
  DECLARE v_msg VARCHAR(512);
  SET p_dedup = NULLIF(p_dedup, '');
  SET v_now = TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00',
                            UTC_TIMESTAMP(6));
  IF p_payload IS NULL THEN
    SIGNAL SQLSTATE '45400'
      SET MESSAGE_TEXT = 'sqlq: the payload must not be NULL';
  END IF;
  IF p_priority IS NULL OR p_delay_ms IS NULL THEN
    SIGNAL SQLSTATE '45400'
      SET MESSAGE_TEXT = 'sqlq: priority and delay_ms must not be NULL';
  END IF;
  IF p_delay_ms < 0 OR p_delay_ms > 31536000000 THEN
    SET v_msg = CONCAT('sqlq: delay ', p_delay_ms,
      'ms is out of range [0ms, 31536000000ms]');
    SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
  END IF;
  IF LENGTH(p_dedup) > 255 THEN
    SET v_msg = CONCAT('sqlq: dedup key of ', LENGTH(p_dedup),
      ' bytes is longer than 255');
    SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
  END IF;
  IF LENGTH(p_group) > 255 THEN
    SET v_msg = CONCAT('sqlq: group of ', LENGTH(p_group),
      ' bytes is longer than 255');
    SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
  END IF;
  IF p_run_at IS NOT NULL THEN
    IF p_delay_ms <> 0 THEN
      SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT =
        'sqlq: a message takes a delay or a run_at time, not both';
    END IF;
    SET v_run = CAST(UNIX_TIMESTAMP(p_run_at) * 1000000 AS SIGNED);
    IF v_run IS NULL OR ABS(v_run - v_now) > 31536000000000 THEN
      SIGNAL SQLSTATE '45400'
        SET MESSAGE_TEXT = 'sqlq: run_at is more than 365 days from now';
    END IF;
  END IF;
  IF p_headers IS NOT NULL THEN
    IF JSON_VALID(p_headers) = 0 OR JSON_TYPE(p_headers) <> 'OBJECT' THEN
      SIGNAL SQLSTATE '45400'
        SET MESSAGE_TEXT = 'sqlq: headers must be a JSON object of strings';
    END IF;
    SET v_keys = JSON_KEYS(p_headers);
    SET v_n = JSON_LENGTH(v_keys);
    WHILE v_i < v_n DO
      SET v_key = JSON_UNQUOTE(JSON_EXTRACT(v_keys, CONCAT('$[', v_i, ']')));
      IF NOT (BINARY v_key REGEXP '^[A-Za-z0-9_.:-]{1,128}$')
         OR LOCATE(CHAR(10), v_key) > 0 THEN
        SET v_msg = CONCAT('sqlq: header name ''', LEFT(v_key, 80),
          ''' must be 1 to 128 letters, digits, ''_'', ''-'', ''.'' or '':''');
        SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
      END IF;
      SET v_val = JSON_EXTRACT(p_headers, CONCAT('$."', v_key, '"'));
      IF JSON_TYPE(v_val) <> 'STRING' THEN
        SET v_msg = CONCAT('sqlq: header ''', v_key,
          ''' must have a string value');
        SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
      END IF;
      SET v_val = JSON_UNQUOTE(v_val);
      IF LENGTH(v_val) > 4096 THEN
        SET v_msg = CONCAT('sqlq: header ''', v_key, ''' has a value of ',
          LENGTH(v_val), ' bytes, more than 4096');
        SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
      END IF;
      IF INSTR(CAST(v_val AS BINARY), CHAR(0)) > 0 THEN
        SET v_msg = CONCAT('sqlq: header ''', v_key,
          ''' must have a UTF-8 value without NUL bytes');
        SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
      END IF;
      SET v_total = v_total + LENGTH(v_key) + LENGTH(v_val);
      SET v_i = v_i + 1;
    END WHILE;
    IF v_n > 64 THEN
      SET v_msg = CONCAT('sqlq: ', v_n, ' headers are more than the 64 allowed');
      SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
    END IF;
    IF v_total > 16384 THEN
      SET v_msg = CONCAT('sqlq: headers of ', v_total,
        ' bytes (names and values) exceed 16384');
      SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
    END IF;
  END IF;
END)sql";

// One message to every queue subscribed to the topic whose filter its
// headers match (each of the filter's headers with exactly that value), in
// name order, as each queue's own send would store it. Every check comes
// before the first write, so that a refusal writes nothing. The topic's row
// is locked first (as a subscribe or unsubscribe locks it), then each
// subscribed queue's and its subscription's, so that a drop waits for this
// transaction. Returns a row per delivery: queue, id, duplicate.
inline constexpr char kPublishWithHead[] = R"sql(
CREATE PROCEDURE sqlq_publish_with(
  IN p_topic VARBINARY(255), IN p_payload LONGBLOB, IN p_priority INT,
  IN p_delay_ms BIGINT, IN p_headers LONGTEXT CHARACTER SET utf8mb4,
  IN p_dedup VARBINARY(4096), IN p_group VARBINARY(4096),
  IN p_run_at DATETIME(6))
MODIFIES SQL DATA
)sql";
inline constexpr char kPublishWithBody[] = R"sql(BEGIN
  DECLARE v_topic_id BIGINT DEFAULT NULL;
  DECLARE v_kind VARBINARY(16);
  DECLARE v_name VARBINARY(255);
  DECLARE v_last VARBINARY(255) DEFAULT '';
  DECLARE v_max BIGINT;
  DECLARE v_queue_id BIGINT;
  DECLARE v_id BIGINT;
  DECLARE v_stored INT;
  DECLARE v_out LONGTEXT CHARACTER SET utf8mb4 DEFAULT '';
  DECLARE v_msg VARCHAR(512);
  SELECT id, kind INTO v_topic_id, v_kind
    FROM sqlq_queues WHERE name = p_topic LOCK IN SHARE MODE;
  IF v_topic_id IS NULL THEN
    SET v_msg = CONCAT('sqlq: topic ''', LEFT(p_topic, 80), ''' not found');
    SIGNAL SQLSTATE '45404' SET MESSAGE_TEXT = v_msg;
  END IF;
  IF v_kind <> 'topic' THEN
    SET v_msg = CONCAT('sqlq: ''', LEFT(p_topic, 80), ''' is a ', v_kind,
      ', not a topic');
    SIGNAL SQLSTATE '45404' SET MESSAGE_TEXT = v_msg;
  END IF;
  CALL sqlq__check(p_payload, p_priority, p_delay_ms, p_headers, p_dedup,
                   p_group, p_run_at);
  -- A subscriber the payload is too large for refuses it for all.
  SELECT q.name, q.max_payload INTO v_name, v_max
    FROM sqlq_subscriptions s JOIN sqlq_queues q ON q.id = s.queue_id
    WHERE s.topic_id = v_topic_id AND q.kind = 'queue'
      AND q.max_payload < LENGTH(p_payload)
      AND (s.header_filter IS NULL OR s.header_filter = ''
           OR (p_headers IS NOT NULL AND JSON_CONTAINS(p_headers,
                 CONVERT(s.header_filter USING utf8mb4))))
    ORDER BY q.name LIMIT 1 LOCK IN SHARE MODE;
  IF v_name IS NOT NULL THEN
    SET v_msg = CONCAT('sqlq: queue ''', v_name, ''': payload of ',
      LENGTH(p_payload), ' bytes exceeds the queue''s limit of ', v_max,
      ' bytes');
    SIGNAL SQLSTATE '45413' SET MESSAGE_TEXT = v_msg;
  END IF;
  REPEAT
    SET v_name = NULL;
    SELECT q.name INTO v_name
      FROM sqlq_subscriptions s JOIN sqlq_queues q ON q.id = s.queue_id
      WHERE s.topic_id = v_topic_id AND q.kind = 'queue' AND q.name > v_last
        AND (s.header_filter IS NULL OR s.header_filter = ''
             OR (p_headers IS NOT NULL AND JSON_CONTAINS(p_headers,
                   CONVERT(s.header_filter USING utf8mb4))))
      ORDER BY q.name LIMIT 1 LOCK IN SHARE MODE;
    IF v_name IS NOT NULL THEN
      CALL sqlq__send_one(v_name, p_payload, p_priority, p_delay_ms,
                          p_headers, p_dedup, p_group, p_run_at, v_queue_id,
                          v_id, v_stored);
      CALL sqlq__sent(v_queue_id, v_stored);
      SET v_out = CONCAT(v_out, IF(v_out = '', '', ','),
        JSON_OBJECT('queue', CONVERT(v_name USING utf8mb4), 'id', v_id,
                    'duplicate', 1 - v_stored));
      SET v_last = v_name;
    END IF;
  UNTIL v_name IS NULL END REPEAT;
  SELECT d.queue, d.id, d.duplicate
    FROM JSON_TABLE(CONCAT('[', v_out, ']'), '$[*]' COLUMNS (
      queue VARCHAR(255) PATH '$.queue', id BIGINT PATH '$.id',
      duplicate INT PATH '$.duplicate')) AS d;
END)sql";

inline constexpr char kPublish[] = R"sql(
CREATE PROCEDURE sqlq_publish(IN p_topic VARBINARY(255),
                              IN p_payload LONGBLOB)
MODIFIES SQL DATA
BEGIN
  CALL sqlq_publish_with(p_topic, p_payload, 0, 0, NULL, NULL, NULL, NULL);
END)sql";

// The ack of migration 20: kAckBody, then the release. In a queue whose
// messages others were ever made to wait for (its dependents flag, read
// under the share lock on the queue's row, which the flag's write waits
// for), each message waiting for the acked one waits for one less, and
// one that waits for none is ready now. Locking reads and updates read the
// latest rows whatever the caller's isolation, and each dependent's update
// waits for its row lock: two parents acked at once release it once. No
// link to the acked message can be added meanwhile: a send's link locks
// its row, which this ack locked and deleted. Waiting claims elsewhere
// notice through the acks counter, which the Poller watches.
// Migration 20's ack body, as released, in pieces that migration 21's
// reuses.
inline constexpr char kAckDeclares20[] = R"sql(BEGIN
  DECLARE v_queue_id BIGINT DEFAULT NULL;
  DECLARE v_kind VARBINARY(16);
  DECLARE v_archive INT DEFAULT 0;
  DECLARE v_unique BIGINT DEFAULT 0;
  DECLARE v_deps INT DEFAULT 0;
  DECLARE v_idd DECIMAL(25, 0);
  DECLARE v_id BIGINT;
  DECLARE v_attempt BIGINT;
  DECLARE v_tok DECIMAL(25, 0);
  DECLARE v_token BIGINT;
  DECLARE v_found INT DEFAULT 0;
  DECLARE v_dedup VARBINARY(255) DEFAULT NULL;
  DECLARE v_now BIGINT;
  DECLARE v_child BIGINT;
  DECLARE v_last BIGINT DEFAULT 0;
  DECLARE v_msg VARCHAR(512);
)sql";
inline constexpr char kAckChecks20[] =
    R"sql(  IF p_receipt IS NULL OR NOT (BINARY p_receipt REGEXP
      '^[0-9]{1,19}-[0-9]{1,10}-[0-9a-fA-F]{16}$')
     OR LOCATE(CHAR(10), p_receipt) > 0 THEN
    SET v_msg = CONCAT('sqlq: malformed receipt ''', LEFT(COALESCE(p_receipt, ''), 80),
      ''': expected ID-ATTEMPT-TOKEN as printed by claim');
    SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
  END IF;
  SET v_idd = CAST(SUBSTRING_INDEX(p_receipt, '-', 1) AS DECIMAL(25, 0));
  SET v_attempt = CAST(SUBSTRING_INDEX(SUBSTRING_INDEX(p_receipt, '-', 2), '-', -1)
                       AS DECIMAL(25, 0));
  SET v_tok = CAST(CONV(SUBSTRING_INDEX(p_receipt, '-', -1), 16, 10)
                   AS DECIMAL(25, 0));
  IF v_idd < 1 OR v_idd > 9223372036854775807 OR v_attempt < 1
     OR v_attempt > 2147483647 OR v_tok = 0 THEN
    SET v_msg = CONCAT('sqlq: malformed receipt ''', LEFT(p_receipt, 80),
      ''': expected ID-ATTEMPT-TOKEN as printed by claim');
    SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
  END IF;
  SET v_id = CAST(v_idd AS SIGNED);
  IF v_tok > 9223372036854775807 THEN
    SET v_tok = v_tok - 18446744073709551616;
  END IF;
  SET v_token = CAST(v_tok AS SIGNED);
  SELECT id, kind, archive, unique_for_us, dependents
    INTO v_queue_id, v_kind, v_archive, v_unique, v_deps
    FROM sqlq_queues WHERE name = p_queue LOCK IN SHARE MODE;
  IF v_queue_id IS NULL OR v_kind <> 'queue' THEN
    SET v_msg = CONCAT('sqlq: queue ''', LEFT(p_queue, 80), ''' not found');
    SIGNAL SQLSTATE '45404' SET MESSAGE_TEXT = v_msg;
  END IF;
  SELECT 1, dedup INTO v_found, v_dedup FROM sqlq_messages
    WHERE id = v_id AND queue_id = v_queue_id AND token = v_token
      AND attempts = v_attempt
    FOR UPDATE;
  IF v_found = 0 THEN
    IF EXISTS (SELECT 1 FROM sqlq_messages
               WHERE id = v_id AND queue_id = v_queue_id) THEN
      SET v_msg = CONCAT('sqlq: stale receipt ''', p_receipt,
        ''': the message''s lease was lost (it expired and the message was claimed again, or it was nacked)');
      SIGNAL SQLSTATE '45409' SET MESSAGE_TEXT = v_msg;
    END IF;
    SET v_msg = CONCAT('sqlq: message ', v_id, ' is not in queue ''',
      LEFT(p_queue, 80), ''' (acked, dead-lettered or never there)');
    SIGNAL SQLSTATE '45404' SET MESSAGE_TEXT = v_msg;
  END IF;
)sql";
inline constexpr char kAckRefusesBatches20[] =
    R"sql(  -- A member of a batch (OnDead::kBatch, 3): its ack also counts it in
  -- the batch, which only the library does.
  IF v_deps <> 0 AND EXISTS (SELECT 1 FROM sqlq_deps
                             WHERE parent_id = v_id AND on_dead = 3) THEN
    SET v_msg = CONCAT('sqlq: message ', v_id, ' is a member of a batch, ',
      'whose counts only the library keeps: ack it through the library, ',
      'the HTTP API, the CLI or a client');
    SIGNAL SQLSTATE '45400' SET MESSAGE_TEXT = v_msg;
  END IF;
)sql";
inline constexpr char kAckMiddle20[] =
    R"sql(  SET v_now = TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00',
                            UTC_TIMESTAMP(6));
  IF v_unique > 0 AND v_dedup IS NOT NULL THEN
    INSERT INTO sqlq_dedup_holds (queue_id, dedup, message_id, until_us)
      VALUES (v_queue_id, v_dedup, v_id, v_now + v_unique)
      ON DUPLICATE KEY UPDATE message_id = VALUES(message_id),
                              until_us = VALUES(until_us);
  END IF;
  IF v_archive <> 0 THEN
    INSERT INTO sqlq_archive (id, queue_id, priority, attempts, enqueued_us,
      completed_us, worker, payload, headers, errors)
    SELECT id, queue_id, priority, attempts, enqueued_us, v_now, worker,
           payload, headers, errors
    FROM sqlq_messages WHERE id = v_id;
  END IF;
  DELETE FROM sqlq_messages WHERE id = v_id;
  INSERT INTO sqlq_counters (queue_id, slot, acks)
    VALUES (v_queue_id, CONNECTION_ID() % 64, 1)
    ON DUPLICATE KEY UPDATE acks = acks + 1;
  -- Its dependents one by one, by the primary key of sqlq_deps (parent_id
  -- first) and of sqlq_messages. ready_us is set first: MariaDB assigns
  -- left to right, with the new values.
)sql";
// Migration 20's release of dependents, in pieces that migration 21's
// release reuses.
inline constexpr char kReleaseHead[] = R"sql(  IF v_deps <> 0 THEN
    REPEAT
      SET v_child = NULL;
      SELECT child_id)sql";
inline constexpr char kReleaseChild20[] = R"sql( INTO v_child)sql";
inline constexpr char kReleaseOne[] = R"sql( FROM sqlq_deps
        WHERE parent_id = v_id AND child_id > v_last
        ORDER BY child_id LIMIT 1 FOR UPDATE;
      IF v_child IS NOT NULL THEN
        UPDATE sqlq_messages
          SET ready_us = CASE WHEN waits = 1 THEN v_now ELSE ready_us END,
              waits = waits - 1
          WHERE id = v_child AND waits > 0;
)sql";
inline constexpr char kReleaseNext[] = R"sql(        SET v_last = v_child;
      END IF;
    UNTIL v_child IS NULL END REPEAT;
    DELETE FROM sqlq_deps WHERE parent_id = v_id;
  END IF;
)sql";
inline constexpr char kAckEnd20[] = R"sql(END)sql";

// Migration 21's ack body: migration 20's, and a member of a batch is
// counted in its batch (completed) by the callback its ack releases: the
// callback's row, then the batch's row are locked, in that order, as the
// library's ack locks them (engines/shared/sql_batches.h); the ack of the
// last member marks the batch done and writes the counts into the
// callback's headers (core/batches.cc).
inline constexpr char kAckDeclares21[] = R"sql(  DECLARE v_on_dead INT;
  DECLARE v_callback BIGINT DEFAULT NULL;
  DECLARE v_batch BIGINT DEFAULT NULL;
  DECLARE v_total BIGINT;
  DECLARE v_completed BIGINT;
  DECLARE v_dead BIGINT;
  DECLARE v_cancelled BIGINT;
  DECLARE v_open INT;
)sql";
inline constexpr char kReleaseComment21[] =
    R"sql(  -- The callback of its batch, when it is a member of one, is the
  -- dependent linked with on_dead 3 (OnDead::kBatch).
)sql";
inline constexpr char kReleaseChild21[] =
    R"sql(, on_dead INTO v_child, v_on_dead)sql";
inline constexpr char kReleaseCallback21[] = R"sql(        IF v_on_dead = 3 THEN
          SET v_callback = v_child;
        END IF;
)sql";
inline constexpr char kAckCountEnd21[] =
    R"sql(  -- Counted in its batch, after the callback's row was locked (as the
  -- library's ack does); the batch's row locked by the update is read
  -- as this transaction left it. No row: the batch was forgotten with its
  -- callback's queue.
  IF v_callback IS NOT NULL THEN
    UPDATE sqlq_batches SET completed = completed + 1
      WHERE callback_id = v_callback;
    SELECT id, total, completed, dead, cancelled, done_us IS NULL
      INTO v_batch, v_total, v_completed, v_dead, v_cancelled, v_open
      FROM sqlq_batches WHERE callback_id = v_callback FOR UPDATE;
    IF v_batch IS NOT NULL AND v_open
       AND v_completed + v_dead + v_cancelled >= v_total THEN
      UPDATE sqlq_messages
        SET headers = JSON_SET(COALESCE(NULLIF(headers, ''), '{}'),
              '$."sqlq:batch_total"', CAST(v_total AS CHAR),
              '$."sqlq:batch_completed"', CAST(v_completed AS CHAR),
              '$."sqlq:batch_dead"', CAST(v_dead AS CHAR),
              '$."sqlq:batch_cancelled"', CAST(v_cancelled AS CHAR))
        WHERE id = v_callback;
      UPDATE sqlq_batches SET done_us = v_now, expires_us = v_now + ttl_us
        WHERE id = v_batch;
    END IF;
  END IF;
END)sql";

inline constexpr auto kSendOneGuarded20 =
    shared::Joined(kSendOneHead, kOwnTables20, kSendOneBegin, kSendOneDeclares,
                   kSendOneStart, kSendOneInsert11, kSendOneEnd, kOwnTablesEnd);
inline constexpr auto kSentGuarded20 =
    shared::Joined(kSentHead, kOwnTables20, kSentBody, kOwnTablesEnd);
inline constexpr auto kAckGuarded20 = shared::Joined(
    kAckHead, kOwnTables20, kAckDeclares20, kAckChecks20, kAckRefusesBatches20,
    kAckMiddle20, kReleaseHead, kReleaseChild20, kReleaseOne, kReleaseNext,
    kAckEnd20, kOwnTablesEnd);
inline constexpr auto kPublishWithGuarded20 = shared::Joined(
    kPublishWithHead, kOwnTables20, kPublishWithBody, kOwnTablesEnd);

// Migration 20, as released.
inline const std::vector<const char*> kSqlApi20 = {
    "DROP PROCEDURE IF EXISTS sqlq__send_one",    kSendOneGuarded20.data(),
    "DROP PROCEDURE IF EXISTS sqlq__sent",        kSentGuarded20.data(),
    "DROP PROCEDURE IF EXISTS sqlq__check",       kCheck,
    "DROP PROCEDURE IF EXISTS sqlq_send_with",    kSendWith,
    "DROP PROCEDURE IF EXISTS sqlq_send",         kSend,
    "DROP PROCEDURE IF EXISTS sqlq_send_batch",   kSendBatch,
    "DROP PROCEDURE IF EXISTS sqlq_ack",          kAckGuarded20.data(),
    "DROP PROCEDURE IF EXISTS sqlq_publish_with", kPublishWithGuarded20.data(),
    "DROP PROCEDURE IF EXISTS sqlq_publish",      kPublish,
};

// Migration 21: the ack that counts a member of a batch, whose guard drops
// a temporary stand-in for sqlq_batches too.
inline constexpr char kOwnTables21[] = R"sql(BEGIN
  DROP TEMPORARY TABLE IF EXISTS sqlq_queues, sqlq_messages,
    sqlq_dedup_holds, sqlq_archive, sqlq_counters, sqlq_deps,
    sqlq_subscriptions, sqlq_batches;
)sql";
inline constexpr auto kAckGuarded21 = shared::Joined(
    kAckHead, kOwnTables21, kAckDeclares20, kAckDeclares21, kAckChecks20,
    kAckMiddle20, kReleaseComment21, kReleaseHead, kReleaseChild21, kReleaseOne,
    kReleaseCallback21, kReleaseNext, kAckCountEnd21, kOwnTablesEnd);
inline const std::vector<const char*> kSqlApi21 = {
    "DROP PROCEDURE IF EXISTS sqlq_ack", kAckGuarded21.data()};

// Migration 25: dedup keys in sqlq_dedup_keys (schema.h, version 25)
// instead of a unique index on every message. The message is stored as
// before (where the unique index remains, on a store whose upgrade to
// version 25 stopped short of dropping it, its INSERT still tells a
// duplicate), then its key; a key another message holds (1062) makes this
// send a duplicate of that message while it is still in the queue with
// that key (locked, so that its ack waits for this transaction), and is
// taken over otherwise (the trigger that removes a deleted message's key
// did not run): only from the holder seen, so that of two senders taking
// over one key, one wins and the other finds its message. Without the
// table (1146: the upgrade stopped before making it) the index alone
// decides. The guard drops a temporary stand-in for the table too.
inline constexpr char kOwnTables25[] = R"sql(BEGIN
  DROP TEMPORARY TABLE IF EXISTS sqlq_queues, sqlq_messages,
    sqlq_dedup_holds, sqlq_archive, sqlq_counters, sqlq_deps,
    sqlq_subscriptions, sqlq_batches, sqlq_dedup_keys;
)sql";
inline constexpr char kSendOneDeclares25[] =
    R"sql(  DECLARE v_key_of BIGINT DEFAULT NULL;
  DECLARE v_no_keys INT DEFAULT 0;
)sql";
inline constexpr char kSendOneKeys25[] =
    R"sql(  SET v_dup = o_stored = 1 AND p_dedup IS NOT NULL, v_attempt = 0;
  WHILE v_dup = 1 AND v_no_keys = 0 AND v_attempt < 4 DO
    SET v_dup = 0;
    BEGIN
      DECLARE CONTINUE HANDLER FOR 1146 SET v_no_keys = 1;
      INSERT INTO sqlq_dedup_keys (queue_id, dedup, message_id)
        VALUES (o_queue_id, p_dedup, o_id);
    END;
    IF v_dup = 1 THEN
      SET v_key_of = NULL, v_holder = NULL;
      SELECT k.message_id, m.id INTO v_key_of, v_holder
        FROM sqlq_dedup_keys k
        LEFT JOIN sqlq_messages m ON m.id = k.message_id
          AND m.queue_id = k.queue_id AND m.dedup = k.dedup
        WHERE k.queue_id = o_queue_id AND k.dedup = p_dedup
        LOCK IN SHARE MODE;
      IF v_holder IS NOT NULL THEN
        -- Its key cleared first, so that the trigger leaves the holder's
        -- key row alone (this send holds a share lock on it, as another
        -- duplicate may: neither could take it for writing).
        UPDATE sqlq_messages SET dedup = NULL WHERE id = o_id;
        DELETE FROM sqlq_messages WHERE id = o_id;
        SET o_id = v_holder, o_stored = 0, v_dup = 0;
      ELSEIF v_key_of IS NOT NULL THEN
        UPDATE sqlq_dedup_keys SET message_id = o_id
          WHERE queue_id = o_queue_id AND dedup = p_dedup
            AND message_id = v_key_of;
        IF ROW_COUNT() = 0 THEN SET v_dup = 1; ELSE SET v_dup = 0; END IF;
      END IF;
    END IF;
    SET v_attempt = v_attempt + 1;
  END WHILE;
  IF v_dup = 1 THEN
    UPDATE sqlq_messages SET dedup = NULL WHERE id = o_id;
    DELETE FROM sqlq_messages WHERE id = o_id;
    SIGNAL SQLSTATE '45503' SET MESSAGE_TEXT =
      'sqlq: send: the dedup key''s message kept changing; try again';
  END IF;
)sql";

// Deletes a message's key with the message, whatever deletes it (schema.h,
// version 25). Without the table (an upgrade cut short before making it)
// it does nothing.
inline constexpr char kKeyGoneTrigger[] = R"sql(
CREATE TRIGGER sqlq_messages_key_gone AFTER DELETE ON sqlq_messages
FOR EACH ROW BEGIN
  DECLARE CONTINUE HANDLER FOR 1146 BEGIN END;
  IF OLD.dedup IS NOT NULL THEN
    DELETE FROM sqlq_dedup_keys WHERE queue_id = OLD.queue_id
      AND dedup = OLD.dedup AND message_id = OLD.id;
  END IF;
END)sql";
inline constexpr auto kSendOneGuarded25 =
    shared::Joined(kSendOneHead, kOwnTables25, kSendOneBegin, kSendOneDeclares,
                   kSendOneDeclares25, kSendOneStart, kSendOneInsert11,
                   kSendOneKeys25, kSendOneEnd, kOwnTablesEnd);
// The API as it is: what `sqlq sql-api` prints, migration 20's procedures
// with migration 21's ack and migration 25's send. Each procedure is dropped
// and created again, so running it again is harmless.
inline const std::vector<const char*> kSqlApi = [] {
  std::vector<const char*> out = kSqlApi20;
  for (const char*& stmt : out) {
    if (stmt == kAckGuarded20.data()) stmt = kAckGuarded21.data();
    if (stmt == kSendOneGuarded20.data()) stmt = kSendOneGuarded25.data();
  }
  // The trigger the send's keys rely on, made again: it runs with the
  // rights of whoever made it, so it must be made again if that account
  // is dropped (docs/engines/mysql.md, "Dedup keys").
  out.push_back("DROP TRIGGER IF EXISTS sqlq_messages_key_gone");
  out.push_back(kKeyGoneTrigger);
  return out;
}();

}  // namespace sqlq::engines::mysql

#endif  // SQLQ_ENGINES_MYSQL_SQL_API_H_
