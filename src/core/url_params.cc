#include "core/url_params.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>

namespace sqlq::core {

Result<std::int64_t> ParseUrlInt(std::string_view name, std::string_view value,
                                 std::int64_t min, std::int64_t max) {
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc() || p != value.data() + value.size() ||
      v < min || v > max) {
    return Status::InvalidArgument(
        fmt::format("database URL parameter {}={}: expected an integer in "
                    "{}..{}",
                    name, value, min, max));
  }
  return v;
}

Result<bool> ParseUrlBool(std::string_view name, std::string_view value) {
  std::string v(value);
  std::transform(v.begin(), v.end(), v.begin(),
                 [](unsigned char ch) { return std::tolower(ch); });
  if (v == "on" || v == "true" || v == "1") return true;
  if (v == "off" || v == "false" || v == "0") return false;
  return Status::InvalidArgument(fmt::format(
      "database URL parameter {}={}: expected on or off", name, value));
}

Result<bool> UrlTuning::Bool(std::string_view name, bool dflt) const {
  auto it = values.find(name);
  if (it == values.end()) return dflt;
  return ParseUrlBool(name, it->second);
}

Result<std::int64_t> UrlTuning::Int(std::string_view name, std::int64_t dflt,
                                    std::int64_t min, std::int64_t max) const {
  auto it = values.find(name);
  if (it == values.end()) return dflt;
  return ParseUrlInt(name, it->second, min, max);
}

UrlTuning TakeUrlParams(std::string_view url,
                        std::span<const std::string_view> names) {
  UrlTuning out;
  const auto q = url.find('?');
  if (q == std::string_view::npos) {
    out.rest = std::string(url);
    return out;
  }
  out.rest = std::string(url.substr(0, q));
  std::string kept;
  std::string_view query = url.substr(q + 1);
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view kv = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{}
                                          : query.substr(amp + 1);
    const std::string_view key = kv.substr(0, kv.find('='));
    if (std::find(names.begin(), names.end(), key) != names.end()) {
      const auto eq = kv.find('=');
      out.values[std::string(key)] =
          eq == std::string_view::npos ? "" : std::string(kv.substr(eq + 1));
      continue;
    }
    if (kv.empty()) continue;
    kept += kept.empty() ? "" : "&";
    kept += kv;
  }
  if (!kept.empty()) out.rest += "?" + kept;
  return out;
}

}  // namespace sqlq::core
