#include "cli/serve.h"

#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <vector>

#include "engines/engines.h"
#include "server/auth.h"
#include "server/config.h"
#include "server/server.h"
#include "sqlq/store.h"
#include "wire/printer.h"

namespace sqlq::cli {

void AddServeCommand(CLI::App& app, std::function<std::string()> db,
                     int& exit_code) {
  auto* cmd = app.add_subcommand(
      "serve", "Run the HTTP server (docs/server.md, docs/http-api.md)");
  // Every setting as text, so that flags, environment and config file fill
  // them the same way; converted and checked once all three are read.
  struct Given {
    const server::SettingSpec* spec;
    std::string value;
    CLI::Option* option = nullptr;
  };
  auto settings = std::make_shared<std::vector<Given>>();
  for (const server::SettingSpec& spec : server::ServeSettings()) {
    settings->push_back({&spec, spec.default_value});
  }
  for (Given& g : *settings) {
    const std::string_view def = g.spec->default_value;
    g.option = cmd->add_option(std::string("--") + g.spec->name, g.value,
                               fmt::format("{} (default {})", g.spec->help,
                                           def.empty() ? "none" : def))
                   ->envname(g.spec->env)
                   ->type_name(g.spec->placeholder);
  }
  auto config = std::make_shared<std::string>();
  cmd->add_option("--config", *config,
                  "Config file of 'key = value' lines (keys: the flags "
                  "without --, and db); flags and environment win")
      ->envname("SQLQ_CONFIG")
      ->type_name("PATH");

  cmd->callback([settings, config, db, &exit_code] {
    auto fail = [&](const Status& s) {
      std::cerr << "sqlq serve: " << s.message() << "\n";
      exit_code = 2;
    };
    std::string url = db();
    if (!config->empty()) {
      auto file = server::ReadConfigFile(*config);
      if (!file.ok()) return fail(file.status());
      for (auto& [key, value] : *file) {
        if (key == "db") {
          if (url.empty()) url = value;
          continue;
        }
        bool known = false;
        for (Given& g : *settings) {
          if (key != g.spec->name) continue;
          known = true;
          if (g.option->count() == 0) g.value = value;
        }
        if (!known) {
          return fail(Status::InvalidArgument(
              fmt::format("{}: unknown key '{}'", *config, key)));
        }
      }
    }
    server::SettingValues values;
    for (const Given& g : *settings) values[g.spec->name] = g.value;
    auto c = server::MakeServerConfig(
        values, url.empty() ? std::string(Store::kDefaultUrl) : url);
    if (!c.ok()) return fail(c.status());
    // For /metrics' sqlq_build_info; a URL of no engine fails to open below.
    c->version = SQLQ_VERSION;
    if (auto engine = engines::EngineName(c->db); engine.ok()) {
      c->engine = *engine;
    }
    exit_code = server::RunServer(
        *c, [](const Status& s) { return wire::ExitCode(s.code()); });
  });
}

void AddTokenCommands(CLI::App& app, std::function<bool()> json,
                      int& exit_code) {
  auto* token = app.add_subcommand(
      "token", "Make bearer tokens and their hashes for a token file");
  token->require_subcommand(1);
  auto print = [json](const std::string& tok, const std::string& hash) {
    if (json()) {
      nlohmann::ordered_json o;
      if (!tok.empty()) o["token"] = tok;
      o["sha256"] = hash;
      std::cout << o.dump() << "\n";
      return;
    }
    if (!tok.empty()) std::cout << "token: " << tok << "\n";
    // The first word of a token file's line (docs/server.md).
    std::cout << (tok.empty() ? "" : "line:  ") << "sha256:" << hash << "\n";
  };
  token
      ->add_subcommand("new",
                       "Print a new random token, and 'sha256:HASH' to put in "
                       "the token file in its place")
      ->callback([print, &exit_code] {
        auto t = server::NewToken();
        if (!t.ok()) {
          std::cerr << "sqlq token new: " << t.status().message() << "\n";
          exit_code = wire::ExitCode(t.status().code());
          return;
        }
        print(*t, server::TokenHashHex(*t));
      });
  token
      ->add_subcommand("hash",
                       "Read a token from stdin (one line) and print "
                       "'sha256:HASH', its line's first word in a token file")
      ->callback([print, &exit_code] {
        std::string line;
        std::getline(std::cin, line);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (Status s = server::CheckToken(line); !s.ok()) {
          std::cerr << "sqlq token hash: " << s.message() << "\n";
          exit_code = wire::kExitUsage;
          return;
        }
        print("", server::TokenHashHex(line));
      });
}

}  // namespace sqlq::cli
