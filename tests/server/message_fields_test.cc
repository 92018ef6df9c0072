// What a message carries over HTTP besides a text payload: a JSON value as
// payload, headers, run_at, and the error history of dead letters
// (docs/http-api.md, "Send" and "Objects"), against a running `sqlq serve`.

#include <cstdio>
#include <ctime>
#include <future>
#include <thread>

#include "tests/server/server_fixture.h"

namespace sqlq::server_test {
namespace {

class MessageFields : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    StartServer();
    c_.emplace(port());
    ASSERT_EQ(c().Post("/v1/queues/jobs", {{"max_attempts", 2}}).status, 201);
  }
  Client& c() { return *c_; }

  Response Send(const Json& message) {
    return c().Post("/v1/queues/jobs/messages",
                    {{"messages", Json::array({message})}});
  }
  Json ClaimOne() {
    Response r = c().Post("/v1/queues/jobs/claim", {{"max", 1}});
    EXPECT_EQ(r.status, 200) << r.body;
    if (r.json["messages"].empty()) return Json();
    return r.json["messages"][0];
  }
  // Sends `bad` and expects it refused with `code`, naming `says`, and
  // nothing stored.
  void ExpectRefused(const Json& bad, const std::string& code,
                     const std::string& says) {
    Response r = Send(bad);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(r.json["error"]["code"], code) << r.body;
    EXPECT_NE(r.json["error"]["message"].get<std::string>().find(says),
              std::string::npos)
        << r.body;
    EXPECT_EQ(c().Get("/v1/queues/jobs").json["stats"]["sends"], 0) << r.body;
  }
  std::optional<Client> c_;
};

TEST_F(MessageFields, AJsonPayloadComesBackAsTheSameJsonValue) {
  const Json job = Json::parse(
      R"({"to": "ada@example.com", "n": 3, "tags": ["a", "b"], "z": null})");
  ASSERT_EQ(Send({{"payload", job}}).status, 200);
  ASSERT_EQ(Send({{"payload", 42}}).status, 200);
  ASSERT_EQ(Send({{"payload", "plain text"}}).status, 200);

  Json m = ClaimOne();
  EXPECT_EQ(m["payload"], job);  // a JSON object, keys in the order sent
  EXPECT_EQ(m["payload"].dump(), job.dump());
  EXPECT_EQ(m["headers"], Json({{"content-type", "application/json"}}));
  m = ClaimOne();
  EXPECT_EQ(m["payload"], 42);
  m = ClaimOne();
  EXPECT_EQ(m["payload"], "plain text");
  EXPECT_FALSE(m.contains("headers"));
}

TEST_F(MessageFields, HeadersTravelToTheClaimAndTheDeadLetter) {
  const Json headers = {{"traceparent", "00-4bf92f35-00f067aa-01"},
                        {"tenant", "acme"}};
  ASSERT_EQ(Send({{"payload", "x"}, {"headers", headers}}).status, 200);
  Json m = ClaimOne();
  EXPECT_EQ(m["headers"], headers);
  ASSERT_EQ(c().Post("/v1/queues/jobs/nack", {{"receipt", m["receipt"]},
                                              {"error", "smtp 451"},
                                              {"delay_ms", 0}})
                .status,
            200);
  m = ClaimOne();
  ASSERT_EQ(c().Post("/v1/queues/jobs/nack",
                     {{"receipt", m["receipt"]}, {"error", "smtp 550"}})
                .status,
            200);
  Response dead = c().Get("/v1/queues/jobs/dead");
  ASSERT_EQ(dead.status, 200) << dead.body;
  const Json& d = dead.json["dead"][0];
  EXPECT_EQ(d["headers"], headers);
  ASSERT_EQ(d["errors"].size(), 2u) << dead.body;
  EXPECT_EQ(d["errors"][0]["attempt"], 1);
  EXPECT_EQ(d["errors"][0]["error"], "smtp 451");
  EXPECT_EQ(d["errors"][1]["attempt"], 2);
  EXPECT_EQ(d["errors"][1]["error"], "smtp 550");
  EXPECT_TRUE(d["errors"][1]["at"].is_string());
}

TEST_F(MessageFields, JobKindsAndNackActionsOverHttp) {
  // Bad kinds, and sqlq's own header names, are refused; nothing stored.
  ExpectRefused({{"payload", "x"}, {"kind", "has space"}}, "invalid_argument",
                "kind");
  ExpectRefused({{"payload", "x"}, {"kind", std::string(129, 'k')}},
                "invalid_argument", "kind");
  ExpectRefused({{"payload", "x"}, {"kind", 7}}, "wrong_type", "kind");
  ExpectRefused({{"payload", "x"}, {"headers", {{"sqlq:kind", "forged"}}}},
                "invalid_argument", "sqlq:");
  Response sent =
      c().Post("/v1/queues/jobs/messages",
               {{"messages",
                 Json::array({{{"payload", "a"}, {"kind", "email.send"}},
                              {{"payload", "b"}, {"kind", "billing/invoice"}},
                              {{"payload", "c"}}})}});
  ASSERT_EQ(sent.status, 200) << sent.body;
  Response listed = c().Get("/v1/queues/jobs/messages?kind=email.send");
  ASSERT_EQ(listed.status, 200) << listed.body;
  ASSERT_EQ(listed.json["messages"].size(), 1u) << listed.body;
  EXPECT_EQ(listed.json["messages"][0]["kind"], "email.send");
  EXPECT_FALSE(listed.json["messages"][0].contains("headers")) << listed.body;
  EXPECT_EQ(c().Get("/v1/queues/jobs/messages/count?kind=billing/invoice")
                .json["count"],
            1);
  EXPECT_EQ(c().Get("/v1/queues/jobs/messages?kind=").status, 400);

  Response claimed = c().Post("/v1/queues/jobs/claim", {{"max", 3}});
  ASSERT_EQ(claimed.status, 200) << claimed.body;
  const Json& ms = claimed.json["messages"];
  ASSERT_EQ(ms.size(), 3u) << claimed.body;
  EXPECT_EQ(ms[0]["kind"], "email.send");
  EXPECT_EQ(ms[1]["kind"], "billing/invoice");
  EXPECT_FALSE(ms[2].contains("kind")) << claimed.body;

  // An unknown action changes nothing: the lease stays with its holder.
  Response bad = c().Post("/v1/queues/jobs/nack",
                          {{"receipt", ms[0]["receipt"]}, {"action", "later"}});
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_EQ(bad.json["error"]["code"], "invalid_argument") << bad.body;

  // Snoozed: back at once (no delay), the same attempt, counted.
  Response snoozed = c().Post(
      "/v1/queues/jobs/nack",
      {{"receipt", ms[0]["receipt"]}, {"action", "snooze"}, {"delay_ms", 0}});
  ASSERT_EQ(snoozed.status, 200) << snoozed.body;
  EXPECT_EQ(snoozed.json["outcome"], "snoozed");
  Json again = ClaimOne();
  EXPECT_EQ(again["id"], ms[0]["id"]);
  EXPECT_EQ(again["attempt"], 1);
  EXPECT_EQ(again["kind"], "email.send");
  Response got = c().Get("/v1/queues/jobs/messages/" +
                         std::to_string(again["id"].get<std::int64_t>()));
  EXPECT_EQ(got.json["snoozes"], 1) << got.body;
  EXPECT_EQ(got.json["kind"], "email.send") << got.body;

  // Dead now, with attempts left (max_attempts is 2).
  Response dead =
      c().Post("/v1/queues/jobs/nack", {{"receipt", ms[1]["receipt"]},
                                        {"action", "dead"},
                                        {"error", "cancelled: customer gone"}});
  ASSERT_EQ(dead.status, 200) << dead.body;
  EXPECT_EQ(dead.json["outcome"], "dead");
  Response letters = c().Get("/v1/queues/jobs/dead");
  ASSERT_EQ(letters.json["dead"].size(), 1u) << letters.body;
  EXPECT_EQ(letters.json["dead"][0]["kind"], "billing/invoice");
  EXPECT_EQ(letters.json["dead"][0]["attempts"], 1);
  EXPECT_EQ(letters.json["dead"][0]["last_error"], "cancelled: customer gone");
  // Its receipt is spent: a second outcome is refused.
  EXPECT_EQ(c().Post("/v1/queues/jobs/nack",
                     {{"receipt", ms[1]["receipt"]}, {"action", "snooze"}})
                .status,
            404);
}

