#include "bench/baseline_postgres.h"

#include <fmt/format.h>
#include <libpq-fe.h>

#include <atomic>
#include <vector>

#include "bench/baseline.h"
#include "bench/baseline_drive.h"

namespace sqlq::bench {

namespace {

class Pg {
 public:
  explicit Pg(const std::string& url) : conn_(PQconnectdb(url.c_str())) {
    // "table does not exist, skipping" and the like are not for the user.
    PQsetNoticeProcessor(
        conn_, [](void*, const char*) {}, nullptr);
  }
  ~Pg() { PQfinish(conn_); }
  Status status() const {
    if (PQstatus(conn_) == CONNECTION_OK) return Status::Ok();
    return Status::Unavailable(
        fmt::format("baseline: {}", PQerrorMessage(conn_)));
  }
  // Runs `sql` with text parameters; returns the number of rows it returned
  // or affected, or the error.
  Result<long> Run(const std::string& sql,
                   const std::vector<std::string>& params = {}) {
    std::vector<const char*> values;
    for (const auto& p : params) values.push_back(p.c_str());
    PGresult* r =
        PQexecParams(conn_, sql.c_str(), static_cast<int>(values.size()),
                     nullptr, values.data(), nullptr, nullptr, 0);
    ExecStatusType st = PQresultStatus(r);
    long n = 0;
    if (st == PGRES_TUPLES_OK) {
      n = PQntuples(r);
    } else if (st == PGRES_COMMAND_OK) {
      const char* affected = PQcmdTuples(r);
      n = affected[0] ? std::atol(affected) : 0;
    } else {
      std::string err = PQresultErrorMessage(r);
      PQclear(r);
      return Status::Unavailable(fmt::format("baseline: {}", err));
    }
    PQclear(r);
    return n;
  }

 private:
  PGconn* conn_;
};

// One thread's connection (baseline_drive.h): a producer or a consumer.
class Worker {
 public:
  Worker(const std::string& url, const std::string& table, std::size_t payload)
      : pg_(url),
        body_(payload, 'x'),
        insert_one_(fmt::format("INSERT INTO {} (payload) VALUES ($1)", table)),
        // One multi-row INSERT per batch: what a careful hand-written
        // producer does.
        insert_many_(fmt::format("INSERT INTO {} (payload) SELECT $1::bytea "
                                 "FROM generate_series(1, $2)",
                                 table)),
        take_(fmt::format(
            "DELETE FROM {0} WHERE id IN (SELECT id FROM {0} ORDER BY id "
            "LIMIT $1 FOR UPDATE SKIP LOCKED) RETURNING id, payload",
            table)) {}
  Status status() const { return pg_.status(); }

  // Autocommitted: each call is one durable transaction.
  Status Insert(int n) {
    if (n == 1) return pg_.Run(insert_one_, {body_}).status();
    return pg_.Run(insert_many_, {body_, std::to_string(n)}).status();
  }
  Result<long> Take(int n) { return pg_.Run(take_, {std::to_string(n)}); }

 private:
  Pg pg_;
  const std::string body_, insert_one_, insert_many_, take_;
};

// The table's life and its workers, for DrivenBaseline.
struct PgParts {
  std::string url, table;
  std::size_t payload;

  Status Setup() {
    Pg pg(url);
    if (!pg.status().ok()) return pg.status();
    auto r = pg.Run("DROP TABLE IF EXISTS " + table);
    if (!r.ok()) return r.status();
    return pg
        .Run(fmt::format("CREATE TABLE {} (id BIGSERIAL PRIMARY KEY, payload "
                         "BYTEA NOT NULL)",
                         table))
        .status();
  }
  void Teardown() {
    Pg pg(url);
    if (pg.status().ok()) (void)pg.Run("DROP TABLE IF EXISTS " + table);
  }
  Worker MakeWorker() { return Worker(url, table, payload); }
  Worker MakeConsumer() { return MakeWorker(); }
};

}  // namespace

Result<std::unique_ptr<Baseline>> PgBaseline(const std::string& url,
                                             const std::string& table,
                                             std::size_t payload) {
  return std::unique_ptr<Baseline>(std::make_unique<DrivenBaseline<PgParts>>(
      PgParts{.url = url, .table = table, .payload = payload}));
}

Result<PgTupleCounts> PgTuples(const std::string& url,
                               const std::string& table) {
  PGconn* conn = PQconnectdb(url.c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    Status st = Status::Unavailable(
        fmt::format("tuple counts: {}", PQerrorMessage(conn)));
    PQfinish(conn);
    return st;
  }
  const char* values[] = {table.c_str()};
  PGresult* r =
      PQexecParams(conn,
                   "SELECT n_live_tup, n_dead_tup FROM pg_stat_user_tables "
                   "WHERE relname = $1",
                   1, nullptr, values, nullptr, nullptr, 0);
  Result<PgTupleCounts> out = PgTupleCounts{};
  if (PQresultStatus(r) != PGRES_TUPLES_OK) {
    out = Status::Unavailable(
        fmt::format("tuple counts: {}", PQresultErrorMessage(r)));
  } else if (PQntuples(r) == 1) {
    out = PgTupleCounts{.live = std::atol(PQgetvalue(r, 0, 0)),
                        .dead = std::atol(PQgetvalue(r, 0, 1))};
  }
  PQclear(r);
  PQfinish(conn);
  return out;
}

Result<std::unique_ptr<PgSnapshotHolder>> PgSnapshotHolder::Open(
    const std::string& url) {
  PGconn* conn = PQconnectdb(url.c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    Status st = Status::Unavailable(
        fmt::format("snapshot holder: {}", PQerrorMessage(conn)));
    PQfinish(conn);
    return st;
  }
  // The snapshot is taken by the first statement after BEGIN, and kept
  // until the transaction ends: its xmin holds back vacuum everywhere.
  PGresult* r = PQexec(conn,
                       "BEGIN ISOLATION LEVEL REPEATABLE READ; "
                       "SELECT count(*) FROM pg_class");
  const bool ok = PQresultStatus(r) == PGRES_TUPLES_OK;
  std::string err = ok ? "" : PQresultErrorMessage(r);
  PQclear(r);
  if (!ok) {
    PQfinish(conn);
    return Status::Unavailable(fmt::format("snapshot holder: {}", err));
  }
  return std::unique_ptr<PgSnapshotHolder>(new PgSnapshotHolder(conn));
}

PgSnapshotHolder::~PgSnapshotHolder() {
  auto* conn = static_cast<PGconn*>(conn_);
  PQclear(PQexec(conn, "ROLLBACK"));
  PQfinish(conn);
}

}  // namespace sqlq::bench
