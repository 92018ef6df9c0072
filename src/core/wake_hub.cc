#include "core/wake_hub.h"

namespace sqlq::core {

void WakeHub::Register(Waiter& w, std::int64_t queue_id) {
  std::lock_guard<std::mutex> lock(mu_);
  w.queue_id = queue_id;
  w.signalled = false;
  auto& list = waiters_[queue_id];
  w.pos = list.insert(list.end(), &w);
  w.registered = true;
  ++count_;
}

void WakeHub::Unregister(Waiter& w) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!w.registered) return;
  auto it = waiters_.find(w.queue_id);
  it->second.erase(w.pos);
  w.registered = false;
  --count_;
  // A signal this waiter received but never slept on (it was looking when
  // the send came, and its look returned something else, or failed) stands
  // for a message someone should look at: hand it to the next waiter.
  if (w.signalled) {
    w.signalled = false;
    for (Waiter* other : it->second) {
      if (other->signalled) continue;
      Signal(*other);
      break;
    }
  }
  if (it->second.empty()) waiters_.erase(it);
}

void WakeHub::Signal(Waiter& w) {
  w.signalled = true;
  if (w.on_signal) {
    w.on_signal();
  } else {
    w.cv.notify_one();
  }
}

bool WakeHub::Consume(Waiter& w) {
  std::lock_guard<std::mutex> lock(mu_);
  bool was = w.signalled;
  w.signalled = false;
  if (was && w.registered) {
    auto& list = waiters_[w.queue_id];
    list.erase(w.pos);
    w.pos = list.insert(list.end(), &w);
  }
  return was;
}

bool WakeHub::Wait(Waiter& w, std::chrono::steady_clock::time_point until) {
  std::unique_lock<std::mutex> lock(mu_);
  w.sleeping = true;
  w.cv.wait_until(lock, until, [&] { return w.signalled; });
  w.sleeping = false;
  bool was = w.signalled;
  w.signalled = false;
  if (was && w.registered) {
    // Go to the back of the line so that other waiters get the next wake.
    auto& list = waiters_[w.queue_id];
    list.erase(w.pos);
    w.pos = list.insert(list.end(), &w);
  }
  return was;
}

void WakeHub::Notify(std::int64_t queue_id, std::int64_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = waiters_.find(queue_id);
  if (it == waiters_.end()) return;
  for (Waiter* w : it->second) {
    if (n <= 0) break;
    if (w->signalled) continue;
    Signal(*w);
    --n;
  }
}

void WakeHub::NotifyAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, list] : waiters_) {
    for (Waiter* w : list) {
      if (!w->signalled) Signal(*w);
    }
  }
}

std::size_t WakeHub::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return count_;
}

std::size_t WakeHub::asleep() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t n = 0;
  for (const auto& [queue_id, list] : waiters_) {
    for (const Waiter* w : list) {
      if (w->sleeping && !w->signalled) ++n;
    }
  }
  return n;
}

std::map<std::int64_t, std::int64_t> WakeHub::WaitingByQueue() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::int64_t, std::int64_t> out;
  for (const auto& [queue_id, list] : waiters_) {
    out[queue_id] = static_cast<std::int64_t>(list.size());
  }
  return out;
}

}  // namespace sqlq::core
