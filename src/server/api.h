// The native HTTP API of docs/http-api.md over the public sqlq API: a
// route table of one function per endpoint, by area (queues, messages,
// rings/rotations/schedules, the server's own), and one small dispatcher
// that matches a request to its route, authenticates it, checks the
// route's permission and labels it for metrics. One of the server's two
// front doors; the other, the SQS endpoint (sqs.h), stands beside it, and
// the transport (server.cc) hands each request to one of them.
//
// Handlers block on the database, so they run on the server's database
// thread pool, never on its I/O threads. A claim that should wait is not
// answered here: Handle returns what to wait for and the server parks it.
//
// Thread-safe.

#ifndef SQLQ_SERVER_API_H_
#define SQLQ_SERVER_API_H_

#include <functional>
#include <memory>
#include <optional>
#include <string_view>
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

namespace api {
struct State;
}

class Api {
 public:
  struct ServerGauges {
    std::function<Metrics::Gauges()> read;
    std::function<bool()> shutting_down;
  };
  // What the API shares with the SQS endpoint beside it: the queue handles
  // and the failed authentications of each client address.
  struct Shared {
    AuthFailures& auth_failures;
    QueueCache& queues;
  };
  // `metrics_public`: /metrics answers without a token even when the
  // server has a token file. `overview`: the dashboard's readings.
  // `shared`: the server's; without, the API has its own.
  Api(Store& store, const Limits& limits, const Auth& auth, Metrics& metrics,
      ServerGauges gauges, bool metrics_public = false,
      Overview::Options overview = {},
      std::optional<Shared> shared = std::nullopt);
  ~Api();

  Outcome Handle(const Request& request);

  // The dashboard's and /metrics' view of the store, and the queues'
  // history (sampled once Server::Run starts it).
  Overview& overview();

  // A route of the table, as docs/openapi.json describes it: its method,
  // path template ("/v1/queues/{name}"), who may call it (the description's
  // "x-sqlq-permission": none, metrics, token, any, send, claim, admin),
  // and whether the description has it (not the dashboard's page).
  struct RouteInfo {
    std::string_view method;
    std::string_view path;
    std::string_view permission;
    bool described;
  };
  static std::vector<RouteInfo> Routes();

 private:
  std::unique_ptr<api::State> state_;
};

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_API_H_
