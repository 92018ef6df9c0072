// The SQLite engine. Design notes: docs/engines/sqlite.md.
//
// Connections: one writer connection, used under writer_mu_ (the core's
// WriteBatcher already funnels this process's writes through one leader, and
// SQLite allows one writer per file anyway), and a pool of reader
// connections for snapshots, which WAL lets run beside the writer.
// Every write transaction starts with BEGIN IMMEDIATE so that it takes the
// write lock up front: a deferred transaction that upgrades from read to
// write can fail with SQLITE_BUSY without the busy handler being called.

#include "engines/sqlite/sqlite_engine.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/errors.h"
#include "core/migrate.h"
#include "core/rows.h"
#include "core/validate.h"
#include "engines/sqlite/file_watcher.h"
#include "engines/sqlite/schema.h"
#include "engines/sqlite/sqlite_conn.h"

namespace sqlq::engines::sqlite {

namespace {

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
int BusyHandler(void* arg, int count) {
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
};

Result<Settings> ParseUrl(std::string_view rest) {
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
      return Status::InvalidArgument(fmt::format(
          "sqlite URL: unknown parameter '{}' (known: synchronous)", key));
    }
  }
  return s;
}

class SqliteEngine : public core::Engine {
 public:
  SqliteEngine(Settings settings, std::shared_ptr<Clock> clock)
      : settings_(std::move(settings)), clock_(std::move(clock)) {}

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

  Status Write(const std::function<Status(Conn&)>& body) override {
    std::lock_guard<std::mutex> lock(writer_mu_);
    writer_->defer_counters = true;
    return InTransaction(*writer_, "BEGIN IMMEDIATE", body);
  }

  Status Read(const std::function<Status(Conn&)>& body) override {
    auto conn = AcquireReader();
    if (!conn.ok()) return conn.status();
    Status s = InTransaction(**conn, "BEGIN", body);
    ReleaseReader(std::move(*conn));
    return s;
  }

  Result<std::unique_ptr<Conn>> BeginTx() override {
    auto conn = Connect(false);
    if (!conn.ok()) return conn.status();
    Status s = (*conn)->Exec("BEGIN IMMEDIATE", "begin transaction");
    if (!s.ok()) return s;
    return std::unique_ptr<Conn>(std::move(*conn));
  }

  Result<std::unique_ptr<Conn>> JoinTx(void* native) override {
    auto* db = static_cast<sqlite3*>(native);
    const char* f = sqlite3_db_filename(db, "main");
    if (f == nullptr || real_path_ != f) {
      return Status::InvalidArgument(fmt::format(
          "connection is to '{}', not to this store's database '{}'",
          f ? f : "", real_path_));
    }
    if (sqlite3_get_autocommit(db) != 0) {
      return Status::InvalidArgument(
          "the connection has no open transaction: run BEGIN IMMEDIATE "
          "first");
    }
    return std::unique_ptr<Conn>(std::make_unique<SqliteConn>(db, false));
  }

  Status CommitTx(Conn& c) override {
    Status s = Sql(c).Exec("COMMIT", "commit");
    if (!s.ok()) (void)Sql(c).Exec("ROLLBACK", "rollback");
    return s;
  }
  Status RollbackTx(Conn& c) override {
    return Sql(c).Exec("ROLLBACK", "rollback");
  }
  void* NativeHandle(Conn& c) override { return Sql(c).db(); }

  void WatchForeignWrites(std::function<void()> changed) override {
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

  // Whether a connection other than our writer (another process, or a Tx
  // of ours) committed since the last call. Taking the write lock first
  // waits out a commit whose WAL write raised the event but which has not
  // yet published itself; data_version then shows it. When in doubt, true.
  bool CommittedElsewhere() {
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

  // --- queues --------------------------------------------------------------

  Result<core::QueueRecord> CreateQueue(Conn& c, std::string_view name,
                                        const QueueOptions& o) override {
    SqliteConn& conn = Sql(c);
    const Timestamp now = clock_->Now();
    SQLQ_PREPARE(st, conn, R"sql(
      INSERT INTO sqlq_queues (name, max_attempts, lease_us, backoff_base_us,
        backoff_max_us, archive, retention_us, max_payload, created_us)
      VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
      ON CONFLICT (name) DO NOTHING)sql");
    st.BindText(1, name)
        .Bind(2, o.max_attempts)
        .Bind(3, Us(o.lease))
        .Bind(4, Us(o.backoff_base))
        .Bind(5, Us(o.backoff_max))
        .Bind(6, o.archive ? 1 : 0)
        .Bind(7, Us(o.retention))
        .Bind(8, static_cast<std::int64_t>(o.max_payload_bytes))
        .Bind(9, Us(now));
    Status s = st.Run("create queue");
    if (!s.ok()) return s;
    if (conn.changes() == 0) return Taken(conn, name);
    core::QueueRecord r;
    r.id = sqlite3_last_insert_rowid(conn.db());
    r.info = {.name = std::string(name), .options = o, .created_at = now};
    // created_at as stored, at microsecond resolution.
    return r;
  }

  static constexpr const char* kSelectQueue = R"sql(
    SELECT id, name, max_attempts, lease_us, backoff_base_us, backoff_max_us,
           archive, retention_us, max_payload, created_us
    FROM sqlq_queues)sql";

  Result<core::QueueRecord> GetQueue(Conn& c, std::string_view name) override {
    static const std::string sql =
        std::string(kSelectQueue) + " WHERE name = ?1 AND kind = 'queue'";
    SqliteConn& conn = Sql(c);
    SQLQ_PREPARE(st, conn, sql.c_str());
    st.BindText(1, name);
    int rc = st.Step();
    if (rc == SQLITE_ROW) return core::DecodeQueue(st);
    if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "look up queue");
    return Missing(conn, name, "queue");
  }

