// Retry delays after a failed attempt (nack without an explicit delay).

#ifndef SQLQ_CORE_BACKOFF_H_
#define SQLQ_CORE_BACKOFF_H_

#include <cstdint>

#include "sqlq/queue.h"

namespace sqlq::core {

// The delay before attempt `attempt + 1`, given that attempt `attempt`
// (1-based) failed: base * 2^(attempt-1), capped at `max`, then "equal
// jitter": uniformly drawn from [d/2, d], so retries of a burst of failures
// spread out but never come back sooner than half the nominal delay.
// `unit` in [0, 1) is the random draw; tests pass fixed values.
Duration BackoffDelay(Duration base, Duration max, int attempt, double unit);
// Same, drawing `unit` from a per-thread generator.
Duration BackoffDelay(Duration base, Duration max, int attempt);

}  // namespace sqlq::core

#endif  // SQLQ_CORE_BACKOFF_H_
