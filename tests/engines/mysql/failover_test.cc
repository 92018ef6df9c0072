// What a caller sees when its MariaDB server goes read-only (a replica, or
// a primary demoted by a failover) or goes dark (docs/deploying.md): an
// error that says to try again, never `permission_denied`, and never a
// call that hangs. Each test runs a server of its own
// (scripts/mariadb-test-server.sh).

#include "tests/support/failover.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "tests/engines/mysql/mariadb_servers.h"
#include "tests/support/test_servers.h"
#include "tests/support/test_util.h"

namespace sqlq::test {
namespace {

using std::chrono::seconds;

// A URL for a user with every right on database `sqlq` but none on the
// server as a whole: read_only applies to it, as to an application's user
// (root may write to a read-only server).
std::string AppUserUrl(const MariadbServer& server, RawConnection& root,
                       const std::string& extra = "") {
  EXPECT_TRUE(
      root.Query("CREATE USER IF NOT EXISTS 'app'@'127.0.0.1' IDENTIFIED "
                 "BY 'app-secret'")
          .has_value())
      << root.error();
  EXPECT_TRUE(root.Query("GRANT ALL ON sqlq.* TO 'app'@'127.0.0.1'"))
      << root.error();
  return "mysql://app:app-secret@127.0.0.1:" + std::to_string(server.port()) +
         "/sqlq" + (extra.empty() ? "" : "?" + extra);
}

TEST(MysqlFailover, AReadOnlyServerIsUnavailableNotPermissionDenied) {
  SQLQ_SKIP_UNLESS_MARIADB();
  MariadbServers servers("start");
  ASSERT_TRUE(servers.ok());
  RawConnection root(servers.primary());
  ASSERT_EQ(root.error(), "");
  ASSERT_OK_AND_ASSIGN(auto store,
                       Store::Open(AppUserUrl(servers.primary(), root)));
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK(q.Send({.payload = "before"}).status());

  ASSERT_TRUE(root.Query("SET GLOBAL read_only = 1")) << root.error();
  ExpectRefusedAsReadOnly(q.Send({.payload = "during"}).status());

  ASSERT_TRUE(root.Query("SET GLOBAL read_only = 0")) << root.error();
  ASSERT_OK(q.Send({.payload = "after"}).status());
  ASSERT_OK_AND_ASSIGN(auto stats, q.Stats());
  EXPECT_EQ(stats.ready, 2);
}

TEST(MysqlFailover, AListOfServersConnectsToTheOneThatTakesWrites) {
  SQLQ_SKIP_UNLESS_MARIADB();
  // A primary and the server a failover makes the primary, each with the
  // application's user and its own copy of the queue.
  MariadbServers first("start"), second("start");
  ASSERT_TRUE(first.ok() && second.ok());
  RawConnection root1(first.primary()), root2(second.primary());
  ASSERT_EQ(root1.error(), "");
  ASSERT_EQ(root2.error(), "");
  for (auto [server, root] : {std::pair{&first, &root1}, {&second, &root2}}) {
    ASSERT_OK_AND_ASSIGN(auto s,
                         Store::Open(AppUserUrl(server->primary(), *root)));
    ASSERT_OK(s->CreateQueue("jobs", {}).status());
  }
  const std::string both =
      "mysql://app:app-secret@127.0.0.1:" +
      std::to_string(first.primary().port()) +
      ",127.0.0.1:" + std::to_string(second.primary().port()) + "/sqlq";
  auto ready = [](RawConnection& root) {
    return root.Value(
        "SELECT COUNT(*) FROM sqlq_messages m JOIN sqlq_queues q "
        "ON q.id = m.queue_id WHERE q.name = 'jobs'");
  };

  // The first is a replica: the list skips it.
  ASSERT_TRUE(root1.Query("SET GLOBAL read_only = 1")) << root1.error();
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(both));
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->Queue("jobs"));
  ASSERT_OK(q.Send({.payload = "to the second"}).status());
  EXPECT_EQ(ready(root2), "1");
  EXPECT_EQ(ready(root1), "0");

