// The native API's inputs decoded into the library's types: a message to
// send, a payload, a queue's options, a listing's filter (from the query
// or a body), the messages a bulk change selects, query integers, times
// and states. Each throws the 400 (or 413) HttpError a client reads
// (docs/http-api.md).

#ifndef SQLQ_SERVER_INPUTS_H_
#define SQLQ_SERVER_INPUTS_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "server/body.h"
#include "server/target.h"
#include "sqlq/store.h"

namespace sqlq::server {

// The library's own limits, so that the server's errors name them.
inline constexpr std::int64_t kMaxLeaseMs = kMaxLease.count();
inline constexpr std::int64_t kMaxDelayMs = kMaxDelay.count();
inline constexpr std::int64_t kMaxRetentionMs = kMaxRetention.count();

// Query parameter `key` as an integer in min..max; `dflt` when absent.
std::int64_t QueryInt(const Target& t, const std::string& key,
                      std::int64_t dflt, std::int64_t min, std::int64_t max);

// The payload of a message, ring entry or rotation item: "payload" (text) or
// "payload_base64" (bytes), at most one; `required` when one must be given.
std::string ReadPayload(const Body& b, bool required, std::size_t max_bytes);

// One message of a send: "payload" (a string, or any other JSON value,
// stored as its JSON text and marked with the JSON content type) or
// "payload_base64", "priority", "delay_ms" or "run_at" (RFC 3339),
// "dedup", "group", and "headers" ({name: string}).
Message ReadMessage(const Body& mb, std::size_t max_payload);

// A time given as RFC 3339 in `what`.
Timestamp ReadTime(const std::string& what, const std::string& text);

// A listing's filter from the query: state, min_priority, max_priority,
// dedup, group, header (NAME=VALUE), payload_prefix (text), enqueued_after,
// enqueued_before.
MessageFilter FilterFromQuery(const Target& t);

// The messages a bulk change takes: {"ids": [...]} or {"filter": {...}}
// ({} selects every message in the queue), one of the two; "state" with
// "ids" says where they are (the queue, the dead letters, the archive).
MessageSelection SelectionFromBody(const Body& b);

// A queue's options in a body (create, change), each optional.
inline constexpr std::initializer_list<const char*> kQueueOptionFields = {
    "max_attempts",  "lease_ms",     "backoff_base_ms",   "backoff_max_ms",
    "archive",       "retention_ms", "max_payload_bytes", "dead_retention_ms",
    "unique_for_ms", "groups",       "max_leased",        "rate_limit",
    "rate_burst",    "group_limit",  "dead_letter_queue", "labels"};

// Sets in `o` the options `b` gives.
void ReadQueueOptions(const Body& b, QueueOptions& o);

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_INPUTS_H_
