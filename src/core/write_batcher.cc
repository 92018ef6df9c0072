#include "core/write_batcher.h"

#include <algorithm>
#include <vector>

namespace sqlq::core {

WriteBatcher::WriteBatcher(Engine& engine, std::size_t max_group,
                           int max_leaders)
    : engine_(engine),
      max_group_(max_group),
      max_leaders_(std::max(1, max_leaders)) {}

Status WriteBatcher::Run(const std::function<Status(Conn&)>& op) {
  Writer self;
  self.op = &op;
  std::unique_lock<std::mutex> lock(mu_);
  queue_.push_back(&self);
  if (leaders_ > 0 && queue_.size() >= expected_) arrivals_.notify_one();
  // Lead when at the front of the queue and a leader's place is free;
  // otherwise wait until a leader took us into its group and answered.
  while (!self.done && (leaders_ >= max_leaders_ || queue_.empty() ||
                        queue_.front() != &self)) {
    self.cv.wait(lock);
  }
  if (self.done) return std::move(self.status);

  // Leader. After our own group, keep leading while callers are queued (up
  // to kMaxRounds groups): handing over to a sleeping thread costs a context
  // switch per commit, which on small machines is a large part of a commit.
  constexpr int kMaxRounds = 4;
  ++leaders_;
  peak_leaders_ = std::max(peak_leaders_, leaders_);
  for (int round = 0; round < kMaxRounds && !queue_.empty(); ++round) {
    // Commit delay: when the last group showed that more callers are active
    // than are queued now (those just answered are about to come back),
    // wait a moment for them, so that one commit serves them all instead of
    // two half-full ones. Bounded by kCommitDelay; a wait that times out
    // lowers the estimate, so a caller alone is never delayed twice.
    // Only with a single leader: with several, a caller that arrives while
    // a place is free leads a group of its own at once.
    if (max_leaders_ == 1 && queue_.size() < expected_ &&
        !arrivals_.wait_for(lock, kCommitDelay,
                            [&] { return queue_.size() >= expected_; })) {
      expected_ = queue_.size();
    }
    // Take the group waiting now, then run it unlocked so that new callers
    // can queue up for the next group meanwhile.
    std::vector<Writer*> group;
    while (!queue_.empty() && group.size() < max_group_) {
      group.push_back(queue_.front());
      queue_.pop_front();
    }
    // Whoever is left (more than max_group) may lead beside us.
    if (!queue_.empty() && leaders_ < max_leaders_) {
      queue_.front()->cv.notify_one();
    }
    lock.unlock();
    RunGroup(group);
    lock.lock();
    ++transactions_;
    operations_ += group.size();
    for (Writer* w : group) {
      w->done = true;
      if (w != &self) w->cv.notify_one();
    }
    // Callers active now: the group just answered plus those queued.
    expected_ = std::min(max_group_, group.size() + queue_.size());
  }
  --leaders_;
  if (!queue_.empty()) queue_.front()->cv.notify_one();
  return std::move(self.status);
}

void WriteBatcher::RunGroup(const std::vector<Writer*>& group) {
  Status commit = engine_.Write([&](Conn& conn) -> Status {
    for (Writer* w : group) {
      w->status = (*w->op)(conn);
      if (!w->status.ok() && !IsCleanFailure(w->status)) return w->status;
    }
    return Status::Ok();
  });
  if (!commit.ok()) {
    // Nothing of the group is stored: whoever succeeded (or never ran)
    // gets the error; a clean failure keeps its own reason.
    for (Writer* w : group) {
      if (w->status.ok()) w->status = commit;
    }
  }
}

std::size_t WriteBatcher::TEST_transactions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return transactions_;
}

int WriteBatcher::TEST_peak_leaders() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_leaders_;
}

std::size_t WriteBatcher::TEST_operations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return operations_;
}

}  // namespace sqlq::core
