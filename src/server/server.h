// sqlq serve: the HTTP/1.1 server of docs/server.md over one Store.
//
// Threads: a few I/O threads run Boost.Asio (accept, read, write, timers,
// parked claims); a pool of database threads runs the handlers, which block
// on the store. A claim that waits is parked as a timer plus a
// ReadySubscription and holds no thread.

#ifndef SQLQ_SERVER_SERVER_H_
#define SQLQ_SERVER_SERVER_H_

#include <functional>
#include <string>

#include "server/config.h"
#include "sqlq/status.h"

namespace sqlq::server {

// Runs until SIGTERM or SIGINT, then shuts down gracefully. Returns the
// process exit code: 0 after a clean shutdown, 2 for a configuration the
// server refuses (message on stderr), and exit_code(status) when the store
// cannot be opened (the CLI's table, so that `serve` and every other
// command agree).
int RunServer(const ServerConfig& config,
              const std::function<int(const Status&)>& exit_code);

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_SERVER_H_
