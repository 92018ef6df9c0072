// The database goes away under a running server: requests are answered with
// 503 and a retryable error code (docs/http-api.md, "Errors"), /readyz says
// so, the server itself stays up, and once the database is back everything
// acknowledged before is there and requests succeed again.

#include <cstdlib>
#include <string>

#include "tests/engines/postgres/private_pg_server.h"
#include "tests/server/server_fixture.h"
#include "tests/support/test_servers.h"

namespace sqlq::server_test {
namespace {

class DatabaseDown : public ServerTest {};

TEST_F(DatabaseDown, RequestsGet503UnavailableAndSucceedOnceItIsBack) {
  SQLQ_REQUIRE_SERVER(test::kPostgresServer);
  test::PrivatePgServer pg;
  ASSERT_TRUE(pg.ok()) << "could not start a private PostgreSQL";
  server_.emplace(dir_, std::vector<std::string>{"--history-step", "200ms"},
                  pg.url());
  ASSERT_TRUE(server_->Start()) << server_->log();
  Client c(port());
  ASSERT_EQ(c.Post("/v1/queues/jobs", Json::object()).status, 201);
  auto sent = c.Post("/v1/queues/jobs/messages",
                     {{"messages", {{{"payload", "before"}}}}});
  ASSERT_EQ(sent.status, 200) << sent.body;
  const auto id = sent.json["ids"][0].get<std::int64_t>();

  ASSERT_TRUE(pg.Halt());
  for (const char* path : {"/readyz", "/v1/queues/jobs"}) {
    auto r = c.Get(path);
    EXPECT_EQ(r.status, 503) << path << ": " << r.body;
    EXPECT_EQ(r.error_code(), "unavailable") << path << ": " << r.body;
    EXPECT_FALSE(r.json["error"].value("message", "").empty()) << r.body;
  }
  auto refused = c.Post("/v1/queues/jobs/messages",
                        {{"messages", {{{"payload", "while down"}}}}});
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(refused.error_code(), "unavailable") << refused.body;
  EXPECT_EQ(c.Get("/healthz").status, 200) << "the server process is alive";
  // The dashboard's history has a gap, said once in the log.
  EXPECT_TRUE(WaitFor([&] {
    return server_->log().find("event=history_sample_failed") !=
           std::string::npos;
  })) << server_->log();

  ASSERT_TRUE(pg.Resume());
  // The store reconnects on its own; the first requests after the restart
  // may still meet a pooled connection that died, so ask until ready.
  ASSERT_TRUE(WaitFor([&] { return c.Get("/readyz").status == 200; },
                      std::chrono::seconds(20)));
  EXPECT_TRUE(WaitFor([&] {
    return server_->log().find("event=history_sample_recovered") !=
           std::string::npos;
  })) << server_->log();
  // Once while it lasted, however many readings failed.
  const std::string log = server_->log();
  const auto first = log.find("event=history_sample_failed");
  const auto again = log.find("event=history_sample_failed", first + 1);
  EXPECT_TRUE(again == std::string::npos ||
              again > log.find("event=history_sample_recovered"))
      << log;
  auto got = c.Post("/v1/queues/jobs/claim", {{"max", 10}});
  ASSERT_EQ(got.status, 200) << got.body;
  ASSERT_EQ(got.json["messages"].size(), 1u) << got.body;
  EXPECT_EQ(got.json["messages"][0]["id"], id);
  EXPECT_EQ(got.json["messages"][0]["payload"], "before");
  EXPECT_EQ(c.Post("/v1/queues/jobs/ack",
                   {{"receipt", got.json["messages"][0]["receipt"]}})
                .status,
            200);
}

}  // namespace
}  // namespace sqlq::server_test
