// MariaDB/MySQL engine: the schema's steps run by core::Migrate, and the
// writable check.

#include "engines/mysql/mysql_engine_impl.h"

namespace sqlq::engines::mysql {

Status MysqlEngine::TouchSchema(Conn& c) {
  // InnoDB skips rewriting a row set to its own values, so the versions
  // are negated and restored: two changes whose redo the commit flushes.
  static const std::string kSql = "UPDATE sqlq_schema SET version = -version";
  for (int i = 0; i < 2; ++i) {
    auto rows = Native(c).Run(kSql, Params(), "check writable");
    if (!rows.ok()) return rows.status();
  }
  return Status::Ok();
}

Status MysqlEngine::Migrate(MyConn& conn, bool create) {
  class Target : public core::MigrationTarget {
   public:
    Target(MyConn& conn, std::string database)
        : conn_(conn), database_(std::move(database)) {}
    std::int64_t latest() const override { return kSchemaVersion; }
    std::string where() const override { return database_; }
    Result<std::int64_t> RecordedVersion() override {
      return SchemaVersion(conn_);
    }
    Status Lock() override {
      static const std::string kLock = "SELECT GET_LOCK(?, 60)";
      auto locked = conn_.Run(kLock, Params().Text(kMigrationLock),
                              "lock schema for migration");
      if (!locked.ok()) return locked.status();
      if (locked->Int(0, 0) != 1) {
        return Status::Busy(
            "migrate schema: another process held the migration lock for "
            "60 s");
      }
      locked_ = true;
      return Status::Ok();
    }
    Status CreateSchemaTable() override {
      return conn_.Exec(
          "CREATE TABLE IF NOT EXISTS sqlq_schema (version INT NOT NULL "
          "PRIMARY KEY, applied_at DATETIME(6) NOT NULL) ENGINE=InnoDB",
          "create schema table");
    }
    Status Apply(std::int64_t version) override {
      for (const char* stmt :
           kMigrations[static_cast<std::size_t>(version - 1)]) {
        Status s = conn_.Exec(stmt, "migrate schema");
        // Without the CREATE ROUTINE privilege the store works on without
        // the SQL-level API (`sqlq sql-api` prints it for an administrator)
        // and sends without their procedure. The refused statement changed
        // nothing: the migration's transaction goes on to record the
        // version.
        if (InstallsRoutines(version) && s.code() == Code::kPermissionDenied) {
          conn_.tx_error.reset();
          return Status::Ok();
        }
        if (!s.ok()) return s;
      }
      return Status::Ok();
    }
    Status Record(std::int64_t version) override {
      static const std::string kRecord =
          "INSERT INTO sqlq_schema (version, applied_at) VALUES (?, NOW(6))";
      auto recorded =
          conn_.Run(kRecord, Params().Int(version), "record schema version");
      return recorded.ok() ? Status::Ok() : recorded.status();
    }
    Status Finish(Status result) override {
      if (!locked_) return result;
      static const std::string kUnlock = "SELECT RELEASE_LOCK(?)";
      auto unlocked = conn_.Run(kUnlock, Params().Text(kMigrationLock),
                                "unlock schema after migration");
      if (result.ok() && !unlocked.ok()) return unlocked.status();
      return result;
    }

   private:
    MyConn& conn_;
    const std::string database_;
    bool locked_ = false;
  } target(conn, params_.database);
  return core::Migrate(target, create);
}

Status MysqlEngine::FindRoutines(MyConn& conn) {
  static const std::string kSql = R"sql(
    SELECT ROUTINE_NAME FROM information_schema.ROUTINES
    WHERE ROUTINE_SCHEMA = DATABASE()
      AND ROUTINE_NAME IN ('sqlq__send_committed', 'sqlq__claim_committed',
                           'sqlq__claims_committed'))sql";
  auto rows = conn.Run(kSql, Params(), "look up the send and claim procedures");
  if (!rows.ok()) return rows.status();
  send_routine_ = false;
  claim_routine_ = false;
  claims_routine_ = false;
  for (int i = 0; i < rows->size(); ++i) {
    if (rows->Bytes(i, 0) == "sqlq__send_committed") send_routine_ = true;
    if (rows->Bytes(i, 0) == "sqlq__claim_committed") claim_routine_ = true;
    if (rows->Bytes(i, 0) == "sqlq__claims_committed") claims_routine_ = true;
  }
  return Status::Ok();
}

Status MysqlEngine::FindDedupIndex(MyConn& conn) {
  static const std::string kSql = R"sql(
    SELECT COUNT(*) FROM information_schema.STATISTICS
    WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'sqlq_messages'
      AND INDEX_NAME = 'sqlq_messages_dedup')sql";
  auto rows = conn.Run(kSql, Params(), "look up the dedup index");
  if (!rows.ok()) return rows.status();
  dedup_keys_apart_ = rows->Int(0, 0) == 0;
  return Status::Ok();
}

}  // namespace sqlq::engines::mysql
