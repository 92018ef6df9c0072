// The SQLite engine: the embedded default. Schema and SQL in schema.sql.h and
// sqlite_engine.cc; design notes in docs/engines/sqlite.md.

#ifndef SQLQ_ENGINES_SQLITE_SQLITE_ENGINE_H_
#define SQLQ_ENGINES_SQLITE_SQLITE_ENGINE_H_

#include <memory>
#include <string_view>

#include "core/engine.h"
#include "sqlq/store.h"

namespace sqlq::engines::sqlite {

// `rest` is the URL after "sqlite:": PATH[?synchronous=off|normal|full|extra]
Result<std::unique_ptr<core::Engine>> Open(std::string_view rest,
                                           const StoreOptions& options);

}  // namespace sqlq::engines::sqlite

#endif  // SQLQ_ENGINES_SQLITE_SQLITE_ENGINE_H_
