// The SQL-level API of the PostgreSQL engine (docs/sql-api.md): functions in
// the schema "sqlq" that send and ack from any client, inside the caller's
// own transaction. They do what the library's send and ack do (engine.h,
// postgres_queue.cc, postgres_claim.cc) in one place each: the same checks
// and limits (core/validate.h), the same rows, dedup holds and counter
// deltas, and a NOTIFY on the channel the engine's Notifier listens to,
// which PostgreSQL delivers at commit (and drops on rollback).
//
// Errors are raised with SQLSTATEs of their own: SQ400 invalid argument,
// SQ404 no such queue or message, SQ409 stale receipt, SQ413 too large,
// SQ503 busy (try again).
//
// Installed by migration 14 in a DO block: a database user that may not
// create the schema gets a NOTICE and everything else of sqlq still works
// (docs/sql-api.md says how to install them later). Migration 23
// (kSqlApi23Rest and the ack's pieces) adds the release of dependents to
// the ack, as the library's ack does (engines/shared/sql_deps.h), and
// sqlq.publish, as the library's publish (core/topic.cc); migration 24's
// ack counts a member of a batch in its batch (engines/shared/sql_batches.h).
//
// The functions run with the caller's privileges, so whatever their names
// resolve to runs as the caller. Each one pins its search_path to
// pg_catalog, the store's schema, pg_temp (kSqlApiPin, migration 15):
// the caller's path must not choose what they call. Migration 14 created
// them with SET search_path FROM CURRENT, which kept the migration's
// setting unresolved ("$user", public): "$user" became the caller's name
// at each call, and a schema of that name, which any role with CREATE on
// the database can make, put its own tables and triggers before sqlq's.
// pg_catalog comes first so that nothing in the store's schema overrides a
// built-in function or operator; pg_temp comes last (where it is not named
// it is searched first for tables) so that no temporary table stands in
// for one of sqlq's.

#ifndef SQLQ_ENGINES_POSTGRES_SQL_API_H_
#define SQLQ_ENGINES_POSTGRES_SQL_API_H_

#include "engines/shared/joined_text.h"

