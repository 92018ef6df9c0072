// The SQLite schema, as versioned migrations. Durable-format rules:
//  - A migration, once released, is never edited; changes go in a new one.
//  - sqlq_schema holds one row per version applied, with its time (the
//    shape every engine uses, core/migrate.h); a database newer than this
//    build is refused rather than guessed at. Before version 3 it held one
//    row, the version reached, without a time; the engine converts such a
//    table before it runs the steps (SqliteEngine::Migrate).
//  - Times are integer microseconds since the Unix epoch (store clock).
//  - sqlq_messages.ready_us is when the message may next be claimed: its
//    delay or backoff end while token = 0, its lease expiry while token != 0.
//    One index then serves the claim order for ready messages and expired
//    leases alike (docs/engines/sqlite.md).
//  - Ids come from AUTOINCREMENT so that an id is never reused, not even the
//    largest after it was deleted: a redriven dead letter keeps its id.

#ifndef SQLQ_ENGINES_SQLITE_SCHEMA_H_
#define SQLQ_ENGINES_SQLITE_SCHEMA_H_

#include "engines/sqlite/sql_api.h"

namespace sqlq::engines::sqlite {

inline constexpr const char* kMigrations[] = {
    // Version 1: work queues.
    R"sql(
CREATE TABLE sqlq_queues (
  id              INTEGER PRIMARY KEY,
  name            TEXT    NOT NULL UNIQUE,
  kind            TEXT    NOT NULL DEFAULT 'queue',
  max_attempts    INTEGER NOT NULL,
  lease_us        INTEGER NOT NULL,
  backoff_base_us INTEGER NOT NULL,
  backoff_max_us  INTEGER NOT NULL,
  archive         INTEGER NOT NULL,
  retention_us    INTEGER NOT NULL,
  max_payload     INTEGER NOT NULL,
  created_us      INTEGER NOT NULL,
  sends           INTEGER NOT NULL DEFAULT 0,
  claims          INTEGER NOT NULL DEFAULT 0,
  acks            INTEGER NOT NULL DEFAULT 0,
  nacks           INTEGER NOT NULL DEFAULT 0,
  expirations     INTEGER NOT NULL DEFAULT 0,
  dead_lettered   INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE sqlq_messages (
  id          INTEGER PRIMARY KEY AUTOINCREMENT,
  queue_id    INTEGER NOT NULL,
  priority    INTEGER NOT NULL,
  ready_us    INTEGER NOT NULL,
  token       INTEGER NOT NULL DEFAULT 0,
  attempts    INTEGER NOT NULL DEFAULT 0,
  enqueued_us INTEGER NOT NULL,
  dedup       TEXT,
  worker      TEXT,
  last_error  TEXT,
  payload     BLOB    NOT NULL
);
CREATE INDEX sqlq_messages_claim
  ON sqlq_messages (queue_id, priority DESC, ready_us, id);
CREATE UNIQUE INDEX sqlq_messages_dedup
  ON sqlq_messages (queue_id, dedup) WHERE dedup IS NOT NULL;
CREATE TABLE sqlq_dead (
  id          INTEGER PRIMARY KEY,
  queue_id    INTEGER NOT NULL,
  priority    INTEGER NOT NULL,
  attempts    INTEGER NOT NULL,
  enqueued_us INTEGER NOT NULL,
  died_us     INTEGER NOT NULL,
  last_error  TEXT    NOT NULL,
  payload     BLOB    NOT NULL
);
CREATE INDEX sqlq_dead_queue ON sqlq_dead (queue_id, id);
CREATE TABLE sqlq_archive (
  id           INTEGER PRIMARY KEY,
  queue_id     INTEGER NOT NULL,
  priority     INTEGER NOT NULL,
  attempts     INTEGER NOT NULL,
  enqueued_us  INTEGER NOT NULL,
  completed_us INTEGER NOT NULL,
  worker       TEXT,
  payload      BLOB    NOT NULL
);
CREATE INDEX sqlq_archive_queue ON sqlq_archive (queue_id, id);
CREATE INDEX sqlq_archive_completed ON sqlq_archive (queue_id, completed_us);
)sql",
    // Version 2: rings and rotations. They share sqlq_queues (kind 'ring' or
    // 'rotation') so that names are one namespace; next_stamp is a
    // rotation's counter, never a clock. A ring group's row outlives its
    // entries (entries = 0) so that its sequence never restarts; the group
    // keeps its entry count so a push evicts exactly the oldest entries
    // over capacity, at O(log n) whatever the capacity.
    R"sql(
ALTER TABLE sqlq_queues ADD COLUMN capacity INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sqlq_queues ADD COLUMN max_failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sqlq_queues ADD COLUMN next_stamp INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sqlq_queues ADD COLUMN pushes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sqlq_queues ADD COLUMN serves INTEGER NOT NULL DEFAULT 0;
CREATE TABLE sqlq_ring_groups (
  ring_id  INTEGER NOT NULL,
  grp      TEXT    NOT NULL,
  last_seq INTEGER NOT NULL,
  entries  INTEGER NOT NULL,
  PRIMARY KEY (ring_id, grp)
) WITHOUT ROWID;
CREATE TABLE sqlq_ring_entries (
  ring_id   INTEGER NOT NULL,
  grp       TEXT    NOT NULL,
  seq       INTEGER NOT NULL,
  pushed_us INTEGER NOT NULL,
  payload   BLOB    NOT NULL,
  PRIMARY KEY (ring_id, grp, seq)
) WITHOUT ROWID;
CREATE TABLE sqlq_rotation_items (
  rotation_id INTEGER NOT NULL,
  key         TEXT    NOT NULL,
  payload     BLOB    NOT NULL,
  added       INTEGER NOT NULL,
  last_served INTEGER NOT NULL DEFAULT 0,
  serves      INTEGER NOT NULL DEFAULT 0,
  failures    INTEGER NOT NULL DEFAULT 0,
  parked      INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (rotation_id, key)
) WITHOUT ROWID;
CREATE INDEX sqlq_rotation_order
  ON sqlq_rotation_items (rotation_id, parked, last_served, added);
)sql",
    // Version 3: no change to the tables of queues; sqlq_schema keeps one
    // row per version with its time from here on (converted before the
    // steps run, which a statement here could not do for every version).
    "SELECT 1",
    // Version 4: headers and error history (core/columns.h): JSON text,
    // NULL while a message has none, kept by a message wherever it goes.
    R"sql(
ALTER TABLE sqlq_messages ADD COLUMN headers TEXT;
ALTER TABLE sqlq_messages ADD COLUMN errors TEXT;
ALTER TABLE sqlq_dead ADD COLUMN headers TEXT;
ALTER TABLE sqlq_dead ADD COLUMN errors TEXT;
ALTER TABLE sqlq_archive ADD COLUMN headers TEXT;
ALTER TABLE sqlq_archive ADD COLUMN errors TEXT;
)sql",
    // Version 5: a queue can be paused, and keep its dead letters for a
    // while only (pruned by time of death, hence the index).
    R"sql(
