// Bearer tokens: each permission, wrong and missing tokens, receipts bound
// to their queue, and the refusal to listen off loopback without tokens.

#include "tests/server/server_fixture.h"

namespace sqlq::server_test {
namespace {

constexpr const char* kAdmin = "admin-token-0001";
constexpr const char* kSender = "sender-token-0001";
constexpr const char* kWorker = "worker-token-0001";
// A tenant: its own queues qb*, and send on one shared queue.
constexpr const char* kTenant = "tenant-token-0001";

class Auth : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    std::ofstream f(dir_ / "tokens.txt");
    f << "# token  grants\n"
      << kAdmin << " admin:*\n"
      << kSender << " send:jobs-*\n"
      << kWorker << " claim:jobs-*   send,claim:scratch\n"
      << kTenant << " admin:qb* send:shared\n";
    f.close();
    StartServer({"--tokens", (dir_ / "tokens.txt").string()});
    admin_.emplace(port(), kAdmin);
    ASSERT_EQ(admin_->Post("/v1/queues/jobs-a", Json::object()).status, 201);
    ASSERT_EQ(admin_->Post("/v1/queues/jobs-b", Json::object()).status, 201);
    ASSERT_EQ(admin_->Post("/v1/queues/private", Json::object()).status, 201);
  }
  Response Send(Client& c, const std::string& queue) {
    return c.Post("/v1/queues/" + queue + "/messages",
                  {{"messages", {{{"payload", "x"}}}}});
  }
  std::optional<Client> admin_;
};

TEST_F(Auth, MissingOrWrongTokenIs401) {
  Client none(port());
  auto r = Send(none, "jobs-a");
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.error_code(), "unauthorized");
  EXPECT_EQ(r.header("www-authenticate"), "Bearer realm=\"sqlq\"");
  Client wrong(port(), "not-a-known-token");
  EXPECT_EQ(Send(wrong, "jobs-a").status, 401);
  auto basic = none.Call("GET", "/v1/queues", "");
  EXPECT_EQ(basic.status, 401);
  // Health stays open for probes.
  EXPECT_EQ(none.Get("/healthz").status, 200);
  EXPECT_EQ(admin_->Get("/v1/queues/jobs-a").json["stats"]["sends"], 0);
}

// Regression: `Authorization: bearer TOKEN` was refused; the scheme is
// case-insensitive (RFC 9110).
TEST_F(Auth, BearerSchemeIsCaseInsensitive) {
  for (std::string scheme : {"bearer ", "BEARER ", "Bearer   ", "bEaReR\t"}) {
    RawConn raw(port());
    ASSERT_TRUE(
        raw.Write("GET /v1/queues HTTP/1.1\r\nHost: localhost\r\n"
                  "Authorization: " +
                  scheme + kAdmin + "\r\n\r\n"));
    std::string r = raw.ReadResponse();
    EXPECT_EQ(StatusOf(r), 200) << scheme << "\n" << r;
  }
  for (std::string header :
       {std::string("Basic YWRtaW4="), std::string("Bearer"),
        std::string("Bearertoken"), std::string("Token ") + kAdmin}) {
    RawConn raw(port());
    ASSERT_TRUE(
        raw.Write("GET /v1/queues HTTP/1.1\r\nHost: localhost\r\n"
                  "Authorization: " +
                  header + "\r\n\r\n"));
    EXPECT_EQ(StatusOf(raw.ReadResponse()), 401) << header;
  }
}

// Regression: /metrics answered anyone, showing every queue's name and
// depth, on a server with tokens.
TEST_F(Auth, MetricsNeedAMetricsOrAdminGrantAndShowOnlyGrantedQueues) {
  Client none(port());
  auto r = none.Get("/metrics");
  EXPECT_EQ(r.status, 401) << r.body;
  EXPECT_EQ(r.body.find("jobs-a"), std::string::npos);
  Client sender(port(), kSender);
  r = sender.Get("/metrics");
  EXPECT_EQ(r.status, 403) << r.body;
  EXPECT_EQ(r.body.find("jobs-a"), std::string::npos);
  r = admin_->Get("/metrics");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("queue=\"private\""), std::string::npos) << r.body;
}

