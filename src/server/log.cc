#include "server/log.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <ctime>

namespace sqlq::server {

void Log(std::string_view level, std::string_view event,
         std::string_view fields) {
  auto now = std::chrono::system_clock::now();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                now.time_since_epoch())
                .count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  std::string line = fmt::format(
      "ts={:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z level={} event={}{}{}\n",
      tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
      tm.tm_sec, static_cast<int>(ms % 1000), level, event,
      fields.empty() ? "" : " ", fields);
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
