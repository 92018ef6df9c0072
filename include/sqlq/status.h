// Status and Result<T>: how every fallible sqlq call reports what happened.
//
// sqlq never throws across its public API. A call returns a Status (or a
// Result<T> holding a value or a Status); both are [[nodiscard]]. The set of
// codes is small and closed, chosen by what the caller does next: fix the
// input, create the missing thing, retry later, or give up.
//
// Thread-safety: Status and Result are plain values; distinct objects may be
// used from distinct threads without synchronisation.

#ifndef SQLQ_STATUS_H_
#define SQLQ_STATUS_H_

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace sqlq {

// The closed set of outcomes. docs/cli.md maps each to a CLI exit code and
// docs/http-api.md to an HTTP status (server::HttpStatusFor); keep them in
// step.
enum class Code : int {
  kOk = 0,
  // The caller's input is wrong (bad name, bad duration, malformed receipt).
  kInvalidArgument,
  // A payload, batch or request exceeds a configured limit.
  kTooLarge,
  // The named queue, message or database does not exist.
  kNotFound,
  // The thing to create exists already.
  kAlreadyExists,
  // The state forbids the operation: a stale receipt (its lease was claimed
  // again by someone else), a queue with the wrong kind.
  kFailedPrecondition,
  // The database refuses writes to us (read-only file, permissions).
  kPermissionDenied,
  // Contention that outlasted sqlq's own retries (a lock held too long).
  kBusy,
  // The database cannot be reached or failed transiently (I/O, disk full).
  kUnavailable,
  // A deadline ran out before the operation finished.
  kTimeout,
  // The connection was lost while committing: the write may or may not have
  // been committed. Never retried silently; see docs/semantics.md.
  kOutcomeUnknown,
  // The database file is not a database or its contents are damaged.
  kCorruption,
  // A bug in sqlq or an engine error it does not know how to classify.
  kInternal,
};

// Stable lower-case name of a code ("invalid_argument"), used in JSON output.
std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  // An OK status.
  Status() = default;
  Status(Code code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) {
    return {Code::kInvalidArgument, std::move(m)};
  }
  static Status TooLarge(std::string m) {
    return {Code::kTooLarge, std::move(m)};
  }
  static Status NotFound(std::string m) {
    return {Code::kNotFound, std::move(m)};
  }
  static Status AlreadyExists(std::string m) {
    return {Code::kAlreadyExists, std::move(m)};
  }
  static Status FailedPrecondition(std::string m) {
    return {Code::kFailedPrecondition, std::move(m)};
  }
  static Status PermissionDenied(std::string m) {
    return {Code::kPermissionDenied, std::move(m)};
  }
  static Status Busy(std::string m) { return {Code::kBusy, std::move(m)}; }
  static Status Unavailable(std::string m) {
    return {Code::kUnavailable, std::move(m)};
  }
  static Status Timeout(std::string m) {
    return {Code::kTimeout, std::move(m)};
  }
  static Status OutcomeUnknown(std::string m) {
    return {Code::kOutcomeUnknown, std::move(m)};
  }
  static Status Corruption(std::string m) {
    return {Code::kCorruption, std::move(m)};
  }
  static Status Internal(std::string m) {
    return {Code::kInternal, std::move(m)};
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  // Human-readable context: "<what>: <detail>". Empty when ok().
  const std::string& message() const { return message_; }

  // True when the same call may succeed if simply tried again later
  // (busy, unavailable, timeout). kOutcomeUnknown is deliberately not
  // retryable: retrying a send whose commit may have happened duplicates it.
  bool retryable() const {
    return code_ == Code::kBusy || code_ == Code::kUnavailable ||
           code_ == Code::kTimeout;
  }

  // "not_found: queue 'jobs' does not exist", or "ok".
  std::string ToString() const;

  // Returns a copy whose message is prefixed by `context` and ": ".
  Status WithContext(std::string_view context) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// A value of type T, or the Status saying why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.ok() && "a Result built from a Status must carry an error");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // REQUIRES: ok().
  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace sqlq

#endif  // SQLQ_STATUS_H_
