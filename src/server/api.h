// The native HTTP API of docs/http-api.md: routing, authentication, body
// parsing and one handler per endpoint, over the public sqlq API. One of
// the server's two front doors beside the SQS endpoint (sqs.h); the
// transport (server.cc) hands each request to one of them. Handlers block on
// the database, so they run on the server's database thread pool, never on
// its I/O threads. A claim that should wait is not answered here: Handle
// returns what to wait for and the server parks it (server.cc).
//
// Thread-safe.

#ifndef SQLQ_SERVER_API_H_
#define SQLQ_SERVER_API_H_

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/auth.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/overview.h"
#include "server/queue_cache.h"
#include "server/reply.h"
#include "server/request.h"
#include "sqlq/store.h"

namespace sqlq::server {

// Parses a JSON request body into a document, in time linear in its size
// (wire::ParseJson), or throws the 400 HttpError: invalid JSON, nesting
// deeper than 16 levels, more than 100,000 values, an object of more than
// 1,000 keys, duplicate keys.
Json ParseBody(const std::string &text);

class Api {
 public:
  struct ServerGauges {
    std::function<Metrics::Gauges()> read;
    std::function<bool()> shutting_down;
  };
  // What the API shares with the SQS endpoint beside it: the queue handles
  // and the failed authentications of each client address.
  struct Shared {
    AuthFailures &auth_failures;
    QueueCache &queues;
  };
  // `metrics_public`: /metrics answers without a token even when the
  // server has a token file. `overview`: the dashboard's readings.
  // `shared`: the server's; without, the API has its own.
  Api(Store &store, const Limits &limits, const Auth &auth, Metrics &metrics,
      ServerGauges gauges, bool metrics_public = false,
      Overview::Options overview = {},
      std::optional<Shared> shared = std::nullopt);

  Outcome Handle(const Request &request);

  // The dashboard's and /metrics' view of the store, and the queues'
  // history (sampled once Server::Run starts it).
  Overview &overview() { return overview_; }

 private:
  // The queue handles and failed authentications when nothing shares them.
  struct Own {
    Own(Store &store, const Limits &limits);
    AuthFailures auth_failures;
    QueueCache queues;
  };
  // The entry of the request's bearer token (the token itself in `token`,
  // when given), or nullptr when the server has no token file. Throws the
  // 401 reply for a missing or unknown token.
  // Refuses (429) a client address with too many failed authentications
  // before looking at its token, and counts and logs a failure.
  std::shared_ptr<const TokenEntry> Authenticate(const Request &req,
                                                 std::string *token = nullptr);
  // GET /v1/overview: what `picture` holds that `who` may see (everything
  // when nullptr), each object with what `who` may do with it ("can").
  Json OverviewJson(const Picture &picture, const TokenEntry *who) const;
  // Store::CheckWritable, made at most once a second (for /readyz).
  Status CheckWritable();

  Store &store_;
  const Limits &limits_;
  const Auth &auth_;
  std::unique_ptr<Own> own_;  // when not Shared
  AuthFailures &auth_failures_;
  QueueCache &cache_;
  Overview overview_;
  Metrics &metrics_;
  ServerGauges gauges_;
  const bool metrics_public_;
  std::mutex ready_mu_;
  Status ready_;  // guarded by ready_mu_, as is the time it was found
  std::chrono::steady_clock::time_point ready_checked_{};
};

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_API_H_
