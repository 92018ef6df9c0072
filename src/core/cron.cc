#include "core/cron.h"

#include <cctz/civil_time.h>
#include <cctz/time_zone.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <chrono>
#include <utility>
#include <vector>

namespace sqlq::core {

struct Zone::Impl {
  cctz::time_zone tz;
};

Result<Zone> Zone::Load(const std::string& name) {
  // The tz database's names only: no path, so nothing outside it is read.
  const bool plain =
      !name.empty() && name.size() <= 64 && name.front() != '/' &&
      name.find("..") == std::string::npos &&
      std::all_of(name.begin(), name.end(), [](unsigned char c) {
        return std::isalnum(c) || c == '/' || c == '_' || c == '-' || c == '+';
      });
  auto impl = std::make_shared<Impl>();
  if (!plain || !cctz::load_time_zone(name, &impl->tz)) {
    return Status::InvalidArgument(fmt::format(
        "unknown time zone '{}' (a name of the tz database, such as UTC or "
        "Europe/Berlin)",
        name.substr(0, 80)));
  }
  Zone z;
  z.name_ = name;
  z.impl_ = std::move(impl);
  return z;
}

namespace {

struct FieldSpec {
  const char* name;
  int min, max;
  // Names for values min, min+1, ... (months from 1, weekdays from 0).
  const std::array<const char*, 12>* names;
};

constexpr std::array<const char*, 12> kMonths = {"jan", "feb", "mar", "apr",
                                                 "may", "jun", "jul", "aug",
                                                 "sep", "oct", "nov", "dec"};
constexpr std::array<const char*, 12> kWeekdays = {
    "sun", "mon", "tue", "wed", "thu", "fri", "sat", "", "", "", "", ""};

Status FieldError(const FieldSpec& f, std::string_view text,
                  std::string_view why) {
  return Status::InvalidArgument(
      fmt::format("cron {} field '{}': {}", f.name, text.substr(0, 40), why));
}

// A value of the field: a number or a name.
Result<int> Value(const FieldSpec& f, std::string_view whole,
                  std::string_view v) {
  if (v.empty()) return FieldError(f, whole, "a value is missing");
  if (f.names != nullptr && std::isalpha(static_cast<unsigned char>(v[0]))) {
    std::string lower;
    for (char c : v) {
      lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    for (std::size_t i = 0; i < f.names->size(); ++i) {
      if ((*f.names)[i][0] != '\0' && lower == (*f.names)[i]) {
        return f.min + static_cast<int>(i);
      }
    }
    return FieldError(f, whole, fmt::format("unknown name '{}'", v));
  }
  int x = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || end != v.data() + v.size()) {
    return FieldError(f, whole, fmt::format("'{}' is not a number", v));
  }
  if (x < f.min || x > f.max) {
    return FieldError(f, whole,
                      fmt::format("{} is out of range {}-{}", x, f.min, f.max));
  }
  return x;
}

// Sets the bits of `text` (one field) in `bits`, indexed by value; true in
// `star` when the field is `*` (or `?`) without a step.
template <std::size_t N>
Status ParseField(const FieldSpec& f, std::string_view text,
                  std::bitset<N>& bits, bool& star) {
  star = text == "*" || text == "?";
  std::size_t at = 0;
  for (;;) {
    const std::size_t comma = text.find(',', at);
    std::string_view part =
        text.substr(at, comma == std::string_view::npos ? std::string_view::npos
                                                        : comma - at);
    int step = 1;
    const std::size_t slash = part.find('/');
    std::string_view range = part.substr(0, slash);
    if (slash != std::string_view::npos) {
      std::string_view s = part.substr(slash + 1);
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), step);
      if (s.empty() || ec != std::errc() || end != s.data() + s.size() ||
          step < 1 || step > f.max) {
        return FieldError(f, text, fmt::format("bad step '{}'", s));
      }
    }
    int lo = f.min, hi = f.max;
    if (range != "*" && range != "?") {
      const std::size_t dash = range.find('-');
      auto a = Value(f, text, range.substr(0, dash));
      if (!a.ok()) return a.status();
      lo = *a;
      if (dash != std::string_view::npos) {
        auto b = Value(f, text, range.substr(dash + 1));
        if (!b.ok()) return b.status();
        hi = *b;
        if (hi < lo) {
          return FieldError(f, text,
                            fmt::format("range {}-{} runs backwards", lo, hi));
        }
      } else if (slash == std::string_view::npos) {
        hi = lo;  // a single value; "a/n" runs to the end
      }
    }
    for (int v = lo; v <= hi; v += step) bits.set(static_cast<std::size_t>(v));
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  return Status::Ok();
}

std::vector<std::string_view> SplitFields(std::string_view text) {
  std::vector<std::string_view> out;
  std::size_t at = 0;
  while (at < text.size()) {
    while (at < text.size() &&
           std::isspace(static_cast<unsigned char>(text[at])))
      ++at;
    std::size_t end = at;
    while (end < text.size() &&
           !std::isspace(static_cast<unsigned char>(text[end])))
      ++end;
    if (end > at) out.push_back(text.substr(at, end - at));
    at = end;
  }
  return out;
}

}  // namespace