ALTER TABLE sqlq_queues ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sqlq_queues ADD COLUMN dead_retention_us INTEGER NOT NULL
  DEFAULT 0;
CREATE INDEX sqlq_dead_died ON sqlq_dead (queue_id, died_us);
)sql",
    // Version 6: dedup windows. A queue's window, and the keys held after
    // their message was acked or dead-lettered, until until_us (pruned by
    // that time, hence the index).
    R"sql(
ALTER TABLE sqlq_queues ADD COLUMN unique_for_us INTEGER NOT NULL DEFAULT 0;
CREATE TABLE sqlq_dedup_holds (
  queue_id   INTEGER NOT NULL,
  dedup      TEXT    NOT NULL,
  message_id INTEGER NOT NULL,
  until_us   INTEGER NOT NULL,
  PRIMARY KEY (queue_id, dedup)
) WITHOUT ROWID;
CREATE INDEX sqlq_dedup_holds_until ON sqlq_dedup_holds (queue_id, until_us);
)sql",
    // Version 7: groups. A queue's group mode (0 none, 1 fair, 2 ordered)
    // and each message's group, which follows it into the dead letters;
    // the claims of grouped queues walk the groups through the index
    // (messages without a group are not in it).
    R"sql(
ALTER TABLE sqlq_queues ADD COLUMN group_mode INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sqlq_messages ADD COLUMN grp TEXT;
ALTER TABLE sqlq_dead ADD COLUMN grp TEXT;
CREATE INDEX sqlq_messages_group ON sqlq_messages (queue_id, grp, id)
  WHERE grp IS NOT NULL;
)sql",
    // Version 8: limits (0 for none; rate_u is claims per second times
    // 10^6). A limited queue's claims keep their state in two tables: the
    // rate bucket (tokens_u, claims times 10^6, as of at_us; at_us 0 for a
    // full bucket), and the messages they leased with the lease's token,
    // which is what counts the queue's leases for max_leased (a row whose
    // message no longer carries that live lease counts for nothing).
    R"sql(
