#include "server/auth.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

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

using Hash = std::array<unsigned char, 32>;

Hash Sha256(std::string_view text) {
  Hash h{};
  unsigned int n = 0;
  EVP_Digest(text.data(), text.size(), h.data(), &n, EVP_sha256(), nullptr);
  return h;
}

Result<unsigned> ParsePermission(std::string_view word) {
  if (word == "send") return unsigned{kSend};
  if (word == "claim") return unsigned{kClaim};
  if (word == "metrics") return unsigned{kMetrics};
  if (word == "admin") return unsigned{kAdmin | kSend | kClaim | kMetrics};
  return Status::InvalidArgument(fmt::format(
      "unknown permission '{}' (expected send, claim, metrics or admin)",
      word));
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

// A token read from the file, with where it was (for errors).
struct Parsed {
  std::string token;
  std::string where;  // "line 3", "tokens[2]"
  std::vector<Grant> grants;
};

Result<std::vector<Parsed>> ParseJson(const std::string& text) {
  auto doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded()) {
    return Status::InvalidArgument("not valid JSON");
  }
  if (!doc.is_object() || !doc.contains("tokens") ||
      !doc["tokens"].is_array()) {
    return Status::InvalidArgument(
        "expected a JSON object with a \"tokens\" array");
  }
  for (const auto& [key, value] : doc.items()) {
    if (key != "tokens") {
      return Status::InvalidArgument(
          fmt::format("unknown field \"{}\" (expected only \"tokens\")", key));
    }
  }
  std::vector<Parsed> out;
  for (std::size_t i = 0; i < doc["tokens"].size(); ++i) {
    const auto& t = doc["tokens"][i];
    const std::string where = fmt::format("tokens[{}]", i);
    auto at = [&](std::string_view what) {
      return Status::InvalidArgument(fmt::format("{}: {}", where, what));
    };
    if (!t.is_object() || !t.contains("token") || !t["token"].is_string() ||
        !t.contains("grants") || !t["grants"].is_object()) {
      return at("needs \"token\" (a string) and \"grants\" (an object)");
    }
    for (const auto& [key, value] : t.items()) {
      if (key != "token" && key != "grants") {
        return at(fmt::format(
            "unknown field \"{}\" (expected \"token\" and \"grants\")", key));
      }
    }
    Parsed e{.token = t["token"].get<std::string>(), .where = where};
    if (Status s = CheckToken(e.token); !s.ok()) return at(s.message());
    for (const auto& [pattern, perms] : t["grants"].items()) {
      if (!perms.is_array() || perms.empty()) {
        return at(fmt::format(
            "grants of '{}' must be a non-empty array of permissions",
            pattern));
      }
      Grant g{.pattern = pattern};
      for (const auto& p : perms) {
        if (!p.is_string()) return at("permissions are strings");
        auto bits = ParsePermission(p.get<std::string>());
        if (!bits.ok()) return at(bits.status().message());
        g.permissions |= *bits;
      }
      e.grants.push_back(std::move(g));
    }
    if (e.grants.empty()) return at("a token needs at least one grant");
    out.push_back(std::move(e));
  }
  return out;
}

Result<std::vector<Parsed>> ParseLines(const std::string& text) {
  std::vector<Parsed> out;
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
    Parsed e{.token = token, .where = fmt::format("line {}", number)};
    std::string grant;
    while (words >> grant) {
      auto colon = grant.find(':');
      if (colon == std::string::npos || colon == 0 ||
          colon + 1 == grant.size()) {
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
  // Editors on some systems start UTF-8 files with a byte order mark.
  if (text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);
  auto first = text.find_first_not_of(" \t\r\n");
  auto parsed = (first != std::string::npos && text[first] == '{')
                    ? ParseJson(text)
                    : ParseLines(text);
  if (!parsed.ok()) {
    return parsed.status().WithContext(fmt::format("token file '{}'", path));
  }
  if (parsed->empty()) {
    return Status::InvalidArgument(
        fmt::format("token file '{}' holds no tokens", path));
  }
  Auth a;
  a.enabled_ = true;
  for (std::size_t i = 0; i < parsed->size(); ++i) {
    const Parsed& p = (*parsed)[i];
    for (std::size_t j = 0; j < i; ++j) {
      if ((*parsed)[j].token == p.token) {
        // Two lines for one token would leave only the first's grants in
        // force: say so rather than guess which the writer meant.
        return Status::InvalidArgument(fmt::format(
            "token file '{}': {} repeats the token of {}; give each token "
            "once, with all its grants",
            path, p.where, (*parsed)[j].where));
      }
    }
    a.tokens_.push_back({.hash = Sha256(p.token), .grants = p.grants});
  }
  return a;
}

const TokenEntry* Auth::Find(std::string_view token) const {
  // Every entry is compared, each in constant time, whatever matches: the
  // time taken depends on neither the token's length nor its content.
  const Hash h = Sha256(token);
  const TokenEntry* found = nullptr;
  for (const TokenEntry& e : tokens_) {
    const bool same = CRYPTO_memcmp(e.hash.data(), h.data(), h.size()) == 0;
    found = same ? &e : found;
  }
  return found;
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

bool Auth::ReadsMetrics(const TokenEntry& entry) {
  for (const Grant& g : entry.grants) {
    if ((g.permissions & (kMetrics | kAdmin)) != 0) return true;
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
