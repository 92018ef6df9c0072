#include "bench/baseline_mysql.h"

#include <fmt/format.h>
#include <mysql.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace sqlq::bench {

namespace {

using SteadyClock = std::chrono::steady_clock;

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

Status Setup(const Target& t, const std::string& table) {
  My my(t);
  if (!my.status().ok()) return my.status();
  Status s = my.Exec("DROP TABLE IF EXISTS " + table);
  if (!s.ok()) return s;
  return my.Exec(
      fmt::format("CREATE TABLE {} (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY "
                  "KEY, payload LONGBLOB NOT NULL) ENGINE=InnoDB",
                  table));
}

void Teardown(const Target& t, const std::string& table) {
  My my(t);
  if (my.status().ok()) (void)my.Exec("DROP TABLE IF EXISTS " + table);
}

double Since(SteadyClock::time_point t) {
  return std::chrono::duration<double>(SteadyClock::now() - t).count();
}

}  // namespace

Result<BaselineResult> MysqlBaselineSend1(const std::string& url,
                                          const std::string& table, long total,
                                          int threads, std::size_t payload) {
  auto target = ParseUrl(url);
  if (!target.ok()) return target.status();
  Status s = Setup(*target, table);
  if (!s.ok()) return s;
  std::atomic<long> next{0};
  std::mutex mu;
  Status failure;
  const std::string body(payload, 'x');
  const std::string insert =
      fmt::format("INSERT INTO {} (payload) VALUES (?)", table);
  auto start = SteadyClock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      auto fail = [&](const Status& st) {
        std::lock_guard<std::mutex> lock(mu);
        failure = st;
        next = total;
      };
      My my(*target);
      if (!my.status().ok()) return fail(my.status());
      auto stmt = my.Prepare(insert);
      if (!stmt.ok()) return fail(stmt.status());
      unsigned long length = 0;
      MYSQL_BIND param = BlobParam(body, &length);
      if (mysql_stmt_bind_param(*stmt, &param) != 0) {
        return fail(My::StmtError(*stmt));
      }
      // Autocommit: each INSERT is its own durable transaction.
      while (next++ < total) {
        if (mysql_stmt_execute(*stmt) != 0) return fail(My::StmtError(*stmt));
      }
    });
  }
  for (auto& t : pool) t.join();
  double seconds = Since(start);
  Teardown(*target, table);
  if (!failure.ok()) return failure;
  return BaselineResult{.seconds = seconds, .messages = total};
}

