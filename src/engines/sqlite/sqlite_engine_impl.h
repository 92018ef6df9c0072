// The SQLite engine class, shared by the files that implement
// it by concern (sqlite_engine.cc, sqlite_queue.cc, sqlite_claim.cc,
// sqlite_migrate.cc). Rings, rotations and the rest of what it
// shares with the other engines are in engines/shared/, with SQLite's SQL
// for them in dialect.h and sqlite_shared.cc. Internal: included by those
// files only.
//
// The SQLite engine. Design notes: docs/engines/sqlite.md.
//
// Connections: one writer connection, used under writer_mu_ (the core's
// WriteBatcher already funnels this process's writes through one leader, and
// SQLite allows one writer per file anyway), and a pool of reader
// connections for snapshots, which WAL lets run beside the writer.
// Every write transaction starts with BEGIN IMMEDIATE so that it takes the
// write lock up front: a deferred transaction that upgrades from read to
// write can fail with SQLITE_BUSY without the busy handler being called.

#ifndef SQLQ_ENGINES_SQLITE_SQLITE_ENGINE_IMPL_H_
#define SQLQ_ENGINES_SQLITE_SQLITE_ENGINE_IMPL_H_

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/errors.h"
#include "core/migrate.h"
#include "core/rows.h"
#include "core/url_params.h"
#include "core/validate.h"
#include "engines/entry.h"
#include "engines/shared/message_sql.h"
#include "engines/shared/sql_engine.h"
#include "engines/sqlite/dialect.h"
#include "engines/sqlite/file_watcher.h"
#include "engines/sqlite/schema.h"
#include "engines/sqlite/sqlite_conn.h"

