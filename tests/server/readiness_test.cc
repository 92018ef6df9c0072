// /readyz tells a load balancer whether this server can do its work: not
// only that the database answers reads, but that writes commit.

#include <sys/resource.h>

#include <cstdlib>

#include "tests/engines/postgres/private_pg_server.h"
#include "tests/server/server_fixture.h"
#include "tests/support/test_servers.h"

namespace sqlq::server_test {
namespace {

class Readiness : public ServerTest {};

// Sets the server's file size limit (its soft limit: the hard one stays, so
// the limit can be raised again without privileges).
void LimitFileSize(pid_t pid, rlim_t bytes) {
  rlimit current{};
  ASSERT_EQ(prlimit(pid, RLIMIT_FSIZE, nullptr, &current), 0);
  rlimit next{.rlim_cur = bytes, .rlim_max = current.rlim_max};
  ASSERT_EQ(prlimit(pid, RLIMIT_FSIZE, &next, nullptr), 0)
      << std::strerror(errno);
}

// Waits for /readyz to answer 503 unavailable.
void ExpectNotReadyWhileWritesFail(Client& c) {
  Response ready;
  EXPECT_TRUE(WaitFor([&] {
    ready = c.Get("/readyz");
    return ready.status == 503;
  })) << ready.status
      << " " << ready.body;
  EXPECT_EQ(ready.error_code(), "unavailable") << ready.body;
}

// Regression: /readyz said ready while the disk was full and every write
// answered 503. A file size limit of one byte makes every write of the
// server's SQLite database fail as a full disk would.
TEST_F(Readiness, NotReadyWhileWritesFailAndReadyAgainAfter) {
  StartServer();
  Client c(port());
  ASSERT_EQ(c.Post("/v1/queues/jobs", Json::object()).status, 201);
  ASSERT_EQ(c.Get("/readyz").status, 200);

  LimitFileSize(server_->pid(), 1);
  auto sent =
      c.Post("/v1/queues/jobs/messages", {{"messages", {{{"payload", "x"}}}}});
  ASSERT_EQ(sent.status, 503) << sent.body;
  // Reads still work, which is what /readyz looked at before.
  EXPECT_EQ(c.Get("/v1/queues/jobs").status, 200);
  ExpectNotReadyWhileWritesFail(c);

  LimitFileSize(server_->pid(), RLIM_INFINITY);
  EXPECT_TRUE(WaitFor([&] { return c.Get("/readyz").status == 200; }));
  sent =
      c.Post("/v1/queues/jobs/messages", {{"messages", {{{"payload", "x"}}}}});
  EXPECT_EQ(sent.status, 200) << sent.body;
  EXPECT_EQ(c.Get("/v1/queues/jobs").json["stats"]["ready"], 1);
}

// A PostgreSQL primary demoted by a failover, its sessions left open (as
// some proxies and managed databases do): every write is refused as a
// read-only transaction. The server answers 503 unavailable, which clients
// retry, not 403, and /readyz drains it from a load balancer until the
// database takes writes again.
TEST_F(Readiness, NotReadyWhileThePostgresServerIsReadOnly) {
  SQLQ_REQUIRE_SERVER(test::kPostgresServer);
  test::PrivatePgServer pg;
  ASSERT_TRUE(pg.ok()) << "could not start a private PostgreSQL";
  server_.emplace(dir_, std::vector<std::string>{}, pg.url());
  ASSERT_TRUE(server_->Start()) << server_->log();
  Client c(port());
  ASSERT_EQ(c.Post("/v1/queues/jobs", Json::object()).status, 201);
  ASSERT_EQ(c.Get("/readyz").status, 200);

  // psql, as an operator would.
  auto admin = [&](const std::string& sql) {
    const std::string cmd =
        "psql -q -X '" + pg.url() + "' -c \"" + sql + "\" >/dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  };
  admin("ALTER SYSTEM SET default_transaction_read_only = on");
  admin("SELECT pg_reload_conf()");
  Response sent;
  EXPECT_TRUE(WaitFor([&] {
    sent = c.Post("/v1/queues/jobs/messages",
                  {{"messages", {{{"payload", "x"}}}}});
    return sent.status != 200;
  }));
  EXPECT_EQ(sent.status, 503) << sent.body;
  EXPECT_EQ(sent.error_code(), "unavailable") << sent.body;
  ExpectNotReadyWhileWritesFail(c);

  admin("ALTER SYSTEM SET default_transaction_read_only = off");
  admin("SELECT pg_reload_conf()");
  EXPECT_TRUE(WaitFor([&] { return c.Get("/readyz").status == 200; }));
  sent =
      c.Post("/v1/queues/jobs/messages", {{"messages", {{{"payload", "y"}}}}});
  EXPECT_EQ(sent.status, 200) << sent.body;
}

}  // namespace
}  // namespace sqlq::server_test
