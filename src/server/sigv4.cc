#include "server/sigv4.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <ctime>
#include <map>
#include <optional>

#include "server/ascii.h"
#include "server/target.h"
#include "wire/json.h"

namespace sqlq::server::sigv4 {
namespace {

constexpr std::string_view kAlgorithm = "AWS4-HMAC-SHA256";

std::string DigestHex(const EVP_MD* md, std::string_view text) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> h{};
  unsigned int n = 0;
  EVP_Digest(text.data(), text.size(), h.data(), &n, md, nullptr);
  return HexOf(h.data(), n);
}

std::string Hmac(std::string_view key, std::string_view text) {
  std::array<unsigned char, 32> h{};
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(text.data()), text.size(),
       h.data(), &n);
  return std::string(reinterpret_cast<const char*>(h.data()), n);
}

// RFC 3986 encoding: unreserved characters as they are, every other byte
// %XX (upper-case hex); '/' kept when `keep_slash`.
std::string UriEncode(std::string_view in, bool keep_slash) {
  std::string out;
  out.reserve(in.size());
  for (unsigned char c : in) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

// A header value as signed: outer spaces trimmed, inner runs of spaces as
// one.
std::string Trimmed(std::string_view v) {
  std::string out;
  bool space = false;
  for (char c : v) {
    if (c == ' ' || c == '\t') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

// The path as signed: dot segments removed, then encoded once more (the
// SDKs sign a path's escapes as %25XX).
std::string CanonicalUri(std::string_view path) {
  if (path.empty()) return "/";
  std::vector<std::string_view> kept;
  std::size_t at = 1;
  while (at <= path.size()) {
    std::size_t end = path.find('/', at);
    if (end == std::string_view::npos) end = path.size();
    std::string_view seg = path.substr(at, end - at);
    if (seg == "..") {
      if (!kept.empty()) kept.pop_back();
    } else if (seg != ".") {
      kept.push_back(seg);
    }
    at = end + 1;
  }
  std::string joined;
  for (std::string_view seg : kept) {
    joined += '/';
    joined += seg;
  }
  if (joined.empty()) joined = "/";
  return UriEncode(joined, /*keep_slash=*/true);
}

// The query as signed: each name and value decoded and encoded again,
// sorted by name, then value.
std::string CanonicalQuery(std::string_view query) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& [name, value] : SplitPairs(query)) {
    pairs.emplace_back(UriEncode(PercentDecode(name), false),
                       UriEncode(PercentDecode(value), false));
  }
  std::sort(pairs.begin(), pairs.end());
  std::string out;
  for (const auto& [name, value] : pairs) {
    if (!out.empty()) out += '&';
    out += name;
    out += '=';
    out += value;
  }
  return out;
}

// YYYYMMDD'T'HHMMSS'Z' as a time; none when malformed. Read as the same
// time in RFC 3339, so that a date is checked as every other time is (no
// February 30, no second 60).
std::optional<std::chrono::system_clock::time_point> ParseAmzDate(
    std::string_view s) {
  if (s.size() != 16 || s[8] != 'T' || s[15] != 'Z') return std::nullopt;
  const auto t = wire::ParseTime(fmt::format(
      "{}-{}-{}T{}:{}:{}Z", s.substr(0, 4), s.substr(4, 2), s.substr(6, 2),
      s.substr(9, 2), s.substr(11, 2), s.substr(13, 2)));
  if (!t.ok()) return std::nullopt;
  return std::chrono::time_point_cast<std::chrono::system_clock::duration>(*t);
}

}  // namespace

std::string Sha256Hex(std::string_view bytes) {
  return DigestHex(EVP_sha256(), bytes);
}

std::string Md5Hex(std::string_view bytes) {
  return DigestHex(EVP_md5(), bytes);
}

std::optional<std::string> HeaderValue(
    const std::vector<std::pair<std::string, std::string>>& headers,
    std::string_view name) {
  std::optional<std::string> out;
  for (const auto& [n, v] : headers) {
    if (AsciiLower(n) != name) continue;
    if (out) {
      *out += ',';
      *out += Trimmed(v);
    } else {
      out = Trimmed(v);
    }
  }
  return out;
}