namespace sqlq::engines::sqlite {

using core::Conn;
using core::Micros;

// How long a writer waits for another process's write lock before the
// caller sees kBusy. Long, because a caller would only retry anyway.
constexpr auto kBusyBudget = std::chrono::seconds(60);

class SystemClock : public Clock {
 public:
  Timestamp Now() override {
    return std::chrono::time_point_cast<std::chrono::microseconds>(
        std::chrono::system_clock::now());
  }
};

using core::FromUs;
using core::TokenBits;
using core::Us;

// Busy handler: short sleeps that grow from 50us to 2ms, so that a lock
// released quickly is taken quickly (SQLite's default handler sleeps up to
// 100 ms at a time), until kBusyBudget is spent.
inline int BusyHandler(void* arg, int count) {
  auto* started = static_cast<std::chrono::steady_clock::time_point*>(arg);
  auto now = std::chrono::steady_clock::now();
  if (count == 0) *started = now;
  if (now - *started > kBusyBudget) return 0;
  auto sleep = std::chrono::microseconds(50) * (1 << std::min(count, 5));
  std::this_thread::sleep_for(std::min<std::chrono::microseconds>(
      sleep, std::chrono::microseconds(2000)));
  return 1;
}

struct Settings {
  std::string path;
  std::string synchronous = "FULL";
  // ack_flush=off: transactions of acks alone commit with synchronous =
  // NORMAL (Engine::WriteUnflushed).
  bool ack_flush = true;
};

inline Result<Settings> ParseUrl(std::string_view rest) {
  Settings s;
  // Accept sqlite:PATH and sqlite:///ABSOLUTE.
  if (rest.substr(0, 2) == "//") rest.remove_prefix(2);
  std::string_view query;
  if (auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  if (rest.empty()) {
    return Status::InvalidArgument(
        "sqlite URL names no file: expected sqlite:PATH");
  }
  s.path = std::string(rest);
  if (s.path == ":memory:" || s.path.rfind("file:", 0) == 0) {
    // Each connection of the pool would see its own empty database.
    return Status::InvalidArgument(
        "sqlite URL: in-memory and URI file names are not supported; name a "
        "file (sqlite:/tmp/scratch.db)");
  }
  while (!query.empty()) {
    std::string_view kv = query.substr(0, query.find('&'));
    query.remove_prefix(std::min(query.size(), kv.size() + 1));
    auto eq = kv.find('=');
    std::string_view key = kv.substr(0, eq);
    std::string value(eq == std::string_view::npos ? "" : kv.substr(eq + 1));
    if (key == "ack_flush") {
      auto on = core::ParseUrlBool(key, value);
      if (!on.ok()) return on.status();
      s.ack_flush = *on;
      continue;
    }
    std::transform(value.begin(), value.end(), value.begin(),
                   [](unsigned char ch) { return std::toupper(ch); });
    if (key == "synchronous") {
      if (value != "OFF" && value != "NORMAL" && value != "FULL" &&
          value != "EXTRA") {
        return Status::InvalidArgument(fmt::format(
            "sqlite URL: synchronous must be off, normal, full or extra, "
            "not '{}'",
            value));
      }
      s.synchronous = value;
    } else {
      return Status::InvalidArgument(
          fmt::format("sqlite URL: unknown parameter '{}' (known: synchronous, "
                      "ack_flush)",
                      key));
    }
  }
  return s;
}

class SqliteEngine : public shared::SqlEngine<Dialect> {
 public:
  // Without a `clock`, the system's: the database has no clock of its own.
  SqliteEngine(Settings settings, std::shared_ptr<Clock> clock)
      : SqlEngine(clock ? std::move(clock) : std::make_shared<SystemClock>()),
        settings_(std::move(settings)) {}

  ~SqliteEngine() override {
    watcher_.reset();  // stop callbacks before the connections go
  }

  Status Init(bool create_if_missing) {
    auto w = Connect(create_if_missing);
    if (!w.ok()) return w.status();
    writer_ = std::move(*w);
    Status s = Migrate(*writer_);
    if (!s.ok()) return s;
    // Resolve the real path once, for JoinTx's check.
    const char* f = sqlite3_db_filename(writer_->db(), "main");
    real_path_ = f != nullptr ? f : settings_.path;
    return Status::Ok();
  }

  // --- transactions -------------------------------------------------------

  Status Write(const std::function<Status(Conn&)>& body) override;
  // ack_flush=off under synchronous=FULL or EXTRA (NORMAL and OFF flush no
  // commit anyway).
  bool acks_unflushed() const override {
    return !settings_.ack_flush && (settings_.synchronous == "FULL" ||
                                    settings_.synchronous == "EXTRA");
  }
  // The transaction under synchronous = NORMAL: in WAL mode its commit
  // appends to the WAL without an fsync; the next commit under the URL's
  // setting fsyncs the WAL, this one's frames with it. The setting cannot
  // change inside a transaction, so it is set before BEGIN and put back
  // after the commit (or, if that fails, before the next Write).
  Status WriteUnflushed(const std::function<Status(Conn&)>& body) override;

  Status Read(const std::function<Status(Conn&)>& body) override;

  Result<std::unique_ptr<Conn>> BeginTx() override;

  Result<std::unique_ptr<Conn>> JoinTx(void* native) override;

  Status CommitTx(Conn& c) override;
  Status RollbackTx(Conn& c) override;
  void* NativeHandle(Conn& c) override;

  void WatchForeignWrites(std::function<void()> changed) override;

  // Whether a connection other than our writer (another process, or a Tx
  // of ours) committed since the last call. Taking the write lock first
  // waits out a commit whose WAL write raised the event but which has not
  // yet published itself; data_version then shows it. When in doubt, true.
  bool CommittedElsewhere();

// The errors column with one entry appended for the row's current attempt
// (core/columns.h): at `at` and error `error`, each an SQL expression; the
// oldest entry is dropped past kErrorHistory (20).
#define SQLQ_SQLITE_APPEND_ERROR(at, error)                                \
  "json_insert(CASE WHEN json_array_length(coalesce(errors, '[]')) >= 20 " \
  "THEN json_remove(errors, '$[0]') ELSE coalesce(errors, '[]') END, "     \
  "'$[#]', json_object('attempt', attempts, 'at', " at ", 'error', " error \
  "))"
  static_assert(kErrorHistory == 20);

// The rest of an INSERT INTO sqlq_dedup_holds that holds the dedup key of
// the message `where` selects until ?5, replacing an earlier hold of the
// key (core/engine.h, SendParams).
#define SQLQ_SQLITE_HOLD(where)                                             \
  "(queue_id, dedup, message_id, until_us) SELECT queue_id, dedup, id, ?5 " \
  "FROM sqlq_messages WHERE " where                                         \
  " AND dedup IS NOT NULL ON CONFLICT (queue_id, dedup) DO UPDATE SET "     \
  "message_id = excluded.message_id, until_us = excluded.until_us"

  // --- the schema (sqlite_migrate.cc) -------------------------------------

  Status TouchSchema(Conn& c) override;

  // --- queues, sends and redrives (sqlite_queue.cc) ------------------------

  Status DropQueue(Conn& c, std::int64_t queue_id) override;

  Result<std::int64_t> MoveDeadLetters(SqliteConn& conn,
                                       const core::RedriveParams& op,
                                       std::int64_t to,
                                       std::int64_t now) override;

  Result<std::vector<SendResult>> Send(Conn& c,
                                       const core::SendParams& p) override;

  // --- claims and leases (sqlite_claim.cc) ---------------------------------

  Result<core::ClaimOutcome> Claim(Conn& c,
                                   const core::ClaimParams& p) override;

  Result<std::optional<Timestamp>> NextReadyAt(Conn& c,
                                               std::int64_t queue_id) override;

  Status Ack(Conn& c, const core::AckParams& p) override;

  Status Retry(Conn& c, const core::RetryParams& p) override;

  Result<Timestamp> Extend(Conn& c, const core::ExtendParams& op) override;

  Status Bury(Conn& c, const core::BuryParams& p) override;
  Result<std::int64_t> Cancel(Conn& c, const core::CancelParams& p) override;

  // A message a claim may lease or dead-letter.
  struct Candidate {
    std::int64_t id, priority, ready_us, token, attempts, enqueued_us;
    std::string payload, headers, group;
  };
  // Leases `m` until `until` for claim `p`, adding it to `out`.
  Status LeaseCandidate(SqliteConn& conn, const core::ClaimParams& p,
                        Candidate& m, std::int64_t until,
                        core::ClaimOutcome& out);
  // Moves `m`, out of attempts, to the dead letters.
  Status BuryCandidate(SqliteConn& conn, const core::ClaimParams& p,
                       const Candidate& m, std::int64_t now);
  // Claim of a queue with groups (ClaimParams::groups).
  Result<core::ClaimOutcome> ClaimGroups(SqliteConn& conn,
                                         const core::ClaimParams& p);

 private:
  static SqliteConn& Sql(Conn& c) { return static_cast<SqliteConn&>(c); }

  // The highest priority level of the queue below `below` (all levels when
  // unset); nullopt when there is none. One seek in the claim index.
  Result<std::optional<std::int64_t>> NextPriority(
      SqliteConn& conn, std::int64_t queue_id,
      std::optional<std::int64_t> below);

  static Stmt& BindFence(Stmt& st, std::int64_t queue_id,
                         const core::Receipt& r);

  Status FlushCounters(SqliteConn& conn);

  Status WriteCounters(SqliteConn& conn, std::int64_t queue_id,
                       const QueueCounters& d) override;

  // Moves message `id` to the dead letters with last error `error`, and
  // `history_error` appended to its error history for its last attempt at
  // `failed_at`.
  // With `unique_for` above 0, its dedup key is held that long from now
  // (core/engine.h, SendParams).
  Status MoveToDead(SqliteConn& conn, std::int64_t id, std::string_view error,
                    std::int64_t now, std::string_view history_error,
                    std::int64_t failed_at, core::Micros unique_for);

  Status InTransaction(SqliteConn& conn, const char* begin,
                       const std::function<Status(Conn&)>& body);

  Result<std::unique_ptr<SqliteConn>> Connect(bool create);

  // Brings the schema to kSchemaVersion (core/migrate.h) in one
  // BEGIN IMMEDIATE transaction, which is also the migration lock. A file
  // that exists is given sqlq's tables even when the caller asked not to
  // create a database (a missing file was refused before this).
  Status Migrate(SqliteConn& conn);

  // Readers kept open between reads. Opening one costs far more than a
  // read (the file, the pragmas, the schema parsed, every statement
  // prepared again), so as many are kept as a busy server's database
  // threads read at once: with 8, a server with 32 of them opened and
  // closed connections all the time, and spent a third more CPU a request
  // on a mixed load. The first kCachingReaders idle readers keep their
  // page caches (at most `cache_size` each, filled only by what they
  // read); the rest give theirs back when released.
  static constexpr std::size_t kIdleReaders = 64;
  static constexpr std::size_t kCachingReaders = 8;

  Result<std::unique_ptr<SqliteConn>> AcquireReader();

  void ReleaseReader(std::unique_ptr<SqliteConn> conn);

  Settings settings_;
  std::string real_path_;
  std::mutex writer_mu_;
  std::unique_ptr<SqliteConn> writer_;  // guarded by writer_mu_
  std::int64_t data_version_ = -1;      // guarded by writer_mu_
  // The writer runs under synchronous = NORMAL (WriteUnflushed) and must be
  // set back before its next transaction. Guarded by writer_mu_.
  bool writer_unflushed_ = false;
  // Puts the writer's synchronous setting back to the URL's. writer_mu_
  // held.
  Status RestoreFlush();
  // Write (flush) or WriteUnflushed on the writer connection.
  Status WriteOnWriter(bool flush, const std::function<Status(Conn&)>& body);
  std::mutex readers_mu_;
  std::vector<std::unique_ptr<SqliteConn>> readers_;  // guarded by readers_mu_
  std::unique_ptr<FileWatcher> watcher_;
};

}  // namespace sqlq::engines::sqlite

#endif  // SQLQ_ENGINES_SQLITE_SQLITE_ENGINE_IMPL_H_