ALTER TABLE sqlq_queues ADD COLUMN max_leased INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sqlq_queues ADD COLUMN rate_u INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sqlq_queues ADD COLUMN rate_burst INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sqlq_queues ADD COLUMN group_limit INTEGER NOT NULL DEFAULT 0;
CREATE TABLE sqlq_limits (
  queue_id INTEGER PRIMARY KEY,
  tokens_u INTEGER NOT NULL,
  at_us    INTEGER NOT NULL
);
CREATE TABLE sqlq_leases (
  queue_id   INTEGER NOT NULL,
  message_id INTEGER NOT NULL,
  token      INTEGER NOT NULL,
  PRIMARY KEY (queue_id, message_id)
) WITHOUT ROWID;
)sql",
    // Version 9: schedules (include/sqlq/schedule.h): each with its cron,
    // zone, queue, message and where it stands (next_us, the next tick to
    // send; 0 for none), and the scheduler lease, one row: who holds it
    // until when.
    R"sql(
CREATE TABLE sqlq_schedules (
  id         INTEGER PRIMARY KEY AUTOINCREMENT,
  name       TEXT    NOT NULL UNIQUE,
  cron       TEXT    NOT NULL,
  time_zone  TEXT    NOT NULL,
  queue      TEXT    NOT NULL,
  payload    BLOB    NOT NULL,
  priority   INTEGER NOT NULL,
  headers    TEXT,
  grp        TEXT,
  catch_up   INTEGER NOT NULL,
  paused     INTEGER NOT NULL DEFAULT 0,
  next_us    INTEGER NOT NULL,
  last_us    INTEGER NOT NULL DEFAULT 0,
  sent       INTEGER NOT NULL DEFAULT 0,
  skipped    INTEGER NOT NULL DEFAULT 0,
  last_error TEXT,
  created_us INTEGER NOT NULL
);
CREATE TABLE sqlq_scheduler (
  id       INTEGER PRIMARY KEY,
  holder   TEXT    NOT NULL,
  until_us INTEGER NOT NULL
);
INSERT INTO sqlq_scheduler (id, holder, until_us) VALUES (1, '', 0);
)sql",
    // Version 10: a queue's dead-letter queue ('' for none) and labels
    // (core/columns.h's header text, NULL for none).
    R"sql(
ALTER TABLE sqlq_queues ADD COLUMN dead_letter_queue TEXT NOT NULL DEFAULT '';
ALTER TABLE sqlq_queues ADD COLUMN labels TEXT;
)sql",
    // Version 11: the claims waiting for each queue in each process, as
    // each reports them (core/waiting_report.h).
    R"sql(
CREATE TABLE sqlq_waiting (
  process     TEXT    NOT NULL,
  queue_id    INTEGER NOT NULL,
  waiting     INTEGER NOT NULL,
  reported_us INTEGER NOT NULL,
  PRIMARY KEY (process, queue_id)
) WITHOUT ROWID;
)sql",
    // Version 12: the SQL-level API, the views sqlq_send and sqlq_ack and
    // their triggers (sql_api.h, docs/sql-api.md).
    kSqlApi12,
    // Version 13: how many times each message was snoozed (a handler's
    // "not now", NackAction::kSnooze), which bounds the snoozes that give
    // back their attempt.
    R"sql(
ALTER TABLE sqlq_messages ADD COLUMN snoozes INTEGER NOT NULL DEFAULT 0;
)sql",
    // Version 14: live workers, each one's last report (core/workers.cc
    // encodes `info`) and when it runs out.
    R"sql(
CREATE TABLE sqlq_workers (
  id         TEXT    NOT NULL PRIMARY KEY,
  info       TEXT    NOT NULL,
  seen_us    INTEGER NOT NULL,
  expires_us INTEGER NOT NULL
) WITHOUT ROWID;
)sql",
    // Version 15: jobs' results and progress (engines/shared/sql_results.h),
    // each kept until expires_us.
    R"sql(
