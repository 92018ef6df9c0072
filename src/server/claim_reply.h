// A claim's reply, shared by the two front doors and the parked claims:
// how many payload bytes a claim may take for its reply to stay within the
// server's limit (both doors), and the native API's reply to a claim, made
// at once (api.cc) or when a parked claim ends (server.cc).

#ifndef SQLQ_SERVER_CLAIM_REPLY_H_
#define SQLQ_SERVER_CLAIM_REPLY_H_

#include <cstddef>
#include <vector>

#include "server/reply.h"
#include "sqlq/store.h"

namespace sqlq::server {

// The payload bytes a claim of `max` messages may take for its reply to
// stay within `reply_bytes` (ClaimOptions::max_bytes).
std::size_t ClaimPayloadBudget(std::size_t reply_bytes, int max);

// True when ClaimReply for `messages` may read the store (a claim that
// stopped short of options.max under a byte limit asks whether the next
// message was left out for its size).
bool ClaimReplyReads(const ClaimOptions& options,
                     const std::vector<ClaimedMessage>& messages);

// The reply to a claim: {"messages":[...]}, with "limited":true when the
// claim stopped short of `options.max` at the reply size limit while more
// messages were ready, and "limited_by" and "retry_after_ms" when a limit
// of the queue held it back (`note`).
Reply ClaimReply(WorkQueue& queue, const ClaimOptions& options,
                 const std::vector<ClaimedMessage>& messages,
                 const ClaimNote& note);
Reply EmptyClaimReply(const ClaimNote& note = {});

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_CLAIM_REPLY_H_
