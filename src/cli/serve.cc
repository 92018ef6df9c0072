#include "cli/serve.h"

#include <fmt/format.h>

#include <charconv>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <vector>

#include "cli/output.h"
#include "cli/parse.h"
#include "server/server.h"
#include "sqlq/store.h"

namespace sqlq::cli {
namespace {

// Every setting as text, so that flags, environment and config file fill
// them the same way; converted and checked once all three are read.
struct Setting {
  const char* name;  // the flag without "--", and the config file key
  const char* env;
  const char* help;
  std::string value;  // the default, until given
  CLI::Option* option = nullptr;
};

Status ParseCount(const Setting& s, std::int64_t min, std::int64_t max,
                  std::int64_t& out) {
  const std::string& v = s.value;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size() || out < min || out > max) {
    return Status::InvalidArgument(fmt::format(
        "--{}: '{}' is not an integer in {}..{}", s.name, v, min, max));
  }
  return Status::Ok();
}

Status ParseDurationSetting(const Setting& s, Duration& out) {
  auto d = ParseDuration(s.value);
  if (!d.ok()) return d.status().WithContext(fmt::format("--{}", s.name));
  out = *d;
  return Status::Ok();
}

// "key = value" lines; '#' starts a comment.
Status ReadConfigFile(const std::string& path,
                      std::map<std::string, std::string>& out) {
  std::ifstream f(path);
  if (!f) return Status::NotFound(fmt::format("cannot read '{}'", path));
  std::string line;
  int number = 0;
  while (std::getline(f, line)) {
    ++number;
    if (auto hash = line.find('#'); hash != std::string::npos) {
      line.resize(hash);
    }
    auto trim = [](std::string s) {
      auto b = s.find_first_not_of(" \t\r");
      if (b == std::string::npos) return std::string();
      auto e = s.find_last_not_of(" \t\r");
      s = s.substr(b, e - b + 1);
      if (s.size() >= 2 && s.front() == '"' && s.back() == '"') {
        s = s.substr(1, s.size() - 2);
      }
      return s;
    };
    if (trim(line).empty()) continue;
    auto eq = line.find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument(
          fmt::format("{}:{}: expected 'key = value'", path, number));
    }
    out[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return Status::Ok();
}

}  // namespace

void AddServeCommand(CLI::App& app, std::function<std::string()> db,
                     int& exit_code) {
  auto* cmd = app.add_subcommand(
      "serve", "Run the HTTP server (docs/server.md, docs/http-api.md)");
  auto settings = std::make_shared<std::vector<Setting>>(std::vector<Setting>{
      {"bind", "SQLQ_BIND", "Address to listen on", "127.0.0.1"},
      {"port", "SQLQ_PORT", "TCP port; 0 picks a free one", "8080"},
      {"port-file", "SQLQ_PORT_FILE", "Write the bound port to this file", ""},
      {"tokens", "SQLQ_TOKENS",
       "Token file (bearer tokens and permissions); required off loopback", ""},
      {"io-threads", "SQLQ_IO_THREADS", "Network threads", "2"},
      {"db-threads", "SQLQ_DB_THREADS", "Threads for database calls", "16"},
      {"max-body", "SQLQ_MAX_BODY", "Largest request body, bytes", "16777216"},
      {"max-header", "SQLQ_MAX_HEADER", "Largest request head, bytes", "16384"},
      {"max-batch", "SQLQ_MAX_BATCH", "Most messages per send or acks per call",
       "1000"},
      {"max-payload", "SQLQ_MAX_PAYLOAD", "Largest payload, bytes", "1048576"},
      {"max-reply", "SQLQ_MAX_REPLY",
       "Largest reply, bytes: claims take fewer messages, listings stop "
       "early",
       "16777216"},
      {"max-wait", "SQLQ_MAX_WAIT", "Longest claim wait_ms allowed", "60s"},
      {"max-connections", "SQLQ_MAX_CONNECTIONS", "Open connections allowed",
       "20000"},
      {"max-polls-per-token", "SQLQ_MAX_POLLS_PER_TOKEN",
       "Waiting claims allowed per token", "10000"},
      {"idle-timeout", "SQLQ_IDLE_TIMEOUT",
       "Close a keep-alive connection idle this long", "120s"},
      {"request-timeout", "SQLQ_REQUEST_TIMEOUT",
       "Time a client has to send a whole request (and read a reply)", "10s"},
      {"shutdown-timeout", "SQLQ_SHUTDOWN_TIMEOUT",
       "Longest graceful shutdown before connections are cut", "30s"},
      {"allowed-hosts", "SQLQ_ALLOWED_HOSTS",
       "Host names clients may use besides IP addresses and localhost "
       "(comma-separated; * for any)",
       ""},
      {"metrics-public", "SQLQ_METRICS_PUBLIC",
       "Serve /metrics without a token even with --tokens (true or false)",
       "false"},
      {"cors-origins", "SQLQ_CORS_ORIGINS",
       "Origins of web pages allowed to call the API (comma-separated, "
       "https://app.example.com)",
       ""},
  });
  for (Setting& s : *settings) {
    s.option = cmd->add_option(std::string("--") + s.name, s.value,
                               fmt::format("{} (default {})", s.help,
                                           s.value.empty() ? "none" : s.value))
                   ->envname(s.env);
  }
  auto config = std::make_shared<std::string>();
  cmd->add_option("--config", *config,
                  "Config file of 'key = value' lines (keys: the flags "
                  "without --, and db); flags and environment win")
      ->envname("SQLQ_CONFIG");

  cmd->callback([settings, config, db, &exit_code] {
    auto fail = [&](const Status& s) {
      std::cerr << "sqlq serve: " << s.message() << "\n";
      exit_code = 2;
    };
    std::string url = db();
    if (!config->empty()) {
      std::map<std::string, std::string> file;
      if (Status s = ReadConfigFile(*config, file); !s.ok()) return fail(s);
      for (auto& [key, value] : file) {
        if (key == "db") {
          if (url.empty()) url = value;
          continue;
        }
        bool known = false;
        for (Setting& s : *settings) {
          if (key != s.name) continue;
          known = true;
          if (s.option->count() == 0) s.value = value;
        }
        if (!known) {
          return fail(Status::InvalidArgument(
              fmt::format("{}: unknown key '{}'", *config, key)));
        }
      }
    }
    auto get = [&](const char* name) -> const Setting& {
      for (const Setting& s : *settings) {
        if (std::string_view(s.name) == name) return s;
      }
      std::abort();  // a name missing from the table above
    };
    server::ServerConfig c;
    c.db = url.empty() ? std::string(Store::kDefaultUrl) : url;
    c.bind = get("bind").value;
    c.port_file = get("port-file").value;
    c.tokens_file = get("tokens").value;
    if (const std::string& v = get("metrics-public").value;
        v == "true" || v == "false") {
      c.metrics_public = v == "true";
    } else {
      return fail(Status::InvalidArgument(
          fmt::format("--metrics-public: '{}' is neither true nor false", v)));
    }
    if (Status s = server::HttpPolicy::ParseHosts(get("allowed-hosts").value,
                                                  c.policy.allowed_hosts);
        !s.ok()) {
      return fail(s);
    }
    if (Status s = server::HttpPolicy::ParseOrigins(get("cors-origins").value,
                                                    c.policy.cors_origins);
        !s.ok()) {
      return fail(s);
    }
    std::int64_t n = 0;
    server::Limits& l = c.limits;
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
      if (Status s = ParseCount(get(f.name), f.min, f.max, n); !s.ok()) {
        return fail(s);
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
      if (Status s = ParseDurationSetting(get(name), *out); !s.ok()) {
        return fail(s);
      }
    }
    exit_code = server::RunServer(
        c, [](const Status& s) { return ExitCode(s.code()); });
  });
}

}  // namespace sqlq::cli
