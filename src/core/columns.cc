#include "core/columns.h"

#include <fmt/format.h>

#include <charconv>
#include <nlohmann/json.hpp>

#include "core/rows.h"
#include "core/validate.h"
#include "sqlq/text.h"

namespace sqlq::core {

namespace {

bool IsHeaderKeyChar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.' || c == ':';
}

// Length of the UTF-8 sequence starting at s[i] when it is well formed
// (IsUtf8's rules), else 0.
std::size_t Utf8Length(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  std::size_t n = c < 0x80         ? 1
                  : (c >> 5) == 6  ? 2
                  : (c >> 4) == 14 ? 3
                  : (c >> 3) == 30 ? 4
                                   : 0;
  if (n == 0 || i + n > s.size()) return 0;
  return IsUtf8(s.substr(i, n)) ? n : 0;
}

}  // namespace

namespace {

// The limits of a map of names to text (headers, labels).
struct PairLimits {
  std::size_t count, value, total;
  const char* what;  // "header", "label"
};

Status ValidatePairs(const std::map<std::string, std::string>& pairs,
                     const PairLimits& l) {
  if (pairs.size() > l.count) {
    return Status::InvalidArgument(fmt::format(
        "{} {}s are more than the {} allowed", pairs.size(), l.what, l.count));
  }
  std::size_t total = 0;
  for (const auto& [key, value] : pairs) {
    if (key.empty() || key.size() > kMaxHeaderKey) {
      return Status::InvalidArgument(
          fmt::format("{} name '{}' must be 1 to {} bytes", l.what,
                      key.substr(0, 80), kMaxHeaderKey));
    }
    for (unsigned char c : key) {
      if (!IsHeaderKeyChar(c)) {
        return Status::InvalidArgument(fmt::format(
            "{} name '{}': only letters, digits, '_', '-', '.' and ':' "
            "are allowed",
            l.what,
            IsUtf8(key) ? key.substr(0, 80) : std::string("(not UTF-8)")));
      }
    }
    if (value.size() > l.value) {
      return Status::InvalidArgument(
          fmt::format("{} '{}' has a value of {} bytes, more than {}", l.what,
                      key, value.size(), l.value));
    }
    if (!IsUtf8(value) || value.find('\0') != std::string::npos) {
      return Status::InvalidArgument(fmt::format(
          "{} '{}' must have a UTF-8 value without NUL bytes", l.what, key));
    }
    total += key.size() + value.size();
  }
  if (total > l.total) {
    return Status::InvalidArgument(
        fmt::format("{}s of {} bytes (names and values) exceed {}", l.what,
                    total, l.total));
  }
  return Status::Ok();
}

}  // namespace

Status ValidateHeaders(const Headers& headers) {
  auto reserved = headers.lower_bound(std::string(kReservedPrefix));
  if (reserved != headers.end() &&
      reserved->first.starts_with(kReservedPrefix)) {
    return Status::InvalidArgument(fmt::format(
        "header name '{}': names beginning with '{}' are sqlq's own (a "
        "message's kind is its kind field)",
        reserved->first.substr(0, 80), kReservedPrefix));
  }
  return ValidatePairs(headers, {.count = kMaxHeaders,
                                 .value = kMaxHeaderValue,
                                 .total = kMaxHeaderBytes,
                                 .what = "header"});
}

Status ValidateLabels(const std::map<std::string, std::string>& labels) {
  return ValidatePairs(labels, {.count = kMaxLabels,
                                .value = kMaxLabelValue,
                                .total = kMaxLabelValue * 4,
                                .what = "label"});
}

Status ValidateToken(std::string_view what, std::string_view text,
                     std::size_t max) {
  if (text.size() > max) {
    return Status::InvalidArgument(fmt::format(
        "{} of {} bytes is longer than {}", what, text.size(), max));
  }
  for (unsigned char c : text) {
    if (!IsHeaderKeyChar(c) && c != '/') {
      return Status::InvalidArgument(fmt::format(
          "{} '{}' has a character other than ASCII letters, digits and "
          "'_', '-', '.', ':', '/'",
          what,
          IsUtf8(text) ? text.substr(0, 64) : std::string_view("(not UTF-8)")));
    }
  }
  return Status::Ok();
}

Status ValidateKind(std::string_view kind) {
  return ValidateToken("kind", kind, kMaxKind);
}

std::string EncodeMessageHeaders(const Message& m) {
  if (m.kind.empty() && !m.timeout && !m.expire_after &&
      m.on_expiry == ExpiryAction::kDeadLetter && !m.max_attempts &&
      !m.backoff_base && !m.backoff_max) {
    return EncodeHeaders(m.headers);
  }
  nlohmann::json obj = nlohmann::json::object();
  for (const auto& [key, value] : m.headers) obj[key] = value;
  if (!m.kind.empty()) obj[std::string(kKindHeader)] = m.kind;
  // Header values are text: the durations as decimal milliseconds.
  if (m.timeout)
    obj[std::string(kTimeoutHeader)] = fmt::to_string(m.timeout->count());
  if (m.expire_after) {
    obj[std::string(kExpireHeader)] = fmt::to_string(m.expire_after->count());
  }
  if (m.on_expiry != ExpiryAction::kDeadLetter) {
    obj[std::string(kOnExpiryHeader)] = ExpiryActionName(m.on_expiry);
  }
  if (m.max_attempts) {
    obj[std::string(kMaxAttemptsHeader)] = fmt::to_string(*m.max_attempts);
  }
  if (m.backoff_base) {
    obj[std::string(kBackoffHeader)] = fmt::to_string(m.backoff_base->count());
  }
  if (m.backoff_max) {
    obj[std::string(kBackoffMaxHeader)] =
        fmt::to_string(m.backoff_max->count());
  }
  return obj.dump();
}