CREATE TABLE sqlq_results (
  queue_id     INTEGER NOT NULL,
  message_id   INTEGER NOT NULL,
  progress     TEXT,
  progress_us  INTEGER,
  result       BLOB,
  completed_us INTEGER,
  expires_us   INTEGER NOT NULL,
  PRIMARY KEY (queue_id, message_id)
) WITHOUT ROWID;
CREATE INDEX sqlq_results_expiry ON sqlq_results (expires_us);
)sql",
    // Version 16: dependencies (engines/shared/sql_deps.h). A message
    // waiting for others has waits > 0 (how many have not completed) and
    // ready_us = kWaitingUs; sqlq_deps holds one row per message it waits
    // for (on_dead: what a death of that one does to it, 0 cancel, 1 run,
    // 2 wait; parked: that one died and it waits for a redrive). A queue's
    // dependents = 1 once any message waited for one of its messages: only
    // the acks of such queues look for dependents to release.
    R"sql(
ALTER TABLE sqlq_queues ADD COLUMN dependents INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sqlq_messages ADD COLUMN waits INTEGER NOT NULL DEFAULT 0;
CREATE TABLE sqlq_deps (
  parent_id       INTEGER NOT NULL,
  child_id        INTEGER NOT NULL,
  parent_queue_id INTEGER NOT NULL,
  child_queue_id  INTEGER NOT NULL,
  on_dead         INTEGER NOT NULL,
  parked          INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (parent_id, child_id)
) WITHOUT ROWID;
CREATE INDEX sqlq_deps_child ON sqlq_deps (child_id);
CREATE INDEX sqlq_deps_parent_queue ON sqlq_deps (parent_queue_id);
)sql",
    // Version 17: topics (engines/shared/sql_topics.h). A topic is a row of
    // sqlq_queues of kind 'topic' (one namespace with queues); each queue
    // subscribed to it is a row here, with its header filter (core/columns.h's
    // header text, NULL for none: every message). Without foreign keys, a drop
    // of the topic or the queue deletes its rows (by the index on queue_id).
    R"sql(
CREATE TABLE sqlq_subscriptions (
  topic_id      INTEGER NOT NULL,
  queue_id      INTEGER NOT NULL,
  header_filter TEXT,
  subscribed_us INTEGER NOT NULL,
  PRIMARY KEY (topic_id, queue_id)
) WITHOUT ROWID;
CREATE INDEX sqlq_subscriptions_queue ON sqlq_subscriptions (queue_id);
)sql",
    // Version 18 (counter `expired`): each queue's jobs not started by their
    // expiry (Message::expire_after), dead-lettered or dropped.
    R"sql(
ALTER TABLE sqlq_queues ADD COLUMN expired INTEGER NOT NULL DEFAULT 0;
)sql",
    // Version 19: batches (engines/shared/sql_batches.h). One row per batch,
    // found by its name and by its callback's id (NULL until the send that
    // made it links the callback); the members' ends add to its counts;
    // done_us and expires_us are set when the last one ended, and expired
    // rows are pruned by expires_us. The members' queue names are a JSON
    // array. Dropping the callback's queue deletes its batches (by the index
    // on callback_queue_id).
    R"sql(
CREATE TABLE sqlq_batches (
  id                INTEGER PRIMARY KEY,
  name              TEXT    NOT NULL UNIQUE,
  callback_id       INTEGER UNIQUE,
  callback_queue_id INTEGER NOT NULL,
  queues            TEXT    NOT NULL,
  total             INTEGER NOT NULL,
  completed         INTEGER NOT NULL,
  dead              INTEGER NOT NULL,
  cancelled         INTEGER NOT NULL,
  created_us        INTEGER NOT NULL,
  ttl_us            INTEGER NOT NULL,
  cancel_us         INTEGER,
  done_us           INTEGER,
  expires_us        INTEGER
);
CREATE INDEX sqlq_batches_queue ON sqlq_batches (callback_queue_id);
CREATE INDEX sqlq_batches_expiry ON sqlq_batches (expires_us);
)sql",
    // Version 20: the SQL-level API's ack releases dependents, and the
    // view sqlq_publish publishes to a topic (sql_api.h, kSqlApi20).
    kSqlApi20,
    // Version 21: the SQL-level API's ack counts a member of a batch in its
    // batch (sql_api.h, kAckCountsBatches21).
    kSqlApi21,
};

inline constexpr int kSchemaVersion =
    static_cast<int>(sizeof(kMigrations) / sizeof(kMigrations[0]));

}  // namespace sqlq::engines::sqlite

#endif  // SQLQ_ENGINES_SQLITE_SCHEMA_H_
