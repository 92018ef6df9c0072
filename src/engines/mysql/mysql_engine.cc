// MariaDB/MySQL engine: opening a store, connections, the pool, transactions,
// counters.

#include "engines/mysql/mysql_engine_impl.h"

namespace sqlq::engines::mysql {

namespace {

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
  // host[:port], or several of them separated by commas: servers tried in
  // turn (ConnectRaw).
  p.servers.clear();
  auto server = [&](std::string_view host) -> Status {
    ConnParams::Server sv;
    std::string_view port;
    if (!host.empty() && host.front() == '[') {  // [::1]:3306
      const auto close = host.find(']');
      if (close == std::string_view::npos) return bad("unclosed '['");
      std::string_view after = host.substr(close + 1);
      host = host.substr(1, close - 1);
      if (!after.empty()) {
        if (after.front() != ':') return bad("junk after ']'");
        port = after.substr(1);
      }
    } else if (auto colon = host.rfind(':'); colon != std::string_view::npos) {
      port = host.substr(colon + 1);
      host = host.substr(0, colon);
      if (port.empty()) return bad("bad port");
    }
    if (!port.empty()) {
      unsigned long v = 0;
      if (port.size() > 5) return bad("bad port");
      for (char c : port) {
        if (c < '0' || c > '9') return bad("bad port");
        v = v * 10 + static_cast<unsigned long>(c - '0');
      }
      if (v == 0 || v > 65535) return bad("port out of range");
      sv.port = static_cast<unsigned int>(v);
    }
    if (!host.empty()) sv.host = std::string(host);
    p.servers.push_back(std::move(sv));
    return Status::Ok();
  };
  for (;;) {
    const auto comma = authority.find(',');
    Status s = server(authority.substr(0, comma));
    if (!s.ok()) return s;
    if (comma == std::string_view::npos) break;
    authority = authority.substr(comma + 1);
  }
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
    } else if (key == "connect_timeout" || key == "read_timeout" ||
               key == "write_timeout") {
      char* end = nullptr;
      const long t = std::strtol(value->c_str(), &end, 10);
      if (value->empty() || *end != '\0' || t < 1 || t > 3600) {
        return bad(fmt::format("{} must be 1..3600 seconds", key));
      }
      (key == "connect_timeout" ? p.connect_timeout
       : key == "read_timeout"  ? p.read_timeout
                                : p.write_timeout) =
          static_cast<unsigned int>(t);
    } else if (key == "socket") {
      p.socket = *value;
    } else if (key == "failover_wait_ms") {
      auto n = core::ParseUrlInt(key, *value, 0, 600'000);
      if (!n.ok()) return n.status();
      p.failover_wait_ms = *n;
    } else if (key == "write_groups") {
      auto n = core::ParseUrlInt(key, *value, 1, 64);
      if (!n.ok()) return n.status();
      p.write_groups = static_cast<int>(*n);
    } else if (key == "ack_flush") {
      // Not a setting a session can change here: refused rather than
      // accepted and ignored.
      return Status::InvalidArgument(
          "MySQL URL: ack_flush is not available on MariaDB and MySQL: "
          "whether a commit waits for the disk is the server's "
          "innodb_flush_log_at_trx_commit, for every transaction alike");
    } else {
      return bad(fmt::format("unknown parameter '{}'", key));
    }
  }
  return p;
}

}  // namespace

Status MysqlEngine::Write(const std::function<Status(Conn&)>& body) {
  return pool_.RunWrite([&](MyConn& c) { return WriteOn(c, body); });
}

Status MysqlEngine::WriteOn(MyConn& c,
                            const std::function<Status(Conn&)>& body) {
  Status begun = StartTransaction(c, /*read_only=*/false);
  if (!begun.ok()) {
    // A pooled connection the server closed while it sat idle shows
    // only now; nothing of the transaction ran.
    c.lost_at_begin = !c.healthy();
    c.tx_error.reset();
    return begun;
  }
  c.defer_counters = true;
  return InTransaction(c, body);
}

Result<std::unique_ptr<Conn>> MysqlEngine::JoinTx(void* native) {
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
    return Status::InvalidArgument(
        fmt::format("connection is to database '{}', not to this store's '{}'",
                    schema != nullptr ? schema : "", params_.database));
  }
  conn->ResetTxState();
  Status s = ReadSession(*conn);
  if (!s.ok()) return s;
  return std::unique_ptr<Conn>(std::move(conn));
}

Status MysqlEngine::RollbackTx(Conn& c) {
  return Native(c).Exec("ROLLBACK", "rollback");
}

void* MysqlEngine::NativeHandle(Conn& c) { return Native(c).my(); }

