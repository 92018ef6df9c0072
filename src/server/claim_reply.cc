#include "server/claim_reply.h"

#include <fmt/format.h>

#include <chrono>
#include <string>

#include "sqlq/text.h"
#include "wire/json.h"

namespace sqlq::server {

namespace {

// Claim replies are the consumers' hot path: written straight into one
// string, byte for byte what nlohmann::json::dump() would print, rather than
// built as a JSON tree per message (docs/benchmarks.md, "sqlq serve").
// A claimed message's reply costs at most 4/3 of its payload (base64, or
// text hardly longer than that: PayloadIsText) plus this for its other
// fields and the text's slack.
constexpr std::size_t kReplyBytesPerMessage = 320 + kPayloadTextSlack;

Reply Write(const std::vector<ClaimedMessage>& messages, bool limited,
            const ClaimNote& note) {
  std::string out;
  std::size_t size = 32;
  for (const ClaimedMessage& m : messages) {
    size += 200 + m.receipt.size() + m.payload.size() + m.payload.size() / 3;
  }
  out.reserve(size);
  out += R"({"messages":[)";
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const ClaimedMessage& m = messages[i];
    if (i > 0) out += ',';
    wire::AppendClaimed(out, m);
  }
  out += limited ? R"(],"limited":true)" : "]";
  if (!note.limited_by.empty()) {
    out += fmt::format(R"(,"limited_by":"{}","retry_after_ms":{})",
                       note.limited_by, note.retry_after.count());
  }
  if (note.paused) out += R"(,"paused":true)";
  if (note.groups_busy) out += R"(,"groups_busy":true)";
  out += '}';
  Reply r;
  r.text = std::move(out);
  return r;
}

}  // namespace

std::size_t ClaimPayloadBudget(std::size_t reply_bytes, int max) {
  const std::size_t fixed =
      64 + kReplyBytesPerMessage * static_cast<std::size_t>(max);
  if (reply_bytes <= fixed) return 1;  // the first message only
  return (reply_bytes - fixed) / 4 * 3;
}

bool ClaimReplyReads(const ClaimOptions& options,
                     const std::vector<ClaimedMessage>& messages) {
  return options.max_bytes != 0 && !messages.empty() &&
         static_cast<int>(messages.size()) < options.max;
}

Reply ClaimReply(WorkQueue& queue, const ClaimOptions& options,
                 const std::vector<ClaimedMessage>& messages,
                 const ClaimNote& note) {
  bool limited = false;
  if (ClaimReplyReads(options, messages)) {
    std::size_t bytes = 0;
    for (const ClaimedMessage& m : messages) bytes += m.payload.size();
    // Could the next message have been left out for its size? Only then is
    // it worth a read to see whether one is ready.
    if (bytes + queue.options().max_payload_bytes > options.max_bytes) {
      // A read alone says "look now" when a message is ready now.
      auto next = queue.NextLook();
      limited = next.ok() && *next <= std::chrono::steady_clock::now();
    }
  }
  return Write(messages, limited, note);
}

Reply EmptyClaimReply(const ClaimNote& note) { return Write({}, false, note); }

}  // namespace sqlq::server
