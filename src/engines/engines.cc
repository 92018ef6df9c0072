#include "engines/engines.h"

#include <fmt/format.h>

#include "core/store_impl.h"
#include "engines/mysql/mysql_engine.h"
#include "engines/postgres/postgres_engine.h"
#include "engines/sqlite/sqlite_engine.h"

namespace sqlq::engines {

Result<std::unique_ptr<core::Engine>> OpenEngine(std::string_view url,
                                                 const StoreOptions& options) {
  constexpr std::string_view kSqlite = "sqlite:";
  if (url.substr(0, kSqlite.size()) == kSqlite) {
    return sqlite::Open(url.substr(kSqlite.size()), options);
  }
  // The whole URL goes to libpq, which accepts both schemes.
  if (url.starts_with("postgresql://") || url.starts_with("postgres://")) {
    return postgres::Open(url, options);
  }
  if (url.starts_with("mysql://") || url.starts_with("mariadb://")) {
    return mysql::Open(url, options);
  }
  return Status::InvalidArgument(
      fmt::format("unsupported database URL '{}': expected sqlite:PATH or "
                  "postgresql://... or mysql://... (mariadb://...)",
                  url));
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
