// AWS Signature Version 4 as the SQS endpoint checks it (server/sigv4.h),
// against signatures made by a real client: the AWS SDK for Python
// (botocore, Debian's python3-botocore), driven by sign_with_botocore.py.

#include "server/sigv4.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace sqlq::server::sigv4 {
namespace {

using std::chrono::minutes;
using std::chrono::seconds;

constexpr const char* kKey = "AKIDSQLQTEST";
constexpr const char* kSecret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
constexpr const char* kDate = "20261126T170000Z";

// A request as the client sent it, and what the server saw of it.
struct Sent {
  std::string method, target, body;
  std::vector<std::pair<std::string, std::string>> headers;
  Request AsReceived() const {
    return {
        .method = method, .target = target, .headers = headers, .body = body};
  }
};

// Signs each request (method, target, extra headers, body) with botocore,
// as it would send it to http://127.0.0.1:9324.
// With `presign_seconds`, the signature goes in the query (a presigned
// URL valid that long).
std::vector<Sent> SignWithBotocore(const std::vector<Sent>& requests,
                                   const std::string& secret = kSecret,
                                   int presign_seconds = 0) {
  nlohmann::json in = nlohmann::json::array();
  for (const Sent& s : requests) {
    in.push_back({{"method", s.method},
                  {"url", "http://127.0.0.1:9324" + s.target},
                  {"headers", s.headers},
                  {"body", s.body},
                  {"key", kKey},
                  {"secret", secret},
                  {"region", "eu-central-1"},
                  {"amz_date", kDate}});
    if (presign_seconds > 0) in.back()["presign"] = presign_seconds;
  }
  // Files of this process and call: ctest runs tests side by side.
  static int calls = 0;
  const std::string base = ::testing::TempDir() + "/sigv4_" +
                           std::to_string(::getpid()) + "_" +
                           std::to_string(++calls);
  const std::string in_path = base + "_in.json";
  const std::string out_path = base + "_out.json";
  std::ofstream(in_path) << in.dump();
  const std::string cmd = std::string("/usr/bin/python3 ") + SQLQ_SOURCE_DIR +
                          "/tests/server_unit/sign_with_botocore.py < " +
                          in_path + " > " + out_path;
  if (std::system(cmd.c_str()) != 0) {
    ADD_FAILURE() << "signing with botocore failed (needs python3-botocore, "
                     "which scripts/install-deps.sh installs): "
                  << cmd;
    return {};
  }
  std::ifstream out_file(out_path);
  std::stringstream text;
  text << out_file.rdbuf();
  std::remove(in_path.c_str());
  std::remove(out_path.c_str());
  auto out = nlohmann::json::parse(text.str());
  std::vector<Sent> signed_requests;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    Sent s = requests[i];
    s.headers.clear();
    // What an HTTP client adds on the wire.
    s.headers.emplace_back("Host", "127.0.0.1:9324");
    for (const auto& h : out[i]["headers"]) {
      s.headers.emplace_back(h[0].get<std::string>(), h[1].get<std::string>());
    }
    const std::string url = out[i]["url"].get<std::string>();
    s.target = url.substr(std::string("http://127.0.0.1:9324").size());
    signed_requests.push_back(std::move(s));
  }
  return signed_requests;
}

std::chrono::system_clock::time_point At(std::string_view amz) {
  std::tm tm{};
  std::istringstream(std::string(amz)) >> std::get_time(&tm, "%Y%m%dT%H%M%SZ");
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

const std::string* SecretOf(std::string_view key) {
  static const std::string secret = kSecret;
  return key == kKey ? &secret : nullptr;
}

Verdict Check(const Sent& s,
              std::chrono::system_clock::time_point now = At(kDate) +
                                                          minutes(1)) {
  return Verify(s.AsReceived(), SecretOf, now);
}

// The requests SQS clients send: the query protocol (a form in a POST),
// the JSON protocol (X-Amz-Target and a JSON body), a GET with a query
// whose values need escaping, a queue URL's path, and bodies with every
// kind of character.
std::vector<Sent> Typical() {
  return {
      {.method = "POST",
       .target = "/000000000000/jobs",
       .body = "Action=SendMessage&MessageBody=caf%C3%A9+%26+more&"
               "Version=2012-11-05",
       .headers = {{"Content-Type",
                    "application/x-www-form-urlencoded; charset=utf-8"}}},
      {.method = "POST",
       .target = "/",
       .body = R"({"QueueUrl":"http://127.0.0.1:9324/000000000000/jobs",)"
               R"("MessageBody":"h\u00e9llo \"quoted\" \t tab"})",
       .headers = {{"Content-Type", "application/x-amz-json-1.0"},
                   {"X-Amz-Target", "AmazonSQS.SendMessage"}}},
      {.method = "GET",
       .target = "/?Action=ListQueues&QueueNamePrefix=a%20b%2Fc&Version="
                 "2012-11-05",
       .body = "",
       .headers = {}},
      {.method = "POST",
       .target = "/000000000000/with-dash_and.dot",
       .body = std::string("binary \x01\x7f end"),
       .headers = {{"Content-Type", "application/x-amz-json-1.0"},
                   {"X-Amz-Target", "AmazonSQS.ReceiveMessage"}}},
  };
}

