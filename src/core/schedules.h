// Schedules, written once for every engine: which ticks a pass sends, what
// each message carries, and the thread that runs passes
// (StoreOptions::run_schedules). The engines store the rows
// (Engine::CreateSchedule ... AdvanceSchedule).

#ifndef SQLQ_CORE_SCHEDULES_H_
#define SQLQ_CORE_SCHEDULES_H_

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "core/cron.h"
#include "sqlq/schedule.h"

namespace sqlq::core {

class StoreImpl;

// The ticks of a schedule due at `now`, from its next tick on.
struct DueTicks {
  std::vector<Timestamp> send;  // oldest first
  std::int64_t skipped = 0;     // missed and not sent (catch_up)
  // The tick to send next: the first after now (or after the last one
  // walked, when a pass stopped at kMaxWalk); nullopt when none comes.
  std::optional<Timestamp> next;
};
// At most this many ticks are walked in one pass of one schedule.
inline constexpr int kMaxWalk = 100000;

// The due ticks of `info` at `now`: those at most kMisfireGrace late are
// on time and sent; of the older (missed) ones, the latest catch_up are
// sent too and the others skipped.
DueTicks TicksDue(const Cron& cron, const Zone& zone, const ScheduleInfo& info,
                  Timestamp now);

// The message a schedule sends for `tick`: its message with the headers
// sqlq-schedule and sqlq-tick, and the tick's dedup key.
Message TickMessage(const ScheduleInfo& info, Timestamp tick);

// Checks a schedule's name and options: the cron, the zone (named; not
// "localtime"), the message
// (a tick's message must be a valid send), catch_up. Returns its first
// tick after `now`.
Result<std::optional<Timestamp>> ValidateSchedule(std::string_view name,
                                                  const ScheduleOptions& o,
                                                  Timestamp now);

// One scheduler pass of `store` as `holder` (Store::RunSchedules).
Result<ScheduleRun> RunSchedulesOnce(StoreImpl& store,
                                     const std::string& holder);

// Who a store is, as the holder of the scheduler lease: host, process id
// and a random part.
std::string NewSchedulerHolder();

// One pass of the scheduler thread (StoreOptions::run_schedules), and how
// long until the next: a second, or less when a tick is due sooner.
std::chrono::steady_clock::duration SchedulerPass(StoreImpl& store);

}  // namespace sqlq::core

#endif  // SQLQ_CORE_SCHEDULES_H_
