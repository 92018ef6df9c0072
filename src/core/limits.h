// The limits of a queue's claims (QueueOptions::max_leased, rate_limit),
// written once for every engine: the engines store the state
// (Engine::LockLimits, SaveLimits), this decides what a claim may take.

#ifndef SQLQ_CORE_LIMITS_H_
#define SQLQ_CORE_LIMITS_H_

#include "core/engine.h"

namespace sqlq::core {

inline bool Limited(const ClaimParams& p) {
  return p.max_leased != 0 || p.rate_u != 0;
}

// The rate bucket's size, claims times 10^6: rate_burst, else one second's
// worth of the rate (at least one claim).
std::int64_t BucketSize(const ClaimParams& p);

// The bucket of `state` filled up to `now_us` at the rate of `p`.
std::int64_t Refill(const ClaimParams& p, const LimitState& state);

// Claims `p` within the queue's limits: locks the queue's limit state (one
// limited claim of a queue at a time, across processes), takes what the
// bucket and max_leased allow, claims that (Engine::Claim) and records
// it. When a limit held the claim back, ClaimOutcome::limited_by says which
// and retry_after when more becomes claimable.
Result<ClaimOutcome> ClaimLimited(MessageOps& engine, Conn& conn,
                                  ClaimParams p);

}  // namespace sqlq::core

#endif  // SQLQ_CORE_LIMITS_H_
