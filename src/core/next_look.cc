#include "core/next_look.h"

#include <algorithm>

namespace sqlq::core {

bool BlockedByGroups(const QueueOptions& o) {
  return o.groups == GroupMode::kOrdered || o.group_limit.has_value();
}

SteadyTime NextLook(SteadyTime now, std::chrono::milliseconds poll_interval,
                    const LookReport& report) {
  const SteadyTime safety_net = now + poll_interval;
  const ClaimNote* claim = report.claim;
  if (claim != nullptr && report.paused) return safety_net;
  if (claim != nullptr && !claim->limited_by.empty()) {
    return std::min(safety_net, now + claim->retry_after);
  }
  if (!report.ready_in.has_value()) return safety_net;
  const std::chrono::microseconds in = *report.ready_in;
  if (in <= std::chrono::microseconds(0)) {
    if (claim == nullptr) return now;
    if (report.blocked_by_groups) return safety_net;
  }
  return std::min(safety_net, now + std::max(in, std::chrono::microseconds(0)) +
                                  kReadyMargin);
}

}  // namespace sqlq::core
