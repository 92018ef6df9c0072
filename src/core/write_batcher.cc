#include "core/write_batcher.h"

#include <vector>

namespace sqlq::core {

WriteBatcher::WriteBatcher(Engine& engine, std::size_t max_group)
    : engine_(engine), max_group_(max_group) {}

Status WriteBatcher::Run(const std::function<Status(Conn&)>& op) {
  Writer self;
  self.op = &op;
  std::unique_lock<std::mutex> lock(mu_);
  queue_.push_back(&self);
  while (!self.done && queue_.front() != &self) self.cv.wait(lock);
  if (self.done) return std::move(self.status);

  // Leader: take the group that is waiting now, then run it unlocked so that
  // new callers can queue up for the next group meanwhile.
  std::vector<Writer*> group;
  for (Writer* w : queue_) {
    if (group.size() == max_group_) break;
    group.push_back(w);
  }
  lock.unlock();

  Status commit;
  if (group.size() == 1) {
    commit = engine_.Write([&](Conn& conn) {
      self.status = op(conn);
      return self.status;
    });
    if (self.status.ok()) self.status = commit;
  } else {
    commit = engine_.Write([&](Conn& conn) -> Status {
      for (Writer* w : group) {
        Status s = engine_.Savepoint(conn);
        if (!s.ok()) return s;
        w->status = (*w->op)(conn);
        s = w->status.ok() ? engine_.ReleaseSavepoint(conn)
                           : engine_.RollbackToSavepoint(conn);
        if (!s.ok()) return s;
      }
      return Status::Ok();
    });
    if (!commit.ok()) {
      for (Writer* w : group) {
        if (w->status.ok()) w->status = commit;
      }
    }
  }

  lock.lock();
  ++transactions_;
  operations_ += group.size();
  for (Writer* w : group) {
    queue_.pop_front();
    if (w != &self) {
      w->done = true;
      w->cv.notify_one();
    }
  }
  if (!queue_.empty()) queue_.front()->cv.notify_one();
  return std::move(self.status);
}

std::size_t WriteBatcher::TEST_transactions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return transactions_;
}

std::size_t WriteBatcher::TEST_operations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return operations_;
}

}  // namespace sqlq::core