void MysqlEngine::SetWaitingProbe(std::function<std::size_t()> waiting) {
  waiting_ = std::move(waiting);
}

void MysqlEngine::WatchForeignWrites(std::function<void()> changed) {
  auto waiting = waiting_;
  if (!waiting) waiting = [] { return std::size_t{1}; };
  poller_ = std::make_unique<Poller>(
      [this] { return ConnectRaw(/*timeout=*/2).release(); },
      std::move(waiting), [this] { return own_bumps_.load(); },
      std::move(changed));
}

Status MysqlEngine::PrepareGroups() {
  // Looked up first: a CREATE INDEX, even one that finds the index there,
  // waits for every transaction open on the table.
  auto conn = Connect(Reads::kUnbounded);
  if (!conn.ok()) return conn.status();
  static const std::string kHas = R"sql(
    SELECT COUNT(*) FROM information_schema.STATISTICS
    WHERE table_schema = DATABASE() AND table_name = 'sqlq_messages'
      AND index_name = 'sqlq_messages_group')sql";
  auto has = (*conn)->Run(kHas, Params(), "look up the group index");
  if (!has.ok()) return has.status();
  if (has->Int(0, 0) > 0) return Status::Ok();
  // Built online (reads and writes of the table go on); a caller's own
  // open transaction on the table would hold it up for good, hence the
  // bound. The connection is not pooled again with its setting.
  Status s = (*conn)->Exec("SET SESSION lock_wait_timeout = 60",
                           "create the group index");
  if (!s.ok()) return s;
  return (*conn)->Exec(
      "CREATE INDEX IF NOT EXISTS sqlq_messages_group "
      "ON sqlq_messages (queue_id, grp, id)",
      "create the group index");
}

int MysqlEngine::write_groups() const { return params_.write_groups; }

Status MysqlEngine::WriteCounters(MyConn& conn, std::int64_t queue_id,
                                  const QueueCounters& d) {
  static const std::string kSql =
      fmt::format("{} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) {}",
                  kCounterInsert, kCounterUpdate);
  const int slot = conn.counter_slot;
  Params p;
  p.Int(queue_id).Int(slot);
  AppendCounters(p, d);
  auto rows = conn.Run(kSql, p, "update counters");
  if (!rows.ok()) return rows.status();
  conn.bumps += WakeBumps(d);
  return Status::Ok();
}

// BEGIN on a Galera node waits until the node has applied every write set
// the cluster ordered before it (wsrep_sync_wait 1 covers BEGIN), then the
// session goes back to not waiting. Without it, after a failover moves
// clients to another node, a transaction there may not yet see what the old
// writer committed: an ack of a message claimed there finds no lease and
// answers not_found. Only BEGIN waits (one wait a transaction, not one a
// statement); the statements inside see at least that state.
constexpr const char* kBeginRead = "START TRANSACTION READ ONLY";
constexpr const char* kBeginReadCausal =
    "SET SESSION wsrep_sync_wait = 1; START TRANSACTION READ ONLY; "
    "SET SESSION wsrep_sync_wait = 0";
constexpr const char* kBegin = "START TRANSACTION";
constexpr const char* kBeginCausal =
    "SET SESSION wsrep_sync_wait = 1; START TRANSACTION; "
    "SET SESSION wsrep_sync_wait = 0";
// The database clock comes with BEGIN, in the same round trip.
constexpr const char* kBeginClock =
    "START TRANSACTION; "
    "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)";
constexpr const char* kBeginClockCausal =
    "SET SESSION wsrep_sync_wait = 1; START TRANSACTION; "
    "SET SESSION wsrep_sync_wait = 0; "
    "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)";

const char* MysqlEngine::BeginSql(const MyConn& conn) {
  return conn.wsrep ? kBeginCausal : kBegin;
}

Status MysqlEngine::StartTransaction(MyConn& conn, bool read_only) {
  conn.read_only = read_only;
  conn.tx_open = true;
  if (read_only) {
    Status s = conn.Exec("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
                         "begin transaction");
    if (!s.ok()) return s;
    return conn.Exec(conn.wsrep ? kBeginReadCausal : kBeginRead,
                     "begin transaction");
  }
  if (clock_) {
    return conn.Exec(conn.wsrep ? kBeginCausal : kBegin, "begin transaction");
  }
  auto now = conn.ExecScalar(conn.wsrep ? kBeginClockCausal : kBeginClock,
                             "begin transaction");
  if (!now.ok()) return now.status();
  conn.tx_now_us = *now;
  return Status::Ok();
}