namespace sqlq::engines::postgres {

// The functions' definitions (CREATE OR REPLACE: running them again, as
// `sqlq sql-api` prints them, installs them where the migration could not).
// The text is migration 14's and is never edited; its SET search_path FROM
// CURRENT is unsafe and always followed by kSqlApiPin, which replaces it.
inline constexpr char kSqlApi[] = R"sql(
CREATE SCHEMA IF NOT EXISTS sqlq;

-- One message: checks it as the library does, inserts it (or finds the
-- message holding its dedup key), and says whether it was stored. Counters
-- and the NOTIFY are the caller's (once per call of send or send_batch).
CREATE OR REPLACE FUNCTION sqlq._send(
    p_queue text, p_payload bytea, p_priority integer, p_delay_ms bigint,
    p_headers jsonb, p_dedup text, p_group text, p_run_at timestamptz,
    OUT o_queue_id bigint, OUT o_id bigint, OUT o_stored boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$
DECLARE
  q record;
  now_us bigint := (extract(epoch FROM now()) * 1000000)::bigint;
  -- An empty key is no key, as for the library.
  v_dedup bytea := convert_to(nullif(p_dedup, ''), 'UTF8');
  v_grp bytea;
  v_headers jsonb;
  v_ready bigint;
  v_run_at bigint := 0;
  v_total bigint := 0;
  v_count integer := 0;
  kv record;
BEGIN
  SELECT id, kind, max_payload, unique_for_us, group_mode INTO q
    FROM sqlq_queues WHERE name = p_queue FOR KEY SHARE;
  IF NOT FOUND OR q.kind <> 'queue' THEN
    RAISE EXCEPTION 'sqlq: queue ''%'' not found', p_queue
      USING ERRCODE = 'SQ404';
  END IF;
  o_queue_id := q.id;
  IF p_payload IS NULL THEN
    RAISE EXCEPTION 'sqlq: the payload must not be NULL' USING ERRCODE = 'SQ400';
  END IF;
  IF octet_length(p_payload) > q.max_payload THEN
    RAISE EXCEPTION 'sqlq: payload of % bytes exceeds the queue''s limit of % bytes',
      octet_length(p_payload), q.max_payload USING ERRCODE = 'SQ413';
  END IF;
  IF p_priority IS NULL OR p_delay_ms IS NULL THEN
    RAISE EXCEPTION 'sqlq: priority and delay_ms must not be NULL'
      USING ERRCODE = 'SQ400';
  END IF;
  IF p_delay_ms < 0 OR p_delay_ms > 31536000000 THEN
    RAISE EXCEPTION 'sqlq: delay %ms is out of range [0ms, 31536000000ms]',
      p_delay_ms USING ERRCODE = 'SQ400';
  END IF;
  IF octet_length(v_dedup) > 255 THEN
    RAISE EXCEPTION 'sqlq: dedup key of % bytes is longer than 255',
      octet_length(v_dedup) USING ERRCODE = 'SQ400';
  END IF;
  IF octet_length(p_group) > 255 THEN
    RAISE EXCEPTION 'sqlq: group of % bytes is longer than 255',
      octet_length(p_group) USING ERRCODE = 'SQ400';
  END IF;
  IF p_run_at IS NOT NULL THEN
    IF p_delay_ms <> 0 THEN
      RAISE EXCEPTION 'sqlq: a message takes a delay or a run_at time, not both'
        USING ERRCODE = 'SQ400';
    END IF;
    v_run_at := (extract(epoch FROM p_run_at) * 1000000)::bigint;
    IF abs(v_run_at - now_us) > 31536000000000 THEN
      RAISE EXCEPTION 'sqlq: run_at is more than 365 days from now'
        USING ERRCODE = 'SQ400';
    END IF;
  END IF;
  IF p_headers IS NOT NULL THEN
    IF jsonb_typeof(p_headers) <> 'object' THEN
      RAISE EXCEPTION 'sqlq: headers must be a JSON object of strings'
        USING ERRCODE = 'SQ400';
    END IF;
    FOR kv IN SELECT key, value FROM jsonb_each(p_headers) LOOP
      IF jsonb_typeof(kv.value) <> 'string' THEN
        RAISE EXCEPTION 'sqlq: header ''%'' must have a string value', kv.key
          USING ERRCODE = 'SQ400';
      END IF;
      IF kv.key !~ '^[A-Za-z0-9_.:-]{1,128}$' THEN
        RAISE EXCEPTION 'sqlq: header name ''%'' must be 1 to 128 letters, digits, ''_'', ''-'', ''.'' or '':''',
          left(kv.key, 80) USING ERRCODE = 'SQ400';
      END IF;
      IF octet_length(kv.value #>> '{}') > 4096 THEN
        RAISE EXCEPTION 'sqlq: header ''%'' has a value of % bytes, more than 4096',
          kv.key, octet_length(kv.value #>> '{}') USING ERRCODE = 'SQ400';
      END IF;
      v_total := v_total + octet_length(kv.key) + octet_length(kv.value #>> '{}');
      v_count := v_count + 1;
    END LOOP;
    IF v_count > 64 THEN
      RAISE EXCEPTION 'sqlq: % headers are more than the 64 allowed', v_count
        USING ERRCODE = 'SQ400';
    END IF;
    IF v_total > 16384 THEN
      RAISE EXCEPTION 'sqlq: headers of % bytes (names and values) exceed 16384',
        v_total USING ERRCODE = 'SQ400';
    END IF;
    IF v_count > 0 THEN v_headers := p_headers; END IF;
  END IF;
  -- The group column: the message's group; "" in a grouped queue for a
  -- message without one; else NULL.
  IF coalesce(p_group, '') <> '' OR q.group_mode <> 0 THEN
    v_grp := convert_to(coalesce(p_group, ''), 'UTF8');
  END IF;
  v_ready := greatest(now_us + p_delay_ms * 1000, v_run_at);
  FOR attempt IN 0..3 LOOP
    INSERT INTO sqlq_messages
      (queue_id, priority, ready_us, enqueued_us, dedup, payload, headers, grp)
    VALUES (q.id, p_priority, v_ready, now_us, v_dedup, p_payload, v_headers,
            v_grp)
    ON CONFLICT (queue_id, dedup) WHERE dedup IS NOT NULL DO NOTHING
    RETURNING id INTO o_id;
    IF o_id IS NOT NULL THEN
      o_stored := true;
      EXIT;
    END IF;
    -- The key is held by a message in the queue, which may be acked before
    -- this look-up: then insert again.
    SELECT id INTO o_id FROM sqlq_messages
      WHERE queue_id = q.id AND dedup = v_dedup;
    IF o_id IS NOT NULL THEN
      o_stored := false;
      RETURN;
    END IF;
  END LOOP;
  IF o_id IS NULL THEN
    RAISE EXCEPTION 'sqlq: send: the dedup key''s message kept changing; try again'
      USING ERRCODE = 'SQ503';
  END IF;
  -- A dedup window: a key held after its message was acked or
  -- dead-lettered is a duplicate of that message.
  IF q.unique_for_us > 0 AND v_dedup IS NOT NULL THEN
    DECLARE
      v_holder bigint;
    BEGIN
      SELECT message_id INTO v_holder FROM sqlq_dedup_holds
        WHERE queue_id = q.id AND dedup = v_dedup AND until_us > now_us;
      IF v_holder IS NOT NULL THEN
        DELETE FROM sqlq_messages WHERE id = o_id;
        o_id := v_holder;
        o_stored := false;
      END IF;
    END;
  END IF;
END
$f$;

-- What every send does once it stored messages: counts them and wakes the
-- claims waiting in other processes (at commit).
CREATE OR REPLACE FUNCTION sqlq._sent(p_queue_id bigint, p_stored bigint)
RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$
BEGIN
  IF p_stored > 0 THEN
    INSERT INTO sqlq_counter_deltas (queue_id, sends)
      VALUES (p_queue_id, p_stored);
    PERFORM pg_notify('sqlq_changes', 'sql');
  END IF;
END
$f$;

CREATE OR REPLACE FUNCTION sqlq.send(
    queue text, payload bytea, priority integer DEFAULT 0,
    delay_ms bigint DEFAULT 0, headers jsonb DEFAULT NULL,
    dedup_key text DEFAULT NULL, "group" text DEFAULT NULL,
    run_at timestamptz DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$
DECLARE
  r record;
BEGIN
  r := sqlq._send(queue, payload, priority, delay_ms, headers, dedup_key,
                  "group", run_at);
  PERFORM sqlq._sent(r.o_queue_id, CASE WHEN r.o_stored THEN 1 ELSE 0 END);
  RETURN r.o_id;
END
$f$;

CREATE OR REPLACE FUNCTION sqlq.send(
    queue text, payload text, priority integer DEFAULT 0,
    delay_ms bigint DEFAULT 0, headers jsonb DEFAULT NULL,
    dedup_key text DEFAULT NULL, "group" text DEFAULT NULL,
    run_at timestamptz DEFAULT NULL)
RETURNS bigint LANGUAGE sql SET search_path FROM CURRENT AS $f$
  SELECT sqlq.send(queue, convert_to(payload, 'UTF8'), priority, delay_ms,
                   headers, dedup_key, "group", run_at)
$f$;

CREATE OR REPLACE FUNCTION sqlq._json_headers(headers jsonb)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $f$
  SELECT CASE
    WHEN jsonb_typeof(headers) = 'object' AND headers ? 'content-type'
      THEN headers
    WHEN headers IS NULL OR jsonb_typeof(headers) = 'object'
      THEN coalesce(headers, '{}'::jsonb)
           || '{"content-type":"application/json"}'::jsonb
    ELSE headers
  END
$f$;

-- A JSON payload is stored as its text and marked with the header
-- content-type: application/json, as the HTTP API does.
CREATE OR REPLACE FUNCTION sqlq.send(
    queue text, payload jsonb, priority integer DEFAULT 0,
    delay_ms bigint DEFAULT 0, headers jsonb DEFAULT NULL,
    dedup_key text DEFAULT NULL, "group" text DEFAULT NULL,
    run_at timestamptz DEFAULT NULL)
RETURNS bigint LANGUAGE sql SET search_path FROM CURRENT AS $f$
  SELECT sqlq.send(queue, convert_to(payload::text, 'UTF8'), priority,
                   delay_ms, sqlq._json_headers(headers), dedup_key, "group",
                   run_at)
$f$;


-- Many messages to one queue with the same options; their ids in order.
-- Three names, not three overloads: a client that binds a list of strings
-- sends it untyped, which PostgreSQL could not match to one of several
-- array types.
CREATE OR REPLACE FUNCTION sqlq.send_batch_bytes(
    queue text, payloads bytea[], priority integer DEFAULT 0,
    delay_ms bigint DEFAULT 0, headers jsonb DEFAULT NULL,
    dedup_keys text[] DEFAULT NULL, "group" text DEFAULT NULL,
    run_at timestamptz DEFAULT NULL)
RETURNS SETOF bigint LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$
DECLARE
  n integer := coalesce(cardinality(payloads), 0);
  r record;
  v_queue_id bigint;
  v_stored bigint := 0;
BEGIN
  IF n < 1 THEN
    RAISE EXCEPTION 'sqlq: a batch needs at least one message'
      USING ERRCODE = 'SQ400';
  END IF;
  IF n > 10000 THEN
    RAISE EXCEPTION 'sqlq: batch of % messages exceeds 10000', n
      USING ERRCODE = 'SQ413';
  END IF;
  IF dedup_keys IS NOT NULL AND cardinality(dedup_keys) <> n THEN
    RAISE EXCEPTION 'sqlq: % dedup keys for % payloads', cardinality(dedup_keys), n
      USING ERRCODE = 'SQ400';
  END IF;
  FOR i IN 1..n LOOP
    BEGIN
      r := sqlq._send(queue, payloads[i], priority, delay_ms, headers,
                      dedup_keys[i], "group", run_at);
    EXCEPTION WHEN SQLSTATE 'SQ400' OR SQLSTATE 'SQ413' THEN
      RAISE EXCEPTION 'message %: %', i, SQLERRM USING ERRCODE = SQLSTATE;
    END;
    v_queue_id := r.o_queue_id;
    IF r.o_stored THEN v_stored := v_stored + 1; END IF;
    RETURN NEXT r.o_id;
  END LOOP;
  PERFORM sqlq._sent(v_queue_id, v_stored);
END
$f$;

CREATE OR REPLACE FUNCTION sqlq.send_batch(
    queue text, payloads text[], priority integer DEFAULT 0,
    delay_ms bigint DEFAULT 0, headers jsonb DEFAULT NULL,
    dedup_keys text[] DEFAULT NULL, "group" text DEFAULT NULL,
    run_at timestamptz DEFAULT NULL)
RETURNS SETOF bigint LANGUAGE sql SET search_path FROM CURRENT AS $f$
  SELECT sqlq.send_batch_bytes(queue,
    ARRAY(SELECT convert_to(p, 'UTF8') FROM unnest(payloads) AS p),
    priority, delay_ms, headers, dedup_keys, "group", run_at)
$f$;

CREATE OR REPLACE FUNCTION sqlq.send_batch_json(
    queue text, payloads jsonb[], priority integer DEFAULT 0,
    delay_ms bigint DEFAULT 0, headers jsonb DEFAULT NULL,
    dedup_keys text[] DEFAULT NULL, "group" text DEFAULT NULL,
    run_at timestamptz DEFAULT NULL)
RETURNS SETOF bigint LANGUAGE sql SET search_path FROM CURRENT AS $f$
  SELECT sqlq.send_batch_bytes(queue,
    ARRAY(SELECT convert_to(p::text, 'UTF8') FROM unnest(payloads) AS p),
    priority, delay_ms, sqlq._json_headers(headers), dedup_keys, "group",
    run_at)
$f$;

-- Acks a claimed message by the receipt its claim returned: removed (or
-- archived), its dedup key held for the queue's window, counted; a receipt
-- whose lease was lost is refused (SQ409) and changes nothing.
CREATE OR REPLACE FUNCTION sqlq.ack(queue text, receipt text)
RETURNS void LANGUAGE plpgsql SET search_path FROM CURRENT AS $f$
DECLARE
  q record;
  m text[];
  v_id bigint;
  v_attempt bigint;
  v_token bigint;
  v_dedup bytea;
  v_found boolean := false;
  now_us bigint := (extract(epoch FROM now()) * 1000000)::bigint;
BEGIN
  m := regexp_match(receipt, '^([0-9]{1,19})-([0-9]{1,10})-([0-9a-fA-F]{16})$');
  IF m IS NULL OR m[1]::numeric > 9223372036854775807
     OR m[1]::bigint <= 0 OR m[2]::bigint <= 0 OR m[2]::bigint > 2147483647
     OR lower(m[3]) = '0000000000000000' THEN
    RAISE EXCEPTION 'sqlq: malformed receipt ''%'': expected ID-ATTEMPT-TOKEN as printed by claim',
      left(receipt, 80) USING ERRCODE = 'SQ400';
  END IF;
  v_id := m[1]::bigint;
  v_attempt := m[2]::bigint;
  v_token := ('x' || m[3])::bit(64)::bigint;
  SELECT id, kind, archive, unique_for_us, group_mode, group_limit,
         max_leased INTO q
    FROM sqlq_queues WHERE name = queue FOR KEY SHARE;
  IF NOT FOUND OR q.kind <> 'queue' THEN
    RAISE EXCEPTION 'sqlq: queue ''%'' not found', queue USING ERRCODE = 'SQ404';
  END IF;
  IF q.archive THEN
    WITH d AS (
      DELETE FROM sqlq_messages
      WHERE id = v_id AND queue_id + 0 = q.id AND token = v_token
        AND attempts = v_attempt
      RETURNING id, queue_id, priority, attempts, enqueued_us, worker,
                payload, headers, errors, dedup),
    a AS (
      INSERT INTO sqlq_archive (id, queue_id, priority, attempts,
        enqueued_us, completed_us, worker, payload, headers, errors)
      SELECT id, queue_id, priority, attempts, enqueued_us, now_us, worker,
             payload, headers, errors FROM d)
    SELECT true, dedup INTO v_found, v_dedup FROM d;
  ELSE
    DELETE FROM sqlq_messages
      WHERE id = v_id AND queue_id + 0 = q.id AND token = v_token
        AND attempts = v_attempt
      RETURNING true, dedup INTO v_found, v_dedup;
  END IF;
  IF NOT coalesce(v_found, false) THEN
    IF EXISTS (SELECT 1 FROM sqlq_messages WHERE id = v_id AND queue_id = q.id)
    THEN
      RAISE EXCEPTION 'sqlq: stale receipt ''%'': the message''s lease was lost (it expired and the message was claimed again, or it was nacked)',
        receipt USING ERRCODE = 'SQ409';
    END IF;
    RAISE EXCEPTION 'sqlq: message % is not in queue ''%'' (acked, dead-lettered or never there)',
      v_id, queue USING ERRCODE = 'SQ404';
  END IF;
  IF q.unique_for_us > 0 AND v_dedup IS NOT NULL THEN
    INSERT INTO sqlq_dedup_holds (queue_id, dedup, message_id, until_us)
      VALUES (q.id, v_dedup, v_id, now_us + q.unique_for_us)
      ON CONFLICT (queue_id, dedup) DO UPDATE
        SET message_id = excluded.message_id, until_us = excluded.until_us;
  END IF;
  INSERT INTO sqlq_counter_deltas (queue_id, acks) VALUES (q.id, 1);
  -- An ack may let a message through that waited for its group or for a
  -- limit: waiting claims elsewhere look again.
  IF q.group_mode = 2 OR q.group_limit > 0 OR q.max_leased > 0 THEN
    PERFORM pg_notify('sqlq_changes', 'sql');
  END IF;
END
$f$;

-- Which store these functions serve: the schema of sqlq's tables they find.
-- A second store in another schema of the database leaves them alone
-- (kSqlApiMigration).
DO $c$
BEGIN
  EXECUTE format('COMMENT ON FUNCTION sqlq._send(text, bytea, integer, '
                 'bigint, jsonb, text, text, timestamptz) IS %L',
                 'sqlq store in schema ' || current_schema());
END
$c$;
)sql";

// Pins each function of the API to the store's schema: the schema the
// installing session creates tables in (current_schema(), as the COMMENT
// above records), quoted by format's %I, never spliced in as text. Runs
// after kSqlApi, which (re)creates them with a path that is not safe.
//
// Whoever owns the schema sqlq may drop and replace any function in it, and
// callers would run the replacement with their own rights. kSqlApi takes
// the schema as it finds it (CREATE SCHEMA IF NOT EXISTS), so when it
// belongs to another role (one this user does not act as, and no
// superuser), made there before sqlq, the functions this user made there
// are dropped again, with a NOTICE.
inline constexpr char kSqlApiPin[] = R"sql(
DO $p$
DECLARE
  f record;
  foreign_owner name;
BEGIN
  SELECT r.rolname INTO foreign_owner
    FROM pg_catalog.pg_namespace n
    JOIN pg_catalog.pg_roles r ON r.oid = n.nspowner
    WHERE n.nspname = 'sqlq' AND NOT r.rolsuper
      AND NOT pg_catalog.pg_has_role(r.oid, 'USAGE');
  FOR f IN SELECT p.oid::regprocedure AS sig, p.proowner FROM pg_catalog.pg_proc p
      WHERE p.pronamespace = 'sqlq'::regnamespace
        AND p.proname IN ('_send', '_sent', 'send', '_json_headers',
                          'send_batch_bytes', 'send_batch', 'send_batch_json',
                          'ack')
  LOOP
    IF foreign_owner IS NULL THEN
      EXECUTE pg_catalog.format(
        'ALTER FUNCTION %s SET search_path = pg_catalog, %I, pg_temp', f.sig,
        pg_catalog.current_schema());
    ELSIF pg_catalog.pg_has_role(f.proowner, 'USAGE') THEN
      EXECUTE pg_catalog.format('DROP FUNCTION %s', f.sig);
    END IF;
  END LOOP;
  IF foreign_owner IS NOT NULL THEN
    RAISE NOTICE 'sqlq: the SQL-level API was not installed: the schema sqlq belongs to the role %, which could replace its functions; see docs/sql-api.md',
      foreign_owner;
  END IF;
END
$p$;
)sql";

// Migration 14: the functions, or a NOTICE saying why not when the user may
// not create them; nothing else of sqlq depends on them.
// Functions that serve a store in another schema of the same database are
// not replaced: the API serves one store per database.
inline constexpr auto kSqlApiMigrationText = shared::Joined(
    "DO $m$ DECLARE serves text; BEGIN "
    "SELECT obj_description(p.oid, 'pg_proc') INTO serves FROM pg_proc p "
    "JOIN pg_namespace n ON n.oid = p.pronamespace "
    "WHERE n.nspname = 'sqlq' AND p.proname = '_send'; "
    "IF serves IS DISTINCT FROM NULL AND serves <> "
    "'sqlq store in schema ' || current_schema() THEN "
    "RAISE NOTICE 'sqlq: the SQL-level API of this database serves the % "
    "(not installed for this store; see docs/sql-api.md)', serves; "
    "RETURN; END IF; EXECUTE $api$",
    kSqlApi,
    "$api$; EXCEPTION WHEN insufficient_privilege THEN RAISE NOTICE "
    "'sqlq: the SQL-level API (schema sqlq) was not installed: %; "
    "see docs/sql-api.md', SQLERRM; END $m$;");
inline constexpr const char* kSqlApiMigration = kSqlApiMigrationText.data();

// Migration 15: pins the functions migration 14 made (kSqlApiPin), if they
// serve this store. Functions an administrator installed belong to them:
// the store's user gets a NOTICE that says to install them again with
// `sqlq sql-api`, whose text pins them.
inline constexpr auto kSqlApiPinMigrationText = shared::Joined(
    "DO $m$ DECLARE serves text; BEGIN "
    "SELECT pg_catalog.obj_description(p.oid, 'pg_proc') INTO serves "
    "FROM pg_catalog.pg_proc p "
    "JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace "
    "WHERE n.nspname = 'sqlq' AND p.proname = '_send'; "
    "IF serves IS DISTINCT FROM "
    "'sqlq store in schema ' || pg_catalog.current_schema() THEN "
    "RETURN; END IF; EXECUTE $pin$",
    kSqlApiPin,
    "$pin$; EXCEPTION WHEN insufficient_privilege THEN RAISE NOTICE "
    "'sqlq: the SQL-level API (schema sqlq) was not made safe from callers'' "
    "search_path: %; install it again with the SQL of sqlq sql-api, see "
    "docs/sql-api.md', SQLERRM; END $m$;");
inline constexpr const char* kSqlApiPinMigration =
    kSqlApiPinMigrationText.data();

// Migration 23's functions: the ack releases the acked message's dependents
// as the library's ack does (engines/shared/sql_deps.h), and a topic can be
// published to (core/topic.cc). Created without a search_path of their own:
// kSqlApiPin23, which pins them, always follows in the same transaction.
inline constexpr char kSqlApi23Rest[] = R"sql(
-- The checks of a message that do not depend on its queue, as _send makes
-- them (a publish makes them once, before it reads the subscriptions, as
-- the library validates a publish before its transaction).
CREATE OR REPLACE FUNCTION sqlq._check(
    p_payload bytea, p_priority integer, p_delay_ms bigint, p_headers jsonb,
    p_dedup text, p_group text, p_run_at timestamptz)
RETURNS void LANGUAGE plpgsql AS $f$
DECLARE
  now_us bigint := (extract(epoch FROM now()) * 1000000)::bigint;
  v_dedup bytea := convert_to(nullif(p_dedup, ''), 'UTF8');
  v_total bigint := 0;
  v_count integer := 0;
  kv record;
BEGIN
  IF p_payload IS NULL THEN
    RAISE EXCEPTION 'sqlq: the payload must not be NULL' USING ERRCODE = 'SQ400';
  END IF;
  IF p_priority IS NULL OR p_delay_ms IS NULL THEN
    RAISE EXCEPTION 'sqlq: priority and delay_ms must not be NULL'
      USING ERRCODE = 'SQ400';
  END IF;
  IF p_delay_ms < 0 OR p_delay_ms > 31536000000 THEN
    RAISE EXCEPTION 'sqlq: delay %ms is out of range [0ms, 31536000000ms]',
      p_delay_ms USING ERRCODE = 'SQ400';
  END IF;
  IF octet_length(v_dedup) > 255 THEN
    RAISE EXCEPTION 'sqlq: dedup key of % bytes is longer than 255',
      octet_length(v_dedup) USING ERRCODE = 'SQ400';
  END IF;
  IF octet_length(p_group) > 255 THEN
    RAISE EXCEPTION 'sqlq: group of % bytes is longer than 255',
      octet_length(p_group) USING ERRCODE = 'SQ400';
  END IF;
  IF p_run_at IS NOT NULL THEN
    IF p_delay_ms <> 0 THEN
      RAISE EXCEPTION 'sqlq: a message takes a delay or a run_at time, not both'
        USING ERRCODE = 'SQ400';
    END IF;
    IF abs((extract(epoch FROM p_run_at) * 1000000)::bigint - now_us)
       > 31536000000000 THEN
      RAISE EXCEPTION 'sqlq: run_at is more than 365 days from now'
        USING ERRCODE = 'SQ400';
    END IF;
  END IF;
  IF p_headers IS NOT NULL THEN
    IF jsonb_typeof(p_headers) <> 'object' THEN
      RAISE EXCEPTION 'sqlq: headers must be a JSON object of strings'
        USING ERRCODE = 'SQ400';
    END IF;
    FOR kv IN SELECT key, value FROM jsonb_each(p_headers) LOOP
      IF jsonb_typeof(kv.value) <> 'string' THEN
        RAISE EXCEPTION 'sqlq: header ''%'' must have a string value', kv.key
          USING ERRCODE = 'SQ400';
      END IF;
      IF kv.key !~ '^[A-Za-z0-9_.:-]{1,128}$' THEN
        RAISE EXCEPTION 'sqlq: header name ''%'' must be 1 to 128 letters, digits, ''_'', ''-'', ''.'' or '':''',
          left(kv.key, 80) USING ERRCODE = 'SQ400';
      END IF;
      IF octet_length(kv.value #>> '{}') > 4096 THEN
        RAISE EXCEPTION 'sqlq: header ''%'' has a value of % bytes, more than 4096',
          kv.key, octet_length(kv.value #>> '{}') USING ERRCODE = 'SQ400';
      END IF;
      v_total := v_total + octet_length(kv.key) + octet_length(kv.value #>> '{}');
      v_count := v_count + 1;
    END LOOP;
    IF v_count > 64 THEN
      RAISE EXCEPTION 'sqlq: % headers are more than the 64 allowed', v_count
        USING ERRCODE = 'SQ400';
    END IF;
    IF v_total > 16384 THEN
      RAISE EXCEPTION 'sqlq: headers of % bytes (names and values) exceed 16384',
        v_total USING ERRCODE = 'SQ400';
    END IF;
  END IF;
END
$f$;

-- One message to every queue subscribed to the topic whose filter its
-- headers match (each of the filter's headers with exactly that value), in
-- name order, as each queue's own send would store it; one row per
-- delivery. The topic's row is locked first (as a subscribe or unsubscribe
-- locks it), then the subscribed queues' (a drop of one waits for this
-- transaction; one dropped before is not read). An error undoes every
-- delivery: the function's statements fail together.
CREATE OR REPLACE FUNCTION sqlq._publish(
    p_topic text, p_payload bytea, p_priority integer, p_delay_ms bigint,
    p_headers jsonb, p_dedup text, p_group text, p_run_at timestamptz)
RETURNS TABLE (o_queue text, o_id bigint, o_duplicate boolean)
LANGUAGE plpgsql AS $f$
DECLARE
  v_topic record;
  v_sub record;
  r record;
BEGIN
  SELECT id, kind INTO v_topic
    FROM sqlq_queues WHERE name = p_topic FOR KEY SHARE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'sqlq: topic ''%'' not found', left(p_topic, 80)
      USING ERRCODE = 'SQ404';
  END IF;
  IF v_topic.kind <> 'topic' THEN
    RAISE EXCEPTION 'sqlq: ''%'' is a %, not a topic', left(p_topic, 80),
      v_topic.kind USING ERRCODE = 'SQ404';
  END IF;
  PERFORM sqlq._check(p_payload, p_priority, p_delay_ms, p_headers, p_dedup,
                      p_group, p_run_at);
  FOR v_sub IN
    SELECT qq.name, qq.max_payload
      FROM sqlq_subscriptions ss JOIN sqlq_queues qq ON qq.id = ss.queue_id
      WHERE ss.topic_id = v_topic.id AND qq.kind = 'queue'
        AND coalesce(p_headers, '{}'::jsonb)
            @> coalesce(nullif(ss.header_filter, '')::jsonb, '{}'::jsonb)
      ORDER BY qq.name
      FOR KEY SHARE OF qq
  LOOP
    IF octet_length(p_payload) > v_sub.max_payload THEN
      RAISE EXCEPTION 'sqlq: queue ''%'': payload of % bytes exceeds the queue''s limit of % bytes',
        v_sub.name, octet_length(p_payload), v_sub.max_payload
        USING ERRCODE = 'SQ413';
    END IF;
    r := sqlq._send(v_sub.name, p_payload, p_priority, p_delay_ms, p_headers,
                    p_dedup, p_group, p_run_at);
    PERFORM sqlq._sent(r.o_queue_id, CASE WHEN r.o_stored THEN 1 ELSE 0 END);
    o_queue := v_sub.name;
    o_id := r.o_id;
    o_duplicate := NOT r.o_stored;
    RETURN NEXT;
  END LOOP;
END
$f$;

CREATE OR REPLACE FUNCTION sqlq.publish(
    topic text, payload bytea, priority integer DEFAULT 0,
    delay_ms bigint DEFAULT 0, headers jsonb DEFAULT NULL,
    dedup_key text DEFAULT NULL, "group" text DEFAULT NULL,
    run_at timestamptz DEFAULT NULL)
RETURNS TABLE (queue text, id bigint, duplicate boolean)
LANGUAGE sql AS $f$
  SELECT * FROM sqlq._publish(topic, payload, priority, delay_ms, headers,
                              dedup_key, "group", run_at)
$f$;

CREATE OR REPLACE FUNCTION sqlq.publish(
    topic text, payload text, priority integer DEFAULT 0,
    delay_ms bigint DEFAULT 0, headers jsonb DEFAULT NULL,
    dedup_key text DEFAULT NULL, "group" text DEFAULT NULL,
    run_at timestamptz DEFAULT NULL)
RETURNS TABLE (queue text, id bigint, duplicate boolean)
LANGUAGE sql AS $f$
  SELECT * FROM sqlq._publish(topic, convert_to(payload, 'UTF8'), priority,
                              delay_ms, headers, dedup_key, "group", run_at)
$f$;

-- A JSON payload: stored as its text, with content-type: application/json.
CREATE OR REPLACE FUNCTION sqlq.publish(
    topic text, payload jsonb, priority integer DEFAULT 0,
    delay_ms bigint DEFAULT 0, headers jsonb DEFAULT NULL,
    dedup_key text DEFAULT NULL, "group" text DEFAULT NULL,
    run_at timestamptz DEFAULT NULL)
RETURNS TABLE (queue text, id bigint, duplicate boolean)
LANGUAGE sql AS $f$
  SELECT * FROM sqlq._publish(topic, convert_to(payload::text, 'UTF8'),
                              priority, delay_ms, sqlq._json_headers(headers),
                              dedup_key, "group", run_at)
$f$;

)sql";

// Migration 23's ack, as released, in pieces that migration 24's ack reuses.
inline constexpr char kAckHead[] =
    R"sql(-- Acks a claimed message by the receipt its claim returned: removed (or
-- archived), its dedup key held for the queue's window, counted; a receipt
-- whose lease was lost is refused (SQ409) and changes nothing. In a queue
-- whose messages others were ever made to wait for (its dependents flag),
-- each message waiting for this one waits for one less, and one that waits
-- for none is ready now, as the library's ack does (sql_deps.h): the flag
-- is read under the share lock on the queue's row, which the flag's write
-- waits for, and each dependent's row is updated as it is now (READ
-- COMMITTED: the update waits for its row lock and reads the row again),
-- so that two parents acked at once release it once.
CREATE OR REPLACE FUNCTION sqlq.ack(queue text, receipt text)
RETURNS void LANGUAGE plpgsql AS $f$
DECLARE
  q record;
  m text[];
  v_id bigint;
  v_attempt bigint;
  v_token bigint;
  v_dedup bytea;
  v_found boolean := false;
  v_released bigint := 0;
)sql";
inline constexpr char kAckNow[] =
    R"sql(  now_us bigint := (extract(epoch FROM now()) * 1000000)::bigint;
BEGIN
  m := regexp_match(receipt, '^([0-9]{1,19})-([0-9]{1,10})-([0-9a-fA-F]{16})$');
  IF m IS NULL OR m[1]::numeric > 9223372036854775807
     OR m[1]::bigint <= 0 OR m[2]::bigint <= 0 OR m[2]::bigint > 2147483647
     OR lower(m[3]) = '0000000000000000' THEN
    RAISE EXCEPTION 'sqlq: malformed receipt ''%'': expected ID-ATTEMPT-TOKEN as printed by claim',
      left(receipt, 80) USING ERRCODE = 'SQ400';
  END IF;
  v_id := m[1]::bigint;
  v_attempt := m[2]::bigint;
  v_token := ('x' || m[3])::bit(64)::bigint;
  SELECT id, kind, archive, unique_for_us, group_mode, group_limit,
         max_leased, dependents INTO q
    FROM sqlq_queues WHERE name = queue FOR KEY SHARE;
  IF NOT FOUND OR q.kind <> 'queue' THEN
    RAISE EXCEPTION 'sqlq: queue ''%'' not found', queue USING ERRCODE = 'SQ404';
  END IF;
  -- A REPEATABLE READ snapshot taken before a send linked a dependent to
  -- this message would not see the link, and the release would miss it.
  IF q.dependents <> 0
     AND current_setting('transaction_isolation') = 'repeatable read' THEN
    RAISE EXCEPTION 'sqlq: an ack in queue ''%'', whose messages others depend on, needs READ COMMITTED or SERIALIZABLE isolation, not REPEATABLE READ',
      queue USING ERRCODE = 'SQ400';
  END IF;
  IF q.archive THEN
    WITH d AS (
      DELETE FROM sqlq_messages
      WHERE id = v_id AND queue_id + 0 = q.id AND token = v_token
        AND attempts = v_attempt
      RETURNING id, queue_id, priority, attempts, enqueued_us, worker,
                payload, headers, errors, dedup),
    a AS (
      INSERT INTO sqlq_archive (id, queue_id, priority, attempts,
        enqueued_us, completed_us, worker, payload, headers, errors)
      SELECT id, queue_id, priority, attempts, enqueued_us, now_us, worker,
             payload, headers, errors FROM d)
    SELECT true, dedup INTO v_found, v_dedup FROM d;
  ELSE
    DELETE FROM sqlq_messages
      WHERE id = v_id AND queue_id + 0 = q.id AND token = v_token
        AND attempts = v_attempt
      RETURNING true, dedup INTO v_found, v_dedup;
  END IF;
  IF NOT coalesce(v_found, false) THEN
    IF EXISTS (SELECT 1 FROM sqlq_messages WHERE id = v_id AND queue_id = q.id)
    THEN
      RAISE EXCEPTION 'sqlq: stale receipt ''%'': the message''s lease was lost (it expired and the message was claimed again, or it was nacked)',
        receipt USING ERRCODE = 'SQ409';
    END IF;
    RAISE EXCEPTION 'sqlq: message % is not in queue ''%'' (acked, dead-lettered or never there)',
      v_id, queue USING ERRCODE = 'SQ404';
  END IF;
)sql";
inline constexpr char kAckRefusesBatches[] =
    R"sql(  -- A member of a batch (OnDead::kBatch, 3): its ack also counts it in
  -- the batch, which only the library does.
  IF q.dependents <> 0 AND EXISTS (SELECT 1 FROM sqlq_deps
                                   WHERE parent_id = v_id AND on_dead = 3) THEN
    RAISE EXCEPTION 'sqlq: message % is a member of a batch, whose counts only the library keeps: ack it through the library, the HTTP API, the CLI or a client',
      v_id USING ERRCODE = 'SQ400';
  END IF;
)sql";
inline constexpr char kAckMiddle[] =
    R"sql(  IF q.unique_for_us > 0 AND v_dedup IS NOT NULL THEN
    INSERT INTO sqlq_dedup_holds (queue_id, dedup, message_id, until_us)
      VALUES (q.id, v_dedup, v_id, now_us + q.unique_for_us)
      ON CONFLICT (queue_id, dedup) DO UPDATE
        SET message_id = excluded.message_id, until_us = excluded.until_us;
  END IF;
  INSERT INTO sqlq_counter_deltas (queue_id, acks) VALUES (q.id, 1);
  -- Its dependents, by the primary key of sqlq_deps (parent_id first). No
  -- link to it can be added meanwhile: a send's link locks its row, which
  -- this transaction deleted.
)sql";
inline constexpr char kAckRelease23[] = R"sql(  IF q.dependents <> 0 THEN
    WITH c AS (DELETE FROM sqlq_deps WHERE parent_id = v_id
               RETURNING child_id)
    UPDATE sqlq_messages AS w
      SET ready_us = CASE WHEN w.waits = 1 THEN now_us ELSE w.ready_us END,
          waits = w.waits - 1
      FROM c WHERE w.id = c.child_id AND w.waits > 0;
    GET DIAGNOSTICS v_released = ROW_COUNT;
  END IF;
)sql";
inline constexpr char kAckTail[] =
    R"sql(  -- An ack may let a message through that waited for its group or for a
  -- limit, or release dependents: waiting claims elsewhere look again.
  IF q.group_mode = 2 OR q.group_limit > 0 OR q.max_leased > 0
     OR v_released > 0 THEN
    PERFORM pg_notify('sqlq_changes', 'sql');
  END IF;
