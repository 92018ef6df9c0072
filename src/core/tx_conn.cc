#include "core/tx_conn.h"

#include <algorithm>

namespace sqlq::core {

void TxConn::ResetTxState() {
  retry_tx = false;
  lost_at_begin = false;
  tx_error.reset();
  tx_now_us.reset();
  known_queues.clear();
  flags_read.clear();
  dependent_queues.clear();
  pending_counters.clear();
}

std::chrono::milliseconds FailoverWaitFor(std::int64_t ms, bool several_hosts) {
  if (ms >= 0) return std::chrono::milliseconds(ms);
  return several_hosts ? std::chrono::milliseconds(15'000)
                       : std::chrono::milliseconds(0);
}

bool FailoverWait::Again(const Status& s) {
  if (s.code() != Code::kUnavailable || policy_.failover_wait.count() <= 0) {
    return false;
  }
  const auto now = std::chrono::steady_clock::now();
  if (!deadline_) {
    deadline_ = now + policy_.failover_wait;
    step_ = policy_.failover_step;
  }
  if (now >= *deadline_) return false;
  std::this_thread::sleep_for(
      std::min<std::chrono::steady_clock::duration>(step_, *deadline_ - now));
  step_ = std::min(step_ * 2, std::chrono::milliseconds(1000));
  return true;
}

Status WithFailoverWait(const RetryPolicy& policy,
                        const std::function<Status()>& once) {
  FailoverWait failover(policy);
  Status s = once();
  while (!s.ok() && failover.Again(s)) s = once();
  return s;
}

std::chrono::microseconds RetryPolicy::Delay(int attempt,
                                             std::uint64_t random) const {
  const int shift = std::clamp(attempt, 0, max_doublings);
  const auto spread =
      static_cast<std::uint64_t>(std::max<std::int64_t>(1, jitter.count()));
  return base * (std::int64_t{1} << shift) +
         std::chrono::microseconds(static_cast<std::int64_t>(random % spread));
}

}  // namespace sqlq::core
