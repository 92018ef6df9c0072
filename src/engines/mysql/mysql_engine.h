// The MariaDB/MySQL engine (MariaDB Connector/C). Schema in schema.h, the
// engine in mysql_engine_impl.h and the files it lists; design notes in
// docs/engines/mysql.md.

#ifndef SQLQ_ENGINES_MYSQL_MYSQL_ENGINE_H_
#define SQLQ_ENGINES_MYSQL_MYSQL_ENGINE_H_

#include <memory>
#include <string_view>

#include "core/engine.h"
#include "sqlq/store.h"

namespace sqlq::engines::mysql {

// `url` is a mysql:// or mariadb:// URL:
//   mysql://[user[:password]@]host[:port][,host[:port]...]/database[?...]
// (several servers: the first that takes writes is used) with parameters
// ssl (disable, require, verify-ca, verify-full), ssl_ca, ssl_cert,
// ssl_key, connect_timeout, read_timeout, write_timeout (seconds),
// failover_wait_ms, write_groups and socket (a Unix socket path); see
// docs/engines/mysql.md. User, password and database may be percent-encoded.
// kInvalidArgument for a malformed URL or an unknown parameter.
Result<std::unique_ptr<core::Engine>> Open(std::string_view url,
                                           const StoreOptions& options);
// Whether `url` parses (as Open reads it), without connecting.
Status CheckUrl(std::string_view url);

}  // namespace sqlq::engines::mysql

#endif  // SQLQ_ENGINES_MYSQL_MYSQL_ENGINE_H_