END
$f$;
)sql";

// Migration 24's ack.
inline constexpr char kAckComment24[] = R"sql(
-- Migration 24's ack is migration 23's, and a member of a batch is counted
-- in its batch (completed) by the callback its ack releases: the
-- callback's row, then the batch's row are locked, in that order, as the
-- library's ack locks them (engines/shared/sql_batches.h); the ack of the
-- last member marks the batch done and writes the counts into the
-- callback's headers (core/batches.cc).
)sql";
inline constexpr char kAckDeclares24[] = R"sql(  v_callback bigint;
  b record;
)sql";
inline constexpr char kAckRelease24[] =
    R"sql(  -- The callback of its batch, when it is a member of one, is the
  -- dependent linked with on_dead 3 (OnDead::kBatch).
  IF q.dependents <> 0 THEN
    WITH c AS (DELETE FROM sqlq_deps WHERE parent_id = v_id
               RETURNING child_id, on_dead),
    r AS (UPDATE sqlq_messages AS w
      SET ready_us = CASE WHEN w.waits = 1 THEN now_us ELSE w.ready_us END,
          waits = w.waits - 1
      FROM c WHERE w.id = c.child_id AND w.waits > 0 RETURNING w.id)
    SELECT (SELECT count(*) FROM r),
           (SELECT min(child_id) FROM c WHERE on_dead = 3)
      INTO v_released, v_callback;
  END IF;
  IF v_callback IS NOT NULL THEN
    UPDATE sqlq_batches SET completed = completed + 1
      WHERE callback_id = v_callback
      RETURNING id, total, completed, dead, cancelled, done_us INTO b;
    -- No row: the batch was forgotten with its callback's queue.
    IF FOUND THEN
      IF b.done_us IS NULL
         AND b.completed + b.dead + b.cancelled >= b.total THEN
        UPDATE sqlq_messages
          SET headers = coalesce(headers, '{}'::jsonb) || jsonb_build_object(
                'sqlq:batch_total', b.total::text,
                'sqlq:batch_completed', b.completed::text,
                'sqlq:batch_dead', b.dead::text,
                'sqlq:batch_cancelled', b.cancelled::text)
          WHERE id = v_callback;
        UPDATE sqlq_batches SET done_us = now_us, expires_us = now_us + ttl_us
          WHERE id = b.id;
      END IF;
    END IF;
  END IF;
)sql";

