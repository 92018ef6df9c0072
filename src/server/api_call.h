// The native API's inside, shared by its files: the API's state, a request
// while it is handled (Call), the route table's rows, and the helpers the
// endpoints share. api.cc holds the dispatcher; the endpoints are in
// api_queues.cc, api_messages.cc, api_objects.cc (rings, rotations,
// schedules), api_topics.cc and api_admin.cc (the page, health, metrics, the
// overview). Not for other code: Api (api.h) is the interface.

#ifndef SQLQ_SERVER_API_CALL_H_
#define SQLQ_SERVER_API_CALL_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "server/api.h"
#include "server/auth.h"
#include "server/reply.h"
#include "server/request.h"
#include "server/target.h"

namespace sqlq::server::api {

// Throws the error reply of a failed library call.
inline void Check(const Status& s) {
  if (!s.ok()) {
    throw HttpError{HttpStatusFor(s.code()), std::string(CodeName(s.code())),
                    s.message()};
  }
}
template <typename T>
T Take(Result<T> r) {
  Check(r.status());
  return std::move(*r);
}

// A JSON reply, as an Outcome.
inline Outcome Answer(unsigned status, Json body) {
  return Outcome{JsonReply(status, std::move(body)), std::nullopt};
}
// A reply written as text already (JSON built by hand, a page, metrics).
inline Outcome Answer(Reply reply) {
  return Outcome{std::move(reply), std::nullopt};
}

// What the API holds, for the endpoints.
struct State {
  // The queue handles and failed authentications when nothing shares them.
  struct Own {
    Own(Store& store, const Limits& limits);
    AuthFailures auth_failures;
    QueueCache queues;
  };
  State(Store& the_store, const Limits& the_limits, const Auth& the_auth,
        Metrics& the_metrics, Api::ServerGauges the_gauges, bool public_metrics,
        Overview::Options overview_options, std::optional<Api::Shared> shared);

  // The entry of the request's bearer token (the token itself in `token`,
  // when given), or nullptr when the server has no token file. Throws the
  // 401 reply for a missing or unknown token.
  // Refuses (429) a client address with too many failed authentications
  // before looking at its token, and counts and logs a failure.
  std::shared_ptr<const TokenEntry> Authenticate(const Request& req,
                                                 std::string* token = nullptr);
  // Store::CheckWritable, made at most once a second (for /readyz).
  Status CheckWritable();

  Store& store;
  const Limits& limits;
  const Auth& auth;
  std::unique_ptr<Own> own;  // when not Shared
  AuthFailures& auth_failures;
  QueueCache& queues;
  Overview overview;
  Metrics& metrics;
  Api::ServerGauges gauges;
  const bool metrics_public;

 private:
  std::mutex ready_mu_;
  Status ready_;  // guarded by ready_mu_, as is the time it was found
  std::chrono::steady_clock::time_point ready_checked_{};
};

// Who may call a route: the words of docs/openapi.json's
// "x-sqlq-permission".
enum class Access {
  kNone,     // "none": anyone, without a token (health, the page)
  kMetrics,  // "metrics": /metrics checks its token itself
  kToken,    // "token": any known token; lists show what it may see
  kAny,      // "any": any permission on the path's {name} (Auth::Sees)
  kSend,     // "send", "claim", "admin": that permission on {name}
  kClaim,
  kAdmin,
};
std::string_view AccessName(Access access);

// The queue whose cached handle a request used, so that the dispatcher can
// forget it and try once more when the queue turns out to be gone.
struct Lookup {
  std::string cached;
  bool hit = false;
};

class Call;

// A row of the route table: one endpoint.
struct Route {
  std::string_view method;  // "POST"
  // The path's template: literal segments, and {parameters} that match
  // any segment ({id} and {seq}: an integer). With the method, the
  // route's label in metrics and logs ("POST /v1/queues/{name}/claim").
  std::string_view path;
  Access access;
  Outcome (*handle)(Call&);
  // The endpoint checks the permission itself, on another object than
  // {name} (a schedule's queue); the dispatcher only authenticates.
  bool own_check = false;
  // Described in docs/openapi.json; false for the dashboard's page.
  bool described = true;
};

// The body of a send (a queue's, a topic's publish): {"messages":[...]},
// or one message's fields at the top level (a batch of one). Anything else
// is refused with what to send. api_messages.cc.
std::vector<Message> ReadSend(const std::string& text, const Limits& limits);
// ReadSend's general way, for every body: parsed into a Json document,
// each message read field by field. ReadSend takes it for any body that is
// not a plain send (plain_send.h).
std::vector<Message> ReadSendDocument(const std::string& text,
                                      const Limits& limits);
// One message's fields, read from `obj`; `what` names it in errors.
Message ReadOneMessage(const Json& obj, const std::string& what,
                       std::size_t max_payload);
// One message of a send to several queues: {"queue": ..., and a message's
// fields}.
QueuedMessage ReadQueuedMessage(const Json& obj, const std::string& what,
                                std::size_t max_payload);

// The route table by area, in the order the dispatcher matches a path's
// methods (and lists them in a 405).
std::span<const Route> QueueRoutes();    // api_queues.cc
std::span<const Route> MessageRoutes();  // api_messages.cc
std::span<const Route> ObjectRoutes();   // api_objects.cc
std::span<const Route> AdminRoutes();    // api_admin.cc
std::span<const Route> TopicRoutes();    // api_topics.cc
std::span<const Route> BatchRoutes();    // api_batches.cc

// A request matched to its route, while an endpoint handles it.
class Call {
 public:
  Call(State& state, const Request& request, const Target& parsed,
       const Route& route, std::span<const std::string_view> path,
       std::shared_ptr<const TokenEntry> entry, std::string bearer,
       Lookup& lookup)
      : api(state),
        req(request),
        target(parsed),
        who(std::move(entry)),
        token(std::move(bearer)),
        route_(route),
        path_(path),
        lookup_(lookup) {}

  State& api;
  const Request& req;
  const Target& target;
  // The token's entry; nullptr when the server has no token file.
  const std::shared_ptr<const TokenEntry> who;
  const std::string token;  // for the per-token limit of waiting claims

  // The path parameter `key` ("name", "group", "key"; "id" and "seq" as
  // numbers), as the route's template places it.
  const std::string& Param(std::string_view key) const;
  std::int64_t Number(std::string_view key) const;
  const std::string& name() const { return Param("name"); }
  // The last segment of the path (an action: "pause", "retry", ...).
  const std::string& last() const { return target.segments.back(); }

  // The handle of queue {name}, from the cache.
  WorkQueue Queue();

  // Throws 403 unless the token may do `perm` on `name`.
  void Need(unsigned perm, const std::string& name) const;
  // Throws 403 unless the token has any permission on `name`.
  void See(const std::string& name) const;
  // Whether the token has any permission on `name`.
  bool Visible(const std::string& name) const {
    return who == nullptr || Auth::Sees(*who, name);
  }

 private:
  const Route& route_;
  std::span<const std::string_view> path_;  // the template's segments
  Lookup& lookup_;
};

}  // namespace sqlq::server::api

#endif  // SQLQ_SERVER_API_CALL_H_
