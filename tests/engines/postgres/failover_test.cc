// What a caller sees when its PostgreSQL server fails over, goes read-only
// or goes dark (docs/deploying.md): an error that says to try again
// (`unavailable`) or that the outcome is unknown, never success for a write
// a failover can lose, never `permission_denied`, and never a call that
// hangs. Each test runs servers of its own (scripts/pg-test-server.sh).

#include "tests/support/failover.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engines/postgres/leader_watch.h"
#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "tests/conformance/engine_fixture.h"
#include "tests/engines/postgres/private_pg_server.h"

namespace sqlq::test {
namespace {

using std::chrono::seconds;
using SteadyClock = std::chrono::steady_clock;

// A superuser connection to one server, to change it behind sqlq's back.
class Admin {
 public:
  explicit Admin(const std::string& url) : conn_(PQconnectdb(url.c_str())) {}
  ~Admin() { PQfinish(conn_); }
  bool ok() const { return PQstatus(conn_) == CONNECTION_OK; }
  // The first column of the first row, or "" (and a test failure on error).
  std::string Query(const std::string& sql) {
    PGresult* r = PQexec(conn_, sql.c_str());
    std::string out;
    const auto st = PQresultStatus(r);
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK) {
      ADD_FAILURE() << sql << ": " << PQresultErrorMessage(r);
    } else if (st == PGRES_TUPLES_OK && PQntuples(r) > 0) {
      out = PQgetvalue(r, 0, 0);
    }
    PQclear(r);
    return out;
  }
  // Polls `sql` until it returns `want` or 30 s pass.
  bool WaitFor(const std::string& sql, const std::string& want) {
    const auto deadline = SteadyClock::now() + seconds(30);
    while (SteadyClock::now() < deadline) {
      if (Query(sql) == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

 private:
  PGconn* conn_;
};

// The server made read-only as a demoted primary is (its existing sessions
// included), or writable again. The admin's session must be older than the
// sessions that are to see the change when it returns: the postmaster
// passes the reload on to its sessions newest first, so once the admin's
// has it, every newer one has been signalled (and takes the new setting
// before its next statement); an admin session opened after them could
// see it while they were still to be signalled.
void SetReadOnly(Admin& admin, bool on) {
  admin.Query(std::string("ALTER SYSTEM SET default_transaction_read_only = ") +
              (on ? "on" : "off"));
  admin.Query("SELECT pg_reload_conf()");
  ASSERT_TRUE(
      admin.WaitFor("SELECT current_setting('default_transaction_read_only') "
                    "FROM (SELECT pg_sleep(0)) s",
                    on ? "on" : "off"));
}

// Cancels, once one waits, a commit's wait for the standby, as an
// operator's pg_cancel_backend would (statement_timeout does not: it is
// off while a COMMIT waits for the standby): PostgreSQL
// then answers the COMMIT with success and a warning, though the standby
// never got the transaction. False when none waited within 30 s.
bool CancelTheWaitForTheStandby(Admin& admin) {
  return admin.WaitFor(
      "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity "
      "WHERE wait_event = 'SyncRep'",
      "1");
}

// A synchronous standby that never answers: from the return on, every
// commit waits for it. The admin's session seeing the setting is not
// enough: a commit waits only once the checkpointer has applied the
// setting too (it sets the flag in shared memory that commits read), which
// under load comes later. So a probe commits in a session of its own, again
// until one is seen waiting (and cancelled): each probe that ends without
// waiting shows the setting not yet in force.
void EveryCommitWaitsForAStandby(Admin& admin, const std::string& url) {
  admin.Query("ALTER SYSTEM SET synchronous_standby_names = 'nobody'");
  admin.Query("SELECT pg_reload_conf()");
  ASSERT_TRUE(admin.WaitFor("SHOW synchronous_standby_names", "nobody"));
  Admin other(url);
  ASSERT_TRUE(other.ok());
  const auto deadline = SteadyClock::now() + seconds(30);
  // Tables, not temporary ones: a temporary table is dropped when its
  // session ends, by a commit that would wait for the standby too.
  static int probes = 0;
  while (SteadyClock::now() < deadline) {
    const std::string table = "probe_" + std::to_string(++probes);
    auto probe = std::async(std::launch::async, [&] {
      other.Query("CREATE TABLE " + table + " (x int)");
    });
    while (probe.wait_for(std::chrono::milliseconds(20)) !=
           std::future_status::ready) {
      if (admin.Query("SELECT count(pg_cancel_backend(pid)) "
                      "FROM pg_stat_activity WHERE wait_event = 'SyncRep'") ==
          "1") {
        probe.get();
        return;
      }
    }
    probe.get();
  }
  FAIL() << "no commit waited for the standby within 30 s";
}

// What `call` returned, or nullopt when it still waited after 60 s (only
// the test's safety net: past it the wait for the standby is cancelled, so
// that the test fails, not hangs).
// The server's URL with store parameters `params` ("a=1&b=2") added.
std::string WithParams(const PrivatePgServer& server,
                       const std::string& params) {
  const char* sep = server.url().find('?') == std::string::npos ? "?" : "&";
  return server.url() + sep + params;
}

template <typename Call>
std::optional<Status> Ends(Admin& admin, Call call) {
  auto running = std::async(std::launch::async, call);
  if (running.wait_for(std::chrono::seconds(60)) == std::future_status::ready) {
    return running.get();
  }
  (void)CancelTheWaitForTheStandby(admin);
  return std::nullopt;
}

std::int64_t ReadyCount(const std::string& url, const std::string& queue) {
  auto store = Store::Open(url);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return -1;
  auto q = (*store)->Queue(queue);
  EXPECT_TRUE(q.ok()) << q.status().ToString();
  if (!q.ok()) return -1;
  auto stats = q->Stats();
  EXPECT_TRUE(stats.ok()) << stats.status().ToString();
  return stats.ok() ? stats->ready : -1;
}

// Two servers standing for a primary and the standby a failover promotes:
// one URL lists both, as users write it for a cluster. The second has the
// first's password and its own copy of the queue.
class TwoServers : public ::testing::Test {
 protected:
  void SetUp() override {
    SQLQ_SKIP_UNLESS_AVAILABLE(PostgresFactory());
    first_ = std::make_unique<PrivatePgServer>();
    second_ = std::make_unique<PrivatePgServer>();
    ASSERT_TRUE(first_->ok() && second_->ok()) << "private servers";
    Admin second(second_->url());
    ASSERT_TRUE(second.ok());
    second.Query("ALTER ROLE sqlq_test PASSWORD '" + first_->password() + "'");
    for (const std::string& url : {first_->url(), SecondUrl()}) {
      ASSERT_OK_AND_ASSIGN(auto store, Store::Open(url));
      ASSERT_OK(store->CreateQueue("jobs", {}).status());
    }
  }
  // The second alone, with its new password.
  std::string SecondUrl() const { return Url(second_->port()); }
  std::string Url(unsigned port) const {
    return "postgresql://sqlq_test:" + first_->password() +
           "@127.0.0.1:" + std::to_string(port) + "/postgres";
  }
  // Both servers, in order; `extra`: more URL parameters.
  std::string BothUrl(const std::string& extra = "") const {
    return "postgresql://sqlq_test:" + first_->password() +
           "@127.0.0.1:" + std::to_string(first_->port()) +
           ",127.0.0.1:" + std::to_string(second_->port()) + "/postgres" +
           (extra.empty() ? "" : "?" + extra);
  }

  std::unique_ptr<PrivatePgServer> first_, second_;
};

TEST_F(TwoServers, ADemotedPrimaryIsUnavailableAndTheNextCallFindsTheNewOne) {
  Admin first(first_->url());  // before the store's sessions (SetReadOnly)
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(BothUrl("failover_wait_ms=0")));
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->Queue("jobs"));
  // Several pooled connections to the first server.
  for (int i = 0; i < 8; ++i) ASSERT_OK(q.Send({.payload = "before"}).status());
  ASSERT_EQ(ReadyCount(first_->url(), "jobs"), 8);

  SetReadOnly(first, true);
  ExpectRefusedAsReadOnly(q.Send({.payload = "during"}).status());

  // The pool kept none of its connections to the read-only server: the
  // next call connects afresh, and only to a server that takes writes.
  ASSERT_OK(q.Send({.payload = "after"}).status());
  EXPECT_EQ(ReadyCount(SecondUrl(), "jobs"), 1);
  EXPECT_EQ(ReadyCount(first_->url(), "jobs"), 8);
}

TEST_F(TwoServers, ACallDuringAFailoverWaitsForTheNewPrimaryInsteadOfFailing) {
  // The default failover wait of a URL with several hosts.
  Admin first(first_->url());  // before the store's sessions (SetReadOnly)
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(BothUrl()));
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->Queue("jobs"));
  ASSERT_OK(q.Send({.payload = "before"}).status());
  SetReadOnly(first, true);
  ASSERT_OK_AND_ASSIGN(auto sent, q.Send({.payload = "during"}));
  EXPECT_EQ(ReadyCount(SecondUrl(), "jobs"), 1);
  ASSERT_OK_AND_ASSIGN(auto claimed, q.Claim({.max = 10}));
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0].id, sent.id);
}

