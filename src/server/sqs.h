// The SQS-compatible endpoint (docs/sqs.md), on the server's own port, one
// of its two front doors beside the native API (api.h); the transport
// hands it the requests WantsSqs (http_request.h) picks:
// Amazon SQS's query and JSON protocols (sqs_wire.h) mapped onto the
// library's operations. Requests are signed with AWS Signature Version 4
// by an access key of the token file (sigv4.h); without a token file the
// server listens on loopback only and every request is allowed, as on the
// native API.
//
// Thread-safe.

#ifndef SQLQ_SERVER_SQS_H_
#define SQLQ_SERVER_SQS_H_

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>

#include "server/auth.h"
#include "server/config.h"
#include "server/queue_cache.h"
#include "server/reply.h"
#include "server/request.h"
#include "sqlq/store.h"

namespace sqlq::server {

// The account in queue URLs (http://HOST/ACCOUNT/NAME): one per server.
inline constexpr const char* kSqsAccount = "000000000000";

class SqsApi {
 public:
  SqsApi(Store& store, const Limits& limits, const Auth& auth,
         AuthFailures& failures, QueueCache& cache,
         std::function<std::chrono::system_clock::time_point()> now =
             std::chrono::system_clock::now);

  // The reply, or a ReceiveMessage to park until a message comes.
  Outcome Handle(const Request& request);

  // The actions the endpoint answers (docs/sqs.md).
  static std::span<const std::string_view> Actions();

 private:
  class Call;

  Store& store_;
  const Limits& limits_;
  const Auth& auth_;
  AuthFailures& failures_;
  QueueCache& cache_;
  std::function<std::chrono::system_clock::time_point()> now_;
  // The last message move task of each queue (ListMessageMoveTasks), as
  // this process ran it.
  std::mutex tasks_mu_;
  std::map<std::string, Json> tasks_;  // guarded by tasks_mu_
};

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_SQS_H_