std::string AmzDate(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[20];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

Result<Authorization> ParseAuthorization(std::string_view header) {
  auto bad = [](std::string_view what) {
    return Status::InvalidArgument(
        fmt::format("Authorization header: {}", what));
  };
  if (header.substr(0, kAlgorithm.size()) != kAlgorithm ||
      header.size() == kAlgorithm.size() || header[kAlgorithm.size()] != ' ') {
    return bad("expected the AWS4-HMAC-SHA256 algorithm");
  }
  Authorization a;
  bool credential = false, signed_headers = false, signature = false;
  std::string_view rest = header.substr(kAlgorithm.size() + 1);
  while (!rest.empty()) {
    std::size_t comma = rest.find(',');
    std::string_view part = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view()
                                           : rest.substr(comma + 1);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    if (part.empty()) continue;
    const std::size_t eq = part.find('=');
    if (eq == std::string_view::npos) {
      return bad(fmt::format("'{}' is not NAME=VALUE", part));
    }
    std::string_view name = part.substr(0, eq);
    std::string_view value = part.substr(eq + 1);
    if (name == "Credential") {
      // KEY/DATE/REGION/SERVICE/aws4_request
      std::vector<std::string> fields;
      std::size_t at = 0;
      while (true) {
        std::size_t slash = value.find('/', at);
        fields.emplace_back(value.substr(at, slash - at));
        if (slash == std::string_view::npos) break;
        at = slash + 1;
      }
      if (fields.size() != 5 || fields[4] != "aws4_request" ||
          fields[0].empty() || fields[1].size() != 8 || fields[2].empty() ||
          fields[3].empty()) {
        return bad(
            "Credential is not KEY/YYYYMMDD/REGION/SERVICE/aws4_request");
      }
      a.access_key = fields[0];
      a.date = fields[1];
      a.region = fields[2];
      a.service = fields[3];
      credential = true;
    } else if (name == "SignedHeaders") {
      std::size_t at = 0;
      while (at <= value.size()) {
        std::size_t semi = value.find(';', at);
        if (semi == std::string_view::npos) semi = value.size();
        std::string h = AsciiLower(value.substr(at, semi - at));
        if (h.empty()) return bad("SignedHeaders has an empty name");
        if (a.signed_headers.size() == kMaxSignedHeaders) {
          return bad(fmt::format("SignedHeaders names more than {} headers",
                                 kMaxSignedHeaders));
        }
        a.signed_headers.push_back(std::move(h));
        at = semi + 1;
      }
      signed_headers = true;
    } else if (name == "Signature") {
      if (value.size() != 64 ||
          !std::all_of(value.begin(), value.end(), [](char c) {
            return std::isxdigit(static_cast<unsigned char>(c));
          })) {
        return bad("Signature is not 64 hex digits");
      }
      a.signature = AsciiLower(value);
      signature = true;
    } else {
      return bad(fmt::format("unknown part '{}'", name));
    }
  }
  if (!credential || !signed_headers || !signature) {
    return bad("needs Credential, SignedHeaders and Signature");
  }
  return a;
}

std::string CanonicalRequest(const Request& r,
                             const std::vector<std::string>& signed_headers) {
  const std::size_t q = r.target.find('?');
  std::string out(r.method);
  out += '\n';
  out += CanonicalUri(r.target.substr(0, q));
  out += '\n';
  if (q != std::string_view::npos)
    out += CanonicalQuery(r.target.substr(q + 1));
  out += '\n';
  for (const std::string& name : signed_headers) {
    out += name;
    out += ':';
    out += HeaderValue(r.headers, name).value_or("");
    out += '\n';
  }
  out += '\n';
  for (std::size_t i = 0; i < signed_headers.size(); ++i) {
    if (i != 0) out += ';';
    out += signed_headers[i];
  }
  out += '\n';
  out += Sha256Hex(r.body);
  return out;
}

std::string StringToSign(const Authorization& a, std::string_view amz_date,
                         std::string_view canonical_request) {
  return fmt::format("{}\n{}\n{}/{}/{}/aws4_request\n{}", kAlgorithm, amz_date,
                     a.date, a.region, a.service, Sha256Hex(canonical_request));
}

std::string Signature(const Request& r, const Authorization& a,
                      std::string_view secret, std::string_view amz_date) {
  std::string key = Hmac("AWS4" + std::string(secret), a.date);
  key = Hmac(key, a.region);
  key = Hmac(key, a.service);
  key = Hmac(key, "aws4_request");
  const std::string mac = Hmac(
      key, StringToSign(a, amz_date, CanonicalRequest(r, a.signed_headers)));
  return HexOf(reinterpret_cast<const unsigned char*>(mac.data()), mac.size());
}

SqsError ErrorOf(Refusal r) {
  switch (r) {
    case Refusal::kNone:
      return {"", 200};
    case Refusal::kMissing:
      return {"MissingAuthenticationToken", 403};
    case Refusal::kMalformed:
      return {"IncompleteSignature", 400};
    case Refusal::kUnknownKey:
      return {"InvalidClientTokenId", 403};
    case Refusal::kBadSignature:
    case Refusal::kExpired:
      return {"SignatureDoesNotMatch", 403};
  }
  return {"SignatureDoesNotMatch", 403};
}

namespace {

// Looks up the key's secret and checks the signature: the refusal, or none
// when it matches.
std::optional<Verdict> Mismatch(
    const Request& r, const Authorization& a, std::string_view amz_date,
    const std::function<const std::string*(std::string_view)>& secret_of) {
  const std::string* secret = secret_of(a.access_key);
  if (secret == nullptr) {
    return Verdict{Refusal::kUnknownKey, a.access_key,
                   "The security token included in the request is invalid."};
  }
  std::string expected;
  try {
    expected = Signature(r, a, *secret, amz_date);
  } catch (const std::exception&) {  // a bad %XX escape in the query
    return Verdict{Refusal::kMalformed, a.access_key,
                   "the request target has a malformed percent escape"};
  }
  if (CRYPTO_memcmp(expected.data(), a.signature.data(), expected.size()) !=
      0) {
    return Verdict{Refusal::kBadSignature, a.access_key,
                   "The request signature we calculated does not match the "
                   "signature you provided. Check your AWS Secret Access "
                   "Key and signing method."};
  }
  return std::nullopt;
}

// Refuses a request whose signature leaves out a header that decides what
// the request means, so that a captured request cannot be sent again with
// it changed: the host (as AWS requires of every request); the date of a
// request signed in a header (its age is what stops a replay); and, in the
// JSON protocol, X-Amz-Target, which names the operation: unsigned, a
// signed SendMessage could be replayed as a PurgeQueue of the same queue.
std::optional<Verdict> Unsigned(const Request& r, const Authorization& a,
                                bool presigned) {
  auto is_signed = [&](std::string_view name) {
    return std::find(a.signed_headers.begin(), a.signed_headers.end(), name) !=
           a.signed_headers.end();
  };
  std::string_view missing;
  if (!is_signed("host")) {
    missing = "'Host' or ':authority'";
  } else if (!presigned && !is_signed("x-amz-date")) {
    missing = "'X-Amz-Date'";
  } else if (HeaderValue(r.headers, "x-amz-target") &&
             !is_signed("x-amz-target")) {
    missing = "'X-Amz-Target'";
  }
  if (missing.empty()) return std::nullopt;
  return Verdict{Refusal::kMalformed, a.access_key,
                 fmt::format("{} must be a 'SignedHeader' in the AWS "
                             "Authorization.",
                             missing)};
}

// A presigned request: the signature's parts in the query (X-Amz-Algorithm,
// X-Amz-Credential, X-Amz-Date, X-Amz-Expires, X-Amz-SignedHeaders,
// X-Amz-Signature) instead of an Authorization header, as botocore's
// SigV4QueryAuth makes them (kombu sends its GETs so).
Verdict VerifyPresigned(
    const Request& r,
    const std::function<const std::string*(std::string_view)>& secret_of,
    std::chrono::system_clock::time_point now) {
  const std::size_t q = r.target.find('?');
  std::map<std::string, std::string> params;
  std::string unsigned_target(r.target.substr(0, q));
  char sep = '?';
  try {
    for (const auto& [name, value] : SplitPairs(r.target.substr(q + 1))) {
      const std::string n = PercentDecode(name, true);
      params[n] = PercentDecode(value, true);
      if (n == "X-Amz-Signature") continue;
      unsigned_target += sep;
      unsigned_target += name;
      unsigned_target += '=';
      unsigned_target += value;
      sep = '&';
    }
  } catch (const std::exception&) {
    return {Refusal::kMalformed, "",
            "the request target has a malformed percent escape"};
  }
  if (params["X-Amz-Algorithm"] != kAlgorithm) {
    return {Refusal::kMalformed, "",
            "X-Amz-Algorithm must be AWS4-HMAC-SHA256"};
  }
  auto a = ParseAuthorization(
      fmt::format("{} Credential={}, SignedHeaders={}, Signature={}",
                  kAlgorithm, params["X-Amz-Credential"],
                  params["X-Amz-SignedHeaders"], params["X-Amz-Signature"]));
  if (!a.ok()) return {Refusal::kMalformed, "", a.status().message()};
  const std::string& amz_date = params["X-Amz-Date"];
  auto dated = ParseAmzDate(amz_date);
  int expires = -1;
  const std::string& e = params["X-Amz-Expires"];
  std::from_chars(e.data(), e.data() + e.size(), expires);
  if (!dated || a->date != amz_date.substr(0, 8) || a->service != "sqs" ||
      expires < 1 || expires > 604800) {
    return {Refusal::kMalformed, a->access_key,
            "a presigned request needs X-Amz-Date, its date in the "
            "Credential, the service sqs and X-Amz-Expires of 1 to 604800"};
  }
  if (auto refused = Unsigned(r, *a, /*presigned=*/true)) return *refused;
  Request unsigned_request = r;
  unsigned_request.target = unsigned_target;
  if (auto refused = Mismatch(unsigned_request, *a, amz_date, secret_of)) {
    return *refused;
  }
  if (*dated > now + kMaxSkew ||
      *dated + std::chrono::seconds(expires) < now - kMaxSkew) {
    return {Refusal::kExpired, a->access_key,
            fmt::format("Request has expired: signed {} for {} s; the "
                        "server's time is {}",
                        amz_date, expires, AmzDate(now))};
  }
  return {Refusal::kNone, a->access_key, ""};
}

}  // namespace

Verdict Verify(
    const Request& r,
    const std::function<const std::string*(std::string_view)>& secret_of,
    std::chrono::system_clock::time_point now) {
  auto header = HeaderValue(r.headers, "authorization");
  const std::size_t q = r.target.find('?');
  if (!header && q != std::string_view::npos &&
      (r.target.find("?X-Amz-Signature=", q) != std::string_view::npos ||
       r.target.find("&X-Amz-Signature=", q) != std::string_view::npos)) {
    return VerifyPresigned(r, secret_of, now);
  }
  if (!header) {
    return {Refusal::kMissing, "",
            "Request is missing Authentication Token (an AWS Signature "
            "Version 4 Authorization header)"};
  }
  auto a = ParseAuthorization(*header);
  if (!a.ok()) return {Refusal::kMalformed, "", a.status().message()};
  auto amz_date = HeaderValue(r.headers, "x-amz-date");
  auto dated = amz_date ? ParseAmzDate(*amz_date) : std::nullopt;
  if (!dated) {
    return {Refusal::kMalformed, a->access_key,
            "X-Amz-Date must be present as YYYYMMDD'T'HHMMSS'Z'"};
  }
  if (a->date != amz_date->substr(0, 8)) {
    return {Refusal::kMalformed, a->access_key,
            fmt::format("the Credential's date {} is not the X-Amz-Date's {}",
                        a->date, amz_date->substr(0, 8))};
  }
  if (a->service != "sqs") {
    return {Refusal::kMalformed, a->access_key,
            fmt::format("the Credential is scoped to service '{}', not 'sqs'",
                        a->service)};
  }
  if (auto refused = Unsigned(r, *a, /*presigned=*/false)) return *refused;
  if (auto refused = Mismatch(r, *a, *amz_date, secret_of)) return *refused;
  // Checked after the signature, so that only the key's holder learns
  // about the server's clock.
  if (*dated < now - kMaxSkew || *dated > now + kMaxSkew) {
    return {Refusal::kExpired, a->access_key,
            fmt::format("Signature expired: {} is more than 5 minutes from "
                        "the server's time, {}",
                        *amz_date, AmzDate(now))};
  }
  return {Refusal::kNone, a->access_key, ""};
}

}  // namespace sqlq::server::sigv4