// kSqlApiPin for every function of the API as it is (kSqlApiPin, migration
// 15's text, names those of migration 14 only).
inline constexpr char kSqlApiPin23[] = R"sql(
DO $p$
DECLARE
  f record;
  foreign_owner name;
BEGIN
  SELECT r.rolname INTO foreign_owner
    FROM pg_catalog.pg_namespace n
    JOIN pg_catalog.pg_roles r ON r.oid = n.nspowner
    WHERE n.nspname = 'sqlq' AND NOT r.rolsuper
      AND NOT pg_catalog.pg_has_role(r.oid, 'USAGE');
  FOR f IN SELECT p.oid::regprocedure AS sig, p.proowner FROM pg_catalog.pg_proc p
      WHERE p.pronamespace = 'sqlq'::regnamespace
        AND p.proname IN ('_send', '_sent', 'send', '_json_headers',
                          'send_batch_bytes', 'send_batch', 'send_batch_json',
                          'ack', '_check', '_publish', 'publish')
  LOOP
    IF foreign_owner IS NULL THEN
      EXECUTE pg_catalog.format(
        'ALTER FUNCTION %s SET search_path = pg_catalog, %I, pg_temp', f.sig,
        pg_catalog.current_schema());
    ELSIF pg_catalog.pg_has_role(f.proowner, 'USAGE') THEN
      EXECUTE pg_catalog.format('DROP FUNCTION %s', f.sig);
    END IF;
  END LOOP;
  IF foreign_owner IS NOT NULL THEN
    RAISE NOTICE 'sqlq: the SQL-level API was not installed: the schema sqlq belongs to the role %, which could replace its functions; see docs/sql-api.md',
      foreign_owner;
  END IF;