  Result<std::vector<core::QueueRecord>> ListQueues(Conn& c) override {
    static const std::string sql =
        std::string(kSelectQueue) + " WHERE kind = 'queue' ORDER BY name";
    SqliteConn& conn = Sql(c);
    SQLQ_PREPARE(st, conn, sql.c_str());
    std::vector<core::QueueRecord> out;
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) out.push_back(core::DecodeQueue(st));
    if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "list queues");
    return out;
  }

  Status TouchSchema(Conn& c) override {
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

  Status DropQueue(Conn& c, std::int64_t queue_id) override {
    SqliteConn& conn = Sql(c);
    static constexpr const char* kDeletes[] = {
        "DELETE FROM sqlq_messages WHERE queue_id = ?1",
        "DELETE FROM sqlq_dead WHERE queue_id = ?1",
        "DELETE FROM sqlq_archive WHERE queue_id = ?1",
        "DELETE FROM sqlq_queues WHERE id = ?1",
    };
    for (const char* sql : kDeletes) {
      SQLQ_PREPARE(st, conn, sql);
      st.Bind(1, queue_id);
      Status s = st.Run("drop queue");
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }

  Result<std::int64_t> PurgeQueue(Conn& c, std::int64_t queue_id) override {
    SqliteConn& conn = Sql(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    SQLQ_PREPARE(st, conn, "DELETE FROM sqlq_messages WHERE queue_id = ?1");
    st.Bind(1, queue_id);
    s = st.Run("purge queue");
    if (!s.ok()) return s;
    return conn.changes();
  }

  Result<QueueStats> Stats(Conn& c, std::int64_t queue_id) override {
    SqliteConn& conn = Sql(c);
    QueueStats out;
    const std::int64_t now = Us(clock_->Now());
    {
      SQLQ_PREPARE(st, conn, R"sql(
        SELECT name, sends, claims, acks, nacks, expirations, dead_lettered
        FROM sqlq_queues WHERE id = ?1)sql");
      st.Bind(1, queue_id);
      int rc = st.Step();
      if (rc == SQLITE_DONE) return core::QueueGone(queue_id);
      if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "stats");
      out.name = st.Text(0);
      out.sends = st.Int(1);
      out.claims = st.Int(2);
      out.acks = st.Int(3);
      out.nacks = st.Int(4);
      out.expirations = st.Int(5);
      out.dead_lettered = st.Int(6);
    }
    {
      SQLQ_PREPARE(st, conn, R"sql(
        SELECT coalesce(sum(ready_us <= ?2), 0),
               coalesce(sum(ready_us > ?2 AND token = 0), 0),
               coalesce(sum(ready_us > ?2 AND token != 0), 0),
               min(CASE WHEN ready_us <= ?2 THEN ready_us END)
        FROM sqlq_messages WHERE queue_id = ?1)sql");
      st.Bind(1, queue_id).Bind(2, now);
      int rc = st.Step();
      if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "stats");
      out.ready = st.Int(0);
      out.delayed = st.Int(1);
      out.leased = st.Int(2);
      if (!st.IsNull(3)) {
        out.oldest_ready_age =
            std::chrono::duration_cast<Duration>(Micros(now - st.Int(3)));
      }
    }
    auto count = [&](const char* sql, std::int64_t& into) -> Status {
      SQLQ_PREPARE(st, conn, sql);
      st.Bind(1, queue_id);
      int rc = st.Step();
      if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "stats");
      into = st.Int(0);
      return Status::Ok();
    };
    Status s =
        count("SELECT count(*) FROM sqlq_dead WHERE queue_id = ?1", out.dead);
    if (!s.ok()) return s;
    s = count("SELECT count(*) FROM sqlq_archive WHERE queue_id = ?1",
              out.archived);
    if (!s.ok()) return s;
    return out;
  }

  // --- messages ------------------------------------------------------------

  Result<std::vector<SendResult>> Send(Conn& c,
                                       const core::SendParams& p) override {
    SqliteConn& conn = Sql(c);
    // Checked before writing, so that a send to a dropped queue is a clean
    // failure (engine.h).
    Status checked = CheckQueue(conn, p.queue_id);
    if (!checked.ok()) return checked;
    const Timestamp now = clock_->Now();
    std::vector<SendResult> out;
    out.reserve(p.messages.size());
    std::int64_t stored = 0;
    for (const Message& m : p.messages) {
      {
        SQLQ_PREPARE(st, conn, R"sql(
          INSERT INTO sqlq_messages
            (queue_id, priority, ready_us, enqueued_us, dedup, payload)
          VALUES (?1, ?2, ?3, ?4, ?5, ?6)
          ON CONFLICT (queue_id, dedup) WHERE dedup IS NOT NULL DO NOTHING)sql");
        st.Bind(1, p.queue_id)
            .Bind(2, m.priority)
            .Bind(3, Us(now) + Us(m.delay))
            .Bind(4, Us(now))
            .BindTextOrNull(5, m.dedup_key)
            .BindBlob(6, m.payload);
        Status s = st.Run("send");
        if (!s.ok()) return s;
      }
      if (conn.changes() == 1) {
        out.push_back({.id = sqlite3_last_insert_rowid(conn.db())});
        ++stored;
        continue;
      }
      // The dedup key is held by a message still in the queue.
      SQLQ_PREPARE(st, conn, R"sql(
        SELECT id FROM sqlq_messages WHERE queue_id = ?1 AND dedup = ?2)sql");
      st.Bind(1, p.queue_id).BindText(2, m.dedup_key);
      int rc = st.Step();
      if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "send (dedup)");
      out.push_back({.id = st.Int(0), .duplicate = true});
    }
    if (stored > 0) {
      Status s = AddCounters(conn, p.queue_id, {.sends = stored});
      if (!s.ok()) return s;
    }
    return out;
  }

  Result<core::ClaimOutcome> Claim(Conn& c,
                                   const core::ClaimParams& p) override {
    SqliteConn& conn = Sql(c);
    Status checked = CheckQueue(conn, p.queue_id);
    if (!checked.ok()) return checked;
    const std::int64_t now = Us(clock_->Now());
    const std::int64_t until = now + p.lease.count();
    core::ClaimOutcome out;
    // Payload bytes leased so far, against p.max_bytes.
    std::size_t bytes = 0;
    bool full = false;
    auto fits = [&](std::size_t size) {
      return p.max_bytes == 0 || out.messages.empty() ||
             bytes + size <= p.max_bytes;
    };
    // Candidates in claim order. Those whose attempts are used up go to the
    // dead letters, and we look again for the places they leave free.
    for (;;) {
      const int want = p.max - static_cast<int>(out.messages.size());
      struct Candidate {
        std::int64_t id, priority, ready_us, token, attempts, enqueued_us;
        std::string payload;
      };
      std::vector<Candidate> found;
      // One index range per priority level, highest first: "priority = ?
      // AND ready_us <= now" is a range of the claim index, so leased and
      // delayed messages are never read, however many there are (a single
      // query ordered by priority would have to skip over them).
      std::optional<std::int64_t> below;
      std::size_t fetched = bytes;  // payload bytes leased and found
      while (static_cast<int>(found.size()) < want) {
        auto level = NextPriority(conn, p.queue_id, below);
        if (!level.ok()) return level.status();
        if (!level->has_value()) break;
        below = **level;
        SQLQ_PREPARE(st, conn, R"sql(
          SELECT id, priority, ready_us, token, attempts, enqueued_us, payload
          FROM sqlq_messages
          WHERE queue_id = ?1 AND priority = ?2 AND ready_us <= ?3
          ORDER BY ready_us, id
          LIMIT ?4)sql");
        st.Bind(1, p.queue_id)
            .Bind(2, *below)
            .Bind(3, now)
            .Bind(4, want - static_cast<int>(found.size()));
        int rc;
        while ((rc = st.Step()) == SQLITE_ROW) {
          found.push_back({st.Int(0), st.Int(1), st.Int(2), st.Int(3),
                           st.Int(4), st.Int(5), st.Blob(6)});
          fetched += found.back().payload.size();
          // Past the byte limit no more payloads are read: the reply they
          // would go into is full.
          if (p.max_bytes != 0 && fetched > p.max_bytes) break;
        }
        if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
          return Translate(rc, conn.db(), "claim");
        }
        if (p.max_bytes != 0 && fetched > p.max_bytes) break;
      }
      bool buried = false;
      for (Candidate& m : found) {
        const bool dies = m.attempts >= p.max_attempts;
        if (!dies && !fits(m.payload.size())) {
          // Left as it is, for the next claim.
          full = true;
          break;
        }
        if (m.token != 0) ++out.expirations;
        if (dies) {
          std::string why = fmt::format("lease expired on attempt {} of {}",
                                        m.attempts, p.max_attempts);
          Status s = MoveToDead(conn, m.id, why, now);
          if (!s.ok()) return s;
          ++out.dead_lettered;
          buried = true;
          continue;
        }
        bytes += m.payload.size();
        SQLQ_PREPARE(st, conn, R"sql(
          UPDATE sqlq_messages
          SET token = ?2, attempts = attempts + 1, ready_us = ?3, worker = ?4
          WHERE id = ?1)sql");
        st.Bind(1, m.id)
            .Bind(2, TokenBits(p.token))
            .Bind(3, until)
            .BindTextOrNull(4, p.worker);
        Status s = st.Run("claim");
        if (!s.ok()) return s;
        ClaimedMessage cm;
        cm.id = m.id;
        cm.attempt = static_cast<int>(m.attempts + 1);
        cm.priority = static_cast<std::int32_t>(m.priority);
        cm.payload = std::move(m.payload);
        cm.enqueued_at = FromUs(m.enqueued_us);
        cm.lease_expires_at = FromUs(until);
        out.messages.push_back(std::move(cm));
      }
      if (full || !buried || static_cast<int>(found.size()) < want) break;
    }
    const std::int64_t claimed = static_cast<std::int64_t>(out.messages.size());
    if (claimed + out.expirations + out.dead_lettered == 0) {
      // Nothing written: an empty claim stays read-only, so that idle
      // waiters make no commits (which would wake other waiters).
      return out;
    }
    Status s = AddCounters(conn, p.queue_id,
                           {.claims = claimed,
                            .expirations = out.expirations,
                            .dead_lettered = out.dead_lettered});
    if (!s.ok()) return s;
    return out;
  }

  Result<std::optional<Timestamp>> NextReadyAt(Conn& c,
                                               std::int64_t queue_id) override {
    SqliteConn& conn = Sql(c);
    // The earliest ready time of each priority level is the first entry of
    // its index range: one seek per level, not a scan of the queue.
    std::optional<std::int64_t> earliest;
    std::optional<std::int64_t> below;
    for (;;) {
      auto level = NextPriority(conn, queue_id, below);
      if (!level.ok()) return level.status();
      if (!level->has_value()) break;
      below = **level;
      SQLQ_PREPARE(st, conn, R"sql(
        SELECT min(ready_us) FROM sqlq_messages
        WHERE queue_id = ?1 AND priority = ?2)sql");
      st.Bind(1, queue_id).Bind(2, *below);
      int rc = st.Step();
      if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "next ready");
      if (!st.IsNull(0) && (!earliest || st.Int(0) < *earliest)) {
        earliest = st.Int(0);
      }
    }
    if (!earliest) return std::optional<Timestamp>();
    return std::optional<Timestamp>(FromUs(*earliest));
  }

  Result<Timestamp> Now(Conn&) override { return clock_->Now(); }

  Status Ack(Conn& c, const core::AckParams& p) override {
    SqliteConn& conn = Sql(c);
    const std::int64_t now = Us(clock_->Now());
    if (p.archive) {
      SQLQ_PREPARE(st, conn, R"sql(
        INSERT INTO sqlq_archive (id, queue_id, priority, attempts,
          enqueued_us, completed_us, worker, payload)
        SELECT id, queue_id, priority, attempts, enqueued_us, ?5, worker,
               payload
        FROM sqlq_messages
        WHERE id = ?1 AND queue_id = ?2 AND token = ?3 AND attempts = ?4)sql");
      BindFence(st, p.queue_id, p.receipt).Bind(5, now);
      Status s = st.Run("ack (archive)");
      if (!s.ok()) return s;
    }
    SQLQ_PREPARE(st, conn, R"sql(
      DELETE FROM sqlq_messages
      WHERE id = ?1 AND queue_id = ?2 AND token = ?3 AND attempts = ?4)sql");
    BindFence(st, p.queue_id, p.receipt);
    Status s = st.Run("ack");
    if (!s.ok()) return s;
    if (conn.changes() == 0) return Refused(conn, p.queue_id, p.receipt);
    return AddCounters(conn, p.queue_id, {.acks = 1});
  }

  Status Retry(Conn& c, const core::RetryParams& p) override {
    SqliteConn& conn = Sql(c);
    const std::int64_t now = Us(clock_->Now());
    SQLQ_PREPARE(st, conn, R"sql(
      UPDATE sqlq_messages SET token = 0, ready_us = ?5, last_error = ?6
      WHERE id = ?1 AND queue_id = ?2 AND token = ?3 AND attempts = ?4)sql");
    BindFence(st, p.queue_id, p.receipt)
        .Bind(5, now + p.delay.count())
        .BindTextOrNull(6, p.error);
    Status s = st.Run("nack");
    if (!s.ok()) return s;
    if (conn.changes() == 0) return Refused(conn, p.queue_id, p.receipt);
    return AddCounters(conn, p.queue_id, {.nacks = 1});
  }

  Status Bury(Conn& c, const core::BuryParams& p) override {
    SqliteConn& conn = Sql(c);
    const std::int64_t now = Us(clock_->Now());
    {
      SQLQ_PREPARE(st, conn, R"sql(
        SELECT 1 FROM sqlq_messages
        WHERE id = ?1 AND queue_id = ?2 AND token = ?3 AND attempts = ?4)sql");
      BindFence(st, p.queue_id, p.receipt);
      int rc = st.Step();
      if (rc == SQLITE_DONE) return Refused(conn, p.queue_id, p.receipt);
      if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "nack");
    }
    Status s = MoveToDead(conn, p.receipt.id, p.error, now);
    if (!s.ok()) return s;
    return AddCounters(conn, p.queue_id, {.nacks = 1, .dead_lettered = 1});
  }

  Result<Timestamp> Extend(Conn& c, std::int64_t queue_id,
                           const core::Receipt& receipt,
                           Micros lease) override {
    SqliteConn& conn = Sql(c);
    const std::int64_t until = Us(clock_->Now()) + lease.count();
    SQLQ_PREPARE(st, conn, R"sql(
      UPDATE sqlq_messages SET ready_us = ?5
      WHERE id = ?1 AND queue_id = ?2 AND token = ?3 AND attempts = ?4)sql");
    BindFence(st, queue_id, receipt).Bind(5, until);
    Status s = st.Run("extend");
    if (!s.ok()) return s;
    if (conn.changes() == 0) return Refused(conn, queue_id, receipt);
    return FromUs(until);
  }

  // --- rings ---------------------------------------------------------------

  Result<core::RingRecord> CreateRing(Conn& c, std::string_view name,
                                      const RingOptions& o) override {
    auto id =
        InsertKind(Sql(c), name, "ring", o.max_payload_bytes, o.capacity, 0);
    if (!id.ok()) return id.status();
    return core::RingRecord{.id = *id, .name = std::string(name), .options = o};
  }

  Result<core::RingRecord> GetRing(Conn& c, std::string_view name) override {
    SqliteConn& conn = Sql(c);
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT id, capacity, max_payload FROM sqlq_queues
      WHERE name = ?1 AND kind = 'ring')sql");
    st.BindText(1, name);
    int rc = st.Step();
    if (rc == SQLITE_ROW) {
      return core::RingRecord{
          .id = st.Int(0),
          .name = std::string(name),
          .options = {
              .capacity = st.Int(1),
              .max_payload_bytes = static_cast<std::size_t>(st.Int(2))}};
    }
    if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "look up ring");
    return Missing(conn, name, "ring");
  }

  Status DropRing(Conn& c, std::int64_t ring_id) override {
    return DeleteAll(Sql(c), ring_id,
                     {"DELETE FROM sqlq_ring_entries WHERE ring_id = ?1",
                      "DELETE FROM sqlq_ring_groups WHERE ring_id = ?1",
                      "DELETE FROM sqlq_queues WHERE id = ?1"},
                     "drop ring");
  }

  Result<RingEntry> RingPush(Conn& c, std::int64_t ring_id,
                             std::string_view group,
                             std::string_view payload) override {
    SqliteConn& conn = Sql(c);
    // The capacity as it is now, not as the caller's handle cached it.
    std::int64_t capacity = 0;
    {
      SQLQ_PREPARE(st, conn, R"sql(
        SELECT capacity FROM sqlq_queues WHERE id = ?1 AND kind = 'ring')sql");
      st.Bind(1, ring_id);
      int rc = st.Step();
      if (rc == SQLITE_DONE) return core::KindGone("ring", ring_id);
      if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "push");
      capacity = st.Int(0);
    }
    RingEntry e{.group = std::string(group),
                .payload = std::string(payload),
                .pushed_at = clock_->Now()};
    std::int64_t entries = 0;
    {
      SQLQ_PREPARE(st, conn, R"sql(
        INSERT INTO sqlq_ring_groups (ring_id, grp, last_seq, entries)
        VALUES (?1, ?2, 1, 1)
        ON CONFLICT (ring_id, grp)
        DO UPDATE SET last_seq = last_seq + 1, entries = entries + 1
        RETURNING last_seq, entries)sql");
      st.Bind(1, ring_id).BindText(2, group);
      int rc = st.Step();
      if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "push");
      e.seq = st.Int(0);
      entries = st.Int(1);
      if ((rc = st.Step()) != SQLITE_DONE) {
        return Translate(rc, conn.db(), "push");
      }
    }
    {
      SQLQ_PREPARE(st, conn, R"sql(
        INSERT INTO sqlq_ring_entries (ring_id, grp, seq, pushed_us, payload)
        VALUES (?1, ?2, ?3, ?4, ?5))sql");
      st.Bind(1, ring_id)
          .BindText(2, group)
          .Bind(3, e.seq)
          .Bind(4, Us(e.pushed_at))
          .BindBlob(5, payload);
      Status s = st.Run("push");
      if (!s.ok()) return s;
    }
    if (entries > capacity) {
      Status s = EvictOldest(conn, ring_id, group, entries - capacity);
      if (!s.ok()) return s;
    }
    Status s = AddCounters(conn, ring_id, {.pushes = 1});
    if (!s.ok()) return s;
    return e;
  }

  Result<std::vector<RingEntry>> RingRead(Conn& c, std::int64_t ring_id,
                                          std::string_view group,
                                          const RingReadOptions& o) override {
    SqliteConn& conn = Sql(c);
    Status s = CheckQueue(conn, ring_id);
    if (!s.ok()) return s;
    static constexpr const char* kNewest = R"sql(
      SELECT seq, pushed_us, payload FROM sqlq_ring_entries
      WHERE ring_id = ?1 AND grp = ?2 AND seq < ?4
      ORDER BY seq DESC LIMIT ?3)sql";
    static constexpr const char* kOldest = R"sql(
      SELECT seq, pushed_us, payload FROM sqlq_ring_entries
      WHERE ring_id = ?1 AND grp = ?2 AND seq > ?4
      ORDER BY seq LIMIT ?3)sql";
    SQLQ_PREPARE(st, conn, o.oldest_first ? kOldest : kNewest);
    st.Bind(1, ring_id)
        .BindText(2, group)
        .Bind(3, o.limit)
        .Bind(4, core::RingReadBound(o));
    std::vector<RingEntry> out;
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) {
      out.push_back(core::DecodeRingEntry(st, group));
    }
    if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "read ring");
    return out;
  }

  Result<std::vector<RingGroup>> RingGroups(Conn& c,
                                            std::int64_t ring_id) override {
    SqliteConn& conn = Sql(c);
    Status s = CheckQueue(conn, ring_id);
    if (!s.ok()) return s;
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT grp, entries FROM sqlq_ring_groups
      WHERE ring_id = ?1 AND entries > 0 ORDER BY grp)sql");
    st.Bind(1, ring_id);
    std::vector<RingGroup> out;
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) {
      out.push_back({.group = st.Text(0), .entries = st.Int(1)});
    }
    if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "list groups");
    return out;
  }

  Status RingDelete(Conn& c, std::int64_t ring_id, std::string_view group,
                    std::int64_t seq) override {
    SqliteConn& conn = Sql(c);
    {
      SQLQ_PREPARE(st, conn, R"sql(
        DELETE FROM sqlq_ring_entries
        WHERE ring_id = ?1 AND grp = ?2 AND seq = ?3)sql");
      st.Bind(1, ring_id).BindText(2, group).Bind(3, seq);
      Status s = st.Run("delete entry");
      if (!s.ok()) return s;
    }
    if (conn.changes() == 0) {
      return core::NoRingEntry(group, seq);
    }
    return AdjustEntries(conn, ring_id, group, -1);
  }

  Result<std::int64_t> RingDeleteGroup(Conn& c, std::int64_t ring_id,
                                       std::string_view group) override {
    SqliteConn& conn = Sql(c);
    Status s = CheckQueue(conn, ring_id);
    if (!s.ok()) return s;
    {
      SQLQ_PREPARE(st, conn, R"sql(
        DELETE FROM sqlq_ring_entries WHERE ring_id = ?1 AND grp = ?2)sql");
      st.Bind(1, ring_id).BindText(2, group);
      s = st.Run("delete group");
      if (!s.ok()) return s;
    }
    std::int64_t deleted = conn.changes();
    if (deleted > 0) {
      s = AdjustEntries(conn, ring_id, group, -deleted);
      if (!s.ok()) return s;
    }
    return deleted;
  }

  Result<std::int64_t> RingSetCapacity(Conn& c, std::int64_t ring_id,
                                       std::int64_t capacity) override {
    SqliteConn& conn = Sql(c);
    {
      SQLQ_PREPARE(st, conn, R"sql(
        UPDATE sqlq_queues SET capacity = ?2
        WHERE id = ?1 AND kind = 'ring')sql");
      st.Bind(1, ring_id).Bind(2, capacity);
      Status s = st.Run("set capacity");
      if (!s.ok()) return s;
      if (conn.changes() == 0) return core::KindGone("ring", ring_id);
    }
    std::vector<std::pair<std::string, std::int64_t>> over;
    {
      SQLQ_PREPARE(st, conn, R"sql(
        SELECT grp, entries FROM sqlq_ring_groups
        WHERE ring_id = ?1 AND entries > ?2 ORDER BY grp)sql");
      st.Bind(1, ring_id).Bind(2, capacity);
      int rc;
      while ((rc = st.Step()) == SQLITE_ROW) {
        over.emplace_back(st.Text(0), st.Int(1) - capacity);
      }
      if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "set capacity");
    }
    std::int64_t evicted = 0;
    for (const auto& [group, n] : over) {
      Status s = EvictOldest(conn, ring_id, group, n);
      if (!s.ok()) return s;
      evicted += n;
    }
    return evicted;
  }

  Result<RingStats> RingStatsOf(Conn& c, std::int64_t ring_id) override {
    SqliteConn& conn = Sql(c);
    RingStats out;
    {
      SQLQ_PREPARE(st, conn, R"sql(
        SELECT name, capacity, pushes FROM sqlq_queues
        WHERE id = ?1 AND kind = 'ring')sql");
      st.Bind(1, ring_id);
      int rc = st.Step();
      if (rc == SQLITE_DONE) return core::KindGone("ring", ring_id);
      if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "ring stats");
      out.name = st.Text(0);
      out.capacity = st.Int(1);
      out.pushes = st.Int(2);
    }
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT coalesce(sum(entries > 0), 0), coalesce(sum(entries), 0)
      FROM sqlq_ring_groups WHERE ring_id = ?1)sql");
    st.Bind(1, ring_id);
    int rc = st.Step();
    if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "ring stats");
    out.groups = st.Int(0);
    out.entries = st.Int(1);
    return out;
  }

  // --- rotations -------------------------------------------------------------

  Result<core::RotationRecord> CreateRotation(
      Conn& c, std::string_view name, const RotationOptions& o) override {
    auto id = InsertKind(Sql(c), name, "rotation", o.max_payload_bytes, 0,
                         o.max_failures);
    if (!id.ok()) return id.status();
    return core::RotationRecord{
        .id = *id, .name = std::string(name), .options = o};
  }

  Result<core::RotationRecord> GetRotation(Conn& c,
                                           std::string_view name) override {
    SqliteConn& conn = Sql(c);
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT id, max_failures, max_payload FROM sqlq_queues
      WHERE name = ?1 AND kind = 'rotation')sql");
    st.BindText(1, name);
    int rc = st.Step();
    if (rc == SQLITE_ROW) {
      return core::RotationRecord{
          .id = st.Int(0),
          .name = std::string(name),
          .options = {
              .max_failures = static_cast<int>(st.Int(1)),
              .max_payload_bytes = static_cast<std::size_t>(st.Int(2))}};
    }
    if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "look up rotation");
    return Missing(conn, name, "rotation");
  }

  Status DropRotation(Conn& c, std::int64_t rotation_id) override {
    return DeleteAll(Sql(c), rotation_id,
                     {"DELETE FROM sqlq_rotation_items WHERE rotation_id = ?1",
                      "DELETE FROM sqlq_queues WHERE id = ?1"},
                     "drop rotation");
  }

  Status RotationAdd(Conn& c, std::int64_t rotation_id, std::string_view key,
                     std::string_view payload) override {
    SqliteConn& conn = Sql(c);
    // Checked first, so that a refused add writes nothing (not even the
    // stamp): a clean failure (core/engine.h).
    {
      SQLQ_PREPARE(st, conn, R"sql(
        SELECT 1 FROM sqlq_rotation_items
        WHERE rotation_id = ?1 AND key = ?2)sql");
      st.Bind(1, rotation_id).BindText(2, key);
      int rc = st.Step();
      if (rc == SQLITE_ROW) {
        return core::ItemExists(key);
      }
      if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "add item");
    }
    auto stamp = NextStamp(conn, rotation_id);
    if (!stamp.ok()) return stamp.status();
    SQLQ_PREPARE(st, conn, R"sql(
      INSERT INTO sqlq_rotation_items (rotation_id, key, payload, added)
      VALUES (?1, ?2, ?3, ?4))sql");
    st.Bind(1, rotation_id)
        .BindText(2, key)
        .BindBlob(3, payload)
        .Bind(4, *stamp);
    return st.Run("add item");
  }

  Status RotationRemove(Conn& c, std::int64_t rotation_id,
                        std::string_view key) override {
    SqliteConn& conn = Sql(c);
    SQLQ_PREPARE(st, conn, R"sql(
      DELETE FROM sqlq_rotation_items WHERE rotation_id = ?1 AND key = ?2)sql");
    st.Bind(1, rotation_id).BindText(2, key);
    Status s = st.Run("remove item");
    if (!s.ok()) return s;
    if (conn.changes() == 0) return core::NoItem(key);
    return Status::Ok();
  }

  Result<std::vector<RotationItem>> RotationNext(Conn& c,
                                                 std::int64_t rotation_id,
                                                 int n) override {
    SqliteConn& conn = Sql(c);
    Status s = CheckQueue(conn, rotation_id);
    if (!s.ok()) return s;
    std::vector<RotationItem> out;
    {
      // Served order: least recently served first (0 = never), then the
      // order of addition. Both are stamps of one counter, so the order is
      // total and exact at any rate.
      SQLQ_PREPARE(st, conn, R"sql(
        SELECT key, payload, serves, failures FROM sqlq_rotation_items
        WHERE rotation_id = ?1 AND parked = 0
        ORDER BY last_served, added LIMIT ?2)sql");
      st.Bind(1, rotation_id).Bind(2, n);
      int rc;
      while ((rc = st.Step()) == SQLITE_ROW) {
        out.push_back({.key = st.Text(0),
                       .payload = st.Blob(1),
                       .served = st.Int(2) + 1,
                       .failures = static_cast<int>(st.Int(3))});
      }
      if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "next");
    }
    if (out.empty()) return out;
    // One stamp per item, in the order served: with one stamp for the whole
    // call, ties would fall back to the order of addition, and an item added
    // early that is served at the end of a call would come first again in
    // the next round, ahead of items served before it (starving others).
    const auto count = static_cast<std::int64_t>(out.size());
    auto last = NextStamp(conn, rotation_id, count);
    if (!last.ok()) return last.status();
    std::int64_t stamp = *last - count;
    for (const RotationItem& item : out) {
      SQLQ_PREPARE(st, conn, R"sql(
        UPDATE sqlq_rotation_items SET last_served = ?3, serves = serves + 1
        WHERE rotation_id = ?1 AND key = ?2)sql");
      st.Bind(1, rotation_id).BindText(2, item.key).Bind(3, ++stamp);
      s = st.Run("next");
      if (!s.ok()) return s;
    }
    s = AddCounters(conn, rotation_id,
                    {.serves = static_cast<std::int64_t>(out.size())});
    if (!s.ok()) return s;
    return out;
  }

  Result<RotationItem> RotationFail(Conn& c, std::int64_t rotation_id,
                                    std::string_view key,
                                    int max_failures) override {
    static constexpr const char* kSql = R"sql(
      UPDATE sqlq_rotation_items
      SET failures = failures + 1, parked = (failures + 1 >= ?3)
      WHERE rotation_id = ?1 AND key = ?2
      RETURNING key, payload, serves, failures, parked)sql";
    return UpdateItem(Sql(c), kSql, rotation_id, key, max_failures);
  }

  Result<RotationItem> RotationOk(Conn& c, std::int64_t rotation_id,
                                  std::string_view key) override {
    SqliteConn& conn = Sql(c);
    {
      SQLQ_PREPARE(st, conn, R"sql(
        SELECT parked FROM sqlq_rotation_items
        WHERE rotation_id = ?1 AND key = ?2)sql");
      st.Bind(1, rotation_id).BindText(2, key);
      int rc = st.Step();
      if (rc == SQLITE_DONE) return core::NoItem(key);
      if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "ok");
      if (st.Int(0) != 0) {
        return core::ItemParked(key);
      }
    }
    static constexpr const char* kSql = R"sql(
      UPDATE sqlq_rotation_items SET failures = 0
      WHERE rotation_id = ?1 AND key = ?2
      RETURNING key, payload, serves, failures, parked)sql";
    return UpdateItem(conn, kSql, rotation_id, key, 0);
  }

  Result<RotationItem> RotationReset(Conn& c, std::int64_t rotation_id,
                                     std::string_view key) override {
    static constexpr const char* kSql = R"sql(
      UPDATE sqlq_rotation_items SET failures = 0, parked = 0
      WHERE rotation_id = ?1 AND key = ?2
      RETURNING key, payload, serves, failures, parked)sql";
    return UpdateItem(Sql(c), kSql, rotation_id, key, 0);
  }

  Result<std::vector<RotationItem>> RotationList(
      Conn& c, std::int64_t rotation_id) override {
    SqliteConn& conn = Sql(c);
    Status s = CheckQueue(conn, rotation_id);
    if (!s.ok()) return s;
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT key, payload, serves, failures, parked FROM sqlq_rotation_items
      WHERE rotation_id = ?1 ORDER BY parked, last_served, added)sql");
    st.Bind(1, rotation_id);
    std::vector<RotationItem> out;
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) out.push_back(core::DecodeItem(st));
    if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "list items");
    return out;
  }

  Result<RotationStats> RotationStatsOf(Conn& c,
                                        std::int64_t rotation_id) override {
    SqliteConn& conn = Sql(c);
    RotationStats out;
    {
      SQLQ_PREPARE(st, conn, R"sql(
        SELECT name, max_failures, serves FROM sqlq_queues
        WHERE id = ?1 AND kind = 'rotation')sql");
      st.Bind(1, rotation_id);
      int rc = st.Step();
      if (rc == SQLITE_DONE) return core::KindGone("rotation", rotation_id);
      if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "rotation stats");
      out.name = st.Text(0);
      out.max_failures = static_cast<int>(st.Int(1));
      out.serves = st.Int(2);
    }
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT count(*), coalesce(sum(parked), 0) FROM sqlq_rotation_items
      WHERE rotation_id = ?1)sql");
    st.Bind(1, rotation_id);
    int rc = st.Step();
    if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "rotation stats");
    out.items = st.Int(0);
    out.parked = st.Int(1);
    return out;
  }

  // --- dead letters and archive -------------------------------------------

  Result<std::vector<DeadLetter>> ListDead(Conn& c, std::int64_t queue_id,
                                           const ListOptions& o) override {
    SqliteConn& conn = Sql(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT id, priority, attempts, enqueued_us, died_us, last_error, payload
      FROM sqlq_dead WHERE queue_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3)sql");
    st.Bind(1, queue_id).Bind(2, o.after_id).Bind(3, o.limit);
    std::vector<DeadLetter> out;
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) {
      out.push_back(core::DecodeDead(st));
    }
    if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "list dead");
    return out;
  }

  Result<std::int64_t> Redrive(Conn& c, std::int64_t queue_id,
                               std::span<const std::int64_t> ids) override {
    SqliteConn& conn = Sql(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    const std::int64_t now = Us(clock_->Now());
    // A redriven message is ready now with fresh attempts; it keeps its id
    // (never reused, see schema.h) but not a dedup key.
    static constexpr const char* kInsertAll = R"sql(
      INSERT INTO sqlq_messages (id, queue_id, priority, ready_us, attempts,
        enqueued_us, last_error, payload)
      SELECT id, queue_id, priority, ?2, 0, enqueued_us, last_error, payload
      FROM sqlq_dead WHERE queue_id = ?1 ORDER BY id)sql";
    static constexpr const char* kInsertOne = R"sql(
      INSERT INTO sqlq_messages (id, queue_id, priority, ready_us, attempts,
        enqueued_us, last_error, payload)
      SELECT id, queue_id, priority, ?2, 0, enqueued_us, last_error, payload
      FROM sqlq_dead WHERE queue_id = ?1 AND id = ?3)sql";
    std::int64_t moved = 0;
    if (ids.empty()) {
      {
        SQLQ_PREPARE(st, conn, kInsertAll);
        st.Bind(1, queue_id).Bind(2, now);
        s = st.Run("redrive");
        if (!s.ok()) return s;
        moved = conn.changes();
      }
      SQLQ_PREPARE(st, conn, "DELETE FROM sqlq_dead WHERE queue_id = ?1");
      st.Bind(1, queue_id);
      s = st.Run("redrive");
      if (!s.ok()) return s;
      return moved;
    }
    for (std::int64_t id : ids) {
      {
        SQLQ_PREPARE(st, conn, kInsertOne);
        st.Bind(1, queue_id).Bind(2, now).Bind(3, id);
        s = st.Run("redrive");
        if (!s.ok()) return s;
        if (conn.changes() == 0) continue;
        ++moved;
      }
      SQLQ_PREPARE(st, conn,
                   "DELETE FROM sqlq_dead WHERE queue_id = ?1 AND id = ?2");
      st.Bind(1, queue_id).Bind(2, id);
      s = st.Run("redrive");
      if (!s.ok()) return s;
    }
    return moved;
  }

  Result<std::int64_t> PurgeDead(Conn& c, std::int64_t queue_id) override {
    SqliteConn& conn = Sql(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    SQLQ_PREPARE(st, conn, "DELETE FROM sqlq_dead WHERE queue_id = ?1");
    st.Bind(1, queue_id);
    s = st.Run("purge dead letters");
    if (!s.ok()) return s;
    return conn.changes();
  }

  Result<std::vector<ArchivedMessage>> ListArchive(
      Conn& c, std::int64_t queue_id, const ListOptions& o) override {
    SqliteConn& conn = Sql(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT id, priority, attempts, enqueued_us, completed_us, worker, payload
      FROM sqlq_archive WHERE queue_id = ?1 AND id > ?2
      ORDER BY id LIMIT ?3)sql");
    st.Bind(1, queue_id).Bind(2, o.after_id).Bind(3, o.limit);
    std::vector<ArchivedMessage> out;
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) {
      out.push_back(core::DecodeArchived(st));
    }
    if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "list archive");
    return out;
  }

  Result<std::int64_t> PruneArchive(Conn& c, std::int64_t queue_id,
                                    Micros retention) override {
    SqliteConn& conn = Sql(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    SQLQ_PREPARE(st, conn, R"sql(
      DELETE FROM sqlq_archive WHERE queue_id = ?1 AND completed_us < ?2)sql");
    st.Bind(1, queue_id).Bind(2, Us(clock_->Now()) - retention.count());
    s = st.Run("prune archive");
    if (!s.ok()) return s;
    return conn.changes();
  }

 private:
  static SqliteConn& Sql(Conn& c) { return static_cast<SqliteConn&>(c); }

  // Creates the row of a ring or rotation (`kind` is one of those two
  // literals); kAlreadyExists when the name is taken by any kind.
  Result<std::int64_t> InsertKind(SqliteConn& conn, std::string_view name,
                                  const char* kind, std::size_t max_payload,
                                  std::int64_t capacity, int max_failures) {
    SQLQ_PREPARE(st, conn, R"sql(
      INSERT INTO sqlq_queues (name, kind, max_attempts, lease_us,
        backoff_base_us, backoff_max_us, archive, retention_us, max_payload,
        created_us, capacity, max_failures)
      VALUES (?1, ?2, 0, 0, 0, 0, 0, 0, ?3, ?4, ?5, ?6)
      ON CONFLICT (name) DO NOTHING)sql");
    st.BindText(1, name)
        .BindText(2, kind)
        .Bind(3, static_cast<std::int64_t>(max_payload))
        .Bind(4, Us(clock_->Now()))
        .Bind(5, capacity)
        .Bind(6, max_failures);
    Status s = st.Run(fmt::format("create {}", kind));
    if (!s.ok()) return s;
    if (conn.changes() == 0) return Taken(conn, name);
    return sqlite3_last_insert_rowid(conn.db());
  }

  // Why `name` is not a `want`: missing, or another kind of thing.
  Status Missing(SqliteConn& conn, std::string_view name,
                 std::string_view want) {
    SQLQ_PREPARE(st, conn, "SELECT kind FROM sqlq_queues WHERE name = ?1");
    st.BindText(1, name);
    int rc = st.Step();
    if (rc == SQLITE_ROW) {
      return core::NotA(name, st.Text(0), want);
    }
    if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "look up name");
    return core::NotA(name, std::nullopt, want);
  }

  // The name is taken: says by what kind of thing.
  Status Taken(SqliteConn& conn, std::string_view name) {
    SQLQ_PREPARE(st, conn, "SELECT kind FROM sqlq_queues WHERE name = ?1");
    st.BindText(1, name);
    int rc = st.Step();
    if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "look up name");
    return core::NameTaken(name, st.Text(0));
  }

  Status DeleteAll(SqliteConn& conn, std::int64_t id,
                   std::initializer_list<const char*> statements,
                   std::string_view what) {
    for (const char* sql : statements) {
      SQLQ_PREPARE(st, conn, sql);
      st.Bind(1, id);
      Status s = st.Run(what);
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }

  // Deletes the group's `n` oldest entries (lowest seq: a total order, so a
  // statement-replaying replica evicts the same rows).
  Status EvictOldest(SqliteConn& conn, std::int64_t ring_id,
                     std::string_view group, std::int64_t n) {
    {
      SQLQ_PREPARE(st, conn, R"sql(
        DELETE FROM sqlq_ring_entries
        WHERE ring_id = ?1 AND grp = ?2 AND seq IN (
          SELECT seq FROM sqlq_ring_entries
          WHERE ring_id = ?1 AND grp = ?2 ORDER BY seq LIMIT ?3))sql");
      st.Bind(1, ring_id).BindText(2, group).Bind(3, n);
      Status s = st.Run("evict");
      if (!s.ok()) return s;
    }
    return AdjustEntries(conn, ring_id, group, -conn.changes());
  }

  Status AdjustEntries(SqliteConn& conn, std::int64_t ring_id,
                       std::string_view group, std::int64_t delta) {
    SQLQ_PREPARE(st, conn, R"sql(
      UPDATE sqlq_ring_groups SET entries = entries + ?3
      WHERE ring_id = ?1 AND grp = ?2)sql");
    st.Bind(1, ring_id).BindText(2, group).Bind(3, delta);
    return st.Run("count entries");
  }

  // Takes the rotation's next `count` counter values and returns the last
  // of them; kNotFound when the rotation was dropped.
  Result<std::int64_t> NextStamp(SqliteConn& conn, std::int64_t rotation_id,
                                 std::int64_t count = 1) {
    SQLQ_PREPARE(st, conn, R"sql(
      UPDATE sqlq_queues SET next_stamp = next_stamp + ?2
      WHERE id = ?1 AND kind = 'rotation' RETURNING next_stamp)sql");
    st.Bind(1, rotation_id).Bind(2, count);
    int rc = st.Step();
    if (rc == SQLITE_DONE) return core::KindGone("rotation", rotation_id);
    if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "stamp");
    std::int64_t stamp = st.Int(0);
    if ((rc = st.Step()) != SQLITE_DONE) {
      return Translate(rc, conn.db(), "stamp");
    }
    return stamp;
  }

  Result<RotationItem> UpdateItem(SqliteConn& conn, const char* sql,
                                  std::int64_t rotation_id,
                                  std::string_view key, int param) {
    SQLQ_PREPARE(st, conn, sql);
    st.Bind(1, rotation_id).BindText(2, key);
    if (param != 0) st.Bind(3, param);
    int rc = st.Step();
    if (rc == SQLITE_DONE) return core::NoItem(key);
    if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "update item");
    RotationItem item = core::DecodeItem(st);
    if ((rc = st.Step()) != SQLITE_DONE) {
      return Translate(rc, conn.db(), "update item");
    }
    return item;
  }

  // The highest priority level of the queue below `below` (all levels when
  // unset); nullopt when there is none. One seek in the claim index.
  Result<std::optional<std::int64_t>> NextPriority(
      SqliteConn& conn, std::int64_t queue_id,
      std::optional<std::int64_t> below) {
    static constexpr const char* kTop = R"sql(
      SELECT max(priority) FROM sqlq_messages WHERE queue_id = ?1)sql";
    static constexpr const char* kBelow = R"sql(
      SELECT max(priority) FROM sqlq_messages
      WHERE queue_id = ?1 AND priority < ?2)sql";
    SQLQ_PREPARE(st, conn, below ? kBelow : kTop);
    st.Bind(1, queue_id);
    if (below) st.Bind(2, *below);
    int rc = st.Step();
    if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "claim");
    if (st.IsNull(0)) return std::optional<std::int64_t>();
    return std::optional<std::int64_t>(st.Int(0));
  }

  static Stmt& BindFence(Stmt& st, std::int64_t queue_id,
                         const core::Receipt& r) {
    return st.Bind(1, r.id)
        .Bind(2, queue_id)
        .Bind(3, TokenBits(r.token))
        .Bind(4, r.attempt);
  }

  Status CheckQueue(SqliteConn& conn, std::int64_t queue_id) {
    if (conn.known_queues.contains(queue_id)) return Status::Ok();
    SQLQ_PREPARE(st, conn, "SELECT 1 FROM sqlq_queues WHERE id = ?1");
    st.Bind(1, queue_id);
    int rc = st.Step();
    if (rc == SQLITE_ROW) {
      conn.known_queues.insert(queue_id);
      return Status::Ok();
    }
    if (rc == SQLITE_DONE) return core::QueueGone(queue_id);
    return Translate(rc, conn.db(), "look up queue");
  }

  // REQUIRES: the queue was seen in this transaction (CheckQueue, or a
  // message of it was changed).
  Status AddCounters(SqliteConn& conn, std::int64_t queue_id,
                     const QueueCounters& d) {
    if (conn.DeferCounters(queue_id, d)) return Status::Ok();
    return WriteCounters(conn, queue_id, d);
  }

  Status FlushCounters(SqliteConn& conn) {
    for (const auto& [queue_id, d] : conn.pending_counters) {
      Status s = WriteCounters(conn, queue_id, d);
      if (!s.ok()) return s;
    }
    conn.pending_counters.clear();
    return Status::Ok();
  }

  Status WriteCounters(SqliteConn& conn, std::int64_t queue_id,
                       const QueueCounters& d) {
    SQLQ_PREPARE(st, conn, R"sql(
      UPDATE sqlq_queues SET sends = sends + ?2, claims = claims + ?3,
        acks = acks + ?4, nacks = nacks + ?5,
        expirations = expirations + ?6, dead_lettered = dead_lettered + ?7,
        pushes = pushes + ?8, serves = serves + ?9
      WHERE id = ?1)sql");
    st.Bind(1, queue_id)
        .Bind(2, d.sends)
        .Bind(3, d.claims)
        .Bind(4, d.acks)
        .Bind(5, d.nacks)
        .Bind(6, d.expirations)
        .Bind(7, d.dead_lettered)
        .Bind(8, d.pushes)
        .Bind(9, d.serves);
    Status s = st.Run("update counters");
    if (!s.ok()) return s;
    if (conn.changes() == 0) return core::QueueGone(queue_id);
    return Status::Ok();
  }

  Status MoveToDead(SqliteConn& conn, std::int64_t id, std::string_view error,
                    std::int64_t now) {
    {
      SQLQ_PREPARE(st, conn, R"sql(
        INSERT INTO sqlq_dead (id, queue_id, priority, attempts, enqueued_us,
          died_us, last_error, payload)
        SELECT id, queue_id, priority, attempts, enqueued_us, ?2, ?3, payload
        FROM sqlq_messages WHERE id = ?1)sql");
      st.Bind(1, id).Bind(2, now).BindText(3, error);
      Status s = st.Run("dead-letter");
      if (!s.ok()) return s;
    }
    SQLQ_PREPARE(st, conn, "DELETE FROM sqlq_messages WHERE id = ?1");
    st.Bind(1, id);
    return st.Run("dead-letter");
  }

  // Says why a receipt was refused: the message is gone, or it is there
  // under another lease.
  Status Refused(SqliteConn& conn, std::int64_t queue_id,
                 const core::Receipt& r) {
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT token, attempts FROM sqlq_messages
      WHERE id = ?1 AND queue_id = ?2)sql");
    st.Bind(1, r.id).Bind(2, queue_id);
    int rc = st.Step();
    if (rc == SQLITE_DONE) {
      return core::NotInQueue(r.id);
    }
    if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "check receipt");
    const std::int64_t attempts = st.Int(1);
    return core::StaleReceipt(r, st.Int(0), attempts);
  }

  Status InTransaction(SqliteConn& conn, const char* begin,
                       const std::function<Status(Conn&)>& body) {
    conn.ResetTxState();
    Status s = conn.Exec(begin, "begin transaction");
    if (!s.ok()) return s;
    s = body(conn);
    if (s.ok()) s = FlushCounters(conn);
    if (s.ok()) {
      s = conn.Exec("COMMIT", "commit");
      if (s.ok()) return s;
    }
    // Rolls back whatever is left; after a failed COMMIT SQLite may have
    // rolled back already, which ROLLBACK then reports harmlessly.
    if (sqlite3_get_autocommit(conn.db()) == 0) {
      (void)conn.Exec("ROLLBACK", "rollback");
    }
    return s;
  }

  Result<std::unique_ptr<SqliteConn>> Connect(bool create) {
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
              fmt::format("cannot create database '{}': directory '{}': {}",
                          path, dir.string(), ec.message()));
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
          return Status::PermissionDenied(fmt::format(
              "cannot {} database '{}': {}", exists ? "open" : "create", path,
              std::strerror(err)));
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
    char* err = nullptr;
    rc = sqlite3_exec(db, pragmas.c_str(), nullptr, nullptr, &err);
    sqlite3_free(err);
    if (rc != SQLITE_OK) {
      return Translate(rc, db, fmt::format("open database '{}'", path));
    }
    return conn;
  }

  // Brings the schema to kSchemaVersion (core/migrate.h) in one
  // BEGIN IMMEDIATE transaction, which is also the migration lock. A file
  // that exists is given sqlq's tables even when the caller asked not to
  // create a database (a missing file was refused before this).
  Status Migrate(SqliteConn& conn) {
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

  Result<std::unique_ptr<SqliteConn>> AcquireReader() {
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

  void ReleaseReader(std::unique_ptr<SqliteConn> conn) {
    std::lock_guard<std::mutex> lock(readers_mu_);
    if (readers_.size() < 8) readers_.push_back(std::move(conn));
  }

  Settings settings_;
  std::shared_ptr<Clock> clock_;
  std::string real_path_;
  std::mutex writer_mu_;
  std::unique_ptr<SqliteConn> writer_;  // guarded by writer_mu_
  std::int64_t data_version_ = -1;      // guarded by writer_mu_
  std::mutex readers_mu_;
  std::vector<std::unique_ptr<SqliteConn>> readers_;  // guarded by readers_mu_
  std::unique_ptr<FileWatcher> watcher_;
};

}  // namespace

Result<std::unique_ptr<core::Engine>> Open(std::string_view rest,
                                           const StoreOptions& options) {
  auto settings = ParseUrl(rest);
  if (!settings.ok()) return settings.status();
  auto clock = options.clock ? options.clock : std::make_shared<SystemClock>();
  auto engine = std::make_unique<SqliteEngine>(std::move(*settings), clock);
  Status s = engine->Init(options.create_if_missing);
  if (!s.ok()) return s;
  return std::unique_ptr<core::Engine>(std::move(engine));
}

}  // namespace sqlq::engines::sqlite
