// Batches: a set of messages (its members, in any queues) sent under one
// batch id with a callback message that is sent, once, when every member
// has completed or died, and carries how they ended (BatchCounts).
// Semantics: docs/semantics.md, "Batches".
//
// The calls are Store's (sqlq/store.h): CreateBatch, GetBatch, CancelBatch.
// The callback is a message that waits for every member (as a dependent
// with IfDependencyDies::kRun, docs/semantics.md "Dependencies"): the ack
// of the last member releases it in the ack's own transaction, with the
// batch's counts written into it there, so it is released once, and a
// crash leaves no batch half counted.

#ifndef SQLQ_BATCH_H_
#define SQLQ_BATCH_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sqlq/queue.h"

namespace sqlq {

// A batch to send (Store::CreateBatch).
struct BatchSpec {
  // The batch's id: 1..kMaxBatchId bytes of ASCII letters, digits and
  // '_', '-', '.', ':'. Empty: one is made (32 hex digits). An id taken by
  // a batch still known (not done, or done less than its retention ago) is
  // kAlreadyExists.
  std::string id;
  // The members, 1..kMaxBatchMembers, each to its queue. A member may
  // depend on earlier members (depends_on_batch indexes count over
  // `members`) or on other messages (depends_on), as any message; it may
  // not carry a dedup key (a duplicate would be another message).
  std::vector<QueuedMessage> members;
  // The callback: sent at once and waiting, ready when the last member has
  // ended. No dedup key, dependencies, delay or run_at of its own.
  QueuedMessage callback;
  // How long the batch's status stays readable after it is done
  // (kMinBatchRetention..kMaxBatchRetention); then its id is free again.
  Duration retention = std::chrono::hours(24 * 7);
};
inline constexpr std::size_t kMaxBatchId = 128;
inline constexpr std::size_t kMaxBatchMembers = 10000;
inline constexpr Duration kMinBatchRetention = std::chrono::seconds(1);
inline constexpr Duration kMaxBatchRetention = std::chrono::hours(24 * 365);

// What CreateBatch stored: the batch's id (made when none was given), the
// members' ids in the order of BatchSpec::members, and the callback's id.
struct BatchSent {
  std::string id;
  std::vector<std::int64_t> members;
  std::int64_t callback_id = 0;
};

// A batch as it stands (Store::GetBatch, CancelBatch).
struct BatchStatus {
  std::string id;
  // Members so far: total, completed, dead, cancelled (pending() the rest).
  BatchCounts counts;
  // Every member has ended: the callback is ready (or was claimed).
  bool done = false;
  std::string callback_queue;
  std::int64_t callback_id = 0;
  // The queues of the members, by name.
  std::vector<std::string> queues;
  Timestamp created_at;
  std::optional<Timestamp> done_at;
  // When it was cancelled (CancelBatch), if it was.
  std::optional<Timestamp> cancelled_at;
  // Done: when its status is forgotten (done_at + retention).
  std::optional<Timestamp> expires_at;
};

// Checks a batch id as BatchSpec::id says: kInvalidArgument with why.
Status CheckBatchId(std::string_view id);

}  // namespace sqlq

#endif  // SQLQ_BATCH_H_
