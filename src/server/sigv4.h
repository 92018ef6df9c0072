// AWS Signature Version 4, as every AWS SDK and the AWS CLI sign their
// requests, checked by the server's SQS endpoint (docs/sqs.md).
//
// A signed request carries
//   Authorization: AWS4-HMAC-SHA256
//     Credential=KEY/YYYYMMDD/REGION/SERVICE/aws4_request,
//     SignedHeaders=host;x-amz-date;..., Signature=HEX
// and an X-Amz-Date header (YYYYMMDD'T'HHMMSS'Z'). The signature is an
// HMAC-SHA256 chain keyed by the secret over the date, region, service and
// a digest of the request in canonical form (method, path, query, the
// signed headers, the body's SHA-256). The server recomputes it with the
// secret it holds for KEY and compares in constant time; a request dated
// more than 5 minutes away from the server's clock is refused, as AWS
// refuses it, so that a captured request cannot be replayed later.
//
// Any region is accepted (the client's configured region is only part of
// what it signs); the service must be "sqs".

#ifndef SQLQ_SERVER_SIGV4_H_
#define SQLQ_SERVER_SIGV4_H_

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sqlq/status.h"

namespace sqlq::server::sigv4 {

// A request as it arrived.
struct Request {
  std::string_view method;  // "POST"
  // The request target as sent: path and query, still percent-encoded.
  std::string_view target;
  // Every header as received: names in any case, a name may repeat.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string_view body;
};

// What an Authorization header says.
struct Authorization {
  std::string access_key;
  std::string date;  // YYYYMMDD, the credential's scope
  std::string region;
  std::string service;
  std::vector<std::string> signed_headers;  // lower case, as listed
  std::string signature;                    // lower-case hex
};

// The value of header `name` (lower case) among `headers` (names in any
// case): values of a repeated name joined by ',', each trimmed, inner runs
// of spaces as one, as a signature reads them; none when absent.
std::optional<std::string> HeaderValue(
    const std::vector<std::pair<std::string, std::string>>& headers,
    std::string_view name);

// Lower-case hex digests: SHA-256 (signatures, SQS's content-based
// deduplication) and MD5 (SQS's MD5OfMessageBody).
std::string Sha256Hex(std::string_view bytes);
std::string Md5Hex(std::string_view bytes);

// `t` as an X-Amz-Date: YYYYMMDD'T'HHMMSS'Z', UTC.
std::string AmzDate(std::chrono::system_clock::time_point t);

// The most headers a signature may cover. Each is looked up among the
// request's headers, so the number bounds that work (clients sign a
// handful); docs/sqs.md, "Hostile input".
inline constexpr std::size_t kMaxSignedHeaders = 64;

// Errors: kInvalidArgument saying what is missing or malformed, or
// SignedHeaders naming more than kMaxSignedHeaders headers.
Result<Authorization> ParseAuthorization(std::string_view header);

// The request in canonical form, and the string that is signed: exposed
// for tests.
std::string CanonicalRequest(const Request& r,
                             const std::vector<std::string>& signed_headers);
std::string StringToSign(const Authorization& a, std::string_view amz_date,
                         std::string_view canonical_request);

// The hex signature of `r` for `a`'s scope with `secret`, dated `amz_date`.
std::string Signature(const Request& r, const Authorization& a,
                      std::string_view secret, std::string_view amz_date);

// Why a request is refused, and how SQS says so.
enum class Refusal {
  kNone,
  kMissing,       // no Authorization header
  kMalformed,     // an Authorization or X-Amz-Date that does not parse
  kUnknownKey,    // an access key the server does not have
  kBadSignature,  // the signature does not match
  kExpired,       // dated more than 5 minutes from the server's clock
};

struct Verdict {
  Refusal refusal = Refusal::kNone;
  std::string access_key;  // the key that signed, when known
  std::string message;     // for the error reply
};

// The SQS error code and HTTP status of a refusal.
struct SqsError {
  std::string_view code;
  int status = 403;
};
SqsError ErrorOf(Refusal r);

// How far a request's date may be from the server's clock.
inline constexpr std::chrono::minutes kMaxSkew{5};

// Checks `r`'s signature. `secret_of(key)` is the secret of an access key,
// nullptr for an unknown one. The signed headers must include host,
// x-amz-date (unless presigned) and x-amz-target when the request has one
// (the JSON protocol's operation), else kMalformed.
Verdict Verify(
    const Request& r,
    const std::function<const std::string*(std::string_view)>& secret_of,
    std::chrono::system_clock::time_point now);

}  // namespace sqlq::server::sigv4

#endif  // SQLQ_SERVER_SIGV4_H_
