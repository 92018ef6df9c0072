// The engine registry: opening an engine from a store URL, and
// Store::Open on top of it. The only place that knows every engine; core
// and the front ends reach engines through Store::Open and the Engine
// interface alone. Adding an engine: CONTRIBUTING.md.

#ifndef SQLQ_ENGINES_ENGINES_H_
#define SQLQ_ENGINES_ENGINES_H_

#include <memory>
#include <string>
#include <string_view>

#include "core/engine.h"
#include "sqlq/store.h"

namespace sqlq::engines {

// kInvalidArgument for an unknown scheme or malformed URL.
Result<std::unique_ptr<core::Engine>> OpenEngine(std::string_view url,
                                                 const StoreOptions& options);

// Whether `url` names an engine and parses as that engine reads it, without
// opening anything (OpenEngine's errors for a bad URL).
Status CheckUrl(std::string_view url);

// The engine `url` names, as logs and metrics call it: "sqlite",
// "postgres" or "mysql" (MariaDB and MySQL); kInvalidArgument for a URL of
// no engine.
Result<std::string_view> EngineName(std::string_view url);

// The SQL that installs the SQL-level API on the engine `url` names
// (docs/sql-api.md), as that engine's own client takes it (psql, the
// mariadb client, sqlite3), for an administrator to run where sqlq's
// migration could not install it. The same text the migration runs.
Result<std::string> SqlApiText(std::string_view url);

}  // namespace sqlq::engines

#endif  // SQLQ_ENGINES_ENGINES_H_
