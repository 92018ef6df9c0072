// The columns that hold structured values as JSON text, in every engine:
// a message's headers (a JSON object of strings, NULL when it has none) and
// its error history (a JSON array of {"attempt", "at", "error"} objects,
// "at" in microseconds, oldest first, NULL before the first failure). The
// engines append to the history in SQL (each with its JSON functions), so
// the format is fixed here and in each engine's kAppendError.

#ifndef SQLQ_CORE_COLUMNS_H_
#define SQLQ_CORE_COLUMNS_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sqlq/queue.h"
#include "sqlq/status.h"

namespace sqlq::core {

// kInvalidArgument with the reason when `headers` breaks a limit of
// sqlq::Headers (queue.h), or has a key beginning with kReservedPrefix.
Status ValidateHeaders(const Headers& headers);
// kInvalidArgument unless `text` is at most `max` bytes of ASCII letters,
// digits and '_', '-', '.', ':', '/'; `what` names it in the error.
Status ValidateToken(std::string_view what, std::string_view text,
                     std::size_t max);
// kInvalidArgument unless `kind` is empty or a Message::kind.
Status ValidateKind(std::string_view kind);
// The same for a queue's labels (QueueOptions::labels).
Status ValidateLabels(const std::map<std::string, std::string>& labels);
// The column's text: empty (stored as NULL) for no headers.
std::string EncodeHeaders(const Headers& headers);
// Column text back to headers; empty text (NULL) is none. Text that is not
// a JSON object of strings (written by hand) yields what can be read.
Headers DecodeHeaders(std::string_view text);

// A message's headers column also keeps the fields of a job that no query
// of the claim path needs: its kind, under the key kKindHeader. Header keys
// beginning with kReservedPrefix are sqlq's, refused in a message's headers
// (ValidateHeaders); an application's own SQL can read and write them (the
// SQL-level API's sqlq_send takes the kind this way).
inline constexpr std::string_view kReservedPrefix = "sqlq:";
inline constexpr std::string_view kKindHeader = "sqlq:kind";
inline constexpr std::string_view kTimeoutHeader = "sqlq:timeout_ms";
inline constexpr std::string_view kExpireHeader = "sqlq:expire_after_ms";
// "drop" when Message::on_expiry is kDrop; absent for the default.
inline constexpr std::string_view kOnExpiryHeader = "sqlq:on_expiry";
inline constexpr std::string_view kMaxAttemptsHeader = "sqlq:max_attempts";
inline constexpr std::string_view kBackoffHeader = "sqlq:backoff_ms";
inline constexpr std::string_view kBackoffMaxHeader = "sqlq:backoff_max_ms";
// Batches (sqlq/batch.h): the batch of a member and of the callback
// (kBatchHeader), the callback's mark ("1"), and the callback's counts,
// written when its batch is done (core/batches.cc).
inline constexpr std::string_view kBatchHeader = "sqlq:batch";
inline constexpr std::string_view kBatchCallbackHeader = "sqlq:batch_callback";
inline constexpr std::string_view kBatchTotalHeader = "sqlq:batch_total";
inline constexpr std::string_view kBatchCompletedHeader =
    "sqlq:batch_completed";
inline constexpr std::string_view kBatchDeadHeader = "sqlq:batch_dead";
inline constexpr std::string_view kBatchCancelledHeader =
    "sqlq:batch_cancelled";
// Dependencies: the messages it was sent to wait for, as "queue:id" items
// joined by ',' (":id" when the queue is not known); see ParentsText.
inline constexpr std::string_view kParentsHeader = "sqlq:parents";
// Beside it, Message::if_dependency_dies when not kCancel ("run", "wait"):
// a redrive links the message again under the policy of its send.
inline constexpr std::string_view kIfDependencyDiesHeader =
    "sqlq:if_dependency_dies";
// kParentsHeader's text, and back (items that are not "queue:id" with a
// number are left out: a hand-written row).
std::string ParentsText(const std::vector<ParentRef>& parents);
std::vector<ParentRef> ParseParents(std::string_view text);
// EncodeHeaders of the message's headers with its job fields added (those
// that are set).
std::string EncodeMessageHeaders(const Message& m);
// A message's job fields, as the headers column keeps them.
struct JobFields {
  std::string kind;
  std::optional<Duration> timeout, expire_after;
  ExpiryAction on_expiry = ExpiryAction::kDeadLetter;
  std::optional<int> max_attempts;
  std::optional<Duration> backoff_base, backoff_max;
  std::optional<BatchRef> batch;
  std::vector<ParentRef> parents;
};
// DecodeHeaders with the reserved keys taken out, into `job`.
Headers DecodeMessageHeaders(std::string_view text, JobFields& job);
// DecodeMessageHeaders into a message struct's fields: its kind, and its
// limits where it has them.
template <class M>
Headers DecodeJob(std::string_view text, M& m) {
  JobFields job;
  Headers headers = DecodeMessageHeaders(text, job);
  m.kind = std::move(job.kind);
  if constexpr (requires { m.timeout; }) {
    m.timeout = job.timeout;
    m.expire_after = job.expire_after;
    m.on_expiry = job.on_expiry;
    m.max_attempts = job.max_attempts;
  }
  if constexpr (requires { m.backoff_base; }) {
    m.backoff_base = job.backoff_base;
    m.backoff_max = job.backoff_max;
  }
  if constexpr (requires { m.batch; }) m.batch = std::move(job.batch);
  if constexpr (requires { m.parents; }) m.parents = std::move(job.parents);
  return headers;
}
// The history column back to entries; empty text (NULL) is none.
std::vector<AttemptError> DecodeErrors(std::string_view text);
// Error text as the history keeps it: at most kMaxErrorText bytes, valid
// UTF-8 (an invalid byte becomes U+FFFD), NUL bytes replaced too (JSON
// columns of PostgreSQL refuse them).
std::string CleanErrorText(std::string_view error);

}  // namespace sqlq::core

#endif  // SQLQ_CORE_COLUMNS_H_
