#include "server/config.h"

#include <fmt/format.h>

#include <charconv>
#include <fstream>
#include <functional>
#include <sstream>
#include <tuple>

#include "server/log.h"
#include "server/tls.h"
#include "wire/duration.h"

namespace sqlq::server {

namespace {

constexpr SettingSpec kSettings[] = {
    {"bind", "SQLQ_BIND", "ADDR", "Address to listen on", "127.0.0.1"},
    {"port", "SQLQ_PORT", "PORT", "TCP port; 0 picks a free one", "8080"},
    {"port-file", "SQLQ_PORT_FILE", "PATH", "Write the bound port to this file",
     ""},
    {"tokens", "SQLQ_TOKENS", "PATH",
     "Token file (bearer tokens and permissions); required off loopback", ""},
    {"tls-cert", "SQLQ_TLS_CERT", "PATH",
     "Serve HTTPS with this certificate chain (PEM); needs --tls-key", ""},
    {"tls-key", "SQLQ_TLS_KEY", "PATH", "The private key (PEM) of --tls-cert",
     ""},
    {"tls-ciphers", "SQLQ_TLS_CIPHERS", "LIST",
     "TLS 1.2 cipher suites offered, in OpenSSL's cipher list syntax "
     "(':'-separated)",
     kDefaultTls12Ciphers.data()},
    {"tls-ciphersuites", "SQLQ_TLS_CIPHERSUITES", "LIST",
     "TLS 1.3 cipher suites offered (':'-separated)",
     kDefaultTls13Ciphersuites.data()},
    {"auth-failures", "SQLQ_AUTH_FAILURES", "N/PERIOD",
     "Failed authentications allowed per client address, as N/PERIOD: a "
     "burst of N, then N per PERIOD; past them the address gets 429",
     "10/1m"},
    {"io-threads", "SQLQ_IO_THREADS", "N", "Network threads", "2"},
    {"db-threads", "SQLQ_DB_THREADS", "N",
     "Threads for database calls; auto: 32 on SQLite, 16 on PostgreSQL and "
     "MariaDB",
     "auto"},
    {"max-body", "SQLQ_MAX_BODY", "BYTES", "Largest request body, bytes",
     "16777216"},
    {"max-header", "SQLQ_MAX_HEADER", "BYTES", "Largest request head, bytes",
     "16384"},
    {"max-batch", "SQLQ_MAX_BATCH", "N",
     "Most messages per send or acks per call", "1000"},
    {"max-payload", "SQLQ_MAX_PAYLOAD", "BYTES", "Largest payload, bytes",
     "1048576"},
    {"max-reply", "SQLQ_MAX_REPLY", "BYTES",
     "Largest reply, bytes: claims take fewer messages, listings stop early",
     "16777216"},
    {"max-wait", "SQLQ_MAX_WAIT", "DURATION", "Longest claim wait_ms allowed",
     "60s"},
    {"max-connections", "SQLQ_MAX_CONNECTIONS", "N", "Open connections allowed",
     "20000"},
    {"max-polls-per-token", "SQLQ_MAX_POLLS_PER_TOKEN", "N",
     "Waiting claims allowed per token", "10000"},
    {"idle-timeout", "SQLQ_IDLE_TIMEOUT", "DURATION",
     "Close a keep-alive connection idle this long", "120s"},
    {"request-timeout", "SQLQ_REQUEST_TIMEOUT", "DURATION",
     "Time a client has to send a whole request (and read a reply)", "10s"},
    {"shutdown-timeout", "SQLQ_SHUTDOWN_TIMEOUT", "DURATION",
     "Longest graceful shutdown before connections are cut", "30s"},
    {"allowed-hosts", "SQLQ_ALLOWED_HOSTS", "LIST",
     "Host names clients may use besides IP addresses and localhost "
     "(comma-separated; * for any)",
     ""},
    {"metrics-public", "SQLQ_METRICS_PUBLIC", "true|false",
     "Serve /metrics without a token even with --tokens (true or false)",
     "false"},
    {"schedules", "SQLQ_SCHEDULES", "true|false",
     "Run the scheduler: send the ticks of schedules while this server holds "
     "the database's scheduler lease (true or false)",
     "true"},
    {"history-step", "SQLQ_HISTORY_STEP", "DURATION",
     "How often the dashboard's history records each queue's depth and "
     "rates (an hour of steps is kept, at most 3600)",
     "10s"},
    {"cors-origins", "SQLQ_CORS_ORIGINS", "LIST",
     "Origins of web pages allowed to call the API (comma-separated, "
     "https://app.example.com)",
     ""},
    {"log-level", "SQLQ_LOG_LEVEL", "debug|info|warn|error",
     "Least level of the lines logged", "info"},
    {"log-format", "SQLQ_LOG_FORMAT", "logfmt|json",
     "Log lines as key=value pairs (logfmt) or JSON objects", "logfmt"},
    {"access-log", "SQLQ_ACCESS_LOG", "true|false",
     "Log every request answered (route, status, duration, peer; never "
     "tokens or bodies) at level info",
     "false"},
};

std::string TrimmedValue(std::string_view s) {
  auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  auto e = s.find_last_not_of(" \t\r");
  s = s.substr(b, e - b + 1);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') {
    s = s.substr(1, s.size() - 2);
  }
  return std::string(s);
}

}  // namespace

