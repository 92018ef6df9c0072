// The SQLite schema, as versioned migrations. Durable-format rules:
//  - A migration, once released, is never edited; changes go in a new one.
//  - sqlq_schema holds the version reached; a database newer than this
//    build is refused rather than guessed at.
//  - Times are integer microseconds since the Unix epoch (store clock).
//  - sqlq_messages.ready_us is when the message may next be claimed: its
//    delay or backoff end while token = 0, its lease expiry while token != 0.
//    One index then serves the claim order for ready messages and expired
//    leases alike (docs/engines/sqlite.md).
//  - Ids come from AUTOINCREMENT so that an id is never reused, not even the
//    largest after it was deleted: a redriven dead letter keeps its id.

#ifndef SQLQ_ENGINES_SQLITE_SCHEMA_H_
#define SQLQ_ENGINES_SQLITE_SCHEMA_H_

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
};

inline constexpr int kSchemaVersion =
    static_cast<int>(sizeof(kMigrations) / sizeof(kMigrations[0]));

}  // namespace sqlq::engines::sqlite

#endif  // SQLQ_ENGINES_SQLITE_SCHEMA_H_
