// Every endpoint of docs/http-api.md, over real HTTP against `sqlq serve`.

#include <set>

#include "tests/server/server_fixture.h"

namespace sqlq::server_test {
namespace {

class Endpoints : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    StartServer();
    c_.emplace(port());
  }
  Client& c() { return *c_; }
  std::optional<Client> c_;
};

TEST_F(Endpoints, HealthReadyAndMetrics) {
  auto h = c().Get("/healthz");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.json["status"], "ok");
  auto r = c().Get("/readyz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.json["status"], "ready");
  ASSERT_EQ(c().Post("/v1/queues/jobs", Json::object()).status, 201);
  ASSERT_EQ(c().Post("/v1/queues/jobs/messages",
                     {{"messages", {{{"payload", "a"}}, {{"payload", "b"}}}}})
                .status,
            200);
  auto m = c().Get("/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.header("content-type").find("text/plain"), std::string::npos);
  EXPECT_NE(m.body.find("sqlq_queue_ready{queue=\"jobs\"} 2"),
            std::string::npos)
      << m.body;
  EXPECT_NE(m.body.find("sqlq_queue_sends_total{queue=\"jobs\"} 2"),
            std::string::npos);
  EXPECT_NE(m.body.find("sqlq_http_request_duration_seconds_count{route=\""
                        "POST /v1/queues/{name}/messages\",status=\"2xx\"} 1"),
            std::string::npos)
      << m.body;
  EXPECT_NE(m.body.find("sqlq_server_waiting_consumers 0"), std::string::npos);
}

TEST_F(Endpoints, MetricsShowRingsAndRotations) {
  ASSERT_EQ(c().Post("/v1/rings/views", {{"capacity", 2}}).status, 201);
  for (const char* p : {"a", "b", "c"}) {
    ASSERT_EQ(c().Post("/v1/rings/views/groups/g1", {{"payload", p}}).status,
              200);
  }
  ASSERT_EQ(c().Post("/v1/rings/views/groups/g2", {{"payload", "x"}}).status,
            200);
  ASSERT_EQ(c().Post("/v1/rotations/relays", {{"max_failures", 1}}).status,
            201);
  for (const char* k : {"a", "b"}) {
    ASSERT_EQ(c().Post("/v1/rotations/relays/items", {{"key", k}}).status, 201);
  }
  ASSERT_EQ(c().Post("/v1/rotations/relays/next", {{"n", 1}}).status, 200);
  ASSERT_EQ(
      c().Post("/v1/rotations/relays/items/b/fail", Json::object()).status,
      200);
  auto m = c().Get("/metrics");
  ASSERT_EQ(m.status, 200);
  for (const char* line :
       {"sqlq_ring_capacity{ring=\"views\"} 2\n",
        "sqlq_ring_groups{ring=\"views\"} 2\n",
        "sqlq_ring_entries{ring=\"views\"} 3\n",
        "sqlq_ring_pushes_total{ring=\"views\"} 4\n",
        "sqlq_rotation_items{rotation=\"relays\"} 2\n",
        "sqlq_rotation_parked{rotation=\"relays\"} 1\n",
        "sqlq_rotation_serves_total{rotation=\"relays\"} 1\n",
        "# TYPE sqlq_ring_pushes_total counter\n"}) {
    EXPECT_NE(m.body.find(line), std::string::npos) << line << m.body;
  }
}

TEST_F(Endpoints, QueueCreateListStatsDrop) {
  auto created =
      c().Post("/v1/queues/jobs",
               {{"max_attempts", 3}, {"lease_ms", 5000}, {"archive", true}});
  ASSERT_EQ(created.status, 201) << created.body;
  EXPECT_EQ(created.json["name"], "jobs");
  EXPECT_EQ(created.json["max_attempts"], 3);
  EXPECT_EQ(created.json["lease_ms"], 5000);
  EXPECT_EQ(created.json["archive"], true);
  EXPECT_NE(created.json["created_at"].get<std::string>().substr(0, 4), "1970");
  ASSERT_EQ(c().Post("/v1/queues/other", Json::object()).status, 201);

  auto list = c().Get("/v1/queues");
  ASSERT_EQ(list.status, 200);
  std::set<std::string> names;
  for (auto& q : list.json["queues"]) names.insert(q["name"]);
  EXPECT_EQ(names, (std::set<std::string>{"jobs", "other"}));

  auto stats = c().Get("/v1/queues/jobs");
  ASSERT_EQ(stats.status, 200);
  EXPECT_EQ(stats.json["stats"]["ready"], 0);
  EXPECT_EQ(stats.json["options"]["max_attempts"], 3);

  auto dropped = c().Delete("/v1/queues/jobs");
  EXPECT_EQ(dropped.status, 200);
  EXPECT_EQ(c().Get("/v1/queues/jobs").status, 404);
}

TEST_F(Endpoints, SendClaimAckNackExtend) {
  ASSERT_EQ(c().Post("/v1/queues/jobs", {{"max_attempts", 2}}).status, 201);
  auto sent =
      c().Post("/v1/queues/jobs/messages",
               {{"messages",
                 {{{"payload", "low"}},
                  {{"payload", "high"}, {"priority", 9}},
                  {{"payload_base64", "/wA="}},  // bytes 0xff 0x00: not UTF-8
                  {{"payload", "later"}, {"delay_ms", 3600000}},
                  {{"payload", "d1"}, {"dedup", "k"}},
                  {{"payload", "d2"}, {"dedup", "k"}}}}});
  ASSERT_EQ(sent.status, 200) << sent.body;
  ASSERT_EQ(sent.json["ids"].size(), 6u);
  EXPECT_EQ(sent.json["duplicate"][5], true);
  EXPECT_EQ(sent.json["ids"][5], sent.json["ids"][4]);

  auto claimed = c().Post("/v1/queues/jobs/claim", {{"max", 10}});
  ASSERT_EQ(claimed.status, 200) << claimed.body;
  auto& msgs = claimed.json["messages"];
  ASSERT_EQ(msgs.size(), 4u) << claimed.body;  // not the delayed one
  EXPECT_EQ(msgs[0]["payload"], "high");
  EXPECT_EQ(msgs[0]["attempt"], 1);
  EXPECT_EQ(msgs[0]["priority"], 9);
  EXPECT_EQ(msgs[1]["payload"], "low");
  EXPECT_FALSE(msgs[2].contains("payload"));
  EXPECT_EQ(msgs[2]["payload_base64"], "/wA=");
  EXPECT_TRUE(msgs[0].contains("lease_expires_at"));

  auto ack = c().Post("/v1/queues/jobs/ack", {{"receipt", msgs[0]["receipt"]}});
  EXPECT_EQ(ack.status, 200) << ack.body;
  EXPECT_EQ(ack.json["acked"], 1);
  // The same receipt again: the message is gone.
  EXPECT_EQ(
      c().Post("/v1/queues/jobs/ack", {{"receipt", msgs[0]["receipt"]}}).status,
      404);

  auto batch = c().Post("/v1/queues/jobs/ack",
                        {{"receipts", {msgs[1]["receipt"], "not-a-receipt"}}});
  ASSERT_EQ(batch.status, 200) << batch.body;
  EXPECT_EQ(batch.json["acked"], 1);
  EXPECT_EQ(batch.json["results"][0]["ok"], true);
  EXPECT_EQ(batch.json["results"][1]["error"]["code"], "invalid_argument");

  auto ext = c().Post("/v1/queues/jobs/extend",
                      {{"receipt", msgs[2]["receipt"]}, {"lease_ms", 60000}});
  EXPECT_EQ(ext.status, 200) << ext.body;
  EXPECT_TRUE(ext.json.contains("lease_expires_at"));

  auto nack = c().Post(
      "/v1/queues/jobs/nack",
      {{"receipt", msgs[3]["receipt"]}, {"delay_ms", 0}, {"error", "boom"}});
  ASSERT_EQ(nack.status, 200) << nack.body;
  EXPECT_EQ(nack.json["outcome"], "retry");
  // Second attempt of max 2: its nack makes it a dead letter.
  auto again = c().Post("/v1/queues/jobs/claim", {{"max", 1}});
  ASSERT_EQ(again.json["messages"].size(), 1u);
  EXPECT_EQ(again.json["messages"][0]["attempt"], 2);
  auto dead = c().Post("/v1/queues/jobs/nack",
                       {{"receipt", again.json["messages"][0]["receipt"]},
                        {"error", "boom again"}});
  EXPECT_EQ(dead.json["outcome"], "dead");

  auto stats = c().Get("/v1/queues/jobs");
  EXPECT_EQ(stats.json["stats"]["dead"], 1);
  EXPECT_EQ(stats.json["stats"]["delayed"], 1);
  EXPECT_EQ(stats.json["stats"]["leased"], 1);
}

TEST_F(Endpoints, ClaimWithAnAckAcksAndClaimsTheNextInOneRequest) {
  ASSERT_EQ(c().Post("/v1/queues/jobs", {{"lease_ms", 60000}}).status, 201);
  ASSERT_EQ(
      c().Post("/v1/queues/jobs/messages",
               {{"messages", {{{"payload", "one"}}, {{"payload", "two"}}}}})
          .status,
      200);
  auto first = c().Post("/v1/queues/jobs/claim", Json::object());
  ASSERT_EQ(first.json["messages"].size(), 1u) << first.body;
  const Json receipt = first.json["messages"][0]["receipt"];

  auto next = c().Post("/v1/queues/jobs/claim", {{"ack", receipt}});
  ASSERT_EQ(next.status, 200) << next.body;
  ASSERT_EQ(next.json["messages"].size(), 1u) << next.body;
  EXPECT_EQ(next.json["messages"][0]["payload"], "two");
  auto stats = c().Get("/v1/queues/jobs");
  EXPECT_EQ(stats.json["stats"]["acks"], 1);
  EXPECT_EQ(stats.json["stats"]["leased"], 1);

  // The acked receipt again: refused, and nothing is claimed.
  ASSERT_EQ(c().Post("/v1/queues/jobs/messages",
                     {{"messages", {{{"payload", "three"}}}}})
                .status,
            200);
  auto again = c().Post("/v1/queues/jobs/claim", {{"ack", receipt}});
  EXPECT_EQ(again.status, 404) << again.body;
  EXPECT_EQ(again.json["error"]["code"], "not_found") << again.body;
  auto bad = c().Post("/v1/queues/jobs/claim",
                      {{"ack", "not-a-receipt"}, {"wait_ms", 100}});
  EXPECT_EQ(bad.status, 400) << bad.body;
  stats = c().Get("/v1/queues/jobs");
  EXPECT_EQ(stats.json["stats"]["ready"], 1);
  EXPECT_EQ(stats.json["stats"]["leased"], 1);

  // With a wait: the ack is done, then the claim takes what is ready.
  auto waited = c().Post(
      "/v1/queues/jobs/claim",
      {{"ack", next.json["messages"][0]["receipt"]}, {"wait_ms", 5000}});
  ASSERT_EQ(waited.status, 200) << waited.body;
  ASSERT_EQ(waited.json["messages"].size(), 1u) << waited.body;
  EXPECT_EQ(waited.json["messages"][0]["payload"], "three");
  stats = c().Get("/v1/queues/jobs");
  EXPECT_EQ(stats.json["stats"]["acks"], 2);
}

TEST_F(Endpoints, DeadLettersListRedrivePurgeAndArchiveAndPurge) {
  ASSERT_EQ(
      c().Post("/v1/queues/jobs", {{"max_attempts", 1}, {"archive", true}})
          .status,
      201);
  ASSERT_EQ(c().Post("/v1/queues/jobs/messages",
                     {{"messages", {{{"payload", "a"}}, {{"payload", "b"}}}}})
                .status,
            200);
  auto claimed = c().Post("/v1/queues/jobs/claim", {{"max", 2}});
  ASSERT_EQ(claimed.json["messages"].size(), 2u);
  for (auto& m : claimed.json["messages"]) {
    ASSERT_EQ(c().Post("/v1/queues/jobs/nack",
                       {{"receipt", m["receipt"]}, {"error", "bad"}})
                  .json["outcome"],
              "dead");
  }
  auto dead = c().Get("/v1/queues/jobs/dead?limit=10");
  ASSERT_EQ(dead.status, 200) << dead.body;
  ASSERT_EQ(dead.json["dead"].size(), 2u);
  EXPECT_EQ(dead.json["dead"][0]["last_error"], "bad");
  auto first_id = dead.json["dead"][0]["id"];

  auto one = c().Post("/v1/queues/jobs/dead/redrive", {{"ids", {first_id}}});
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(one.json["redriven"], 1);
  auto all = c().Post("/v1/queues/jobs/dead/redrive", {{"all", true}});
  EXPECT_EQ(all.json["redriven"], 1);

  auto again = c().Post("/v1/queues/jobs/claim", {{"max", 2}});
  ASSERT_EQ(again.json["messages"].size(), 2u);
  ASSERT_EQ(c().Post("/v1/queues/jobs/ack",
                     {{"receipt", again.json["messages"][0]["receipt"]}})
                .status,
            200);
  ASSERT_EQ(c().Post("/v1/queues/jobs/nack",
                     {{"receipt", again.json["messages"][1]["receipt"]}})
                .json["outcome"],
            "dead");
  auto purged = c().Delete("/v1/queues/jobs/dead");
  EXPECT_EQ(purged.json["purged"], 1);

  auto archive = c().Get("/v1/queues/jobs/archive");
  ASSERT_EQ(archive.status, 200);
  EXPECT_EQ(archive.json["archive"].size(), 1u);

  ASSERT_EQ(
      c().Post("/v1/queues/jobs/messages", {{"messages", {{{"payload", "x"}}}}})
          .status,
      200);
  auto p = c().Post("/v1/queues/jobs/purge", Json::object());
  EXPECT_EQ(p.status, 200);
  EXPECT_EQ(p.json["purged"], 1);
}

TEST_F(Endpoints, Rings) {
  auto created = c().Post("/v1/rings/viewers", {{"capacity", 2}});
  ASSERT_EQ(created.status, 201) << created.body;
  for (const char* who : {"ann", "bob", "cy"}) {
    auto pushed =
        c().Post("/v1/rings/viewers/groups/article%201", {{"payload", who}});
    ASSERT_EQ(pushed.status, 200) << pushed.body;
    EXPECT_EQ(pushed.json["group"], "article 1");
  }
  auto read = c().Get("/v1/rings/viewers/groups/article%201");
  ASSERT_EQ(read.status, 200) << read.body;
  ASSERT_EQ(read.json["entries"].size(), 2u);
  EXPECT_EQ(read.json["entries"][0]["payload"], "cy");
  auto oldest = c().Get("/v1/rings/viewers/groups/article%201?order=oldest");
  EXPECT_EQ(oldest.json["entries"][0]["payload"], "bob");
  // '+' in a path is itself (only a query string reads it as a space).
  ASSERT_EQ(c().Post("/v1/rings/viewers/groups/c++", {{"payload", "x"}})
                .json["group"],
            "c++");
  EXPECT_EQ(c().Delete("/v1/rings/viewers/groups/c++").json["deleted"], 1);
  auto groups = c().Get("/v1/rings/viewers/groups");
  ASSERT_EQ(groups.json["groups"].size(), 1u);
  EXPECT_EQ(groups.json["groups"][0]["entries"], 2);
  auto seq = read.json["entries"][0]["seq"].get<std::int64_t>();
  EXPECT_EQ(
      c().Delete("/v1/rings/viewers/groups/article%201/" + std::to_string(seq))
          .status,
      200);
  auto stats = c().Get("/v1/rings/viewers");
  EXPECT_EQ(stats.json["entries"], 1);
  EXPECT_EQ(stats.json["pushes"], 4);
  EXPECT_EQ(c().Delete("/v1/rings/viewers/groups/article%201").json["deleted"],
            1);
  EXPECT_EQ(c().Delete("/v1/rings/viewers").status, 200);
  EXPECT_EQ(c().Get("/v1/rings/viewers").status, 404);
}

TEST_F(Endpoints, RingsAndRotationsAreListed) {
  auto none = c().Get("/v1/rings");
  ASSERT_EQ(none.status, 200) << none.body;
  EXPECT_EQ(none.json["rings"], Json::array());
  ASSERT_EQ(c().Post("/v1/rings/views", {{"capacity", 3}}).status, 201);
  ASSERT_EQ(c().Post("/v1/rotations/relays", {{"max_failures", 2}}).status,
            201);
  ASSERT_EQ(c().Post("/v1/queues/jobs", Json::object()).status, 201);
  auto rings = c().Get("/v1/rings");
  ASSERT_EQ(rings.status, 200) << rings.body;
  ASSERT_EQ(rings.json["rings"].size(), 1u) << rings.body;
  EXPECT_EQ(rings.json["rings"][0]["name"], "views");
  EXPECT_EQ(rings.json["rings"][0]["capacity"], 3);
  auto rotations = c().Get("/v1/rotations");
  ASSERT_EQ(rotations.status, 200) << rotations.body;
  ASSERT_EQ(rotations.json["rotations"].size(), 1u) << rotations.body;
  EXPECT_EQ(rotations.json["rotations"][0]["name"], "relays");
  EXPECT_EQ(rotations.json["rotations"][0]["max_failures"], 2);
  EXPECT_EQ(c().Post("/v1/rings", Json::object()).status, 405);
}

TEST_F(Endpoints, Rotations) {
  ASSERT_EQ(c().Post("/v1/rotations/relays", {{"max_failures", 1}}).status,
            201);
  for (const char* k : {"r1", "r2", "r3"}) {
    ASSERT_EQ(c().Post("/v1/rotations/relays/items",
                       {{"key", k}, {"payload", std::string("host-") + k}})
                  .status,
              201);
  }
  auto next = c().Post("/v1/rotations/relays/next", {{"n", 2}});
  ASSERT_EQ(next.status, 200) << next.body;
  ASSERT_EQ(next.json["items"].size(), 2u);
  EXPECT_EQ(next.json["items"][0]["key"], "r1");
  EXPECT_EQ(next.json["items"][1]["key"], "r2");
  auto failed = c().Post("/v1/rotations/relays/items/r3/fail", Json::object());
  ASSERT_EQ(failed.status, 200) << failed.body;
  EXPECT_EQ(failed.json["parked"], true);
  auto next2 = c().Post("/v1/rotations/relays/next", {{"n", 1}});
  EXPECT_EQ(next2.json["items"][0]["key"], "r1");  // r3 is parked
  EXPECT_EQ(c().Post("/v1/rotations/relays/items/r3/reset", Json::object())
                .json["parked"],
            false);
  EXPECT_EQ(c().Post("/v1/rotations/relays/items/r1/ok", Json::object()).status,
            200);
  auto list = c().Get("/v1/rotations/relays/items");
  EXPECT_EQ(list.json["items"].size(), 3u);
  EXPECT_EQ(c().Delete("/v1/rotations/relays/items/r2").status, 200);
  auto stats = c().Get("/v1/rotations/relays");
  EXPECT_EQ(stats.json["items"], 2);
  EXPECT_EQ(c().Delete("/v1/rotations/relays").status, 200);
}

// The server keeps queue handles; a queue dropped and made again by another
// process must not send into the old one.
TEST_F(Endpoints, QueueRecreatedByAnotherProcessIsUsedAtOnce) {
  ASSERT_EQ(c().Post("/v1/queues/jobs", Json::object()).status, 201);
  ASSERT_EQ(c().Post("/v1/queues/jobs/messages",
                     {{"messages", {{{"payload", "old"}}}}})
                .status,
            200);
  const std::string cli =
      std::string(SQLQ_BIN) + " --db " + server_->db_url() + " queue ";
  ASSERT_EQ(std::system((cli + "drop jobs >/dev/null").c_str()), 0);
  ASSERT_EQ(std::system((cli + "create jobs >/dev/null").c_str()), 0);
  auto sent = c().Post("/v1/queues/jobs/messages",
                       {{"messages", {{{"payload", "new"}}}}});
  ASSERT_EQ(sent.status, 200) << sent.body;
  auto claimed = c().Post("/v1/queues/jobs/claim", {{"max", 10}});
  ASSERT_EQ(claimed.json["messages"].size(), 1u) << claimed.body;
  EXPECT_EQ(claimed.json["messages"][0]["payload"], "new");
}

TEST_F(Endpoints, KeepAliveServesManyRequestsOnOneConnection) {
  RawConn raw(port());
  ASSERT_TRUE(raw.ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(raw.Write("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"));
    std::string r = raw.ReadResponse();
    EXPECT_EQ(StatusOf(r), 200) << r;
  }
}

}  // namespace
}  // namespace sqlq::server_test
