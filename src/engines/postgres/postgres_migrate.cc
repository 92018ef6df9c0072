// PostgreSQL engine: the schema's steps run by core::Migrate, and the writable
// check.

#include "engines/postgres/postgres_engine_impl.h"

namespace sqlq::engines::postgres {

Status PostgresEngine::TouchSchema(Conn& c) {
  // A new row version of the newest schema row: WAL the commit flushes.
  static constexpr const char* kSql =
      "UPDATE sqlq_schema SET version = version WHERE version = "
      "(SELECT max(version) FROM sqlq_schema)";
  auto rows = Native(c).Run(kSql, Params(), "check writable");
  return rows.ok() ? Status::Ok() : rows.status();
}

Status PostgresEngine::Migrate(PgConn& conn, bool create) {
  class Target : public core::MigrationTarget {
   public:
    explicit Target(PgConn& conn) : conn_(conn) {}
    std::int64_t latest() const override { return kSchemaVersion; }
    std::string where() const override { return PQdb(conn_.pg()); }
    Status Begin() override {
      conn_.ResetTxState();
      auto begun = conn_.Exec("BEGIN", "begin migration");
      return begun.ok() ? Status::Ok() : begun.status();
    }
    Result<std::int64_t> RecordedVersion() override {
      return SchemaVersion(conn_);
    }
    Status Lock() override {
      static constexpr const char* kLock = "SELECT pg_advisory_xact_lock($1)";
      auto locked = conn_.Run(kLock, Params().Int(kMigrationLock),
                              "lock schema for migration");
      return locked.ok() ? Status::Ok() : locked.status();
    }
    Status CreateSchemaTable() override {
      auto created = conn_.Exec(
          "CREATE TABLE IF NOT EXISTS sqlq_schema ("
          "version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL "
          "DEFAULT now())",
          "create schema table");
      return created.ok() ? Status::Ok() : created.status();
    }
    Status Apply(std::int64_t version) override {
      auto applied = conn_.Exec(kMigrations[version - 1], "migrate schema");
      return applied.ok() ? Status::Ok() : applied.status();
    }
    Status Record(std::int64_t version) override {
      static constexpr const char* kRecord =
          "INSERT INTO sqlq_schema (version) VALUES ($1)";
      auto recorded =
          conn_.Run(kRecord, Params().Int(version), "record schema version");
      return recorded.ok() ? Status::Ok() : recorded.status();
    }
    Status Finish(Status result) override {
      if (!result.ok()) {
        if (PQstatus(conn_.pg()) == CONNECTION_OK) {
          (void)conn_.Exec("ROLLBACK", "rollback");
        }
        return result;
      }
      auto committed = conn_.Exec("COMMIT", "commit migration", Phase::kCommit);
      return committed.ok() ? Status::Ok() : committed.status();
    }

   private:
    PgConn& conn_;
  } target(conn);
  return core::Migrate(target, create);
}

}  // namespace sqlq::engines::postgres
