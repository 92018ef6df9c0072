// The MariaDB/MySQL engine. Design notes: docs/engines/mysql.md.
//
// Connections: a pool of Connector/C connections, each with its own binary
// prepared statements and session settings chosen here (sql_mode, time
// zone, isolation, lock wait timeout), so that any server configuration
// behaves the same. Write() does not serialise: the core's WriteBatcher
// merges one process's writes, and transactions contend only on the rows
// they touch. Write transactions run at READ COMMITTED (REPEATABLE READ
// when the server logs in STATEMENT format, which refuses READ COMMITTED);
// reads run in a REPEATABLE READ READ ONLY snapshot.
//
// Deadlocks (1213) and lock wait timeouts (1205) roll the transaction back;
// Write() runs it again (core::RetryPolicy, core/tx_conn.h), so they do not
// reach the caller.
//
// Clean failures (engine.h): operations check their preconditions with
// reads before they write. The one expected failing statement, a duplicate
// key (dedup key, queue name), is rolled back by InnoDB as a statement and
// leaves the transaction usable; any other failed statement is remembered
// (MyConn::tx_error) and the transaction is then never committed.
//
// Replication: every statement that writes picks its rows by primary key
// or by a total order, and no write uses LIMIT, so statement-based replicas
// apply the same changes (docs/engines/mysql.md lists what MariaDB marks
// unsafe and what we do instead).
//
// Time: the database clock, NOW(6), read once per transaction, unless
// StoreOptions::clock is set; either way every statement gets "now" as a
// parameter.

#include "engines/mysql/mysql_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <limits>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "core/errors.h"
#include "core/migrate.h"
#include "core/rows.h"
#include "core/tx_conn.h"
#include "core/url_params.h"
#include "engines/mysql/my_conn.h"
#include "engines/mysql/schema.h"

namespace sqlq::engines::mysql {

namespace {

using core::Conn;
using core::Micros;

// Idle connections kept for reuse.
constexpr std::size_t kMaxIdle = 16;
// Rows per multi-row INSERT, and bytes of payload per INSERT (well below
// the server's max_allowed_packet, 16 MiB by default).
constexpr std::size_t kMaxInsertRows = 256;
constexpr std::size_t kMaxInsertBytes = 4 << 20;
// Wake-up polling: from kPollMin, doubling while nothing changes, up to
// kPollMax; only while some claim waits.
constexpr std::chrono::milliseconds kPollMin{2};
constexpr std::chrono::milliseconds kPollMax{50};

// The session every connection gets, whatever the server's defaults: a
// strict sql_mode without ANSI_QUOTES, PIPES_AS_CONCAT,
// NO_BACKSLASH_ESCAPES or SIMULTANEOUS_ASSIGNMENT (the SQL here does not
// depend on any of them, but a user's joined connection may have them);
// UTC; a short lock wait, as no sqlq statement waits long on a row by
// design.
constexpr const char* kSessionSql =
    "SET SESSION sql_mode = "
    "'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
    "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION', "
    "time_zone = '+00:00', innodb_lock_wait_timeout = 5, autocommit = 1";

using core::FromUs;
using core::TokenBits;
using core::Us;

// "?, ?, ?" for `n` placeholders.
std::string Marks(std::size_t n) {
  std::string s;
  s.reserve(n * 3);
  for (std::size_t i = 0; i < n; ++i) s += i == 0 ? "?" : ", ?";
  return s;
}

// IN lists are padded (by repeating the last id) to a power of two, so that
// a connection prepares at most a dozen variants of each statement.
std::size_t Bucket(std::size_t n) {
  std::size_t b = 1;
  while (b < n) b <<= 1;
  return b;
}

void AddIds(Params& p, const std::vector<std::int64_t>& ids) {
  for (std::int64_t id : ids) p.Int(id);
  for (std::size_t i = ids.size(); i < Bucket(ids.size()); ++i) {
    p.Int(ids.back());
  }
}

// Connection parameters from the URL.
struct ConnParams {
  std::string host = "localhost";
  unsigned int port = 3306;
  std::string user;
  std::string password;
  std::string database;
  std::string socket;
  std::string ssl = "prefer";  // disable, prefer, require, verify-ca/full
  std::string ssl_ca, ssl_cert, ssl_key;
  unsigned int connect_timeout = 10;
  // Tuning (docs/engines/mysql.md): group commits run at once.
  int write_groups = 1;
};

Result<std::string> Decode(std::string_view s, std::string_view what) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    if (i + 2 >= s.size()) {
      return Status::InvalidArgument(
          fmt::format("malformed MySQL URL: bad percent escape in {}", what));
    }
    const int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
    if (hi < 0 || lo < 0) {
      return Status::InvalidArgument(
          fmt::format("malformed MySQL URL: bad percent escape in {}", what));
    }
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

Result<ConnParams> ParseUrl(std::string_view url) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(
        fmt::format("malformed MySQL URL: {} (expected "
                    "mysql://user:password@host:port/database?param=value)",
                    why));
  };
  const auto scheme = url.find("://");
  if (scheme == std::string_view::npos) return bad("no scheme");
  std::string_view rest = url.substr(scheme + 3);
  std::string_view query;
  if (auto q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  const auto slash = rest.find('/');
  if (slash == std::string_view::npos || slash + 1 == rest.size()) {
    return bad("no database name");
  }
  std::string_view authority = rest.substr(0, slash);
  ConnParams p;
  auto db = Decode(rest.substr(slash + 1), "the database name");
  if (!db.ok()) return db.status();
  p.database = *db;
  if (p.database.find('/') != std::string::npos) {
    return bad("the database name contains '/'");
  }
  if (auto at = authority.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = authority.substr(0, at);
    authority = authority.substr(at + 1);
    std::string_view user = userinfo, password;
    if (auto colon = userinfo.find(':'); colon != std::string_view::npos) {
      user = userinfo.substr(0, colon);
      password = userinfo.substr(colon + 1);
    }
    auto u = Decode(user, "the user name");
    if (!u.ok()) return u.status();
    auto pw = Decode(password, "the password");
    if (!pw.ok()) return pw.status();
    p.user = *u;
    p.password = *pw;
  }
  std::string_view host = authority;
  if (!host.empty() && host.front() == '[') {  // [::1]:3306
    const auto close = host.find(']');
    if (close == std::string_view::npos) return bad("unclosed '['");
    std::string_view after = host.substr(close + 1);
    host = host.substr(1, close - 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("junk after ']'");
      authority = after;
    } else {
      authority = {};
    }
  } else if (auto colon = host.rfind(':'); colon != std::string_view::npos) {
    authority = host.substr(colon);
    host = host.substr(0, colon);
  } else {
    authority = {};
  }
  if (!authority.empty()) {  // ":port"
    std::string_view port = authority.substr(1);
    unsigned long v = 0;
    if (port.empty() || port.size() > 5) return bad("bad port");
    for (char c : port) {
      if (c < '0' || c > '9') return bad("bad port");
      v = v * 10 + static_cast<unsigned long>(c - '0');
    }
    if (v == 0 || v > 65535) return bad("port out of range");
    p.port = static_cast<unsigned int>(v);
  }
  if (!host.empty()) p.host = std::string(host);
  while (!query.empty()) {
    std::string_view kv = query.substr(0, query.find('&'));
    query = kv.size() < query.size() ? query.substr(kv.size() + 1)
                                     : std::string_view{};
    if (kv.empty()) continue;
    const auto eq = kv.find('=');
    if (eq == std::string_view::npos) {
      return bad(fmt::format("parameter '{}' has no value", kv));
    }
    const std::string_view key = kv.substr(0, eq);
    auto value = Decode(kv.substr(eq + 1), key);
    if (!value.ok()) return value.status();
    if (key == "ssl" || key == "sslmode" || key == "ssl-mode") {
      std::string v = *value;
      std::transform(v.begin(), v.end(), v.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      std::replace(v.begin(), v.end(), '_', '-');
      if (v == "true" || v == "1" || v == "required") v = "require";
      if (v == "false" || v == "0" || v == "disabled") v = "disable";
      if (v == "preferred") v = "prefer";
      if (v == "verify-identity") v = "verify-full";
      if (v != "disable" && v != "prefer" && v != "require" &&
          v != "verify-ca" && v != "verify-full") {
        return bad(fmt::format(
            "ssl={} (expected disable, prefer, require, verify-ca or "
            "verify-full)",
            *value));
      }
      p.ssl = v;
    } else if (key == "ssl_ca" || key == "sslrootcert" || key == "ssl-ca") {
      p.ssl_ca = *value;
    } else if (key == "ssl_cert" || key == "sslcert" || key == "ssl-cert") {
      p.ssl_cert = *value;
    } else if (key == "ssl_key" || key == "sslkey" || key == "ssl-key") {
      p.ssl_key = *value;
    } else if (key == "connect_timeout") {
      char* end = nullptr;
      const long t = std::strtol(value->c_str(), &end, 10);
      if (value->empty() || *end != '\0' || t < 1 || t > 3600) {
        return bad("connect_timeout must be 1..3600 seconds");
      }
      p.connect_timeout = static_cast<unsigned int>(t);
    } else if (key == "socket") {
      p.socket = *value;
    } else if (key == "write_groups") {
      auto n = core::ParseUrlInt(key, *value, 1, 64);
      if (!n.ok()) return n.status();
      p.write_groups = static_cast<int>(*n);
    } else {
      return bad(fmt::format("unknown parameter '{}'", key));
    }
  }
  return p;
}

// Polls sqlq_counters for sends and nacks of other processes while some
// claim waits (docs/engines/mysql.md, "Wake-ups").
class Poller {
 public:
  Poller(std::function<MYSQL*()> connect, std::function<std::size_t()> waiting,
         std::function<std::int64_t()> own, std::function<void()> changed)
      : connect_(std::move(connect)),
        waiting_(std::move(waiting)),
        own_(std::move(own)),
        changed_(std::move(changed)),
        thread_([this] { Loop(); }) {}
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;
  ~Poller() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  // For tests and the probe: queries sent so far.
  std::int64_t queries() const { return queries_.load(); }

 private:
  bool Sleep(std::chrono::milliseconds d) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, d, [this] { return stop_; });
    return !stop_;
  }

  void Loop() {
    MYSQL* conn = nullptr;
    bool have_base = false;
    std::int64_t base_sum = 0, base_rows = 0;
    auto interval = kPollMin;
    auto retry = std::chrono::milliseconds(50);
    for (;;) {
      if (waiting_() == 0) {
        // Nobody waits: no queries at all. The next waiter starts afresh.
        have_base = false;
        interval = kPollMin;
        if (!Sleep(kPollMax)) break;
        continue;
      }
      if (conn == nullptr) {
        conn = connect_();
        if (conn == nullptr) {
          if (!Sleep(retry)) break;
          retry = std::min(retry * 2, std::chrono::milliseconds(1000));
          continue;
        }
        retry = std::chrono::milliseconds(50);
        have_base = false;
      }
      static constexpr std::string_view kSql =
          "SELECT COALESCE(SUM(sends + nacks), 0), COUNT(*) FROM sqlq_counters";
      ++queries_;
      std::int64_t sum = 0, rows = 0;
      bool ok = mysql_real_query(conn, kSql.data(), kSql.size()) == 0;
      if (ok) {
        MYSQL_RES* res = mysql_store_result(conn);
        MYSQL_ROW row = res != nullptr ? mysql_fetch_row(res) : nullptr;
        ok = row != nullptr && row[0] != nullptr && row[1] != nullptr;
        if (ok) {
          sum = std::strtoll(row[0], nullptr, 10);
          rows = std::strtoll(row[1], nullptr, 10);
        }
        if (res != nullptr) mysql_free_result(res);
      }
      if (!ok) {
        mysql_close(conn);
        conn = nullptr;
        continue;
      }
      // This process's own sends woke its waiters already.
      sum -= own_();
      if (!have_base) {
        // A foreign send may have committed between a waiter's look and
        // this first poll: wake the waiters once to look again.
        have_base = true;
        changed_();
      } else if (sum != base_sum || rows != base_rows) {
        changed_();
        interval = kPollMin;
      } else {
        interval = std::min(interval * 2, kPollMax);
      }
      base_sum = sum;
      base_rows = rows;
      if (!Sleep(interval)) break;
    }
    if (conn != nullptr) mysql_close(conn);
  }