TEST_F(MessageFields, AJobsTimeoutAndExpiryOverHttp) {
  ExpectRefused({{"payload", "x"}, {"timeout_ms", 0}}, "invalid_argument",
                "timeout");
  ExpectRefused(
      {{"payload", "x"}, {"delay_ms", 60000}, {"expire_after_ms", 1000}},
      "invalid_argument", "expire_after");
  ASSERT_EQ(Send({{"payload", "x"},
                  {"kind", "thumb"},
                  {"timeout_ms", 5000},
                  {"expire_after_ms", 600000}})
                .status,
            200);
  Response claimed =
      c().Post("/v1/queues/jobs/claim", {{"max", 1}, {"lease_ms", 30000}});
  ASSERT_EQ(claimed.status, 200) << claimed.body;
  const Json& m = claimed.json["messages"][0];
  EXPECT_EQ(m["timeout_ms"], 5000) << claimed.body;
  EXPECT_TRUE(m["expires_at"].is_string()) << claimed.body;
  EXPECT_FALSE(m.contains("headers")) << claimed.body;
  // Leased for its timeout, not the 30 s the claim asked for.
  // Seconds since the epoch of "2026-11-29T21:25:17.985392Z".
  auto secs = [](const Json& t) {
    std::tm tm{};
    double frac = 0;
    std::sscanf(t.get<std::string>().c_str(), "%d-%d-%dT%d:%d:%lfZ",
                &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                &frac);
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return static_cast<double>(timegm(&tm)) + frac;
  };
  const double enqueued = secs(m["enqueued_at"]);
  EXPECT_LT(secs(m["lease_expires_at"]) - enqueued, 20) << claimed.body;
  EXPECT_NEAR(secs(m["expires_at"]) - enqueued, 600, 1e-3) << claimed.body;
  Response got = c().Get("/v1/queues/jobs/messages/" +
                         std::to_string(m["id"].get<std::int64_t>()));
  EXPECT_EQ(got.json["timeout_ms"], 5000) << got.body;
  EXPECT_EQ(got.json["expire_after_ms"], 600000) << got.body;
}

TEST_F(MessageFields, AnExpiredJobIsDroppedOrDeadLetteredAsItsSendSays) {
  ExpectRefused(
      {{"payload", "x"}, {"expire_after_ms", 1000}, {"on_expiry", "later"}},
      "invalid_argument", "on_expiry");
  ExpectRefused({{"payload", "x"}, {"expire_after_ms", 1000}, {"on_expiry", 1}},
                "wrong_type", "on_expiry");
  ExpectRefused({{"payload", "x"}, {"on_expiry", "drop"}}, "invalid_argument",
                "expire_after");
  Response sent =
      c().Post("/v1/queues/jobs/messages", {{"messages",
                                             {{{"payload", "late, dropped"},
                                               {"expire_after_ms", 1},
                                               {"on_expiry", "drop"}},
                                              {{"payload", "late, buried"},
                                               {"expire_after_ms", 1},
                                               {"on_expiry", "dead"}},
                                              {{"payload", "in time"},
                                               {"expire_after_ms", 600000},
                                               {"on_expiry", "drop"}}}}});
  ASSERT_EQ(sent.status, 200) << sent.body;
  const auto id = [&](int i) {
    return std::to_string(sent.json["ids"][i].get<std::int64_t>());
  };
  Response waiting = c().Get("/v1/queues/jobs/messages/" + id(0));
  EXPECT_EQ(waiting.json["on_expiry"], "drop") << waiting.body;
  EXPECT_FALSE(
      c().Get("/v1/queues/jobs/messages/" + id(1)).json.contains("on_expiry"));
  // The first two expire 1 ms after their send, which has returned: past
  // that once this much more time has gone by.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  Response claimed = c().Post("/v1/queues/jobs/claim", {{"max", 10}});
  ASSERT_EQ(claimed.status, 200) << claimed.body;
  ASSERT_EQ(claimed.json["messages"].size(), 1u) << claimed.body;
  EXPECT_EQ(claimed.json["messages"][0]["payload"], "in time");
  EXPECT_EQ(claimed.json["messages"][0]["on_expiry"], "drop");
  // Dropped: gone, not a dead letter. The other one is.
  EXPECT_EQ(c().Get("/v1/queues/jobs/messages/" + id(0)).status, 404);
  Response letters = c().Get("/v1/queues/jobs/dead");
  ASSERT_EQ(letters.json["dead"].size(), 1u) << letters.body;
  EXPECT_EQ(letters.json["dead"][0]["payload"], "late, buried");
  Json stats = c().Get("/v1/queues/jobs").json["stats"];
  EXPECT_EQ(stats["expired"], 2) << stats;
  EXPECT_EQ(stats["dead_lettered"], 1) << stats;
  EXPECT_EQ(stats["acks"], 0) << stats;
}