END
$p$;
)sql";

// What `sqlq sql-api` prints: the functions and their pinning in one
// transaction, so that no caller finds them unpinned in between.
inline constexpr auto kSqlApiScriptText = shared::Joined(
    "BEGIN;\n", kSqlApi, kSqlApi23Rest, kAckComment24, kAckHead, kAckDeclares24,
    kAckNow, kAckMiddle, kAckRelease24, kAckTail, kSqlApiPin23, "COMMIT;\n");
inline constexpr const char* kSqlApiScript = kSqlApiScriptText.data();

// A migration that makes the functions of `api` (pinned with kSqlApiPin23)
// where the API serves this store (as migration 15 does). Functions an
// administrator installed belong to them: the store's user gets a NOTICE,
// naming `what` was not brought up to date, that says to install them
// again with `sqlq sql-api`; until then they stay as they were.
inline constexpr char kApiGuardHead[] =
    "DO $m$ DECLARE serves text; BEGIN "
    "SELECT pg_catalog.obj_description(p.oid, 'pg_proc') INTO serves "
    "FROM pg_catalog.pg_proc p "
    "JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace "
    "WHERE n.nspname = 'sqlq' AND p.proname = '_send'; "
    "IF serves IS DISTINCT FROM "
    "'sqlq store in schema ' || pg_catalog.current_schema() THEN "
    "RETURN; END IF; EXECUTE $api$";
