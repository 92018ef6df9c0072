#include "sqlq/status.h"

#include <fmt/format.h>

namespace sqlq {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "ok";
    case Code::kInvalidArgument:
      return "invalid_argument";
    case Code::kTooLarge:
      return "too_large";
    case Code::kNotFound:
      return "not_found";
    case Code::kAlreadyExists:
      return "already_exists";
    case Code::kFailedPrecondition:
      return "failed_precondition";
    case Code::kPermissionDenied:
      return "permission_denied";
    case Code::kBusy:
      return "busy";
    case Code::kUnavailable:
      return "unavailable";
    case Code::kTimeout:
      return "timeout";
    case Code::kOutcomeUnknown:
      return "outcome_unknown";
    case Code::kCorruption:
      return "corruption";
    case Code::kInternal:
      return "internal";
  }
  return "internal";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return fmt::format("{}: {}", CodeName(code_), message_);
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, fmt::format("{}: {}", context, message_));
}

}  // namespace sqlq
