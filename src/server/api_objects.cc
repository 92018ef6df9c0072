// The native API's routes of rings, rotations, schedules and live
// workers, and of all queues, rings, rotations and topics at once.

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "server/api_call.h"
#include "server/body.h"
#include "server/inputs.h"
#include "server/paging.h"
#include "wire/json.h"

namespace sqlq::server::api {
namespace {

// ---- lists ----

Json RingsJson(Call& c) {
  Json list = Json::array();
  for (const RingInfo& r : Take(c.api.store.ListRings())) {
    if (c.Visible(r.name)) list.push_back(wire::RingJson(r.name, r.options));
  }
  return list;
}

Json RotationsJson(Call& c) {
  Json list = Json::array();
  for (const RotationInfo& r : Take(c.api.store.ListRotations())) {
    if (c.Visible(r.name))
      list.push_back(wire::RotationJson(r.name, r.options));
  }
  return list;
}

Outcome ListRings(Call& c) {
  Body b(c.req.body, {});
  return Answer(200, {{"rings", RingsJson(c)}});
}

Outcome ListRotations(Call& c) {
  Body b(c.req.body, {});
  return Answer(200, {{"rotations", RotationsJson(c)}});
}

Outcome ListAll(Call& c) {
  Body b(c.req.body, {});
  Json queues = Json::array();
  for (const QueueInfo& q : Take(c.api.store.ListQueues())) {
    if (c.Visible(q.name)) queues.push_back(wire::QueueJson(q));
  }
  Json topics = Json::array();
  for (const TopicInfo& t : Take(c.api.store.ListTopics())) {
    if (c.Visible(t.name)) topics.push_back(wire::TopicJson(t));
  }
  return Answer(200, {{"queues", std::move(queues)},
                      {"rings", RingsJson(c)},
                      {"rotations", RotationsJson(c)},
                      {"topics", std::move(topics)}});
}

// ---- rings and rotations alike ----

// GET /v1/rings/{name} and /v1/rotations/{name}: the object's stats.
template <auto get, auto json>
Outcome GetStats(Call& c) {
  return Answer(200, json(Take(Take((c.api.store.*get)(c.name())).Stats())));
}

// DELETE /v1/rings/{name} and /v1/rotations/{name}.
template <auto drop>
Outcome Drop(Call& c) {
  Check((c.api.store.*drop)(c.name()));
  return Answer(200, {{"dropped", c.name()}});
}

// "max_payload_bytes" of a ring's or a rotation's options.
void ReadMaxPayload(const Body& b, std::size_t& max_payload_bytes) {
  if (auto v = b.Int("max_payload_bytes", 1, 64 << 20)) {
    max_payload_bytes = static_cast<std::size_t>(*v);
  }
}

// ---- rings ----

Outcome CreateRing(Call& c) {
  Body b(c.req.body, {"capacity", "max_payload_bytes"});
  RingOptions o;
  if (auto v = b.Int("capacity", 1, INT64_MAX)) o.capacity = *v;
  ReadMaxPayload(b, o.max_payload_bytes);
  Ring r = Take(c.api.store.CreateRing(c.name(), o));
  return Answer(201, wire::RingJson(r.name(), o));
}

Outcome RingGroups(Call& c) {
  Json list = Json::array();
  for (const RingGroup& g :
       Take(Take(c.api.store.GetRing(c.name())).Groups())) {
    list.push_back(wire::RingGroupJson(g));
  }
  return Answer(200, {{"groups", std::move(list)}});
}

Outcome Push(Call& c) {
  Body b(c.req.body, {"payload", "payload_base64"});
  std::string payload = ReadPayload(b, true, c.api.limits.max_payload_bytes);
  Ring r = Take(c.api.store.GetRing(c.name()));
  return Answer(200,
                wire::RingEntryJson(Take(r.Push(c.Param("group"), payload))));
}

Outcome ReadRing(Call& c) {
  const Target& t = c.target;
  RingReadOptions o;
  o.limit = static_cast<int>(QueryInt(t, "limit", 100, 1, 10000));
  if (auto it = t.query.find("order"); it != t.query.end()) {
    if (it->second == "oldest") {
      o.oldest_first = true;
    } else if (it->second != "newest") {
      Throw(400, "invalid_argument",
            "query parameter 'order' must be newest or oldest");
    }
  }
  o.after_seq = QueryInt(t, "after_seq", 0, 0, INT64_MAX);
  Ring r = Take(c.api.store.GetRing(c.name()));
  const std::string& group = c.Param("group");
  Json list = Json::array();
  bool limited = false;
  // A group name of up to 255 bytes escapes to six times that.
  const auto entries = ListWithin<RingEntry>(
      c.api.limits.max_reply_bytes, c.api.limits.max_payload_bytes,
      6 * 255 + 320, o,
      [&](const RingReadOptions& page) { return r.Read(group, page); },
      [](RingReadOptions& page, const RingEntry& e) { page.after_seq = e.seq; },
      limited);
  for (const RingEntry& e : entries) list.push_back(wire::RingEntryJson(e));
  return Answer(200, Listing("entries", std::move(list), limited));
}

Outcome DeleteRingGroup(Call& c) {
  Ring r = Take(c.api.store.GetRing(c.name()));
  return Answer(200, {{"deleted", Take(r.DeleteGroup(c.Param("group")))}});
}

Outcome DeleteRingEntry(Call& c) {
  Ring r = Take(c.api.store.GetRing(c.name()));
  Check(r.Delete(c.Param("group"), c.Number("seq")));
  return Answer(200, {{"deleted", 1}});
}

// ---- schedules: permissions follow the schedule's queue ----

Outcome ListSchedules(Call& c) {
  Body b(c.req.body, {});
  Json list = Json::array();
  for (const ScheduleInfo& s : Take(c.api.store.ListSchedules())) {
    if (c.Visible(s.options.queue)) list.push_back(wire::ScheduleJson(s));
  }
  return Answer(200, {{"schedules", std::move(list)}});
}

Outcome CreateSchedule(Call& c) {
  const std::string& name = c.name();
  Body b(c.req.body, {"cron", "time_zone", "queue", "payload", "payload_base64",
                      "priority", "headers", "group", "kind", "timeout_ms",
                      "expire_after_ms", "on_expiry", "catch_up"});
  ScheduleOptions o;
  auto cron = b.String("cron");
  auto queue = b.String("queue");
  if (!cron || !queue) {
    Throw(400, "invalid_argument", "a schedule needs \"cron\" and \"queue\"");
  }
  c.Need(kAdmin, *queue);
  o.cron = *cron;
  o.queue = *queue;
  if (auto v = b.String("time_zone")) o.time_zone = *v;
  if (auto v = b.Int("catch_up", 0, kMaxCatchUp)) {
    o.catch_up = static_cast<int>(*v);
  }
  o.message = ReadMessage(b, c.api.limits.max_payload_bytes);
  auto created = c.api.store.CreateSchedule(name, o);
  if (!created.ok() && created.status().code() == Code::kAlreadyExists) {
    // Schedule names are shared by all tokens. The name's being taken
    // cannot be hidden, but whose it is can: a schedule on a queue this
    // token has no grant on is refused as out of its reach, naming nothing
    // but the name it asked for.
    auto taken = c.api.store.GetSchedule(name);
    if (taken.ok() && !c.Visible(taken->options.queue)) {
      Throw(403, "forbidden",
            fmt::format("the schedule name '{}' is not available to this "
                        "token",
                        name));
    }
  }
  return Answer(201, wire::ScheduleJson(Take(std::move(created))));
}

// Schedule {name}. A schedule on a queue this token has no grant on is, to
// it, not there: the same reply as for a name no schedule has (Sees).
ScheduleInfo VisibleSchedule(Call& c) {
  ScheduleInfo s = Take(c.api.store.GetSchedule(c.name()));
  if (!c.Visible(s.options.queue)) {
    Check(Status::NotFound(fmt::format("schedule '{}' not found", c.name())));
  }
  return s;
}

Outcome GetSchedule(Call& c) {
  return Answer(200, wire::ScheduleJson(VisibleSchedule(c)));
}

Outcome DropSchedule(Call& c) {
  c.Need(kAdmin, VisibleSchedule(c).options.queue);
  Check(c.api.store.DropSchedule(c.name()));
  return Answer(200, {{"dropped", c.name()}});
}

// POST .../pause and .../resume.
Outcome PauseOrResumeSchedule(Call& c) {
  c.Need(kAdmin, VisibleSchedule(c).options.queue);
  Body b(c.req.body, {});
  Check(c.last() == "pause" ? c.api.store.PauseSchedule(c.name())
                            : c.api.store.ResumeSchedule(c.name()));
  return Answer(200,
                wire::ScheduleJson(Take(c.api.store.GetSchedule(c.name()))));
}

// ---- rotations ----

Outcome CreateRotation(Call& c) {
  Body b(c.req.body, {"max_failures", "max_payload_bytes"});
  RotationOptions o;
  if (auto v = b.Int("max_failures", 1, INT32_MAX)) {
    o.max_failures = static_cast<int>(*v);
  }
  ReadMaxPayload(b, o.max_payload_bytes);
  Rotation r = Take(c.api.store.CreateRotation(c.name(), o));
  return Answer(201, wire::RotationJson(r.name(), o));
}

Outcome AddItem(Call& c) {
  Body b(c.req.body, {"key", "payload", "payload_base64"});
  auto key = b.String("key");
  if (!key) Throw(400, "invalid_argument", "\"key\" is required");
  std::string payload = ReadPayload(b, false, c.api.limits.max_payload_bytes);
  Rotation r = Take(c.api.store.GetRotation(c.name()));
  Check(r.Add(*key, payload));
  return Answer(201, {{"added", *key}});
}

Json ItemsJson(const std::vector<RotationItem>& items) {
  Json list = Json::array();
  for (const RotationItem& i : items) list.push_back(wire::RotationItemJson(i));
  return {{"items", std::move(list)}};
}

Outcome ListItems(Call& c) {
  Rotation r = Take(c.api.store.GetRotation(c.name()));
  return Answer(200, ItemsJson(Take(r.List())));
}

Outcome RemoveItem(Call& c) {
  Rotation r = Take(c.api.store.GetRotation(c.name()));
  const std::string& key = c.Param("key");
  Check(r.Remove(key));
  return Answer(200, {{"removed", key}});
}

// POST .../items/{key}/fail, ok and reset.
Outcome ItemAction(Call& c) {
  Body b(c.req.body, {});
  Rotation r = Take(c.api.store.GetRotation(c.name()));
  const std::string& key = c.Param("key");
  const std::string& action = c.last();
  if (action == "fail") {
    return Answer(200, wire::RotationItemJson(Take(r.Fail(key))));
  }
  if (action == "ok") {
    return Answer(200, wire::RotationItemJson(Take(r.Ok(key))));
  }
  return Answer(200, wire::RotationItemJson(Take(r.Reset(key))));
}

Outcome Next(Call& c) {
  Body b(c.req.body, {"n"});
  int n = static_cast<int>(b.Int("n", 1, 10000).value_or(1));
  Rotation r = Take(c.api.store.GetRotation(c.name()));
  return Answer(200, ItemsJson(Take(r.Next(n))));
}

// ---- live workers: permissions follow the queues they serve ----

// A worker a token may see: one that serves a queue it has a grant on, or
// no queue at all.
bool SeesWorker(const Call& c, const WorkerReport& r) {
  if (r.queues.empty()) return true;
  for (const std::string& q : r.queues) {
    if (c.Visible(q)) return true;
  }
  return false;
}

Outcome ListWorkers(Call& c) {
  Body b(c.req.body, {});
  const std::string* queue = nullptr;
  if (auto it = c.target.query.find("queue"); it != c.target.query.end()) {
    queue = &it->second;
  }
  Json list = Json::array();
  for (const WorkerInfo& w : Take(c.api.store.ListWorkers())) {
    if (!SeesWorker(c, w.report)) continue;
    if (queue && std::find(w.report.queues.begin(), w.report.queues.end(),
                           *queue) == w.report.queues.end()) {
      continue;
    }
    list.push_back(wire::WorkerJson(w));
  }
  return Answer(200, {{"workers", std::move(list)}});
}

std::vector<std::string> Strings(const Body& b, const char* key) {
  std::vector<std::string> out;
  if (const Json* a = b.Array(key)) {
    for (const Json& v : *a) {
      if (!v.is_string()) b.Wrong(key, "an array of strings");
      out.push_back(v.get<std::string>());
    }
  }
  return out;
}

// PUT /v1/workers/{worker}: the worker's report, which replaces its last one.
// It needs the claim permission on every queue it names.
Outcome ReportWorker(Call& c) {
  Body b(c.req.body, {"name", "host", "pid", "queues", "kinds", "concurrency",
                      "jobs", "started_at", "ttl_ms"});
  WorkerReport r;
  r.id = c.Param("worker");
  if (auto v = b.String("name")) r.name = *v;
  if (auto v = b.String("host")) r.host = *v;
  if (auto v = b.Int("pid", 0, INT64_MAX)) r.pid = *v;
  r.queues = Strings(b, "queues");
  r.kinds = Strings(b, "kinds");
  if (auto v = b.Int("concurrency", 0, 1000000)) {
    r.concurrency = static_cast<int>(*v);
  }
  if (const Json* jobs = b.Array("jobs")) {
    int i = 0;
    for (const Json& job : *jobs) {
      const std::string what = fmt::format("jobs[{}]", i++);
      if (!job.is_object())
        Throw(400, "wrong_type", what + " must be an object");
      Body jb(job, {"queue", "id", "since"}, what);
      auto queue = jb.String("queue");
      auto id = jb.Int("id", 1, INT64_MAX);
      if (!queue || !id) {
        Throw(400, "invalid_argument", what + " needs \"queue\" and \"id\"");
      }
      WorkerJob wj{.queue = *queue, .id = *id};
      if (auto since = jb.String("since")) {
        wj.since = ReadTime(what + ".since", *since);
      }
      r.jobs.push_back(std::move(wj));
    }
  }
  if (auto v = b.String("started_at"))
    r.started_at = ReadTime("started_at", *v);
  if (auto v = b.Millis("ttl_ms", 3600 * 1000)) r.ttl = *v;
  for (const std::string& q : r.queues) c.Need(kClaim, q);
  for (const WorkerJob& j : r.jobs) c.Need(kClaim, j.queue);
  Check(c.api.store.ReportWorker(r));
  return Answer(200, {{"id", r.id}, {"ttl_ms", r.ttl.count()}});
}

// DELETE /v1/workers/{worker}: a worker's goodbye. As a report, it needs the
// claim permission on every queue the worker named.
Outcome RemoveWorker(Call& c) {
  Body b(c.req.body, {});
  const std::string& id = c.Param("worker");
  for (const WorkerInfo& w : Take(c.api.store.ListWorkers())) {
    if (w.report.id != id) continue;
    for (const std::string& q : w.report.queues) c.Need(kClaim, q);
  }
  const bool removed = Take(c.api.store.RemoveWorker(id));
  if (!removed) {
    Check(Status::NotFound(fmt::format("worker '{}' not found", id)));
  }
  return Answer(200, {{"removed", 1}});
}

constexpr std::string_view kRing = "/v1/rings/{name}";
constexpr std::string_view kGroup = "/v1/rings/{name}/groups/{group}";
constexpr std::string_view kSchedule = "/v1/schedules/{name}";
constexpr std::string_view kRotation = "/v1/rotations/{name}";
constexpr std::string_view kItems = "/v1/rotations/{name}/items";

constexpr Route kRoutes[] = {
    {"GET", "/v1/all", Access::kToken, ListAll},
    {"GET", "/v1/rings", Access::kToken, ListRings},
    {"POST", kRing, Access::kAdmin, CreateRing},
    {"GET", kRing, Access::kAny,
     GetStats<&Store::GetRing, wire::RingStatsJson>},
    {"DELETE", kRing, Access::kAdmin, Drop<&Store::DropRing>},
    {"GET", "/v1/rings/{name}/groups", Access::kClaim, RingGroups},
    {"POST", kGroup, Access::kSend, Push},
    {"GET", kGroup, Access::kClaim, ReadRing},
    {"DELETE", kGroup, Access::kAdmin, DeleteRingGroup},
    {"DELETE", "/v1/rings/{name}/groups/{group}/{seq}", Access::kAdmin,
     DeleteRingEntry},
    {"GET", "/v1/workers", Access::kToken, ListWorkers},
    {"PUT", "/v1/workers/{worker}", Access::kClaim, ReportWorker, true},
    {"DELETE", "/v1/workers/{worker}", Access::kClaim, RemoveWorker, true},
    {"GET", "/v1/schedules", Access::kToken, ListSchedules},
    {"POST", kSchedule, Access::kAdmin, CreateSchedule, true},
    {"GET", kSchedule, Access::kAny, GetSchedule, true},
    {"DELETE", kSchedule, Access::kAdmin, DropSchedule, true},
    {"POST", "/v1/schedules/{name}/pause", Access::kAdmin,
     PauseOrResumeSchedule, true},
    {"POST", "/v1/schedules/{name}/resume", Access::kAdmin,
     PauseOrResumeSchedule, true},
    {"GET", "/v1/rotations", Access::kToken, ListRotations},
    {"POST", kRotation, Access::kAdmin, CreateRotation},
    {"GET", kRotation, Access::kAny,
     GetStats<&Store::GetRotation, wire::RotationStatsJson>},
    {"DELETE", kRotation, Access::kAdmin, Drop<&Store::DropRotation>},
    {"POST", kItems, Access::kAdmin, AddItem},
    {"GET", kItems, Access::kClaim, ListItems},
    {"DELETE", "/v1/rotations/{name}/items/{key}", Access::kAdmin, RemoveItem},
    {"POST", "/v1/rotations/{name}/items/{key}/fail", Access::kClaim,
     ItemAction},
    {"POST", "/v1/rotations/{name}/items/{key}/ok", Access::kClaim, ItemAction},
    {"POST", "/v1/rotations/{name}/items/{key}/reset", Access::kAdmin,
     ItemAction},
    {"POST", "/v1/rotations/{name}/next", Access::kClaim, Next},
};

}  // namespace

std::span<const Route> ObjectRoutes() { return kRoutes; }

}  // namespace sqlq::server::api