// One service calls another through the queue: it sends a job and waits
// for its result, which the worker's ack keeps; the worker's progress is
// readable meanwhile.
TEST_F(MessageFields, AResultAwaitedOverHttpArrivesWithTheAck) {
  Response sent = Send({{"payload", "2+2"}, {"kind", "sum"}});
  ASSERT_EQ(sent.status, 200) << sent.body;
  const std::string result_path =
      "/v1/queues/jobs/messages/" +
      std::to_string(sent.json["ids"][0].get<std::int64_t>()) + "/result";
  Response r = c().Get(result_path);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["state"], "ready");

  // The caller waits on a connection of its own (the 30 s is only a
  // safety net: the ack ends the wait).
  auto waiting = std::async(std::launch::async, [&] {
    Client caller(port());
    return caller.Get(result_path + "?wait_ms=30000");
  });
  Json m = ClaimOne();
  const Json receipt = m["receipt"];
  Response p = c().Post(
      "/v1/queues/jobs/progress",
      {{"receipt", receipt}, {"progress", 50}, {"note", {{"step", "adding"}}}});
  ASSERT_EQ(p.status, 200) << p.body;
  r = c().Get(result_path);
  EXPECT_EQ(r.json["state"], "leased") << r.body;
  EXPECT_EQ(r.json["progress"], 50) << r.body;
  EXPECT_EQ(r.json["note"], Json({{"step", "adding"}})) << r.body;

  // Refused: a result with a batch, a result too large, a progress that is
  // not a number. The job stays leased and nothing is kept.
  r = c().Post("/v1/queues/jobs/ack", {{"receipts", {receipt}}, {"result", 4}});
  EXPECT_EQ(r.status, 400) << r.body;
  ASSERT_EQ(c().Call("PATCH", "/v1/queues/jobs",
                     Json({{"max_payload_bytes", 64}}).dump())
                .status,
            200);
  r = c().Post("/v1/queues/jobs/ack",
               {{"receipt", receipt}, {"result", std::string(100, 'x')}});
  EXPECT_EQ(r.status, 413) << r.body;
  r = c().Post("/v1/queues/jobs/progress",
               {{"receipt", receipt}, {"progress", "half"}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(c().Get(result_path).json["state"], "leased");

  r = c().Post("/v1/queues/jobs/ack",
               {{"receipt", receipt}, {"result", {{"sum", 4}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(30)),
            std::future_status::ready);
  Response got = waiting.get();
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(got.json["state"], "completed") << got.body;
  EXPECT_EQ(got.json["result"], Json({{"sum", 4}})) << got.body;
  EXPECT_EQ(got.json["progress"], 50) << got.body;
  EXPECT_TRUE(got.json["completed_at"].is_string()) << got.body;

  // Progress after the ack is refused; the result stays.
  r = c().Post("/v1/queues/jobs/progress",
               {{"receipt", receipt}, {"progress", 60}});
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_EQ(c().Get(result_path).json["result"], Json({{"sum", 4}}));
  // A wait over the server's limit, and a job the queue never had.
  r = c().Get(result_path + "?wait_ms=99999999");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json["error"]["code"], "wait_too_long") << r.body;
  r = c().Get("/v1/queues/jobs/messages/999999/result?wait_ms=1000");
  EXPECT_EQ(r.status, 404) << r.body;
}

// A job that dies ends the wait too, with its error.
TEST_F(MessageFields, AWaitForADeadJobsResultEndsWithItsError) {
  Response sent = Send({{"payload", "x"}});
  const std::string result_path =
      "/v1/queues/jobs/messages/" +
      std::to_string(sent.json["ids"][0].get<std::int64_t>()) + "/result";
  auto waiting = std::async(std::launch::async, [&] {
    Client caller(port());
    return caller.Get(result_path + "?wait_ms=30000");
  });
  Json m = ClaimOne();
  ASSERT_EQ(c().Post("/v1/queues/jobs/nack", {{"receipt", m["receipt"]},
                                              {"action", "dead"},
                                              {"error", "no such user"}})
                .status,
            200);
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(30)),
            std::future_status::ready);
  Response got = waiting.get();
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(got.json["state"], "dead") << got.body;
  EXPECT_NE(got.json["error"].get<std::string>().find("no such user"),
            std::string::npos)
      << got.body;
  EXPECT_FALSE(got.json.contains("result")) << got.body;
}

TEST_F(MessageFields, AJobsOwnRetryPolicyOverHttp) {
  ExpectRefused({{"payload", "x"}, {"max_attempts", 0}}, "invalid_argument",
                "max_attempts");
  ExpectRefused(
      {{"payload", "x"}, {"backoff_ms", 5000}, {"backoff_max_ms", 10}},
      "invalid_argument", "backoff max");
  // The queue allows two attempts; this job one, and a minute's backoff.
  Response sent = Send({{"payload", "x"},
                        {"max_attempts", 1},
                        {"backoff_ms", 60000},
                        {"backoff_max_ms", 120000}});
  ASSERT_EQ(sent.status, 200) << sent.body;
  const std::string path =
      "/v1/queues/jobs/messages/" +
      std::to_string(sent.json["ids"][0].get<std::int64_t>());
  Response got = c().Get(path);
  EXPECT_EQ(got.json["max_attempts"], 1) << got.body;
  EXPECT_EQ(got.json["backoff_ms"], 60000) << got.body;
  EXPECT_EQ(got.json["backoff_max_ms"], 120000) << got.body;
  EXPECT_FALSE(got.json.contains("headers")) << got.body;
  Json m = ClaimOne();
  EXPECT_EQ(m["max_attempts"], 1);
  Response nack = c().Post("/v1/queues/jobs/nack", {{"receipt", m["receipt"]}});
  ASSERT_EQ(nack.status, 200) << nack.body;
  EXPECT_EQ(nack.json["outcome"], "dead") << nack.body;
  EXPECT_EQ(c().Get(path).json["last_error"], "failed attempt 1 of 1");
}