Result<Cron> Cron::Parse(std::string_view text) {
  if (text.size() > 256) {
    return Status::InvalidArgument("cron expression longer than 256 bytes");
  }
  std::string expanded(text);
  const std::pair<const char*, const char*> kMacros[] = {
      {"@yearly", "0 0 1 1 *"},  {"@annually", "0 0 1 1 *"},
      {"@monthly", "0 0 1 * *"}, {"@weekly", "0 0 * * 0"},
      {"@daily", "0 0 * * *"},   {"@midnight", "0 0 * * *"},
      {"@hourly", "0 * * * *"}};
  if (!text.empty() && text[0] == '@') {
    bool known = false;
    for (auto [macro, fields] : kMacros) {
      if (text == macro) {
        expanded = fields;
        known = true;
      }
    }
    if (!known) {
      return Status::InvalidArgument(fmt::format(
          "unknown cron macro '{}' (@yearly, @monthly, @weekly, @daily, "
          "@hourly)",
          text.substr(0, 40)));
    }
  }
  std::vector<std::string_view> fields = SplitFields(expanded);
  if (fields.size() != 5 && fields.size() != 6) {
    return Status::InvalidArgument(fmt::format(
        "cron expression '{}' has {} fields; it takes 5 (minute hour "
        "day-of-month month day-of-week) or 6 (seconds first)",
        text.substr(0, 80), fields.size()));
  }
  Cron c;
  c.has_seconds_ = fields.size() == 6;
  if (!c.has_seconds_) fields.insert(fields.begin(), "0");
  static const FieldSpec kSeconds{"seconds", 0, 59, nullptr};
  static const FieldSpec kMinute{"minute", 0, 59, nullptr};
  static const FieldSpec kHour{"hour", 0, 23, nullptr};
  static const FieldSpec kDay{"day-of-month", 1, 31, nullptr};
  static const FieldSpec kMonth{"month", 1, 12, &kMonths};
  static const FieldSpec kWeekday{"day-of-week", 0, 7, &kWeekdays};
  bool star = false;
  Status s = ParseField(kSeconds, fields[0], c.seconds_, star);
  if (s.ok()) s = ParseField(kMinute, fields[1], c.minutes_, star);
  if (s.ok()) s = ParseField(kHour, fields[2], c.hours_, c.hours_star_);
  if (s.ok()) s = ParseField(kDay, fields[3], c.days_, c.days_star_);
  if (s.ok()) s = ParseField(kMonth, fields[4], c.months_, star);
  std::bitset<8> weekdays;
  if (s.ok()) s = ParseField(kWeekday, fields[5], weekdays, c.weekdays_star_);
  if (!s.ok()) return s;
  for (std::size_t d = 0; d < 7; ++d) c.weekdays_[d] = weekdays[d];
  if (weekdays[7]) c.weekdays_[0] = true;  // 7 is Sunday too
  return c;
}

