#include "core/tx_conn.h"

#include <algorithm>

namespace sqlq::core {

void TxConn::ResetTxState() {
  retry_tx = false;
  lost_at_begin = false;
  tx_error.reset();
  tx_now_us.reset();
  known_queues.clear();
  pending_counters.clear();
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
