#include "wire/duration.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace sqlq::wire {

namespace {

struct Unit {
  std::string_view name;
  std::int64_t ms;
};
// Largest first; "" (a plain number) is seconds.
constexpr Unit kUnits[] = {
    {"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1}};

// The unit letters at the end of a typed duration ("" for a plain number).
std::string_view UnitOf(std::string_view text) {
  size_t split = text.size();
  while (split > 0 &&
         std::isalpha(static_cast<unsigned char>(text[split - 1]))) {
    --split;
  }
  return text.substr(split);
}

}  // namespace

Result<Duration> ParseDuration(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(
        fmt::format("invalid duration '{}': {} (examples: 500ms, 30s, 5m, "
                    "2h)",
                    text, why));
  };
  if (text.empty()) return bad("empty");
  std::string_view unit = UnitOf(text);
  std::string number(text.substr(0, text.size() - unit.size()));
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
  const std::string_view want = unit.empty() ? "s" : unit;
  double ms_per = 0;
  for (const Unit& u : kUnits) {
    if (u.name == want) ms_per = static_cast<double>(u.ms);
  }
  if (ms_per == 0) return bad(fmt::format("unknown unit '{}'", unit));
  double ms = value * ms_per;
  if (ms > 100.0 * 365 * 86400e3) return bad("too long");
  return Duration(static_cast<std::int64_t>(std::llround(ms)));
}

std::string FormatDuration(Duration d) {
  const std::int64_t ms = d.count();
  if (ms == 0) return "0";
  for (const Unit& u : kUnits) {
    if (ms % u.ms == 0) return fmt::format("{}{}", ms / u.ms, u.name);
  }
  return fmt::format("{}ms", ms);
}

std::string FormatDurationLike(Duration d, std::string_view typed) {
  const std::string plain = FormatDuration(d);
  std::string_view unit = UnitOf(typed);
  if (unit.empty()) unit = "s";
  for (const Unit& u : kUnits) {
    // Thousandths of the unit, when `d` is a whole number of them.
    const std::int64_t milli = d.count() * 1000;
    if (u.name != unit || d.count() == 0 || milli % u.ms != 0) continue;
    const std::int64_t n = milli / u.ms;
    std::string like = fmt::format("{}.{:03}", n / 1000, n % 1000);
    while (like.back() == '0') like.pop_back();
    if (like.back() == '.') like.pop_back();
    like += u.name;
    return like == plain ? like : fmt::format("{} ({})", like, plain);
  }
  return plain;
}

Status CheckDurationRange(std::string_view flag, std::string_view typed,
                          Duration value, Duration lo, Duration hi) {
  if (value >= lo && value <= hi) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "{} {} is {}: the range is {} to {}", flag, typed,
      value > hi ? "too long" : "too short", FormatDurationLike(lo, typed),
      FormatDurationLike(hi, typed)));
}

}  // namespace sqlq::wire