TEST(SigV4, SignaturesOfARealClientVerify) {
  for (const Sent& s : SignWithBotocore(Typical())) {
    SCOPED_TRACE(s.target);
    const Verdict v = Check(s);
    EXPECT_EQ(v.refusal, Refusal::kNone) << v.message;
    EXPECT_EQ(v.access_key, kKey);
  }
}

// kombu (Celery's SQS transport) sends its GETs presigned: the signature
// in the query, valid for X-Amz-Expires seconds.
TEST(SigV4, PresignedRequestsVerifyUntilTheyExpire) {
  const Sent get{.method = "GET",
                 .target =
                     "/000000000000/celery?Action=DeleteMessage&"
                     "ReceiptHandle=12-1-00ff",
                 .body = "",
                 .headers = {}};
  const std::vector<Sent> sent = SignWithBotocore({get}, kSecret, 3600);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_NE(sent[0].target.find("X-Amz-Signature="), std::string::npos);
  Verdict v = Check(sent[0]);
  EXPECT_EQ(v.refusal, Refusal::kNone) << v.message;
  EXPECT_EQ(v.access_key, kKey);
  // Within its hour (and the clock's 5 minutes of slack), not after.
  EXPECT_EQ(Check(sent[0], At(kDate) + minutes(64)).refusal, Refusal::kNone);
  EXPECT_EQ(Check(sent[0], At(kDate) + minutes(66)).refusal, Refusal::kExpired);
  EXPECT_EQ(Check(sent[0], At(kDate) - minutes(6)).refusal, Refusal::kExpired);
  // A changed parameter, or another secret, breaks the signature.
  Sent changed = sent[0];
  changed.target.replace(changed.target.find("00ff"), 4, "00fe");
  EXPECT_EQ(Check(changed).refusal, Refusal::kBadSignature);
  const std::vector<Sent> other =
      SignWithBotocore({get}, "not-the-secret", 3600);
  EXPECT_EQ(Check(other[0]).refusal, Refusal::kBadSignature);
}

TEST(SigV4, AnyChangeToWhatWasSignedIsRefused) {
  const std::vector<Sent> sent = SignWithBotocore(Typical());
  ASSERT_FALSE(sent.empty());
  for (const Sent& original : sent) {
    SCOPED_TRACE(original.target);
    Sent body = original;
    body.body += " ";
    EXPECT_EQ(Check(body).refusal, Refusal::kBadSignature);
    Sent path = original;
    path.target.insert(1, "x");
    EXPECT_EQ(Check(path).refusal, Refusal::kBadSignature);
    Sent host = original;
    host.headers[0].second = "127.0.0.1:9325";
    EXPECT_EQ(Check(host).refusal, Refusal::kBadSignature);
    Sent method = original;
    method.method = original.method == "GET" ? "POST" : "GET";
    EXPECT_EQ(Check(method).refusal, Refusal::kBadSignature);
  }
  // Signed with another secret.
  const std::vector<Sent> other = SignWithBotocore(Typical(), "not-the-secret");
  ASSERT_FALSE(other.empty());
  const Verdict v = Check(other[0]);
  EXPECT_EQ(v.refusal, Refusal::kBadSignature);
  EXPECT_EQ(ErrorOf(v.refusal).code, "SignatureDoesNotMatch");
  EXPECT_EQ(ErrorOf(v.refusal).status, 403);
}

// A JSON-protocol request names its operation in X-Amz-Target. One signed
// without it (a hand-made signer) could be captured and sent again as
// another operation on the same queue: a SendMessage replayed as a
// PurgeQueue. Such a request is refused as AWS refuses it, before its
// signature is even checked; the real clients sign X-Amz-Target.
TEST(SigV4, AJsonRequestWhoseTargetIsNotSignedIsRefused) {
  Sent json = Typical()[1];
  std::erase_if(json.headers,
                [](const auto& h) { return h.first == "X-Amz-Target"; });
  const Sent get{.method = "GET",
                 .target = "/000000000000/jobs?Action=SendMessage",
                 .body = "",
                 .headers = {}};
  std::vector<Sent> sent = SignWithBotocore({json});
  const std::vector<Sent> presigned = SignWithBotocore({get}, kSecret, 3600);
  ASSERT_EQ(sent.size(), 1u);
  ASSERT_EQ(presigned.size(), 1u);
  sent.push_back(presigned[0]);
  for (Sent& s : sent) {
    SCOPED_TRACE(s.target);
    // As signed, without a target, the request verifies.
    EXPECT_EQ(Check(s).refusal, Refusal::kNone);
    s.headers.emplace_back("X-Amz-Target", "AmazonSQS.PurgeQueue");
    const Verdict v = Check(s);
    EXPECT_EQ(v.refusal, Refusal::kMalformed) << v.message;
    EXPECT_EQ(v.message,
              "'X-Amz-Target' must be a 'SignedHeader' in the AWS "
              "Authorization.");
    EXPECT_EQ(ErrorOf(v.refusal).code, "IncompleteSignature");
    EXPECT_EQ(ErrorOf(v.refusal).status, 400);
  }
  // As botocore signs a JSON request, the target is signed and verifies.
  const std::vector<Sent> real = SignWithBotocore({Typical()[1]});
  ASSERT_EQ(real.size(), 1u);
  EXPECT_EQ(Check(real[0]).refusal, Refusal::kNone);
}

