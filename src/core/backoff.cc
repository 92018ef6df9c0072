#include "core/backoff.h"

#include <algorithm>
#include <random>

namespace sqlq::core {

Duration BackoffDelay(Duration base, Duration max, int attempt, double unit) {
  if (attempt < 1) attempt = 1;
  // Doubling overflows past 2^62 ms; the cap is reached long before.
  std::int64_t d = base.count();
  for (int i = 1; i < attempt && d < max.count(); ++i) d *= 2;
  d = std::min(d, static_cast<std::int64_t>(max.count()));
  std::int64_t half = d / 2;
  auto jitter =
      static_cast<std::int64_t>(unit * static_cast<double>(d - half + 1));
  return Duration(std::min(d, half + jitter));
}

Duration BackoffDelay(Duration base, Duration max, int attempt) {
  thread_local std::mt19937_64 gen(std::random_device{}());
  std::uniform_real_distribution<double> dist(0.0, 1.0);
  return BackoffDelay(base, max, attempt, dist(gen));
}

}  // namespace sqlq::core
