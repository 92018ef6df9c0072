// Topics through sqlq serve: made, subscribed (with a filter), published to
// and dropped over HTTP, with the errors and permissions a client sees.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "tests/server/server_fixture.h"

namespace sqlq::server_test {
namespace {

class Topics : public ServerTest {};

TEST_F(Topics, PublishedToEverySubscriberOverHttp) {
  StartServer({});
  Client c(port());
  for (const char* q : {"emails", "audit", "eu"}) {
    ASSERT_EQ(c.Post(std::string("/v1/queues/") + q, Json::object()).status,
              201);
  }
  ASSERT_EQ(c.Post("/v1/topics/orders", Json::object()).status, 201);
  EXPECT_EQ(c.Post("/v1/topics/orders", Json::object()).status, 409);
  EXPECT_EQ(c.Post("/v1/topics/emails", Json::object()).status, 409);
  EXPECT_EQ(c.Post("/v1/topics/bad%20name", Json::object()).status, 400);
  // Nobody subscribes yet: nothing is stored, and the reply says so.
  Response none = c.Post("/v1/topics/orders/messages", {{"payload", "o1"}});
  ASSERT_EQ(none.status, 200) << none.body;
  EXPECT_EQ(none.json["count"], 0);
  EXPECT_TRUE(none.json["deliveries"].empty());
  Response sub = c.Call("PUT", "/v1/topics/orders/subscriptions/emails", "");
  ASSERT_EQ(sub.status, 201) << sub.body;
  EXPECT_EQ(sub.json["created"], true);
  ASSERT_EQ(c.Call("PUT", "/v1/topics/orders/subscriptions/audit", "{}").status,
            201);
  Response eu = c.Call("PUT", "/v1/topics/orders/subscriptions/eu",
                       R"({"filter":{"region":"eu"}})");
  ASSERT_EQ(eu.status, 201) << eu.body;
  EXPECT_EQ(eu.json["filter"]["region"], "eu");
  // Again: the filter is replaced, 200.
  eu = c.Call("PUT", "/v1/topics/orders/subscriptions/eu",
              R"({"filter":{"region":"eu"}})");
  EXPECT_EQ(eu.status, 200) << eu.body;
  // Bad filters, a missing queue, a name of another kind.
  for (const char* bad :
       {R"({"filter":"region=eu"})", R"({"filter":{"region":1}})",
        R"({"filter":{"bad key":"x"}})", R"({"filter":{"sqlq:kind":"x"}})"}) {
    Response r = c.Call("PUT", "/v1/topics/orders/subscriptions/eu", bad);
    EXPECT_EQ(r.status, 400) << bad << " " << r.body;
    EXPECT_NE(r.body.find("filter"), std::string::npos) << r.body;
  }
  EXPECT_EQ(
      c.Call("PUT", "/v1/topics/orders/subscriptions/eu", R"({"filtre":{}})")
          .status,
      400);
  EXPECT_EQ(c.Call("PUT", "/v1/topics/orders/subscriptions/nope", "").status,
            404);
  EXPECT_EQ(c.Call("PUT", "/v1/topics/nope/subscriptions/eu", "").status, 404);
  // A name of another kind: failed_precondition.
  EXPECT_EQ(c.Call("PUT", "/v1/topics/emails/subscriptions/eu", "").status,
            409);
  Response subs = c.Get("/v1/topics/orders/subscriptions");
  ASSERT_EQ(subs.status, 200) << subs.body;
  ASSERT_EQ(subs.json["subscriptions"].size(), 3u) << subs.body;
  EXPECT_EQ(subs.json["subscriptions"][0]["queue"], "audit");
  EXPECT_EQ(subs.json["subscriptions"][2]["filter"]["region"], "eu");
  Response list = c.Get("/v1/topics");
  ASSERT_EQ(list.status, 200) << list.body;
  ASSERT_EQ(list.json["topics"].size(), 1u);
  EXPECT_EQ(list.json["topics"][0]["name"], "orders");
  EXPECT_EQ(list.json["topics"][0]["subscriptions"], 3);
  Response all = c.Get("/v1/all");
  ASSERT_EQ(all.status, 200) << all.body;
  EXPECT_EQ(all.json["topics"], list.json["topics"]);

  // A batch: each message to each queue whose filter it matches.
  Response pub = c.Post(
      "/v1/topics/orders/messages",
      {{"messages",
        {{{"payload", "o2"}, {"headers", {{"region", "eu"}}}},
         {{"payload", {{"order", 3}}}, {"headers", {{"region", "us"}}}}}}});
  ASSERT_EQ(pub.status, 200) << pub.body;
  EXPECT_EQ(pub.json["count"], 5);
  std::map<std::string, int> per_queue;
  for (const Json& d : pub.json["deliveries"]) {
    ++per_queue[d["queue"].get<std::string>()];
    EXPECT_TRUE(d["id"].is_number()) << pub.body;
    EXPECT_EQ(d["duplicate"], false);
  }
  EXPECT_EQ(per_queue, (std::map<std::string, int>{
                           {"audit", 2}, {"emails", 2}, {"eu", 1}}));
  Response got = c.Post("/v1/queues/eu/claim", {{"max", 10}});
  ASSERT_EQ(got.status, 200) << got.body;
  ASSERT_EQ(got.json["messages"].size(), 1u) << got.body;
  EXPECT_EQ(got.json["messages"][0]["payload"], "o2");
  got = c.Post("/v1/queues/emails/claim", {{"max", 10}});
  ASSERT_EQ(got.json["messages"].size(), 2u) << got.body;
  EXPECT_EQ(got.json["messages"][1]["payload"]["order"], 3);
  // A body without a message: refused as a send's is.
  EXPECT_EQ(c.Post("/v1/topics/orders/messages", Json::object()).status, 400);

  // Unsubscribe; dropping a queue removes its subscription.
  EXPECT_EQ(c.Delete("/v1/topics/orders/subscriptions/eu").status, 200);
  EXPECT_EQ(c.Delete("/v1/topics/orders/subscriptions/eu").status, 404);
  EXPECT_EQ(c.Delete("/v1/queues/audit").status, 200);
  subs = c.Get("/v1/topics/orders/subscriptions");
  ASSERT_EQ(subs.json["subscriptions"].size(), 1u) << subs.body;
  EXPECT_EQ(subs.json["subscriptions"][0]["queue"], "emails");
  EXPECT_EQ(c.Delete("/v1/topics/orders").status, 200);
  EXPECT_EQ(c.Get("/v1/topics/orders/subscriptions").status, 404);
  EXPECT_EQ(c.Post("/v1/topics/orders/messages", {{"payload", "x"}}).status,
            404);
  EXPECT_TRUE(c.Get("/v1/topics").json["topics"].empty());
}

TEST_F(Topics, PermissionsAreTheTopicsAndTheQueues) {
  constexpr const char* kAdminToken = "admin-token-0001";
  constexpr const char* kPublisher = "publisher-token-0001";
  constexpr const char* kOwner = "owner-token-0001";
  std::ofstream f(dir_ / "tokens.txt");
  f << kAdminToken << " admin:*\n"
    << kPublisher << " send:news\n"
    << kOwner << " admin:news send:inbox\n";
  f.close();
  StartServer({"--tokens", (dir_ / "tokens.txt").string()});
  Client admin(port(), kAdminToken), publisher(port(), kPublisher),
      owner(port(), kOwner);
  ASSERT_EQ(admin.Post("/v1/queues/inbox", Json::object()).status, 201);
  ASSERT_EQ(admin.Post("/v1/queues/private", Json::object()).status, 201);
  EXPECT_EQ(publisher.Post("/v1/topics/news", Json::object()).status, 403);
  ASSERT_EQ(owner.Post("/v1/topics/news", Json::object()).status, 201);
  // Subscribing takes send on the queue besides admin on the topic.
  EXPECT_EQ(
      owner.Call("PUT", "/v1/topics/news/subscriptions/private", "").status,
      403);
  EXPECT_EQ(
      publisher.Call("PUT", "/v1/topics/news/subscriptions/inbox", "").status,
      403);
  ASSERT_EQ(owner.Call("PUT", "/v1/topics/news/subscriptions/inbox", "").status,
            201);
  Response pub = publisher.Post("/v1/topics/news/messages", {{"payload", "n"}});
  ASSERT_EQ(pub.status, 200) << pub.body;
  EXPECT_EQ(pub.json["count"], 1);
  EXPECT_EQ(publisher.Get("/v1/topics/news/subscriptions").status, 200);
  EXPECT_EQ(publisher.Delete("/v1/topics/news").status, 403);
  // The list shows what the token may see.
  ASSERT_EQ(admin.Post("/v1/topics/other", Json::object()).status, 201);
  Response list = publisher.Get("/v1/topics");
  ASSERT_EQ(list.status, 200) << list.body;
  ASSERT_EQ(list.json["topics"].size(), 1u) << list.body;
  EXPECT_EQ(list.json["topics"][0]["name"], "news");
}

}  // namespace
}  // namespace sqlq::server_test
