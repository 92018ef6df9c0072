// Input rules shared by every engine and front end: what a valid name,
// duration, payload or batch is. Everything a caller passes goes through
// here before it reaches an engine, so engines may assume valid input.

#ifndef SQLQ_CORE_VALIDATE_H_
#define SQLQ_CORE_VALIDATE_H_

#include <chrono>
#include <span>
#include <string_view>

#include "sqlq/queue.h"
#include "sqlq/ring.h"
#include "sqlq/rotation.h"
#include "sqlq/status.h"

namespace sqlq::core {

inline constexpr int kMaxNameLength = 64;
inline constexpr int kMaxClaim = 1000;
inline constexpr std::size_t kMaxBatch = 10000;
inline constexpr std::size_t kMaxDedupKey = 255;
inline constexpr std::size_t kMaxWorker = 255;
inline constexpr std::size_t kMaxErrorText = 4096;
inline constexpr std::size_t kMaxPayloadLimit = 64u << 20;
using sqlq::kMaxDelay;
using sqlq::kMaxLease;
using sqlq::kMaxRetention;
inline constexpr Duration kMaxWait = std::chrono::hours(1);
inline constexpr int kMaxListLimit = 10000;

// "kind" names the thing in the message ("queue").
Status ValidateName(std::string_view kind, std::string_view name);
// The limits of `options` (QueueOptions::max_leased ... group_limit).
Status ValidateLimits(const QueueOptions& options);
Status ValidateQueueOptions(const QueueOptions& options);
// kInvalidArgument when queue `name` names itself its dead-letter queue.
Status ValidateDeadLetterQueue(std::string_view name,
                               const QueueOptions& options);
// `now` is the store's time, against which a run_at is checked.
Status ValidateMessage(const Message& message, std::size_t max_payload,
                       Timestamp now);
Status ValidateBatch(std::span<const Message> messages, std::size_t max_payload,
                     Timestamp now);
// Message::depends_on and depends_on_batch of the message at `index` of
// its batch (0 for a single send).
Status ValidateDependencies(const Message& m, std::size_t index);
Status ValidateClaim(const ClaimOptions& options);
Status ValidateLease(Duration lease);
Status ValidateList(const ListOptions& options);

inline constexpr std::size_t kMaxKey = 255;
inline constexpr std::int64_t kMaxCapacity = 1000000;
inline constexpr int kMaxNext = 10000;
// A ring group or rotation item key ("what" names it): 1..255 bytes of
// UTF-8 without NUL, so that every engine stores it as text alike.
Status ValidateKey(std::string_view what, std::string_view key);
Status ValidateRingOptions(const RingOptions& options);
Status ValidateRotationOptions(const RotationOptions& options);
Status ValidatePayload(std::string_view payload, std::size_t max_payload);

}  // namespace sqlq::core

#endif  // SQLQ_CORE_VALIDATE_H_