// An old primary that still takes writes, whose commits wait for a
// standby that now follows the new leader: what a node looks like whose
// cluster manager froze before it could demote it (Patroni stopped). The
// first server plays it; the second is promoted onto the next timeline, as
// a failover does. A call waiting on the old primary ends once the new one
// is seen, and the calls after it go to the new one, with no commit timeout
// to end the wait (commit_timeout_ms=0).
TEST_F(TwoServers, ACallWaitingOnAnOldPrimaryEndsOnceANewOneLeads) {
  ASSERT_OK_AND_ASSIGN(
      auto store,
      Store::Open(BothUrl("commit_timeout_ms=0&leader_check_ms=200")));
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->Queue("jobs"));
  // Both on timeline 1: neither leads on the watch's account, and libpq
  // takes the first of the list.
  ASSERT_OK(q.Send({.payload = "before"}).status());
  ASSERT_EQ(ReadyCount(first_->url(), "jobs"), 1);

  Admin first(first_->url());
  ASSERT_NO_FATAL_FAILURE(EveryCommitWaitsForAStandby(first, first_->url()));
  auto waiting = std::async(std::launch::async, [&] {
    return q.Send({.payload = "during"}).status();
  });
  // Should an assertion below end the test early, the send's commit would
  // still wait for the standby, and `waiting`'s destruction with it: the
  // wait is cancelled first (for up to 30 s), so that the test fails
  // rather than hangs.
  struct EndTheWait {
    Admin& admin;
    std::future<Status>& send;
    ~EndTheWait() {
      const auto deadline = SteadyClock::now() + seconds(30);
      while (send.valid() &&
             send.wait_for(std::chrono::milliseconds(100)) !=
                 std::future_status::ready &&
             SteadyClock::now() < deadline) {
        admin.Query(
            "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity "
            "WHERE wait_event = 'SyncRep'");
      }
    }
  } end_the_wait{first, waiting};
  ASSERT_TRUE(first.WaitFor(
      "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'",
      "1"))
      << "waiting for the standby: "
      << first.Query(
             "SELECT string_agg(query, ' | ') FROM pg_stat_activity "
             "WHERE wait_event = 'SyncRep'");
  ASSERT_TRUE(second_->NewTimeline());
  const auto promoted = SteadyClock::now();
  // 60 s is only the test's safety net: without the watch the send waits
  // for ever.
  ASSERT_EQ(waiting.wait_for(seconds(60)), std::future_status::ready)
      << "the send still waits on the old primary";
  const Status during = waiting.get();
  const auto ended = SteadyClock::now() - promoted;
  // Its commit reached the old primary, which may still apply it: the
  // outcome is unknown, unless the retry after the failover succeeded.
  EXPECT_TRUE(during.ok() || during.code() == Code::kOutcomeUnknown ||
              during.code() == Code::kUnavailable)
      << during.ToString();
  EXPECT_LT(ended, seconds(10));
  // The next call goes to the new leader. Were it to go to the old primary
  // (a pooled connection to it reused), its commit would wait for the
  // standby for ever (no commit timeout): it runs like the first, so that
  // the test fails then rather than hangs, and end_the_wait ends it.
  waiting = std::async(std::launch::async,
                       [&] { return q.Send({.payload = "after"}).status(); });
  ASSERT_EQ(waiting.wait_for(seconds(60)), std::future_status::ready)
      << "the send after the failover waits on the old primary";
  ASSERT_OK(waiting.get());
  EXPECT_GE(ReadyCount(SecondUrl(), "jobs"), 1);
}

