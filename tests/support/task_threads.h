// A small pool of threads that run what they are handed, in order: what a
// server's database pool is to the store (Store::SetRunner,
// WriteBatcher::set_runner), for tests that need one.

#ifndef SQLQ_TESTS_SUPPORT_TASK_THREADS_H_
#define SQLQ_TESTS_SUPPORT_TASK_THREADS_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sqlq::test {

class TaskThreads {
 public:
  explicit TaskThreads(int threads) {
    for (int i = 0; i < threads; ++i) {
      threads_.emplace_back([this] {
        std::unique_lock<std::mutex> lock(mu_);
        for (;;) {
          cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
          if (tasks_.empty()) return;
          auto task = std::move(tasks_.front());
          tasks_.pop_front();
          lock.unlock();
          task();
          lock.lock();
        }
      });
    }
  }
  // Runs what is still queued, then ends the threads.
  ~TaskThreads() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    for (auto& t : threads_) t.join();
  }
  TaskThreads(const TaskThreads&) = delete;
  TaskThreads& operator=(const TaskThreads&) = delete;

  void Post(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mu_);
    ++posted_;
    tasks_.push_back(std::move(task));
    cv_.notify_one();
  }
  // Post, as a runner for the store or the batcher.
  std::function<void(std::function<void()>)> AsRunner() {
    return [this](std::function<void()> task) { Post(std::move(task)); };
  }
  // Tasks handed to it so far.
  int posted() {
    std::lock_guard<std::mutex> lock(mu_);
    return posted_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;  // guarded by mu_
  bool stop_ = false;                        // guarded by mu_
  int posted_ = 0;                           // guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace sqlq::test

#endif  // SQLQ_TESTS_SUPPORT_TASK_THREADS_H_
