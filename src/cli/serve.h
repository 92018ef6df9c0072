// The `sqlq serve` command: flags, SQLQ_* environment and an optional config
// file, turned into a server::ServerConfig (docs/server.md).

#ifndef SQLQ_CLI_SERVE_H_
#define SQLQ_CLI_SERVE_H_

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace sqlq::cli {

// `db` returns the global --db (or $SQLQ_DB), empty when neither was given;
// `exit_code` receives the server's exit code.
void AddServeCommand(CLI::App& app, std::function<std::string()> db,
                     int& exit_code);

// `sqlq token new` (a random token and the line of its hash for a token
// file) and `sqlq token hash` (the hash of a token read from stdin). `json`
// returns the global --json.
void AddTokenCommands(CLI::App& app, std::function<bool()> json,
                      int& exit_code);

}  // namespace sqlq::cli

#endif  // SQLQ_CLI_SERVE_H_