  std::function<MYSQL*()> connect_;
  std::function<std::size_t()> waiting_;
  std::function<std::int64_t()> own_;
  std::function<void()> changed_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::atomic<std::int64_t> queries_{0};
  std::thread thread_;
};

class MysqlEngine : public core::Engine {
 public:
  MysqlEngine(ConnParams params, std::shared_ptr<Clock> clock)
      : params_(std::move(params)),
        clock_(std::move(clock)),
        pool_([this] { return Connect(); }, kMaxIdle) {}

  ~MysqlEngine() override { poller_.reset(); }

  Status Init(bool create_if_missing) {
    auto conn = Connect();
    if (!conn.ok()) return conn.status();
    Status s = Migrate(**conn, create_if_missing);
    if (!s.ok()) return s;
    Release(std::move(*conn));
    return Status::Ok();
  }

  // --- transactions -------------------------------------------------------

  Status Write(const std::function<Status(Conn&)>& body) override {
    return pool_.RunWrite([&](MyConn& c) {
      Status begun = Begin(c, /*read_only=*/false);
      if (!begun.ok()) {
        // A pooled connection the server closed while it sat idle shows
        // only now; nothing of the transaction ran.
        c.lost_at_begin = !c.healthy();
        c.tx_error.reset();
        return begun;
      }
      c.defer_counters = true;
      return InTransaction(c, body);
    });
  }

  Status Read(const std::function<Status(Conn&)>& body) override {
    auto conn = AcquireBegun(/*read_only=*/true);
    if (!conn.ok()) return conn.status();
    Status s = InTransaction(**conn, body);
    Release(std::move(*conn));
    return s;
  }

  Result<std::unique_ptr<Conn>> BeginTx() override {
    auto conn = AcquireBegun(/*read_only=*/false);
    if (!conn.ok()) return conn.status();
    (*conn)->defer_counters = false;
    (*conn)->set_recycler(
        [this](std::unique_ptr<MyConn> c) { Release(std::move(c)); });
    return std::unique_ptr<Conn>(std::move(*conn));
  }

  Result<std::unique_ptr<Conn>> JoinTx(void* native) override {
    auto* m = static_cast<MYSQL*>(native);
    if (m == nullptr) return Status::InvalidArgument("no connection given");
    auto conn = std::make_unique<MyConn>(m, /*owned=*/false);
    if (!conn->InTransaction()) {
      return Status::InvalidArgument(
          "the connection has no open transaction: run START TRANSACTION "
          "first");
    }
    const char* schema = nullptr;
    if (mariadb_get_infov(m, MARIADB_CONNECTION_SCHEMA, &schema) != 0 ||
        schema == nullptr || params_.database != schema) {
      return Status::InvalidArgument(fmt::format(
          "connection is to database '{}', not to this store's '{}'",
          schema != nullptr ? schema : "", params_.database));
    }
    conn->ResetTxState();
    Status s = ReadSession(*conn);
    if (!s.ok()) return s;
    return std::unique_ptr<Conn>(std::move(conn));
  }

  Status CommitTx(Conn& c) override { return Commit(My(c)); }

  Status RollbackTx(Conn& c) override {
    return My(c).Exec("ROLLBACK", "rollback");
  }

  void* NativeHandle(Conn& c) override { return My(c).my(); }

  void SetWaitingProbe(std::function<std::size_t()> waiting) override {
    waiting_ = std::move(waiting);
  }

  void WatchForeignWrites(std::function<void()> changed) override {
    auto waiting = waiting_;
    if (!waiting) waiting = [] { return std::size_t{1}; };
    poller_ = std::make_unique<Poller>(
        [this] { return ConnectRaw(/*timeout=*/2).release(); },
        std::move(waiting), [this] { return own_bumps_.load(); },
        std::move(changed));
  }

  // --- queues --------------------------------------------------------------

