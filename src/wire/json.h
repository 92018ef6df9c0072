// The JSON shapes of sqlq's objects, one definition each, used by both front
// ends: `sqlq --json` prints these objects and the HTTP API sends them
// (docs/http-api.md, "Objects"). A key added here appears in both.
//
// Times are RFC 3339 in UTC with microseconds; payloads are "payload" when
// they are text (sqlq/text.h) and "payload_base64" otherwise; durations are
// integer milliseconds in keys ending in _ms.

#ifndef SQLQ_WIRE_JSON_H_
#define SQLQ_WIRE_JSON_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "sqlq/batch.h"
#include "sqlq/queue.h"
#include "sqlq/ring.h"
#include "sqlq/rotation.h"
#include "sqlq/schedule.h"
#include "sqlq/status.h"
#include "sqlq/topic.h"
#include "sqlq/workers.h"

namespace sqlq::wire {

using Json = nlohmann::ordered_json;

// RFC 3339, UTC, microseconds: 2026-11-22T10:00:00.123456Z
std::string FormatTime(Timestamp t);
// An RFC 3339 time: date, 'T' (or 't' or a space), time with optional
// fraction (digits past microseconds are cut), and 'Z' or an offset
// (+02:00); a date of the calendar and a second of 0 to 59 (a leap
// second's :60 is refused). kInvalidArgument otherwise, saying what is
// expected.
Result<Timestamp> ParseTime(std::string_view text);

// A message whose payload was given as a JSON value carries this header
// (kContentType: kJsonContentType), and goes out as that JSON value in
// "payload" when its payload parses as JSON.
inline constexpr const char* kContentType = "content-type";
inline constexpr const char* kJsonContentType = "application/json";
bool IsJsonPayload(const Headers& headers, std::string_view payload);

// Sets "payload" (text) or "payload_base64" (anything else).
void PutPayload(Json& obj, std::string_view payload);
// The same for a message: "payload" is a JSON value when IsJsonPayload;
// "headers" ({name: value}) is set when it has any.
void PutPayload(Json& obj, std::string_view payload, const Headers& headers);
// [{"attempt", "at", "error"}], oldest first.
Json ErrorsJson(const std::vector<AttemptError>& errors);

// {"max_attempts", "lease_ms", "backoff_base_ms", "backoff_max_ms",
//  "archive", "retention_ms", "max_payload_bytes", "dead_retention_ms",
//  "unique_for_ms", "groups", "max_leased", "rate_limit", "rate_burst",
//  "group_limit", "dead_letter_queue" (null for none), "labels" ({})}
Json QueueOptionsJson(const QueueOptions& o);
// {"name", "kind": "queue", the options' keys, "created_at", "paused"};
// created_at is left out when unknown (zero).
Json QueueJson(const QueueInfo& q);
// {"name", "ready", "delayed", "leased", "waiting", "dead", "archived",
//  "oldest_ready_age_ms", "sends", "claims", "acks", "nacks", "expirations",
//  "dead_lettered", "expired", "paused"}
Json StatsJson(const QueueStats& s);

// {"id", "receipt", "attempt", "priority", payload, ["headers"],
//  "enqueued_at", "lease_expires_at"}
Json ClaimedJson(const ClaimedMessage& m);
// A message's part in a batch: {"id", "callback" (the callback only), and
// the callback's counts once its batch is done: "total", "completed",
// "dead", "cancelled"}.
Json BatchRefJson(const BatchRef& b);
// A message's parents (ClaimedMessage::parents): [{"queue", "id"}], the
// queue left out where it is not known.
Json ParentsJson(const std::vector<ParentRef>& parents);
// A batch's status (Store::GetBatch).
Json BatchJson(const BatchStatus& b);
// The same object as ClaimedJson, appended as text: claim replies are the
// server's hottest path and skip building a Json tree.
void AppendClaimed(std::string& out, const ClaimedMessage& m);
// {"id", "priority", "attempts", "last_error", payload, ["headers"],
//  "errors", "enqueued_at", "died_at"}
Json DeadLetterJson(const DeadLetter& d);
// {"id", "priority", "attempts", "worker", payload, ["headers"], "errors",
//  "enqueued_at", "completed_at"}
Json ArchivedJson(const ArchivedMessage& a);

// {"id", "state", "priority", "attempts", payload, ["headers"], ["dedup"],
//  "enqueued_at", ["ready_at"], ["lease_expires_at"], ["worker"],
//  ["last_error"], "errors", ["died_at"], ["completed_at"]}: the keys in
// brackets only when the message has them.
Json MessageInfoJson(const MessageInfo& m);

// {"parents": [{"queue", "id", "dead"}], "dependents": [{"queue", "id"}],
//  "more_dependents"}
Json MessageLinksJson(const MessageLinks& l);

// A topic as the lists show it: name, kind, created_at, subscriptions.
Json TopicJson(const TopicInfo& t);
// A subscription: topic, queue, filter (an object of strings), subscribed_at.
Json SubscriptionJson(const Subscription& s);
// {"name", "kind": "ring", "capacity", "max_payload_bytes"}
Json RingJson(std::string_view name, const RingOptions& o);
// {"seq", "group", payload, "pushed_at"}
Json RingEntryJson(const RingEntry& e);
// {"group", "entries"}
Json RingGroupJson(const RingGroup& g);
// {"name", "capacity", "groups", "entries", "pushes"}
Json RingStatsJson(const RingStats& s);

// {"name", "kind": "rotation", "max_failures", "max_payload_bytes"}
Json RotationJson(std::string_view name, const RotationOptions& o);
// A schedule: name, cron, time_zone, queue, the message (payload or
// payload_base64, priority, headers, group), catch_up, paused, next_tick,
// last_tick (null when none), sent, skipped, last_error, created_at.
Json ScheduleJson(const ScheduleInfo& s);
// A live worker (sqlq/workers.h): id, name, host, pid, queues, kinds,
// concurrency, jobs [{queue, id, since}], started_at, last_seen,
// expires_at, ttl_ms.
Json WorkerJson(const WorkerInfo& w);
// {"key", payload, "served", "failures", "parked"}
Json RotationItemJson(const RotationItem& i);
// {"name", "max_failures", "items", "parked", "serves"}
Json RotationStatsJson(const RotationStats& s);

// {"code", "message"}: the value of "error" in every error reply.
Json ErrorJson(const Status& s);

}  // namespace sqlq::wire

#endif  // SQLQ_WIRE_JSON_H_