TEST_F(MessageFields, DependenciesOverHttp) {
  ExpectRefused({{"payload", "x"}, {"depends_on", {0}}}, "wrong_type",
                "depends_on");
  ExpectRefused({{"payload", "x"}, {"depends_on", "12"}}, "wrong_type",
                "depends_on");
  ExpectRefused({{"payload", "x"}, {"depends_on_batch", {0}}},
                "invalid_argument", "earlier message");
  ExpectRefused({{"payload", "x"}, {"depends_on", {1}}, {"delay_ms", 10}},
                "invalid_argument", "delay");
  ExpectRefused({{"payload", "x"}, {"if_dependency_dies", "explode"}},
                "invalid_argument", "if_dependency_dies");
  ASSERT_EQ(c().Post("/v1/queues/reports", Json::object()).status, 201);

  // A batch that fans in, and a message of another queue after it.
  Response sent = c().Post(
      "/v1/queues/jobs/messages",
      {{"messages",
        Json::array({{{"payload", "a"}},
                     {{"payload", "b"}},
                     {{"payload", "join"}, {"depends_on_batch", {0, 1}}}})}});
  ASSERT_EQ(sent.status, 200) << sent.body;
  const std::int64_t a = sent.json["ids"][0], b = sent.json["ids"][1],
                     join = sent.json["ids"][2];
  Response report =
      c().Post("/v1/queues/reports/messages", {{"payload", "report"},
                                               {"depends_on", {join}},
                                               {"if_dependency_dies", "run"}});
  ASSERT_EQ(report.status, 200) << report.body;
  const std::int64_t r = report.json["ids"][0];

  Response got = c().Get("/v1/queues/jobs/messages/" + std::to_string(join));
  EXPECT_EQ(got.json["state"], "waiting") << got.body;
  EXPECT_EQ(got.json["waits_for"], Json({a, b})) << got.body;
  EXPECT_EQ(got.json["waits_for_dead"], Json::array()) << got.body;
  EXPECT_FALSE(got.json.contains("ready_at")) << got.body;
  Response listed = c().Get("/v1/queues/jobs/messages?state=waiting");
  ASSERT_EQ(listed.status, 200) << listed.body;
  ASSERT_EQ(listed.json["messages"].size(), 1u) << listed.body;
  EXPECT_EQ(listed.json["messages"][0]["id"], join);
  EXPECT_EQ(c().Get("/v1/queues/jobs").json["stats"]["waiting"], 1);

  // A claim waiting on the second queue is answered by the last ack.
  auto waiting = std::async(std::launch::async, [&] {
    Client other(port());
    return other.Post("/v1/queues/reports/claim",
                      {{"max", 1}, {"wait_ms", 30000}});
  });
  for (int i = 0; i < 2; ++i) {
    Json m = ClaimOne();
    ASSERT_EQ(
        c().Post("/v1/queues/jobs/ack", {{"receipt", m["receipt"]}}).status,
        200);
  }
  Json j = ClaimOne();
  EXPECT_EQ(j["payload"], "join");
  ASSERT_EQ(c().Post("/v1/queues/jobs/ack", {{"receipt", j["receipt"]}}).status,
            200);
  Response claimed = waiting.get();
  ASSERT_EQ(claimed.status, 200) << claimed.body;
  ASSERT_EQ(claimed.json["messages"].size(), 1u) << claimed.body;
  EXPECT_EQ(claimed.json["messages"][0]["id"], r);
}

TEST_F(MessageFields, AGraphOfJobsOverSeveralQueuesInOneRequest) {
  ASSERT_EQ(c().Post("/v1/queues/mail", Json::object()).status, 201);
  Response bad = c().Post(
      "/v1/messages",
      {{"messages", Json::array({{{"queue", "jobs"}, {"payload", "a"}},
                                 {{"queue", "nope"}, {"payload", "b"}}})}});
  EXPECT_EQ(bad.status, 404) << bad.body;
  Response unnamed = c().Post(
      "/v1/messages", {{"messages", Json::array({{{"payload", "a"}}})}});
  EXPECT_EQ(unnamed.status, 400) << unnamed.body;
  EXPECT_NE(unnamed.body.find("queue"), std::string::npos) << unnamed.body;
  EXPECT_EQ(c().Get("/v1/queues/jobs").json["stats"]["sends"], 0);

  Response sent =
      c().Post("/v1/messages",
               {{"messages", Json::array({{{"queue", "jobs"}, {"payload", "a"}},
                                          {{"queue", "jobs"}, {"payload", "b"}},
                                          {{"queue", "mail"},
                                           {"payload", "done"},
                                           {"depends_on_batch", {0, 1}}}})}});
  ASSERT_EQ(sent.status, 200) << sent.body;
  ASSERT_EQ(sent.json["ids"].size(), 3u);
  const std::int64_t done = sent.json["ids"][2];
  Response got = c().Get("/v1/queues/mail/messages/" + std::to_string(done));
  EXPECT_EQ(got.json["state"], "waiting") << got.body;
  EXPECT_EQ(got.json["waits_for"],
            Json({sent.json["ids"][0], sent.json["ids"][1]}));
  // Its links name the queues, both ways.
  const std::string ids[] = {sent.json["ids"][0].dump(),
                             sent.json["ids"][1].dump(), std::to_string(done)};
  Response links =
      c().Get("/v1/queues/mail/messages/" + ids[2] + "/dependencies");
  ASSERT_EQ(links.status, 200) << links.body;
  EXPECT_EQ(
      links.json,
      Json({{"parents",
             {{{"queue", "jobs"}, {"id", sent.json["ids"][0]}, {"dead", false}},
              {{"queue", "jobs"},
               {"id", sent.json["ids"][1]},
               {"dead", false}}}},
            {"dependents", Json::array()},
            {"more_dependents", false}}))
      << links.body;
  Response parent =
      c().Get("/v1/queues/jobs/messages/" + ids[0] + "/dependencies");
  EXPECT_EQ(parent.json["dependents"],
            Json({{{"queue", "mail"}, {"id", done}}}))
      << parent.body;
  EXPECT_EQ(c().Get("/v1/queues/nope/messages/1/dependencies").status, 404);
  EXPECT_EQ(c().Get("/v1/queues/mail/messages/x/dependencies").status, 404);
  for (int i = 0; i < 2; ++i) {
    Json m = ClaimOne();
    ASSERT_EQ(
        c().Post("/v1/queues/jobs/ack", {{"receipt", m["receipt"]}}).status,
        200);
  }
  Response claimed = c().Post("/v1/queues/mail/claim", {{"max", 1}});
  ASSERT_EQ(claimed.json["messages"].size(), 1u) << claimed.body;
  EXPECT_EQ(claimed.json["messages"][0]["payload"], "done");
}

