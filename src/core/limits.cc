#include "core/limits.h"

#include <algorithm>
#include <vector>

#include "core/rows.h"

namespace sqlq::core {

namespace {

constexpr std::int64_t kOne = static_cast<std::int64_t>(kRateScale);

// Microseconds until the bucket holds one whole claim again.
std::int64_t UntilNextToken(const ClaimParams& p, std::int64_t tokens_u) {
  const std::int64_t missing = kOne - tokens_u % kOne;
  return (missing * kOne + p.rate_u - 1) / p.rate_u;
}

}  // namespace

std::int64_t BucketSize(const ClaimParams& p) {
  if (p.rate_burst != 0) return p.rate_burst * kOne;
  const std::int64_t second = (p.rate_u + kOne - 1) / kOne;
  return std::max<std::int64_t>(1, second) * kOne;
}

std::int64_t Refill(const ClaimParams& p, const LimitState& state) {
  const std::int64_t size = BucketSize(p);
  if (state.at_us == 0) return size;
  const std::int64_t elapsed =
      std::max<std::int64_t>(0, state.now_us - state.at_us);
  // Past the time it takes to fill, full (and no product that overflows:
  // size and rate are at most 10^12, so elapsed * rate stays below 10^19).
  const std::int64_t fill_us = (size * kOne + p.rate_u - 1) / p.rate_u;
  if (elapsed >= fill_us) return size;
  const std::int64_t tokens = state.tokens_u + elapsed * p.rate_u / kOne;
  // A bucket made smaller (Alter) holds at most its new size.
  return std::min(tokens, size);
}

Result<ClaimOutcome> ClaimLimited(MessageOps& engine, Conn& conn,
                                  ClaimParams p) {
  const bool count = p.max_leased != 0;
  auto locked =
      engine.LockLimits(conn, {.queue_id = p.queue_id, .count_leased = count});
  if (!locked.ok()) return locked.status();
  LimitState state = *locked;
  const int want = p.max;
  int allow = want;
  std::string_view by;
  if (p.rate_u != 0) {
    state.tokens_u = Refill(p, state);
    state.at_us = state.now_us;
    const std::int64_t whole = state.tokens_u / kOne;
    if (whole < allow) {
      allow = static_cast<int>(whole);
      by = "rate_limit";
    }
  }
  if (count) {
    const std::int64_t free =
        std::max<std::int64_t>(0, p.max_leased - state.leased);
    if (free < allow) {
      allow = static_cast<int>(free);
      by = "max_leased";
    }
  }
  ClaimOutcome out;
  if (allow > 0) {
    p.max = allow;
    auto r = engine.Claim(conn, p);
    if (!r.ok()) return r.status();
    out = std::move(*r);
  }
  const auto taken = static_cast<std::int64_t>(out.messages.size());
  if (p.rate_u != 0) state.tokens_u -= taken * kOne;
  std::vector<std::int64_t> ids;
  if (count) {
    ids.reserve(out.messages.size());
    for (const ClaimedMessage& m : out.messages) ids.push_back(m.id);
  }
  if (p.rate_u != 0 || !ids.empty()) {
    Status s = engine.SaveLimits(conn, {.queue_id = p.queue_id,
                                        .state = state,
                                        .bucket = p.rate_u != 0,
                                        .leased = ids,
                                        .token = TokenBits(p.token)});
    if (!s.ok()) return s;
  }
  // Held back: the limit cut the claim, which took all it was allowed.
  if (!by.empty() && taken == allow) {
    out.limited_by = by;
    std::int64_t wait_us = 0;
    if (by == "rate_limit") {
      wait_us = UntilNextToken(p, state.tokens_u);
    } else {
      // The first of the counted leases and of the ones just taken to end.
      std::int64_t end = state.first_end_us;
      const std::int64_t ours = state.now_us + p.lease.count();
      if (taken > 0 && (end == 0 || ours < end)) end = ours;
      wait_us = std::max<std::int64_t>(0, end - state.now_us);
    }
    out.retry_after = Micros(wait_us);
  }
  return out;
}

}  // namespace sqlq::core