TEST(SigV4, RequestsOutsideFiveMinutesAreRefusedAsExpired) {
  const std::vector<Sent> sent = SignWithBotocore({Typical()[0]});
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(Check(sent[0], At(kDate) + minutes(5)).refusal, Refusal::kNone);
  EXPECT_EQ(Check(sent[0], At(kDate) - minutes(5)).refusal, Refusal::kNone);
  // A captured request replayed later, or one from a clock far ahead.
  const Verdict late = Check(sent[0], At(kDate) + minutes(5) + seconds(1));
  EXPECT_EQ(late.refusal, Refusal::kExpired);
  EXPECT_NE(late.message.find("Signature expired"), std::string::npos)
      << late.message;
  EXPECT_EQ(Check(sent[0], At(kDate) - minutes(6)).refusal, Refusal::kExpired);
}

TEST(SigV4, UnknownKeysMissingAndMalformedHeadersAreRefused) {
  const std::vector<Sent> sent = SignWithBotocore({Typical()[0]});
  ASSERT_EQ(sent.size(), 1u);
  const Sent& good = sent[0];
  // Nobody has this key.
  const Verdict unknown = Verify(
      good.AsReceived(), [](std::string_view) { return nullptr; }, At(kDate));
  EXPECT_EQ(unknown.refusal, Refusal::kUnknownKey);
  EXPECT_EQ(ErrorOf(unknown.refusal).code, "InvalidClientTokenId");
  auto without = [&](std::string_view name) {
    Sent s = good;
    std::erase_if(s.headers, [&](const auto& h) { return h.first == name; });
    return s;
  };
  EXPECT_EQ(Check(without("Authorization")).refusal, Refusal::kMissing);
  EXPECT_EQ(Check(without("X-Amz-Date")).refusal, Refusal::kMalformed);
  // A date with a second of 60 is no date, as everywhere else.
  for (const char* bad : {"20261126T165960Z", "20261131T170000Z"}) {
    Sent s = without("X-Amz-Date");
    s.headers.emplace_back("X-Amz-Date", bad);
    EXPECT_EQ(Check(s).refusal, Refusal::kMalformed) << bad;
  }
  for (const std::string& bad : std::vector<std::string>{
           "AWS4-HMAC-SHA256", "AWS4-HMAC-SHA1 Credential=a/b/c/d/e",
           "AWS4-HMAC-SHA256 Credential=AKIDSQLQTEST/20261126/eu-central-1/sqs/"
           "aws4_request, SignedHeaders=host;x-amz-date",
           "AWS4-HMAC-SHA256 "
           "Credential=AKIDSQLQTEST/2026112/x/sqs/aws4_request, "
           "SignedHeaders=host;x-amz-date, Signature=" +
               std::string(64, 'a'),
           "AWS4-HMAC-SHA256 "
           "Credential=AKIDSQLQTEST/20261126/x/sqs/aws4_request, "
           "SignedHeaders=host, Signature=" +
               std::string(64, 'a'),
           "AWS4-HMAC-SHA256 "
           "Credential=AKIDSQLQTEST/20261126/x/sqs/aws4_request, "
           "SignedHeaders=x-amz-date, Signature=" +
               std::string(64, 'a'),
           "AWS4-HMAC-SHA256 "
           "Credential=AKIDSQLQTEST/20261126/x/s3/aws4_request, "
           "SignedHeaders=host;x-amz-date, Signature=" +
               std::string(64, 'a'),
           "AWS4-HMAC-SHA256 "
           "Credential=AKIDSQLQTEST/20261126/x/sqs/aws4_request, "
           "SignedHeaders=host;x-amz-date, Signature=zz",
           // Each signed header is looked up among the request's: a list of
           // thousands made that the square of the header's size.
           "AWS4-HMAC-SHA256 "
           "Credential=AKIDSQLQTEST/20261126/x/sqs/aws4_request, "
           "SignedHeaders=host;x-amz-date" +
               [] {
                 std::string more;
                 for (int i = 0; i < 63; ++i) more += ";x-" + std::to_string(i);
                 return more;
               }() +
               ", Signature=" + std::string(64, 'a')}) {
    SCOPED_TRACE(bad.substr(0, 200));
    Sent s = without("Authorization");
    s.headers.emplace_back("Authorization", bad);
    const Verdict v = Check(s);
    EXPECT_EQ(v.refusal, Refusal::kMalformed) << v.message;
    EXPECT_FALSE(v.message.empty());
  }
}

}  // namespace
}  // namespace sqlq::server::sigv4