TEST_F(MessageFields, LiveWorkersOverHttp) {
  const Json report = {{"name", "mailer"},
                       {"host", "web-1"},
                       {"pid", 4242},
                       {"queues", {"jobs"}},
                       {"kinds", {"email.send"}},
                       {"concurrency", 4},
                       {"jobs", {{{"queue", "jobs"}, {"id", 7}}}},
                       {"started_at", "2026-11-29T10:00:00Z"},
                       {"ttl_ms", 30000}};
  Response put = c().Call("PUT", "/v1/workers/web-1:4242:9f2c", report.dump());
  ASSERT_EQ(put.status, 200) << put.body;
  EXPECT_EQ(put.json["ttl_ms"], 30000);
  Response list = c().Get("/v1/workers");
  ASSERT_EQ(list.status, 200) << list.body;
  ASSERT_EQ(list.json["workers"].size(), 1u) << list.body;
  const Json& w = list.json["workers"][0];
  EXPECT_EQ(w["id"], "web-1:4242:9f2c");
  EXPECT_EQ(w["name"], "mailer");
  EXPECT_EQ(w["host"], "web-1");
  EXPECT_EQ(w["pid"], 4242);
  EXPECT_EQ(w["queues"], Json({"jobs"}));
  EXPECT_EQ(w["kinds"], Json({"email.send"}));
  EXPECT_EQ(w["concurrency"], 4);
  EXPECT_EQ(w["jobs"][0]["id"], 7);
  EXPECT_EQ(w["started_at"], "2026-11-29T10:00:00.000000Z");
  EXPECT_TRUE(w["last_seen"].is_string());
  EXPECT_EQ(c().Get("/v1/workers?queue=jobs").json["workers"].size(), 1u);
  EXPECT_EQ(c().Get("/v1/workers?queue=other").json["workers"].size(), 0u);

  // Bad reports are refused and change nothing.
  for (const Json& bad :
       {Json({{"ttl_ms", 10}}), Json({{"queues", "jobs"}}),
        Json({{"queues", {"no spaces"}}}), Json({{"jobs", {{{"id", 1}}}}}),
        Json({{"pid", -1}}), Json({{"unknown", 1}})}) {
    Response r = c().Call("PUT", "/v1/workers/w2", bad.dump());
    EXPECT_EQ(r.status, 400) << bad.dump() << " " << r.body;
  }
  EXPECT_EQ(c().Call("PUT", "/v1/workers/bad%20id", "{}").status, 400);
  EXPECT_EQ(c().Get("/v1/workers").json["workers"].size(), 1u);

  Response gone = c().Call("DELETE", "/v1/workers/web-1:4242:9f2c", "");
  EXPECT_EQ(gone.status, 200) << gone.body;
  EXPECT_EQ(c().Get("/v1/workers").json["workers"].size(), 0u);
  EXPECT_EQ(c().Call("DELETE", "/v1/workers/web-1:4242:9f2c", "").status, 404);
}

TEST_F(MessageFields, RunAtHoldsTheMessageUntilThatTime) {
  ASSERT_EQ(
      Send({{"payload", "later"}, {"run_at", "2099-01-01T00:00:00Z"}}).status,
      400);  // more than a year ahead
  ASSERT_EQ(
      Send({{"payload", "past"}, {"run_at", "2020-01-01T00:00:00Z"}}).status,
      400);
  // An hour ahead, written with an offset.
  const auto in_an_hour =
      std::chrono::system_clock::now() + std::chrono::hours(1);
  const std::time_t t = std::chrono::system_clock::to_time_t(in_an_hour);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[64];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S+00:00", &tm);
  ASSERT_EQ(Send({{"payload", "later"}, {"run_at", text}}).status, 200);
  ASSERT_EQ(Send({{"payload", "now"}}).status, 200);
  EXPECT_EQ(ClaimOne()["payload"], "now");
  EXPECT_TRUE(ClaimOne().is_null());
  EXPECT_EQ(c().Get("/v1/queues/jobs").json["stats"]["delayed"], 1);
}

TEST_F(MessageFields, BadFieldsAreRefusedAndNothingIsStored) {
  ExpectRefused({{"payload", "x"}, {"run_at", "tomorrow"}}, "invalid_argument",
                "RFC 3339");
  ExpectRefused({{"payload", "x"}, {"run_at", "2026-02-30T00:00:00Z"}},
                "invalid_argument", "RFC 3339");
  ExpectRefused(
      {{"payload", "x"}, {"delay_ms", 5}, {"run_at", "2026-11-01T00:00:00Z"}},
      "invalid_argument", "not both");
  ExpectRefused({{"payload", "x"}, {"headers", {{"n", 1}}}}, "wrong_type",
                "header \"n\" must be a string");
  ExpectRefused({{"payload", "x"}, {"headers", "k=v"}}, "wrong_type",
                "\"headers\" must be an object");
  ExpectRefused({{"payload", "x"}, {"headers", {{"bad name", "v"}}}},
                "invalid_argument", "header name 'bad name'");
  ExpectRefused(
      {{"payload", {{"a", 1}}}, {"headers", {{"content-type", "text/plain"}}}},
      "invalid_argument", "content-type application/json");
  ExpectRefused({{"payload", {{"a", 1}}}, {"payload_base64", "eA=="}},
                "invalid_argument", "not both");
}