// Two servers that both take writes on their first timeline, the first
// slow to let new sessions in (a loaded machine, a slow login): for a
// while the watch hears only the second. That is no failover: the calls
// stay on the first, libpq's choice, rather than the watch handing the
// lead to the second and cutting the connections to the first.
TEST_F(TwoServers, AServerSlowToAnswerTheWatchKeepsItsCalls) {
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(BothUrl("leader_check_ms=100")));
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->Queue("jobs"));
  // The store's connection to the first is open. From now on a new session
  // there waits at its login (for the table of roles, locked here), and the
  // watch's own session, if it had one yet, is ended.
  Admin first(first_->url());
  first.Query("BEGIN");
  first.Query("LOCK TABLE pg_authid IN ACCESS EXCLUSIVE MODE");
  const std::string watch_sessions =
      std::string("FROM pg_stat_activity WHERE application_name = '") +
      engines::postgres::kLeaderWatchName + "'";
  first.Query("SELECT count(pg_terminate_backend(pid)) " + watch_sessions);
  // The watch's session on the second has begun a look (maybe before the
  // lock), then another (after it: the first is silent in it), then the
  // next: that look's decision is taken.
  Admin second(SecondUrl());
  std::string look;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(ChangesFrom(look, [&] {
      return look =
                 second.Query("SELECT coalesce(max(query_start)::text, '') " +
                              watch_sessions);
    }));
  }
  ASSERT_OK(q.Send({.payload = "after"}).status());
  first.Query("COMMIT");
  EXPECT_EQ(ReadyCount(first_->url(), "jobs"), 1);
  EXPECT_EQ(ReadyCount(SecondUrl(), "jobs"), 0);
}

