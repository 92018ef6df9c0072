#include "server/trace.h"

#include "server/ascii.h"

namespace sqlq::server {

namespace {

bool IsLowerHex(std::string_view s) {
  return !s.empty() &&
         s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// The value of `key` (as "Parent=") among an X-Ray header's ;-separated
// fields, or "".
std::string_view XRayField(std::string_view xray, std::string_view key) {
  for (std::size_t at = 0; at < xray.size();) {
    std::size_t end = xray.find(';', at);
    if (end == std::string_view::npos) end = xray.size();
    std::string_view field = xray.substr(at, end - at);
    while (!field.empty() && field.front() == ' ') field.remove_prefix(1);
    if (field.starts_with(key)) return field.substr(key.size());
    at = end + 1;
  }
  return {};
}

}  // namespace

std::string TraceIdOf(std::string_view traceparent, std::string_view xray) {
  // version "-" trace-id "-" parent-id "-" flags; a later version may add
  // fields after a "-"; version ff and an all-zero id are invalid.
  const std::string_view t = traceparent;
  if (t.size() >= 55 && t[2] == '-' && t[35] == '-' && t[52] == '-' &&
      (t.size() == 55 || t[55] == '-') && IsLowerHex(t.substr(0, 2)) &&
      t.substr(0, 2) != "ff" && IsLowerHex(t.substr(3, 32)) &&
      t.substr(3, 32) != std::string(32, '0') && IsLowerHex(t.substr(36, 16))) {
    return std::string(t.substr(3, 32));
  }
  // Root=1-<8 hex: the epoch seconds>-<24 hex>.
  const std::string_view root = XRayField(xray, "Root=1-");
  if (root.size() == 8 + 1 + 24 && root[8] == '-') {
    std::string id = AsciiLower(root.substr(0, 8)) + AsciiLower(root.substr(9));
    if (IsLowerHex(id)) return id;
  }
  return "";
}

std::optional<std::string> TraceparentOfXRay(std::string_view xray) {
  const std::string trace = TraceIdOf("", xray);
  const std::string parent = AsciiLower(XRayField(xray, "Parent="));
  if (trace.empty() || parent.size() != 16 || !IsLowerHex(parent) ||
      parent == std::string(16, '0')) {
    return std::nullopt;
  }
  const bool sampled = XRayField(xray, "Sampled=") == "1";
  return "00-" + trace + "-" + parent + (sampled ? "-01" : "-00");
}

std::optional<std::string> XRayOfTraceparent(std::string_view traceparent) {
  const std::string trace = TraceIdOf(traceparent, "");
  if (trace.empty()) return std::nullopt;
  const std::string_view parent = traceparent.substr(36, 16);
  const std::string_view flag_digits = traceparent.substr(53, 2);
  if (parent == std::string_view("0000000000000000") ||
      !IsLowerHex(flag_digits)) {
    return std::nullopt;
  }
  const int flags = std::stoi(std::string(flag_digits), nullptr, 16);
  return "Root=1-" + trace.substr(0, 8) + "-" + trace.substr(8) +
         ";Parent=" + std::string(parent) +
         ";Sampled=" + ((flags & 1) != 0 ? "1" : "0");
}

}  // namespace sqlq::server
