// Durations as people type them on the command line and in bench options,
// and as the command line shows them back.

#ifndef SQLQ_WIRE_DURATION_H_
#define SQLQ_WIRE_DURATION_H_

#include <string>
#include <string_view>

#include "sqlq/queue.h"
#include "sqlq/status.h"

namespace sqlq::wire {

// "250ms", "30s", "5m", "2h", "1d", or a plain number of seconds ("30",
// "0.5"). Negative values, unknown units and values past 100 years are
// kInvalidArgument; finer limits (a lease of at most 12 h...) are the
// library's.
Result<Duration> ParseDuration(std::string_view text);

// `d` in the largest of the units ParseDuration reads that it is a whole
// number of: "500ms", "90s", "5m", "12h", "7d"; "0" for zero.
std::string FormatDuration(Duration d);

// `d` in the unit of `typed` (a duration as ParseDuration read it: "13h"
// gives hours, "46800" seconds), with up to three decimals, followed by
// FormatDuration's form where that differs: "12h" for "13h", "720m (12h)"
// for "780m", "0.5d (12h)" for "1d". As FormatDuration alone when `d` is
// no whole number of thousandths of that unit.
std::string FormatDurationLike(Duration d, std::string_view typed);

// kInvalidArgument, in the words and unit the user typed, when `value`
// (read from `typed`, given for `flag`) is outside [lo, hi]:
// "--lease 13h is out of range: 1ms to 12h".
Status CheckDurationRange(std::string_view flag, std::string_view typed,
                          Duration value, Duration lo, Duration hi);

}  // namespace sqlq::wire

#endif  // SQLQ_WIRE_DURATION_H_
