// Batches (sqlq/batch.h; docs/semantics.md, "Batches"): the counting of a
// batch's members as they end, and the end of the batch. The sends and
// the cancel are Store's (batches.cc); the SQL is engines/shared/
// sql_batches.h's (core::BatchOps).
//
// The rules:
// - A batch's callback waits for every member through a dependency with
//   OnDead::kBatch: it runs whatever they do, as with kRun.
// - The transaction that ends a member counts it in the batch's row, by
//   the callback's id: an ack (in its own transaction, with the release:
//   dependencies.cc) as completed; the settlement of a death (after the
//   death committed, or in a batch's cancel) as dead or cancelled.
// - The transaction whose count leaves no member pending marks the batch
//   done and writes the counts into the callback's headers, where a claim
//   of it reads them (ClaimedMessage::batch). It is the one that released
//   the callback: both happen under the row locks of the callback and the
//   batch, which every such transaction takes in that order.

#ifndef SQLQ_CORE_BATCHES_H_
#define SQLQ_CORE_BATCHES_H_

#include <cstdint>
#include <span>

#include "core/engine.h"

namespace sqlq::core {

// A member of the batch whose callback is `callback_id` ended in this
// transaction as `delta` says (one of completed, dead, cancelled): counts
// it, and when none is pending then, finishes the batch.
Status CountBatchEnd(Engine& e, Conn& conn, std::int64_t callback_id,
                     const BatchCounts& delta);
// CountBatchEnd of a completed member for each entry of `callbacks`
// (ReleaseOutcome::batches).
Status CountBatchesCompleted(Engine& e, Conn& conn,
                             std::span<const std::int64_t> callbacks);
// How an ended member's settlement counts: a dead letter cancelled,
// another dead letter dead, a deleted message cancelled.
BatchCounts EndOf(const EndedDependency& d);

}  // namespace sqlq::core

#endif  // SQLQ_CORE_BATCHES_H_