// After a failover the store keeps no session on the old primary, which
// may still take writes: not its pool's, not its LISTEN connection, and not
// the one it folds its counters on (a fold's commit there would wait for
// the standby for ever, and closing the store with it).
TEST_F(TwoServers, AfterAFailoverTheStoreKeepsNoSessionOnTheOldPrimary) {
  ASSERT_OK_AND_ASSIGN(auto store,
                       Store::Open(BothUrl("leader_check_ms=100&fold_rows=1")));
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->Queue("jobs"));
  ASSERT_OK(q.Send({.payload = "before"}).status());
  Admin first(first_->url());
  // The send's counters were folded, on a connection of the store's own.
  const std::string others = " AND pid <> pg_backend_pid()";
  ASSERT_TRUE(first.WaitFor(
      "SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE "
      "'%DELETE FROM sqlq_counter_deltas RETURNING%'" +
          others,
      "t"));
  ASSERT_TRUE(second_->NewTimeline());
  EXPECT_TRUE(first.WaitFor(
      "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'sqlq'" +
          others,
      "0"))
      << first.Query(
             "SELECT string_agg(left(query, 60), ' | ') FROM pg_stat_activity "
             "WHERE application_name = 'sqlq'" +
             others);
  // The calls go on, on the new one.
  ASSERT_OK(q.Send({.payload = "after"}).status());
  EXPECT_EQ(ReadyCount(SecondUrl(), "jobs"), 1);
}

