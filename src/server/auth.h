// Bearer tokens and their permissions, loaded from the --tokens file
// (format: docs/server.md) at start and again on SIGHUP (Reload). A token
// grants send, claim, metrics and/or admin on the queues, rings and
// rotations whose names match a pattern (`*` and `?` globs). admin includes
// the other three. Only SHA-256 hashes of the tokens are kept (the file may
// hold the hashes alone), and a presented token is compared with every one
// of them in constant time, so that neither its length nor a prefix shows
// in the time a refusal takes.
//
// Thread-safe after Load: lookups and Reload may run concurrently; an entry
// a lookup returned stays valid for as long as it is held, whatever reloads
// come meanwhile.

#ifndef SQLQ_SERVER_AUTH_H_
#define SQLQ_SERVER_AUTH_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sqlq/status.h"

namespace sqlq::server {

enum Permission : unsigned { kSend = 1, kClaim = 2, kAdmin = 4, kMetrics = 8 };

struct Grant {
  std::string pattern;
  unsigned permissions = 0;
};

struct TokenEntry {
  std::array<unsigned char, 32> hash{};  // SHA-256 of the token
  std::vector<Grant> grants;
};

// An AWS access key of the SQS endpoint (docs/sqs.md): its id, its secret
// (kept as written, since checking a request's signature needs it; keep
// the file readable by the server's user only) and the grants a token
// would have (`hash` is unused).
struct KeyEntry : TokenEntry {
  std::string id;
  std::string secret;
};

bool GlobMatch(std::string_view pattern, std::string_view name);

// The SHA-256 of a token, as the token file may hold it instead of the
// token (after "sha256:"): 64 lower-case hex digits.
std::string TokenHashHex(std::string_view token);
// Whether `token` may be a token: at least 8 characters, no spaces or
// control characters (kInvalidArgument saying which).
Status CheckToken(std::string_view token);
// A new token: 32 random bytes (the system's CSPRNG) as 64 hex digits.
Result<std::string> NewToken();

class Auth {
 public:
  // Reads a token file: a JSON document
  //   {"tokens":[{"token":"...","grants":{"jobs-*":["send","claim"]}},
  //              {"sha256":"<64 hex digits>","grants":{...}}],
  //    "keys":[{"access_key_id":"...","secret_access_key":"...",
  //             "grants":{...}}]}
  // (either array may be left out) or lines "TOKEN PERM[,PERM]:PATTERN ...",
  // "sha256:HEX PERM[,PERM]:PATTERN ..." and
  // "aws-key ID SECRET PERM[,PERM]:PATTERN ..." ('#' starts a comment),
  // either optionally after a UTF-8 byte order mark.
  // Errors: kInvalidArgument naming the line or field at fault (unknown
  // fields, a grant without permissions, a token or key id given twice, a
  // malformed key or hash), kNotFound.
  static Result<Auth> Load(const std::string& path);
  // The same from the file's text (Reload then has no file to read).
  static Result<Auth> FromText(std::string text);

  // An Auth that allows everything (no token file: loopback only).
  static Auth AllowAll() { return Auth(); }
  bool enabled() const { return enabled_; }

  struct Counts {
    std::size_t tokens = 0;
    std::size_t keys = 0;
  };
  // Reads the file Load read again. When it is valid, its tokens and keys
  // replace the current ones at once; when not, the current ones stay and
  // the error says why (as Load's). kFailedPrecondition without a file.
  Result<Counts> Reload();
  Counts counts() const;

  // The entry of `token`, or nullptr for an unknown token.
  std::shared_ptr<const TokenEntry> Find(std::string_view token) const;
  // The access key `id`, or nullptr for an unknown one.
  std::shared_ptr<const KeyEntry> FindKey(std::string_view id) const;
  // Whether `entry` may do `perm` on `name`. REQUIRES: enabled().
  static bool Allows(const TokenEntry& entry, unsigned perm,
                     std::string_view name);
  // Whether `entry` has any permission on `name` (for reads and listings).
  static bool Sees(const TokenEntry& entry, std::string_view name);
  // Whether `entry` may read /metrics: a metrics or admin grant on any name.
  static bool ReadsMetrics(const TokenEntry& entry);

 private:
  struct Table {
    std::vector<TokenEntry> tokens;
    std::vector<KeyEntry> keys;
  };
  static Result<std::shared_ptr<const Table>> Read(const std::string& path);
  // `path` names the file in errors.
  static Result<std::shared_ptr<const Table>> Parse(std::string text,
                                                    const std::string& path);
  std::shared_ptr<const Table> table() const;

  bool enabled_ = false;
  std::string path_;
  // Guards table_ (only the pointer: a table never changes once read).
  std::unique_ptr<std::mutex> mu_ = std::make_unique<std::mutex>();
  std::shared_ptr<const Table> table_ = std::make_shared<Table>();
};

// Failed authentications per client address (an unknown token, a bad AWS
// signature), limited so that tokens cannot be guessed at speed: each
// address may fail `burst` times, and earns one more try every `refill`.
// While an address has no tries left, its requests that need a token are
// refused (429) before any token is looked at, valid or not.
//
// Thread-safe.
class AuthFailures {
 public:
  using Clock = std::chrono::steady_clock;
  AuthFailures(int burst, std::chrono::milliseconds refill)
      : burst_(burst), refill_(refill) {}

  // How long `address` must wait before its next try, or zero when it may
  // try now.
  std::chrono::milliseconds Blocked(const std::string& address,
                                    Clock::time_point now = Clock::now());
  // Records and logs a failure of `address` (`what` failed: "token",
  // "sqs_signature"); true when it used the last try, which is logged too.
  bool Failed(const std::string& address, std::string_view what,
              Clock::time_point now = Clock::now());

 private:
  struct Tries {
    double left;
    Clock::time_point at;
  };
  double LeftAt(const Tries& t, Clock::time_point now) const;
  bool Count(const std::string& address, Clock::time_point now);

  // Most addresses remembered (about 100 bytes each).
  static constexpr std::size_t kMaxAddresses = 65536;
  const int burst_;
  const std::chrono::milliseconds refill_;
  std::mutex mu_;
  std::unordered_map<std::string, Tries> tries_;  // guarded by mu_
};

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_AUTH_H_
