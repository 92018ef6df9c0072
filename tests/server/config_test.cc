// Settings from flags, SQLQ_* environment and the config file, in that
// order of precedence; --db selecting another engine (PostgreSQL).

#include <cstdlib>
#include <future>

#include "tests/server/server_fixture.h"
#include "tests/support/test_servers.h"

namespace sqlq::server_test {
namespace {

Json Batch(int n) {
  Json msgs = Json::array();
  for (int i = 0; i < n; ++i) msgs.push_back({{"payload", "m"}});
  return {{"messages", msgs}};
}

class Config : public ServerTest {};

TEST_F(Config, FileEnvironmentAndFlagsInOrderOfPrecedence) {
  std::ofstream(dir_ / "serve.conf")
      << "# limits\nmax-batch = 2\nmax-wait = \"1s\"\nmax-payload = 10\n";
  // The file says max-batch 2; the environment says 3 and wins. The file
  // says max-wait 1s; the flag says 2s and wins. max-payload: file only.
  server_.emplace(
      dir_, std::vector<std::string>{"--config", (dir_ / "serve.conf").string(),
                                     "--max-wait", "2s"});
  server_->SetEnv("SQLQ_MAX_BATCH", "3");
  ASSERT_TRUE(server_->Start()) << server_->log();
  Client c(port());
  ASSERT_EQ(c.Post("/v1/queues/jobs", Json::object()).status, 201);
  EXPECT_EQ(c.Post("/v1/queues/jobs/messages", Batch(3)).status, 200);
  EXPECT_EQ(c.Post("/v1/queues/jobs/messages", Batch(4)).error_code(),
            "batch_too_large");
  EXPECT_EQ(c.Post("/v1/queues/jobs/claim", {{"wait_ms", 2000}}).status, 200);
  EXPECT_EQ(c.Post("/v1/queues/jobs/claim", {{"wait_ms", 2001}}).error_code(),
            "wait_too_long");
  EXPECT_EQ(c.Post("/v1/queues/jobs/messages",
                   {{"messages", {{{"payload", std::string(11, 'x')}}}}})
                .error_code(),
            "too_large");
}

TEST_F(Config, IdleKeepAliveConnectionIsClosedAfterTheIdleTimeout) {
  StartServer({"--idle-timeout", "300ms"});
  RawConn idle(port());
  ASSERT_TRUE(idle.Write("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  EXPECT_EQ(StatusOf(idle.ReadResponse()), 200);
  EXPECT_TRUE(idle.ClosedWithin(std::chrono::seconds(10)));
  EXPECT_TRUE(WaitFor([&] {
    return server_->log().find("event=client_timeout") != std::string::npos;
  }));
}

TEST_F(Config, BadSettingsStopTheServerWithAClearMessage) {
  std::ofstream(dir_ / "bad.conf") << "max-bach = 2\n";
  ServerProcess typo(dir_, {"--config", (dir_ / "bad.conf").string()});
  EXPECT_FALSE(typo.Start());
  EXPECT_EQ(typo.WaitExit(std::chrono::seconds(10)), 2);
  EXPECT_NE(typo.log().find("unknown key 'max-bach'"), std::string::npos)
      << typo.log();
  ServerProcess bad_wait(dir_, {"--max-wait", "soon"});
  EXPECT_FALSE(bad_wait.Start());
  EXPECT_EQ(bad_wait.WaitExit(std::chrono::seconds(10)), 2);
  EXPECT_NE(bad_wait.log().find("--max-wait"), std::string::npos)
      << bad_wait.log();
}

// Regression: a --port-file in a missing directory started listening and
// then exited with "internal error".
TEST_F(Config, PortFileThatCannotBeWrittenFailsBeforeListening) {
  ServerProcess s(dir_, {"--port-file", (dir_ / "missing" / "port").string()});
  EXPECT_FALSE(s.Start());
  EXPECT_EQ(s.WaitExit(std::chrono::seconds(10)), 2);
  EXPECT_NE(s.log().find("cannot write --port-file"), std::string::npos)
      << s.log();
  EXPECT_EQ(s.log().find("listening"), std::string::npos) << s.log();
  EXPECT_FALSE(fs::exists(dir_ / "q.db")) << "the store was opened first";
}

// Regression: serve exited 8 ("try again") on a directory and 3 on a file
// that is not a database, where every other command exits 7 and 10
// (docs/cli.md, "Exit codes").
TEST_F(Config, StoreThatCannotBeOpenedExitsAsTheCliDoes) {
  fs::create_directories(dir_ / "a-directory");
  std::ofstream(dir_ / "notes.txt") << "not a database, but long enough to "
                                       "be read as one by SQLite's header "
                                       "check\n";
  struct Case {
    std::string url;
    int exit;
    std::string says;
  };
  for (const Case& c :
       {Case{"sqlite:" + (dir_ / "a-directory").string(), 7, "directory"},
        Case{"sqlite:" + (dir_ / "notes.txt").string(), 10,
             "not an SQLite database"}}) {
    fs::remove(dir_ / "port");
    ServerProcess s(dir_, {}, c.url);
    EXPECT_FALSE(s.Start());
    EXPECT_EQ(s.WaitExit(std::chrono::seconds(10)), c.exit) << s.log();
    EXPECT_NE(s.log().find(c.says), std::string::npos) << s.log();
  }
}

// Two servers on one database of a server engine: a claim parked on one is
// woken by a send through the other (the engine's notifications, or its
// polling on MariaDB), and the data is the same on both.
void TwoServersShareQueuesAndWakeEachOther(const fs::path& dir,
                                           const char* url) {
  fs::create_directories(dir / "a");
  fs::create_directories(dir / "b");
  ServerProcess a(dir / "a", {}, url), b(dir / "b", {}, url);
  ASSERT_TRUE(a.Start()) << a.log();
  ASSERT_TRUE(b.Start()) << b.log();
  Client ca(a.port()), cb(b.port());
  const std::string q = "srv-" + std::to_string(::getpid());
  (void)ca.Delete("/v1/queues/" + q);
  ASSERT_EQ(ca.Post("/v1/queues/" + q, Json::object()).status, 201);

  auto parked = std::async(std::launch::async, [&] {
    Client waiter(a.port());
    return waiter.Post("/v1/queues/" + q + "/claim", {{"wait_ms", 30000}});
  });
  ASSERT_TRUE(WaitFor([&] {
    return ca.Get("/metrics").body.find("sqlq_server_waiting_consumers 1\n") !=
           std::string::npos;
  }));
  ASSERT_EQ(cb.Post("/v1/queues/" + q + "/messages",
                    {{"messages", {{{"payload", "across"}}}}})
                .status,
            200);
  ASSERT_EQ(parked.wait_for(std::chrono::seconds(15)),
            std::future_status::ready);
  auto r = parked.get();
  ASSERT_EQ(r.json["messages"].size(), 1u) << r.body;
  EXPECT_EQ(r.json["messages"][0]["payload"], "across");
  EXPECT_EQ(cb.Post("/v1/queues/" + q + "/ack",
                    {{"receipt", r.json["messages"][0]["receipt"]}})
                .status,
            200);
  EXPECT_EQ(ca.Get("/v1/queues/" + q).json["stats"]["acks"], 1);
  EXPECT_EQ(ca.Delete("/v1/queues/" + q).status, 200);
}

// The server's URL; skips (or fails, when required) without the server
// (tests/support/test_servers.h).
#define SQLQ_TEST_URL_OR_SKIP(var, server) \
  SQLQ_REQUIRE_SERVER(server);             \
  const std::string var = ::sqlq::test::ServerUrl(server)

TEST_F(Config, PostgresTwoServersShareQueuesAndWakeEachOther) {
  SQLQ_TEST_URL_OR_SKIP(url, test::kPostgresServer);
  TwoServersShareQueuesAndWakeEachOther(dir_, url.c_str());
}

TEST_F(Config, MariadbTwoServersShareQueuesAndWakeEachOther) {
  SQLQ_TEST_URL_OR_SKIP(url, test::kMariadbServer);
  TwoServersShareQueuesAndWakeEachOther(dir_, url.c_str());
}

}  // namespace
}  // namespace sqlq::server_test