TEST_F(TwoServers, OpeningAStoreDuringAFailoverWaitsForTheNewPrimary) {
  // A program that opens its store while no server takes writes, as the
  // command-line program does for every command.
  Admin first(first_->url()), second(SecondUrl());
  SetReadOnly(first, true);
  SetReadOnly(second, true);
  auto no_wait = Store::Open(BothUrl("failover_wait_ms=0"));
  ASSERT_FALSE(no_wait.ok());
  ExpectRefusedAsReadOnly(no_wait.status());

  const std::string sessions =
      "SELECT sessions FROM pg_stat_database WHERE datname = 'postgres'";
  const auto before = std::stoll(second.Query(sessions));
  auto opening =
      std::async(std::launch::async, [&] { return Store::Open(BothUrl()); });
  // The open has found the second read-only (a session of its own came
  // and went there); now it is promoted.
  ASSERT_TRUE(
      ChangesFrom(before, [&] { return std::stoll(second.Query(sessions)); }));
  SetReadOnly(second, false);
  auto store = opening.get();
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_OK_AND_ASSIGN(WorkQueue q, (*store)->Queue("jobs"));
  ASSERT_OK(q.Send({.payload = "after"}).status());
  EXPECT_EQ(ReadyCount(SecondUrl(), "jobs"), 1);
}

TEST(PostgresFailover, ACancelledWaitForTheSynchronousStandbyIsNotSuccess) {
  SQLQ_SKIP_UNLESS_AVAILABLE(PostgresFactory());
  PrivatePgServer server;
  ASSERT_TRUE(server.ok());
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(server.url()));
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK(q.Send({.payload = "claimed later"}).status());
  Admin admin(server.url());
  ASSERT_NO_FATAL_FAILURE(EveryCommitWaitsForAStandby(admin, server.url()));
  auto cancel_the_wait = [&] { return CancelTheWaitForTheStandby(admin); };
  auto send = std::async(std::launch::async,
                         [&] { return q.Send({.payload = "x"}).status(); });
  ASSERT_TRUE(cancel_the_wait());
  Status sent = send.get();
  EXPECT_EQ(sent.code(), Code::kOutcomeUnknown) << sent.ToString();
  EXPECT_NE(sent.message().find("synchronous standby"), std::string::npos)
      << sent.ToString();

  // A claim's commit (it writes the lease) the same.
  auto claim = std::async(std::launch::async,
                          [&] { return q.Claim({.max = 1}).status(); });
  ASSERT_TRUE(cancel_the_wait());
  Status claimed = claim.get();
  EXPECT_EQ(claimed.code(), Code::kOutcomeUnknown) << claimed.ToString();
}

// A primary fenced off without being stopped (its Patroni frozen past the
// leader's TTL) keeps taking connections, and every commit waits for a
// standby that now follows another leader; so does a commit while the only
// synchronous standby is rebuilt. commit_timeout_ms bounds that wait: the
// call ends by itself as outcome_unknown, and the next call is served.
TEST(PostgresFailover, ACommitThatWaitsForAStandbyEndsAtTheCommitTimeout) {
  SQLQ_SKIP_UNLESS_AVAILABLE(PostgresFactory());
  PrivatePgServer server;
  ASSERT_TRUE(server.ok());
  auto with = [&](const std::string& param) {
    return WithParams(server, param);
  };
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(with("commit_timeout_ms=300")));
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  Admin admin(server.url());
  ASSERT_NO_FATAL_FAILURE(EveryCommitWaitsForAStandby(admin, server.url()));
  // Nobody cancels anything here.
  auto ends = [&](auto call) { return Ends(admin, call); };
  // A send (its COMMIT goes in one round trip with its statements) and a
  // queue's creation (COMMIT on its own).
  auto sent = ends([&] { return q.Send({.payload = "x"}).status(); });
  ASSERT_TRUE(sent.has_value()) << "the send still waited for the standby";
  EXPECT_EQ(sent->code(), Code::kOutcomeUnknown) << sent->ToString();
  EXPECT_NE(sent->message().find("synchronous standby"), std::string::npos)
      << sent->ToString();
  auto created = ends([&] { return store->CreateQueue("more", {}).status(); });
  ASSERT_TRUE(created.has_value()) << "the creation still waited";
  EXPECT_EQ(created->code(), Code::kOutcomeUnknown) << created->ToString();
  // Both committed on this server, which serves the next call.
  admin.Query("ALTER SYSTEM RESET synchronous_standby_names");
  admin.Query("SELECT pg_reload_conf()");
  ASSERT_TRUE(admin.WaitFor("SHOW synchronous_standby_names", ""));
  ASSERT_OK(q.Send({.payload = "y"}).status());
  EXPECT_EQ(ReadyCount(server.url(), "jobs"), 2);
  EXPECT_OK(store->Queue("more").status());

  for (const char* bad : {"commit_timeout_ms=-1", "commit_timeout_ms=86400001",
                          "commit_timeout_ms=soon"}) {
    auto refused = Store::Open(with(bad));
    EXPECT_EQ(refused.status().code(), Code::kInvalidArgument) << bad;
  }
}

