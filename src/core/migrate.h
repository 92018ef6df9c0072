// The one migration runner: brings a database's sqlq tables to the newest
// schema version an engine knows, the same way for every engine. An engine
// supplies its ordered, versioned steps (its DDL) and the few statements
// the runner needs; the runner decides.
//
// Every engine records its schema in one shape:
//   sqlq_schema (version INTEGER PRIMARY KEY, applied_at ...)
// one row per version applied; the schema's version is the highest.
//
// The rules:
//   - An up-to-date schema is only read: no lock and no DDL, which a role
//     with only SELECT/INSERT/UPDATE/DELETE grants could not run.
//   - A schema newer than the engine knows is refused (kFailedPrecondition):
//     an older sqlq never writes to tables it does not understand.
//   - Without `create`, a database without sqlq's tables is kNotFound, and
//     nothing is created (read-only commands create nothing).
//   - Otherwise the engine's lock is taken (one process migrates; the
//     others wait), the version is read again under it (another process may
//     have migrated meanwhile), and each missing step runs and is recorded
//     in order.

#ifndef SQLQ_CORE_MIGRATE_H_
#define SQLQ_CORE_MIGRATE_H_

#include <cstdint>
#include <string>

#include "sqlq/status.h"

namespace sqlq::core {

// One engine's side of a migration, on one connection.
class MigrationTarget {
 public:
  virtual ~MigrationTarget() = default;
  // The newest version this engine knows (its number of steps).
  virtual std::int64_t latest() const = 0;
  // Names the database in errors ("jobs", "/var/lib/q.db").
  virtual std::string where() const = 0;
  // Starts the migration's transaction, where the engine has one.
  virtual Status Begin() { return Status::Ok(); }
  // The highest version recorded; 0 when sqlq_schema does not exist.
  virtual Result<std::int64_t> RecordedVersion() = 0;
  // Takes the engine's migration lock.
  virtual Status Lock() = 0;
  // Creates sqlq_schema when missing (in the shape above).
  virtual Status CreateSchemaTable() = 0;
  // Runs the step that makes version `version` (1 for the first).
  virtual Status Apply(std::int64_t version) = 0;
  // Records `version` as applied.
  virtual Status Record(std::int64_t version) = 0;
  // Ends the migration: commits (or releases the lock) after `result` OK,
  // rolls back otherwise; returns `result` or the error of ending.
  virtual Status Finish(Status result) = 0;
};

Status Migrate(MigrationTarget& target, bool create);

}  // namespace sqlq::core

#endif  // SQLQ_CORE_MIGRATE_H_
