#include "server/auth.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace sqlq::server {

bool GlobMatch(std::string_view p, std::string_view s) {
  // Iterative matcher with one backtrack point for the last '*'.
  std::size_t pi = 0, si = 0, star = std::string_view::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == s[si])) {
      ++pi;
      ++si;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = si;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

namespace {

Result<unsigned> ParsePermission(std::string_view word) {
  if (word == "send") return unsigned{kSend};
  if (word == "claim") return unsigned{kClaim};
  if (word == "admin") return unsigned{kAdmin | kSend | kClaim};
  return Status::InvalidArgument(fmt::format(
      "unknown permission '{}' (expected send, claim or admin)", word));
}

Status CheckToken(std::string_view token) {
  if (token.size() < 8) {
    return Status::InvalidArgument("tokens must be at least 8 characters");
  }
  for (char c : token) {
    if (c <= ' ' || c == 0x7f) {
      return Status::InvalidArgument(
          "tokens must not contain spaces or control characters");
    }
  }
  return Status::Ok();
}

Result<std::vector<TokenEntry>> ParseJson(const std::string& text) {
  auto doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("tokens") ||
      !doc["tokens"].is_array()) {
    return Status::InvalidArgument(
        "expected a JSON object with a \"tokens\" array");
  }
  std::vector<TokenEntry> out;
  for (const auto& t : doc["tokens"]) {
    if (!t.is_object() || !t.contains("token") || !t["token"].is_string() ||
        !t.contains("grants") || !t["grants"].is_object()) {
      return Status::InvalidArgument(
          "each token needs \"token\" (string) and \"grants\" (object)");
    }
    TokenEntry e{.token = t["token"].get<std::string>()};
    if (Status s = CheckToken(e.token); !s.ok()) return s;
    for (const auto& [pattern, perms] : t["grants"].items()) {
      if (!perms.is_array()) {
        return Status::InvalidArgument(fmt::format(
            "grants of '{}' must be an array of permissions", pattern));
      }
      Grant g{.pattern = pattern};
      for (const auto& p : perms) {
        if (!p.is_string()) {
          return Status::InvalidArgument("permissions are strings");
        }
        auto bits = ParsePermission(p.get<std::string>());
        if (!bits.ok()) return bits.status();
        g.permissions |= *bits;
      }
      e.grants.push_back(std::move(g));
    }
    out.push_back(std::move(e));
  }
  return out;
}

Result<std::vector<TokenEntry>> ParseLines(const std::string& text) {
  std::vector<TokenEntry> out;
  std::istringstream in(text);
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (auto hash = line.find('#'); hash != std::string::npos) {
      line.resize(hash);
    }
    std::istringstream words(line);
    std::string token;
    if (!(words >> token)) continue;
    auto at = [&](const Status& s) {
      return Status::InvalidArgument(
          fmt::format("line {}: {}", number, s.message()));
    };
    if (Status s = CheckToken(token); !s.ok()) return at(s);
    TokenEntry e{.token = token};
    std::string grant;
    while (words >> grant) {
      auto colon = grant.find(':');
      if (colon == std::string::npos || colon + 1 == grant.size()) {
        return at(Status::InvalidArgument(
            fmt::format("'{}' is not PERM[,PERM]:PATTERN", grant)));
      }
      Grant g{.pattern = grant.substr(colon + 1)};
      std::string_view perms(grant.data(), colon);
      while (!perms.empty()) {
        auto comma = perms.find(',');
        auto bits = ParsePermission(perms.substr(0, comma));
        if (!bits.ok()) return at(bits.status());
        g.permissions |= *bits;
        perms = comma == std::string_view::npos ? std::string_view()
                                                : perms.substr(comma + 1);
      }
      e.grants.push_back(std::move(g));
    }
    if (e.grants.empty()) {
      return at(Status::InvalidArgument("a token needs at least one grant"));
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

Result<Auth> Auth::Load(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Status::NotFound(fmt::format("cannot read '{}'", path));
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  auto first = text.find_first_not_of(" \t\r\n");
  auto entries = (first != std::string::npos && text[first] == '{')
                     ? ParseJson(text)
                     : ParseLines(text);
  if (!entries.ok()) {
    return entries.status().WithContext(fmt::format("token file '{}'", path));
  }
  if (entries->empty()) {
    return Status::InvalidArgument(
        fmt::format("token file '{}' holds no tokens", path));
  }
  Auth a;
  a.enabled_ = true;
  a.tokens_ = std::move(*entries);
  return a;
}

const TokenEntry* Auth::Find(std::string_view token) const {
  for (const TokenEntry& e : tokens_) {
    // Constant-time comparison, so that timing does not reveal a prefix.
    if (e.token.size() != token.size()) continue;
    unsigned char diff = 0;
    for (std::size_t i = 0; i < token.size(); ++i) {
      diff |= static_cast<unsigned char>(e.token[i] ^ token[i]);
    }
    if (diff == 0) return &e;
  }
  return nullptr;
}

bool Auth::Allows(const TokenEntry& entry, unsigned perm,
                  std::string_view name) {
  for (const Grant& g : entry.grants) {
    if ((g.permissions & perm) == perm && GlobMatch(g.pattern, name)) {
      return true;
    }
  }
  return false;
}

bool Auth::Sees(const TokenEntry& entry, std::string_view name) {
  for (const Grant& g : entry.grants) {
    if (g.permissions != 0 && GlobMatch(g.pattern, name)) return true;
  }
  return false;
}

}  // namespace sqlq::server