std::span<const SettingSpec> ServeSettings() { return kSettings; }

Result<SettingValues> ParseConfigText(std::string_view text,
                                      std::string_view path) {
  SettingValues out;
  int number = 0;
  while (!text.empty()) {
    auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text =
        nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++number;
    if (auto hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    if (TrimmedValue(line).empty()) continue;
    auto eq = line.find('=');
    if (eq == std::string_view::npos) {
      return Status::InvalidArgument(
          fmt::format("{}:{}: expected 'key = value'", path, number));
    }
    out[TrimmedValue(line.substr(0, eq))] = TrimmedValue(line.substr(eq + 1));
  }
  return out;
}

Result<SettingValues> ReadConfigFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Status::NotFound(fmt::format("cannot read '{}'", path));
  std::ostringstream text;
  text << f.rdbuf();
  return ParseConfigText(text.str(), path);
}

Result<ServerConfig> MakeServerConfig(const SettingValues& values,
                                      std::string db_url) {
  for (const auto& [name, value] : values) {
    bool known = false;
    for (const SettingSpec& s : kSettings) known |= name == s.name;
    if (!known) {
      return Status::InvalidArgument(fmt::format("unknown setting '{}'", name));
    }
  }
  auto get = [&](std::string_view name) -> std::string {
    if (auto it = values.find(name); it != values.end()) return it->second;
    for (const SettingSpec& s : kSettings) {
      if (name == s.name) return s.default_value;
    }
    std::abort();  // a name missing from kSettings
  };
  ServerConfig c;
  c.db = std::move(db_url);
  c.bind = get("bind");
  c.port_file = get("port-file");
  c.tokens_file = get("tokens");
  c.tls_cert = get("tls-cert");
  c.tls_key = get("tls-key");
  if (c.tls_cert.empty() != c.tls_key.empty()) {
    return Status::InvalidArgument(
        "--tls-cert and --tls-key go together: give both, or neither");
  }
  c.tls_ciphers = get("tls-ciphers");
  c.tls_ciphersuites = get("tls-ciphersuites");
  // A list other than the default without HTTPS is a mistake worth
  // saying: the operator believes the lists protect something.
  for (const auto& [name, chosen, fallback] :
       {std::tuple{"tls-ciphers", &c.tls_ciphers, kDefaultTls12Ciphers},
        std::tuple{"tls-ciphersuites", &c.tls_ciphersuites,
                   kDefaultTls13Ciphersuites}}) {
    if (c.tls_cert.empty() && *chosen != fallback) {
      return Status::InvalidArgument(
          fmt::format("--{} applies to HTTPS only: give --tls-cert and "
                      "--tls-key too",
                      name));
    }
  }
  if (Status s = CheckTlsCiphers(c.tls_ciphers, c.tls_ciphersuites); !s.ok()) {
    return s;
  }
  const std::pair<const char*, bool*> booleans[] = {
      {"schedules", &c.schedules},
      {"metrics-public", &c.metrics_public},
      {"access-log", &c.access_log},
  };
  for (auto [name, out] : booleans) {
    const std::string v = get(name);
    if (v != "true" && v != "false") {
      return Status::InvalidArgument(
          fmt::format("--{}: '{}' is neither true nor false", name, v));
    }
    *out = v == "true";
  }
  auto level = ParseLogLevel(get("log-level"));
  if (!level.ok()) return level.status();
  c.log_level = *level;
  auto format = ParseLogFormat(get("log-format"));
  if (!format.ok()) return format.status();
  c.log_format = *format;
  if (Status s =
          HttpPolicy::ParseHosts(get("allowed-hosts"), c.policy.allowed_hosts);
      !s.ok()) {
    return s;
  }
  if (Status s =
          HttpPolicy::ParseOrigins(get("cors-origins"), c.policy.cors_origins);
      !s.ok()) {
    return s;
  }
  Limits& l = c.limits;
  struct IntField {
    const char* name;
    std::int64_t min, max;
    std::function<void(std::int64_t)> set;
  };
  const IntField ints[] = {
      {"port", 0, 65535, [&](std::int64_t v) { c.port = int(v); }},
      {"io-threads", 1, 64, [&](std::int64_t v) { c.io_threads = int(v); }},
      {"db-threads", 1, 1024, [&](std::int64_t v) { c.db_threads = int(v); }},
      {"max-body", 1, 1LL << 30,
       [&](std::int64_t v) { l.max_body_bytes = std::size_t(v); }},
      {"max-header", 1024, 1 << 20,
       [&](std::int64_t v) { l.max_header_bytes = std::size_t(v); }},
      {"max-batch", 1, 10000, [&](std::int64_t v) { l.max_batch = int(v); }},
      {"max-payload", 1, 64 << 20,
       [&](std::int64_t v) { l.max_payload_bytes = std::size_t(v); }},
      {"max-reply", 4096, 1LL << 30,
       [&](std::int64_t v) { l.max_reply_bytes = std::size_t(v); }},
      {"max-connections", 1, 1000000,
       [&](std::int64_t v) { l.max_connections = int(v); }},
      {"max-polls-per-token", 1, 1000000,
       [&](std::int64_t v) { l.max_polls_per_token = int(v); }},
  };
  for (const IntField& f : ints) {
    const std::string v = get(f.name);
    // SQLite's default: one writer commits for every thread, and more
    // threads make larger groups (64 single-job workers went a fifth
    // faster with 32 than with 16, mixed batches too); on PostgreSQL a
    // mixed load of 64 consumers ran at two thirds with 32 (docs/server.md).
    if (std::string_view(f.name) == "db-threads" && v == "auto") {
      c.db_threads = c.db.starts_with("sqlite:") ? kSqliteDbThreads : 16;
      continue;
    }
    std::int64_t n = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || p != v.data() + v.size() || n < f.min ||
        n > f.max) {
      return Status::InvalidArgument(fmt::format(
          "--{}: '{}' is not an integer in {}..{}{}", f.name, v, f.min, f.max,
          std::string_view(f.name) == "db-threads" ? ", or auto" : ""));
    }
    f.set(n);
  }
  const std::pair<const char*, Duration*> durations[] = {
      {"max-wait", &l.max_wait},
      {"idle-timeout", &l.idle_timeout},
      {"request-timeout", &l.request_timeout},
      {"shutdown-timeout", &l.shutdown_timeout},
  };
  for (auto [name, out] : durations) {
    auto d = wire::ParseDuration(get(name));
    if (!d.ok()) return d.status().WithContext(fmt::format("--{}", name));
    *out = *d;
  }
  {
    // N/PERIOD: a burst of N failures, then one more every PERIOD/N.
    const std::string v = get("auth-failures");
    const auto slash = v.find('/');
    int n = 0;
    auto [p, ec] =
        std::from_chars(v.data(), v.data() + std::min(slash, v.size()), n);
    auto period = slash == std::string::npos
                      ? Result<Duration>(Status::InvalidArgument(""))
                      : wire::ParseDuration(v.substr(slash + 1));
    // No slash: refused before `v.data() + slash` (past the end) is formed.
    if (slash == std::string::npos || ec != std::errc() ||
        p != v.data() + slash || n < 1 || n > 1000000 || !period.ok() ||
        *period < std::chrono::seconds(1) || *period > std::chrono::hours(24)) {
      return Status::InvalidArgument(fmt::format(
          "--auth-failures: '{}' is not N/PERIOD (N from 1 to 1000000, "
          "PERIOD from 1s to 24h: 10/1m)",
          v));
    }
    l.auth_failure_burst = n;
    l.auth_failure_refill = *period / n;
  }
  auto step = wire::ParseDuration(get("history-step"));
  if (!step.ok()) return step.status().WithContext("--history-step");
  if (*step < std::chrono::milliseconds(100) || *step > std::chrono::hours(1)) {
    return Status::InvalidArgument(
        fmt::format("--history-step: '{}' is not between 100ms and 1h",
                    get("history-step")));
  }
  c.history_step = *step;
  return c;
}

std::string RedactedDbUrl(std::string_view url) {
  std::string out(url);
  // user:PASSWORD@ in the authority.
  const std::size_t scheme = out.find("://");
  if (scheme != std::string::npos) {
    const std::size_t start = scheme + 3;
    const std::size_t end = out.find_first_of("/?#", start);
    const std::size_t at =
        out.rfind('@', end == std::string::npos ? out.size() : end);
    if (at != std::string::npos && at > start) {
      const std::size_t colon = out.find(':', start);
      if (colon != std::string::npos && colon < at) {
        out.replace(colon + 1, at - colon - 1, "***");
      }
    }
  }
  // password=VALUE, as a parameter or a keyword (up to '&' or a space).
  for (std::size_t at = out.find("password="); at != std::string::npos;
       at = out.find("password=", at + 1)) {
    const std::size_t value = at + 9;
    const std::size_t end = out.find_first_of("& ", value);
    out.replace(value, (end == std::string::npos ? out.size() : end) - value,
                "***");
  }
  return out;
}

}  // namespace sqlq::server
