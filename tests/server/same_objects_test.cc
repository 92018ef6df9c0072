// The CLI and the HTTP API print the same objects (docs/http-api.md,
// "Objects"): one store, read through `sqlq --json` and through the
// running server, object for object.

#include <cstdio>

#include "tests/server/server_fixture.h"

namespace sqlq::server_test {
namespace {

class SameObjects : public ServerTest {
 protected:
  // The JSON lines `sqlq --db URL --json ARGS` prints.
  std::vector<Json> Cli(const std::string& args) {
    const std::string cmd = std::string(SQLQ_BIN) + " --db '" +
                            server_->db_url() + "' --json " + args;
    std::vector<Json> out;
    FILE* p = popen(cmd.c_str(), "r");
    if (p == nullptr) {
      ADD_FAILURE() << "popen " << cmd;
      return out;
    }
    std::string text;
    char buf[4096];
    while (std::size_t n = fread(buf, 1, sizeof buf, p)) text.append(buf, n);
    EXPECT_EQ(pclose(p), 0) << cmd;
    std::size_t start = 0;
    while (start < text.size()) {
      std::size_t nl = text.find('\n', start);
      out.push_back(Json::parse(text.substr(start, nl - start)));
      start = nl == std::string::npos ? text.size() : nl + 1;
    }
    return out;
  }
};

TEST_F(SameObjects, QueuesStatsDeadLettersRingsAndRotations) {
  StartServer();
  Client c(port());
  ASSERT_EQ(c.Post("/v1/queues/jobs", {{"max_attempts", 1}}).status, 201);
  ASSERT_EQ(c.Post("/v1/queues/jobs/messages",
                   {{"messages", {{{"payload", "a"}}, {{"payload", "b"}}}}})
                .status,
            200);
  // One message dies (max_attempts 1, nacked), one stays ready.
  Response claimed = c.Post("/v1/queues/jobs/claim", {{"max", 1}});
  ASSERT_EQ(claimed.status, 200);
  const std::string receipt = claimed.json["messages"][0]["receipt"];
  ASSERT_EQ(
      c.Post("/v1/queues/jobs/nack", {{"receipt", receipt}, {"error", "boom"}})
          .status,
      200);

  const Json queues = c.Get("/v1/queues").json["queues"];
  EXPECT_EQ(Json(Cli("queue list")), queues);
  EXPECT_EQ(queues[0]["kind"], "queue");

  const Json got = c.Get("/v1/queues/jobs").json;
  const std::vector<Json> stats = Cli("queue stats jobs");
  ASSERT_EQ(stats.size(), 1u);
  Json server_stats = got["stats"];
  Json cli_stats = stats[0];
  // The oldest ready message ages between the two reads.
  server_stats.erase("oldest_ready_age_ms");
  cli_stats.erase("oldest_ready_age_ms");
  EXPECT_EQ(cli_stats, server_stats);
  EXPECT_EQ(cli_stats["name"], "jobs");

  EXPECT_EQ(Json(Cli("dead list jobs")),
            c.Get("/v1/queues/jobs/dead").json["dead"]);

  ASSERT_EQ(c.Post("/v1/rings/views", {{"capacity", 2}}).status, 201);
  const Json pushed =
      c.Post("/v1/rings/views/groups/home", {{"payload", "x"}}).json;
  EXPECT_EQ(Json(Cli("ring read views home")),
            c.Get("/v1/rings/views/groups/home").json["entries"]);
  EXPECT_EQ(c.Get("/v1/rings/views/groups/home").json["entries"][0], pushed);
  EXPECT_EQ(Json(Cli("ring stats views")),
            Json::array({c.Get("/v1/rings/views").json}));
  EXPECT_EQ(Json(Cli("ring groups views")),
            c.Get("/v1/rings/views/groups").json["groups"]);

  ASSERT_EQ(c.Post("/v1/rotations/relays", Json::object()).status, 201);
  ASSERT_EQ(c.Post("/v1/rotations/relays/items",
                   {{"key", "a"}, {"payload", "smtp://a"}})
                .status,
            201);
  EXPECT_EQ(Json(Cli("rotation list relays")),
            c.Get("/v1/rotations/relays/items").json["items"]);
  EXPECT_EQ(Json(Cli("rotation stats relays")),
            Json::array({c.Get("/v1/rotations/relays").json}));
}

// What `create` prints is the object the API's create answers with.
TEST_F(SameObjects, CreateReplies) {
  StartServer();
  Client c(port());
  Json server_queue = c.Post("/v1/queues/a", {{"lease_ms", 500}}).json;
  std::vector<Json> cli_queue = Cli("queue create b --lease 500ms");
  ASSERT_EQ(cli_queue.size(), 1u);
  for (Json* j : {&server_queue, &cli_queue[0]}) {
    ASSERT_TRUE(j->contains("created_at")) << *j;
    j->erase("created_at");
    j->erase("name");
  }
  EXPECT_EQ(cli_queue[0], server_queue);

  // Rings and rotations: the same object but for the name.
  const std::pair<Json, std::string> pairs[] = {
      {c.Post("/v1/rings/r1", {{"capacity", 3}}).json,
       "ring create r2 --capacity 3"},
      {c.Post("/v1/rotations/p1", {{"max_failures", 2}}).json,
       "rotation create p2 --max-failures 2"}};
  for (auto [server_obj, cli_args] : pairs) {
    std::vector<Json> cli = Cli(cli_args);
    ASSERT_EQ(cli.size(), 1u) << cli_args;
    server_obj.erase("name");
    cli[0].erase("name");
    EXPECT_EQ(cli[0], server_obj) << cli_args;
  }
}

}  // namespace
}  // namespace sqlq::server_test