namespace {

// A number a reserved header keeps, at least `min`; unset when the text is
// not one (a hand-written row).
std::optional<std::int64_t> NumberOf(const std::string& text,
                                     std::int64_t min) {
  std::int64_t n = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < min) {
    return std::nullopt;
  }
  return n;
}

std::optional<Duration> MillisOf(const std::string& text, std::int64_t min) {
  auto n = NumberOf(text, min);
  if (!n) return std::nullopt;
  return Duration(*n);
}

}  // namespace

Headers DecodeMessageHeaders(std::string_view text, JobFields& job) {
  Headers out = DecodeHeaders(text);
  BatchRef batch;
  BatchCounts counts;
  int counted = 0;
  auto count = [&](const std::string& v, std::int64_t& into) {
    if (auto n = NumberOf(v, 0)) {
      into = *n;
      ++counted;
    }
  };
  for (auto it = out.lower_bound(std::string(kReservedPrefix));
       it != out.end() && it->first.starts_with(kReservedPrefix);) {
    if (it->first == kKindHeader) {
      job.kind = std::move(it->second);
    } else if (it->first == kTimeoutHeader) {
      job.timeout = MillisOf(it->second, 1);
    } else if (it->first == kExpireHeader) {
      job.expire_after = MillisOf(it->second, 1);
    } else if (it->first == kOnExpiryHeader) {
      // Another text (a hand-written row) keeps the default.
      auto action = ParseExpiryAction(it->second);
      if (action.ok()) job.on_expiry = *action;
    } else if (it->first == kMaxAttemptsHeader) {
      if (auto n = NumberOf(it->second, 1); n && *n <= 1'000'000) {
        job.max_attempts = static_cast<int>(*n);
      }
    } else if (it->first == kBackoffHeader) {
      job.backoff_base = MillisOf(it->second, 0);
    } else if (it->first == kBackoffMaxHeader) {
      job.backoff_max = MillisOf(it->second, 0);
    } else if (it->first == kBatchHeader) {
      batch.id = it->second;
    } else if (it->first == kBatchCallbackHeader) {
      batch.callback = it->second == "1";
    } else if (it->first == kBatchTotalHeader) {
      count(it->second, counts.total);
    } else if (it->first == kBatchCompletedHeader) {
      count(it->second, counts.completed);
    } else if (it->first == kBatchDeadHeader) {
      count(it->second, counts.dead);
    } else if (it->first == kBatchCancelledHeader) {
      count(it->second, counts.cancelled);
    } else if (it->first == kParentsHeader) {
      job.parents = ParseParents(it->second);
    }
    it = out.erase(it);
  }
  if (!batch.id.empty()) {
    if (batch.callback && counted == 4) batch.counts = counts;
    job.batch = std::move(batch);
  }
  return out;
}

std::string ParentsText(const std::vector<ParentRef>& parents) {
  std::string out;
  for (const ParentRef& p : parents) {
    if (!out.empty()) out += ',';
    out += p.queue;
    out += ':';
    out += fmt::to_string(p.id);
  }
  return out;
}

std::vector<ParentRef> ParseParents(std::string_view text) {
  std::vector<ParentRef> out;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view()
                                           : text.substr(comma + 1);
    const std::size_t colon = item.rfind(':');
    if (colon == std::string_view::npos) continue;
    auto id = NumberOf(std::string(item.substr(colon + 1)), 1);
    if (!id) continue;
    out.push_back({.queue = std::string(item.substr(0, colon)), .id = *id});
  }
  return out;
}

std::string EncodeHeaders(const Headers& headers) {
  if (headers.empty()) return {};
  nlohmann::json obj = nlohmann::json::object();
  for (const auto& [key, value] : headers) obj[key] = value;
  return obj.dump();
}

Headers DecodeHeaders(std::string_view text) {
  Headers out;
  if (text.empty()) return out;
  auto obj = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!obj.is_object()) return out;
  for (const auto& [key, value] : obj.items()) {
    if (value.is_string()) out[key] = value.get<std::string>();
  }
  return out;
}

std::vector<AttemptError> DecodeErrors(std::string_view text) {
  std::vector<AttemptError> out;
  if (text.empty()) return out;
  auto arr = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!arr.is_array()) return out;
  for (const auto& e : arr) {
    if (!e.is_object()) continue;
    AttemptError a;
    if (auto it = e.find("attempt"); it != e.end() && it->is_number()) {
      a.attempt = it->get<int>();
    }
    if (auto it = e.find("at"); it != e.end() && it->is_number()) {
      a.at = FromUs(it->get<std::int64_t>());
    }
    if (auto it = e.find("error"); it != e.end() && it->is_string()) {
      a.error = it->get<std::string>();
    }
    out.push_back(std::move(a));
  }
  return out;
}

std::string CleanErrorText(std::string_view error) {
  error = error.substr(0, kMaxErrorText);
  std::string out;
  out.reserve(error.size());
  for (std::size_t i = 0; i < error.size();) {
    std::size_t n = Utf8Length(error, i);
    if (n == 0 || error[i] == '\0') {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    out.append(error.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace sqlq::core
