// Cron expressions and their ticks in a time zone, for schedules
// (docs/semantics.md, "Schedules").
//
// An expression is five fields, minute hour day-of-month month day-of-week,
// or six with a leading seconds field; or one of @yearly (@annually),
// @monthly, @weekly, @daily (@midnight), @hourly. A field is `*`, a value,
// a range `a-b`, any of those with a step `/n` (`a/n` runs from a to the
// field's end), or a comma-separated list of them. Months and days of the
// week take English names (JAN, mon; any case); day of week 0 and 7 are
// Sunday. When both day fields are restricted, a day matches either (as
// every cron does): `0 0 1 * MON` is the 1st and every Monday.
//
// Ticks are the local times in the zone that the expression matches.
// Daylight saving time, as cron users expect:
//  - a local time the clock skips (spring forward) ticks once, at the
//    moment of the jump (several skipped times of one jump make one tick);
//  - a local time that happens twice (fall back) ticks once, the first time;
//    except in schedules whose hour field is `*` (they run every hour), which
//    tick at both, so that they keep their pace through the repeated hour.

#ifndef SQLQ_CORE_CRON_H_
#define SQLQ_CORE_CRON_H_

#include <bitset>
#include <optional>
#include <string>
#include <string_view>

#include "sqlq/queue.h"
#include "sqlq/status.h"

namespace sqlq::core {

class Cron {
 public:
  // kInvalidArgument naming the field and what is wrong with it.
  static Result<Cron> Parse(std::string_view text);

  // The first tick strictly after `after` in `zone` (a zone name from the
  // system's tz database: "UTC", "Europe/Berlin"); nullopt when none comes
  // within five years (February 30th).
  std::optional<Timestamp> Next(Timestamp after, const class Zone& zone) const;

 private:
  std::bitset<60> seconds_, minutes_;
  std::bitset<24> hours_;
  std::bitset<32> days_;     // 1..31
  std::bitset<13> months_;   // 1..12
  std::bitset<7> weekdays_;  // 0 Sunday .. 6 Saturday
  bool days_star_ = true, weekdays_star_ = true, hours_star_ = true;
  bool has_seconds_ = false;

  friend class CronTest;
};

// A time zone of the system's tz database.
class Zone {
 public:
  // kInvalidArgument for a name the tz database does not know.
  static Result<Zone> Load(const std::string& name);
  const std::string& name() const { return name_; }

 private:
  friend class Cron;
  struct Impl;
  std::string name_;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace sqlq::core

#endif  // SQLQ_CORE_CRON_H_
