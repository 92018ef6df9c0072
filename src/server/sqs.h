// The SQS-compatible endpoint (docs/sqs.md), on the server's own port:
// Amazon SQS's query protocol (form-encoded `Action=...` requests, XML
// replies), as the AWS CLI and boto3 in Debian 12 speak it, mapped onto
// the library's operations. Requests are signed with AWS Signature
// Version 4 by an access key of the token file (sigv4.h); without a token
// file the server listens on loopback only and every request is allowed,
// as on the native API.
//
// So far: CreateQueue, GetQueueUrl, ListQueues and DeleteQueue.
//
// Thread-safe.

#ifndef SQLQ_SERVER_SQS_H_
#define SQLQ_SERVER_SQS_H_

#include <chrono>
#include <functional>
#include <string>

#include "server/auth.h"
#include "server/reply.h"
#include "sqlq/store.h"

namespace sqlq::server {

struct Request;

// The account in queue URLs (http://HOST/ACCOUNT/NAME): one per server.
inline constexpr const char* kSqsAccount = "000000000000";

class SqsApi {
 public:
  SqsApi(Store& store, const Auth& auth,
         std::function<std::chrono::system_clock::time_point()> now =
             std::chrono::system_clock::now);

  // Whether a request is meant for this endpoint rather than the native
  // API: outside /v1, one with an AWS signature, an X-Amz-Target, a form
  // body or an Action parameter in its query.
  static bool Wants(std::string_view method, std::string_view target,
                    std::string_view content_type,
                    std::string_view authorization, bool has_amz_target);

  Reply Handle(const Request& request);

 private:
  // Handle's work; `action` is set as soon as it is known (for the route).
  Reply Run(const Request& request, std::string& action);

  Store& store_;
  const Auth& auth_;
  std::function<std::chrono::system_clock::time_point()> now_;
};

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_SQS_H_
