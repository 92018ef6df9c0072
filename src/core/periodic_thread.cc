#include "core/periodic_thread.h"

#include <utility>

namespace sqlq::core {

PeriodicThread::PeriodicThread(Pass pass,
                               std::chrono::steady_clock::duration first)
    : pass_(std::move(pass)), thread_([this, first] {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, first, [this] { return stop_; });
        while (!stop_) {
          lock.unlock();
          const auto wait = pass_();
          lock.lock();
          cv_.wait_for(lock, wait, [this] { return stop_; });
        }
      }) {}

PeriodicThread::~PeriodicThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

}  // namespace sqlq::core
