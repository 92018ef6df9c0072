#include "server/auth.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "server/log.h"
#include "server/target.h"  // HexOf, HexDigit

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

constexpr std::string_view kHashPrefix = "sha256:";

// A token's hash as written in the file: 64 hex digits (either case).
Result<Hash> ParseHash(std::string_view hex) {
  Hash h{};
  const Status bad = Status::InvalidArgument(
      "a token's SHA-256 is 64 hex digits (sqlq token hash prints it)");
  if (hex.size() != 2 * h.size()) return bad;
  for (std::size_t i = 0; i < h.size(); ++i) {
    const int hi = HexDigit(hex[2 * i]);
    const int lo = HexDigit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return bad;
    h[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return h;
}

}  // namespace

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

Result<std::string> NewToken() {
  std::array<unsigned char, 32> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    return Status::Internal("the system's random number generator failed");
  }
  return HexOf(bytes.data(), bytes.size());
}

namespace {

// AWS access key ids are letters and digits (AKIA...), and a secret is
// what the SDKs' signing takes as it is: neither may hold spaces, and an
// id no '/' (it is a field of the signature's Credential).
Status CheckKey(std::string_view id, std::string_view secret) {
  if (id.size() < 4 || id.size() > 128 ||
      !std::all_of(id.begin(), id.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) != 0;
      })) {
    return Status::InvalidArgument(
        "an access key id is 4 to 128 letters and digits");
  }
  if (secret.size() < 16 || secret.size() > 256) {
    return Status::InvalidArgument(
        "a secret access key is 16 to 256 characters");
  }
  for (char c : secret) {
    if (c <= ' ' || c == 0x7f) {
      return Status::InvalidArgument(
          "a secret access key must not contain spaces or control "
          "characters");
    }
  }
  return Status::Ok();
}

// A token (or its hash), or an access key, read from the file, with where
// it was (for errors).
struct Parsed {
  Hash hash{};         // a token's
  std::string id;      // an access key's id
  std::string secret;  // an access key's; empty for a token
  std::string where;   // "line 3", "tokens[2]", "keys[0]"
  std::vector<Grant> grants;
  bool key() const { return !secret.empty(); }
};