inline constexpr char kApiGuardNotice[] =
    "$pin$; EXCEPTION WHEN insufficient_privilege THEN RAISE NOTICE "
    "'sqlq: the SQL-level API (schema sqlq) was not brought up to date (";
inline constexpr char kApiGuardTail[] =
    "): %; install it again with "
    "the SQL of sqlq sql-api, see docs/sql-api.md', SQLERRM; END $m$;";
template <std::size_t W, std::size_t... N>
constexpr auto ApiMigration(const char (&what)[W], const char (&... api)[N]) {
  return shared::Joined(kApiGuardHead, api..., "$api$; EXECUTE $pin$",
                        kSqlApiPin23, kApiGuardNotice, what, kApiGuardTail);
}

// Migration 23: the functions of kSqlApi23Rest and the ack, as released.
// Until they are installed, the ack does not release dependents and there
// is no publish.
inline constexpr auto kSqlApi23MigrationText = ApiMigration(
    "the ack''s release of dependents, publish", kSqlApi23Rest, kAckHead,
    kAckNow, kAckRefusesBatches, kAckMiddle, kAckRelease23, kAckTail);
inline constexpr const char* kSqlApi23Migration = kSqlApi23MigrationText.data();

// Migration 24: the ack that counts a member of a batch. Until it is
// installed, the ack refuses a batch's members.
inline constexpr auto kSqlApi24MigrationText =
    ApiMigration("the ack of a batch''s member", kAckComment24, kAckHead,
                 kAckDeclares24, kAckNow, kAckMiddle, kAckRelease24, kAckTail);
inline constexpr const char* kSqlApi24Migration = kSqlApi24MigrationText.data();

}  // namespace sqlq::engines::postgres

#endif  // SQLQ_ENGINES_POSTGRES_SQL_API_H_
