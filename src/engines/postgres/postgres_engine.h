// The PostgreSQL engine (libpq). Schema in schema.h, the engine in
// postgres_engine_impl.h and the files it lists; design notes in
// docs/engines/postgres.md.

#ifndef SQLQ_ENGINES_POSTGRES_POSTGRES_ENGINE_H_
#define SQLQ_ENGINES_POSTGRES_POSTGRES_ENGINE_H_

#include <memory>
#include <string_view>

#include "core/engine.h"
#include "sqlq/store.h"

namespace sqlq::engines::postgres {

// `url` is the whole postgresql:// or postgres:// URL; it goes to libpq as
// it is, so every libpq parameter (sslmode, sslrootcert, connect_timeout,
// application_name...) works.
Result<std::unique_ptr<core::Engine>> Open(std::string_view url,
                                           const StoreOptions& options);
// Whether `url` parses (as Open reads it), without connecting.
Status CheckUrl(std::string_view url);

}  // namespace sqlq::engines::postgres

#endif  // SQLQ_ENGINES_POSTGRES_POSTGRES_ENGINE_H_