TEST_F(Auth, MetricsTokenAndPublicMetrics) {
  std::ofstream(dir_ / "more.txt") << kAdmin << " admin:*\n"
                                   << "scraper-token-0001 metrics:jobs-*\n";
  fs::create_directories(dir_ / "two");
  ServerProcess two(dir_ / "two", {"--tokens", (dir_ / "more.txt").string()});
  ASSERT_TRUE(two.Start()) << two.log();
  Client admin(two.port(), kAdmin);
  ASSERT_EQ(admin.Post("/v1/queues/jobs-a", Json::object()).status, 201);
  ASSERT_EQ(admin.Post("/v1/queues/private", Json::object()).status, 201);
  Client scraper(two.port(), "scraper-token-0001");
  auto r = scraper.Get("/metrics");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("queue=\"jobs-a\""), std::string::npos) << r.body;
  EXPECT_EQ(r.body.find("queue=\"private\""), std::string::npos) << r.body;
  // A metrics grant reads; it does not send.
  EXPECT_EQ(Send(scraper, "jobs-a").status, 403);

  fs::create_directories(dir_ / "three");
  ServerProcess open(dir_ / "three", {"--tokens", (dir_ / "more.txt").string(),
                                      "--metrics-public", "true"});
  ASSERT_TRUE(open.Start()) << open.log();
  Client anon(open.port());
  EXPECT_EQ(anon.Get("/metrics").status, 200);
  EXPECT_EQ(anon.Get("/v1/queues").status, 401);
}

TEST_F(Auth, SendPermission) {
  Client sender(port(), kSender);
  EXPECT_EQ(Send(sender, "jobs-a").status, 200);
  auto other = Send(sender, "private");
  EXPECT_EQ(other.status, 403);
  EXPECT_EQ(other.error_code(), "forbidden");
  auto claim = sender.Post("/v1/queues/jobs-a/claim", Json::object());
  EXPECT_EQ(claim.status, 403);
  EXPECT_EQ(sender.Post("/v1/queues/jobs-c", Json::object()).status, 403);
  EXPECT_EQ(sender.Delete("/v1/queues/jobs-a").status, 403);
  EXPECT_EQ(admin_->Get("/v1/queues/jobs-a").json["stats"]["ready"], 1);
}

// Seeing and steering messages, and changing a queue, take the admin
// permission: a claim or send token gets 403 and changes nothing.
TEST_F(Auth, MessagesAndQueueControlNeedAdmin) {
  ASSERT_EQ(Send(*admin_, "jobs-a").status, 200);
  Client worker(port(), kWorker);
  Client sender(port(), kSender);
  for (Client* c : {&worker, &sender}) {
    EXPECT_EQ(c->Get("/v1/queues/jobs-a/messages").status, 403);
    EXPECT_EQ(c->Get("/v1/queues/jobs-a/messages/1").status, 403);
    EXPECT_EQ(c->Delete("/v1/queues/jobs-a/messages/1").status, 403);
    EXPECT_EQ(
        c->Post("/v1/queues/jobs-a/messages/1/retry", Json::object()).status,
        403);
    EXPECT_EQ(c->Post("/v1/queues/jobs-a/messages/delete",
                      {{"filter", Json::object()}})
                  .status,
              403);
    EXPECT_EQ(c->Post("/v1/queues/jobs-a/pause", Json::object()).status, 403);
    EXPECT_EQ(c->Call("PATCH", "/v1/queues/jobs-a",
                      Json({{"max_attempts", 1}}).dump())
                  .status,
              403);
  }
  auto got = admin_->Get("/v1/queues/jobs-a/messages/1");
  EXPECT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(got.json["state"], "ready");
  EXPECT_EQ(admin_->Get("/v1/queues/jobs-a").json["options"]["max_attempts"],
            5);
}

TEST_F(Auth, ClaimPermissionCoversClaimAckNackExtend) {
  ASSERT_EQ(Send(*admin_, "jobs-a").status, 200);
  ASSERT_EQ(Send(*admin_, "jobs-a").status, 200);
  Client worker(port(), kWorker);
  EXPECT_EQ(Send(worker, "jobs-a").status, 403);
  auto claimed = worker.Post("/v1/queues/jobs-a/claim", {{"max", 2}});
  ASSERT_EQ(claimed.status, 200) << claimed.body;
  ASSERT_EQ(claimed.json["messages"].size(), 2u);
  auto& m = claimed.json["messages"];
  EXPECT_EQ(worker
                .Post("/v1/queues/jobs-a/extend",
                      {{"receipt", m[0]["receipt"]}, {"lease_ms", 60000}})
                .status,
            200);
  EXPECT_EQ(worker.Post("/v1/queues/jobs-a/ack", {{"receipt", m[0]["receipt"]}})
                .status,
            200);
  EXPECT_EQ(
      worker.Post("/v1/queues/jobs-a/nack", {{"receipt", m[1]["receipt"]}})
          .status,
      200);
  EXPECT_EQ(worker.Post("/v1/queues/private/claim", Json::object()).status,
            403);
  EXPECT_EQ(worker.Get("/v1/queues/jobs-a/dead").status, 403);
  // Two grants on one token.
  EXPECT_EQ(Send(worker, "scratch").status, 404);  // allowed; does not exist
}

