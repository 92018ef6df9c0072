// The native API's routes of batches: send one (members and callback), read
// its status, cancel it (docs/http-api.md, "Batches").
//
// Permissions: a batch has no name of its own among the queues', so each
// route checks the queues it touches. Sending takes send on every member's
// queue and on the callback's; reading takes any permission on the
// callback's queue; cancelling takes admin on the callback's queue and on
// every member's queue (it cancels messages there).

#include <fmt/format.h>

#include <set>
#include <string>
#include <vector>

#include "server/api_call.h"
#include "server/body.h"
#include "wire/json.h"

namespace sqlq::server::api {
namespace {

constexpr std::string_view kBatchShape =
    R"(give {"members":[{"queue":...,"payload":...},...],)"
    R"("callback":{"queue":...,"payload":...}} (and "id", "retention_ms"))";

// POST /v1/batches.
Outcome CreateBatch(Call& c) {
  Body b(c.req.body, {"id", "members", "callback", "retention_ms"});
  BatchSpec spec;
  if (auto id = b.String("id")) spec.id = *id;
  const Json* list = b.Array("members");
  if (list == nullptr || list->empty()) {
    Throw(400, "invalid_argument",
          fmt::format("a batch needs at least one member: {}", kBatchShape));
  }
  if (list->size() > kMaxBatchMembers) {
    Throw(413, "batch_too_large",
          fmt::format("{} members exceed the limit of {}", list->size(),
                      kMaxBatchMembers));
  }
  const Json* callback = b.Object("callback");
  if (callback == nullptr) {
    Throw(400, "invalid_argument",
          fmt::format("a batch needs a callback: {}", kBatchShape));
  }
  if (auto ms = b.Millis("retention_ms", kMaxBatchRetention.count())) {
    spec.retention = *ms;
  }
  spec.members.reserve(list->size());
  for (std::size_t i = 0; i < list->size(); ++i) {
    spec.members.push_back(ReadQueuedMessage((*list)[i],
                                             fmt::format("members[{}]", i),
                                             c.api.limits.max_payload_bytes));
  }
  spec.callback =
      ReadQueuedMessage(*callback, "callback", c.api.limits.max_payload_bytes);
  std::set<std::string> named = {spec.callback.queue};
  for (const QueuedMessage& m : spec.members) named.insert(m.queue);
  for (const std::string& q : named) c.Need(kSend, q);
  const BatchSent sent = Take(c.api.store.CreateBatch(spec));
  return Answer(201, {{"id", sent.id},
                      {"members", sent.members},
                      {"callback_id", sent.callback_id}});
}

// GET /v1/batches/{batch}.
Outcome GetBatch(Call& c) {
  Body b(c.req.body, {});
  const BatchStatus st = Take(c.api.store.GetBatch(c.Param("batch")));
  c.See(st.callback_queue);
  return Answer(200, wire::BatchJson(st));
}

// POST /v1/batches/{batch}/cancel.
Outcome CancelBatch(Call& c) {
  Body b(c.req.body, {});
  const std::string& id = c.Param("batch");
  const BatchStatus before = Take(c.api.store.GetBatch(id));
  c.Need(kAdmin, before.callback_queue);
  for (const std::string& q : before.queues) c.Need(kAdmin, q);
  return Answer(200, wire::BatchJson(Take(c.api.store.CancelBatch(id))));
}

constexpr Route kRoutes[] = {
    {"POST", "/v1/batches", Access::kSend, CreateBatch, true},
    {"GET", "/v1/batches/{batch}", Access::kAny, GetBatch, true},
    {"POST", "/v1/batches/{batch}/cancel", Access::kAdmin, CancelBatch, true},
};

}  // namespace

std::span<const Route> BatchRoutes() { return kRoutes; }

}  // namespace sqlq::server::api
