#include "core/validate.h"

#include <fmt/format.h>

#include "core/columns.h"
#include "sqlq/text.h"

namespace sqlq::core {

Status ValidatePayloadLimit(std::size_t limit);

namespace {

std::string Ms(Duration d) { return fmt::format("{}ms", d.count()); }

Status CheckRange(std::string_view what, Duration d, Duration lo, Duration hi) {
  if (d < lo || d > hi) {
    return Status::InvalidArgument(fmt::format("{} {} is out of range [{}, {}]",
                                               what, Ms(d), Ms(lo), Ms(hi)));
  }
  return Status::Ok();
}

}  // namespace

Status ValidateName(std::string_view kind, std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength) {
    return Status::InvalidArgument(
        fmt::format("invalid {} name '{}': must be 1 to {} characters", kind,
                    name.substr(0, 80), kMaxNameLength));
  }
  for (unsigned char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
    if (!ok) {
      return Status::InvalidArgument(fmt::format(
          "invalid {} name '{}': only letters, digits, '_', '-' and '.' are "
          "allowed",
          kind, name.substr(0, 80)));
    }
  }
  // Not "." or "..", which mean other things in a URL's path.
  if (name.front() == '.') {
    return Status::InvalidArgument(
        fmt::format("invalid {} name '{}': must not begin with '.'", kind,
                    name.substr(0, 80)));
  }
  return Status::Ok();
}

namespace {

// An optional limit: unset, or within [1, max].
Status CheckLimit(const char* what, const std::optional<int>& v, int max) {
  if (v && (*v < 1 || *v > max)) {
    return Status::InvalidArgument(
        fmt::format("{} {} is out of range [1, {}] (leave it unset for no "
                    "limit)",
                    what, *v, max));
  }
  return Status::Ok();
}

}  // namespace

Status ValidateLimits(const QueueOptions& o) {
  Status s = CheckLimit("max_leased", o.max_leased, kMaxLeasedLimit);
  if (!s.ok()) return s;
  s = CheckLimit("rate_burst", o.rate_burst, kMaxRateBurst);
  if (!s.ok()) return s;
  s = CheckLimit("group_limit", o.group_limit, kMaxGroupLimit);
  if (!s.ok()) return s;
  if (o.rate_limit &&
      !(*o.rate_limit >= kMinRateLimit && *o.rate_limit <= kMaxRateLimit)) {
    return Status::InvalidArgument(fmt::format(
        "rate_limit {} is out of range [{}, {}] claims per second (leave "
        "it unset for no limit)",
        *o.rate_limit, kMinRateLimit, kMaxRateLimit));
  }
  if (o.rate_burst && !o.rate_limit) {
    return Status::InvalidArgument("rate_burst needs a rate_limit");
  }
  if (o.group_limit && o.groups != GroupMode::kFair) {
    return Status::InvalidArgument(fmt::format(
        "group_limit needs a queue with groups \"fair\" (this one's are "
        "\"{}\"; an ordered queue's limit is always 1)",
        GroupModeName(o.groups)));
  }
  return Status::Ok();
}

Status ValidateQueueOptions(const QueueOptions& o) {
  if (o.max_attempts < 1 || o.max_attempts > 1000000) {
    return Status::InvalidArgument(fmt::format(
        "max attempts {} is out of range [1, 1000000]", o.max_attempts));
  }
  Status s = ValidateLease(o.lease);
  if (!s.ok()) return s;
  s = CheckRange("backoff base", o.backoff_base, Duration(0), kMaxDelay);
  if (!s.ok()) return s;
  s = CheckRange("backoff max", o.backoff_max, o.backoff_base, kMaxDelay);
  if (!s.ok()) return s;
  s = CheckRange("retention", o.retention, Duration(1), kMaxRetention);
  if (!s.ok()) return s;
  s = CheckRange("dead retention", o.dead_retention, Duration(0),
                 kMaxRetention);
  if (!s.ok()) return s;
  s = CheckRange("dedup window", o.unique_for, Duration(0), kMaxRetention);
  if (!s.ok()) return s;
  s = ValidateLimits(o);
  if (!s.ok()) return s;
  if (!o.dead_letter_queue.empty()) {
    s = ValidateName("dead-letter queue", o.dead_letter_queue);
    if (!s.ok()) return s;
  }
  s = ValidateLabels(o.labels);
  if (!s.ok()) return s;
  return ValidatePayloadLimit(o.max_payload_bytes);
}

