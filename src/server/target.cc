#include "server/target.h"

#include "server/reply.h"
#include "sqlq/text.h"

namespace sqlq::server {

std::string HexOf(const unsigned char* p, std::size_t n) {
  std::string out;
  AppendHex(out, std::string_view(reinterpret_cast<const char*>(p), n));
  return out;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string PercentDecode(std::string_view in, bool plus_is_space) {
  std::string out;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%') {
      int hi = i + 2 < in.size() ? HexDigit(in[i + 1]) : -1;
      int lo = i + 2 < in.size() ? HexDigit(in[i + 2]) : -1;
      if (i + 2 >= in.size() || hi < 0 || lo < 0) {
        throw HttpError{400, "bad_request",
                        "malformed percent-encoding in the URL"};
      }
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (in[i] == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += in[i];
    }
  }
  return out;
}

std::vector<std::pair<std::string_view, std::string_view>> SplitPairs(
    std::string_view text) {
  std::vector<std::pair<std::string_view, std::string_view>> out;
  while (!text.empty()) {
    const auto amp = text.find('&');
    const std::string_view pair = text.substr(0, amp);
    const auto eq = pair.find('=');
    if (!pair.empty()) {
      out.emplace_back(pair.substr(0, eq), eq == std::string_view::npos
                                               ? std::string_view()
                                               : pair.substr(eq + 1));
    }
    text = amp == std::string_view::npos ? "" : text.substr(amp + 1);
  }
  return out;
}

std::size_t CountPairs(std::string_view text, std::size_t stop) {
  std::size_t n = 0;
  while (!text.empty() && n < stop) {
    const auto amp = text.find('&');
    if (amp != 0) ++n;  // an empty pair ("&&") is skipped, as SplitPairs does
    text = amp == std::string_view::npos ? "" : text.substr(amp + 1);
  }
  return n;
}

void AddDecodedPairs(std::string_view text,
                     std::map<std::string, std::string>& out) {
  for (const auto& [name, value] : SplitPairs(text)) {
    out[PercentDecode(name, true)] = PercentDecode(value, true);
  }
}

Target ParseTarget(std::string_view target) {
  Target t;
  auto q = target.find('?');
  std::string_view path = target.substr(0, q);
  if (q != std::string_view::npos)
    AddDecodedPairs(target.substr(q + 1), t.query);
  if (path.empty() || path[0] != '/') {
    throw HttpError{400, "bad_request",
                    "the request target must be an absolute path"};
  }
  path.remove_prefix(1);
  while (!path.empty()) {
    auto slash = path.find('/');
    t.segments.push_back(PercentDecode(path.substr(0, slash)));
    path = slash == std::string_view::npos ? "" : path.substr(slash + 1);
  }
  return t;
}

}  // namespace sqlq::server
