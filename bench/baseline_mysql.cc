#include <fmt/format.h>
#include <mysql.h>

#include <atomic>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "bench/baseline.h"
#include "bench/baseline_drive.h"

namespace sqlq::bench {

namespace {

struct Target {
  std::string user, password, host, database;
  unsigned port = 3306;
};

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX escapes in the user and password, as in any URL.
std::string Unescape(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && HexDigit(s[i + 1]) >= 0 &&
        HexDigit(s[i + 2]) >= 0) {
      out += static_cast<char>(HexDigit(s[i + 1]) * 16 + HexDigit(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// mysql://user:password@host:port/database[?...] (or mariadb://).
Result<Target> ParseUrl(std::string_view url) {
  const auto scheme = url.find("://");
  if (scheme == std::string_view::npos) {
    return Status::InvalidArgument("baseline: not a mysql:// URL");
  }
  std::string_view rest = url.substr(scheme + 3);
  rest = rest.substr(0, rest.find('?'));
  Target t;
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    auto colon = userinfo.find(':');
    t.user = Unescape(userinfo.substr(0, colon));
    if (colon != std::string_view::npos) {
      t.password = Unescape(userinfo.substr(colon + 1));
    }
  }
  auto slash = rest.find('/');
  std::string_view hostport = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    t.database = std::string(rest.substr(slash + 1));
  }
  if (auto colon = hostport.rfind(':'); colon != std::string_view::npos) {
    try {
      t.port = static_cast<unsigned>(
          std::stoul(std::string(hostport.substr(colon + 1))));
    } catch (...) {
      return Status::InvalidArgument("baseline: bad port in the URL");
    }
    hostport = hostport.substr(0, colon);
  }
  t.host = hostport.empty() ? "127.0.0.1" : std::string(hostport);
  if (t.database.empty()) {
    return Status::InvalidArgument("baseline: the URL names no database");
  }
  return t;
}

// One connection, with the few calls the baseline needs.
class My {
 public:
  explicit My(const Target& t) : conn_(mysql_init(nullptr)) {
    if (mysql_real_connect(conn_, t.host.c_str(), t.user.c_str(),
                           t.password.c_str(), t.database.c_str(), t.port,
                           nullptr, 0) == nullptr) {
      status_ = Error();
    }
  }
  ~My() {
    for (MYSQL_STMT* s : stmts_) mysql_stmt_close(s);
    mysql_close(conn_);
  }
  My(const My&) = delete;
  My& operator=(const My&) = delete;

  const Status& status() const { return status_; }

  Status Exec(const std::string& sql) {
    if (mysql_real_query(conn_, sql.data(), sql.size()) != 0) return Error();
    if (MYSQL_RES* r = mysql_store_result(conn_)) mysql_free_result(r);
    return Status::Ok();
  }

  Result<MYSQL_STMT*> Prepare(const std::string& sql) {
    MYSQL_STMT* s = mysql_stmt_init(conn_);
    if (s == nullptr) return Error();
    stmts_.push_back(s);
    if (mysql_stmt_prepare(s, sql.data(), sql.size()) != 0) {
      return StmtError(s);
    }
    return s;
  }

  // Deadlock or lock wait timeout: the server rolled the transaction back;
  // a careful hand-written queue tries again.
  static bool Deadlocked(unsigned error) {
    return error == 1213 || error == 1205;
  }
  unsigned last_errno() const { return mysql_errno(conn_); }

  static Status StmtError(MYSQL_STMT* s) {
    return Status::Unavailable(fmt::format(
        "baseline: {} ({})", mysql_stmt_error(s), mysql_stmt_errno(s)));
  }

 private:
  Status Error() {
    return Status::Unavailable(fmt::format(
        "baseline: {} ({})", mysql_error(conn_), mysql_errno(conn_)));
  }

  MYSQL* conn_;
  Status status_;
  std::vector<MYSQL_STMT*> stmts_;
};

MYSQL_BIND BlobParam(const std::string& body, unsigned long* length) {
  MYSQL_BIND b;
  std::memset(&b, 0, sizeof b);
  b.buffer_type = MYSQL_TYPE_BLOB;
  b.buffer = const_cast<char*>(body.data());
  *length = body.size();
  b.length = length;
  return b;
}

// One thread's connection (baseline_drive.h): a producer or a consumer.
class Worker {
 public:
  Worker(const Target& t, const std::string& table, std::size_t payload)
      : my_(t), table_(table), body_(payload, 'x') {}
  const Status& status() const { return my_.status(); }

  // One multi-row INSERT of n, autocommitted (one durable transaction):
  // what a careful hand-written producer does.
  Status Insert(int n) {
    auto stmt = InsertStatement(n);
    if (!stmt.ok()) return stmt.status();
    for (;;) {
      if (mysql_stmt_execute(*stmt) == 0) return Status::Ok();
      if (!My::Deadlocked(mysql_stmt_errno(*stmt))) {
        return My::StmtError(*stmt);
      }
    }
  }

  // Takes up to n and deletes them in one short transaction:
  //   START TRANSACTION;
  //   SELECT id, payload FROM t ORDER BY id LIMIT n FOR UPDATE SKIP LOCKED;
  //   DELETE FROM t WHERE id IN (...);
  //   COMMIT;
  // The primary key serves ORDER BY id directly, so FOR UPDATE locks only
  // the rows it returns; SKIP LOCKED passes over other consumers' rows. A
  // deadlock rolls back and tries again.
  Result<long> Take(int n) {
    if (take_ == nullptr) {
      auto stmt = my_.Prepare(fmt::format(
          "SELECT id, payload FROM {} ORDER BY id LIMIT ? FOR UPDATE SKIP "
          "LOCKED",
          table_));
      if (!stmt.ok()) return stmt.status();
      take_ = *stmt;
      std::memset(&limit_param_, 0, sizeof limit_param_);
      limit_param_.buffer_type = MYSQL_TYPE_LONGLONG;
      limit_param_.buffer = &limit_;
      payload_buf_.resize(std::max<std::size_t>(body_.size(), 1));
      std::memset(cols_, 0, sizeof cols_);
      cols_[0].buffer_type = MYSQL_TYPE_LONGLONG;
      cols_[0].buffer = &id_;
      cols_[1].buffer_type = MYSQL_TYPE_BLOB;
      cols_[1].buffer = payload_buf_.data();
      cols_[1].buffer_length = payload_buf_.size();
      cols_[1].length = &payload_len_;
      if (mysql_stmt_bind_param(take_, &limit_param_) != 0 ||
          mysql_stmt_bind_result(take_, cols_) != 0) {
        return My::StmtError(take_);
      }
    }
    limit_ = n;
    for (;;) {
      Status st = my_.Exec("START TRANSACTION");
      if (!st.ok()) return st;
      if (mysql_stmt_execute(take_) != 0) {
        if (My::Deadlocked(mysql_stmt_errno(take_))) {
          (void)my_.Exec("ROLLBACK");
          continue;
        }
        return My::StmtError(take_);
      }
      std::string ids;
      long got = 0;
      for (;;) {
        int f = mysql_stmt_fetch(take_);
        if (f == MYSQL_NO_DATA || f == 1) break;
        // MYSQL_DATA_TRUNCATED: a longer payload than ours; not read.
        ids += got == 0 ? "" : ",";
        ids += std::to_string(id_);
        ++got;
      }
      if (mysql_stmt_errno(take_) != 0) {
        const bool again = My::Deadlocked(mysql_stmt_errno(take_));
        Status failed = My::StmtError(take_);
        mysql_stmt_free_result(take_);
        (void)my_.Exec("ROLLBACK");
        if (again) continue;
        return failed;
      }
      mysql_stmt_free_result(take_);
      // The ids are numbers the server just returned, not user input.
      if (got > 0) {
        st = my_.Exec(
            fmt::format("DELETE FROM {} WHERE id IN ({})", table_, ids));
      }
      if (st.ok()) st = my_.Exec("COMMIT");
      if (!st.ok() && My::Deadlocked(my_.last_errno())) {
        (void)my_.Exec("ROLLBACK");
        continue;
      }
      if (!st.ok()) return st;
      return got;
    }
  }

 private:
  Result<MYSQL_STMT*> InsertStatement(int n) {
    if (auto it = inserts_.find(n); it != inserts_.end()) return it->second;
    std::string sql = fmt::format("INSERT INTO {} (payload) VALUES ", table_);
    for (int i = 0; i < n; ++i) sql += i == 0 ? "(?)" : ",(?)";
    auto stmt = my_.Prepare(sql);
    if (!stmt.ok()) return stmt.status();
    auto& lengths = lengths_[n];
    lengths.assign(static_cast<std::size_t>(n), 0);
    auto& params = params_[n];
    for (int i = 0; i < n; ++i) {
      params.push_back(BlobParam(body_, &lengths[static_cast<std::size_t>(i)]));
    }
    if (mysql_stmt_bind_param(*stmt, params.data()) != 0) {
      return My::StmtError(*stmt);
    }
    inserts_[n] = *stmt;
    return *stmt;
  }

  My my_;
  const std::string table_;
  const std::string body_;
  std::map<int, MYSQL_STMT*> inserts_;
  std::map<int, std::vector<unsigned long>> lengths_;
  std::map<int, std::vector<MYSQL_BIND>> params_;
  MYSQL_STMT* take_ = nullptr;
  long long limit_ = 0;
  long long id_ = 0;
  MYSQL_BIND limit_param_;
  MYSQL_BIND cols_[2];
  std::vector<char> payload_buf_;
  unsigned long payload_len_ = 0;
};

// The table's life and its workers, for DrivenBaseline.
struct MyParts {
  Target target;
  std::string table;
  std::size_t payload;

  Status Setup() {
    My my(target);
    if (!my.status().ok()) return my.status();
    Status s = my.Exec("DROP TABLE IF EXISTS " + table);
    if (!s.ok()) return s;
    return my.Exec(fmt::format(
        "CREATE TABLE {} (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY "
        "KEY, payload LONGBLOB NOT NULL) ENGINE=InnoDB",
        table));
  }
  void Teardown() {
    My my(target);
    if (my.status().ok()) (void)my.Exec("DROP TABLE IF EXISTS " + table);
  }
  Worker MakeWorker() { return Worker(target, table, payload); }
  Worker MakeConsumer() { return MakeWorker(); }
};

}  // namespace

Result<std::unique_ptr<Baseline>> MysqlBaseline(const std::string& url,
                                                const std::string& table,
                                                std::size_t payload) {
  auto target = ParseUrl(url);
  if (!target.ok()) return target.status();
  return std::unique_ptr<Baseline>(std::make_unique<DrivenBaseline<MyParts>>(
      MyParts{.target = *target, .table = table, .payload = payload}));
}

}  // namespace sqlq::bench