Status ValidateDeadLetterQueue(std::string_view name, const QueueOptions& o) {
  if (o.dead_letter_queue == name) {
    return Status::InvalidArgument(
        fmt::format("queue '{}' cannot be its own dead-letter queue "
                    "(dead-letter queues cannot form a loop)",
                    name));
  }
  return Status::Ok();
}

Status ValidateMessage(const Message& m, std::size_t max_payload,
                       Timestamp now) {
  if (m.payload.size() > max_payload) {
    return Status::TooLarge(
        fmt::format("payload of {} bytes exceeds the queue's limit of {} bytes",
                    m.payload.size(), max_payload));
  }
  Status s = CheckRange("delay", m.delay, Duration(0), kMaxDelay);
  if (!s.ok()) return s;
  if (m.dedup_key.size() > kMaxDedupKey) {
    return Status::InvalidArgument(
        fmt::format("dedup key of {} bytes is longer than {}",
                    m.dedup_key.size(), kMaxDedupKey));
  }
  if (m.group.size() > kMaxGroup) {
    return Status::InvalidArgument(fmt::format(
        "group of {} bytes is longer than {}", m.group.size(), kMaxGroup));
  }
  s = ValidateKind(m.kind);
  if (!s.ok()) return s;
  if (m.timeout) {
    s = CheckRange("timeout", *m.timeout, Duration(1), kMaxLease);
    if (!s.ok()) return s;
  }
  if (m.expire_after) {
    s = CheckRange("expire_after", *m.expire_after, Duration(1), kMaxDelay);
    if (!s.ok()) return s;
    // Against the store's clock as this process knows it (run_at's check).
    const Duration until_ready =
        m.run_at ? std::chrono::duration_cast<Duration>(*m.run_at - now)
                 : m.delay;
    if (*m.expire_after <= until_ready) {
      return Status::InvalidArgument(fmt::format(
          "expire_after {}ms ends before the message is ready ({}ms after its "
          "send): it could never start",
          m.expire_after->count(), until_ready.count()));
    }
  }
  if (m.on_expiry == ExpiryAction::kDrop && !m.expire_after) {
    return Status::InvalidArgument(
        "on_expiry drop needs expire_after: a job without one never expires");
  }
  if (m.max_attempts && (*m.max_attempts < 1 || *m.max_attempts > 1000000)) {
    return Status::InvalidArgument(fmt::format(
        "max_attempts {} is out of range [1, 1000000]", *m.max_attempts));
  }
  if (m.backoff_base) {
    s = CheckRange("backoff base", *m.backoff_base, Duration(0), kMaxDelay);
    if (!s.ok()) return s;
  }
  if (m.backoff_max) {
    s = CheckRange("backoff max", *m.backoff_max,
                   m.backoff_base.value_or(Duration(0)), kMaxDelay);
    if (!s.ok()) return s;
  }
  if (m.run_at) {
    if (m.delay != Duration(0)) {
      return Status::InvalidArgument(
          "a message takes a delay or a run_at time, not both");
    }
    // Against the store's clock as this process knows it (the database
    // server's may differ by a little, never by a year).
    if (*m.run_at > now + kMaxDelay || *m.run_at < now - kMaxDelay) {
      return Status::InvalidArgument(
          fmt::format("run_at is more than {} days from now",
                      kMaxDelay.count() / 86400000));
    }
  }
  return ValidateHeaders(m.headers);
}

Status ValidateBatch(std::span<const Message> messages, std::size_t max_payload,
                     Timestamp now) {
  if (messages.empty()) {
    return Status::InvalidArgument("a batch needs at least one message");
  }
  if (messages.size() > kMaxBatch) {
    return Status::TooLarge(fmt::format("batch of {} messages exceeds {}",
                                        messages.size(), kMaxBatch));
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    Status s = ValidateMessage(messages[i], max_payload, now);
    if (s.ok()) s = ValidateDependencies(messages[i], i);
    if (!s.ok()) {
      return messages.size() == 1
                 ? s
                 : s.WithContext(fmt::format("message {}", i + 1));
    }
  }
  return Status::Ok();
}

