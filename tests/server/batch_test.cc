// Batches through sqlq serve: sent, read, acked, cancelled over HTTP, the
// callback's counts as a claim shows them, and the errors and permissions
// a client sees.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/server/server_fixture.h"

namespace sqlq::server_test {
namespace {

class Batches : public ServerTest {
 protected:
  // Claims one message of `queue` and acks it; returns it.
  Json ClaimAndAck(Client& c, const std::string& queue) {
    Response r = c.Post("/v1/queues/" + queue + "/claim", {{"max", 1}});
    EXPECT_EQ(r.status, 200) << r.body;
    if (r.json["messages"].size() != 1) {
      ADD_FAILURE() << "nothing to claim in " << queue << ": " << r.body;
      return Json::object();
    }
    Json m = r.json["messages"][0];
    EXPECT_EQ(
        c.Post("/v1/queues/" + queue + "/ack", {{"receipt", m["receipt"]}})
            .status,
        200);
    return m;
  }
};

TEST_F(Batches, SentReadAndCompletedOverHttp) {
  StartServer({});
  Client c(port());
  for (const char* q : {"images", "mail", "done"}) {
    ASSERT_EQ(
        c.Post(std::string("/v1/queues/") + q, {{"max_attempts", 1}}).status,
        201);
  }
  const Json batch = {
      {"id", "album-7"},
      {"members", Json::array({{{"queue", "images"}, {"payload", "a.png"}},
                               {{"queue", "images"}, {"payload", "b.png"}},
                               {{"queue", "mail"}, {"payload", "notice"}}})},
      {"callback",
       {{"queue", "done"},
        {"payload", {{"album", 7}}},
        {"kind", "album.done"}}}};
  Response sent = c.Post("/v1/batches", batch);
  ASSERT_EQ(sent.status, 201) << sent.body;
  EXPECT_EQ(sent.json["id"], "album-7");
  ASSERT_EQ(sent.json["members"].size(), 3u);
  const std::int64_t callback = sent.json["callback_id"];
  // Again: the id is taken.
  Response again = c.Post("/v1/batches", batch);
  EXPECT_EQ(again.status, 409) << again.body;
  EXPECT_EQ(again.json["error"]["code"], "already_exists");
  EXPECT_EQ(c.Get("/v1/queues/images").json["stats"]["ready"], 2);

  Response st = c.Get("/v1/batches/album-7");
  ASSERT_EQ(st.status, 200) << st.body;
  EXPECT_EQ(st.json["total"], 3);
  EXPECT_EQ(st.json["pending"], 3);
  EXPECT_EQ(st.json["done"], false);
  EXPECT_EQ(st.json["callback_queue"], "done");
  EXPECT_EQ(st.json["callback_id"], callback);
  EXPECT_EQ(st.json["queues"], Json({"images", "mail"}));
  EXPECT_FALSE(st.json.contains("done_at"));
  Response cb = c.Get("/v1/queues/done/messages/" + std::to_string(callback));
  EXPECT_EQ(cb.json["state"], "waiting") << cb.body;
  EXPECT_EQ(cb.json["batch"], Json({{"id", "album-7"}, {"callback", true}}));

  Json a = ClaimAndAck(c, "images");
  EXPECT_EQ(a["batch"], Json({{"id", "album-7"}})) << a.dump();
  Response b = c.Post("/v1/queues/images/claim", {{"max", 1}});
  ASSERT_EQ(b.json["messages"].size(), 1u);
  ASSERT_EQ(c.Post("/v1/queues/images/nack",
                   {{"receipt", b.json["messages"][0]["receipt"]},
                    {"error", "corrupt"}})
                .status,
            200);
  EXPECT_EQ(
      c.Post("/v1/queues/done/claim", {{"max", 1}}).json["messages"].size(),
      0u);
  ClaimAndAck(c, "mail");

  st = c.Get("/v1/batches/album-7");
  EXPECT_EQ(st.json["completed"], 2);
  EXPECT_EQ(st.json["dead"], 1);
  EXPECT_EQ(st.json["cancelled"], 0);
  EXPECT_EQ(st.json["pending"], 0);
  EXPECT_EQ(st.json["done"], true);
  EXPECT_TRUE(st.json.contains("done_at"));
  EXPECT_TRUE(st.json.contains("expires_at"));
  Json done = ClaimAndAck(c, "done");
  EXPECT_EQ(done["id"], callback);
  EXPECT_EQ(done["kind"], "album.done");
  EXPECT_EQ(done["payload"], Json({{"album", 7}}));
  EXPECT_EQ(done["batch"], Json({{"id", "album-7"},
                                 {"callback", true},
                                 {"total", 3},
                                 {"completed", 2},
                                 {"dead", 1},
                                 {"cancelled", 0}}))
      << done.dump();
}

TEST_F(Batches, CancelledOverHttp) {
  StartServer({});
  Client c(port());
  for (const char* q : {"jobs", "done"}) {
    ASSERT_EQ(c.Post(std::string("/v1/queues/") + q, Json::object()).status,
              201);
  }
  // No id: one is made.
  Response sent =
      c.Post("/v1/batches",
             {{"members", Json::array({{{"queue", "jobs"}, {"payload", "1"}},
                                       {{"queue", "jobs"}, {"payload", "2"}},
                                       {{"queue", "jobs"}, {"payload", "3"}}})},
              {"callback", {{"queue", "done"}, {"payload", "cb"}}},
              {"retention_ms", 60000}});
  ASSERT_EQ(sent.status, 201) << sent.body;
  const std::string id = sent.json["id"];
  EXPECT_EQ(id.size(), 32u);
  ClaimAndAck(c, "jobs");
  Response cancelled = c.Post("/v1/batches/" + id + "/cancel", Json::object());
  ASSERT_EQ(cancelled.status, 200) << cancelled.body;
  EXPECT_EQ(cancelled.json["completed"], 1);
  EXPECT_EQ(cancelled.json["cancelled"], 2);
  EXPECT_EQ(cancelled.json["done"], true);
  EXPECT_TRUE(cancelled.json.contains("cancelled_at"));
  Response dead = c.Get("/v1/queues/jobs/dead");
  ASSERT_EQ(dead.json["dead"].size(), 2u) << dead.body;
  EXPECT_EQ(dead.json["dead"][0]["last_error"],
            "cancelled: batch " + id + " was cancelled");
  Json cb = ClaimAndAck(c, "done");
  EXPECT_EQ(cb["batch"]["completed"], 1);
  EXPECT_EQ(cb["batch"]["cancelled"], 2);
  EXPECT_EQ(c.Post("/v1/batches/nope/cancel", Json::object()).status, 404);
  EXPECT_EQ(c.Get("/v1/batches/nope").status, 404);
}

TEST_F(Batches, BadInputIsRefusedWithWhatToSend) {
  StartServer({});
  Client c(port());
  for (const char* q : {"jobs", "done"}) {
    ASSERT_EQ(c.Post(std::string("/v1/queues/") + q, Json::object()).status,
              201);
  }
  const Json member = {{"queue", "jobs"}, {"payload", "x"}};
  const Json callback = {{"queue", "done"}, {"payload", "cb"}};
  struct Case {
    Json body;
    int status;
    const char* says;
  };
  const Case cases[] = {
      {{{"callback", callback}}, 400, "member"},
      {{{"members", Json::array()}, {"callback", callback}}, 400, "member"},
      {{{"members", {member}}}, 400, "callback"},
      {{{"members", {member}}, {"callback", "done"}}, 400, "callback"},
      {{{"members", {{{"payload", "x"}}}}, {"callback", callback}},
       400,
       "queue"},
      {{{"members", {member}}, {"callback", callback}, {"id", "white space"}},
       400,
       "batch id"},
      {{{"members", {member}}, {"callback", callback}, {"retention_ms", 5}},
       400,
       "retention"},
      {{{"members", {member}},
        {"callback", {{"queue", "done"}, {"payload", "cb"}, {"delay_ms", 10}}}},
       400,
       "callback"},
      {{{"members", {{{"queue", "jobs"}, {"payload", "x"}, {"dedup", "k"}}}},
        {"callback", callback}},
       400,
       "dedup"},
      {{{"members", {{{"queue", "nope"}, {"payload", "x"}}}},
        {"callback", callback}},
       404,
       "member 1"},
      {{{"members", {member}}, {"callback", callback}, {"colour", "red"}},
       400,
       "colour"},
  };
  for (const Case& k : cases) {
    Response r = c.Post("/v1/batches", k.body);
    EXPECT_EQ(r.status, k.status) << k.body.dump() << " " << r.body;
    EXPECT_NE(r.body.find(k.says), std::string::npos)
        << k.body.dump() << " " << r.body;
  }
  EXPECT_EQ(c.Get("/v1/queues/jobs").json["stats"]["sends"], 0);
  EXPECT_EQ(c.Get("/v1/queues/done").json["stats"]["sends"], 0);
}

TEST_F(Batches, PermissionsAreTheQueues) {
  constexpr const char* kAdminToken = "admin-token-0001";
  constexpr const char* kSender = "sender-token-0001";
  constexpr const char* kReader = "reader-token-0001";
  std::ofstream f(dir_ / "tokens.txt");
  f << kAdminToken << " admin:*\n"
    << kSender << " send:jobs send:done\n"
    << kReader << " claim:done send:jobs\n";
  f.close();
  StartServer({"--tokens", (dir_ / "tokens.txt").string()});
  Client admin(port(), kAdminToken), sender(port(), kSender),
      reader(port(), kReader);
  for (const char* q : {"jobs", "done", "private"}) {
    ASSERT_EQ(admin.Post(std::string("/v1/queues/") + q, Json::object()).status,
              201);
  }
  const Json callback = {{"queue", "done"}, {"payload", "cb"}};
  // Send on every member's queue and on the callback's.
  EXPECT_EQ(sender
                .Post("/v1/batches",
                      {{"members", {{{"queue", "private"}, {"payload", "x"}}}},
                       {"callback", callback}})
                .status,
            403);
  EXPECT_EQ(reader
                .Post("/v1/batches",
                      {{"members", {{{"queue", "jobs"}, {"payload", "x"}}}},
                       {"callback", callback}})
                .status,
            403);
  ASSERT_EQ(sender
                .Post("/v1/batches",
                      {{"id", "b1"},
                       {"members", {{{"queue", "jobs"}, {"payload", "x"}}}},
                       {"callback", callback}})
                .status,
            201);
  // Reading takes any permission on the callback's queue; cancelling,
  // admin on it and on the members' queues.
  EXPECT_EQ(reader.Get("/v1/batches/b1").status, 200);
  EXPECT_EQ(sender.Get("/v1/batches/b1").status, 200);
  EXPECT_EQ(sender.Post("/v1/batches/b1/cancel", Json::object()).status, 403);
  EXPECT_EQ(reader.Post("/v1/batches/b1/cancel", Json::object()).status, 403);
  EXPECT_EQ(admin.Get("/v1/batches/b1").json["pending"], 1);
  EXPECT_EQ(admin.Post("/v1/batches/b1/cancel", Json::object()).status, 200);
}

}  // namespace
}  // namespace sqlq::server_test
