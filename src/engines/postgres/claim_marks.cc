#include "engines/postgres/claim_marks.h"

#include <algorithm>
#include <tuple>

namespace sqlq::engines::postgres {

bool Before(const ClaimKey& a, const ClaimKey& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
  return std::tie(a.ready_us, a.id) < std::tie(b.ready_us, b.id);
}

ClaimMarks::Plan ClaimMarks::Start(std::int64_t queue_id,
                                   SteadyClock::time_point now) {
  std::lock_guard lock(mu_);
  QueueMark& q = queues_[queue_id];
  if (q.mark && now < q.next_full) return {.from = q.mark, .epoch = epoch_};
  // A full read. Until it reports its cost, the other claims of this store
  // keep to the mark rather than all reading the whole queue at once.
  q.next_full =
      now + std::max<SteadyClock::duration>(q.interval, options_.min_rescan);
  return {.from = std::nullopt, .epoch = epoch_};
}

void ClaimMarks::Advance(std::int64_t queue_id, const Plan& plan,
                         std::optional<ClaimKey> last, std::int64_t now_us,
                         SteadyClock::duration cost,
                         SteadyClock::time_point at) {
  std::lock_guard lock(mu_);
  QueueMark& q = queues_[queue_id];
  if (!plan.from) {
    q.interval = std::clamp<SteadyClock::duration>(
        cost * kRescanFactor, options_.min_rescan, options_.max_rescan);
    q.next_full = at + q.interval;
  }
  if (!last || plan.epoch != epoch_) return;
  // Writes that read the clock less than the lag ago may not have
  // committed yet; their messages lie at or after their clock.
  ClaimKey key = *last;
  const ClaimKey cap{.priority = key.priority,
                     .ready_us = now_us - options_.lag.count(),
                     .id = 0};
  if (Before(cap, key)) key = cap;
  if (!q.mark || Before(*q.mark, key)) q.mark = key;
}

void ClaimMarks::Lower(std::int64_t queue_id, std::int64_t ready_us) {
  std::lock_guard lock(mu_);
  ++epoch_;
  auto it = queues_.find(queue_id);
  if (it == queues_.end() || !it->second.mark) return;
  ClaimKey& mark = *it->second.mark;
  // Messages of higher or lower priority than the mark's are read whole
  // anyway; only the mark's own priority is cut.
  if (ready_us < mark.ready_us) mark = {mark.priority, ready_us, 0};
}

void ClaimMarks::ReadyAt(std::int64_t queue_id, std::int32_t priority,
                         std::int64_t ready_us) {
  std::lock_guard lock(mu_);
  auto it = queues_.find(queue_id);
  if (it == queues_.end() || !it->second.mark) return;
  const ClaimKey& mark = *it->second.mark;
  if (priority == mark.priority && ready_us < mark.ready_us) {
    ++epoch_;
    it->second.mark.reset();
  }
}

void ClaimMarks::ForgetAll() {
  std::lock_guard lock(mu_);
  ++epoch_;
  for (auto& [id, q] : queues_) q.mark.reset();
}

std::optional<ClaimKey> ClaimMarks::TEST_mark(std::int64_t queue_id) {
  std::lock_guard lock(mu_);
  auto it = queues_.find(queue_id);
  if (it == queues_.end()) return std::nullopt;
  return it->second.mark;
}

}  // namespace sqlq::engines::postgres
