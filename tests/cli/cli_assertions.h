// Assertions over runs of the sqlq program, shared by the CLI test files:
// the exit codes of docs/cli.md, the one-JSON-object-per-line output, the
// one-line error contract, and RFC 3339 times.

#ifndef SQLQ_TESTS_CLI_CLI_ASSERTIONS_H_
#define SQLQ_TESTS_CLI_CLI_ASSERTIONS_H_

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tests/cli/cli_runner.h"

namespace sqlq::cli_test {

using json = nlohmann::json;

// Exit codes of the contract.
inline constexpr int kOk = 0;
inline constexpr int kUsage = 2;
inline constexpr int kNotFound = 3;
inline constexpr int kExists = 4;
inline constexpr int kStale = 5;
inline constexpr int kTooLarge = 6;
inline constexpr int kPermission = 7;
inline constexpr int kNotADatabase = 10;

inline std::string Show(const RunResult& r) {
  std::string s = "exit " + std::to_string(r.exit_code);
  if (r.signal != 0) s += " (signal " + std::to_string(r.signal) + ")";
  if (r.timed_out) s += " (timed out)";
  return s + "\n--- stdout:\n" + r.out + "--- stderr:\n" + r.err;
}

// Every line of `text` parsed as one JSON object; fails on a line that is
// not one, or on output that does not end with a newline.
inline ::testing::AssertionResult ParseLines(const std::string& text,
                                             std::vector<json>* out) {
  out->clear();
  if (text.empty()) return ::testing::AssertionSuccess();
  if (text.back() != '\n') {
    return ::testing::AssertionFailure()
           << "output does not end with a newline:\n"
           << text;
  }
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return ::testing::AssertionFailure()
             << "line is not one JSON object: '" << line << "'";
    }
    out->push_back(std::move(j));
  }
  return ::testing::AssertionSuccess();
}

// The failure contract: the exit code, nothing on stdout, and one line on
// stderr ("sqlq: ...") that mentions `mention`.
inline ::testing::AssertionResult FailsWith(const RunResult& r, int exit_code,
                                            std::string_view mention) {
  if (r.exit_code != exit_code) {
    return ::testing::AssertionFailure()
           << "expected exit " << exit_code << ", got " << Show(r);
  }
  if (!r.out.empty()) {
    return ::testing::AssertionFailure() << "stdout is not empty: " << Show(r);
  }
  if (r.err.rfind("sqlq: ", 0) != 0 || r.err.back() != '\n' ||
      r.err.find('\n') != r.err.size() - 1) {
    return ::testing::AssertionFailure()
           << "stderr is not one line 'sqlq: ...': " << Show(r);
  }
  if (r.err.find(mention) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "stderr does not mention '" << mention << "': " << Show(r);
  }
  return ::testing::AssertionSuccess();
}

// "2026-11-22T10:00:00.123456Z" as microseconds since the epoch.
inline std::int64_t ParseTimeUs(const std::string& text) {
  std::tm tm{};
  int usec = -1;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%6dZ", &tm.tm_year,
                  &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec,
                  &usec) != 7 ||
      text.size() != 27) {
    ADD_FAILURE() << "not an RFC 3339 UTC time with microseconds: " << text;
    return 0;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<std::int64_t>(timegm(&tm)) * 1000000 + usec;
}

inline std::int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace sqlq::cli_test

#endif  // SQLQ_TESTS_CLI_CLI_ASSERTIONS_H_