// A second of 60 names no moment the server's clock shows (and at any
// minute but a leap second's, none at all): a run_at with it is refused,
// in a send and in a reschedule, rather than read as the next minute.
TEST_F(MessageFields, ARunAtWithSecondSixtyIsRefused) {
  const std::time_t t = std::chrono::system_clock::to_time_t(
      std::chrono::system_clock::now() + std::chrono::hours(1));
  std::tm tm{};
  gmtime_r(&t, &tm);
  char leap[64];
  std::strftime(leap, sizeof leap, "%Y-%m-%dT%H:%M:60Z", &tm);
  ExpectRefused({{"payload", "x"}, {"run_at", leap}}, "invalid_argument",
                "second 60");
  ASSERT_EQ(Send({{"payload", "a"}}).status, 200);
  Response r =
      c().Post("/v1/queues/jobs/messages/1/reschedule", {{"run_at", leap}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json["error"]["code"], "invalid_argument") << r.body;
  r = c().Post("/v1/queues/jobs/messages/reschedule",
               {{"ids", {1}}, {"run_at", leap}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(c().Get("/v1/queues/jobs/messages/1").json["state"], "ready");
}

TEST_F(MessageFields, GetListAndChangeMessagesById) {
  ASSERT_EQ(Send({{"payload", "a"}, {"headers", {{"tenant", "acme"}}}}).status,
            200);
  ASSERT_EQ(Send({{"payload", "b"}, {"delay_ms", 3600000}}).status, 200);
  ASSERT_EQ(Send({{"payload", "c"}, {"headers", {{"tenant", "acme"}}}}).status,
            200);
  Json a = c().Get("/v1/queues/jobs/messages/1").json;
  EXPECT_EQ(a["state"], "ready");
  EXPECT_EQ(a["payload"], "a");
  EXPECT_EQ(a["headers"], Json({{"tenant", "acme"}}));
  EXPECT_EQ(a["errors"], Json::array());
  EXPECT_EQ(c().Get("/v1/queues/jobs/messages/2").json["state"], "delayed");

  // Paging by one, by the header.
  std::vector<std::int64_t> ids;
  std::string url = "/v1/queues/jobs/messages?header=tenant%3Dacme&limit=1";
  for (int pages = 0; pages < 10; ++pages) {
    Response r = c().Get(url);
    ASSERT_EQ(r.status, 200) << r.body;
    for (const Json& m : r.json["messages"]) ids.push_back(m["id"]);
    if (r.json["next_cursor"].is_null()) break;
    url = "/v1/queues/jobs/messages?header=tenant%3Dacme&limit=1&cursor=" +
          r.json["next_cursor"].get<std::string>();
  }
  EXPECT_EQ(ids, (std::vector<std::int64_t>{1, 3}));
  Response delayed = c().Get("/v1/queues/jobs/messages?state=delayed");
  ASSERT_EQ(delayed.json["messages"].size(), 1u) << delayed.body;
  EXPECT_EQ(delayed.json["messages"][0]["id"], 2);

  Response retried =
      c().Post("/v1/queues/jobs/messages/2/retry", Json::object());
  EXPECT_EQ(retried.json["changed"], 1) << retried.body;
  EXPECT_EQ(c().Get("/v1/queues/jobs/messages/2").json["state"], "ready");
  EXPECT_EQ(c().Post("/v1/queues/jobs/messages/3/priority", {{"priority", 7}})
                .json["changed"],
            1);
  EXPECT_EQ(ClaimOne()["id"], 3);  // first now
  Response moved = c().Post("/v1/queues/jobs/messages/1/reschedule",
                            {{"run_at", "2026-01-01T00:00:00Z"}});
  EXPECT_EQ(moved.json["changed"], 1) << moved.body;

  Response del = c().Call("DELETE", "/v1/queues/jobs/messages/3");
  EXPECT_EQ(del.json["deleted"], 1) << del.body;
  Response gone = c().Get("/v1/queues/jobs/messages/3");
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(gone.json["error"]["code"], "not_found");

  Response bulk =
      c().Post("/v1/queues/jobs/messages/delete", {{"filter", Json::object()}});
  EXPECT_EQ(bulk.json["changed"], 2) << bulk.body;
  EXPECT_EQ(c().Get("/v1/queues/jobs").json["stats"]["ready"], 0);
}

TEST_F(MessageFields, CountAndCancelMessages) {
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(Send({{"payload", std::to_string(i)},
                    {"headers", {{"tenant", i < 3 ? "acme" : "other"}}}})
                  .status,
              200);
  }
  auto count = [&](const std::string& query) {
    Response r = c().Get("/v1/queues/jobs/messages/count" + query);
    EXPECT_EQ(r.status, 200) << r.body;
    return r.json["count"];
  };
  EXPECT_EQ(count(""), 5);
  EXPECT_TRUE(c().Get("/v1/queues/jobs/messages/count").json["at"].is_string());
  EXPECT_EQ(count("?header=tenant%3Dacme"), 3);
  EXPECT_EQ(count("?state=dead"), 0);

  // One leased message cancelled by id: its worker's ack is refused.
  Json claimed = ClaimOne();
  const std::int64_t id = claimed["id"];
  Response one =
      c().Post("/v1/queues/jobs/messages/" + std::to_string(id) + "/cancel",
               Json::object());
  EXPECT_EQ(one.json["changed"], 1) << one.body;
  Response ack =
      c().Post("/v1/queues/jobs/ack", {{"receipt", claimed["receipt"]}});
  EXPECT_EQ(ack.status, 404) << ack.body;
  Json dead = c().Get("/v1/queues/jobs/messages/" + std::to_string(id)).json;
  EXPECT_EQ(dead["state"], "dead");
  EXPECT_EQ(dead["last_error"], "cancelled");

  // The rest of acme's by filter.
  Response bulk =
      c().Post("/v1/queues/jobs/messages/cancel",
               {{"filter",
                 {{"header", {{"name", "tenant"}, {"value", "acme"}}},
                  {"state", "ready"}}}});
  EXPECT_EQ(bulk.json["changed"], 2) << bulk.body;
  EXPECT_EQ(count("?state=dead"), 3);
  EXPECT_EQ(count("?state=ready"), 2);
  Json stats = c().Get("/v1/queues/jobs").json["stats"];
  EXPECT_EQ(stats["dead"], 3);
  EXPECT_EQ(stats["ready"], 2);

  // Only messages in the queue can be cancelled.
  Response refused = c().Post("/v1/queues/jobs/messages/cancel",
                              {{"filter", {{"state", "dead"}}}});
  EXPECT_EQ(refused.status, 400) << refused.body;
  EXPECT_EQ(count("?state=dead"), 3);
  Response bad = c().Get("/v1/queues/jobs/messages/count?state=gone");
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_EQ(c().Post("/v1/queues/jobs/messages/count", Json::object()).status,
            405);
}

TEST_F(MessageFields, BadListingsAndChangesAreRefused) {
  ASSERT_EQ(Send({{"payload", "a"}}).status, 200);
  struct Case {
    Response r;
    unsigned status;
    const char* code;
  } cases[] = {
      {c().Get("/v1/queues/jobs/messages?cursor=nope"), 400,
       "invalid_argument"},
      {c().Get("/v1/queues/jobs/messages?state=gone"), 400, "invalid_argument"},
      {c().Get("/v1/queues/jobs/messages?header=novalue"), 400,
       "invalid_argument"},
      {c().Get("/v1/queues/jobs/messages?limit=5000"), 400, "invalid_argument"},
      {c().Get("/v1/queues/jobs/messages?enqueued_after=yesterday"), 400,
       "invalid_argument"},
      {c().Get("/v1/queues/jobs/messages/abc"), 404, "no_route"},
      {c().Get("/v1/queues/jobs/messages/999"), 404, "not_found"},
      {c().Post("/v1/queues/jobs/messages/delete",
                {{"ids", {1}}, {"filter", Json::object()}}),
       400, "invalid_argument"},
      {c().Post("/v1/queues/jobs/messages/delete", Json::object()), 400,
       "invalid_argument"},
      {c().Post("/v1/queues/jobs/messages/reschedule", {{"ids", {1}}}), 400,
       "invalid_argument"},
      {c().Post("/v1/queues/jobs/messages/delete",
                {{"ids", {1}}, {"run_at", "2026-01-01T00:00:00Z"}}),
       400, "unknown_field"},
      {c().Post("/v1/queues/jobs/messages/priority",
                {{"filter", {{"state", "dead"}}}, {"priority", 1}}),
       400, "invalid_argument"},
      {c().Post("/v1/queues/jobs/messages/1/explode", Json::object()), 404,
       "no_route"},
  };
  for (const Case& k : cases) {
    EXPECT_EQ(k.r.status, k.status) << k.r.body;
    EXPECT_EQ(k.r.json["error"]["code"], k.code) << k.r.body;
  }
  EXPECT_EQ(c().Get("/v1/queues/jobs/messages/1").json["state"], "ready");
}

TEST_F(MessageFields, DedupWindowHoldsAnAckedKey) {
  Response bad = c().Call("PATCH", "/v1/queues/jobs",
                          Json({{"unique_for_ms", -1}}).dump());
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_EQ(bad.json["error"]["code"], "invalid_argument") << bad.body;
  Response patched = c().Call("PATCH", "/v1/queues/jobs",
                              Json({{"unique_for_ms", 3600000}}).dump());
  ASSERT_EQ(patched.status, 200) << patched.body;
  EXPECT_EQ(patched.json["unique_for_ms"], 3600000);
  EXPECT_EQ(c().Get("/v1/queues/jobs").json["options"]["unique_for_ms"],
            3600000);
  Response first = Send({{"payload", "a"}, {"dedup", "order-7"}});
  ASSERT_EQ(first.status, 200) << first.body;
  Json m = ClaimOne();
  ASSERT_FALSE(m.is_null());
  ASSERT_EQ(c().Post("/v1/queues/jobs/ack", {{"receipt", m["receipt"]}}).status,
            200);
  Response again = Send({{"payload", "b"}, {"dedup", "order-7"}});
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(again.json["duplicate"][0], true) << again.body;
  EXPECT_EQ(again.json["ids"][0], first.json["ids"][0]) << again.body;
  EXPECT_TRUE(ClaimOne().is_null());
}

TEST_F(MessageFields, OrderedGroupsOverHttp) {
  Response bad = c().Post("/v1/queues/ord", {{"groups", "sorted"}});
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_EQ(bad.json["error"]["code"], "invalid_argument") << bad.body;
  Response created = c().Post("/v1/queues/ord", {{"groups", "ordered"}});
  ASSERT_EQ(created.status, 201) << created.body;
  EXPECT_EQ(created.json["groups"], "ordered");
  Response sent = c().Post(
      "/v1/queues/ord/messages",
      {{"messages", Json::array({{{"payload", "a1"}, {"group", "acct-1"}},
                                 {{"payload", "a2"}, {"group", "acct-1"}},
                                 {{"payload", "b1"}, {"group", "acct-2"}}})}});
  ASSERT_EQ(sent.status, 200) << sent.body;
  Response claimed = c().Post("/v1/queues/ord/claim", {{"max", 10}});
  ASSERT_EQ(claimed.status, 200) << claimed.body;
  ASSERT_EQ(claimed.json["messages"].size(), 2u) << claimed.body;
  EXPECT_EQ(claimed.json["messages"][0]["payload"], "a1");
  EXPECT_EQ(claimed.json["messages"][0]["group"], "acct-1");
  EXPECT_EQ(claimed.json["messages"][1]["payload"], "b1");
  EXPECT_FALSE(claimed.json.contains("groups_busy")) << claimed.body;
  // a2 is ready behind its leased head: an empty claim says why.
  Response busy = c().Post("/v1/queues/ord/claim", {{"max", 10}});
  ASSERT_EQ(busy.status, 200) << busy.body;
  EXPECT_EQ(busy.json["messages"].size(), 0u) << busy.body;
  EXPECT_EQ(busy.json["groups_busy"], true) << busy.body;
  const Json id = sent.json["ids"][1];
  Response got =
      c().Get("/v1/queues/ord/messages/" + std::to_string(id.get<int>()));
  EXPECT_EQ(got.json["group"], "acct-1") << got.body;
  Response listed = c().Get("/v1/queues/ord/messages?group=acct-1");
  ASSERT_EQ(listed.status, 200) << listed.body;
  ASSERT_EQ(listed.json["messages"].size(), 2u) << listed.body;
  EXPECT_EQ(listed.json["messages"][1]["payload"], "a2");
  Response patched =
      c().Call("PATCH", "/v1/queues/ord", Json({{"groups", "fair"}}).dump());
  EXPECT_EQ(patched.status, 400) << patched.body;
  EXPECT_EQ(c().Get("/v1/queues/ord").json["options"]["groups"], "ordered");
}

TEST_F(MessageFields, LimitsOverHttp) {
  for (const Json& bad :
       {Json({{"max_leased", 0}}), Json({{"rate_limit", 0}}),
        Json({{"rate_burst", 4}}), Json({{"group_limit", 2}}),
        Json({{"max_leased", 1.5}}), Json({{"rate_limit", "fast"}})}) {
    Response r = c().Post("/v1/queues/lim", bad);
    EXPECT_EQ(r.status, 400) << bad.dump() << " " << r.body;
  }
  EXPECT_EQ(c().Get("/v1/queues/lim").status, 404);
  Response created =
      c().Post("/v1/queues/lim", {{"max_leased", 1}, {"rate_limit", 100}});
  ASSERT_EQ(created.status, 201) << created.body;
  EXPECT_EQ(created.json["max_leased"], 1);
  EXPECT_EQ(created.json["rate_limit"], 100.0);
  EXPECT_TRUE(created.json["rate_burst"].is_null());
  EXPECT_TRUE(created.json["group_limit"].is_null());
  ASSERT_EQ(c().Post("/v1/queues/lim/messages",
                     {{"messages", Json::array({{{"payload", "a"}},
                                                {{"payload", "b"}},
                                                {{"payload", "c"}}})}})
                .status,
            200);
  Response claimed = c().Post("/v1/queues/lim/claim", {{"max", 10}});
  ASSERT_EQ(claimed.status, 200) << claimed.body;
  EXPECT_EQ(claimed.json["messages"].size(), 1u) << claimed.body;
  EXPECT_EQ(claimed.json["limited_by"], "max_leased") << claimed.body;
  EXPECT_EQ(claimed.json["retry_after_ms"], 30000) << claimed.body;
  // null lifts a limit; the others stay.
  Response patched = c().Call("PATCH", "/v1/queues/lim",
                              Json({{"max_leased", nullptr}}).dump());
  ASSERT_EQ(patched.status, 200) << patched.body;
  EXPECT_TRUE(patched.json["max_leased"].is_null());
  EXPECT_EQ(patched.json["rate_limit"], 100.0);
  Response rest = c().Post("/v1/queues/lim/claim", {{"max", 10}});
  EXPECT_EQ(rest.json["messages"].size(), 2u) << rest.body;
  EXPECT_FALSE(rest.json.contains("limited_by")) << rest.body;
}

TEST_F(MessageFields, DeadLetterQueueAndLabelsOverHttp) {
  Response created =
      c().Post("/v1/queues/work", {{"max_attempts", 1},
                                   {"dead_letter_queue", "work-dlq"},
                                   {"labels", {{"owner", "payments"}}}});
  ASSERT_EQ(created.status, 201) << created.body;
  EXPECT_EQ(created.json["dead_letter_queue"], "work-dlq");
  EXPECT_EQ(created.json["labels"], Json({{"owner", "payments"}}));
  ASSERT_EQ(c().Post("/v1/queues/work-dlq", Json::object()).status, 201);
  ASSERT_EQ(c().Post("/v1/queues/work/messages",
                     {{"messages", Json::array({{{"payload", "m"}}})}})
                .status,
            200);
  Response claimed = c().Post("/v1/queues/work/claim", Json::object());
  ASSERT_EQ(claimed.json["messages"].size(), 1u) << claimed.body;
  Response nacked = c().Post(
      "/v1/queues/work/nack",
      {{"receipt", claimed.json["messages"][0]["receipt"]}, {"error", "x"}});
  ASSERT_EQ(nacked.status, 200) << nacked.body;
  // The dead letter went to work-dlq, ready.
  Response moved = c().Post("/v1/queues/work-dlq/claim", Json::object());
  ASSERT_EQ(moved.json["messages"].size(), 1u) << moved.body;
  EXPECT_EQ(moved.json["messages"][0]["payload"], "m");
  // null lifts the dead-letter queue; labels are replaced as given.
  Response patched = c().Call(
      "PATCH", "/v1/queues/work",
      Json({{"dead_letter_queue", nullptr}, {"labels", {{"team", "core"}}}})
          .dump());
  ASSERT_EQ(patched.status, 200) << patched.body;
  EXPECT_TRUE(patched.json["dead_letter_queue"].is_null());
  EXPECT_EQ(patched.json["labels"], Json({{"team", "core"}}));
  for (const Json& bad :
       {Json({{"dead_letter_queue", "work"}}), Json({{"dead_letter_queue", 5}}),
        Json({{"labels", {{"bad key", "v"}}}}),
        Json({{"labels", {{"k", 1}}}})}) {
    Response r = c().Call("PATCH", "/v1/queues/work", bad.dump());
    EXPECT_EQ(r.status, 400) << bad.dump() << " " << r.body;
  }
}

// Regression: a PATCH could close a loop of dead-letter queues (a -> b ->
// a), which passes dead letters round for ever; refused with 400.
TEST_F(MessageFields, DeadLetterLoopsAreRefusedOverHttp) {
  ASSERT_EQ(c().Post("/v1/queues/la", Json::object()).status, 201);
  ASSERT_EQ(c().Post("/v1/queues/lb", {{"dead_letter_queue", "la"}}).status,
            201);
  ASSERT_EQ(c().Post("/v1/queues/lc", {{"dead_letter_queue", "lb"}}).status,
            201);
  for (const char* to : {"lb", "lc"}) {
    Response r = c().Call("PATCH", "/v1/queues/la",
                          Json({{"dead_letter_queue", to}}).dump());
    EXPECT_EQ(r.status, 400) << to << ": " << r.body;
    EXPECT_EQ(r.error_code(), "invalid_argument") << r.body;
    EXPECT_NE(r.body.find("loop"), std::string::npos) << r.body;
  }
  EXPECT_TRUE(
      c().Get("/v1/queues/la").json["options"]["dead_letter_queue"].is_null());
  // Created into a loop: la waits for ld, which would send back to la.
  ASSERT_EQ(c().Call("PATCH", "/v1/queues/la",
                     Json({{"dead_letter_queue", "ld"}}).dump())
                .status,
            200);
  Response created = c().Post("/v1/queues/ld", {{"dead_letter_queue", "lc"}});
  EXPECT_EQ(created.status, 400) << created.body;
  EXPECT_EQ(c().Get("/v1/queues/ld").status, 404);
}

TEST_F(MessageFields, PatchPauseAndResumeAQueue) {
  Response patched = c().Call(
      "PATCH", "/v1/queues/jobs",
      Json({{"max_attempts", 9}, {"dead_retention_ms", 60000}}).dump());
  ASSERT_EQ(patched.status, 200) << patched.body;
  EXPECT_EQ(patched.json["max_attempts"], 9);
  EXPECT_EQ(patched.json["dead_retention_ms"], 60000);
  EXPECT_EQ(patched.json["lease_ms"], 30000);  // not given: unchanged
  EXPECT_EQ(c().Get("/v1/queues/jobs").json["options"]["max_attempts"], 9);

  Response paused = c().Post("/v1/queues/jobs/pause", Json::object());
  ASSERT_EQ(paused.status, 200) << paused.body;
  EXPECT_EQ(paused.json["paused"], true);
  ASSERT_EQ(Send({{"payload", "m"}}).status, 200);
  EXPECT_TRUE(ClaimOne().is_null());
  // An empty claim of a paused queue says why.
  Response empty = c().Post("/v1/queues/jobs/claim", Json::object());
  ASSERT_EQ(empty.status, 200) << empty.body;
  EXPECT_EQ(empty.json["messages"].size(), 0u) << empty.body;
  EXPECT_EQ(empty.json["paused"], true) << empty.body;
  EXPECT_EQ(c().Get("/v1/queues/jobs").json["stats"]["paused"], true);
  EXPECT_NE(
      c().Get("/metrics").body.find("sqlq_queue_paused{queue=\"jobs\"} 1"),
      std::string::npos);
  // A long poll stays parked while paused and takes the message on resume.
  Client poller(port());
  auto waiting = std::async(std::launch::async, [&] {
    return poller.Post("/v1/queues/jobs/claim", {{"wait_ms", 20000}});
  });
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(300)),
            std::future_status::timeout);
  EXPECT_EQ(c().Post("/v1/queues/jobs/resume", Json::object()).json["paused"],
            false);
  Response got = waiting.get();
  ASSERT_EQ(got.status, 200) << got.body;
  ASSERT_EQ(got.json["messages"].size(), 1u) << got.body;

  Response bad =
      c().Call("PATCH", "/v1/queues/jobs", Json({{"max_attempts", 0}}).dump());
  EXPECT_EQ(bad.status, 400) << bad.body;
  Response unknown =
      c().Call("PATCH", "/v1/queues/jobs", Json({{"paused", true}}).dump());
  EXPECT_EQ(unknown.json["error"]["code"], "unknown_field") << unknown.body;
  EXPECT_EQ(c().Post("/v1/queues/nope/pause", Json::object()).status, 404);
}

}  // namespace
}  // namespace sqlq::server_test