TEST_F(Auth, AdminPermissionAndListingShowsOnlyVisibleQueues) {
  Client sender(port(), kSender);
  auto list = sender.Get("/v1/queues");
  ASSERT_EQ(list.status, 200);
  std::vector<std::string> names;
  for (auto& q : list.json["queues"]) names.push_back(q["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"jobs-a", "jobs-b"}));
  EXPECT_EQ(sender.Get("/v1/queues/private").status, 403);
  EXPECT_EQ(admin_->Post("/v1/queues/jobs-a/purge", Json::object()).status,
            200);
  EXPECT_EQ(admin_->Get("/v1/queues/jobs-a/dead").status, 200);
  EXPECT_EQ(admin_->Delete("/v1/queues/jobs-b").status, 200);
  EXPECT_EQ(admin_->Post("/v1/rings/jobs-ring", {{"capacity", 3}}).status, 201);
  EXPECT_EQ(
      sender.Post("/v1/rings/jobs-ring/groups/g", {{"payload", "p"}}).status,
      200);
  EXPECT_EQ(sender.Get("/v1/rings/jobs-ring/groups/g").status, 403);
  // The list of rings, too, shows only what the token may see.
  EXPECT_EQ(admin_->Post("/v1/rings/private-ring", {{"capacity", 3}}).status,
            201);
  auto rings = sender.Get("/v1/rings");
  ASSERT_EQ(rings.status, 200) << rings.body;
  ASSERT_EQ(rings.json["rings"].size(), 1u) << rings.body;
  EXPECT_EQ(rings.json["rings"][0]["name"], "jobs-ring");
  EXPECT_EQ(admin_->Get("/v1/rings").json["rings"].size(), 2u);
  // And the list of everything.
  auto all = sender.Get("/v1/all");
  ASSERT_EQ(all.status, 200) << all.body;
  ASSERT_EQ(all.json["rings"].size(), 1u) << all.body;
  EXPECT_EQ(all.json["rings"][0]["name"], "jobs-ring");
  for (const Json& q : all.json["queues"]) {
    EXPECT_EQ(q["name"].get<std::string>().rfind("jobs", 0), 0u) << all.body;
  }
  EXPECT_EQ(admin_->Get("/v1/all").json["rings"].size(), 2u);
}

TEST_F(Auth, ReceiptFromAnotherQueueIsRefused) {
  ASSERT_EQ(Send(*admin_, "jobs-a").status, 200);
  Client worker(port(), kWorker);
  auto claimed = worker.Post("/v1/queues/jobs-a/claim", Json::object());
  ASSERT_EQ(claimed.json["messages"].size(), 1u);
  std::string receipt = claimed.json["messages"][0]["receipt"];
  for (const char* op : {"ack", "nack", "extend"}) {
    Json body = {{"receipt", receipt}};
    if (std::string(op) == "extend") body["lease_ms"] = 1000;
    auto r = worker.Post(std::string("/v1/queues/jobs-b/") + op, body);
    EXPECT_EQ(r.status, 404) << op << ": " << r.body;
    EXPECT_EQ(r.error_code(), "not_found") << op;
  }
  // Still leased on its own queue, and its receipt still works there.
  EXPECT_EQ(admin_->Get("/v1/queues/jobs-a").json["stats"]["leased"], 1);
  EXPECT_EQ(worker.Post("/v1/queues/jobs-a/ack", {{"receipt", receipt}}).status,
            200);
}

// Regression: a token with admin on its own queues could name any queue
// as their dead-letter queue and fail messages into it, a write into a
// queue it has no grant on. Naming one needs send (or admin) on it.
TEST_F(Auth, ADeadLetterQueueNeedsSendOnIt) {
  Client tenant(port(), kTenant);
  for (const Json& body :
       {Json({{"dead_letter_queue", "private"}}),
        Json({{"dead_letter_queue", "nowhere"}, {"max_attempts", 1}})}) {
    auto r = tenant.Post("/v1/queues/qb-made", body);
    EXPECT_EQ(r.status, 403) << r.body;
    EXPECT_EQ(r.error_code(), "forbidden");
  }
  EXPECT_EQ(admin_->Get("/v1/queues/qb-made").status, 404);
  ASSERT_EQ(tenant.Post("/v1/queues/qb-1", {{"max_attempts", 1}}).status, 201);
  auto patched = tenant.Call("PATCH", "/v1/queues/qb-1",
                             Json({{"dead_letter_queue", "private"}}).dump());
  EXPECT_EQ(patched.status, 403) << patched.body;
  EXPECT_EQ(patched.error_code(), "forbidden");
  EXPECT_TRUE(admin_->Get("/v1/queues/qb-1")
                  .json["options"]["dead_letter_queue"]
                  .is_null());
  // What the tenant fails stays its own: none of it reaches `private`.
  ASSERT_EQ(Send(tenant, "qb-1").status, 200);
  auto claimed = tenant.Post("/v1/queues/qb-1/claim", Json::object());
  ASSERT_EQ(claimed.json["messages"].size(), 1u) << claimed.body;
  ASSERT_EQ(tenant
                .Post("/v1/queues/qb-1/nack",
                      {{"receipt", claimed.json["messages"][0]["receipt"]}})
                .status,
            200);
  EXPECT_EQ(admin_->Get("/v1/queues/qb-1").json["stats"]["dead"], 1);
  EXPECT_EQ(admin_->Get("/v1/queues/private").json["stats"]["ready"], 0);
  // Send on the target is enough; admin on it (its own qb*) too.
  ASSERT_EQ(admin_->Post("/v1/queues/shared", Json::object()).status, 201);
  for (const char* to : {"shared", "qb-2"}) {
    auto r = tenant.Call("PATCH", "/v1/queues/qb-1",
                         Json({{"dead_letter_queue", to}}).dump());
    EXPECT_EQ(r.status, 200) << to << ": " << r.body;
  }
  EXPECT_EQ(
      tenant.Post("/v1/queues/qb-3", {{"dead_letter_queue", "shared"}}).status,
      201);
}

// Regression: schedule names are shared by all tokens, and a token was
// told of schedules on queues it has no grant on: 403 naming the queue for
// a read, 409 for a create. Such a schedule is, to it, not there.
TEST_F(Auth, SchedulesOutsideATokensGrantsAreNotShownToIt) {
  ASSERT_EQ(
      admin_
          ->Post("/v1/schedules/nightly",
                 {{"cron", "@daily"}, {"queue", "private"}, {"payload", "x"}})
          .status,
      201);
  ASSERT_EQ(admin_->Post("/v1/queues/qb-1", Json::object()).status, 201);
  Client tenant(port(), kTenant);
  auto missing = tenant.Get("/v1/schedules/never-made");
  ASSERT_EQ(missing.status, 404) << missing.body;
  const std::string missing_message = missing.json["error"]["message"];
  for (auto [method, path] : {std::pair{"GET", "/v1/schedules/nightly"},
                              {"DELETE", "/v1/schedules/nightly"},
                              {"POST", "/v1/schedules/nightly/pause"},
                              {"POST", "/v1/schedules/nightly/resume"}}) {
    auto r =
        tenant.Call(method, path, std::string(method) == "POST" ? "{}" : "");
    EXPECT_EQ(r.status, 404) << method << " " << path << ": " << r.body;
    EXPECT_EQ(r.error_code(), "not_found");
    // The same words as for a name no schedule has.
    std::string message = r.json["error"]["message"];
    EXPECT_EQ(message.replace(message.find("nightly"), 7, "never-made"),
              missing_message);
  }
  // Taking the name for its own queue is refused, naming nothing else.
  auto taken =
      tenant.Post("/v1/schedules/nightly",
                  {{"cron", "@hourly"}, {"queue", "qb-1"}, {"payload", "y"}});
  EXPECT_EQ(taken.status, 403) << taken.body;
  EXPECT_EQ(taken.error_code(), "forbidden");
  EXPECT_EQ(taken.body.find("private"), std::string::npos) << taken.body;
  EXPECT_EQ(taken.body.find("exist"), std::string::npos) << taken.body;
  EXPECT_TRUE(tenant.Get("/v1/schedules").json["schedules"].empty());
  // The schedule is as the admin made it.
  auto kept = admin_->Get("/v1/schedules/nightly");
  ASSERT_EQ(kept.status, 200) << kept.body;
  EXPECT_EQ(kept.json["queue"], "private");
  EXPECT_EQ(kept.json["cron"], "@daily");
  EXPECT_EQ(kept.json["paused"], false);
  // Its own schedules the tenant sees and steers, and a name taken by one
  // of them is the ordinary conflict.
  ASSERT_EQ(
      tenant
          .Post("/v1/schedules/qb-hourly",
                {{"cron", "@hourly"}, {"queue", "qb-1"}, {"payload", "y"}})
          .status,
      201);
  EXPECT_EQ(
      tenant
          .Post("/v1/schedules/qb-hourly",
                {{"cron", "@hourly"}, {"queue", "qb-1"}, {"payload", "y"}})
          .status,
      409);
  EXPECT_EQ(tenant.Get("/v1/schedules/qb-hourly").status, 200);
  EXPECT_EQ(tenant.Delete("/v1/schedules/qb-hourly").status, 200);
}

TEST(AuthStartup, RefusesNonLoopbackWithoutTokensAndBadTokenFiles) {
  fs::path dir = fs::temp_directory_path() /
                 ("sqlq-server-authstart-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    ServerProcess open_wide(dir, {"--bind", "0.0.0.0"});
    EXPECT_FALSE(open_wide.Start());
    EXPECT_EQ(open_wide.WaitExit(std::chrono::seconds(10)), 2);
    EXPECT_NE(open_wide.log().find("without --tokens"), std::string::npos)
        << open_wide.log();
  }
  {
    std::ofstream(dir / "bad.txt") << "short admin:*\n";
    ServerProcess bad(dir, {"--tokens", (dir / "bad.txt").string()});
    EXPECT_FALSE(bad.Start());
    EXPECT_EQ(bad.WaitExit(std::chrono::seconds(10)), 2);
    EXPECT_NE(bad.log().find("at least 8"), std::string::npos) << bad.log();
  }
  // Regression: each of these was accepted, silently meaning something
  // other than what its writer likely meant (or refused with a misleading
  // error, for the byte order mark).
  struct Bad {
    std::string text, says;
  };
  for (const Bad& b : std::vector<Bad>{
           {"token-one-0001 send:jobs\ntoken-one-0001 admin:*\n",
            "line 2 repeats the token of line 1"},
           {R"({"tokens":[{"token":"token-one-0001","grants":{"jobs":[]}}]})",
            "non-empty array"},
           {"token-one-0001 :jobs\n", "PERM[,PERM]:PATTERN"},
           {R"({"tokens":[],"extra":1})", "unknown field \"extra\""},
           {R"({"tokens":[{"token":"token-one-0001","grants":{"*":["admin"]},)"
            R"("expires":"never"}]})",
            "unknown field \"expires\""},
           {R"({"tokens":[{"token":"token-one-0001","grants":{}}]})",
            "at least one grant"},
       }) {
    std::ofstream(dir / "bad.txt") << b.text;
    ServerProcess bad(dir, {"--tokens", (dir / "bad.txt").string()});
    EXPECT_FALSE(bad.Start()) << b.text;
    EXPECT_EQ(bad.WaitExit(std::chrono::seconds(10)), 2) << b.text;
    EXPECT_NE(bad.log().find(b.says), std::string::npos) << b.text << "\n"
                                                         << bad.log();
  }
  for (
      const std::string& bom :
      {std::string("\xEF\xBB\xBF") + "bom-token-0001 admin:*\n",
       std::string("\xEF\xBB\xBF") +
           R"({"tokens":[{"token":"bom-token-0001","grants":{"*":["admin"]}}]})"}) {
    std::ofstream(dir / "bom.txt") << bom;
    ServerProcess ok(dir, {"--tokens", (dir / "bom.txt").string()});
    ASSERT_TRUE(ok.Start()) << ok.log();
    EXPECT_EQ(Client(ok.port(), "bom-token-0001").Get("/v1/queues").status,
              200);
  }
  {
    std::ofstream(dir / "tokens.json")
        << R"({"tokens":[{"token":"json-token-0001","grants":{"*":["admin"]}}]})";
    ServerProcess wide(
        dir, {"--bind", "0.0.0.0", "--tokens", (dir / "tokens.json").string()});
    ASSERT_TRUE(wide.Start()) << wide.log();
    Client c(wide.port(), "json-token-0001");
    EXPECT_EQ(c.Post("/v1/queues/q", Json::object()).status, 201);
    Client anon(wide.port());
    EXPECT_EQ(anon.Get("/v1/queues").status, 401);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sqlq::server_test
