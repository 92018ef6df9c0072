// The native API's routes of messages: send, claim, ack, nack, extend,
// and browsing and steering them (list, count, get, delete, cancel, retry,
// reschedule, priority), one message or many.

#include <fmt/format.h>

#include <iterator>
#include <string>
#include <vector>

#include "server/api_call.h"
#include "server/body.h"
#include "server/claim_reply.h"
#include "server/inputs.h"
#include "wire/json.h"

namespace sqlq::server::api {
namespace {

using Clock = std::chrono::steady_clock;

// What a send's body is, for errors that must say what to send.
constexpr std::string_view kSendShapes =
    R"(send one message as {"payload":...} or several as )"
    R"({"messages":[{"payload":...},...]})";

// One message's fields, read from `obj`; `what` names it in errors.
Message ReadOneMessage(const Json& obj, const std::string& what,
                       std::size_t max_payload) {
  Body mb(obj,
          {"payload", "payload_base64", "priority", "delay_ms", "run_at",
           "dedup", "group", "headers"},
          what);
  return ReadMessage(mb, max_payload);
}

// The body of a send: {"messages":[...]}, or one message's fields at the
// top level (a batch of one). Anything else is refused with what to send.
std::vector<Message> ReadSend(const std::string& text, const Limits& limits) {
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

Outcome Claim(Call& c) {
  Body b(c.req.body, {"max", "lease_ms", "wait_ms", "worker", "ack"});
  ClaimOptions o;
  if (auto v = b.Int("max", 1, 1000)) o.max = static_cast<int>(*v);
  if (auto v = b.Millis("lease_ms", kMaxLeaseMs)) o.lease = *v;
  if (auto v = b.String("worker")) o.worker = *v;
  Duration wait{0};
  if (auto v = b.Int("wait_ms", 0, INT64_MAX)) {
    if (Duration(*v) > c.api.limits.max_wait) {
      Throw(400, "wait_too_long",
            fmt::format("wait_ms {} exceeds the server's limit of {}", *v,
                        c.api.limits.max_wait.count()));
    }
    wait = Duration(*v);
  }
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
    return Answer(ClaimReply(q, o, Take(std::move(claimed)), note));
  }
  return Outcome{Reply(), ParkedClaim{.queue = q,
                                      .options = o,
                                      .deadline = Clock::now() + wait,
                                      .token = c.token,
                                      .ack = std::move(ack)}};
}

Outcome Ack(Call& c) {
  Body b(c.req.body, {"receipt", "receipts"});
  WorkQueue q = c.Queue();
  if (auto r = b.String("receipt")) {
    if (b.Has("receipts")) {
      Throw(400, "invalid_argument",
            "give \"receipt\" or \"receipts\", not both");
    }
    Check(q.Ack(*r));
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
  for (const Status& s : statuses) {
    if (s.ok()) {
      ++acked;
      results.push_back({{"ok", true}});
    } else {
      results.push_back({{"ok", false}, {"error", wire::ErrorJson(s)}});
    }
  }
  return Answer(200, {{"acked", acked}, {"results", std::move(results)}});
}

Outcome Nack(Call& c) {
  Body b(c.req.body, {"receipt", "delay_ms", "error"});
  auto receipt = b.String("receipt");
  if (!receipt) Throw(400, "invalid_argument", "\"receipt\" is required");
  NackOptions o;
  if (auto v = b.Millis("delay_ms", kMaxDelayMs)) o.delay = *v;
  if (auto v = b.String("error")) o.error = *v;
  WorkQueue q = c.Queue();
  NackOutcome n = Take(q.Nack(*receipt, o));
  return Answer(200, {{"outcome", n == NackOutcome::kDead ? "dead" : "retry"}});
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
    {"POST", "/v1/queues/{name}/claim", Access::kClaim, Claim},
    {"POST", "/v1/queues/{name}/ack", Access::kClaim, Ack},
    {"POST", "/v1/queues/{name}/nack", Access::kClaim, Nack},
    {"POST", "/v1/queues/{name}/extend", Access::kClaim, Extend},
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
