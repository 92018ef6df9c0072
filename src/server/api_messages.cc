// The native API's routes of messages: send, claim, ack, nack, extend,
// and browsing and steering them (list, count, get, delete, cancel, retry,
// reschedule, priority), one message or many.

#include <fmt/format.h>

#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "server/api_call.h"
#include "server/body.h"
#include "server/claim_reply.h"
#include "server/inputs.h"
#include "server/plain_send.h"
#include "wire/json.h"

namespace sqlq::server::api {
namespace {

using Clock = std::chrono::steady_clock;

// What a send's body is, for errors that must say what to send.
constexpr std::string_view kSendShapes =
    R"(send one message as {"payload":...} or several as )"
    R"({"messages":[{"payload":...},...]})";

}  // namespace

Message ReadOneMessage(const Json& obj, const std::string& what,
                       std::size_t max_payload) {
  Body mb(obj,
          {"payload", "payload_base64", "priority", "delay_ms", "run_at",
           "dedup", "group", "kind", "timeout_ms", "expire_after_ms",
           "on_expiry", "max_attempts", "backoff_ms", "backoff_max_ms",
           "headers", "depends_on", "depends_on_batch", "if_dependency_dies"},
          what);
  return ReadMessage(mb, max_payload);
}

QueuedMessage ReadQueuedMessage(const Json& obj, const std::string& what,
                                std::size_t max_payload) {
  if (!obj.is_object()) {
    Throw(400, "wrong_type", fmt::format("{} must be an object", what));
  }
  // The queue it goes to, then a message's own fields.
  Json fields = obj;
  if (!fields.contains("queue") || !fields["queue"].is_string()) {
    Throw(400, "invalid_argument",
          what +
              ": \"queue\" (the name of the queue it goes to) is "
              "required");
  }
  QueuedMessage out;
  out.queue = fields["queue"].get<std::string>();
  fields.erase("queue");
  out.message = ReadOneMessage(fields, what, max_payload);
  return out;
}

std::vector<Message> ReadSend(const std::string& text, const Limits& limits) {
  // Most bodies: string payloads and nothing else (plain_send.h).
  if (auto plain =
          ReadPlainSend(text, static_cast<std::size_t>(limits.max_batch),
                        limits.max_payload_bytes)) {
    return std::move(*plain);
  }
  return ReadSendDocument(text, limits);
}

std::vector<Message> ReadSendDocument(const std::string& text,
                                      const Limits& limits) {
  const Json doc = text.find_first_not_of(" \t\r\n") == std::string::npos
                       ? Json::object()
                       : ParseBody(text);
  if (!doc.is_object()) {
    Throw(
        400, "wrong_type",
        fmt::format("the request body must be a JSON object: {}", kSendShapes));
  }
  if (!doc.contains("messages")) {
    if (doc.empty()) {
      Throw(400, "invalid_argument",
            fmt::format("no message in the request body: {}", kSendShapes));
    }
    std::vector<Message> one;
    try {
      one.push_back(
          ReadOneMessage(doc, "the request body", limits.max_payload_bytes));
    } catch (HttpError& e) {
      // A field of neither shape ("payload" misspelt, "msgs"...).
      if (e.code == "unknown_field") {
        e.message = fmt::format("{}: {}", e.message, kSendShapes);
      }
      throw;
    }
    return one;
  }
  for (const auto& [key, value] : doc.items()) {
    if (key != "messages") {
      Throw(400, "unknown_field",
            fmt::format("unknown field \"{}\" beside \"messages\": give "
                        "each message's fields inside the array, or send one "
                        "message's fields alone without \"messages\"",
                        key));
    }
  }
  const Json& list = doc["messages"];
  if (!list.is_array()) {
    Throw(400, "wrong_type", "\"messages\" must be an array");
  }
  if (list.empty()) {
    Throw(
        400, "invalid_argument",
        fmt::format("\"messages\" must be a non-empty array: {}", kSendShapes));
  }
  if (list.size() > static_cast<std::size_t>(limits.max_batch)) {
    Throw(413, "batch_too_large",
          fmt::format("{} messages exceed the server's batch limit of {}",
                      list.size(), limits.max_batch));
  }
  std::vector<Message> msgs;
  msgs.reserve(list.size());
  for (std::size_t i = 0; i < list.size(); ++i) {
    msgs.push_back(ReadOneMessage(list[i], fmt::format("messages[{}]", i),
                                  limits.max_payload_bytes));
  }
  return msgs;
}

namespace {

Outcome Send(Call& c) {
  const std::vector<Message> msgs = ReadSend(c.req.body, c.api.limits);
  WorkQueue q = c.Queue();
  auto results = Take(q.SendBatch(msgs));
  // Written directly, as ClaimReply is: the reply of every send.
  std::string text = R"({"ids":[)";
  auto put = std::back_inserter(text);
  for (std::size_t i = 0; i < results.size(); ++i) {
    fmt::format_to(put, "{}{}", i ? "," : "", results[i].id);
  }
  text += R"(],"duplicate":[)";
  for (std::size_t i = 0; i < results.size(); ++i) {
    text += i ? "," : "";
    text += results[i].duplicate ? "true" : "false";
  }
  text += "]}";
  Reply r;
  r.text = std::move(text);
  return Answer(std::move(r));
}

// POST /v1/messages: messages to several queues in one transaction (a
// graph of jobs: depends_on_batch counts over the whole list). Needs the
// send permission on each queue named.
Outcome SendAll(Call& c) {
  Body b(c.req.body, {"messages"});
  const Json* list = b.Array("messages");
  if (list == nullptr || list->empty()) {
    Throw(400, "invalid_argument",
          R"(give {"messages":[{"queue":...,"payload":...},...]})");
  }
  if (list->size() > static_cast<std::size_t>(c.api.limits.max_batch)) {
    Throw(413, "batch_too_large",
          fmt::format("{} messages exceed the server's batch limit of {}",
                      list->size(), c.api.limits.max_batch));
  }
  std::vector<QueuedMessage> msgs(list->size());
  for (std::size_t i = 0; i < list->size(); ++i) {
    msgs[i] = ReadQueuedMessage((*list)[i], fmt::format("messages[{}]", i),
                                c.api.limits.max_payload_bytes);
  }
  std::set<std::string> named;
  for (const QueuedMessage& m : msgs) named.insert(m.queue);
  for (const std::string& q : named) c.Need(kSend, q);
  auto results = Take(c.api.store.SendAll(msgs));
  Json ids = Json::array(), dup = Json::array();
  for (const SendResult& r : results) {
    ids.push_back(r.id);
    dup.push_back(r.duplicate);
  }
  return Answer(200, {{"ids", std::move(ids)}, {"duplicate", std::move(dup)}});
}

// A wait_ms within the server's limit (--max-wait), or the 400 that says so.
Duration CheckedWait(const Call& c, std::int64_t wait_ms) {
  if (Duration(wait_ms) > c.api.limits.max_wait) {
    Throw(400, "wait_too_long",
          fmt::format("wait_ms {} exceeds the server's limit of {}", wait_ms,
                      c.api.limits.max_wait.count()));
  }
  return Duration(wait_ms);
}

Outcome Claim(Call& c) {
  Body b(c.req.body, {"max", "lease_ms", "wait_ms", "worker", "ack"});
  ClaimOptions o;
  if (auto v = b.Int("max", 1, 1000)) o.max = static_cast<int>(*v);
  if (auto v = b.Millis("lease_ms", kMaxLeaseMs)) o.lease = *v;
  if (auto v = b.String("worker")) o.worker = *v;
  const Duration wait =
      CheckedWait(c, b.Int("wait_ms", 0, INT64_MAX).value_or(0));
  // "ack": a receipt this consumer is done with, acked in the claim's
  // transaction (WorkQueue::AckAndClaim).
  std::string ack;
  if (auto v = b.String("ack")) ack = *v;
  o.max_bytes = ClaimPayloadBudget(c.api.limits.max_reply_bytes, o.max);
  WorkQueue q = c.Queue();
  if (wait.count() == 0) {
    ClaimNote note;
    auto claimed =
        ack.empty() ? q.Claim(o, &note) : q.AckAndClaim(ack, o, &note);
    std::vector<ClaimedMessage> messages = Take(std::move(claimed));
    if (!ack.empty()) c.api.metrics.JobFinished(q.name(), ack, "completed");
    c.api.metrics.JobsStarted(q.name(), messages);
    return Answer(ClaimReply(q, o, messages, note));
  }
  return Outcome{Reply(), ParkedClaim{.queue = q,
                                      .options = o,
                                      .deadline = Clock::now() + wait,
                                      .token = c.token,
                                      .ack = std::move(ack)}};
}

Outcome Ack(Call& c) {
  Body b(c.req.body, {"receipt", "receipts", "result", "result_ttl_ms"});
  WorkQueue q = c.Queue();
  // A result (any JSON), kept with the ack: one receipt only.
  AckOptions o;
  if (const Json* result = b.Value("result")) {
    o.result = result->dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  if (auto v = b.Millis("result_ttl_ms", kMaxResultTtl.count())) {
    o.result_ttl = *v;
  }
  if ((o.result || b.Has("result_ttl_ms")) && !b.Has("receipt")) {
    Throw(400, "invalid_argument",
          "\"result\" and \"result_ttl_ms\" go with one \"receipt\"");
  }
  if (auto r = b.String("receipt")) {
    if (b.Has("receipts")) {
      Throw(400, "invalid_argument",
            "give \"receipt\" or \"receipts\", not both");
    }
    Check(q.Ack(*r, o));
    c.api.metrics.JobFinished(q.name(), *r, "completed");
    return Answer(200, {{"acked", 1}});
  }
  const Json* list = b.Array("receipts");
  if (list == nullptr || list->empty()) {
    Throw(400, "invalid_argument",
          "\"receipt\" or a non-empty \"receipts\" array is required");
  }
  if (list->size() > static_cast<std::size_t>(c.api.limits.max_batch)) {
    Throw(413, "batch_too_large",
          fmt::format("{} receipts exceed the server's batch limit of {}",
                      list->size(), c.api.limits.max_batch));
  }
  std::vector<std::string> receipts;
  for (const Json& r : *list) {
    if (!r.is_string()) b.Wrong("receipts", "an array of strings");
    receipts.push_back(r.get<std::string>());
  }
  auto statuses = Take(q.AckBatch(receipts));
  Json results = Json::array();
  int acked = 0;
  for (std::size_t i = 0; i < statuses.size(); ++i) {
    const Status& s = statuses[i];
    if (s.ok()) {
      ++acked;
      c.api.metrics.JobFinished(q.name(), receipts[i], "completed");
      results.push_back({{"ok", true}});
    } else {
      results.push_back({{"ok", false}, {"error", wire::ErrorJson(s)}});
    }
  }
  return Answer(200, {{"acked", acked}, {"results", std::move(results)}});
}

Outcome Nack(Call& c) {
  Body b(c.req.body, {"receipt", "delay_ms", "error", "action"});
  auto receipt = b.String("receipt");
  if (!receipt) Throw(400, "invalid_argument", "\"receipt\" is required");
  NackOptions o;
  if (auto v = b.Millis("delay_ms", kMaxDelayMs)) o.delay = *v;
  if (auto v = b.String("error")) o.error = *v;
  if (auto v = b.String("action")) o.action = Take(ParseNackAction(*v));
  WorkQueue q = c.Queue();
  NackOutcome n = Take(q.Nack(*receipt, o));
  const char* outcome = n == NackOutcome::kDead      ? "dead"
                        : n == NackOutcome::kSnoozed ? "snoozed"
                                                     : "retry";
  c.api.metrics.JobFinished(q.name(), *receipt, outcome);
  return Answer(200, {{"outcome", outcome}});
}

// POST .../progress: the job's progress, under its lease.
Outcome Progress(Call& c) {
  Body b(c.req.body, {"receipt", "progress", "note"});
  auto receipt = b.String("receipt");
  const Json* progress = b.Value("progress");
  if (!receipt || progress == nullptr) {
    Throw(400, "invalid_argument", "\"receipt\" and \"progress\" are required");
  }
  if (!progress->is_number()) b.Wrong("progress", "a number");
  std::string note;
  if (const Json* n = b.Value("note")) {
    note = n->dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  Check(c.Queue().Progress(*receipt, progress->get<double>(), note));
  return Answer(200, {{"ok", true}});
}

// Text kept by the HTTP API as JSON (a result, a progress note) back as
// JSON; text a library caller kept that is not JSON, as a JSON string.
Json StoredJson(const std::string& text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? Json(text) : j;
}

Json JobResultJson(const JobResult& r) {
  Json j = {{"id", r.id}, {"state", JobStateName(r.state)}};
  if (r.result) j["result"] = StoredJson(*r.result);
  if (r.completed_at) j["completed_at"] = wire::FormatTime(*r.completed_at);
  if (r.progress) {
    j["progress"] = *r.progress;
    if (!r.note.empty()) j["note"] = StoredJson(r.note);
    if (r.progress_at) j["progress_at"] = wire::FormatTime(*r.progress_at);
  }
  if (!r.error.empty()) j["error"] = r.error;
  if (r.attempts > 0) j["attempts"] = r.attempts;
  return j;
}

// GET .../messages/{id}/result[?wait_ms=]: where the job is, with its
// result once completed; with wait_ms, held until it completes or dies.
Outcome GetResult(Call& c) {
  const std::int64_t id = c.Number("id");
  const Duration wait =
      CheckedWait(c, QueryInt(c.target, "wait_ms", 0, 0, INT64_MAX));
  WorkQueue q = c.Queue();
  JobResult now = Take(q.ReadResult(id));
  if (wait.count() == 0 || now.ended()) {
    return Answer(200, JobResultJson(now));
  }
  return Outcome{
      Reply(),
      ParkedClaim{.queue = q,
                  .deadline = Clock::now() + wait,
                  .token = c.token,
                  .look = [q, id](bool last) mutable -> std::optional<Reply> {
                    auto r = q.ReadResult(id);
                    if (!r.ok()) return StatusReply(r.status());
                    if (last || r->ended()) {
                      return JsonReply(200, JobResultJson(*r));
                    }
                    return std::nullopt;
                  },
                  .job = id}};
}

Outcome Extend(Call& c) {
  Body b(c.req.body, {"receipt", "lease_ms"});
  auto receipt = b.String("receipt");
  auto lease = b.Millis("lease_ms", kMaxLeaseMs);
  if (!receipt || !lease) {
    Throw(400, "invalid_argument", "\"receipt\" and \"lease_ms\" are required");
  }
  WorkQueue q = c.Queue();
  Timestamp until = Take(q.Extend(*receipt, *lease));
  return Answer(200, {{"lease_expires_at", wire::FormatTime(until)}});
}

Outcome ListMessages(Call& c) {
  const Target& t = c.target;
  ListMessagesOptions o{
      .filter = FilterFromQuery(t),
      .limit = static_cast<int>(QueryInt(t, "limit", 100, 1, 1000))};
  if (auto it = t.query.find("cursor"); it != t.query.end()) {
    o.cursor = it->second;
  }
  WorkQueue q = c.Queue();
  // Within the reply limit: a page that would not fit is asked for again
  // with as many messages as fit (at least one), so that its next_cursor
  // goes on from the last one sent.
  for (;;) {
    MessagePage page = Take(q.ListMessages(o));
    Json list = Json::array();
    std::size_t bytes = 64 + page.next_cursor.size();
    int fit = 0;
    for (const MessageInfo& info : page.messages) {
      Json j = wire::MessageInfoJson(info);
      bytes += j.dump().size() + 1;
      if (fit > 0 && bytes > c.api.limits.max_reply_bytes) break;
      list.push_back(std::move(j));
      ++fit;
    }
    if (fit < static_cast<int>(page.messages.size())) {
      o.limit = fit;
      continue;
    }
    Json body = {{"messages", std::move(list)}};
    body["next_cursor"] =
        page.next_cursor.empty() ? Json(nullptr) : Json(page.next_cursor);
    return Answer(200, std::move(body));
  }
}

Outcome CountMessages(Call& c) {
  const MessageCount n =
      Take(c.Queue().CountMessages(FilterFromQuery(c.target)));
  return Answer(200, {{"count", n.count}, {"at", wire::FormatTime(n.at)}});
}

// Runs a change of messages: `action` is delete, cancel, retry, reschedule
// (needs "run_at") or priority (needs "priority"); returns how many
// changed.
std::int64_t Steer(WorkQueue q, const std::string& action,
                   const MessageSelection& sel, const Body& b) {
  const char* wants = action == "reschedule" ? "run_at"
                      : action == "priority" ? "priority"
                                             : nullptr;
  for (const char* field : {"run_at", "priority"}) {
    if (b.Has(field) && (wants == nullptr || std::string(wants) != field)) {
      Throw(400, "unknown_field",
            fmt::format("\"{}\" does not go with {}", field, action));
    }
  }
  if (wants != nullptr && !b.Has(wants)) {
    Throw(400, "invalid_argument",
          fmt::format("{} needs \"{}\"", action, wants));
  }
  if (action == "delete") return Take(q.Delete(sel));
  if (action == "cancel") return Take(q.Cancel(sel));
  if (action == "retry") return Take(q.RetryNow(sel));
  if (action == "reschedule") {
    return Take(q.Reschedule(sel, ReadTime("run_at", *b.String("run_at"))));
  }
  return Take(q.SetPriority(sel, static_cast<std::int32_t>(*b.Int(
                                     "priority", INT32_MIN, INT32_MAX))));
}

// POST .../messages/ACTION: the messages of {"ids"} or {"filter"}.
Outcome SteerMany(Call& c) {
  Body b(c.req.body, {"ids", "state", "filter", "run_at", "priority"});
  MessageSelection sel = SelectionFromBody(b);
  return Answer(200, {{"changed", Steer(c.Queue(), c.last(), sel, b)}});
}

Outcome GetMessage(Call& c) {
  return Answer(200,
                wire::MessageInfoJson(Take(c.Queue().Get(c.Number("id")))));
}

// What the message waits for and what waits for it.
Outcome GetLinks(Call& c) {
  return Answer(200,
                wire::MessageLinksJson(Take(c.Queue().Links(c.Number("id")))));
}

// A message in the queue, a dead letter or an archived one: wherever it is.
Outcome DeleteMessage(Call& c) {
  const std::int64_t id = c.Number("id");
  MessageSelection sel{.ids = {id}};
  WorkQueue q = c.Queue();
  MessageInfo info = Take(q.Get(id));
  if (info.state == MessageState::kDead ||
      info.state == MessageState::kArchived) {
    sel.filter.state = info.state;
  }
  return Answer(200, {{"deleted", Take(q.Delete(sel))}});
}

// POST .../messages/{id}/ACTION.
Outcome SteerOne(Call& c) {
  const std::int64_t id = c.Number("id");
  MessageSelection sel{.ids = {id}};
  Body b(c.req.body, {"run_at", "priority"});
  WorkQueue q = c.Queue();
  // Retry of a dead letter redrives it.
  if (c.last() == "retry") {
    MessageInfo info = Take(q.Get(id));
    if (info.state == MessageState::kDead) {
      sel.filter.state = MessageState::kDead;
    }
  }
  return Answer(200, {{"changed", Steer(q, c.last(), sel, b)}});
}

constexpr std::string_view kMessages = "/v1/queues/{name}/messages";

constexpr Route kRoutes[] = {
    {"GET", kMessages, Access::kAdmin, ListMessages},
    {"POST", kMessages, Access::kSend, Send},
    {"POST", "/v1/messages", Access::kSend, SendAll, true},
    {"POST", "/v1/queues/{name}/claim", Access::kClaim, Claim},
    {"POST", "/v1/queues/{name}/ack", Access::kClaim, Ack},
    {"POST", "/v1/queues/{name}/nack", Access::kClaim, Nack},
    {"POST", "/v1/queues/{name}/extend", Access::kClaim, Extend},
    {"POST", "/v1/queues/{name}/progress", Access::kClaim, Progress},
    {"GET", "/v1/queues/{name}/messages/count", Access::kAdmin, CountMessages},
    {"POST", "/v1/queues/{name}/messages/delete", Access::kAdmin, SteerMany},
    {"POST", "/v1/queues/{name}/messages/cancel", Access::kAdmin, SteerMany},
    {"POST", "/v1/queues/{name}/messages/retry", Access::kAdmin, SteerMany},
    {"POST", "/v1/queues/{name}/messages/reschedule", Access::kAdmin,
     SteerMany},
    {"POST", "/v1/queues/{name}/messages/priority", Access::kAdmin, SteerMany},
    {"GET", "/v1/queues/{name}/messages/{id}", Access::kAdmin, GetMessage},
    {"DELETE", "/v1/queues/{name}/messages/{id}", Access::kAdmin,
     DeleteMessage},
    {"GET", "/v1/queues/{name}/messages/{id}/result", Access::kAny, GetResult},
    {"GET", "/v1/queues/{name}/messages/{id}/dependencies", Access::kAdmin,
     GetLinks},
    {"POST", "/v1/queues/{name}/messages/{id}/retry", Access::kAdmin, SteerOne},
    {"POST", "/v1/queues/{name}/messages/{id}/cancel", Access::kAdmin,
     SteerOne},
    {"POST", "/v1/queues/{name}/messages/{id}/reschedule", Access::kAdmin,
     SteerOne},
    {"POST", "/v1/queues/{name}/messages/{id}/priority", Access::kAdmin,
     SteerOne},
};

}  // namespace

std::span<const Route> MessageRoutes() { return kRoutes; }

}  // namespace sqlq::server::api
