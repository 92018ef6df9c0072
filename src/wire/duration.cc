#include "wire/duration.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <string>

namespace sqlq::wire {

Result<Duration> ParseDuration(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(
        fmt::format("invalid duration '{}': {} (examples: 500ms, 30s, 5m, "
                    "2h)",
                    text, why));
  };
  if (text.empty()) return bad("empty");
  size_t split = text.size();
  while (split > 0 &&
         std::isalpha(static_cast<unsigned char>(text[split - 1]))) {
    --split;
  }
  std::string number(text.substr(0, split));
  std::string_view unit = text.substr(split);
  if (number.empty()) return bad("no number");
  if (number[0] == '-') return bad("must not be negative");
  for (char c : number) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.') {
      return bad("not a number");
    }
  }
  char* end = nullptr;
  double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value)) {
    return bad("not a number");
  }
  double ms_per;
  if (unit == "ms") {
    ms_per = 1;
  } else if (unit.empty() || unit == "s") {
    ms_per = 1000;
  } else if (unit == "m") {
    ms_per = 60e3;
  } else if (unit == "h") {
    ms_per = 3600e3;
  } else if (unit == "d") {
    ms_per = 86400e3;
  } else {
    return bad(fmt::format("unknown unit '{}'", unit));
  }
  double ms = value * ms_per;
  if (ms > 100.0 * 365 * 86400e3) return bad("too long");
  return Duration(static_cast<std::int64_t>(std::llround(ms)));
}

}  // namespace sqlq::wire
