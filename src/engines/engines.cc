#include "engines/engines.h"

#include <fmt/format.h>

#include "core/store_impl.h"
#include "engines/entry.h"
#include "engines/mysql/sql_api.h"
#include "engines/postgres/sql_api.h"
#include "engines/sqlite/sql_api.h"

// Which engines this build has (CMake's SQLQ_WITH_POSTGRES and
// SQLQ_WITH_MYSQL, docs/installing.md). This file alone sees them, so every
// other object is the same in builds with and without an engine.
#ifndef SQLQ_WITH_POSTGRES
#define SQLQ_WITH_POSTGRES 1
#endif
#ifndef SQLQ_WITH_MYSQL
#define SQLQ_WITH_MYSQL 1
#endif

namespace sqlq::engines {

namespace {

enum class Scheme { kSqlite, kPostgres, kMysql };
constexpr std::string_view kSqlite = "sqlite:";

Result<Scheme> SchemeOf(std::string_view url) {
  if (url.starts_with(kSqlite)) return Scheme::kSqlite;
  // The whole URL goes to libpq, which accepts both schemes.
  if (url.starts_with("postgresql://") || url.starts_with("postgres://")) {
    return Scheme::kPostgres;
  }
  if (url.starts_with("mysql://") || url.starts_with("mariadb://")) {
    return Scheme::kMysql;
  }
  return Status::InvalidArgument(
      fmt::format("unsupported database URL '{}': expected sqlite:PATH or "
                  "postgresql://... or mysql://... (mariadb://...)",
                  url));
}

// The error for a URL of an engine this build left out.
[[maybe_unused]] Status BuiltWithout(std::string_view engine) {
  return Status::InvalidArgument(
      fmt::format("this sqlq was built without {} support", engine));
}

}  // namespace

Result<std::unique_ptr<core::Engine>> OpenEngine(std::string_view url,
                                                 const StoreOptions& options) {
  auto scheme = SchemeOf(url);
  if (!scheme.ok()) return scheme.status();
  switch (*scheme) {
    case Scheme::kSqlite:
      return sqlite::Entry().open(url.substr(kSqlite.size()), options);
    case Scheme::kPostgres:
#if SQLQ_WITH_POSTGRES
      return postgres::Entry().open(url, options);
#else
      return BuiltWithout("PostgreSQL");
#endif
    case Scheme::kMysql:
#if SQLQ_WITH_MYSQL
      return mysql::Entry().open(url, options);
#else
      return BuiltWithout("MariaDB/MySQL");
#endif
  }
  return Status::Internal("unknown scheme");
}

Status CheckUrl(std::string_view url) {
  auto scheme = SchemeOf(url);
  if (!scheme.ok()) return scheme.status();
  switch (*scheme) {
    case Scheme::kSqlite:
      return sqlite::Entry().check_url(url.substr(kSqlite.size()));
    case Scheme::kPostgres:
#if SQLQ_WITH_POSTGRES
      return postgres::Entry().check_url(url);
#else
      return BuiltWithout("PostgreSQL");
#endif
    case Scheme::kMysql:
#if SQLQ_WITH_MYSQL
      return mysql::Entry().check_url(url);
#else
      return BuiltWithout("MariaDB/MySQL");
#endif
  }
  return Status::Internal("unknown scheme");
}

Result<std::string_view> EngineName(std::string_view url) {
  auto scheme = SchemeOf(url);
  if (!scheme.ok()) return scheme.status();
  switch (*scheme) {
    case Scheme::kSqlite:
      return std::string_view("sqlite");
    case Scheme::kPostgres:
      return std::string_view("postgres");
    case Scheme::kMysql:
      return std::string_view("mysql");
  }
  return Status::Internal("unknown scheme");
}

Result<std::string> SqlApiText(std::string_view url) {
  auto scheme = SchemeOf(url);
  if (!scheme.ok()) return scheme.status();
  switch (*scheme) {
    case Scheme::kSqlite:
      // Migration 12's views, then 21's ack trigger (made again) and 20's
      // publish: the API as it is, whatever the file had.
      return std::string(sqlite::kSqlApi12) + sqlite::kSqlApi21 +
             sqlite::kPublish20;
    case Scheme::kPostgres:
      return std::string(postgres::kSqlApiScript);
    case Scheme::kMysql: {
      // The mariadb client splits statements at ';', which procedure
      // bodies contain.
      std::string out = "DELIMITER //\n";
      for (const char* stmt : mysql::kSqlApi) {
        out += stmt;
        out += "\n//\n";
      }
      return out + "DELIMITER ;\n";
    }
  }
  return Status::Internal("unknown scheme");
}

}  // namespace sqlq::engines

namespace sqlq {

Result<std::unique_ptr<Store>> Store::Open(std::string_view url,
                                           const StoreOptions& options) {
  auto engine = engines::OpenEngine(url, options);
  if (!engine.ok()) return engine.status();
  auto impl =
      std::make_unique<core::StoreImpl>(std::string(url), std::move(*engine));
  impl->set_clock(options.clock);
  if (options.run_schedules) impl->StartScheduler();
  if (options.report_waiting) impl->StartWaitingReports();
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

}  // namespace sqlq
