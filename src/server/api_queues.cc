// The native API's routes of queues: list, create, read, change, drop,
// pause and resume, purge, dead letters, archive and history.

#include <fmt/format.h>

#include <string>
#include <vector>

#include "server/api_call.h"
#include "server/body.h"
#include "server/inputs.h"
#include "server/paging.h"
#include "wire/json.h"

namespace sqlq::server::api {
namespace {

Outcome ListQueues(Call& c) {
  Body b(c.req.body, {});
  Json list = Json::array();
  for (const QueueInfo& q : Take(c.api.store.ListQueues())) {
    if (c.Visible(q.name)) list.push_back(wire::QueueJson(q));
  }
  return Answer(200, {{"queues", std::move(list)}});
}

// A queue's dead letters go to its dead-letter queue: naming one is a send
// there, so it needs send (or admin) on that queue as well.
void NeedDeadLetterQueue(Call& c, const Body& b, const QueueOptions& o) {
  if (b.Value("dead_letter_queue") != nullptr && !o.dead_letter_queue.empty()) {
    c.Need(kSend, o.dead_letter_queue);
  }
}

Outcome CreateQueue(Call& c) {
  const std::string& name = c.name();
  Body b(c.req.body, kQueueOptionFields);
  QueueOptions o;
  ReadQueueOptions(b, o);
  NeedDeadLetterQueue(c, b, o);
  Check(CheckQueueName(name));
  Check(CheckQueueOptions(o));
  WorkQueue q = Take(c.api.store.CreateQueue(name, o));
  return Answer(201, wire::QueueJson(q.info()));
}

Outcome GetQueue(Call& c) {
  WorkQueue q = c.Queue();
  QueueStats s = Take(q.Stats());
  return Answer(200, {{"name", c.name()},
                      {"kind", "queue"},
                      {"stats", wire::StatsJson(s)},
                      {"options", wire::QueueOptionsJson(q.options())}});
}

// The options given change; the others stay as they are.
Outcome ChangeQueue(Call& c) {
  Body b(c.req.body, kQueueOptionFields);
  WorkQueue q = c.Queue();
  QueueOptions o = q.options();
  ReadQueueOptions(b, o);
  NeedDeadLetterQueue(c, b, o);
  Check(q.Alter(o));
  return Answer(200, wire::QueueJson(q.info()));
}

Outcome DropQueue(Call& c) {
  const std::string& name = c.name();
  c.api.queues.Forget(name);
  Check(c.api.store.DropQueue(name));
  return Answer(200, {{"dropped", name}});
}

// POST .../pause and .../resume.
Outcome PauseOrResume(Call& c) {
  Body b(c.req.body, {});
  WorkQueue q = c.Queue();
  Check(c.last() == "pause" ? q.Pause() : q.Resume());
  return Answer(200, wire::QueueJson(q.info()));
}

Outcome Purge(Call& c) {
  Body b(c.req.body, {});
  WorkQueue q = c.Queue();
  return Answer(200, {{"purged", Take(q.Purge())}});
}

// GET .../dead and .../archive: a page of the rows `list` reads, within
// the reply size limit; `row_bytes` bounds a row's other fields (its
// longest text escaped, at six times its size).
template <typename Row, auto list, auto json>
Outcome ListRows(Call& c, const char* key, std::size_t row_bytes) {
  const ListOptions lo{
      .limit = static_cast<int>(QueryInt(c.target, "limit", 100, 1, 10000)),
      .after_id = QueryInt(c.target, "after_id", 0, 0, INT64_MAX)};
  WorkQueue q = c.Queue();
  Json rows = Json::array();
  bool limited = false;
  const auto read = ListWithin<Row>(
      c.api.limits.max_reply_bytes, q.options().max_payload_bytes, row_bytes,
      lo, [&](const ListOptions& page) { return (q.*list)(page); },
      [](ListOptions& o, const Row& row) { o.after_id = row.id; }, limited);
  for (const Row& r : read) rows.push_back(json(r));
  return Answer(200, Listing(key, std::move(rows), limited));
}

// A last error of up to 4,096 bytes.
Outcome ListDead(Call& c) {
  return ListRows<DeadLetter, &WorkQueue::ListDead, wire::DeadLetterJson>(
      c, "dead", 6 * 4096 + 320);
}

Outcome PurgeDead(Call& c) {
  WorkQueue q = c.Queue();
  return Answer(200, {{"purged", Take(q.PurgeDead())}});
}

Outcome Redrive(Call& c) {
  Body b(c.req.body, {"ids", "all"});
  WorkQueue q = c.Queue();
  bool all = b.Bool("all").value_or(false);
  const Json* ids = b.Array("ids");
  if (all == (ids != nullptr)) {
    Throw(400, "invalid_argument",
          "give either \"ids\" (an array) or \"all\": true");
  }
  if (all) return Answer(200, {{"redriven", Take(q.RedriveAll())}});
  std::vector<std::int64_t> list;
  for (const Json& id : *ids) {
    if (!id.is_number_integer()) b.Wrong("ids", "an array of integers");
    list.push_back(id.get<std::int64_t>());
  }
  return Answer(200, {{"redriven", Take(q.Redrive(list))}});
}

// A worker name of up to 255 bytes.
Outcome ListArchive(Call& c) {
  return ListRows<ArchivedMessage, &WorkQueue::ListArchive, wire::ArchivedJson>(
      c, "archive", 6 * 255 + 320);
}

Outcome History(Call& c) {
  Body b(c.req.body, {});
  c.Queue();  // not_found for a queue that does not exist
  return Answer(200, HistoryJson(c.api.overview, c.name()));
}

constexpr Route kRoutes[] = {
    {"GET", "/v1/queues", Access::kToken, ListQueues},
    {"POST", "/v1/queues/{name}", Access::kAdmin, CreateQueue},
    {"GET", "/v1/queues/{name}", Access::kAny, GetQueue},
    {"PATCH", "/v1/queues/{name}", Access::kAdmin, ChangeQueue},
    {"DELETE", "/v1/queues/{name}", Access::kAdmin, DropQueue},
    {"POST", "/v1/queues/{name}/pause", Access::kAdmin, PauseOrResume},
    {"POST", "/v1/queues/{name}/resume", Access::kAdmin, PauseOrResume},
    {"POST", "/v1/queues/{name}/purge", Access::kAdmin, Purge},
    {"GET", "/v1/queues/{name}/dead", Access::kAdmin, ListDead},
    {"DELETE", "/v1/queues/{name}/dead", Access::kAdmin, PurgeDead},
    {"POST", "/v1/queues/{name}/dead/redrive", Access::kAdmin, Redrive},
    {"GET", "/v1/queues/{name}/archive", Access::kAdmin, ListArchive},
    {"GET", "/v1/queues/{name}/history", Access::kAny, History},
};

}  // namespace

std::span<const Route> QueueRoutes() { return kRoutes; }

}  // namespace sqlq::server::api
