// PostgreSQL engine: opening a store, connections, the pool, transactions,
// counters, wake-ups.

#include "engines/postgres/postgres_engine_impl.h"

namespace sqlq::engines::postgres {

int PostgresEngine::write_groups() const { return write_groups_; }

Status PostgresEngine::Write(const std::function<Status(Conn&)>& body) {
  return pool_.RunWrite([&](PgConn& c) {
    // BEGIN goes with the first statement (PgConn::DeferBegin), which
    // finds a pooled connection the server closed meanwhile
    // (lost_at_begin).
    c.read_only = false;
    c.DeferBegin(kBeginWrite);
    c.defer_counters = true;
    return InTransaction(c, body);
  });
}

Status PostgresEngine::WriteUnflushed(
    const std::function<Status(Conn&)>& body) {
  return Write([&](Conn& c) {
    Native(c).StageForCommit(
        "SELECT pg_catalog.set_config('synchronous_commit', 'off', true)",
        Params(), "ack_flush=off", [](const Rows&) {});
    return body(c);
  });
}

Result<std::unique_ptr<Conn>> PostgresEngine::JoinTx(void* native) {
  auto* pg = static_cast<PGconn*>(native);
  if (PQstatus(pg) != CONNECTION_OK) {
    return Status::InvalidArgument("the connection is not open");
  }
  if (!SameDatabase(pg)) {
    return Status::InvalidArgument(fmt::format(
        "connection is to database '{}' on {}:{}, not to this store's",
        PQdb(pg), PQhost(pg), PQport(pg)));
  }
  if (PQtransactionStatus(pg) != PQTRANS_INTRANS) {
    return Status::InvalidArgument(
        "the connection has no open transaction: run BEGIN first");
  }
  auto conn = std::make_unique<PgConn>(pg, /*owned=*/false);
  conn->ResetTxState();
  return std::unique_ptr<Conn>(std::move(conn));
}

Status PostgresEngine::RollbackTx(Conn& c) {
  PgConn& conn = Native(c);
  // The caller's own statements may have locked message rows too.
  if (marks_) marks_->ForgetAll();
  auto r = conn.Exec("ROLLBACK", "rollback");
  return r.ok() ? Status::Ok() : r.status();
}

void* PostgresEngine::NativeHandle(Conn& c) { return Native(c).pg(); }

void PostgresEngine::WatchForeignWrites(std::function<void()> changed) {
  notifier_ = std::make_unique<Notifier>(
      [this]() -> PGconn* { return ConnectRaw(/*start_only=*/true); },
      std::move(changed), kNotifyInterval, WatchConn());
}

ConnWatch PostgresEngine::WatchConn() {
  return [this](PGconn* conn) {
    std::function<void()> unwatch;
    if (watch_ != nullptr) {
      const std::uint64_t id = watch_->Register(conn);
      unwatch = [this, id] { watch_->Unregister(id); };
    }
    return unwatch;
  };
}

Params PostgresEngine::CounterParams(std::int64_t queue_id,
                                     const QueueCounters& d) {
  Params p;
  p.Int(queue_id);
  AppendCounters(p, d);
  return p;
}

Status PostgresEngine::WriteCounters(PgConn& conn, std::int64_t queue_id,
                                     const QueueCounters& d) {
  auto rows =
      conn.Run(kCounterSql, CounterParams(queue_id, d), "update counters");
  if (rows.ok()) ++conn.counted;
  return rows.ok() ? Status::Ok() : rows.status();
}

Status PostgresEngine::Begin(PgConn& conn, bool read_only) {
  conn.read_only = read_only;
  if (clock_) {
    auto r =
        conn.Exec(read_only ? "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
                            : kBeginWrite,
                  "begin transaction");
    return r.ok() ? Status::Ok() : r.status();
  }
  PgResult res(
      PQexec(conn.pg(), read_only ? kBeginReadWithNow : kBeginWithNow));
  if (res == nullptr || PQresultStatus(res.get()) != PGRES_TUPLES_OK) {
    Status s = Translate(res.get(), conn.pg(), "begin transaction");
    if (PQtransactionStatus(conn.pg()) != PQTRANS_IDLE) {
      (void)conn.Exec("ROLLBACK", "rollback");
    }
    return s;
  }
  conn.tx_now_us = std::strtoll(PQgetvalue(res.get(), 0, 0), nullptr, 10);
  return Status::Ok();
}

Status PostgresEngine::Commit(PgConn& conn) {
  Status s = RunCommit(conn);
  if (s.ok()) {
    Committed(conn);
  } else {
    RolledBack(conn);
  }
  return s;
}

Status PostgresEngine::RunCommit(PgConn& conn) {
  if (conn.tx_error) {
    // A statement failed (and its operation may have reported a clean
    // failure): PostgreSQL would turn COMMIT into ROLLBACK anyway.
    Status s = *conn.tx_error;
    (void)conn.Exec("ROLLBACK", "rollback");
    return s;
  }
  if (!conn.pending_counters.empty() || conn.has_staged()) {
    // The counters gathered in this transaction, in queue id order (so
    // that two transactions lock counter rows in the same order), sent
    // with COMMIT in one round trip, after the staged statement.
    std::vector<Params> counters;
    for (const auto& [queue_id, d] : conn.pending_counters) {
      counters.push_back(CounterParams(queue_id, d));
      ++conn.counted;
    }
    conn.pending_counters.clear();
    return conn.RunAndCommit(kCounterSql, counters, "update counters");
  }
  auto tag = conn.Exec("COMMIT", "commit", Phase::kCommit);
  if (!tag.ok()) {
    if (PQtransactionStatus(conn.pg()) == PQTRANS_INERROR ||
        PQtransactionStatus(conn.pg()) == PQTRANS_INTRANS) {
      (void)conn.Exec("ROLLBACK", "rollback");
    }
    return tag.status();
  }
  if (*tag == "ROLLBACK") {
    return Status::Internal(
        "commit: the transaction had failed and was rolled back");
  }
  return Status::Ok();
}

Status PostgresEngine::InTransaction(PgConn& conn,
                                     const std::function<Status(Conn&)>& body) {
  Status s = body(conn);
  if (s.ok()) return Commit(conn);
  RolledBack(conn);
  if (PQstatus(conn.pg()) == CONNECTION_OK) {
    (void)conn.Exec("ROLLBACK", "rollback");
  }
  return s;
}

void PostgresEngine::Committed(PgConn& conn) {
  if (conn.notify) Poke();
  if (conn.churned > 0 && vacuumer_) vacuumer_->Churned(conn.churned);
  if (conn.counted > 0 && folder_) folder_->Counted(conn.counted);
  if (!marks_) return;
  const auto at = std::chrono::steady_clock::now();
  for (const PgConn::ClaimDone& d : conn.claims) {
    marks_->Advance(d.queue_id, d.plan, d.last, d.now_us, d.cost, at);
  }
  // Messages made ready by a transaction that committed late (a caller's
  // transaction, or one slower than half the lag) may lie below marks
  // moved meanwhile.
  if (!conn.ready_floor.empty() &&
      (!conn.defer_counters || at - conn.began > marks_->options().lag / 2)) {
    for (const auto& [queue_id, ready_us] : conn.ready_floor) {
      marks_->Lower(queue_id, ready_us);
    }
  }
}

void PostgresEngine::RolledBack(PgConn& conn) {
  if (marks_ && (!conn.claims.empty() || conn.churned > 0)) {
    marks_->ForgetAll();
  }
}

void PostgresEngine::Poke() {
  if (notifier_) notifier_->Poke();
}

bool PostgresEngine::SameDatabase(PGconn* other) {
  auto conn = Acquire();
  if (!conn.ok()) return false;
  PGconn* ours = (*conn)->pg();
  auto eq = [](const char* a, const char* b) {
    return std::string_view(a ? a : "") == std::string_view(b ? b : "");
  };
  bool same = eq(PQdb(ours), PQdb(other)) && eq(PQhost(ours), PQhost(other)) &&
              eq(PQport(ours), PQport(other));
  Release(std::move(*conn));
  return same;
}

PGconn* PostgresEngine::ConnectRaw(bool start_only) {
  // Our defaults come first, so that the URL's own win (libpq lets later
  // keywords override earlier ones); docs/engines/postgres.md,
  // "Connections", says what each is for.
  //
  // A server that goes dark (a host powered off, a network partition)
  // sends nothing, not even a reset: without these a call on its
  // connection, or the wait of the LISTEN connection, would hang until the
  // kernel gives up, a quarter of an hour later. tcp_user_timeout bounds a
  // request the server does not acknowledge; keepalives find a silent
  // server while we wait for its answer (5 + 3 * 2 s).
  //
  // With several hosts (a failover list): connect only to the one that
  // takes writes, and give up on a dead one sooner (connect_timeout is per
  // host).
  std::vector<const char*> keys = {
      "connect_timeout", "fallback_application_name", "keepalives",
      "keepalives_idle", "keepalives_interval",       "keepalives_count",
      "tcp_user_timeout"};
  std::vector<const char*> values = {
      several_hosts_ ? "3" : "10", "sqlq", "1", "5", "2", "3", "10000"};
  if (several_hosts_) {
    keys.push_back("target_session_attrs");
    values.push_back("read-write");
  }
  keys.push_back("dbname");
  values.push_back(url_.c_str());
  // The server that leads (LeaderWatch) first: the first of the list that
  // takes writes may be an old primary that still does.
  std::string hosts, ports;
  if (const auto leader = watch_ ? watch_->leader() : std::nullopt) {
    hosts = leader->host;
    ports = leader->port;
    for (const LeaderWatch::Host& h : hosts_) {
      if (h == *leader) continue;
      hosts += "," + h.host;
      ports += "," + h.port;
    }
    keys.push_back("host");
    values.push_back(hosts.c_str());
    keys.push_back("port");
    values.push_back(ports.c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  PGconn* conn =
      start_only
          ? PQconnectStartParams(keys.data(), values.data(), /*expand=*/1)
          : PQconnectdbParams(keys.data(), values.data(), /*expand=*/1);
  // Server notices ("relation already exists, skipping") would go to
  // stderr, which belongs to the application. PgConn installs its own
  // receiver on the connections it wraps.
  if (conn != nullptr) {
    PQsetNoticeProcessor(
        conn, [](void*, const char*) {}, nullptr);
  }
  return conn;
}

PGconn* PostgresEngine::StartOne(const LeaderWatch::Host& host) {
  // After the URL's own keywords, so that they win: the one server, and a
  // name of its own in pg_stat_activity, whatever the URL's
  // application_name.
  const char* keys[] = {"keepalives",
                        "keepalives_idle",
                        "keepalives_interval",
                        "keepalives_count",
                        "tcp_user_timeout",
                        "dbname",
                        "host",
                        "port",
                        "target_session_attrs",
                        "application_name",
                        nullptr};
  const char* values[] = {"1",
                          "5",
                          "2",
                          "3",
                          "10000",
                          url_.c_str(),
                          host.host.c_str(),
                          host.port.c_str(),
                          "any",
                          kLeaderWatchName,
                          nullptr};
  PGconn* conn = PQconnectStartParams(keys, values, /*expand_dbname=*/1);
  if (conn != nullptr) {
    PQsetNoticeProcessor(
        conn, [](void*, const char*) {}, nullptr);
  }
  return conn;
}

Result<std::unique_ptr<PgConn>> PostgresEngine::Connect() {
  PGconn* pg = ConnectRaw();
  if (pg == nullptr) return Status::Unavailable("connect: out of memory");
  auto conn = std::make_unique<PgConn>(pg, /*owned=*/true);
  conn->set_commit_timeout(commit_timeout_);
  if (PQstatus(pg) != CONNECTION_OK) {
    return Translate(nullptr, pg, "connect to PostgreSQL", Phase::kConnect);
  }
  if (watch_ != nullptr) conn->Watch(watch_.get());
  // Session settings go with SET rather than in the startup packet's
  // `options`, which poolers such as pgbouncer refuse.
  //
  // Generic plans: each statement is planned once per connection, not at
  // every execution (planning the claim cost more than its two commits;
  // docs/engines/postgres.md, "Connections"). No JIT: sqlq's statements
  // are short, and a scan the settings below disable counts as a huge
  // cost, which would have every execution of such a statement compiled,
  // ~100 ms each.
  //
  // Every statement of the store is written for an index, read in order.
  // A queue table is often empty for a moment, and statistics taken then
  // make a sequential scan, or a bitmap scan of a whole queue and a sort,
  // look free until the next vacuum, however large the table has grown
  // (docs/engines/postgres.md, "Plans that do not depend on statistics").
  //
  // The search_path is pinned to the schemas it names now, in order, as
  // names: sqlq's statements name its tables unqualified, and a path of
  // "$user", public would otherwise let any role that may create schemas
  // put a schema named after ours in front of public, later, with tables
  // named like sqlq's and triggers that run with our rights. A schema
  // named after us that we do not own (nor a role we belong to) is left
  // out for the same reason (docs/engines/postgres.md, "Connections").
  auto set = conn->Exec(
      "SET plan_cache_mode = force_generic_plan; SET jit = off; "
      "SET enable_seqscan = off; SET enable_bitmapscan = off; "
      "SELECT set_config('search_path', "
      "coalesce(string_agg(quote_ident(t.s), ', ' ORDER BY t.i), ''), false) "
      "FROM unnest(current_schemas(false)) WITH ORDINALITY AS t(s, i) "
      "JOIN pg_catalog.pg_namespace n ON n.nspname = t.s "
      "WHERE t.s <> current_user "
      "OR pg_catalog.pg_has_role(current_user, n.nspowner, 'USAGE')",
      "configure session");
  if (!set.ok()) return set.status();
  return conn;
}

Result<std::unique_ptr<PgConn>> PostgresEngine::Acquire() {
  return pool_.Acquire();
}

void PostgresEngine::Release(std::unique_ptr<PgConn> conn) {
  pool_.Release(std::move(conn));
}

namespace {

Result<ParsedUrl> ParseUrl(std::string_view url) {
  const core::UrlTuning taken = core::TakeUrlParams(url, kTuningParams);
  auto tuning = Tuning::From(taken);
  if (!tuning.ok()) return tuning.status();
  // Malformed URLs are the caller's mistake, not an unreachable server.
  char* err = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(taken.rest.c_str(), &err);
  if (parsed == nullptr) {
    std::string detail = err != nullptr ? err : "cannot parse";
    if (err != nullptr) PQfreemem(err);
    while (!detail.empty() && detail.back() == '\n') detail.pop_back();
    return Status::InvalidArgument(
        fmt::format("malformed PostgreSQL URL: {}", detail));
  }
  // host=a,b or hostaddr=...: a list of servers to try in turn.
  bool several_hosts = false;
  std::vector<std::string> names, ports;
  auto split = [](std::string_view list) {
    std::vector<std::string> out;
    for (std::size_t at = 0;;) {
      const std::size_t comma = list.find(',', at);
      out.emplace_back(list.substr(at, comma - at));
      if (comma == std::string_view::npos) return out;
      at = comma + 1;
    }
  };
  for (const PQconninfoOption* o = parsed; o->keyword != nullptr; ++o) {
    const std::string_view key(o->keyword);
    if ((key == "host" || key == "hostaddr") && o->val != nullptr &&
        std::string_view(o->val).find(',') != std::string_view::npos) {
      several_hosts = true;
      if (key == "host" || names.empty()) names = split(o->val);
    }
    if (key == "port" && o->val != nullptr) ports = split(o->val);
  }
  PQconninfoFree(parsed);
  // libpq: one port for every host, or one port each.
  std::vector<LeaderWatch::Host> hosts;
  for (std::size_t i = 0; i < names.size(); ++i) {
    std::string port = ports.size() == names.size() ? ports[i]
                       : ports.size() == 1          ? ports[0]
                                                    : "";
    hosts.push_back({.host = names[i], .port = port.empty() ? "5432" : port});
  }
  return ParsedUrl{.conninfo = taken.rest,
                   .tuning = *tuning,
                   .several_hosts = several_hosts,
                   .hosts = std::move(hosts)};
}

}  // namespace

// `url` is the whole postgresql:// or postgres:// URL; it goes to libpq as
// it is, so every libpq parameter (sslmode, sslrootcert, connect_timeout,
// application_name...) works.
EngineEntry Entry() { return EntryOf<ParseUrl, PostgresEngine>(); }

}  // namespace sqlq::engines::postgres
