#include "core/errors.h"

#include <fmt/format.h>

namespace sqlq::core {

Status QueueGone(std::int64_t queue_id) { return KindGone("queue", queue_id); }

Status ScheduleMissing(std::string_view name) {
  return Status::NotFound(fmt::format("schedule '{}' not found", name));
}

Status KindGone(std::string_view kind, std::int64_t id) {
  return Status::NotFound(
      fmt::format("{} (id {}) no longer exists: it was dropped", kind, id));
}

Status NotA(std::string_view name, std::optional<std::string_view> found_kind,
            std::string_view want) {
  if (found_kind) {
    return Status::FailedPrecondition(
        fmt::format("'{}' is a {}, not a {}", name, *found_kind, want));
  }
  return Status::NotFound(fmt::format("{} '{}' does not exist", want, name));
}

Status NameTaken(std::string_view name, std::optional<std::string_view> kind) {
  return Status::AlreadyExists(
      fmt::format("{} '{}' already exists", kind.value_or("name"), name));
}

Status NotInQueue(std::int64_t message_id) {
  return Status::NotFound(fmt::format(
      "message {} is not in the queue (acked, dead-lettered or purged "
      "already)",
      message_id));
}

Status StaleReceipt(const Receipt& r, std::int64_t token,
                    std::int64_t attempts) {
  if (attempts > r.attempt) {
    return Status::FailedPrecondition(fmt::format(
        "stale receipt: the lease of message {} (attempt {}) expired and "
        "the message was claimed again (attempt {})",
        r.id, r.attempt, attempts));
  }
  if (token == 0 && attempts == r.attempt) {
    return Status::FailedPrecondition(fmt::format(
        "stale receipt: message {} was nacked and is no longer leased", r.id));
  }
  return Status::FailedPrecondition(fmt::format(
      "receipt does not match the current lease of message {}", r.id));
}

Status NoRingEntry(std::string_view group, std::int64_t seq) {
  return Status::NotFound(fmt::format(
      "group '{}' has no entry {} (never pushed, evicted or deleted)", group,
      seq));
}

Status NoItem(std::string_view key) {
  return Status::NotFound(fmt::format("item '{}' is not in the rotation", key));
}

Status ItemExists(std::string_view key) {
  return Status::AlreadyExists(
      fmt::format("item '{}' is in the rotation already", key));
}

Status ItemParked(std::string_view key) {
  return Status::FailedPrecondition(
      fmt::format("item '{}' is parked: reset it to serve it again", key));
}

Status SchemaTooNew(std::int64_t found, std::int64_t supported) {
  return Status::FailedPrecondition(fmt::format(
      "database schema version {} is newer than this sqlq supports ({}): "
      "upgrade sqlq",
      found, supported));
}

Status NoSqlqTables(std::string_view where) {
  return Status::NotFound(fmt::format(
      "database '{}' has no sqlq tables (create a queue first, or check "
      "--db)",
      where));
}

}  // namespace sqlq::core
