// Dependencies between messages (Message::depends_on; docs/semantics.md,
// "Dependencies"): the sends that link a message to those it waits for,
// the release of waiting messages by the acks of theirs, and what a death
// of one does to those that wait for it. The SQL is
// engines/shared/sql_deps.h's (core::DependencyOps).
//
// The rules:
// - A send links the message to each one it depends on that is still in a
//   queue (ready, delayed, leased or waiting itself); one that is no longer
//   in any queue has completed (an acked message leaves nothing behind
//   unless its queue archives), and one in the dead letters counts as dead
//   at once. A message that waits for any is stored waiting. Cycles cannot
//   form: a message can only depend on messages that exist before it.
// - The ack of a message, in its own transaction, releases those waiting
//   for it: each waits for one less, and the one that waits for none is
//   ready then. Every ack path does this (AckAndRelease), so no message is
//   released twice and none is left waiting by a crash: the ack and the
//   release commit together or not at all.
// - When a message leaves its queue otherwise (dead-lettered, cancelled,
//   deleted, its queue dropped), SettleEnded applies each waiting
//   message's policy (IfDependencyDies) after that change commits, and
//   again for the messages a cancel then ends in turn.

#ifndef SQLQ_CORE_DEPENDENCIES_H_
#define SQLQ_CORE_DEPENDENCIES_H_

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "core/engine.h"
#include "sqlq/queue.h"

namespace sqlq::core {

class StoreImpl;
class QueueImpl;

// Whether any message of the batch depends on others.
bool HasDependencies(std::span<const Message> messages);

// What SendRuns stored: each message's result, whether it was cancelled
// at the send (a dependency dead already), and per queue how many messages
// were stored, wait and were cancelled.
struct SentRuns {
  std::vector<SendResult> results;
  std::vector<bool> cancelled_at;
  struct Counts {
    QueueImpl* queue = nullptr;
    std::int64_t stored = 0, waiting = 0, cancelled = 0;
  };
  std::map<std::int64_t, Counts> counts;
};

// Flags, in a transaction of its own, the queues that messages[i] (to go
// to queues[i]) depend on, and `more_queues` (DependencyOps::
// FlagDependents): before the send that links them.
Status FlagAcross(StoreImpl& store, std::span<QueueImpl* const> queues,
                  std::span<const Message> messages,
                  std::span<const std::int64_t> more_queues);
// In the caller's transaction: sends messages[i] to queues[i] (runs of
// one queue as one engine send) and links them to what they depend on.
Status SendRuns(Engine& e, Conn& conn, std::span<QueueImpl* const> queues,
                std::span<const Message> messages, SentRuns& out);
// After SendRuns' transaction committed: wakes the claims of the queues
// with ready messages, and forwards and settles the cancelled ones.
void AfterSendRuns(StoreImpl& store, const SentRuns& sent);

// Sends a batch of which some messages depend on others (validated), in
// one transaction after the flagging one (DependencyOps::FlagDependents).
Result<std::vector<SendResult>> SendWithDependencies(
    QueueImpl& impl, std::span<const Message> messages);

// Sends messages[i] to queues[i] for every i, in one transaction after the
// flagging one: a graph of jobs over several queues, whose
// depends_on_batch indexes count over all of `messages` (validated). Runs
// of messages to one queue are one engine send each.
Result<std::vector<SendResult>> SendAcross(StoreImpl& store,
                                           std::span<QueueImpl* const> queues,
                                           std::span<const Message> messages);

// In a transaction of the caller's (WorkQueue::Send(Tx&, ...)): flags,
// links and cancels in that transaction. A flag's write there can meet
// another such send's in a deadlock, which the database reports.
Result<SendResult> SendWithDependencies(Engine& e, Conn& conn,
                                        std::int64_t queue_id,
                                        const QueueOptions& qo,
                                        const Message& message);

// Redrives the dead letters `ids` of `impl` (every one when empty) back
// into it, as WorkQueue::Redrive does, and links those sent with
// dependencies again in the same transaction: each waits again for those
// of its parents still in a queue (a parent redriven with it included),
// and follows its policy for one still dead (kCancel cancels it again).
// A redrive therefore never runs a job before the jobs it was sent to wait
// for have completed. Returns how many were moved.
Result<std::int64_t> RedriveLinked(QueueImpl& impl,
                                   std::span<const std::int64_t> ids);

// The queues whose waiting messages an operation released, to wake once
// it committed.
using Released = std::vector<std::int64_t>;

// Ack, then the release of the message's dependents.
Status AckAndRelease(Engine& e, Conn& conn, const AckParams& p,
                     Released& released);
// AckMany, then the release of the acked messages' dependents.
Result<std::vector<Status>> AckManyAndRelease(Engine& e, Conn& conn,
                                              const AckManyParams& p,
                                              Released& released);

// Wakes the claims waiting on the queues of `released` (after commit).
void WakeReleased(StoreImpl& store, const Released& released);

// After messages of `queue_id` left it other than by an ack, committed:
// settles the dependencies on them (IfDependencyDies), then on the
// messages those settlements cancelled, and so on.
void SettleEnded(StoreImpl& store, std::int64_t queue_id);

// The error of a message cancelled because `parent` died or was deleted.
std::string DependencyDiedText(std::int64_t parent, bool dead);

}  // namespace sqlq::core

#endif  // SQLQ_CORE_DEPENDENCIES_H_
