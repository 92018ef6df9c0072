// When a waiting claim looks again: the one rule of Claim's wait
// (ClaimWaiting), of Worker::Next and of callers that wait without a
// thread (WorkQueue::Subscribe, the server's parked claims), through
// WorkQueue::NextLook. docs/semantics.md "Waiting".

#ifndef SQLQ_CORE_NEXT_LOOK_H_
#define SQLQ_CORE_NEXT_LOOK_H_

#include <chrono>
#include <optional>

#include "sqlq/queue.h"

namespace sqlq::core {

using SteadyTime = std::chrono::steady_clock::time_point;

// How long after a message's ready time a waiter looks: the sleep is
// measured on this machine's steady clock, the ready time on the
// database's, which the claim reads a moment later; the margin keeps the
// look from coming a hair early and finding the message not ready yet.
inline constexpr std::chrono::microseconds kReadyMargin{500};

// What a look found, as the rule takes it.
struct LookReport {
  // Until the queue's next message becomes ready (a delay, a backoff, an
  // expiring lease) by the database's clock: ≤ 0 when one is ready now,
  // nullopt when none is pending.
  std::optional<std::chrono::microseconds> ready_in;
  // The note of a claim that just got nothing; nullptr when the look was a
  // read alone (no claim was made).
  const ClaimNote* claim = nullptr;
  // BlockedByGroups of the queue's options.
  bool blocked_by_groups = false;
  // The queue is paused (as the claim saw it).
  bool paused = false;
};

// Whether a ready message may still wait for the one before it in its
// group: an ordered queue, or one with a group limit.
bool BlockedByGroups(const QueueOptions& o);

// The latest time to look again without a wake-up, for a look at `now`:
// the first of
// - the safety net, `poll_interval` after the look (a wake-up missed, or a
//   write of another process no watch reported);
// - after a claim a limit held back: its retry_after (the messages are
//   ready, and wait for the limit, not for a time of their own);
// - the next ready time plus kReadyMargin; except a message ready now
//   that a claim of a queue blocked by groups did not get: it waits for
//   the one before it in its group, and that wait ends with an ack (which
//   wakes waiters), not at a time;
// - `now` itself after a read that found a message ready: claim now.
// After a claim of a paused queue, only the safety net: nothing is
// claimable until Resume, which wakes waiters (and another process's
// Resume shows in this process's copy of the queue within a second).
// The caller takes the earlier of this and the end of its wait.
SteadyTime NextLook(SteadyTime now, std::chrono::milliseconds poll_interval,
                    const LookReport& report);

}  // namespace sqlq::core

#endif  // SQLQ_CORE_NEXT_LOOK_H_
