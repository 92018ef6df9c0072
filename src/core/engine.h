// The internal engine interface: one method per storage operation.
//
// Division of labour (docs/architecture.md): core decides what happens
// (validation, backoff, dead-lettering rule, lease tokens, batching of
// concurrent callers, wake-ups) and passes the decision in a params struct;
// the engine only persists it, in as few statements as its SQL allows. Every
// engine runs the same conformance suite (tests/conformance).
//
// Transactions: every operation runs on a Conn inside a transaction the core
// opened through Write()/Read() or a caller's Tx. Operations never commit.
// Errors are translated to sqlq codes inside the engine, in one function.
//
// Clean failures: an operation that fails with one of the codes for which
// IsCleanFailure() holds (not found, stale receipt, invalid argument, already
// exists, too large) has written nothing, so the other operations merged into
// the same transaction may still commit. Engines check such preconditions
// before they write. Any other failure may have written part of the
// operation and aborts the whole transaction.

#ifndef SQLQ_CORE_ENGINE_H_
#define SQLQ_CORE_ENGINE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/receipt.h"
#include "sqlq/queue.h"
#include "sqlq/status.h"

namespace sqlq::core {

using Micros = std::chrono::microseconds;

// One engine connection. Engines subclass it; core only passes it back.
class Conn {
 public:
  virtual ~Conn() = default;
};

struct QueueRecord {
  std::int64_t id = 0;
  QueueInfo info;
};

struct SendParams {
  std::int64_t queue_id = 0;
  std::span<const Message> messages;
};

struct ClaimParams {
  std::int64_t queue_id = 0;
  int max = 1;
  Micros lease{0};
  // Fencing token of this claim's leases (random, never 0).
  std::uint64_t token = 0;
  // Candidates whose attempts already reached this are dead-lettered with
  // `exhausted_error` (or their last error) instead of being leased.
  int max_attempts = 1;
  std::string_view worker;
};

struct ClaimOutcome {
  // In claim order. receipt is left empty: core formats it.
  std::vector<ClaimedMessage> messages;
  std::int64_t expirations = 0;  // leased messages whose lease had run out
  std::int64_t dead_lettered = 0;
};

struct AckParams {
  std::int64_t queue_id = 0;
  Receipt receipt;
  bool archive = false;
};

struct RetryParams {
  std::int64_t queue_id = 0;
  Receipt receipt;
  Micros delay{0};
  std::string_view error;
};

struct BuryParams {
  std::int64_t queue_id = 0;
  Receipt receipt;
  std::string_view error;
};

// See "Clean failures" above.
inline bool IsCleanFailure(const Status& s) {
  switch (s.code()) {
    case Code::kNotFound:
    case Code::kFailedPrecondition:
    case Code::kInvalidArgument:
    case Code::kAlreadyExists:
    case Code::kTooLarge:
      return true;
    default:
      return false;
  }
}

class Engine {
 public:
  virtual ~Engine() = default;

  // --- transactions -------------------------------------------------------
  // Runs `body` in a write transaction and commits it when `body` returns OK;
  // rolls back otherwise. Write transactions are serialised per engine.
  virtual Status Write(const std::function<Status(Conn&)>& body) = 0;
  // Runs `body` in a read-only snapshot; may run concurrently with writes.
  virtual Status Read(const std::function<Status(Conn&)>& body) = 0;

  // Caller-controlled transactions (the public Tx).
  virtual Result<std::unique_ptr<Conn>> BeginTx() = 0;
  virtual Result<std::unique_ptr<Conn>> JoinTx(void* native) = 0;
  virtual Status CommitTx(Conn& conn) = 0;
  virtual Status RollbackTx(Conn& conn) = 0;
  virtual void* NativeHandle(Conn& conn) = 0;

  // Calls `changed` (from a background thread) soon after another process
  // commits to the database; at most every few milliseconds. Engines that
  // cannot tell never call it; waiting claims then fall back to polling.
  virtual void WatchForeignWrites(std::function<void()> changed) = 0;

  // --- queues --------------------------------------------------------------
  virtual Result<QueueRecord> CreateQueue(Conn& conn, std::string_view name,
                                          const QueueOptions& options) = 0;
  virtual Result<QueueRecord> GetQueue(Conn& conn, std::string_view name) = 0;
  virtual Result<std::vector<QueueRecord>> ListQueues(Conn& conn) = 0;
  virtual Status DropQueue(Conn& conn, std::int64_t queue_id) = 0;
  virtual Result<std::int64_t> PurgeQueue(Conn& conn,
                                          std::int64_t queue_id) = 0;
  virtual Result<QueueStats> Stats(Conn& conn, std::int64_t queue_id) = 0;

  // --- messages ------------------------------------------------------------
  // Stores the messages; kNotFound when the queue no longer exists.
  virtual Result<std::vector<SendResult>> Send(Conn& conn,
                                               const SendParams& p) = 0;
  virtual Result<ClaimOutcome> Claim(Conn& conn, const ClaimParams& p) = 0;
  // When the next message of the queue becomes claimable (its delay, backoff
  // or lease ends); nullopt when the queue holds no message at all.
  virtual Result<std::optional<Timestamp>> NextReadyAt(
      Conn& conn, std::int64_t queue_id) = 0;
  // The engine's notion of now (the clock every lease is measured with).
  virtual Result<Timestamp> Now(Conn& conn) = 0;
  // Each of these checks the receipt's lease token: kFailedPrecondition when
  // the message is there under another lease, kNotFound when it is gone.
  virtual Status Ack(Conn& conn, const AckParams& p) = 0;
  virtual Status Retry(Conn& conn, const RetryParams& p) = 0;
  virtual Status Bury(Conn& conn, const BuryParams& p) = 0;
  virtual Result<Timestamp> Extend(Conn& conn, std::int64_t queue_id,
                                   const Receipt& receipt, Micros lease) = 0;

  // --- dead letters and archive -------------------------------------------
  virtual Result<std::vector<DeadLetter>> ListDead(
      Conn& conn, std::int64_t queue_id, const ListOptions& options) = 0;
  // Empty `ids` means all.
  virtual Result<std::int64_t> Redrive(Conn& conn, std::int64_t queue_id,
                                       std::span<const std::int64_t> ids) = 0;
  virtual Result<std::int64_t> PurgeDead(Conn& conn, std::int64_t queue_id) = 0;
  virtual Result<std::vector<ArchivedMessage>> ListArchive(
      Conn& conn, std::int64_t queue_id, const ListOptions& options) = 0;
  virtual Result<std::int64_t> PruneArchive(Conn& conn, std::int64_t queue_id,
                                            Micros retention) = 0;
};

}  // namespace sqlq::core

#endif  // SQLQ_CORE_ENGINE_H_
