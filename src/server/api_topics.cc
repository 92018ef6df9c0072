// The native API's routes of topics: create, drop, list, subscriptions
// (with a header filter each) and publish (docs/http-api.md, "Topics").
//
// Permissions, on the topic's name as on a queue's: creating, dropping and
// unsubscribing take admin; publishing takes send; seeing the
// subscriptions takes any. Subscribing takes admin on the topic and send on
// the queue, since the topic's publishes then land in it.

#include <fmt/format.h>

#include <string>
#include <vector>

#include "server/api_call.h"
#include "server/body.h"
#include "wire/json.h"

namespace sqlq::server::api {
namespace {

Json HeadersJson(const Headers& h) {
  Json out = Json::object();
  for (const auto& [k, v] : h) out[k] = v;
  return out;
}

Outcome ListTopics(Call& c) {
  Body b(c.req.body, {});
  Json list = Json::array();
  for (const TopicInfo& t : Take(c.api.store.ListTopics())) {
    if (c.Visible(t.name)) list.push_back(wire::TopicJson(t));
  }
  return Answer(200, {{"topics", std::move(list)}});
}

Outcome CreateTopic(Call& c) {
  Body b(c.req.body, {});
  Check(c.api.store.CreateTopic(c.name()));
  return Answer(201, {{"name", c.name()}, {"kind", "topic"}});
}

Outcome DropTopic(Call& c) {
  Body b(c.req.body, {});
  Check(c.api.store.DropTopic(c.name()));
  return Answer(200, {{"dropped", c.name()}});
}

Outcome ListSubscriptions(Call& c) {
  Body b(c.req.body, {});
  Json list = Json::array();
  for (const Subscription& s : Take(c.api.store.ListSubscriptions(c.name()))) {
    list.push_back(wire::SubscriptionJson(s));
  }
  return Answer(200, {{"topic", c.name()}, {"subscriptions", std::move(list)}});
}

// PUT: {"filter": {header: value, ...}}, optional (none: every message).
Outcome Subscribe(Call& c) {
  const std::string& queue = c.Param("queue");
  c.Need(kAdmin, c.name());
  c.Need(kSend, queue);
  Body b(c.req.body, {"filter"});
  Headers filter;
  if (const Json* f = b.Value("filter")) {
    if (!f->is_object()) b.Wrong("filter", "an object of strings");
    for (const auto& [key, v] : f->items()) {
      if (!v.is_string()) b.Wrong("filter", "an object of strings");
      filter[key] = v.get<std::string>();
    }
  }
  const bool added = Take(c.api.store.Subscribe(c.name(), queue, filter));
  return Answer(added ? 201 : 200, {{"topic", c.name()},
                                    {"queue", queue},
                                    {"filter", HeadersJson(filter)},
                                    {"created", added}});
}

Outcome Unsubscribe(Call& c) {
  Body b(c.req.body, {});
  const std::string& queue = c.Param("queue");
  Check(c.api.store.Unsubscribe(c.name(), queue));
  return Answer(200, {{"topic", c.name()}, {"unsubscribed", queue}});
}

// POST .../messages: the body of a queue's send; the reply lists each
// message stored, by queue ("message": its index in the body's messages).
Outcome Publish(Call& c) {
  const std::vector<Message> msgs = ReadSend(c.req.body, c.api.limits);
  auto deliveries = Take(c.api.store.PublishBatch(c.name(), msgs));
  Json list = Json::array();
  for (const Delivery& d : deliveries) {
    list.push_back({{"queue", d.queue},
                    {"message", d.message},
                    {"id", d.sent.id},
                    {"duplicate", d.sent.duplicate}});
  }
  const std::size_t n = list.size();
  return Answer(200, {{"deliveries", std::move(list)}, {"count", n}});
}

constexpr std::string_view kTopic = "/v1/topics/{name}";
constexpr std::string_view kSubscription =
    "/v1/topics/{name}/subscriptions/{queue}";

constexpr Route kRoutes[] = {
    {"GET", "/v1/topics", Access::kToken, ListTopics},
    {"POST", kTopic, Access::kAdmin, CreateTopic},
    {"DELETE", kTopic, Access::kAdmin, DropTopic},
    {"GET", "/v1/topics/{name}/subscriptions", Access::kAny, ListSubscriptions},
    {"PUT", kSubscription, Access::kAdmin, Subscribe, true},
    {"DELETE", kSubscription, Access::kAdmin, Unsubscribe},
    {"POST", "/v1/topics/{name}/messages", Access::kSend, Publish},
};

}  // namespace

std::span<const Route> TopicRoutes() { return kRoutes; }

}  // namespace sqlq::server::api