// ack_flush=off: a transaction of acks alone commits with
// synchronous_commit = off, so it waits neither for the WAL flush nor for a
// synchronous standby; sends and claims still wait for both. Seen here with
// a standby that never answers: the acks return at once, a send and a
// claim end at the commit timeout, and the same ack through a store without
// the parameter does too.
TEST(PostgresFailover, AcksWithAckFlushOffDoNotWaitForTheStandby) {
  SQLQ_SKIP_UNLESS_AVAILABLE(PostgresFactory());
  PrivatePgServer server;
  ASSERT_TRUE(server.ok());
  ASSERT_OK_AND_ASSIGN(
      auto store,
      Store::Open(WithParams(server, "commit_timeout_ms=300&ack_flush=off")));
  ASSERT_OK_AND_ASSIGN(
      auto flushing, Store::Open(WithParams(server, "commit_timeout_ms=300")));
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(WorkQueue same, flushing->Queue("jobs"));
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK(q.Send({.payload = "m" + std::to_string(i)}).status());
  }
  ASSERT_OK_AND_ASSIGN(auto claimed, q.Claim({.max = 4}));
  ASSERT_EQ(claimed.size(), 4u);
  Admin admin(server.url());
  ASSERT_NO_FATAL_FAILURE(EveryCommitWaitsForAStandby(admin, server.url()));

  // An ack, and acks of many, return at once.
  auto acked = Ends(admin, [&] { return q.Ack(claimed[0].receipt); });
  ASSERT_TRUE(acked.has_value()) << "the ack waited for the standby";
  EXPECT_OK(*acked);
  auto batch = Ends(admin, [&] {
    auto r = q.AckBatch(std::vector<std::string>{claimed[1].receipt});
    return r.ok() ? (*r)[0] : r.status();
  });
  ASSERT_TRUE(batch.has_value()) << "the acks of many waited";
  EXPECT_OK(*batch);
  // A send and a claim wait for the standby until the commit timeout.
  auto sent = Ends(admin, [&] { return q.Send({.payload = "x"}).status(); });
  ASSERT_TRUE(sent.has_value()) << "the send still waited for the standby";
  EXPECT_EQ(sent->code(), Code::kOutcomeUnknown) << sent->ToString();
  auto next = Ends(admin, [&] { return q.Claim({.max = 1}).status(); });
  ASSERT_TRUE(next.has_value()) << "the claim still waited for the standby";
  EXPECT_EQ(next->code(), Code::kOutcomeUnknown) << next->ToString();
  // Without the parameter, an ack waits like any commit.
  auto waited = Ends(admin, [&] { return same.Ack(claimed[2].receipt); });
  ASSERT_TRUE(waited.has_value()) << "the ack still waited for the standby";
  EXPECT_EQ(waited->code(), Code::kOutcomeUnknown) << waited->ToString();

  admin.Query("ALTER SYSTEM RESET synchronous_standby_names");
  admin.Query("SELECT pg_reload_conf()");
  ASSERT_TRUE(admin.WaitFor("SHOW synchronous_standby_names", ""));
  // Every commit above took effect on this server: three acked, the send
  // stored, the claim's message leased, claimed[3] still leased.
  ASSERT_OK_AND_ASSIGN(QueueStats stats, q.Stats());
  EXPECT_EQ(stats.acks, 3);
  EXPECT_EQ(stats.sends, 6);
  EXPECT_EQ(stats.ready + stats.leased, 3);
  EXPECT_OK(q.Ack(claimed[3].receipt));
}

