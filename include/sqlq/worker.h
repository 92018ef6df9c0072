// Worker: a consumer that works one message at a time, fed by claims of
// several. Semantics: docs/semantics.md, "Workers".
//
// A worker that claims one message, works, acks and claims again pays two
// commits per message (one with WorkQueue::AckAndClaim). A Worker claims
// `prefetch` messages at once and hands them out one by one; the acks of
// the messages marked Done go into the transaction of the next claim. So a
// worker pays about one commit per `prefetch` messages, and still sees one
// message at a time.
//
// What that costs, and is the same at-least-once contract as a plain claim:
//  - A message marked Done is acked only with the next claim (or Flush): a
//    crash before then loses the ack, and the message is delivered again
//    once its lease runs out.
//  - Prefetched messages are leased from the claim that fetched them. Next
//    renews the lease of one it hands out once less than half of it is
//    left. Close gives the ones never handed out back at once, their
//    attempt returned; a crash leaves them to their leases.
//
// Thread-safety: one Worker per thread; its methods must not be called
// concurrently. Many Workers may work on one queue at once (their claims
// and acks are merged into shared transactions as any calls are). A Worker
// must not outlive the Store its queue came from.

#ifndef SQLQ_WORKER_H_
#define SQLQ_WORKER_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "sqlq/queue.h"
#include "sqlq/status.h"

namespace sqlq {

struct WorkerOptions {
  // Messages claimed at once and handed out one by one (1..1000). 1 makes
  // a Worker the plain ack-and-claim-next loop.
  int prefetch = 10;
  // Lease of each claim; the queue's when unset.
  std::optional<Duration> lease;
  // Free text naming the consumer, kept in the archive.
  std::string worker;
};

class Worker {
 public:
  // Invalid options make every call fail with kInvalidArgument.
  explicit Worker(WorkQueue queue, WorkerOptions options = {});
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  // Close(), its errors ignored.
  ~Worker();

  // The next message to work on: one prefetched, or, when none is left, one
  // of a new claim of up to `prefetch` (in the transaction that commits the
  // acks of the messages marked Done). Waits up to `wait` (0..1h) when
  // nothing is ready; nullopt when nothing came. Errors as for Claim.
  // With `note`, what held a claim that got nothing back (as Claim's;
  // cleared when no claim was made).
  Result<std::optional<ClaimedMessage>> Next(Duration wait = Duration(0),
                                             ClaimNote* note = nullptr);

  // The message (handed out by Next) is finished: acked with the next
  // claim, or by Flush or Close. kInvalidArgument for a malformed receipt.
  Status Done(const ClaimedMessage& message);

  // Any outcome but done: a nack now (WorkQueue::Nack), not deferred. The
  // attempt failed (NackAction::kRetry), or failed for good (kDead), or the
  // message is to come back later without spending it (kSnooze).
  Result<NackOutcome> Fail(const ClaimedMessage& message,
                           const NackOptions& options = {});

  // Commits the acks of the messages marked Done now. Returns the first
  // refusal among them (kFailedPrecondition: the lease had run out and the
  // message went to another consumer), or the error that kept them from
  // being committed (then they stay pending).
  Status Flush();

  // Flush, then gives back the prefetched messages never handed out:
  // ready at once, their attempt returned. The Worker can be used again
  // afterwards. Returns the first error.
  Status Close();

  // Messages claimed and not yet handed out.
  std::size_t prefetched() const { return buffer_.size(); }
  // Acks of Done messages the store refused so far (their lease had run
  // out before the ack was committed), and the last such refusal.
  std::int64_t refused_acks() const { return refused_acks_; }
  const Status& last_refusal() const { return last_refusal_; }

 private:
  void Count(const std::vector<Status>& statuses);

  struct Prefetched {
    ClaimedMessage message;
    // When its claim returned: the lease is renewed by this clock, which
    // needs no reading of the store's.
    std::chrono::steady_clock::time_point claimed;
  };

  WorkQueue queue_;
  WorkerOptions options_;
  Status invalid_;
  std::deque<Prefetched> buffer_;
  std::vector<std::string> done_;
  std::int64_t refused_acks_ = 0;
  Status last_refusal_;
};

}  // namespace sqlq

#endif  // SQLQ_WORKER_H_
