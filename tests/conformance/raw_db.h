// Plain SQL on a test database, through the engine's own client library
// and not through sqlq: to set up what an earlier sqlq or another program
// left, and to look at what sqlq wrote.

#ifndef SQLQ_TESTS_CONFORMANCE_RAW_DB_H_
#define SQLQ_TESTS_CONFORMANCE_RAW_DB_H_

#include <sqlite3.h>

#include <functional>
#include <string>

#include "tests/conformance/engine_fixture.h"

namespace sqlq::test {

class RawDb {
 public:
  // Runs `sql` (one or more statements, results dropped); "" or the error.
  using Exec = std::function<std::string(const std::string&)>;

  // `engine`: the EngineFactory's name.
  RawDb(const std::string& engine, const TestDatabase& db)
      : RawDb(engine, engine == "Sqlite"
                          ? static_cast<const SqliteDatabase&>(db).path()
                          : db.raw_url()) {}

  // `target`: the file of an SQLite database, else the server's URL.
  RawDb(const std::string& engine, const std::string& target) {
    if (engine == "Sqlite") {
      sqlite3* h = nullptr;
      sqlite3_open(target.c_str(), &h);
      // Stores may be writing at the same moment (their own threads):
      // wait for their commits as they wait for each other's.
      sqlite3_busy_timeout(h, 10000);
      native_ = h;
      exec_ = [h](const std::string& sql) {
        char* err = nullptr;
        std::string out;
        if (sqlite3_exec(h, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
          out = err != nullptr ? err : "error";
        }
        sqlite3_free(err);
        return out;
      };
      query_ = [h](const std::string& sql) {
        sqlite3_stmt* st = nullptr;
        std::string out = "error: " + sql;
        if (sqlite3_prepare_v2(h, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW) {
          const auto* t = sqlite3_column_text(st, 0);
          out = t != nullptr ? reinterpret_cast<const char*>(t) : "";
        }
        sqlite3_finalize(st);
        return out;
      };
      close_ = [h] { sqlite3_close(h); };
    } else if (engine == "Postgres") {
      PGconn* c = PQconnectdb(target.c_str());
      native_ = c;
      exec_ = [c](const std::string& sql) {
        PGresult* r = PQexec(c, sql.c_str());
        std::string out;
        if (PQresultStatus(r) != PGRES_COMMAND_OK &&
            PQresultStatus(r) != PGRES_TUPLES_OK) {
          out = PQresultErrorMessage(r);
        }
        PQclear(r);
        return out;
      };
      query_ = [c](const std::string& sql) {
        PGresult* r = PQexec(c, sql.c_str());
        std::string out = "error: " + std::string(PQresultErrorMessage(r));
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0) {
          out = PQgetvalue(r, 0, 0);
        }
        PQclear(r);
        return out;
      };
      close_ = [c] { PQfinish(c); };
    } else {
      std::string error;
      MYSQL* m = MysqlConnect(target, &error);
      native_ = m;
      exec_ = [m, error](const std::string& sql) -> std::string {
        if (m == nullptr) return error;
        if (mysql_query(m, sql.c_str()) != 0) return mysql_error(m);
        if (MYSQL_RES* res = mysql_store_result(m)) mysql_free_result(res);
        return "";
      };
      query_ = [m, error](const std::string& sql) -> std::string {
        if (m == nullptr) return "error: " + error;
        if (mysql_query(m, sql.c_str()) != 0) {
          return "error: " + std::string(mysql_error(m));
        }
        MYSQL_RES* res = mysql_store_result(m);
        std::string out = "error: no rows";
        if (res != nullptr) {
          if (MYSQL_ROW row = mysql_fetch_row(res)) {
            out = row[0] != nullptr ? row[0] : "";
          }
          mysql_free_result(res);
        }
        return out;
      };
      close_ = [m] {
        if (m != nullptr) mysql_close(m);
      };
    }
  }
  ~RawDb() { close_(); }
  RawDb(const RawDb&) = delete;
  RawDb& operator=(const RawDb&) = delete;

  const Exec& exec() const { return exec_; }
  // The client library's connection (sqlite3*, PGconn*, MYSQL*), for
  // Store::JoinTx.
  void* native() const { return native_; }
  // The first column of the first row, as text ("error: ..." on failure).
  std::string Query(const std::string& sql) const { return query_(sql); }

 private:
  void* native_ = nullptr;
  Exec exec_;
  std::function<std::string(const std::string&)> query_;
  std::function<void()> close_;
};

}  // namespace sqlq::test

#endif  // SQLQ_TESTS_CONFORMANCE_RAW_DB_H_
