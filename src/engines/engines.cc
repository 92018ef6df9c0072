#include "engines/engines.h"

#include <fmt/format.h>

#include "engines/sqlite/sqlite_engine.h"

namespace sqlq::engines {

Result<std::unique_ptr<core::Engine>> OpenEngine(std::string_view url,
                                                 const StoreOptions& options) {
  constexpr std::string_view kSqlite = "sqlite:";
  if (url.substr(0, kSqlite.size()) == kSqlite) {
    return sqlite::Open(url.substr(kSqlite.size()), options);
  }
  return Status::InvalidArgument(
      fmt::format("unsupported database URL '{}': expected sqlite:PATH", url));
}

}  // namespace sqlq::engines
