// The configuration of `sqlq serve` (docs/server.md): what a server is
// configured with (ServerConfig, and its Limits), the settings' names,
// environment variables, defaults and checks, the config file format, and
// the conversion of the settings' text into a ServerConfig. The CLI only
// wires flags and environment to them (cli/serve.cc).

#ifndef SQLQ_SERVER_CONFIG_H_
#define SQLQ_SERVER_CONFIG_H_

#include <chrono>
#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "server/http_policy.h"
#include "server/log.h"
#include "sqlq/queue.h"
#include "sqlq/status.h"

namespace sqlq::server {

// What the server allows each request and client (docs/server.md).
struct Limits {
  std::size_t max_body_bytes = 16 << 20;
  std::size_t max_header_bytes = 16 << 10;
  int max_batch = 1000;  // messages per send, receipts per ack
  std::size_t max_payload_bytes = 1
                                  << 20;  // per message, on top of the queue's
  // Largest reply: a claim takes fewer messages, a listing stops early.
  // Only a single message larger than this on its own goes past it.
  std::size_t max_reply_bytes = 16 << 20;
  Duration max_wait = std::chrono::seconds(60);
  int max_connections = 20000;
  int max_polls_per_token = 10000;  // concurrent long-poll claims
  Duration idle_timeout =
      std::chrono::seconds(120);  // keep-alive, between requests
  Duration request_timeout = std::chrono::seconds(10);  // to send one request
  Duration shutdown_timeout = std::chrono::seconds(30);
  // Failed authentications allowed per client address: a burst of this
  // many, then one more per auth_failure_refill (AuthFailures).
  int auth_failure_burst = 10;
  Duration auth_failure_refill = std::chrono::seconds(6);
};

// --db-threads auto (the default) on SQLite; 16 on the other engines.
inline constexpr int kSqliteDbThreads = 32;

// What a server runs with; MakeServerConfig makes it from the settings.
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
  int db_threads = 16;  // --db-threads auto: kSqliteDbThreads on SQLite
  Limits limits;
  HttpPolicy policy;  // hosts and origins the server answers
  // /metrics without a token even with a token file (for scrapers that
  // cannot send one); otherwise it needs a metrics or admin grant.
  bool metrics_public = false;
  // Run the scheduler (StoreOptions::run_schedules).
  bool schedules = true;
  // The dashboard's history: a point per queue every step (Overview).
  Duration history_step = std::chrono::seconds(10);
  // The log: lines from this level on, in this format (server/log.h);
  // with access_log, a line for every request answered.
  LogLevel log_level = LogLevel::kInfo;
  LogFormat log_format = LogFormat::kLogfmt;
  bool access_log = false;
  // What /metrics' sqlq_build_info shows: the program's version and the
  // engine of `db` ("sqlite", "postgres", "mysql"); set by the program.
  std::string version;
  std::string engine;
};

struct SettingSpec {
  const char* name;  // the flag without "--", and the config file key
  const char* env;   // the environment variable
  // What the value is, as --help shows it: "PORT", "DURATION", "true|false".
  const char* placeholder;
  const char* help;
  const char* default_value;  // "" for none
};

// Every setting, in the order `sqlq serve --help` shows them.
std::span<const SettingSpec> ServeSettings();

// Setting name -> value as given (text, converted by MakeServerConfig).
using SettingValues = std::map<std::string, std::string, std::less<>>;

// A config file's text: "key = value" lines; '#' starts a comment; blank
// lines are skipped; a value in double quotes loses them. `path` names the
// file in errors ("PATH:LINE: ..."). Keys are not checked here.
Result<SettingValues> ParseConfigText(std::string_view text,
                                      std::string_view path);
// The same, read from the file; kNotFound when it cannot be read.
Result<SettingValues> ReadConfigFile(const std::string& path);

// Converts and checks the settings: ones missing from `values` take their
// default; an unknown name, a number out of range, a bad duration, host or
// origin is kInvalidArgument naming the flag ("--max-batch: ...").
Result<ServerConfig> MakeServerConfig(const SettingValues& values,
                                      std::string db_url);

// A database URL as logs show it: a password (in "user:PASSWORD@" or a
// "password=" parameter) replaced by "***".
std::string RedactedDbUrl(std::string_view url);

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_CONFIG_H_
