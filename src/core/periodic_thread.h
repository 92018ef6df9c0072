// A thread that runs a pass again and again until it is destroyed,
// sleeping between passes for as long as the pass says; destroying it
// cuts the sleep short (a pass under way finishes first) and joins.

#ifndef SQLQ_CORE_PERIODIC_THREAD_H_
#define SQLQ_CORE_PERIODIC_THREAD_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace sqlq::core {

class PeriodicThread {
 public:
  // Returns how long to sleep before the next pass.
  using Pass = std::function<std::chrono::steady_clock::duration()>;
  // Starts the thread; the first pass runs after `first` (at once by
  // default: a caller that just did a pass itself waits a period).
  explicit PeriodicThread(Pass pass,
                          std::chrono::steady_clock::duration first = {});
  ~PeriodicThread();
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

 private:
  Pass pass_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace sqlq::core

#endif  // SQLQ_CORE_PERIODIC_THREAD_H_
