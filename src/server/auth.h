// Bearer tokens and their permissions, loaded once from the --tokens file
// (format: docs/server.md). A token grants send, claim, metrics and/or admin
// on the queues, rings and rotations whose names match a pattern (`*` and
// `?` globs). admin includes the other three. Only SHA-256 hashes of the
// tokens are kept, and a presented token is compared with every one of
// them in constant time, so that neither its length nor a prefix shows in
// the time a refusal takes.
//
// Thread-safe after Load (read-only).

#ifndef SQLQ_SERVER_AUTH_H_
#define SQLQ_SERVER_AUTH_H_

#include <array>
#include <string>
#include <string_view>
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

class Auth {
 public:
  // Reads a token file: a JSON document
  //   {"tokens":[{"token":"...","grants":{"jobs-*":["send","claim"]}}],
  //    "keys":[{"access_key_id":"...","secret_access_key":"...",
  //             "grants":{...}}]}
  // (either array may be left out) or lines "TOKEN PERM[,PERM]:PATTERN ..."
  // and "aws-key ID SECRET PERM[,PERM]:PATTERN ..." ('#' starts a comment),
  // either optionally after a UTF-8 byte order mark.
  // Errors: kInvalidArgument naming the line or field at fault (unknown
  // fields, a grant without permissions, a token or key id given twice, a
  // malformed key), kNotFound.
  static Result<Auth> Load(const std::string& path);

  // An Auth that allows everything (no token file: loopback only).
  static Auth AllowAll() { return Auth(); }
  bool enabled() const { return enabled_; }

  // The entry of `token`, or nullptr for an unknown token.
  const TokenEntry* Find(std::string_view token) const;
  // The access key `id`, or nullptr for an unknown one.
  const KeyEntry* FindKey(std::string_view id) const;
  // Whether `entry` may do `perm` on `name`. REQUIRES: enabled().
  static bool Allows(const TokenEntry& entry, unsigned perm,
                     std::string_view name);
  // Whether `entry` has any permission on `name` (for reads and listings).
  static bool Sees(const TokenEntry& entry, std::string_view name);
  // Whether `entry` may read /metrics: a metrics or admin grant on any name.
  static bool ReadsMetrics(const TokenEntry& entry);

 private:
  bool enabled_ = false;
  std::vector<TokenEntry> tokens_;
  std::vector<KeyEntry> keys_;
};

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_AUTH_H_
