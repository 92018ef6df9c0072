// The SQLite engine: the embedded default. Schema in schema.h, the engine in
// sqlite_engine_impl.h and the files it lists; design notes in
// docs/engines/sqlite.md.

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
// Whether `rest` parses (as Open reads it), without connecting.
Status CheckUrl(std::string_view rest);

}  // namespace sqlq::engines::sqlite

#endif  // SQLQ_ENGINES_SQLITE_SQLITE_ENGINE_H_
