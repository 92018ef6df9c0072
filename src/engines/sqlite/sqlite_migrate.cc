// SQLite engine: the schema's steps run by core::Migrate, and the writable
// check.

#include "engines/sqlite/sqlite_engine_impl.h"

namespace sqlq::engines::sqlite {

Status SqliteEngine::TouchSchema(Conn& c) {
  // SQLite skips writing a row set to its own value, so the version is
  // negated and restored: the page is dirty, and the commit appends it to
  // the WAL, which fails on a full disk.
  for (int i = 0; i < 2; ++i) {
    Status s = Sql(c).Exec("UPDATE sqlq_schema SET version = -version",
                           "check writable");
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Status SqliteEngine::Migrate(SqliteConn& conn) {
  class Target : public core::MigrationTarget {
   public:
    Target(SqliteConn& conn, std::string path, std::int64_t now_us)
        : conn_(conn), path_(std::move(path)), now_us_(now_us) {}
    std::int64_t latest() const override { return kSchemaVersion; }
    std::string where() const override { return path_; }
    Status Begin() override {
      conn_.ResetTxState();
      return conn_.Exec("BEGIN IMMEDIATE", "begin migration");
    }
    Result<std::int64_t> RecordedVersion() override {
      SQLQ_PREPARE(st, conn_, R"sql(
        SELECT CASE WHEN EXISTS (SELECT 1 FROM sqlite_master
                                 WHERE type = 'table' AND name = 'sqlq_schema')
               THEN 1 ELSE 0 END)sql");
      if (int rc = st.Step(); rc != SQLITE_ROW) {
        return Translate(rc, conn_.db(), "read schema version");
      }
      if (st.Int(0) == 0) return 0;
      // Prepared only now: a statement on a missing table would not
      // prepare.
      SQLQ_PREPARE(version, conn_,
                   "SELECT coalesce(max(version), 0) FROM sqlq_schema");
      if (int rc = version.Step(); rc != SQLITE_ROW) {
        return Translate(rc, conn_.db(), "read schema version");
      }
      return version.Int(0);
    }
    // BEGIN IMMEDIATE holds the database's write lock already.
    Status Lock() override { return Status::Ok(); }
    Status CreateSchemaTable() override {
      Status s = conn_.Exec(
          "CREATE TABLE IF NOT EXISTS sqlq_schema (version INTEGER PRIMARY "
          "KEY, applied_at INTEGER NOT NULL)",
          "create schema table");
      if (!s.ok()) return s;
      // Before version 3: one row, the version reached, and no time.
      if (auto has_time = HasAppliedAt(); !has_time.ok() || *has_time) {
        return has_time.status();
      }
      for (const char* sql :
           {"CREATE TABLE sqlq_schema_new (version INTEGER PRIMARY KEY, "
            "applied_at INTEGER NOT NULL)",
            "INSERT INTO sqlq_schema_new (version, applied_at) "
            "SELECT max(version), 0 FROM sqlq_schema",
            "DROP TABLE sqlq_schema",
            "ALTER TABLE sqlq_schema_new RENAME TO sqlq_schema"}) {
        s = conn_.Exec(sql, "convert schema table");
        if (!s.ok()) return s;
      }
      return Status::Ok();
    }
    // Whether sqlq_schema has its applied_at column. Its own function so
    // that the statement is reset before the table is rebuilt.
    Result<bool> HasAppliedAt() {
      SQLQ_PREPARE(st, conn_,
                   "SELECT count(*) FROM pragma_table_info('sqlq_schema') "
                   "WHERE name = 'applied_at'");
      if (int rc = st.Step(); rc != SQLITE_ROW) {
        return Translate(rc, conn_.db(), "read schema table");
      }
      return st.Int(0) != 0;
    }
    Status Apply(std::int64_t version) override {
      char* err = nullptr;
      int rc = sqlite3_exec(conn_.db(), kMigrations[version - 1], nullptr,
                            nullptr, &err);
      sqlite3_free(err);
      if (rc != SQLITE_OK) return Translate(rc, conn_.db(), "migrate schema");
      return Status::Ok();
    }
    Status Record(std::int64_t version) override {
      SQLQ_PREPARE(st, conn_,
                   "INSERT INTO sqlq_schema (version, applied_at) "
                   "VALUES (?1, ?2)");
      st.Bind(1, version).Bind(2, now_us_);
      return st.Run("record schema version");
    }
    Status Finish(Status result) override {
      if (!result.ok()) {
        (void)conn_.Exec("ROLLBACK", "rollback");
        return result;
      }
      return conn_.Exec("COMMIT", "commit migration");
    }

   private:
    SqliteConn& conn_;
    const std::string path_;
    const std::int64_t now_us_;
  } target(conn, settings_.path, Us(clock_->Now()));
  return core::Migrate(target, /*create=*/true);
}

}  // namespace sqlq::engines::sqlite
