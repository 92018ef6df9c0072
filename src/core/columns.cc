#include "core/columns.h"

#include <fmt/format.h>

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