  // A failover the other way: the second is demoted, the first promoted.
  // The send that meets the demoted server is tried again (the failover
  // wait of a list) on a fresh connection, which finds the first.
  ASSERT_TRUE(root1.Query("SET GLOBAL read_only = 0")) << root1.error();
  ASSERT_TRUE(root2.Query("SET GLOBAL read_only = 1")) << root2.error();
  ASSERT_OK(q.Send({.payload = "to the first"}).status());
  EXPECT_EQ(ready(root1), "1");
  EXPECT_EQ(ready(root2), "1");

  // Neither takes writes: the error names each and why.
  ASSERT_TRUE(root1.Query("SET GLOBAL read_only = 1")) << root1.error();
  auto none = Store::Open(both + "?failover_wait_ms=0");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kUnavailable);
  EXPECT_NE(none.status().message().find("no server of the list takes writes"),
            std::string::npos)
      << none.status().ToString();
  EXPECT_NE(none.status().message().find("read-only"), std::string::npos)
      << none.status().ToString();

  // A program that opens its store while neither does (the command-line
  // program opens one for every command) waits for the failover: once it
  // has looked at the second (a connection came there), the second is
  // promoted, and the open succeeds.
  auto connections = [&] {
    return std::stoll(
        root2.Value("SELECT VARIABLE_VALUE FROM information_schema."
                    "GLOBAL_STATUS WHERE VARIABLE_NAME = 'CONNECTIONS'"));
  };
  const auto before = connections();
  auto opening =
      std::async(std::launch::async, [&] { return Store::Open(both); });
  ASSERT_TRUE(ChangesFrom(before, connections));
  ASSERT_TRUE(root2.Query("SET GLOBAL read_only = 0")) << root2.error();
  auto opened = opening.get();
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  ASSERT_OK_AND_ASSIGN(WorkQueue q2, (*opened)->Queue("jobs"));
  ASSERT_OK(q2.Send({.payload = "after the wait"}).status());
  EXPECT_EQ(ready(root2), "2");
}

TEST(MysqlFailover, ACallToAServerThatWentDarkEndsWithinTheReadTimeout) {
  SQLQ_SKIP_UNLESS_MARIADB();
  if (!Blackhole::available()) GTEST_SKIP() << "needs root and nft";
  MariadbServers servers("start");
  ASSERT_TRUE(servers.ok());
  // The URL's own timeouts, shorter than the defaults (30 s) to keep the
  // test short; connect_timeout bounds the reconnection after.
  ASSERT_OK_AND_ASSIGN(
      auto store,
      Store::Open(servers.primary().url +
                  "?read_timeout=3&write_timeout=3&connect_timeout=3"));
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK(q.Send({.payload = "a pooled connection"}).status());

  Blackhole dark(servers.primary().port());
  ASSERT_TRUE(dark.ok());
  auto s = EndsWithin(dark, seconds(30),
                      [&] { return q.Send({.payload = "x"}).status(); });
  ASSERT_TRUE(s.has_value()) << "a send to a dark server still hung after 30 s";
  ExpectDarkServerAnswer(*s);
}

TEST(MysqlFailover, TimeoutsInTheUrlAreTakenAndChecked) {
  // Taken: the store then tries to connect (to a port nobody listens on).
  auto taken = Store::Open(
      "mysql://u@127.0.0.1:1/db?read_timeout=5&write_timeout=5&"
      "failover_wait_ms=0&connect_timeout=1");
  EXPECT_EQ(taken.status().code(), Code::kUnavailable)
      << taken.status().ToString();
  for (const std::string bad : {"read_timeout=0", "write_timeout=x",
                                "read_timeout=3601", "failover_wait_ms=-1"}) {
    auto s = Store::Open("mysql://u@127.0.0.1:1/db?" + bad);
    EXPECT_EQ(s.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(s.status().message().find(bad.substr(0, bad.find('='))),
              std::string::npos)
        << s.status().ToString();
  }
}

}  // namespace
}  // namespace sqlq::test
