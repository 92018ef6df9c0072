// Schedules: a message sent to a queue at each tick of a cron expression,
// in a time zone (docs/semantics.md, "Schedules"). Made, listed and changed
// through the Store (sqlq/store.h); sent by whichever process on the
// database holds the scheduler lease (Store::RunSchedules, or
// StoreOptions::run_schedules).

#ifndef SQLQ_SCHEDULE_H_
#define SQLQ_SCHEDULE_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "sqlq/queue.h"

namespace sqlq {

struct ScheduleOptions {
  // Five fields (minute hour day-of-month month day-of-week), six with
  // seconds first, or @yearly, @monthly, @weekly, @daily, @hourly.
  std::string cron;
  // A zone of the tz database by name: the cron's times are its local
  // times. "localtime" (each host's own zone) is refused by
  // CreateSchedule; one stored by an earlier sqlq keeps ticking in the
  // zone of the host that runs the scheduler.
  std::string time_zone = "UTC";
  // The queue the messages go to (it must exist when the schedule is made;
  // a tick that finds it gone is dropped and said in last_error).
  std::string queue;
  // The message each tick sends: payload, priority, headers and group.
  // Each gets the headers sqlq-schedule (the schedule's name) and sqlq-tick
  // (the tick's time, RFC 3339) and the dedup key
  // "sqlq-schedule:NAME:TICK_US". Its delay, run_at and dedup_key must be
  // unset.
  Message message;
  // Ticks missed (no scheduler ran within kMisfireGrace of them) that are
  // still sent when a scheduler runs again: the latest `catch_up` of them.
  // 0 (the default) skips every missed tick. 0..kMaxCatchUp.
  int catch_up = 0;
};
inline constexpr int kMaxCatchUp = 1000;
// A tick sent this late or less is on time; later, it was missed.
inline constexpr std::chrono::seconds kMisfireGrace{60};

struct ScheduleInfo {
  std::string name;
  ScheduleOptions options;
  bool paused = false;
  // The next tick to send; none when the cron never fires again.
  std::optional<Timestamp> next_tick;
  // The last tick sent, if any.
  std::optional<Timestamp> last_tick;
  std::int64_t sent = 0;     // messages sent
  std::int64_t skipped = 0;  // ticks missed and not sent
  // Why the last tick was not sent (the queue was dropped...); empty else.
  std::string last_error;
  Timestamp created_at;
};

// What one pass of the scheduler did (Store::RunSchedules).
struct ScheduleRun {
  // This store holds the scheduler lease (else it did nothing). No store
  // takes it while no schedule ticks (none, or all paused).
  bool leader = false;
  std::int64_t sent = 0;
  std::int64_t skipped = 0;
  // When the next tick of any schedule is due; none when no schedule
  // ticks.
  std::optional<Timestamp> next_tick;
};

}  // namespace sqlq

#endif  // SQLQ_SCHEDULE_H_
