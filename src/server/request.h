// What the transport (server.cc) hands to a front door, the native API
// (api.h) or the SQS endpoint (sqs.h), and what the door gives back: a
// reply, or a claim for the transport to park until a message comes.

#ifndef SQLQ_SERVER_REQUEST_H_
#define SQLQ_SERVER_REQUEST_H_

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/reply.h"
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
  // For the SQS endpoint, which checks signatures over them: every header
  // as received. Set only for requests the transport hands to it
  // (WantsSqs, http_request.h).
  bool sqs = false;
  std::vector<std::pair<std::string, std::string>> headers;
};

// A claim to hold until a message comes or the wait runs out (or another
// wait: `look`).
struct ParkedClaim {
  WorkQueue queue;
  ClaimOptions options;  // wait already validated; claims are made with wait 0
  std::chrono::steady_clock::time_point deadline;
  std::string token;  // for the per-token limit; empty without auth
  // A receipt to ack in the transaction of the first look; empty for none.
  std::string ack;
  // How the claim is answered when it ends: with its messages (none when
  // the wait ran out or the server stops) or its failure. Unset: the native
  // API's claim reply (claim_reply.h). Also answers a claim refused for too
  // many waiting (Code::kBusy).
  std::function<Reply(const Result<std::vector<ClaimedMessage>>&,
                      const ClaimNote&)>
      answer;
  // Set for a wait that is not a claim (a job's result): each look runs it
  // on a database thread, `last` true once the wait has run out. A reply
  // ends the wait (it must give one when `last`); nullopt looks again, soon
  // at first, then every kResultLookEvery. Of the fields above only `queue`,
  // `deadline` and `token` are used; `job` below is the look's.
  std::function<std::optional<Reply>(bool last)> look;
  // The job a look waits for: it looks again at once when the job ends
  // through this server (WorkQueue::WatchJobEnd).
  std::int64_t job = 0;
};

struct Outcome {
  Reply reply;
  std::optional<ParkedClaim> park;
};

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_REQUEST_H_