Status ValidateDependencies(const Message& m, std::size_t index) {
  if (m.depends_on.empty() && m.depends_on_batch.empty()) return Status::Ok();
  const std::size_t n = m.depends_on.size() + m.depends_on_batch.size();
  if (n > kMaxDependencies) {
    return Status::InvalidArgument(
        fmt::format("a message may depend on at most {} others, not {}",
                    kMaxDependencies, n));
  }
  for (std::int64_t id : m.depends_on) {
    if (id <= 0) {
      return Status::InvalidArgument(
          fmt::format("depends_on: {} is not a message id", id));
    }
  }
  for (std::size_t k : m.depends_on_batch) {
    if (k >= index) {
      return Status::InvalidArgument(fmt::format(
          "depends_on_batch: {} is not an earlier message of the batch (this "
          "one is {}; they count from 0)",
          k, index));
    }
  }
  if (m.delay.count() != 0 || m.run_at) {
    return Status::InvalidArgument(
        "a message that depends on others cannot have a delay or run_at: it "
        "is ready when they have completed");
  }
  return Status::Ok();
}

Status ValidateLease(Duration lease) {
  return CheckRange("lease", lease, Duration(1), kMaxLease);
}

Status ValidateClaim(const ClaimOptions& o) {
  if (o.max < 1 || o.max > kMaxClaim) {
    return Status::InvalidArgument(
        fmt::format("max {} is out of range [1, {}]", o.max, kMaxClaim));
  }
  if (o.lease) {
    Status s = ValidateLease(*o.lease);
    if (!s.ok()) return s;
  }
  Status s = CheckRange("wait", o.wait, Duration(0), kMaxWait);
  if (!s.ok()) return s;
  if (o.worker.size() > kMaxWorker) {
    return Status::InvalidArgument(
        fmt::format("worker name longer than {} bytes", kMaxWorker));
  }
  return Status::Ok();
}

Status ValidateList(const ListOptions& o) {
  if (o.limit < 1 || o.limit > kMaxListLimit) {
    return Status::InvalidArgument(fmt::format(
        "limit {} is out of range [1, {}]", o.limit, kMaxListLimit));
  }
  if (o.after_id < 0) {
    return Status::InvalidArgument("after id must not be negative");
  }
  return Status::Ok();
}

Status ValidateKey(std::string_view what, std::string_view key) {
  if (key.empty() || key.size() > kMaxKey) {
    return Status::InvalidArgument(fmt::format(
        "{} must be 1 to {} bytes, not {}", what, kMaxKey, key.size()));
  }
  if (!IsUtf8(key) || key.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument(
        fmt::format("{} must be UTF-8 text without NUL bytes", what));
  }
  return Status::Ok();
}

Status ValidatePayloadLimit(std::size_t limit) {
  if (limit < 1 || limit > kMaxPayloadLimit) {
    return Status::InvalidArgument(
        fmt::format("max payload {} bytes is out of range [1, {}]", limit,
                    kMaxPayloadLimit));
  }
  return Status::Ok();
}

Status ValidateRingOptions(const RingOptions& o) {
  if (o.capacity < 1 || o.capacity > kMaxCapacity) {
    return Status::InvalidArgument(fmt::format(
        "capacity {} is out of range [1, {}]", o.capacity, kMaxCapacity));
  }
  return ValidatePayloadLimit(o.max_payload_bytes);
}

Status ValidateRotationOptions(const RotationOptions& o) {
  if (o.max_failures < 1 || o.max_failures > 1000000) {
    return Status::InvalidArgument(fmt::format(
        "max failures {} is out of range [1, 1000000]", o.max_failures));
  }
  return ValidatePayloadLimit(o.max_payload_bytes);
}

Status ValidatePayload(std::string_view payload, std::size_t max_payload) {
  if (payload.size() > max_payload) {
    return Status::TooLarge(
        fmt::format("payload of {} bytes exceeds the limit of {} bytes",
                    payload.size(), max_payload));
  }
  return Status::Ok();
}

}  // namespace sqlq::core
