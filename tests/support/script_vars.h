// The variables a test-server script prints for `eval`
// (scripts/pg-test-server.sh, scripts/mariadb-test-server.sh): lines of
// `export KEY='value' ...`, values quoted with '...' and holding no quote.

#ifndef SQLQ_TESTS_SUPPORT_SCRIPT_VARS_H_
#define SQLQ_TESTS_SUPPORT_SCRIPT_VARS_H_

#include <stdio.h>

#include <map>
#include <string>

namespace sqlq::test {

// Runs `command` and returns the KEY='value' pairs it printed; empty when
// it could not run or failed.
inline std::map<std::string, std::string> ScriptVars(
    const std::string& command) {
  std::map<std::string, std::string> vars;
  FILE* out = popen(command.c_str(), "r");
  if (out == nullptr) return vars;
  std::string text;
  char buf[4096];
  while (fgets(buf, sizeof buf, out) != nullptr) text += buf;
  if (pclose(out) != 0) return {};
  std::size_t pos = 0;
  while ((pos = text.find("='", pos)) != std::string::npos) {
    std::size_t key_start = text.find_last_of(" \n", pos);
    key_start = key_start == std::string::npos ? 0 : key_start + 1;
    const std::size_t end = text.find('\'', pos + 2);
    if (end == std::string::npos) break;
    vars[text.substr(key_start, pos - key_start)] =
        text.substr(pos + 2, end - pos - 2);
    pos = end + 1;
  }
  return vars;
}

}  // namespace sqlq::test

#endif  // SQLQ_TESTS_SUPPORT_SCRIPT_VARS_H_
