// The settings of `sqlq serve` (docs/server.md): their names, environment
// variables, defaults and checks, the config file format, and the
// conversion of the settings' text into a ServerConfig. The CLI only wires
// flags and environment to them (cli/serve.cc).

#ifndef SQLQ_SERVER_CONFIG_H_
#define SQLQ_SERVER_CONFIG_H_

#include <map>
#include <span>
#include <string>
#include <string_view>

#include "server/server.h"
#include "sqlq/status.h"

namespace sqlq::server {

struct SettingSpec {
  const char* name;  // the flag without "--", and the config file key
  const char* env;   // the environment variable
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