Result<BaselineResult> MysqlBaselineMixed(
    const std::string& url, const std::string& table, int producers,
    int consumers, int batch, int claim_max, long max_backlog,
    std::chrono::milliseconds duration, std::size_t payload) {
  auto target = ParseUrl(url);
  if (!target.ok()) return target.status();
  Status s = Setup(*target, table);
  if (!s.ok()) return s;
  std::atomic<bool> stop{false};
  std::atomic<long> sent{0}, done{0};
  std::mutex mu;
  Status failure;
  auto fail = [&](const Status& st) {
    std::lock_guard<std::mutex> lock(mu);
    if (failure.ok()) failure = st;
    stop = true;
  };
  const std::string body(payload, 'x');
  // One multi-row INSERT per batch: what a careful hand-written producer
  // does.
  std::string insert = fmt::format("INSERT INTO {} (payload) VALUES ", table);
  for (int i = 0; i < batch; ++i) insert += i == 0 ? "(?)" : ",(?)";
  // The primary key serves ORDER BY id directly, so FOR UPDATE locks only
  // the rows it returns; SKIP LOCKED passes over other consumers' rows.
  const std::string take = fmt::format(
      "SELECT id, payload FROM {} ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED",
      table);
  auto start = SteadyClock::now();
  std::vector<std::thread> pool;
  for (int p = 0; p < producers; ++p) {
    pool.emplace_back([&] {
      My my(*target);
      if (!my.status().ok()) return fail(my.status());
      auto stmt = my.Prepare(insert);
      if (!stmt.ok()) return fail(stmt.status());
      std::vector<unsigned long> lengths(batch);
      std::vector<MYSQL_BIND> params;
      for (int i = 0; i < batch; ++i) {
        params.push_back(BlobParam(body, &lengths[i]));
      }
      if (mysql_stmt_bind_param(*stmt, params.data()) != 0) {
        return fail(My::StmtError(*stmt));
      }
      while (!stop) {
        if (sent - done > max_backlog) {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
          continue;
        }
        if (mysql_stmt_execute(*stmt) != 0) {
          if (My::Deadlocked(mysql_stmt_errno(*stmt))) continue;
          return fail(My::StmtError(*stmt));
        }
        sent += batch;
      }
    });
  }
  for (int c = 0; c < consumers; ++c) {
    pool.emplace_back([&] {
      My my(*target);
      if (!my.status().ok()) return fail(my.status());
      auto stmt = my.Prepare(take);
      if (!stmt.ok()) return fail(stmt.status());
      long long limit = claim_max;
      MYSQL_BIND param;
      std::memset(&param, 0, sizeof param);
      param.buffer_type = MYSQL_TYPE_LONGLONG;
      param.buffer = &limit;
      long long id = 0;
      std::vector<char> payload_buf(std::max<std::size_t>(payload, 1));
      unsigned long payload_len = 0;
      MYSQL_BIND cols[2];
      std::memset(cols, 0, sizeof cols);
      cols[0].buffer_type = MYSQL_TYPE_LONGLONG;
      cols[0].buffer = &id;
      cols[1].buffer_type = MYSQL_TYPE_BLOB;
      cols[1].buffer = payload_buf.data();
      cols[1].buffer_length = payload_buf.size();
      cols[1].length = &payload_len;
      if (mysql_stmt_bind_param(*stmt, &param) != 0 ||
          mysql_stmt_bind_result(*stmt, cols) != 0) {
        return fail(My::StmtError(*stmt));
      }
      std::string ids;
      while (!stop) {
        Status st = my.Exec("START TRANSACTION");
        if (!st.ok()) return fail(st);
        if (mysql_stmt_execute(*stmt) != 0) {
          if (My::Deadlocked(mysql_stmt_errno(*stmt))) {
            (void)my.Exec("ROLLBACK");
            continue;
          }
          return fail(My::StmtError(*stmt));
        }
        ids.clear();
        long n = 0;
        for (;;) {
          int f = mysql_stmt_fetch(*stmt);
          if (f == MYSQL_NO_DATA) break;
          if (f == 1) break;
          // MYSQL_DATA_TRUNCATED: a longer payload than ours; not read.
          ids += n == 0 ? "" : ",";
          ids += std::to_string(id);
          ++n;
        }
        if (mysql_stmt_errno(*stmt) != 0) {
          if (My::Deadlocked(mysql_stmt_errno(*stmt))) {
            mysql_stmt_free_result(*stmt);
            (void)my.Exec("ROLLBACK");
            continue;
          }
          return fail(My::StmtError(*stmt));
        }
        mysql_stmt_free_result(*stmt);
        if (n == 0) {
          st = my.Exec("COMMIT");
          if (!st.ok()) return fail(st);
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          continue;
        }
        // The ids are numbers the server just returned, not user input.
        st =
            my.Exec(fmt::format("DELETE FROM {} WHERE id IN ({})", table, ids));
        if (st.ok()) st = my.Exec("COMMIT");
        if (!st.ok() && My::Deadlocked(my.last_errno())) {
          (void)my.Exec("ROLLBACK");
          continue;
        }
        if (!st.ok()) return fail(st);
        done += n;
      }
    });
  }
  auto deadline = start + duration;
  while (SteadyClock::now() < deadline && !stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  long in_window = done;
  double seconds = Since(start);
  stop = true;
  for (auto& t : pool) t.join();
  Teardown(*target, table);
  if (!failure.ok()) return failure;
  return BaselineResult{.seconds = seconds, .messages = in_window};
}

}  // namespace sqlq::bench
