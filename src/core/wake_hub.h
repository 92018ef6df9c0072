// WakeHub: where claims waiting for messages sleep, and what wakes them.
//
// A waiting claim registers *before* it looks for messages and stays
// registered while it looks, so a send that commits between the look and the
// sleep still finds it: no lost wake-up. A send of n messages wakes at most n
// waiters of that queue, oldest first (no thundering herd). A write by
// another process, which we cannot attribute to a queue, wakes every waiter.
// docs/semantics.md, "Waiting", describes the whole scheme.
//
// Thread-safe.

#ifndef SQLQ_CORE_WAKE_HUB_H_
#define SQLQ_CORE_WAKE_HUB_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>

namespace sqlq::core {

class WakeHub {
 public:
  struct Waiter {
    std::int64_t queue_id = 0;
    bool signalled = false;
    std::condition_variable cv;
    std::list<Waiter*>::iterator pos;
    bool registered = false;
    bool sleeping = false;  // in Wait
    // When set, a signal calls this instead of notifying `cv`: the waiter
    // is asynchronous (WorkQueue::Subscribe). It runs on the signalling
    // thread with the hub's lock held, so it must be short and must not
    // call back into the hub (post the work elsewhere).
    std::function<void()> on_signal;
  };

  void Register(Waiter& w, std::int64_t queue_id);
  // Also passes an unused signal of `w` on to the next waiter of its queue,
  // so that a wake-up is never lost with a waiter that leaves.
  void Unregister(Waiter& w);
  // Sleeps until `w` is signalled or `until`; returns whether it was
  // signalled, and clears the signal. REQUIRES: w is registered.
  bool Wait(Waiter& w, std::chrono::steady_clock::time_point until);

  // The non-blocking form of Wait for asynchronous waiters: returns whether
  // `w` was signalled and clears the signal; a signalled waiter goes to the
  // back of its queue's line. REQUIRES: w is registered.
  bool Consume(Waiter& w);

  // Wakes up to `n` registered waiters of the queue that are not already
  // signalled.
  void Notify(std::int64_t queue_id, std::int64_t n);
  // Wakes every waiter of every queue.
  void NotifyAll();

  std::size_t waiting() const;
  // How many sleep in Wait with no signal to wake them: waiters that will
  // look again only when woken or when their time is up (for tests that
  // must act only once a claim is asleep).
  std::size_t asleep() const;
  // How many wait for each queue that has any, by queue id.
  std::map<std::int64_t, std::int64_t> WaitingByQueue() const;

 private:
  static void Signal(Waiter& w);  // REQUIRES: mu_ held

  mutable std::mutex mu_;
  std::map<std::int64_t, std::list<Waiter*>> waiters_;  // guarded by mu_
  std::size_t count_ = 0;
};

}  // namespace sqlq::core

#endif  // SQLQ_CORE_WAKE_HUB_H_
