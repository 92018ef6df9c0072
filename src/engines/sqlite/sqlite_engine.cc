// SQLite engine: opening a store, the writer and readers, transactions,
// counters, wake-ups.

#include "engines/sqlite/sqlite_engine_impl.h"

namespace sqlq::engines::sqlite {

Status SqliteEngine::Write(const std::function<Status(Conn&)>& body) {
  return WriteOnWriter(/*flush=*/true, body);
}

Status SqliteEngine::WriteUnflushed(const std::function<Status(Conn&)>& body) {
  return WriteOnWriter(/*flush=*/false, body);
}

Status SqliteEngine::WriteOnWriter(bool flush,
                                   const std::function<Status(Conn&)>& body) {
  std::lock_guard<std::mutex> lock(writer_mu_);
  if (flush == writer_unflushed_) {
    Status s =
        flush ? RestoreFlush()
              : writer_->Exec("PRAGMA synchronous = NORMAL", "ack_flush=off");
    if (!s.ok()) return s;
    writer_unflushed_ = !flush;
  }
  writer_->defer_counters = true;
  Status s = InTransaction(*writer_, "BEGIN IMMEDIATE", body);
  if (!flush) (void)RestoreFlush();  // else the next Write does
  return s;
}

Status SqliteEngine::RestoreFlush() {
  // Only FULL and EXTRA come here (acks_unflushed).
  const char* sql = settings_.synchronous == "EXTRA"
                        ? "PRAGMA synchronous = EXTRA"
                        : "PRAGMA synchronous = FULL";
  Status s = writer_->Exec(sql, "ack_flush=off (restore)");
  if (s.ok()) writer_unflushed_ = false;
  return s;
}

Status SqliteEngine::Read(const std::function<Status(Conn&)>& body) {
  auto conn = AcquireReader();
  if (!conn.ok()) return conn.status();
  Status s = InTransaction(**conn, "BEGIN", body);
  ReleaseReader(std::move(*conn));
  return s;
}

Result<std::unique_ptr<Conn>> SqliteEngine::BeginTx() {
  auto conn = Connect(false);
  if (!conn.ok()) return conn.status();
  Status s = (*conn)->Exec("BEGIN IMMEDIATE", "begin transaction");
  if (!s.ok()) return s;
  return std::unique_ptr<Conn>(std::move(*conn));
}

Result<std::unique_ptr<Conn>> SqliteEngine::JoinTx(void* native) {
  auto* db = static_cast<sqlite3*>(native);
  const char* f = sqlite3_db_filename(db, "main");
  if (f == nullptr || real_path_ != f) {
    return Status::InvalidArgument(
        fmt::format("connection is to '{}', not to this store's database '{}'",
                    f ? f : "", real_path_));
  }
  if (sqlite3_get_autocommit(db) != 0) {
    return Status::InvalidArgument(
        "the connection has no open transaction: run BEGIN IMMEDIATE "
        "first");
  }
  return std::unique_ptr<Conn>(std::make_unique<SqliteConn>(db, false));
}

Status SqliteEngine::CommitTx(Conn& c) {
  Status s = Sql(c).Commit();
  if (!s.ok()) (void)Sql(c).Exec("ROLLBACK", "rollback");
  return s;
}

Status SqliteEngine::RollbackTx(Conn& c) {
  return Sql(c).Exec("ROLLBACK", "rollback");
}

void* SqliteEngine::NativeHandle(Conn& c) { return Sql(c).db(); }

void SqliteEngine::WatchForeignWrites(std::function<void()> changed) {
  watcher_ = std::make_unique<FileWatcher>();
  // The file events include our own commits; waking every waiter for
  // those would make each commit of this process cost an empty claim per
  // waiting consumer. Report only what another connection committed.
  auto foreign_only = [this, changed = std::move(changed)] {
    if (CommittedElsewhere()) changed();
  };
  // The baseline: without it the first event, often our own commit, would
  // count as foreign and wake every waiter of every queue.
  (void)CommittedElsewhere();
  if (!watcher_->Start(real_path_, std::move(foreign_only),
                       std::chrono::microseconds(2000))) {
    watcher_.reset();
  }
}

bool SqliteEngine::CommittedElsewhere() {
  std::lock_guard<std::mutex> lock(writer_mu_);
  if (!writer_->Exec("BEGIN IMMEDIATE", "watch").ok()) return true;
  std::int64_t version = -1;
  {
    auto raw = writer_->Prepare("PRAGMA data_version");
    if (raw.ok()) {
      Stmt st(writer_->db(), *raw);
      if (st.Step() == SQLITE_ROW) version = st.Int(0);
    }
  }
  (void)writer_->Exec("ROLLBACK", "watch");
  bool changed = version < 0 || version != data_version_;
  data_version_ = version;
  return changed;
}

Status SqliteEngine::FlushCounters(SqliteConn& conn) {
  for (const auto& [queue_id, d] : conn.pending_counters) {
    Status s = WriteCounters(conn, queue_id, d);
    if (!s.ok()) return s;
  }
  conn.pending_counters.clear();
  return Status::Ok();
}

Status SqliteEngine::WriteCounters(SqliteConn& conn, std::int64_t queue_id,
                                   const QueueCounters& d) {
  SQLQ_PREPARE(st, conn, R"sql(
    UPDATE sqlq_queues SET sends = sends + ?2, claims = claims + ?3,
      acks = acks + ?4, nacks = nacks + ?5,
      expirations = expirations + ?6, dead_lettered = dead_lettered + ?7,
      pushes = pushes + ?8, serves = serves + ?9, expired = expired + ?10
    WHERE id = ?1)sql");
  st.Bind(1, queue_id)
      .Bind(2, d.sends)
      .Bind(3, d.claims)
      .Bind(4, d.acks)
      .Bind(5, d.nacks)
      .Bind(6, d.expirations)
      .Bind(7, d.dead_lettered)
      .Bind(8, d.pushes)
      .Bind(9, d.serves)
      .Bind(10, d.expired);
  Status s = st.Run("update counters");
  if (!s.ok()) return s;
  if (conn.changes() == 0) return core::QueueGone(queue_id);
  return Status::Ok();
}

Status SqliteEngine::InTransaction(SqliteConn& conn, const char* begin,
                                   const std::function<Status(Conn&)>& body) {
  conn.ResetTxState();
  Status s = conn.Exec(begin, "begin transaction");
  if (!s.ok()) return s;
  s = body(conn);
  if (s.ok()) s = FlushCounters(conn);
  if (s.ok()) {
    s = conn.Commit();
    if (s.ok()) return s;
  }
  // Rolls back whatever is left; after a failed COMMIT SQLite may have
  // rolled back already, which ROLLBACK then reports harmlessly.
  if (sqlite3_get_autocommit(conn.db()) == 0) {
    (void)conn.Exec("ROLLBACK", "rollback");
  }
  return s;
}

Result<std::unique_ptr<SqliteConn>> SqliteEngine::Connect(bool create) {
  const std::string& path = settings_.path;
  std::error_code ec;
  bool exists = std::filesystem::exists(path, ec);
  if (!exists && !create) {
    return Status::NotFound(
        fmt::format("no database at '{}' (create a queue first, or check "
                    "--db)",
                    path));
  }
  if (!exists) {
    auto dir = std::filesystem::path(path).parent_path();
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
      if (ec == std::errc::permission_denied) {
        return Status::PermissionDenied(
            fmt::format("cannot create database '{}': directory '{}': {}", path,
                        dir.string(), ec.message()));
      }
      return Status::NotFound(fmt::format(
          "cannot create database '{}': directory '{}' does not exist", path,
          dir.string()));
    }
  }
  sqlite3* db = nullptr;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX |
              (create ? SQLITE_OPEN_CREATE : 0);
  int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  auto conn = std::make_unique<SqliteConn>(db, true);
  if (rc != SQLITE_OK) {
    if ((rc & 0xff) == SQLITE_CANTOPEN) {
      // Why the file could not be opened or created is in errno (also as
      // root, whom access() would tell everything is allowed).
      const int err = sqlite3_system_errno(db);
      if (std::filesystem::is_directory(path, ec)) {
        return Status::PermissionDenied(fmt::format(
            "cannot open database '{}': it is a directory; give a file in "
            "it, such as sqlite:{}/sqlq.db",
            path, path));
      }
      if (err == EACCES || err == EPERM || err == EROFS) {
        return Status::PermissionDenied(
            fmt::format("cannot {} database '{}': {}",
                        exists ? "open" : "create", path, std::strerror(err)));
      }
      if (!exists) {
        // Its directory exists (checked above) but the file could not be
        // made there: SQLite's read-only retry leaves ENOENT in errno.
        return Status::PermissionDenied(fmt::format(
            "cannot create database '{}': its directory does not allow "
            "new files",
            path));
      }
    }
    return Translate(rc, db, fmt::format("open database '{}'", path));
  }
  sqlite3_extended_result_codes(db, 1);
  if (sqlite3_db_readonly(db, "main") == 1) {
    return Status::PermissionDenied(fmt::format(
        "database '{}' is read-only: sqlq needs to write to it (and to its "
        "-wal and -shm files beside it)",
        path));
  }
  sqlite3_busy_handler(db, BusyHandler, &conn->busy_started);
  // journal_mode and synchronous cannot be bound parameters; both values
  // come from our own whitelist (ParseUrl).
  std::string pragmas = fmt::format(
      "PRAGMA journal_mode = WAL; PRAGMA synchronous = {}; "
      "PRAGMA temp_store = MEMORY; PRAGMA cache_size = -16384;",
      settings_.synchronous);
  // Switching a new file to WAL takes an exclusive lock. When two
  // connections both hold the shared lock and want it, SQLite answers one
  // of them SQLITE_BUSY at once, without its busy handler (waiting could
  // never end): that one tries again, for as long as a busy handler would
  // wait.
  const auto deadline = std::chrono::steady_clock::now() + kBusyBudget;
  for (int attempt = 0;; ++attempt) {
    char* err = nullptr;
    rc = sqlite3_exec(db, pragmas.c_str(), nullptr, nullptr, &err);
    sqlite3_free(err);
    if ((rc & 0xff) != SQLITE_BUSY ||
        std::chrono::steady_clock::now() >= deadline) {
      break;
    }
    std::this_thread::sleep_for(
        std::chrono::milliseconds(1 + std::min(attempt, 20)));
  }
  if (rc != SQLITE_OK) {
    return Translate(rc, db, fmt::format("open database '{}'", path));
  }
  return conn;
}

Result<std::unique_ptr<SqliteConn>> SqliteEngine::AcquireReader() {
  {
    std::lock_guard<std::mutex> lock(readers_mu_);
    if (!readers_.empty()) {
      auto c = std::move(readers_.back());
      readers_.pop_back();
      return c;
    }
  }
  return Connect(false);
}

void SqliteEngine::ReleaseReader(std::unique_ptr<SqliteConn> conn) {
  std::lock_guard<std::mutex> lock(readers_mu_);
  if (readers_.size() >= kIdleReaders) return;
  // Past the first few, an idle reader gives back its page cache, so that
  // the memory kept stays about what 8 readers kept before (their pages
  // are read again from the operating system's cache when next needed).
  if (readers_.size() >= kCachingReaders) {
    sqlite3_db_release_memory(conn->db());
  }
  readers_.push_back(std::move(conn));
}

// `rest` is the URL after "sqlite:": PATH[?synchronous=off|normal|full|extra]
EngineEntry Entry() { return EntryOf<ParseUrl, SqliteEngine>(); }

}  // namespace sqlq::engines::sqlite
