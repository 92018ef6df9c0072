// The HTTP API of docs/http-api.md: routing, authentication, body parsing
// and one handler per endpoint, over the public sqlq API. Handlers block on
// the database, so they run on the server's database thread pool, never on
// its I/O threads. A claim that should wait is not answered here: Handle
// returns what to wait for and the server parks it (server.cc).
//
// Thread-safe.

#ifndef SQLQ_SERVER_API_H_
#define SQLQ_SERVER_API_H_

#include <chrono>
#include <functional>
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
#include "server/sqs.h"
#include "sqlq/store.h"

namespace sqlq::server {

struct Request {
  std::string method;         // "GET"
  std::string target;         // "/v1/queues/jobs?limit=10"
  std::string authorization;  // the Authorization header, or empty
  std::string body;
  // The client's IP address (for the limit of failed authentications and
  // logs); empty when unknown.
  std::string peer;
  // For the SQS endpoint (sqs.h), which checks signatures over them: every
  // header as received. Set only for requests SqsApi::Wants.
  bool sqs = false;
  std::vector<std::pair<std::string, std::string>> headers;
};

// Parses a JSON request body into a document, in time linear in its size
// (wire::ParseJson), or throws the 400 HttpError: invalid JSON, nesting
// deeper than 16 levels, more than 100,000 values, an object of more than
// 1,000 keys, duplicate keys.
Json ParseBody(const std::string& text);

// A claim to hold until a message comes or the wait runs out.
struct ParkedClaim {
  WorkQueue queue;
  ClaimOptions options;  // wait already validated; claims are made with wait 0
  std::chrono::steady_clock::time_point deadline;
  std::string token;  // for the per-token limit; empty without auth
  // A receipt to ack in the transaction of the first look; empty for none.
  std::string ack;
  // How the claim is answered when it ends: with its messages (none when
  // the wait ran out or the server stops) or its failure. Unset: the native
  // API's claim reply. Also answers a claim refused for too many waiting
  // (Code::kBusy).
  std::function<Reply(const Result<std::vector<ClaimedMessage>>&,
                      const ClaimNote&)>
      answer;
};

struct Outcome {
  Reply reply;
  std::optional<ParkedClaim> park;
};

class Api {
 public:
  struct ServerGauges {
    std::function<Metrics::Gauges()> read;
    std::function<bool()> shutting_down;
  };
  // `metrics_public`: /metrics answers without a token even when the
  // server has a token file. `overview`: the dashboard's readings.
  Api(Store& store, const Limits& limits, const Auth& auth, Metrics& metrics,
      ServerGauges gauges, bool metrics_public = false,
      Overview::Options overview = {});

  Outcome Handle(const Request& request);

  // The dashboard's and /metrics' view of the store, and the queues'
  // history (sampled once Server::Run starts it).
  Overview& overview() { return overview_; }

  // The reply to a claim: {"messages":[...]}, with "limited":true when the
  // claim stopped short of `options.max` at the reply size limit while more
  // messages were ready, and "limited_by" and "retry_after_ms" when a limit
  // of the queue held it back (`note`).
  static Reply ClaimReply(WorkQueue& queue, const ClaimOptions& options,
                          const std::vector<ClaimedMessage>& messages,
                          const ClaimNote& note);
  static Reply EmptyClaimReply(const ClaimNote& note = {}) {
    return ClaimReply({}, false, note);
  }

  // The payload bytes a claim of `max` messages may take for its reply to
  // stay within `reply_bytes` (ClaimOptions::max_bytes).
  static std::size_t ClaimPayloadBudget(std::size_t reply_bytes, int max);

 private:
  static Reply ClaimReply(const std::vector<ClaimedMessage>& messages,
                          bool limited, const ClaimNote& note);
  // The entry of the request's bearer token (the token itself in `token`,
  // when given), or nullptr when the server has no token file. Throws the
  // 401 reply for a missing or unknown token.
  // Refuses (429) a client address with too many failed authentications
  // before looking at its token, and counts and logs a failure.
  std::shared_ptr<const TokenEntry> Authenticate(const Request& req,
                                                 std::string* token = nullptr);
  // GET /v1/overview: what `picture` holds that `who` may see (everything
  // when nullptr), each object with what `who` may do with it ("can").
  Json OverviewJson(const Picture& picture, const TokenEntry* who) const;
  // Store::CheckWritable, made at most once a second (for /readyz).
  Status CheckWritable();

  Store& store_;
  const Limits& limits_;
  const Auth& auth_;
  AuthFailures auth_failures_;
  QueueCache cache_;
  SqsApi sqs_;
  Overview overview_;
  Metrics& metrics_;
  ServerGauges gauges_;
  const bool metrics_public_;
  std::mutex ready_mu_;
  Status ready_;  // guarded by ready_mu_, as is the time it was found
  std::chrono::steady_clock::time_point ready_checked_{};
};

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_API_H_
