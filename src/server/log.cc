#include "server/log.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>

namespace sqlq::server {

namespace {

std::atomic<LogLevel> g_min_level{LogLevel::kDebug};
std::atomic<LogFormat> g_format{LogFormat::kLogfmt};

constexpr std::string_view kLevels[] = {"debug", "info", "warn", "error"};

LogLevel LevelOf(std::string_view text) {
  for (std::size_t i = 0; i < std::size(kLevels); ++i) {
    if (text == kLevels[i]) return static_cast<LogLevel>(i);
  }
  return LogLevel::kError;  // an unknown level is never filtered out
}

// Whether a field's value is a number as JSON writes one: an integer, or
// a decimal fraction ("1.25").
bool IsJsonNumber(std::string_view v) {
  if (!v.empty() && v.front() == '-') v.remove_prefix(1);
  const std::string_view whole = v.substr(0, v.find('.'));
  if (whole.empty() || whole.size() > 15 ||
      (whole.size() > 1 && whole.front() == '0') ||
      whole.find_first_not_of("0123456789") != std::string_view::npos) {
    return false;
  }
  if (whole.size() == v.size()) return true;
  const std::string_view fraction = v.substr(whole.size() + 1);
  return !fraction.empty() && fraction.size() <= 9 &&
         fraction.find_first_not_of("0123456789") == std::string_view::npos;
}

// The logfmt fields as a JSON line's members: what Quote wrote, read back.
void AddFields(std::string_view fields, nlohmann::ordered_json& out) {
  std::size_t i = 0;
  while (i < fields.size()) {
    while (i < fields.size() && fields[i] == ' ') ++i;
    const std::size_t eq = fields.find('=', i);
    if (eq == std::string_view::npos) break;
    const std::string key(fields.substr(i, eq - i));
    std::string value;
    i = eq + 1;
    bool quoted = i < fields.size() && fields[i] == '"';
    if (quoted) {
      for (++i; i < fields.size() && fields[i] != '"'; ++i) {
        if (fields[i] == '\\' && i + 1 < fields.size()) ++i;
        value += fields[i];
      }
      ++i;  // the closing quote
    } else {
      const std::size_t end = std::min(fields.find(' ', i), fields.size());
      value = fields.substr(i, end - i);
      i = end;
    }
    if (!quoted && IsJsonNumber(value)) {
      if (value.find('.') == std::string::npos) {
        out[key] = std::stoll(value);
      } else {
        out[key] = std::stod(value);
      }
    } else {
      out[key] = std::move(value);
    }
  }
}

}  // namespace

Result<LogLevel> ParseLogLevel(std::string_view text) {
  for (std::size_t i = 0; i < std::size(kLevels); ++i) {
    if (text == kLevels[i]) return static_cast<LogLevel>(i);
  }
  return Status::InvalidArgument(fmt::format(
      "--log-level: '{}' is none of debug, info, warn, error", text));
}

Result<LogFormat> ParseLogFormat(std::string_view text) {
  if (text == "logfmt") return LogFormat::kLogfmt;
  if (text == "json") return LogFormat::kJson;
  return Status::InvalidArgument(
      fmt::format("--log-format: '{}' is neither logfmt nor json", text));
}

void SetLogOptions(LogLevel min_level, LogFormat format) {
  g_min_level = min_level;
  g_format = format;
}

bool LogEnabled(std::string_view level) {
  return LevelOf(level) >= g_min_level.load(std::memory_order_relaxed);
}

void Log(std::string_view level, std::string_view event,
         std::string_view fields) {
  if (!LogEnabled(level)) return;
  auto now = std::chrono::system_clock::now();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                now.time_since_epoch())
                .count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  const std::string ts =
      fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                  tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                  tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  std::string line;
  if (g_format.load(std::memory_order_relaxed) == LogFormat::kJson) {
    nlohmann::ordered_json j = {{"ts", ts}, {"level", level}, {"event", event}};
    AddFields(fields, j);
    // Text that is not UTF-8 (a client's bytes) is replaced, not thrown on.
    line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    line += '\n';
  } else {
    line = fmt::format("ts={} level={} event={}{}{}\n", ts, level, event,
                       fields.empty() ? "" : " ", fields);
  }
  // One write(2) per line, so that lines from threads never interleave.
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

std::string Quote(std::string_view v) {
  if (v.find_first_of(" \"=\n") == std::string_view::npos && !v.empty()) {
    return std::string(v);
  }
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}

}  // namespace sqlq::server