  Result<core::QueueRecord> CreateQueue(Conn& c, std::string_view name,
                                        const QueueOptions& o) override {
    MyConn& conn = My(c);
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    static const std::string kSql = R"sql(
      INSERT INTO sqlq_queues (name, max_attempts, lease_us, backoff_base_us,
        backoff_max_us, archive, retention_us, max_payload, created_us)
      VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?))sql";
    auto rows =
        conn.Run(kSql,
                 Params()
                     .Text(name)
                     .Int(o.max_attempts)
                     .Int(Us(o.lease))
                     .Int(Us(o.backoff_base))
                     .Int(Us(o.backoff_max))
                     .Int(o.archive ? 1 : 0)
                     .Int(Us(o.retention))
                     .Int(static_cast<std::int64_t>(o.max_payload_bytes))
                     .Int(*now),
                 "create queue", /*clean_ok=*/true);
    if (rows.status().code() == Code::kAlreadyExists) return Taken(conn, name);
    if (!rows.ok()) return rows.status();
    core::QueueRecord r;
    r.id = static_cast<std::int64_t>(rows->insert_id());
    r.info = {
        .name = std::string(name), .options = o, .created_at = FromUs(*now)};
    return r;
  }

  Result<core::QueueRecord> GetQueue(Conn& c, std::string_view name) override {
    static const std::string kSql = R"sql(
      SELECT id, name, max_attempts, lease_us, backoff_base_us,
             backoff_max_us, archive, retention_us, max_payload, created_us
      FROM sqlq_queues WHERE name = ? AND kind = 'queue')sql";
    auto rows = My(c).Run(kSql, Params().Text(name), "look up queue");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return Missing(My(c), name, "queue");
    return core::DecodeQueue(core::RowAt<Rows>{*rows, 0});
  }

  Result<std::vector<core::QueueRecord>> ListQueues(Conn& c) override {
    static const std::string kSql = R"sql(
      SELECT id, name, max_attempts, lease_us, backoff_base_us,
             backoff_max_us, archive, retention_us, max_payload, created_us
      FROM sqlq_queues WHERE kind = 'queue' ORDER BY name)sql";
    auto rows = My(c).Run(kSql, Params(), "list queues");
    if (!rows.ok()) return rows.status();
    std::vector<core::QueueRecord> out;
    for (int i = 0; i < rows->size(); ++i)
      out.push_back(core::DecodeQueue(core::RowAt<Rows>{*rows, i}));
    return out;
  }

  Status TouchSchema(Conn& c) override {
    // InnoDB skips rewriting a row set to its own values, so the versions
    // are negated and restored: two changes whose redo the commit flushes.
    static const std::string kSql = "UPDATE sqlq_schema SET version = -version";
    for (int i = 0; i < 2; ++i) {
      auto rows = My(c).Run(kSql, Params(), "check writable");
      if (!rows.ok()) return rows.status();
    }
    return Status::Ok();
  }

  Status DropQueue(Conn& c, std::int64_t queue_id) override {
    // Messages, dead letters, archive and counters go by ON DELETE CASCADE.
    static const std::string kSql = "DELETE FROM sqlq_queues WHERE id = ?";
    auto rows = My(c).Run(kSql, Params().Int(queue_id), "drop queue");
    if (!rows.ok()) return rows.status();
    if (rows->affected() == 0) return core::QueueGone(queue_id);
    return Status::Ok();
  }

  Result<std::int64_t> PurgeQueue(Conn& c, std::int64_t queue_id) override {
    MyConn& conn = My(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    static const std::string kSql =
        "DELETE FROM sqlq_messages WHERE queue_id = ?";
    auto rows = conn.Run(kSql, Params().Int(queue_id), "purge queue");
    if (!rows.ok()) return rows.status();
    return rows->affected();
  }

  Result<QueueStats> Stats(Conn& c, std::int64_t queue_id) override {
    MyConn& conn = My(c);
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    static const std::string kSql = R"sql(
      SELECT q.name,
        (SELECT COALESCE(SUM(sends), 0) FROM sqlq_counters k
         WHERE k.queue_id = q.id),
        (SELECT COALESCE(SUM(claims), 0) FROM sqlq_counters k
         WHERE k.queue_id = q.id),
        (SELECT COALESCE(SUM(acks), 0) FROM sqlq_counters k
         WHERE k.queue_id = q.id),
        (SELECT COALESCE(SUM(nacks), 0) FROM sqlq_counters k
         WHERE k.queue_id = q.id),
        (SELECT COALESCE(SUM(expirations), 0) FROM sqlq_counters k
         WHERE k.queue_id = q.id),
        (SELECT COALESCE(SUM(dead_lettered), 0) FROM sqlq_counters k
         WHERE k.queue_id = q.id),
        (SELECT COUNT(*) FROM sqlq_messages m
         WHERE m.queue_id = q.id AND m.ready_us <= ?),
        (SELECT COUNT(*) FROM sqlq_messages m
         WHERE m.queue_id = q.id AND m.ready_us > ? AND m.token = 0),
        (SELECT COUNT(*) FROM sqlq_messages m
         WHERE m.queue_id = q.id AND m.ready_us > ? AND m.token <> 0),
        (SELECT MIN(ready_us) FROM sqlq_messages m
         WHERE m.queue_id = q.id AND m.ready_us <= ?),
        (SELECT COUNT(*) FROM sqlq_dead d WHERE d.queue_id = q.id),
        (SELECT COUNT(*) FROM sqlq_archive a WHERE a.queue_id = q.id)
      FROM sqlq_queues q WHERE q.id = ?)sql";
    auto rows = conn.Run(
        kSql, Params().Int(*now).Int(*now).Int(*now).Int(*now).Int(queue_id),
        "stats");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::QueueGone(queue_id);
    return core::DecodeStats(core::RowAt<Rows>{*rows, 0}, *now);
  }

  // --- messages ------------------------------------------------------------

  // INSERT of `n` messages without dedup keys, prepared once per n (a
  // power of two, see Send).
  static const std::string& InsertSql(std::size_t n) {
    static std::mutex mu;
    static std::map<std::size_t, std::string> cache;
    std::lock_guard<std::mutex> lock(mu);
    auto& sql = cache[n];
    if (sql.empty()) {
      sql =
          "INSERT INTO sqlq_messages (queue_id, priority, npriority, "
          "ready_us, enqueued_us, payload) VALUES ";
      for (std::size_t i = 0; i < n; ++i) {
        sql += i == 0 ? "(?, ?, ?, ?, ?, ?)" : ", (?, ?, ?, ?, ?, ?)";
      }
    }
    return sql;
  }

  Result<std::vector<SendResult>> Send(Conn& c,
                                       const core::SendParams& p) override {
    MyConn& conn = My(c);
    // No separate check of the queue: the first INSERT's foreign key check
    // share-locks the queue's row (as CheckQueue would) until commit, and
    // on a dropped queue fails with 1452, which InnoDB rolls back as a
    // statement before anything of this send was written: a clean failure
    // (engine.h), one round trip fewer.
    const bool checked = conn.known_queues.contains(p.queue_id);
    auto gone = [&](const Status& s) -> Status {
      if (!checked && s.code() == Code::kNotFound)
        return core::QueueGone(p.queue_id);
      return s;
    };
    auto now_r = NowUs(conn);
    if (!now_r.ok()) return now_r.status();
    const std::int64_t now = *now_r;
    static const std::string kInsertDedup = R"sql(
      INSERT INTO sqlq_messages
        (queue_id, priority, npriority, ready_us, enqueued_us, dedup, payload)
      VALUES (?, ?, ?, ?, ?, ?, ?))sql";
    static const std::string kExisting = R"sql(
      SELECT id FROM sqlq_messages WHERE queue_id = ? AND dedup = ?
      LOCK IN SHARE MODE)sql";
    std::vector<SendResult> out;
    out.reserve(p.messages.size());
    std::int64_t stored = 0;
    const std::size_t n = p.messages.size();
    std::size_t i = 0;
    // Runs of messages without dedup keys go in multi-row INSERTs; ids then
    // follow the batch order: AUTO_INCREMENT hands a multi-row INSERT
    // consecutive ids (step auto_increment_increment) under
    // innodb_autoinc_lock_mode 0 and 1; under 2 each row goes alone.
    while (i < n) {
      const Message& first = p.messages[i];
      if (first.dedup_key.empty()) {
        std::size_t run = 0, bytes = 0;
        const std::size_t cap = conn.consecutive_autoinc ? kMaxInsertRows : 1;
        while (i + run < n && run < cap &&
               p.messages[i + run].dedup_key.empty() &&
               (run == 0 || bytes + p.messages[i + run].payload.size() <=
                                kMaxInsertBytes)) {
          bytes += p.messages[i + run].payload.size();
          ++run;
        }
        // The run rounded down to a multiple of 16, or the run itself when
        // shorter: at most 31 statement variants per connection (runs are at
        // most kMaxInsertRows = 256), and a batch of 100 goes in two
        // statements (96 + 4) where powers of two took three (64 + 32 + 4).
        const std::size_t chunk = run < 16 ? run : run - run % 16;
        Params params;
        for (std::size_t k = 0; k < chunk; ++k) {
          const Message& m = p.messages[i + k];
          params.Int(p.queue_id)
              .Int(m.priority)
              .Int(-static_cast<std::int64_t>(m.priority))
              .Int(now + Us(m.delay))
              .Int(now)
              .Bytes(m.payload);
        }
        auto rows = conn.Run(InsertSql(chunk), params, "send",
                             /*clean_ok=*/stored == 0 && !checked);
        if (!rows.ok()) return gone(rows.status());
        conn.known_queues.insert(p.queue_id);
        const auto id0 = static_cast<std::int64_t>(rows->insert_id());
        for (std::size_t k = 0; k < chunk; ++k) {
          out.push_back({.id = id0 + static_cast<std::int64_t>(k) *
                                         conn.auto_increment_increment});
        }
        stored += static_cast<std::int64_t>(chunk);
        i += chunk;
        continue;
      }
      // A dedup key: alone, so that a duplicate (InnoDB rolls back just that
      // statement) is told apart. Its holder may be acked between our insert
      // and the look-up; then insert again.
      const Message& m = first;
      for (int attempt = 0;; ++attempt) {
        auto ins = conn.Run(kInsertDedup,
                            Params()
                                .Int(p.queue_id)
                                .Int(m.priority)
                                .Int(-static_cast<std::int64_t>(m.priority))
                                .Int(now + Us(m.delay))
                                .Int(now)
                                .Bytes(m.dedup_key)
                                .Bytes(m.payload),
                            "send", /*clean_ok=*/true);
        if (ins.ok()) {
          conn.known_queues.insert(p.queue_id);
          out.push_back({.id = static_cast<std::int64_t>(ins->insert_id())});
          ++stored;
          break;
        }
        if (ins.status().code() != Code::kAlreadyExists) {
          return gone(ins.status());
        }
        auto existing = conn.Run(
            kExisting, Params().Int(p.queue_id).Bytes(m.dedup_key), "send");
        if (!existing.ok()) return existing.status();
        if (existing->size() == 1) {
          out.push_back({.id = existing->Int(0, 0), .duplicate = true});
          break;
        }
        if (attempt == 3) {
          return Status::Busy(
              "send: the dedup key's message kept changing; try again");
        }
      }
      ++i;
    }
    if (stored > 0) {
      Status s = AddCounters(conn, p.queue_id, {.sends = stored});
      if (!s.ok()) return s;
    }
    return out;
  }

  // Claim, in up to a few short rounds:
  //  1. a plain (non-locking) read of candidate ids in claim order through
  //     the index sqlq_messages_claim (queue_id, npriority, ready_us, id):
  //     no filesort, no locks, so it never waits (the test
  //     ClaimReadsTheIndexInOrder checks the plan);
  //  2. SELECT ... WHERE id IN (candidates) ... FOR UPDATE SKIP LOCKED,
  //     which locks by primary key only the candidates that are still
  //     claimable, skipping rows other consumers hold;
  //  3. UPDATE (or dead-letter) by primary key.
  // A filesort under FOR UPDATE would lock every row it scanned; here the
  // locking read touches only the candidates. MariaDB has no
  // UPDATE ... RETURNING, hence the separate statements; the SQLite engine
  // reads and updates under its database-wide write lock, the PostgreSQL
  // one does it all in one statement.
  Result<core::ClaimOutcome> Claim(Conn& c,
                                   const core::ClaimParams& p) override {
    MyConn& conn = My(c);
    // No share lock on the queue: an empty claim stays a transaction
    // without writes or locks (idle consumers cost next to nothing). The
    // queue is looked up only when no candidate shows it exists.
    auto now_r = NowUs(conn);
    if (!now_r.ok()) return now_r.status();
    const std::int64_t now = *now_r;
    const std::int64_t until = now + p.lease.count();
    static const std::string kFirst = R"sql(
      SELECT id, npriority, ready_us
      FROM sqlq_messages FORCE INDEX (sqlq_messages_claim)
      WHERE queue_id = ? AND ready_us <= ?
      ORDER BY npriority, ready_us, id LIMIT ?)sql";
    static const std::string kNext = R"sql(
      SELECT id, npriority, ready_us
      FROM sqlq_messages FORCE INDEX (sqlq_messages_claim)
      WHERE queue_id = ? AND ready_us <= ?
        AND (npriority > ? OR (npriority = ? AND
             (ready_us > ? OR (ready_us = ? AND id > ?))))
      ORDER BY npriority, ready_us, id LIMIT ?)sql";
    core::ClaimOutcome out;
    bool first = true;
    std::int64_t last_np = 0, last_ready = 0, last_id = 0;
    std::size_t bytes = 0;  // payload bytes leased, against p.max_bytes
    bool full = false;
    for (;;) {
      const int want = p.max - static_cast<int>(out.messages.size());
      if (want <= 0) break;
      // After a round that lost rows to other consumers, look further.
      const int limit = first ? want : 2 * want + 8;
      Result<Rows> cands =
          first ? conn.Run(kFirst, Params().Int(p.queue_id).Int(now).Int(limit),
                           "claim")
                : conn.Run(kNext,
                           Params()
                               .Int(p.queue_id)
                               .Int(now)
                               .Int(last_np)
                               .Int(last_np)
                               .Int(last_ready)
                               .Int(last_ready)
                               .Int(last_id)
                               .Int(limit),
                           "claim");
      if (!cands.ok()) return cands.status();
      if (cands->size() == 0) {
        if (first) {
          Status checked = CheckQueue(conn, p.queue_id, /*lock=*/false);
          if (!checked.ok()) return checked;
        }
        break;
      }
      first = false;
      std::vector<std::int64_t> ids;
      ids.reserve(cands->size());
      for (int i = 0; i < cands->size(); ++i) ids.push_back(cands->Int(i, 0));
      const int last = cands->size() - 1;
      last_id = cands->Int(last, 0);
      last_np = cands->Int(last, 1);
      last_ready = cands->Int(last, 2);
      const std::size_t b = Bucket(ids.size());
      // By primary key (forced: the optimizer likes the claim index for
      // queue_id = ?), and without ORDER BY (rows are sorted below): under
      // READ COMMITTED InnoDB then releases at once the lock of a candidate
      // that fails the WHERE (a message another consumer leased since our
      // plain read). Through a secondary index it keeps that lock until we
      // commit, which held up the ack of the leased message
      // (OpenClaimTransactionHoldsUpNoAckOfALeasedMessage).
      const std::string lock_sql = fmt::format(
          "SELECT id, priority, npriority, ready_us, token, attempts, "
          "enqueued_us, payload FROM sqlq_messages FORCE INDEX (PRIMARY) "
          "WHERE id IN ({}) AND queue_id = ? AND "
          "ready_us <= ? FOR UPDATE SKIP LOCKED",
          Marks(b));
      Params lp;
      AddIds(lp, ids);
      lp.Int(p.queue_id).Int(now);
      auto locked = conn.Run(lock_sql, lp, "claim");
      if (!locked.ok()) return locked.status();
      std::vector<int> order(static_cast<std::size_t>(locked->size()));
      for (int i = 0; i < locked->size(); ++i) order[i] = i;
      const Rows& l = *locked;
      std::sort(order.begin(), order.end(), [&l](int x, int y) {
        if (l.Int(x, 2) != l.Int(y, 2)) return l.Int(x, 2) < l.Int(y, 2);
        if (l.Int(x, 3) != l.Int(y, 3)) return l.Int(x, 3) < l.Int(y, 3);
        return l.Int(x, 0) < l.Int(y, 0);
      });
      std::vector<std::int64_t> lease_ids, dead_ids;
      for (int i : order) {
        if (static_cast<int>(lease_ids.size()) == want) break;
        const bool dies = l.Int(i, 5) >= p.max_attempts;
        const std::size_t size = l.BytesSize(i, 7);
        if (!dies && p.max_bytes != 0 && !out.messages.empty() &&
            bytes + size > p.max_bytes) {
          // ClaimParams::max_bytes: left as it is, for the next claim.
          full = true;
          break;
        }
        if (l.Int(i, 4) != 0) ++out.expirations;
        if (dies) {
          dead_ids.push_back(l.Int(i, 0));
          continue;
        }
        bytes += size;
        lease_ids.push_back(l.Int(i, 0));
        ClaimedMessage m;
        m.id = l.Int(i, 0);
        m.priority = static_cast<std::int32_t>(l.Int(i, 1));
        m.attempt = static_cast<int>(l.Int(i, 5)) + 1;
        m.enqueued_at = FromUs(l.Int(i, 6));
        m.payload = l.Bytes(i, 7);
        m.lease_expires_at = FromUs(until);
        out.messages.push_back(std::move(m));
      }
      if (!dead_ids.empty()) {
        Status s = BuryExhausted(conn, dead_ids, now, p.max_attempts);
        if (!s.ok()) return s;
        out.dead_lettered += static_cast<std::int64_t>(dead_ids.size());
      }
      if (!lease_ids.empty()) {
        const std::string sql = fmt::format(
            "UPDATE sqlq_messages SET token = ?, attempts = attempts + 1, "
            "ready_us = ?, worker = ? WHERE id IN ({})",
            Marks(Bucket(lease_ids.size())));
        Params up;
        up.Int(TokenBits(p.token)).Int(until).BytesOrNull(p.worker);
        AddIds(up, lease_ids);
        auto rows = conn.Run(sql, up, "claim");
        if (!rows.ok()) return rows.status();
      }
      // The queue has no more claimable messages past these candidates.
      if (full || cands->size() < limit) break;
    }
    const std::int64_t claimed = static_cast<std::int64_t>(out.messages.size());
    if (claimed + out.expirations + out.dead_lettered == 0) return out;
    Status s = AddCounters(conn, p.queue_id,
                           {.claims = claimed,
                            .expirations = out.expirations,
                            .dead_lettered = out.dead_lettered});
    if (!s.ok()) return s;
    return out;
  }

  // Moves locked messages whose attempts ran out to the dead letters.
  Status BuryExhausted(MyConn& conn, const std::vector<std::int64_t>& ids,
                       std::int64_t now, int max_attempts) {
    const std::string marks = Marks(Bucket(ids.size()));
    const std::string ins = fmt::format(
        "INSERT INTO sqlq_dead (id, queue_id, priority, attempts, "
        "enqueued_us, died_us, last_error, payload) "
        "SELECT id, queue_id, priority, attempts, enqueued_us, ?, "
        "CONCAT('lease expired on attempt ', attempts, ' of ', ?), payload "
        "FROM sqlq_messages WHERE id IN ({})",
        marks);
    Params ip;
    ip.Int(now).Int(max_attempts);
    AddIds(ip, ids);
    auto r = conn.Run(ins, ip, "claim (dead-letter)");
    if (!r.ok()) return r.status();
    const std::string del =
        fmt::format("DELETE FROM sqlq_messages WHERE id IN ({})", marks);
    Params dp;
    AddIds(dp, ids);
    auto d = conn.Run(del, dp, "claim (dead-letter)");
    return d.ok() ? Status::Ok() : d.status();
  }

  Result<std::optional<Timestamp>> NextReadyAt(Conn& c,
                                               std::int64_t queue_id) override {
    static const std::string kSql =
        "SELECT MIN(ready_us) FROM sqlq_messages WHERE queue_id = ?";
    auto rows = My(c).Run(kSql, Params().Int(queue_id), "next ready");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0 || rows->IsNull(0, 0)) {
      return std::optional<Timestamp>();
    }
    return std::optional<Timestamp>(FromUs(rows->Int(0, 0)));
  }

  Result<Timestamp> Now(Conn& c) override {
    auto now = NowUs(My(c));
    if (!now.ok()) return now.status();
    return FromUs(*now);
  }

  // Locks the message if the receipt names its current lease.
  Result<bool> LockLeased(MyConn& conn, std::int64_t queue_id,
                          const core::Receipt& r) {
    static const std::string kSql = R"sql(
      SELECT id FROM sqlq_messages
      WHERE id = ? AND queue_id = ? AND token = ? AND attempts = ?
      FOR UPDATE)sql";
    auto rows = conn.Run(kSql, Fence(queue_id, r), "check receipt");
    if (!rows.ok()) return rows.status();
    return rows->size() == 1;
  }

  Status Ack(Conn& c, const core::AckParams& p) override {
    MyConn& conn = My(c);
    Status s = CheckQueue(conn, p.queue_id);
    if (!s.ok()) return s;
    static const std::string kDelete = R"sql(
      DELETE FROM sqlq_messages
      WHERE id = ? AND queue_id = ? AND token = ? AND attempts = ?)sql";
    if (!p.archive) {
      auto rows = conn.Run(kDelete, Fence(p.queue_id, p.receipt), "ack");
      if (!rows.ok()) return rows.status();
      if (rows->affected() == 0) return Refused(conn, p.queue_id, p.receipt);
      return AddCounters(conn, p.queue_id, {.acks = 1});
    }
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    auto leased = LockLeased(conn, p.queue_id, p.receipt);
    if (!leased.ok()) return leased.status();
    if (!*leased) return Refused(conn, p.queue_id, p.receipt);
    static const std::string kArchive = R"sql(
      INSERT INTO sqlq_archive (id, queue_id, priority, attempts, enqueued_us,
        completed_us, worker, payload)
      SELECT id, queue_id, priority, attempts, enqueued_us, ?, worker, payload
      FROM sqlq_messages WHERE id = ?)sql";
    auto ins = conn.Run(kArchive, Params().Int(*now).Int(p.receipt.id), "ack");
    if (!ins.ok()) return ins.status();
    static const std::string kDeleteId =
        "DELETE FROM sqlq_messages WHERE id = ?";
    auto del = conn.Run(kDeleteId, Params().Int(p.receipt.id), "ack");
    if (!del.ok()) return del.status();
    return AddCounters(conn, p.queue_id, {.acks = 1});
  }

  // Acks receipts [at, end) in one statement on MariaDB: the rows whose
  // lease matches a receipt are deleted and returned; each receipt that
  // matched none gets one look-up that says why (the common batch, all
  // current, is one statement where the portable way takes two: lock and
  // check, then delete). Returns how many messages were acked.
  Result<std::int64_t> DeleteReturning(MyConn& conn, std::int64_t queue_id,
                                       std::span<const core::Receipt> receipts,
                                       std::size_t at, std::size_t end,
                                       const std::vector<std::int64_t>& ids,
                                       std::vector<Status>& out) {
    const std::size_t b = Bucket(ids.size());
    std::string leases;
    for (std::size_t i = 0; i < b; ++i) {
      leases += i == 0 ? "(?, ?, ?)" : ", (?, ?, ?)";
    }
    // The id list lets the optimizer go by primary key; the row list is
    // the fence. Both padded by repeating the last receipt.
    const std::string sql = fmt::format(
        "DELETE FROM sqlq_messages WHERE id IN ({}) AND queue_id = ? AND "
        "(id, token, attempts) IN ({}) RETURNING id, token, attempts",
        Marks(b), leases);
    Params p;
    AddIds(p, ids);
    p.Int(queue_id);
    for (std::size_t k = 0; k < b; ++k) {
      const core::Receipt& r = receipts[std::min(at + k, end - 1)];
      p.Int(r.id).Int(TokenBits(r.token)).Int(r.attempt);
    }
    auto rows = conn.Run(sql, p, "ack");
    if (!rows.ok()) return rows.status();
    std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> deleted;
    for (int i = 0; i < rows->size(); ++i) {
      deleted[rows->Int(i, 0)] = {rows->Int(i, 1), rows->Int(i, 2)};
    }
    const auto acked = static_cast<std::int64_t>(deleted.size());
    const auto returned = deleted;
    for (std::size_t i = at; i < end; ++i) {
      const core::Receipt& r = receipts[i];
      auto it = deleted.find(r.id);
      if (it != deleted.end() && it->second.first == TokenBits(r.token) &&
          it->second.second == r.attempt) {
        deleted.erase(it);  // a second receipt for it finds it gone
        out[i] = Status::Ok();
        continue;
      }
      // Deleted for another receipt of this batch: what that receipt's
      // check would have said had it come first (as AckMany's portable
      // path does).
      if (auto was = returned.find(r.id); was != returned.end()) {
        out[i] =
            was->second.first == TokenBits(r.token) &&
                    was->second.second == r.attempt
                ? core::NotInQueue(r.id)
                : core::StaleReceipt(r, was->second.first, was->second.second);
        continue;
      }
      Status why = Refused(conn, queue_id, r);
      if (!core::IsCleanFailure(why)) return why;
      out[i] = std::move(why);
    }
    return acked;
  }

  // Acks a batch in a fixed number of statements whatever its size: on
  // MariaDB one DELETE ... RETURNING per page (DeleteReturning); otherwise
  // lock the messages by primary key, check each receipt against its row,
  // delete (or archive) the matching ones by id.
  Result<std::vector<Status>> AckMany(Conn& c, std::int64_t queue_id,
                                      std::span<const core::Receipt> receipts,
                                      bool archive) override {
    MyConn& conn = My(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    std::vector<Status> out(receipts.size());
    std::int64_t acked = 0;
    constexpr std::size_t kPage = 512;
    for (std::size_t at = 0; at < receipts.size(); at += kPage) {
      const std::size_t end = std::min(receipts.size(), at + kPage);
      std::vector<std::int64_t> ids;
      for (std::size_t i = at; i < end; ++i) ids.push_back(receipts[i].id);
      if (conn.mariadb && !archive) {
        auto n = DeleteReturning(conn, queue_id, receipts, at, end, ids, out);
        if (!n.ok()) return n.status();
        acked += *n;
        continue;
      }
      const std::string lock_sql = fmt::format(
          "SELECT id, token, attempts FROM sqlq_messages FORCE INDEX "
          "(PRIMARY) WHERE id IN ({}) AND queue_id = ? FOR UPDATE",
          Marks(Bucket(ids.size())));
      Params lp;
      AddIds(lp, ids);
      lp.Int(queue_id);
      auto rows = conn.Run(lock_sql, lp, "ack");
      if (!rows.ok()) return rows.status();
      std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> found;
      for (int i = 0; i < rows->size(); ++i) {
        found[rows->Int(i, 0)] = {rows->Int(i, 1), rows->Int(i, 2)};
      }
      std::vector<std::int64_t> gone;
      for (std::size_t i = at; i < end; ++i) {
        const core::Receipt& r = receipts[i];
        auto it = found.find(r.id);
        if (it == found.end()) {
          out[i] = core::NotInQueue(r.id);
        } else if (it->second.first != TokenBits(r.token) ||
                   it->second.second != r.attempt) {
          out[i] = core::StaleReceipt(r, it->second.first, it->second.second);
        } else {
          gone.push_back(r.id);
          found.erase(it);  // a second receipt for it finds it gone
          out[i] = Status::Ok();
        }
      }
      if (gone.empty()) continue;
      const std::string marks = Marks(Bucket(gone.size()));
      if (archive) {
        auto now = NowUs(conn);
        if (!now.ok()) return now.status();
        const std::string ins = fmt::format(
            "INSERT INTO sqlq_archive (id, queue_id, priority, attempts, "
            "enqueued_us, completed_us, worker, payload) "
            "SELECT id, queue_id, priority, attempts, enqueued_us, ?, worker, "
            "payload FROM sqlq_messages WHERE id IN ({})",
            marks);
        Params ip;
        ip.Int(*now);
        AddIds(ip, gone);
        auto r = conn.Run(ins, ip, "ack");
        if (!r.ok()) return r.status();
      }
      const std::string del =
          fmt::format("DELETE FROM sqlq_messages WHERE id IN ({})", marks);
      Params dp;
      AddIds(dp, gone);
      auto d = conn.Run(del, dp, "ack");
      if (!d.ok()) return d.status();
      acked += static_cast<std::int64_t>(gone.size());
    }
    if (acked > 0) {
      s = AddCounters(conn, queue_id, {.acks = acked});
      if (!s.ok()) return s;
    }
    return out;
  }

  // One group commit in flight per process (URL parameter write_groups
  // overrides).
  // With 4, as on PostgreSQL, a process's own groups deadlock with each other
  // under REPEATABLE READ often enough to use up a transaction's runs, and 4
  // measured no faster than 1 for mixed (docs/engines/mysql.md).
  int write_groups() const override { return params_.write_groups; }

  Status Retry(Conn& c, const core::RetryParams& p) override {
    MyConn& conn = My(c);
    Status s = CheckQueue(conn, p.queue_id);
    if (!s.ok()) return s;
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    static const std::string kSql = R"sql(
      UPDATE sqlq_messages SET token = 0, ready_us = ?, last_error = ?
      WHERE id = ? AND queue_id = ? AND token = ? AND attempts = ?)sql";
    Params params;
    params.Int(*now + p.delay.count()).BytesOrNull(p.error);
    AppendFence(params, p.queue_id, p.receipt);
    auto rows = conn.Run(kSql, params, "nack");
    if (!rows.ok()) return rows.status();
    if (rows->affected() == 0) return Refused(conn, p.queue_id, p.receipt);
    return AddCounters(conn, p.queue_id, {.nacks = 1});
  }

  Status Bury(Conn& c, const core::BuryParams& p) override {
    MyConn& conn = My(c);
    Status s = CheckQueue(conn, p.queue_id);
    if (!s.ok()) return s;
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    auto leased = LockLeased(conn, p.queue_id, p.receipt);
    if (!leased.ok()) return leased.status();
    if (!*leased) return Refused(conn, p.queue_id, p.receipt);
    static const std::string kSql = R"sql(
      INSERT INTO sqlq_dead (id, queue_id, priority, attempts, enqueued_us,
        died_us, last_error, payload)
      SELECT id, queue_id, priority, attempts, enqueued_us, ?, ?, payload
      FROM sqlq_messages WHERE id = ?)sql";
    auto ins = conn.Run(
        kSql, Params().Int(*now).Bytes(p.error).Int(p.receipt.id), "nack");
    if (!ins.ok()) return ins.status();
    static const std::string kDeleteId =
        "DELETE FROM sqlq_messages WHERE id = ?";
    auto del = conn.Run(kDeleteId, Params().Int(p.receipt.id), "nack");
    if (!del.ok()) return del.status();
    return AddCounters(conn, p.queue_id, {.nacks = 1, .dead_lettered = 1});
  }

  Result<Timestamp> Extend(Conn& c, std::int64_t queue_id,
                           const core::Receipt& receipt,
                           Micros lease) override {
    MyConn& conn = My(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    const std::int64_t until = *now + lease.count();
    static const std::string kSql = R"sql(
      UPDATE sqlq_messages SET ready_us = ?
      WHERE id = ? AND queue_id = ? AND token = ? AND attempts = ?)sql";
    Params params;
    params.Int(until);
    AppendFence(params, queue_id, receipt);
    auto rows = conn.Run(kSql, params, "extend");
    if (!rows.ok()) return rows.status();
    if (rows->affected() == 0) return Refused(conn, queue_id, receipt);
    return FromUs(until);
  }

  // --- dead letters and archive -------------------------------------------

  Result<std::vector<DeadLetter>> ListDead(Conn& c, std::int64_t queue_id,
                                           const ListOptions& o) override {
    MyConn& conn = My(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    static const std::string kSql = R"sql(
      SELECT id, priority, attempts, enqueued_us, died_us, last_error, payload
      FROM sqlq_dead WHERE queue_id = ? AND id > ? ORDER BY id LIMIT ?)sql";
    auto rows = conn.Run(
        kSql, Params().Int(queue_id).Int(o.after_id).Int(o.limit), "list dead");
    if (!rows.ok()) return rows.status();
    return core::DecodeAll(*rows,
                           [](const auto& r) { return core::DecodeDead(r); });
  }

  Result<std::int64_t> Redrive(Conn& c, std::int64_t queue_id,
                               std::span<const std::int64_t> ids) override {
    MyConn& conn = My(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    // Pages of dead letters are locked and read (in id order), inserted
    // back with explicit values and deleted by id. Not INSERT ... SELECT:
    // MariaDB counts a write to a table with an AUTO_INCREMENT column after
    // a select from another table as unsafe for statement-based
    // replication, even with explicit ids.
    constexpr std::size_t kPage = 256;
    static const std::string kAllPage = R"sql(
      SELECT id, priority, enqueued_us, last_error, payload FROM sqlq_dead
      WHERE queue_id = ? AND id > ? ORDER BY id LIMIT 256 FOR UPDATE)sql";
    // A redriven message is ready now with fresh attempts; it keeps its id
    // (never reused, see schema.h) but not a dedup key.
    static const std::string kInsert = R"sql(
      INSERT INTO sqlq_messages (id, queue_id, priority, npriority, ready_us,
        attempts, enqueued_us, last_error, payload)
      VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?))sql";
    std::int64_t moved = 0;
    auto move = [&](const Rows& rows) -> Status {
      std::vector<std::int64_t> page;
      for (int i = 0; i < rows.size(); ++i) {
        const std::int64_t priority = rows.Int(i, 1);
        const std::string error = rows.Bytes(i, 3);
        const std::string payload = rows.Bytes(i, 4);
        Params p;
        p.Int(rows.Int(i, 0))
            .Int(queue_id)
            .Int(priority)
            .Int(-priority)
            .Int(*now)
            .Int(rows.Int(i, 2));
        if (rows.IsNull(i, 3)) {
          p.Null();
        } else {
          p.Bytes(error);
        }
        p.Bytes(payload);
        auto ins = conn.Run(kInsert, p, "redrive");
        if (!ins.ok()) return ins.status();
        page.push_back(rows.Int(i, 0));
      }
      if (page.empty()) return Status::Ok();
      const std::string del = fmt::format(
          "DELETE FROM sqlq_dead WHERE id IN ({})", Marks(Bucket(page.size())));
      Params dp;
      AddIds(dp, page);
      auto d = conn.Run(del, dp, "redrive");
      if (!d.ok()) return d.status();
      moved += static_cast<std::int64_t>(page.size());
      return Status::Ok();
    };
    if (ids.empty()) {
      std::int64_t after = 0;
      for (;;) {
        auto rows =
            conn.Run(kAllPage, Params().Int(queue_id).Int(after), "redrive");
        if (!rows.ok()) return rows.status();
        if (rows->size() == 0) break;
        after = rows->Int(rows->size() - 1, 0);
        s = move(*rows);
        if (!s.ok()) return s;
        if (static_cast<std::size_t>(rows->size()) < kPage) break;
      }
      return moved;
    }
    for (std::size_t at = 0; at < ids.size(); at += kPage) {
      std::vector<std::int64_t> some(
          ids.begin() + static_cast<std::ptrdiff_t>(at),
          ids.begin() +
              static_cast<std::ptrdiff_t>(std::min(ids.size(), at + kPage)));
      const std::string sql = fmt::format(
          "SELECT id, priority, enqueued_us, last_error, payload FROM "
          "sqlq_dead WHERE queue_id = ? AND id IN ({}) ORDER BY id FOR UPDATE",
          Marks(Bucket(some.size())));
      Params p;
      p.Int(queue_id);
      AddIds(p, some);
      auto rows = conn.Run(sql, p, "redrive");
      if (!rows.ok()) return rows.status();
      s = move(*rows);
      if (!s.ok()) return s;
    }
    return moved;
  }

  Result<std::int64_t> PurgeDead(Conn& c, std::int64_t queue_id) override {
    MyConn& conn = My(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    static const std::string kSql = "DELETE FROM sqlq_dead WHERE queue_id = ?";
    auto rows = conn.Run(kSql, Params().Int(queue_id), "purge dead letters");
    if (!rows.ok()) return rows.status();
    return rows->affected();
  }

  Result<std::vector<ArchivedMessage>> ListArchive(
      Conn& c, std::int64_t queue_id, const ListOptions& o) override {
    MyConn& conn = My(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    static const std::string kSql = R"sql(
      SELECT id, priority, attempts, enqueued_us, completed_us, worker, payload
      FROM sqlq_archive WHERE queue_id = ? AND id > ?
      ORDER BY id LIMIT ?)sql";
    auto rows =
        conn.Run(kSql, Params().Int(queue_id).Int(o.after_id).Int(o.limit),
                 "list archive");
    if (!rows.ok()) return rows.status();
    return core::DecodeAll(
        *rows, [](const auto& r) { return core::DecodeArchived(r); });
  }

  Result<std::int64_t> PruneArchive(Conn& c, std::int64_t queue_id,
                                    Micros retention) override {
    MyConn& conn = My(c);
    Status s = CheckQueue(conn, queue_id);
    if (!s.ok()) return s;
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    static const std::string kSql = R"sql(
      DELETE FROM sqlq_archive WHERE queue_id = ? AND completed_us < ?)sql";
    auto rows =
        conn.Run(kSql, Params().Int(queue_id).Int(*now - retention.count()),
                 "prune archive");
    if (!rows.ok()) return rows.status();
    return rows->affected();
  }

  // --- rings ---------------------------------------------------------------
  // Locking (docs/engines/mysql.md): operations on a ring share-lock its
  // sqlq_queues row (CheckKind), as sends do, so a drop waits. A push locks
  // its group's row with the upsert, which serialises the pushes to one
  // group; every operation that deletes entries locks the group row first,
  // so group row then entries is the one lock order. SetCapacity locks the
  // ring's row FOR UPDATE, which waits for the pushes in flight (their share
  // lock) and holds new ones off until it commits.

  Result<core::RingRecord> CreateRing(Conn& c, std::string_view name,
                                      const RingOptions& o) override {
    auto id =
        InsertKind(My(c), name, "ring", o.max_payload_bytes, o.capacity, 0);
    if (!id.ok()) return id.status();
    return core::RingRecord{.id = *id, .name = std::string(name), .options = o};
  }

  Result<core::RingRecord> GetRing(Conn& c, std::string_view name) override {
    MyConn& conn = My(c);
    static const std::string kSql = R"sql(
      SELECT id, capacity, max_payload FROM sqlq_queues
      WHERE name = ? AND kind = 'ring')sql";
    auto rows = conn.Run(kSql, Params().Text(name), "look up ring");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return Missing(conn, name, "ring");
    return core::RingRecord{
        .id = rows->Int(0, 0),
        .name = std::string(name),
        .options = {
            .capacity = rows->Int(0, 1),
            .max_payload_bytes = static_cast<std::size_t>(rows->Int(0, 2))}};
  }

  Status DropRing(Conn& c, std::int64_t ring_id) override {
    static const std::string kSql =
        "DELETE FROM sqlq_queues WHERE id = ? AND kind = 'ring'";
    auto rows = My(c).Run(kSql, Params().Int(ring_id), "drop ring");
    return rows.ok() ? Status::Ok() : rows.status();
  }

  Result<RingEntry> RingPush(Conn& c, std::int64_t ring_id,
                             std::string_view group,
                             std::string_view payload) override {
    MyConn& conn = My(c);
    Status s = CheckKind(conn, ring_id, "ring");
    if (!s.ok()) return s;
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    RingEntry e{.group = std::string(group),
                .payload = std::string(payload),
                .pushed_at = FromUs(*now)};
    // The group's row lock (taken here, held to commit) serialises the
    // pushes to the group. The table has one unique key (its primary key),
    // so the upsert is safe for statement-based replication.
    static const std::string kGroup = R"sql(
      INSERT INTO sqlq_ring_groups (ring_id, grp, last_seq, entries)
      VALUES (?, ?, 1, 1)
      ON DUPLICATE KEY UPDATE last_seq = last_seq + 1, entries = entries + 1)sql";
    auto up = conn.Run(kGroup, Params().Int(ring_id).Bytes(group), "push");
    if (!up.ok()) return up.status();
    // Read under our lock: READ COMMITTED reads the latest version, ours.
    static const std::string kRead = R"sql(
      SELECT g.last_seq, g.entries, q.capacity
      FROM sqlq_ring_groups g JOIN sqlq_queues q ON q.id = g.ring_id
      WHERE g.ring_id = ? AND g.grp = ?)sql";
    auto grp = conn.Run(kRead, Params().Int(ring_id).Bytes(group), "push");
    if (!grp.ok()) return grp.status();
    if (grp->size() == 0) return core::KindGone("ring", ring_id);
    e.seq = grp->Int(0, 0);
    const std::int64_t entries = grp->Int(0, 1);
    const std::int64_t capacity = grp->Int(0, 2);
    static const std::string kEntry = R"sql(
      INSERT INTO sqlq_ring_entries (ring_id, grp, seq, pushed_us, payload)
      VALUES (?, ?, ?, ?, ?))sql";
    auto ins = conn.Run(
        kEntry,
        Params().Int(ring_id).Bytes(group).Int(e.seq).Int(*now).Bytes(payload),
        "push");
    if (!ins.ok()) return ins.status();
    if (entries > capacity) {
      auto evicted = EvictOldest(conn, ring_id, group, entries - capacity);
      if (!evicted.ok()) return evicted.status();
    }
    s = AddCounters(conn, ring_id, {.pushes = 1});
    if (!s.ok()) return s;
    return e;
  }

  Result<std::vector<RingEntry>> RingRead(Conn& c, std::int64_t ring_id,
                                          std::string_view group,
                                          const RingReadOptions& o) override {
    MyConn& conn = My(c);
    Status s = CheckQueue(conn, ring_id);
    if (!s.ok()) return s;
    static const std::string kNewest = R"sql(
      SELECT seq, pushed_us, payload FROM sqlq_ring_entries
      WHERE ring_id = ? AND grp = ? AND seq < ?
      ORDER BY seq DESC LIMIT ?)sql";
    static const std::string kOldest = R"sql(
      SELECT seq, pushed_us, payload FROM sqlq_ring_entries
      WHERE ring_id = ? AND grp = ? AND seq > ?
      ORDER BY seq LIMIT ?)sql";
    auto rows = conn.Run(o.oldest_first ? kOldest : kNewest,
                         Params()
                             .Int(ring_id)
                             .Bytes(group)
                             .Int(core::RingReadBound(o))
                             .Int(o.limit),
                         "read ring");
    if (!rows.ok()) return rows.status();
    return core::DecodeAll(
        *rows, [&](const auto& r) { return core::DecodeRingEntry(r, group); });
  }

  Result<std::vector<RingGroup>> RingGroups(Conn& c,
                                            std::int64_t ring_id) override {
    MyConn& conn = My(c);
    Status s = CheckQueue(conn, ring_id);
    if (!s.ok()) return s;
    static const std::string kSql = R"sql(
      SELECT grp, entries FROM sqlq_ring_groups
      WHERE ring_id = ? AND entries > 0 ORDER BY grp)sql";
    auto rows = conn.Run(kSql, Params().Int(ring_id), "list groups");
    if (!rows.ok()) return rows.status();
    std::vector<RingGroup> out;
    out.reserve(rows->size());
    for (int i = 0; i < rows->size(); ++i) {
      out.push_back({.group = rows->Bytes(i, 0), .entries = rows->Int(i, 1)});
    }
    return out;
  }

  Status RingDelete(Conn& c, std::int64_t ring_id, std::string_view group,
                    std::int64_t seq) override {
    MyConn& conn = My(c);
    Status s = CheckKind(conn, ring_id, "ring");
    if (!s.ok()) return s;
    auto locked = LockGroup(conn, ring_id, group);
    if (!locked.ok()) return locked.status();
    auto missing = [&] { return core::NoRingEntry(group, seq); };
    if (!*locked) return missing();
    static const std::string kSql = R"sql(
      DELETE FROM sqlq_ring_entries
      WHERE ring_id = ? AND grp = ? AND seq = ?)sql";
    auto rows = conn.Run(kSql, Params().Int(ring_id).Bytes(group).Int(seq),
                         "delete entry");
    if (!rows.ok()) return rows.status();
    if (rows->affected() == 0) return missing();
    return AdjustEntries(conn, ring_id, group, -1);
  }

  Result<std::int64_t> RingDeleteGroup(Conn& c, std::int64_t ring_id,
                                       std::string_view group) override {
    MyConn& conn = My(c);
    Status s = CheckKind(conn, ring_id, "ring");
    if (!s.ok()) return s;
    auto locked = LockGroup(conn, ring_id, group);
    if (!locked.ok()) return locked.status();
    if (!*locked) return std::int64_t{0};
    static const std::string kSql = R"sql(
      DELETE FROM sqlq_ring_entries WHERE ring_id = ? AND grp = ?)sql";
    auto rows =
        conn.Run(kSql, Params().Int(ring_id).Bytes(group), "delete group");
    if (!rows.ok()) return rows.status();
    const std::int64_t deleted = rows->affected();
    if (deleted > 0) {
      s = AdjustEntries(conn, ring_id, group, -deleted);
      if (!s.ok()) return s;
    }
    return deleted;
  }

  Result<std::int64_t> RingSetCapacity(Conn& c, std::int64_t ring_id,
                                       std::int64_t capacity) override {
    MyConn& conn = My(c);
    static const std::string kLock = R"sql(
      SELECT 1 FROM sqlq_queues WHERE id = ? AND kind = 'ring' FOR UPDATE)sql";
    auto locked = conn.Run(kLock, Params().Int(ring_id), "set capacity");
    if (!locked.ok()) return locked.status();
    if (locked->size() == 0) return core::KindGone("ring", ring_id);
    conn.known_queues.insert(ring_id);
    static const std::string kSet =
        "UPDATE sqlq_queues SET capacity = ? WHERE id = ?";
    auto set =
        conn.Run(kSet, Params().Int(capacity).Int(ring_id), "set capacity");
    if (!set.ok()) return set.status();
    static const std::string kOver = R"sql(
      SELECT grp, entries FROM sqlq_ring_groups
      WHERE ring_id = ? AND entries > ? ORDER BY grp FOR UPDATE)sql";
    auto over =
        conn.Run(kOver, Params().Int(ring_id).Int(capacity), "set capacity");
    if (!over.ok()) return over.status();
    std::int64_t evicted = 0;
    for (int i = 0; i < over->size(); ++i) {
      const std::string group = over->Bytes(i, 0);
      auto n = EvictOldest(conn, ring_id, group, over->Int(i, 1) - capacity);
      if (!n.ok()) return n.status();
      evicted += *n;
    }
    return evicted;
  }

  Result<RingStats> RingStatsOf(Conn& c, std::int64_t ring_id) override {
    static const std::string kSql = R"sql(
      SELECT q.name, q.capacity,
        (SELECT COALESCE(SUM(pushes), 0) FROM sqlq_counters k
         WHERE k.queue_id = q.id),
        (SELECT COUNT(*) FROM sqlq_ring_groups g
         WHERE g.ring_id = q.id AND g.entries > 0),
        (SELECT COALESCE(SUM(entries), 0) FROM sqlq_ring_groups g
         WHERE g.ring_id = q.id)
      FROM sqlq_queues q WHERE q.id = ? AND q.kind = 'ring')sql";
    auto rows = My(c).Run(kSql, Params().Int(ring_id), "ring stats");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::KindGone("ring", ring_id);
    return core::DecodeRingStats(core::RowAt<Rows>{*rows, 0});
  }

  // --- rotations -------------------------------------------------------------
  // Locking: next() and add() lock the rotation's sqlq_queues row FOR
  // UPDATE first (and keep it to commit), so they run one after the other
  // per rotation across connections and processes: each call sees the
  // stamps of the calls before it, which keeps the round-robin order and
  // the ±1 fairness, and no two calls get the same item. next() also locks
  // the items it serves against a concurrent fail/ok/reset/remove.

  Result<core::RotationRecord> CreateRotation(
      Conn& c, std::string_view name, const RotationOptions& o) override {
    auto id = InsertKind(My(c), name, "rotation", o.max_payload_bytes, 0,
                         o.max_failures);
    if (!id.ok()) return id.status();
    return core::RotationRecord{
        .id = *id, .name = std::string(name), .options = o};
  }

  Result<core::RotationRecord> GetRotation(Conn& c,
                                           std::string_view name) override {
    MyConn& conn = My(c);
    static const std::string kSql = R"sql(
      SELECT id, max_failures, max_payload FROM sqlq_queues
      WHERE name = ? AND kind = 'rotation')sql";
    auto rows = conn.Run(kSql, Params().Text(name), "look up rotation");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return Missing(conn, name, "rotation");
    return core::RotationRecord{
        .id = rows->Int(0, 0),
        .name = std::string(name),
        .options = {
            .max_failures = static_cast<int>(rows->Int(0, 1)),
            .max_payload_bytes = static_cast<std::size_t>(rows->Int(0, 2))}};
  }

  Status DropRotation(Conn& c, std::int64_t rotation_id) override {
    static const std::string kSql =
        "DELETE FROM sqlq_queues WHERE id = ? AND kind = 'rotation'";
    auto rows = My(c).Run(kSql, Params().Int(rotation_id), "drop rotation");
    return rows.ok() ? Status::Ok() : rows.status();
  }

  Status RotationAdd(Conn& c, std::int64_t rotation_id, std::string_view key,
                     std::string_view payload) override {
    MyConn& conn = My(c);
    Status s = LockRotation(conn, rotation_id);
    if (!s.ok()) return s;
    static const std::string kExists = R"sql(
      SELECT 1 FROM sqlq_rotation_items
      WHERE rotation_id = ? AND item_key = ? LOCK IN SHARE MODE)sql";
    auto exists =
        conn.Run(kExists, Params().Int(rotation_id).Bytes(key), "add item");
    if (!exists.ok()) return exists.status();
    if (exists->size() > 0) {
      return core::ItemExists(key);
    }
    auto stamp = NextStamp(conn, rotation_id, 1);
    if (!stamp.ok()) return stamp.status();
    static const std::string kSql = R"sql(
      INSERT INTO sqlq_rotation_items (rotation_id, item_key, payload, added)
      VALUES (?, ?, ?, ?))sql";
    auto rows = conn.Run(
        kSql, Params().Int(rotation_id).Bytes(key).Bytes(payload).Int(*stamp),
        "add item");
    return rows.ok() ? Status::Ok() : rows.status();
  }

  Status RotationRemove(Conn& c, std::int64_t rotation_id,
                        std::string_view key) override {
    static const std::string kSql = R"sql(
      DELETE FROM sqlq_rotation_items
      WHERE rotation_id = ? AND item_key = ?)sql";
    auto rows =
        My(c).Run(kSql, Params().Int(rotation_id).Bytes(key), "remove item");
    if (!rows.ok()) return rows.status();
    if (rows->affected() == 0) return core::NoItem(key);
    return Status::Ok();
  }

  Result<std::vector<RotationItem>> RotationNext(Conn& c,
                                                 std::int64_t rotation_id,
                                                 int n) override {
    MyConn& conn = My(c);
    Status s = LockRotation(conn, rotation_id);
    if (!s.ok()) return s;
    // Served order: least recently served first (0 = never), then the
    // order of addition; both stamps of one counter: a total order. A
    // locking read, not logged; the updates below go by primary key.
    static const std::string kSelect = R"sql(
      SELECT item_key, payload, serves, failures FROM sqlq_rotation_items
      WHERE rotation_id = ? AND parked = 0
      ORDER BY last_served, added LIMIT ?
      FOR UPDATE)sql";
    auto rows = conn.Run(kSelect, Params().Int(rotation_id).Int(n), "next");
    if (!rows.ok()) return rows.status();
    std::vector<RotationItem> out;
    out.reserve(rows->size());
    for (int i = 0; i < rows->size(); ++i) {
      out.push_back({.key = rows->Bytes(i, 0),
                     .payload = rows->Bytes(i, 1),
                     .served = rows->Int(i, 2) + 1,
                     .failures = static_cast<int>(rows->Int(i, 3))});
    }
    if (out.empty()) return out;
    const auto count = static_cast<std::int64_t>(out.size());
    auto last = NextStamp(conn, rotation_id, count);
    if (!last.ok()) return last.status();
    std::int64_t stamp = *last - count;
    static const std::string kServe = R"sql(
      UPDATE sqlq_rotation_items SET last_served = ?, serves = serves + 1
      WHERE rotation_id = ? AND item_key = ?)sql";
    for (const RotationItem& item : out) {
      auto served = conn.Run(
          kServe, Params().Int(++stamp).Int(rotation_id).Bytes(item.key),
          "next");
      if (!served.ok()) return served.status();
    }
    s = AddCounters(conn, rotation_id, {.serves = count});
    if (!s.ok()) return s;
    return out;
  }

  Result<RotationItem> RotationFail(Conn& c, std::int64_t rotation_id,
                                    std::string_view key,
                                    int max_failures) override {
    // parked first: MariaDB assigns left to right (unless the session has
    // SIMULTANEOUS_ASSIGNMENT), so both orders of evaluation agree here.
    static const std::string kSql = R"sql(
      UPDATE sqlq_rotation_items
      SET parked = (failures + 1 >= ?), failures = failures + 1
      WHERE rotation_id = ? AND item_key = ?)sql";
    Params p;
    p.Int(max_failures).Int(rotation_id).Bytes(key);
    return UpdateItem(My(c), kSql, p, rotation_id, key);
  }

  Result<RotationItem> RotationOk(Conn& c, std::int64_t rotation_id,
                                  std::string_view key) override {
    MyConn& conn = My(c);
    static const std::string kParked = R"sql(
      SELECT parked FROM sqlq_rotation_items
      WHERE rotation_id = ? AND item_key = ? FOR UPDATE)sql";
    auto rows = conn.Run(kParked, Params().Int(rotation_id).Bytes(key), "ok");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::NoItem(key);
    if (rows->Int(0, 0) != 0) {
      return core::ItemParked(key);
    }
    static const std::string kSql = R"sql(
      UPDATE sqlq_rotation_items SET failures = 0
      WHERE rotation_id = ? AND item_key = ?)sql";
    Params p;
    p.Int(rotation_id).Bytes(key);
    return UpdateItem(conn, kSql, p, rotation_id, key);
  }

  Result<RotationItem> RotationReset(Conn& c, std::int64_t rotation_id,
                                     std::string_view key) override {
    static const std::string kSql = R"sql(
      UPDATE sqlq_rotation_items SET failures = 0, parked = 0
      WHERE rotation_id = ? AND item_key = ?)sql";
    Params p;
    p.Int(rotation_id).Bytes(key);
    return UpdateItem(My(c), kSql, p, rotation_id, key);
  }

  Result<std::vector<RotationItem>> RotationList(
      Conn& c, std::int64_t rotation_id) override {
    MyConn& conn = My(c);
    Status s = CheckQueue(conn, rotation_id);
    if (!s.ok()) return s;
    static const std::string kSql = R"sql(
      SELECT item_key, payload, serves, failures, parked
      FROM sqlq_rotation_items
      WHERE rotation_id = ? ORDER BY parked, last_served, added)sql";
    auto rows = conn.Run(kSql, Params().Int(rotation_id), "list items");
    if (!rows.ok()) return rows.status();
    std::vector<RotationItem> out;
    out.reserve(rows->size());
    for (int i = 0; i < rows->size(); ++i) {
      out.push_back(core::DecodeItem(core::RowAt<Rows>{*rows, i}));
    }
    return out;
  }

  Result<RotationStats> RotationStatsOf(Conn& c,
                                        std::int64_t rotation_id) override {
    static const std::string kSql = R"sql(
      SELECT q.name, q.max_failures,
        (SELECT COALESCE(SUM(serves), 0) FROM sqlq_counters k
         WHERE k.queue_id = q.id),
        (SELECT COUNT(*) FROM sqlq_rotation_items i
         WHERE i.rotation_id = q.id),
        (SELECT COUNT(*) FROM sqlq_rotation_items i
         WHERE i.rotation_id = q.id AND i.parked <> 0)
      FROM sqlq_queues q WHERE q.id = ? AND q.kind = 'rotation')sql";
    auto rows = My(c).Run(kSql, Params().Int(rotation_id), "rotation stats");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::KindGone("rotation", rotation_id);
    return core::DecodeRotationStats(core::RowAt<Rows>{*rows, 0});
  }

 protected:
 private:
  static MyConn& My(Conn& c) { return static_cast<MyConn&>(c); }

  Result<std::int64_t> InsertKind(MyConn& conn, std::string_view name,
                                  const char* kind, std::size_t max_payload,
                                  std::int64_t capacity, int max_failures) {
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    static const std::string kSql = R"sql(
      INSERT INTO sqlq_queues (name, kind, max_attempts, lease_us,
        backoff_base_us, backoff_max_us, archive, retention_us, max_payload,
        created_us, capacity, max_failures)
      VALUES (?, ?, 0, 0, 0, 0, 0, 0, ?, ?, ?, ?))sql";
    auto rows = conn.Run(kSql,
                         Params()
                             .Text(name)
                             .Text(kind)
                             .Int(static_cast<std::int64_t>(max_payload))
                             .Int(*now)
                             .Int(capacity)
                             .Int(max_failures),
                         fmt::format("create {}", kind), /*clean_ok=*/true);
    if (rows.status().code() == Code::kAlreadyExists) return Taken(conn, name);
    if (!rows.ok()) return rows.status();
    return static_cast<std::int64_t>(rows->insert_id());
  }

  static Status Missing(MyConn& conn, std::string_view name,
                        std::string_view want) {
    static const std::string kSql =
        "SELECT kind FROM sqlq_queues WHERE name = ? LOCK IN SHARE MODE";
    auto rows = conn.Run(kSql, Params().Text(name), "look up name");
    if (!rows.ok()) return rows.status();
    if (rows->size() > 0) {
      return core::NotA(name, rows->Bytes(0, 0), want);
    }
    return core::NotA(name, std::nullopt, want);
  }

  static Status Taken(MyConn& conn, std::string_view name) {
    static const std::string kSql =
        "SELECT kind FROM sqlq_queues WHERE name = ? LOCK IN SHARE MODE";
    auto rows = conn.Run(kSql, Params().Text(name), "look up name");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::NameTaken(name, std::nullopt);
    return core::NameTaken(name, rows->Bytes(0, 0));
  }

  Status CheckKind(MyConn& conn, std::int64_t id, std::string_view kind) {
    if (conn.known_queues.contains(id)) return Status::Ok();
    Status s = CheckQueue(conn, id);
    if (s.code() == Code::kNotFound) return core::KindGone(kind, id);
    return s;
  }

  Status LockRotation(MyConn& conn, std::int64_t rotation_id) {
    static const std::string kSql = R"sql(
      SELECT 1 FROM sqlq_queues WHERE id = ? AND kind = 'rotation'
      FOR UPDATE)sql";
    auto rows = conn.Run(kSql, Params().Int(rotation_id), "lock rotation");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::KindGone("rotation", rotation_id);
    conn.known_queues.insert(rotation_id);
    return Status::Ok();
  }

  // Takes the rotation's next `count` counter values and returns the last.
  // REQUIRES: LockRotation in this transaction.
  Result<std::int64_t> NextStamp(MyConn& conn, std::int64_t rotation_id,
                                 std::int64_t count) {
    static const std::string kUpdate =
        "UPDATE sqlq_queues SET next_stamp = next_stamp + ? WHERE id = ?";
    auto up = conn.Run(kUpdate, Params().Int(count).Int(rotation_id), "stamp");
    if (!up.ok()) return up.status();
    static const std::string kRead =
        "SELECT next_stamp FROM sqlq_queues WHERE id = ?";
    auto rows = conn.Run(kRead, Params().Int(rotation_id), "stamp");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::KindGone("rotation", rotation_id);
    return rows->Int(0, 0);
  }

  static Result<bool> LockGroup(MyConn& conn, std::int64_t ring_id,
                                std::string_view group) {
    static const std::string kSql = R"sql(
      SELECT 1 FROM sqlq_ring_groups WHERE ring_id = ? AND grp = ?
      FOR UPDATE)sql";
    auto rows =
        conn.Run(kSql, Params().Int(ring_id).Bytes(group), "lock group");
    if (!rows.ok()) return rows.status();
    return rows->size() > 0;
  }

  // Deletes the group's `n` oldest entries and returns how many went.
  // The cut-off seq is read first, so that the DELETE needs no LIMIT (which
  // statement-based replication counts as unsafe) and names its rows by a
  // key range. REQUIRES: the group row locked.
  static Result<std::int64_t> EvictOldest(MyConn& conn, std::int64_t ring_id,
                                          std::string_view group,
                                          std::int64_t n) {
    static const std::string kCut = R"sql(
      SELECT seq FROM sqlq_ring_entries WHERE ring_id = ? AND grp = ?
      ORDER BY seq LIMIT 1 OFFSET ? LOCK IN SHARE MODE)sql";
    auto cut =
        conn.Run(kCut, Params().Int(ring_id).Bytes(group).Int(n - 1), "evict");
    if (!cut.ok()) return cut.status();
    const std::int64_t upto = cut->size() > 0
                                  ? cut->Int(0, 0)
                                  : std::numeric_limits<std::int64_t>::max();
    static const std::string kSql = R"sql(
      DELETE FROM sqlq_ring_entries
      WHERE ring_id = ? AND grp = ? AND seq <= ?)sql";
    auto rows =
        conn.Run(kSql, Params().Int(ring_id).Bytes(group).Int(upto), "evict");
    if (!rows.ok()) return rows.status();
    const std::int64_t evicted = rows->affected();
    Status s = AdjustEntries(conn, ring_id, group, -evicted);
    if (!s.ok()) return s;
    return evicted;
  }

  static Status AdjustEntries(MyConn& conn, std::int64_t ring_id,
                              std::string_view group, std::int64_t delta) {
    static const std::string kSql = R"sql(
      UPDATE sqlq_ring_groups SET entries = entries + ?
      WHERE ring_id = ? AND grp = ?)sql";
    auto rows = conn.Run(kSql, Params().Int(delta).Int(ring_id).Bytes(group),
                         "count entries");
    return rows.ok() ? Status::Ok() : rows.status();
  }

  // Runs an UPDATE of one item (no RETURNING in MariaDB), then reads it
  // back under the row lock the UPDATE took.
  static Result<RotationItem> UpdateItem(MyConn& conn, const std::string& sql,
                                         Params& params,
                                         std::int64_t rotation_id,
                                         std::string_view key) {
    auto up = conn.Run(sql, params, "update item");
    if (!up.ok()) return up.status();
    if (up->affected() == 0) return core::NoItem(key);
    static const std::string kRead = R"sql(
      SELECT item_key, payload, serves, failures, parked
      FROM sqlq_rotation_items WHERE rotation_id = ? AND item_key = ?)sql";
    auto rows =
        conn.Run(kRead, Params().Int(rotation_id).Bytes(key), "update item");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::NoItem(key);
    return core::DecodeItem(core::RowAt<Rows>{*rows, 0});
  }

  static Params Fence(std::int64_t queue_id, const core::Receipt& r) {
    Params p;
    AppendFence(p, queue_id, r);
    return p;
  }
  static void AppendFence(Params& p, std::int64_t queue_id,
                          const core::Receipt& r) {
    p.Int(r.id).Int(queue_id).Int(TokenBits(r.token)).Int(r.attempt);
  }

  // Says why a receipt was refused: the message is gone, or it is there
  // under another lease.
  Status Refused(MyConn& conn, std::int64_t queue_id, const core::Receipt& r) {
    static const std::string kSql = R"sql(
      SELECT token, attempts FROM sqlq_messages
      WHERE id = ? AND queue_id = ? LOCK IN SHARE MODE)sql";
    auto rows =
        conn.Run(kSql, Params().Int(r.id).Int(queue_id), "check receipt");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::NotInQueue(r.id);
    return core::StaleReceipt(r, rows->Int(0, 0), rows->Int(0, 1));
  }

  Result<std::int64_t> NowUs(MyConn& conn) {
    if (clock_) return Us(clock_->Now());
    if (conn.tx_now_us) return *conn.tx_now_us;
    // Exact: UNIX_TIMESTAMP of a DATETIME(6) is a DECIMAL with six digits.
    static const std::string kSql =
        "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)";
    auto rows = conn.Run(kSql, Params(), "read the database clock");
    if (!rows.ok()) return rows.status();
    conn.tx_now_us = rows->Int(0, 0);
    return *conn.tx_now_us;
  }

  // Makes sure the queue exists and, in write transactions, keeps it from
  // being dropped until this transaction ends (a shared lock on its row,
  // which conflicts only with the drop's exclusive one). Taking it before
  // any message row gives every transaction the lock order of a drop
  // (queue row, then its rows by cascade).
  Status CheckQueue(MyConn& conn, std::int64_t queue_id, bool lock = true) {
    if (conn.known_queues.contains(queue_id)) return Status::Ok();
    static const std::string kLock =
        "SELECT 1 FROM sqlq_queues WHERE id = ? LOCK IN SHARE MODE";
    static const std::string kLook = "SELECT 1 FROM sqlq_queues WHERE id = ?";
    lock = lock && !conn.read_only;
    auto rows =
        conn.Run(lock ? kLock : kLook, Params().Int(queue_id), "look up queue");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::QueueGone(queue_id);
    if (lock) conn.known_queues.insert(queue_id);
    return Status::Ok();
  }

  static constexpr const char* kCounterInsert =
      "INSERT INTO sqlq_counters (queue_id, slot, sends, claims, acks, nacks, "
      "expirations, dead_lettered, pushes, serves)";
  static constexpr const char* kCounterUpdate =
      "ON DUPLICATE KEY UPDATE sends = sends + VALUES(sends), "
      "claims = claims + VALUES(claims), acks = acks + VALUES(acks), "
      "nacks = nacks + VALUES(nacks), "
      "expirations = expirations + VALUES(expirations), "
      "dead_lettered = dead_lettered + VALUES(dead_lettered), "
      "pushes = pushes + VALUES(pushes), serves = serves + VALUES(serves)";

  Status AddCounters(MyConn& conn, std::int64_t queue_id,
                     const QueueCounters& d) {
    if (conn.DeferCounters(queue_id, d)) return Status::Ok();
    return WriteCounters(conn, queue_id, d);
  }

  // One of the queue's kCounterSlots rows, chosen by connection id, so that
  // concurrent transactions rarely update the same row. The table has one
  // unique key, so the upsert is safe for statement-based replication.
  Status WriteCounters(MyConn& conn, std::int64_t queue_id,
                       const QueueCounters& d) {
    static const std::string kSql =
        fmt::format("{} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) {}",
                    kCounterInsert, kCounterUpdate);
    const int slot = static_cast<int>(conn.connection_id % kCounterSlots);
    auto rows = conn.Run(kSql,
                         Params()
                             .Int(queue_id)
                             .Int(slot)
                             .Int(d.sends)
                             .Int(d.claims)
                             .Int(d.acks)
                             .Int(d.nacks)
                             .Int(d.expirations)
                             .Int(d.dead_lettered)
                             .Int(d.pushes)
                             .Int(d.serves),
                         "update counters");
    if (!rows.ok()) return rows.status();
    conn.bumps += d.sends + d.nacks;
    return Status::Ok();
  }

  Status Begin(MyConn& conn, bool read_only) {
    conn.read_only = read_only;
    conn.tx_open = true;
    if (read_only) {
      Status s = conn.Exec("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
                           "begin transaction");
      if (!s.ok()) return s;
      return conn.Exec("START TRANSACTION READ ONLY", "begin transaction");
    }
    if (clock_) return conn.Exec("START TRANSACTION", "begin transaction");
    // The database clock comes with BEGIN, in the same round trip.
    auto now = conn.ExecScalar(
        "START TRANSACTION; "
        "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)",
        "begin transaction");
    if (!now.ok()) return now.status();
    conn.tx_now_us = *now;
    return Status::Ok();
  }

  Status Commit(MyConn& conn) {
    if (conn.tx_error) {
      Status s = *conn.tx_error;
      conn.tx_error.reset();
      (void)conn.Exec("ROLLBACK", "rollback");
      return s;
    }
    // The counters gathered in this transaction, in queue id order (so that
    // two transactions lock counter rows in the same order), in one
    // statement sent with COMMIT: one round trip. Its text holds only
    // integers of ours, formatted here, never caller input.
    std::string sql;
    if (!conn.pending_counters.empty()) {
      const int slot = static_cast<int>(conn.connection_id % kCounterSlots);
      sql = fmt::format("{} VALUES ", kCounterInsert);
      bool first = true;
      for (const auto& [queue_id, d] : conn.pending_counters) {
        sql += fmt::format("{}({}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
                           first ? "" : ", ", queue_id, slot, d.sends, d.claims,
                           d.acks, d.nacks, d.expirations, d.dead_lettered,
                           d.pushes, d.serves);
        first = false;
        conn.bumps += d.sends + d.nacks;
      }
      sql += fmt::format(" {}; ", kCounterUpdate);
      conn.pending_counters.clear();
    }
    sql += "COMMIT";
    Status s = conn.Exec(sql, "commit", Phase::kCommit);
    if (!s.ok()) {
      if (conn.healthy()) (void)conn.Exec("ROLLBACK", "rollback");
      return s;
    }
    own_bumps_ += conn.bumps;
    conn.bumps = 0;
    return Status::Ok();
  }

  // A connection with a transaction begun on it. A pooled connection that
  // the server closed while idle shows only now; nothing was sent in a
  // transaction yet, so a fresh connection is tried instead.
  Result<std::unique_ptr<MyConn>> AcquireBegun(bool read_only) {
    return pool_.AcquireBegun([&](MyConn& conn) {
      Status s = Begin(conn, read_only);
      conn.tx_error.reset();
      return s;
    });
  }

  Status InTransaction(MyConn& conn, const std::function<Status(Conn&)>& body) {
    Status s = body(conn);
    if (s.ok()) return Commit(conn);
    if (conn.healthy()) (void)conn.Exec("ROLLBACK", "rollback");
    return s;
  }

  // A raw connection with the session set up, or null with `error` set.
  struct RawDeleter {
    void operator()(MYSQL* m) const { mysql_close(m); }
  };
  using RawConn = std::unique_ptr<MYSQL, RawDeleter>;

  RawConn ConnectRaw(unsigned int timeout, Status* error = nullptr) {
    MYSQL* m = mysql_init(nullptr);
    if (m == nullptr) {
      if (error) *error = Status::Unavailable("connect: out of memory");
      return nullptr;
    }
    RawConn conn(m);
    const ConnParams& p = params_;
    unsigned int t = timeout != 0 ? timeout : p.connect_timeout;
    mysql_optionsv(m, MYSQL_OPT_CONNECT_TIMEOUT, &t);
    mysql_optionsv(m, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    if (p.ssl != "disable") {
      if (!p.ssl_ca.empty() || !p.ssl_cert.empty() || !p.ssl_key.empty()) {
        mysql_ssl_set(m, p.ssl_key.empty() ? nullptr : p.ssl_key.c_str(),
                      p.ssl_cert.empty() ? nullptr : p.ssl_cert.c_str(),
                      p.ssl_ca.empty() ? nullptr : p.ssl_ca.c_str(), nullptr,
                      nullptr);
      }
      if (p.ssl != "prefer") {
        my_bool enforce = 1;
        mysql_optionsv(m, MYSQL_OPT_SSL_ENFORCE, &enforce);
      }
      my_bool verify = p.ssl == "verify-ca" || p.ssl == "verify-full";
      mysql_optionsv(m, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &verify);
    }
    // Connector/C enforces TLS only together with certificate
    // verification; for ssl=require we check the outcome ourselves below.
    // CLIENT_FOUND_ROWS: an UPDATE reports the rows it matched, not only
    // those it changed (an extend to the same time still "found" its row).
    // CLIENT_MULTI_STATEMENTS: BEGIN with the clock read, and the counters
    // with COMMIT, each go in one round trip (fixed text and integers only).
    if (mysql_real_connect(m, p.host.c_str(), p.user.c_str(),
                           p.password.c_str(), p.database.c_str(), p.port,
                           p.socket.empty() ? nullptr : p.socket.c_str(),
                           CLIENT_FOUND_ROWS | CLIENT_MULTI_STATEMENTS) ==
        nullptr) {
      if (error) {
        *error = Translate(
            mysql_errno(m), mysql_error(m),
            fmt::format("connect to MySQL/MariaDB at {}:{}", p.host, p.port),
            Phase::kConnect);
      }
      return nullptr;
    }
    if (p.ssl != "disable" && p.ssl != "prefer" &&
        mysql_get_ssl_cipher(m) == nullptr) {
      if (error) {
        *error = Status::Unavailable(fmt::format(
            "connect to MySQL/MariaDB at {}:{}: SSL/TLS is required "
            "(ssl={}) but the server does not offer it",
            p.host, p.port, p.ssl));
      }
      return nullptr;
    }
    if (mysql_real_query(m, kSessionSql, std::strlen(kSessionSql)) != 0) {
      if (error) {
        *error = Translate(mysql_errno(m), mysql_error(m), "set up session",
                           Phase::kConnect);
      }
      return nullptr;
    }
    return conn;
  }

  // Reads what the engine needs to know about the session, and sets the
  // isolation level of a connection of ours.
  Status ReadSession(MyConn& conn) {
    static const std::string kSql =
        "SELECT CONNECTION_ID(), @@auto_increment_increment, "
        "@@innodb_autoinc_lock_mode, @@log_bin, @@binlog_format, VERSION()";
    auto rows = conn.Run(kSql, Params(), "read session");
    if (!rows.ok()) return rows.status();
    conn.connection_id = rows->Int(0, 0);
    conn.auto_increment_increment = std::max<std::int64_t>(1, rows->Int(0, 1));
    conn.consecutive_autoinc = rows->Int(0, 2) <= 1;
    conn.mariadb = rows->Bytes(0, 5).find("MariaDB") != std::string::npos;
    if (!conn.owned()) return Status::Ok();
    // READ COMMITTED: locking reads lock only the rows they return (no gap
    // locks, locks on rows that fail the WHERE are released), so a claim
    // holds up nobody's ack and sends do not wait on claims. But a server
    // that writes its binary log in STATEMENT format refuses READ COMMITTED
    // writes (error 1665), and under MIXED it logs every READ COMMITTED
    // change as rows. There we use REPEATABLE READ, under which sqlq's
    // statements replicate as statements: its locking reads go by primary
    // key (record locks, no gap locks); a row that no longer matches stays
    // locked until the claim commits (docs/engines/mysql.md).
    const std::string format = rows->Bytes(0, 4);
    const bool statement_log =
        rows->Int(0, 3) != 0 && (format == "STATEMENT" || format == "MIXED");
    return conn.Exec(statement_log ? "SET SESSION TRANSACTION ISOLATION LEVEL "
                                     "REPEATABLE READ"
                                   : "SET SESSION TRANSACTION ISOLATION LEVEL "
                                     "READ COMMITTED",
                     "set up session");
  }

  Result<std::unique_ptr<MyConn>> Connect() {
    Status error;
    RawConn raw = ConnectRaw(0, &error);
    if (raw == nullptr) return error;
    auto conn = std::make_unique<MyConn>(raw.release(), /*owned=*/true);
    Status s = ReadSession(*conn);
    if (!s.ok()) return s;
    return conn;
  }

  void Release(std::unique_ptr<MyConn> conn) { pool_.Release(std::move(conn)); }

  // --- migrations ------------------------------------------------------------

  static Result<std::int64_t> SchemaVersion(MyConn& conn) {
    static const std::string kExists = R"sql(
      SELECT COUNT(*) FROM information_schema.tables
      WHERE table_schema = DATABASE() AND table_name = 'sqlq_schema')sql";
    auto exists = conn.Run(kExists, Params(), "read schema version");
    if (!exists.ok()) return exists.status();
    if (exists->Int(0, 0) == 0) return 0;
    static const std::string kVersion =
        "SELECT COALESCE(MAX(version), 0) FROM sqlq_schema";
    auto version = conn.Run(kVersion, Params(), "read schema version");
    if (!version.ok()) return version.status();
    return version->Int(0, 0);
  }

  // Brings the schema to kSchemaVersion (core/migrate.h) under
  // GET_LOCK: DDL commits at once in MariaDB, so a transaction cannot
  // serialise concurrent processes.
  Status Migrate(MyConn& conn, bool create) {
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

  const ConnParams params_;
  const std::shared_ptr<Clock> clock_;  // null: the database clock
  core::ConnPool<MyConn> pool_;
  // sends + nacks this store committed (Poller subtracts them).
  std::atomic<std::int64_t> own_bumps_{0};
  std::function<std::size_t()> waiting_;
  std::unique_ptr<Poller> poller_;
};

}  // namespace

Result<std::unique_ptr<core::Engine>> Open(std::string_view url,
                                           const StoreOptions& options) {
  auto params = ParseUrl(url);
  if (!params.ok()) return params.status();
  auto engine = std::make_unique<MysqlEngine>(*params, options.clock);
  Status s = engine->Init(options.create_if_missing);
  if (!s.ok()) return s;
  return std::unique_ptr<core::Engine>(std::move(engine));
}

}  // namespace sqlq::engines::mysql