// `grants` ({"PATTERN": ["PERM", ...], ...}) added to `e`.
Status JsonGrants(const nlohmann::json& grants, Parsed& e) {
  for (const auto& [pattern, perms] : grants.items()) {
    if (!perms.is_array() || perms.empty()) {
      return Status::InvalidArgument(fmt::format(
          "grants of '{}' must be a non-empty array of permissions", pattern));
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
  if (e.grants.empty()) {
    return Status::InvalidArgument(
        e.secret.empty() ? "a token needs at least one grant"
                         : "an access key needs at least one grant");
  }
  return Status::Ok();
}

Result<std::vector<Parsed>> ParseJson(const std::string& text) {
  auto doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded()) {
    return Status::InvalidArgument("not valid JSON");
  }
  if (!doc.is_object() || (!doc.contains("tokens") && !doc.contains("keys"))) {
    return Status::InvalidArgument(
        "expected a JSON object with a \"tokens\" or \"keys\" array");
  }
  for (const auto& [key, value] : doc.items()) {
    if (key != "tokens" && key != "keys") {
      return Status::InvalidArgument(fmt::format(
          "unknown field \"{}\" (expected \"tokens\" and \"keys\")", key));
    }
    if (!value.is_array()) {
      return Status::InvalidArgument(
          fmt::format("\"{}\" must be an array", key));
    }
  }
  std::vector<Parsed> out;
  const nlohmann::json none = nlohmann::json::array();
  const nlohmann::json& tokens = doc.contains("tokens") ? doc["tokens"] : none;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto& t = tokens[i];
    const std::string where = fmt::format("tokens[{}]", i);
    auto at = [&](std::string_view what) {
      return Status::InvalidArgument(fmt::format("{}: {}", where, what));
    };
    if (!t.is_object() || t.contains("token") == t.contains("sha256") ||
        !(t.contains("token") ? t["token"] : t["sha256"]).is_string() ||
        !t.contains("grants") || !t["grants"].is_object()) {
      return at(
          "needs \"token\" or \"sha256\" (a string) and \"grants\" (an "
          "object)");
    }
    for (const auto& [key, value] : t.items()) {
      if (key != "token" && key != "sha256" && key != "grants") {
        return at(fmt::format(
            "unknown field \"{}\" (expected \"token\" or \"sha256\", and "
            "\"grants\")",
            key));
      }
    }
    Parsed e{.where = where};
    if (t.contains("token")) {
      const std::string token = t["token"].get<std::string>();
      if (Status s = CheckToken(token); !s.ok()) return at(s.message());
      e.hash = Sha256(token);
    } else {
      auto h = ParseHash(t["sha256"].get<std::string>());
      if (!h.ok()) return at(h.status().message());
      e.hash = *h;
    }
    if (Status s = JsonGrants(t["grants"], e); !s.ok()) return at(s.message());
    out.push_back(std::move(e));
  }
  const nlohmann::json& keys = doc.contains("keys") ? doc["keys"] : none;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const auto& k = keys[i];
    const std::string where = fmt::format("keys[{}]", i);
    auto at = [&](std::string_view what) {
      return Status::InvalidArgument(fmt::format("{}: {}", where, what));
    };
    if (!k.is_object() || !k.contains("access_key_id") ||
        !k["access_key_id"].is_string() || !k.contains("secret_access_key") ||
        !k["secret_access_key"].is_string() || !k.contains("grants") ||
        !k["grants"].is_object()) {
      return at(
          "needs \"access_key_id\" and \"secret_access_key\" (strings) and "
          "\"grants\" (an object)");
    }
    for (const auto& [key, value] : k.items()) {
      if (key != "access_key_id" && key != "secret_access_key" &&
          key != "grants") {
        return at(
            fmt::format("unknown field \"{}\" (expected \"access_key_id\", "
                        "\"secret_access_key\" and \"grants\")",
                        key));
      }
    }
    Parsed e{.id = k["access_key_id"].get<std::string>(),
             .secret = k["secret_access_key"].get<std::string>(),
             .where = where};
    if (Status s = CheckKey(e.id, e.secret); !s.ok()) {
      return at(s.message());
    }
    if (Status s = JsonGrants(k["grants"], e); !s.ok()) return at(s.message());
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
    Parsed e{.where = fmt::format("line {}", number)};
    // "aws-key" is shorter than any token may be: it cannot be one.
    if (token == "aws-key") {
      if (!(words >> e.id >> e.secret)) {
        return at(Status::InvalidArgument(
            "expected aws-key ID SECRET PERM[,PERM]:PATTERN ..."));
      }
      if (Status s = CheckKey(e.id, e.secret); !s.ok()) return at(s);
    } else if (token.starts_with(kHashPrefix)) {
      auto h = ParseHash(std::string_view(token).substr(kHashPrefix.size()));
      if (!h.ok()) return at(h.status());
      e.hash = *h;
    } else {
      if (Status s = CheckToken(token); !s.ok()) return at(s);
      e.hash = Sha256(token);
    }
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
      return at(Status::InvalidArgument(
          e.secret.empty() ? "a token needs at least one grant"
                           : "an access key needs at least one grant"));
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

std::string TokenHashHex(std::string_view token) {
  const Hash h = Sha256(token);
  return HexOf(h.data(), h.size());
}

Result<std::shared_ptr<const Auth::Table>> Auth::Read(const std::string& path) {
  std::ifstream f(path);
  if (!f) return Status::NotFound(fmt::format("cannot read '{}'", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return Parse(ss.str(), path);
}

Result<std::shared_ptr<const Auth::Table>> Auth::Parse(
    std::string text, const std::string& path) {
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
        fmt::format("token file '{}' holds no tokens or keys", path));
  }
  auto table = std::make_shared<Table>();
  for (std::size_t i = 0; i < parsed->size(); ++i) {
    const Parsed& p = (*parsed)[i];
    for (std::size_t j = 0; j < i; ++j) {
      const Parsed& q = (*parsed)[j];
      if (q.key() == p.key() && (p.key() ? q.id == p.id : q.hash == p.hash)) {
        // Two lines for one token would leave only the first's grants in
        // force: say so rather than guess which the writer meant. (A token
        // and its own hash are the same token.)
        return Status::InvalidArgument(fmt::format(
            "token file '{}': {} repeats the {} of {}; give each once, with "
            "all its grants",
            path, p.where, p.key() ? "access key id" : "token", q.where));
      }
    }
    if (p.key()) {
      KeyEntry k;
      k.grants = p.grants;
      k.id = p.id;
      k.secret = p.secret;
      table->keys.push_back(std::move(k));
    } else {
      table->tokens.push_back({.hash = p.hash, .grants = p.grants});
    }
  }
  return std::shared_ptr<const Table>(std::move(table));
}

Result<Auth> Auth::FromText(std::string text) {
  auto table = Parse(std::move(text), "(text)");
  if (!table.ok()) return table.status();
  Auth a;
  a.enabled_ = true;
  a.table_ = std::move(*table);
  return a;
}

Result<Auth> Auth::Load(const std::string& path) {
  auto table = Read(path);
  if (!table.ok()) return table.status();
  Auth a;
  a.enabled_ = true;
  a.path_ = path;
  a.table_ = std::move(*table);
  return a;
}

Result<Auth::Counts> Auth::Reload() {
  if (!enabled_ || path_.empty()) {
    return Status::FailedPrecondition("the server has no token file");
  }
  auto table = Read(path_);
  if (!table.ok()) return table.status();
  Counts c{.tokens = (*table)->tokens.size(), .keys = (*table)->keys.size()};
  std::lock_guard<std::mutex> lock(*mu_);
  table_ = std::move(*table);
  return c;
}

std::shared_ptr<const Auth::Table> Auth::table() const {
  std::lock_guard<std::mutex> lock(*mu_);
  return table_;
}

Auth::Counts Auth::counts() const {
  auto t = table();
  return {.tokens = t->tokens.size(), .keys = t->keys.size()};
}

std::shared_ptr<const TokenEntry> Auth::Find(std::string_view token) const {
  // Every entry is compared, each in constant time, whatever matches: the
  // time taken depends on neither the token's length nor its content.
  const Hash h = Sha256(token);
  auto t = table();
  const TokenEntry* found = nullptr;
  for (const TokenEntry& e : t->tokens) {
    const bool same = CRYPTO_memcmp(e.hash.data(), h.data(), h.size()) == 0;
    found = same ? &e : found;
  }
  // Shares the table's ownership: a reload does not free it under us.
  if (found == nullptr) return nullptr;
  return std::shared_ptr<const TokenEntry>(std::move(t), found);
}

std::shared_ptr<const KeyEntry> Auth::FindKey(std::string_view id) const {
  // Ids are not secret (they travel in the clear in every request).
  auto t = table();
  for (const KeyEntry& k : t->keys) {
    if (k.id == id) return std::shared_ptr<const KeyEntry>(t, &k);
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

double AuthFailures::LeftAt(const Tries& t, Clock::time_point now) const {
  const double earned = std::chrono::duration<double>(now - t.at) /
                        std::chrono::duration<double>(refill_);
  return std::min<double>(burst_, t.left + std::max(0.0, earned));
}

std::chrono::milliseconds AuthFailures::Blocked(const std::string& address,
                                                Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = tries_.find(address);
  if (it == tries_.end()) return std::chrono::milliseconds(0);
  const double left = LeftAt(it->second, now);
  if (left >= 1) return std::chrono::milliseconds(0);
  const auto wait =
      std::chrono::duration<double, std::milli>(refill_) * (1 - left);
  return std::chrono::ceil<std::chrono::milliseconds>(wait);
}

bool AuthFailures::Failed(const std::string& address, std::string_view what,
                          Clock::time_point now) {
  const bool blocked = Count(address, now);
  Log("warn", "auth_failed",
      fmt::format("peer={} credential={}", Quote(address), what));
  if (blocked) {
    Log("warn", "auth_blocked",
        fmt::format("peer={} failures={} retry_after_ms={}", Quote(address),
                    burst_, Blocked(address, now).count()));
  }
  return blocked;
}

bool AuthFailures::Count(const std::string& address, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  // Addresses whose tries are all back are forgotten, so that a scan of
  // many addresses costs memory only while it lasts.
  if (tries_.size() >= 4096) {
    std::erase_if(
        tries_, [&](const auto& e) { return LeftAt(e.second, now) >= burst_; });
    // Past this many addresses failing at once, memory matters more than
    // the count of each: start again.
    if (tries_.size() >= kMaxAddresses) tries_.clear();
  }
  auto [it, fresh] =
      tries_.try_emplace(address, Tries{static_cast<double>(burst_), now});
  Tries& t = it->second;
  t.left = LeftAt(t, now) - 1;
  t.at = now;
  return t.left < 1 && t.left >= 0;
}

}  // namespace sqlq::server