namespace {

using Seconds =
    std::chrono::time_point<std::chrono::system_clock, std::chrono::seconds>;

int WeekdayNumber(cctz::weekday w) {
  switch (w) {
    case cctz::weekday::sunday:
      return 0;
    case cctz::weekday::monday:
      return 1;
    case cctz::weekday::tuesday:
      return 2;
    case cctz::weekday::wednesday:
      return 3;
    case cctz::weekday::thursday:
      return 4;
    case cctz::weekday::friday:
      return 5;
    case cctz::weekday::saturday:
      return 6;
  }
  return 0;
}

}  // namespace

std::optional<Timestamp> Cron::Next(Timestamp after, const Zone& zone) const {
  const cctz::time_zone& tz = zone.impl_->tz;
  const auto day_matches = [&](const cctz::civil_day& d) {
    const bool dom = days_[static_cast<std::size_t>(d.day())];
    const bool dow = weekdays_[static_cast<std::size_t>(
        WeekdayNumber(cctz::get_weekday(d)))];
    if (!days_star_ && !weekdays_star_) return dom || dow;
    if (!days_star_) return dom;
    if (!weekdays_star_) return dow;
    return true;
  };
  // The first civil second at or after `c` that the fields match.
  const auto next_match =
      [&](cctz::civil_second c) -> std::optional<cctz::civil_second> {
    const auto last_year = c.year() + 5;
    while (c.year() <= last_year) {
      if (!months_[static_cast<std::size_t>(c.month())]) {
        c = cctz::civil_second(cctz::civil_month(c) + 1);
      } else if (!day_matches(cctz::civil_day(c))) {
        c = cctz::civil_second(cctz::civil_day(c) + 1);
      } else if (!hours_[static_cast<std::size_t>(c.hour())]) {
        c = cctz::civil_second(cctz::civil_hour(c) + 1);
      } else if (!minutes_[static_cast<std::size_t>(c.minute())]) {
        c = cctz::civil_second(cctz::civil_minute(c) + 1);
      } else if (!seconds_[static_cast<std::size_t>(c.second())]) {
        c += 1;
      } else {
        return c;
      }
    }
    return std::nullopt;
  };
  const Seconds after_s = std::chrono::floor<std::chrono::seconds>(after);
  // Local times map to instants in order, except around an offset change:
  // a repeated local time's second instant comes after later local times'
  // first ones. Near one, look from three hours back (more than any
  // zone's change) and keep the earliest instant.
  constexpr auto kShift = std::chrono::hours(3);
  cctz::time_zone::civil_transition change;
  const bool near = tz.next_transition(after_s - kShift, &change) &&
                    tz.lookup(change.from).trans <= after_s + kShift;
  cctz::civil_second c = cctz::convert(after_s, tz);
  if (near) c -= std::chrono::seconds(kShift).count();
  std::optional<Seconds> best;
  for (int guard = 0; guard < 200000; ++guard) {
    auto m = next_match(c);
    if (!m) break;
    if (best &&
        *m > cctz::convert(*best, tz) + std::chrono::seconds(kShift).count()) {
      break;
    }
    const auto look = tz.lookup(*m);
    std::array<Seconds, 2> at = {look.pre, look.pre};
    int n = 1;
    if (look.kind == cctz::time_zone::civil_lookup::SKIPPED) {
      at[0] = look.trans;
    } else if (look.kind == cctz::time_zone::civil_lookup::REPEATED &&
               hours_star_) {
      at[1] = look.post;
      n = 2;
    }
    for (int i = 0; i < n; ++i) {
      if (at[static_cast<std::size_t>(i)] > after &&
          (!best || at[static_cast<std::size_t>(i)] < *best)) {
        best = at[static_cast<std::size_t>(i)];
      }
    }
    if (best && !near) break;
    c = *m + 1;
  }
  if (!best) return std::nullopt;
  return std::chrono::time_point_cast<std::chrono::microseconds>(*best);
}

}  // namespace sqlq::core