std::string MysqlEngine::TakeCounters(MyConn& conn) {
  if (conn.pending_counters.empty()) return "";
  const int slot = conn.counter_slot;
  std::string sql = fmt::format("{} VALUES ", kCounterInsert);
  bool first = true;
  for (const auto& [queue_id, d] : conn.pending_counters) {
    sql += fmt::format("{}({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
                       first ? "" : ", ", queue_id, slot, d.sends, d.claims,
                       d.acks, d.nacks, d.expirations, d.dead_lettered,
                       d.pushes, d.serves, d.expired);
    first = false;
    conn.bumps += WakeBumps(d);
  }
  sql += fmt::format(" {}; ", kCounterUpdate);
  conn.pending_counters.clear();
  return sql;
}

Status MysqlEngine::Commit(MyConn& conn) {
  if (conn.tx_error) {
    Status s = *conn.tx_error;
    conn.tx_error.reset();
    (void)conn.Exec("ROLLBACK", "rollback");
    return s;
  }
  std::string sql = TakeCounters(conn);
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

Status MysqlEngine::Begin(MyConn& conn, bool read_only) {
  Status s = StartTransaction(conn, read_only);
  conn.tx_error.reset();
  return s;
}

Status MysqlEngine::InTransaction(MyConn& conn,
                                  const std::function<Status(Conn&)>& body) {
  Status s = body(conn);
  if (s.ok()) return Commit(conn);
  if (conn.healthy()) (void)conn.Exec("ROLLBACK", "rollback");
  return s;
}

namespace {

// The value of the row named `name` of a SHOW ... WHERE Variable_name IN
// (...) reply, or "".
std::string Shown(MYSQL* m, const char* sql, std::string_view name,
                  std::string_view other, std::string* other_value) {
  std::string out;
  if (mysql_real_query(m, sql, std::strlen(sql)) != 0) return out;
  MYSQL_RES* res = mysql_store_result(m);
  if (res == nullptr) return out;
  while (MYSQL_ROW row = mysql_fetch_row(res)) {
    if (row[0] == nullptr || row[1] == nullptr) continue;
    std::string key = row[0];
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    if (key == name) out = row[1];
    if (key == other) *other_value = row[1];
  }
  mysql_free_result(res);
  return out;
}

// Why a server of a list may not be written to now, or "" when it may: it
// is read-only (a replica, a demoted primary), or a Galera node that is not
// synced with its cluster's primary component.
std::string WhyNotWritable(MYSQL* m) {
  std::string wsrep_on;
  const std::string read_only =
      Shown(m,
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('read_only', "
            "'wsrep_on')",
            "read_only", "wsrep_on", &wsrep_on);
  if (read_only != "OFF" && read_only != "0") return "read-only";
  if (wsrep_on != "ON") return "";
  std::string state;
  const std::string ready = Shown(m,
                                  "SHOW GLOBAL STATUS WHERE Variable_name IN "
                                  "('wsrep_ready', 'wsrep_local_state')",
                                  "wsrep_ready", "wsrep_local_state", &state);
  if (ready != "ON" || state != "4") {
    return fmt::format(
        "Galera node not synced (wsrep_ready={}, "
        "wsrep_local_state={})",
        ready, state);
  }
  return "";
}

}  // namespace

MysqlEngine::RawConn MysqlEngine::ConnectRaw(unsigned int timeout,
                                             Status* error, Reads reads) {
  const ConnParams& p = params_;
  if (p.servers.size() == 1) {
    return ConnectTo(p.servers.front(), timeout, error, reads);
  }
  // A list: the first that takes writes, so that after a failover the
  // store finds the new primary (docs/engines/mysql.md).
  std::string tried;
  Status last;
  for (const ConnParams::Server& server : p.servers) {
    Status s;
    RawConn conn = ConnectTo(server, timeout, &s, reads);
    if (conn != nullptr) {
      const std::string why = WhyNotWritable(conn.get());
      if (why.empty()) return conn;
      s = Status::Unavailable(why);
    }
    tried += fmt::format("{}{}:{} ({})", tried.empty() ? "" : "; ", server.host,
                         server.port, s.message());
    last = s;
  }
  if (error) {
    *error = last.code() == Code::kPermissionDenied
                 ? last
                 : Status::Unavailable(fmt::format(
                       "connect to MySQL/MariaDB: no server of the list takes "
                       "writes now: {}",
                       tried));
  }
  return nullptr;
}

MysqlEngine::RawConn MysqlEngine::ConnectTo(const ConnParams::Server& server,
                                            unsigned int timeout, Status* error,
                                            Reads reads) {
  MYSQL* m = mysql_init(nullptr);
  if (m == nullptr) {
    if (error) *error = Status::Unavailable("connect: out of memory");
    return nullptr;
  }
  RawConn conn(m);
  const ConnParams& p = params_;
  unsigned int t = timeout != 0 ? timeout : p.connect_timeout;
  mysql_optionsv(m, MYSQL_OPT_CONNECT_TIMEOUT, &t);
  unsigned int read_timeout = reads == Reads::kBounded ? p.read_timeout : 0;
  unsigned int write_timeout = p.write_timeout;
  mysql_optionsv(m, MYSQL_OPT_READ_TIMEOUT, &read_timeout);
  mysql_optionsv(m, MYSQL_OPT_WRITE_TIMEOUT, &write_timeout);
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
  if (mysql_real_connect(m, server.host.c_str(), p.user.c_str(),
                         p.password.c_str(), p.database.c_str(), server.port,
                         p.socket.empty() ? nullptr : p.socket.c_str(),
                         CLIENT_FOUND_ROWS | CLIENT_MULTI_STATEMENTS) ==
      nullptr) {
    if (error) {
      *error = Translate(mysql_errno(m), mysql_error(m),
                         fmt::format("connect to MySQL/MariaDB at {}:{}",
                                     server.host, server.port),
                         Phase::kConnect);
    }
    return nullptr;
  }
  if (p.ssl != "disable" && p.ssl != "prefer" &&
      mysql_get_ssl_cipher(m) == nullptr) {
    if (error) {
      *error = Status::Unavailable(
          fmt::format("connect to MySQL/MariaDB at {}:{}: SSL/TLS is required "
                      "(ssl={}) but the server does not offer it",
                      server.host, server.port, p.ssl));
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

Status MysqlEngine::ReadSession(MyConn& conn) {
  static const std::string kSql =
      "SELECT CONNECTION_ID(), @@auto_increment_increment, "
      "@@innodb_autoinc_lock_mode, @@log_bin, @@binlog_format, VERSION(), "
      "CRC32(CONCAT(@@hostname, ':', @@port, ':', @@datadir))";
  auto rows = conn.Run(kSql, Params(), "read session");
  if (!rows.ok()) return rows.status();
  // The counter row this connection adds to. Consecutive connections of
  // one server take consecutive slots, so that up to kCounterSlots of them
  // never share one. The servers of a Galera cluster number their
  // connections alike: each is shifted by a number of its own, so that two
  // nodes' connections do not meet on one row (a certification conflict
  // at commit).
  conn.counter_slot =
      static_cast<int>((static_cast<std::uint64_t>(rows->Int(0, 0)) +
                        static_cast<std::uint64_t>(rows->Int(0, 6))) %
                       kCounterSlots);
  conn.auto_increment_increment = std::max<std::int64_t>(1, rows->Int(0, 1));
  conn.consecutive_autoinc = rows->Int(0, 2) <= 1;
  conn.mariadb = rows->Bytes(0, 5).find("MariaDB") != std::string::npos;
  if (!conn.owned()) return Status::Ok();
  if (conn.mariadb) {
    auto wsrep = conn.Run(
        "SELECT VARIABLE_VALUE FROM information_schema.SESSION_VARIABLES "
        "WHERE VARIABLE_NAME = 'WSREP_ON'",
        Params(), "read session");
    if (!wsrep.ok()) return wsrep.status();
    conn.wsrep = wsrep->size() == 1 && wsrep->Bytes(0, 0) == "ON";
  }
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
  conn.statement_log = statement_log;
  return conn.Exec(statement_log ? "SET SESSION TRANSACTION ISOLATION LEVEL "
                                   "REPEATABLE READ"
                                 : "SET SESSION TRANSACTION ISOLATION LEVEL "
                                   "READ COMMITTED",
                   "set up session");
}

Result<std::unique_ptr<MyConn>> MysqlEngine::Connect(Reads reads) {
  Status error;
  RawConn raw = ConnectRaw(0, &error, reads);
  if (raw == nullptr) return error;
  auto conn = std::make_unique<MyConn>(raw.release(), /*owned=*/true);
  Status s = ReadSession(*conn);
  if (!s.ok()) return s;
  return conn;
}

void MysqlEngine::Release(std::unique_ptr<MyConn> conn) {
  pool_.Release(std::move(conn));
}

// `url` is a mysql:// or mariadb:// URL:
//   mysql://[user[:password]@]host[:port][,host[:port]...]/database[?...]
// (several servers: the first that takes writes is used) with parameters
// ssl (disable, require, verify-ca, verify-full), ssl_ca, ssl_cert,
// ssl_key, connect_timeout, read_timeout, write_timeout (seconds),
// failover_wait_ms, write_groups and socket (a Unix socket path); see
// docs/engines/mysql.md. User, password and database may be percent-encoded.
EngineEntry Entry() { return EntryOf<ParseUrl, MysqlEngine>(); }

}  // namespace sqlq::engines::mysql