// The same with the postmaster stopped too (SIGSTOP, as a frozen host
// would be): the cancel request's connection is taken but never answered,
// and the call still ends, 5 s after the commit timeout.
TEST(PostgresFailover, ACommitEndsWhenEvenTheCancelGoesUnanswered) {
  SQLQ_SKIP_UNLESS_AVAILABLE(PostgresFactory());
  PrivatePgServer server;
  ASSERT_TRUE(server.ok());
  ASSERT_OK_AND_ASSIGN(
      auto store, Store::Open(WithParams(server, "commit_timeout_ms=300")));
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  Admin admin(server.url());
  ASSERT_NO_FATAL_FAILURE(EveryCommitWaitsForAStandby(admin, server.url()));
  std::ifstream pidfile(admin.Query("SHOW data_directory") + "/postmaster.pid");
  pid_t postmaster = 0;
  ASSERT_TRUE(pidfile >> postmaster) << "postmaster.pid";
  ASSERT_EQ(::kill(postmaster, SIGSTOP), 0);
  auto send = std::async(std::launch::async,
                         [&] { return q.Send({.payload = "x"}).status(); });
  // 60 s is only the test's safety net.
  const bool ended =
      send.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  ASSERT_EQ(::kill(postmaster, SIGCONT), 0);
  if (!ended) (void)CancelTheWaitForTheStandby(admin);
  Status sent = send.get();
  ASSERT_TRUE(ended) << "the send still waited with the postmaster stopped";
  EXPECT_EQ(sent.code(), Code::kOutcomeUnknown) << sent.ToString();
  EXPECT_NE(sent.message().find("commit_timeout_ms"), std::string::npos)
      << sent.ToString();
}

TEST(PostgresFailover, ADuplicateSendWaitsForTheStandbyLikeTheFirst) {
  SQLQ_SKIP_UNLESS_AVAILABLE(PostgresFactory());
  PrivatePgServer server;
  ASSERT_TRUE(server.ok());
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(server.url()));
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  Admin admin(server.url());
  ASSERT_NO_FATAL_FAILURE(EveryCommitWaitsForAStandby(admin, server.url()));
  auto cancel_the_wait = [&] { return CancelTheWaitForTheStandby(admin); };
  // The first send commits here but not on the standby: outcome_unknown.
  auto first = std::async(std::launch::async, [&] {
    return q.Send({.payload = "x", .dedup_key = "k"}).status();
  });
  ASSERT_TRUE(cancel_the_wait());
  EXPECT_EQ(first.get().code(), Code::kOutcomeUnknown);
  // Sent again, as the caller should: the key is held by the first, which
  // a failover may still lose, so the answer must wait for the standby
  // too, not come back at once as a success. (It does: the send's INSERT
  // ... ON CONFLICT DO NOTHING takes a transaction id even when it inserts
  // nothing, so its commit waits like any write. This guards that.)
  auto again = std::async(std::launch::async, [&] {
    return q.Send({.payload = "x", .dedup_key = "k"}).status();
  });
  ASSERT_TRUE(cancel_the_wait()) << "the duplicate send did not wait";
  EXPECT_EQ(again.get().code(), Code::kOutcomeUnknown);
}

TEST(PostgresFailover, ACallToAServerThatWentDarkEndsWithinTheTcpTimeouts) {
  SQLQ_SKIP_UNLESS_AVAILABLE(PostgresFactory());
  if (!Blackhole::available()) GTEST_SKIP() << "needs root and nft";
  PrivatePgServer server;
  ASSERT_TRUE(server.ok());
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(server.url()));
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK(q.Send({.payload = "a pooled connection"}).status());

  Blackhole dark(server.port());
  ASSERT_TRUE(dark.ok());
  // The defaults: tcp_user_timeout 10 s for the request, then a fresh
  // connection's connect_timeout of 10 s. Without them the kernel retries
  // for about a quarter of an hour.
  auto s = EndsWithin(dark, seconds(40),
                      [&] { return q.Send({.payload = "x"}).status(); });
  ASSERT_TRUE(s.has_value()) << "a send to a dark server still hung after 40 s";
  ExpectDarkServerAnswer(*s);
}

}  // namespace
}  // namespace sqlq::test
