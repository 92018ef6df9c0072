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

#include "server/api.h"
#include "server/auth.h"
#include "server/http_policy.h"

namespace sqlq::server {

struct ServerConfig {
  std::string db;  // store URL
  std::string bind = "127.0.0.1";
  int port = 8080;          // 0: any free port
  std::string port_file;    // when set, the bound port is written there
  std::string tokens_file;  // empty: no auth, loopback only
  // HTTPS with this certificate chain and key (PEM files); both empty:
  // plain HTTP.
  std::string tls_cert;
  std::string tls_key;
  // The cipher suites offered: TLS 1.2 (OpenSSL's cipher list syntax)
  // and TLS 1.3; checked by MakeServerConfig (server/tls.h).
  std::string tls_ciphers;
  std::string tls_ciphersuites;
  int io_threads = 2;
  int db_threads = 16;
  Limits limits;
  HttpPolicy policy;  // hosts and origins the server answers
  // /metrics without a token even with a token file (for scrapers that
  // cannot send one); otherwise it needs a metrics or admin grant.
  bool metrics_public = false;
  // Run the scheduler (StoreOptions::run_schedules).
  bool schedules = true;
  // The dashboard's history: a point per queue every step (Overview).
  Duration history_step = std::chrono::seconds(10);
};

// Runs until SIGTERM or SIGINT, then shuts down gracefully. Returns the
// process exit code: 0 after a clean shutdown, 2 for a configuration the
// server refuses (message on stderr), and exit_code(status) when the store
// cannot be opened (the CLI's table, so that `serve` and every other
// command agree).
int RunServer(const ServerConfig& config,
              const std::function<int(const Status&)>& exit_code);

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_SERVER_H_
