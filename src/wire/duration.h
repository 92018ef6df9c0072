// Durations as people type them on the command line and in bench options.

#ifndef SQLQ_WIRE_DURATION_H_
#define SQLQ_WIRE_DURATION_H_

#include <string_view>

#include "sqlq/queue.h"
#include "sqlq/status.h"

namespace sqlq::wire {

// "250ms", "30s", "5m", "2h", "1d", or a plain number of seconds ("30",
// "0.5"). Negative values, unknown units and values past 100 years are
// kInvalidArgument; finer limits (a lease of at most 12 h...) are the
// library's.
Result<Duration> ParseDuration(std::string_view text);

}  // namespace sqlq::wire

#endif  // SQLQ_WIRE_DURATION_H_
