// sqlq behind pgbouncer (docs/deploying.md, "Poolers"): in session mode
// everything works, waiting claims included; in transaction mode a store
// is refused with an error that names the cause.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <string>

#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "tests/conformance/engine_fixture.h"
#include "tests/support/script_vars.h"

namespace sqlq::test {
namespace {

class Pgbouncer {
 public:
  Pgbouncer(const std::string& server_url, const std::string& mode) {
    auto vars = ScriptVars(Script() + " start '" + server_url + "' " + mode);
    dir_ = vars["SQLQ_TEST_PGBOUNCER_DIR"];
    url_ = vars["SQLQ_TEST_PGBOUNCER_URL"];
  }
  ~Pgbouncer() {
    if (!dir_.empty()) (void)std::system((Script() + " stop " + dir_).c_str());
  }
  Pgbouncer(const Pgbouncer&) = delete;
  Pgbouncer& operator=(const Pgbouncer&) = delete;
  bool ok() const { return !url_.empty(); }
  const std::string& url() const { return url_; }

 private:
  static std::string Script() {
    return std::string(SQLQ_SOURCE_DIR) + "/scripts/pgbouncer-test-server.sh";
  }
  std::string dir_, url_;
};

bool HavePgbouncer() {
  return std::system("command -v pgbouncer >/dev/null 2>&1") == 0;
}

TEST(Pgbouncer, InSessionModeEverythingWorksWaitingClaimsIncluded) {
  SQLQ_SKIP_UNLESS_AVAILABLE(PostgresFactory());
  if (!HavePgbouncer()) GTEST_SKIP() << "no pgbouncer";
  PostgresDatabase db;
  Pgbouncer pooler(db.url(), "session");
  ASSERT_TRUE(pooler.ok());
  ASSERT_OK_AND_ASSIGN(auto consumer, Store::Open(pooler.url()));
  ASSERT_OK_AND_ASSIGN(WorkQueue q, consumer->CreateQueue("jobs", {}));
  // A claim waiting through the pooler is woken by a send of another
  // process (LISTEN/NOTIFY through pgbouncer).
  auto waiting = std::async(std::launch::async, [&] {
    return q.Claim({.max = 1, .wait = std::chrono::seconds(60)});
  });
  while (!consumer->TEST_watching_foreign_writes()) std::this_thread::yield();
  ASSERT_OK_AND_ASSIGN(auto producer, Store::Open(pooler.url()));
  ASSERT_OK_AND_ASSIGN(WorkQueue pq, producer->Queue("jobs"));
  ASSERT_OK_AND_ASSIGN(auto sent, pq.Send({.payload = "through pgbouncer"}));
  auto got = waiting.get();
  ASSERT_OK(got.status());
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].id, sent.id);
  EXPECT_OK(q.Ack((*got)[0].receipt));
}

TEST(Pgbouncer, InTransactionModeAStoreIsRefusedWithAClearError) {
  SQLQ_SKIP_UNLESS_AVAILABLE(PostgresFactory());
  if (!HavePgbouncer()) GTEST_SKIP() << "no pgbouncer";
  PostgresDatabase db;
  Pgbouncer pooler(db.url(), "transaction");
  ASSERT_TRUE(pooler.ok());
  // The first store's statements are prepared on the one server
  // connection pgbouncer has; the second's meet them there.
  auto first = Store::Open(pooler.url());
  auto second = Store::Open(pooler.url());
  const Status& s = first.ok() ? second.status() : first.status();
  ASSERT_FALSE(s.ok()) << "two stores through a transaction-mode pooler";
  EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("transaction mode"), std::string::npos)
      << s.ToString();
}

}  // namespace
}  // namespace sqlq::test
