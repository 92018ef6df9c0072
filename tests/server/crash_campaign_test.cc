// A crash campaign against `sqlq serve`, checked from outside as a user's
// workers see it (Jepsen-style): producers and consumers over HTTP, the
// server killed with SIGKILL and started again on its port, over and over,
// and on PostgreSQL and MariaDB the database server killed too. Then every
// message is drained and the history checked:
//   lost        a send answered 200 whose message was never delivered
//   unexpected  a delivery of a message never sent
//   duplicated  a message delivered while an earlier lease on it still ran
//   stale ack   an ack answered 200 though the message had been delivered
//               again (to someone else) before that ack was sent
//   lost ack    a message delivered again after an ack of it answered 200
// Each must be 0; the counts are printed. Consumers now and then hold a
// message past its lease before acking, so that stale acks are tried.
//
// The CI runs a short campaign per engine; CrashCampaign.Slow* (label slow)
// run the long one: ctest --test-dir build/dev -L slow -R CrashCampaign.
// SQLQ_CRASH_CYCLES overrides the number of kills.

#include <time.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include "tests/engines/postgres/private_pg_server.h"
#include "tests/server/server_fixture.h"
#include "tests/support/test_servers.h"

namespace sqlq::server_test {
namespace {

using std::chrono::milliseconds;

constexpr int kLeaseMs = 1500;

// "2026-11-24T11:00:00.123456Z" as microseconds since the epoch; -1 if not.
std::int64_t ParseTime(const std::string& s) {
  std::tm tm{};
  int micros = 0;
  if (std::sscanf(s.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%6dZ", &tm.tm_year,
                  &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec,
                  &micros) != 7) {
    return -1;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  return static_cast<std::int64_t>(timegm(&tm)) * 1000000 + micros;
}

// A MariaDB server of the campaign's own (scripts/mariadb-test-server.sh),
// killed with -9 and started again on its port by `Crash`.
class PrivateMariadb {
 public:
  PrivateMariadb() {
    auto vars = test::ScriptVars(Script() + " start");
    dir_ = vars["SQLQ_TEST_MYSQL_DIR"];
    url_ = vars["SQLQ_TEST_MYSQL_URL"];
  }
  ~PrivateMariadb() {
    if (!dir_.empty()) (void)std::system((Script() + " stop " + dir_).c_str());
  }
  bool ok() const { return !dir_.empty() && !url_.empty(); }
  const std::string& url() const { return url_; }
  bool Crash() {
    return std::system((Script() + " crash " + dir_).c_str()) == 0;
  }

 private:
  static std::string Script() {
    return std::string(SQLQ_SOURCE_DIR) + "/scripts/mariadb-test-server.sh";
  }
  std::string dir_, url_;
};

struct Delivery {
  std::string receipt;
  std::int64_t lease_start = 0;  // µs, the database's clock
  std::int64_t lease_end = 0;
  SteadyClock::time_point asked;  // the claim request was sent
  SteadyClock::time_point got;    // its reply came
};

struct AckAccepted {
  std::string receipt;
  SteadyClock::time_point sent;  // the ack request was sent
  SteadyClock::time_point got;   // its 200 came
};

// What the clients saw, under one lock.
struct History {
  std::mutex mu;
  std::set<std::string> attempted, sent;
  std::map<std::string, std::vector<Delivery>> deliveries;
  std::map<std::string, std::vector<AckAccepted>> acks;
  std::atomic<int> refused_stale{0}, errors{0};
  std::atomic<long> sends{0}, acked{0};  // answered 200, for pacing
};

struct Counts {
  int lost = 0, unexpected = 0, duplicated = 0, stale_ack = 0, lost_ack = 0;
  // Delivered messages whose send was not answered 200 (the server or the
  // database died during its commit): allowed, and counted.
  int unconfirmed = 0;
  std::size_t sent = 0, delivered = 0, acked = 0;
};

Counts Check(History& h) {
  Counts c;
  c.sent = h.sent.size();
  for (const std::string& p : h.sent) {
    if (!h.deliveries.contains(p)) ++c.lost;
  }
  for (auto& [p, ds] : h.deliveries) {
    c.delivered += ds.size();
    if (!h.attempted.contains(p)) ++c.unexpected;
    if (h.attempted.contains(p) && !h.sent.contains(p)) ++c.unconfirmed;
    std::sort(ds.begin(), ds.end(), [](const Delivery& a, const Delivery& b) {
      return a.lease_start < b.lease_start;
    });
    for (std::size_t i = 1; i < ds.size(); ++i) {
      // A lease may begin only once the one before it has ended.
      if (ds[i].lease_start < ds[i - 1].lease_end) ++c.duplicated;
    }
    for (const AckAccepted& a : h.acks[p]) {
      ++c.acked;
      const auto mine = std::find_if(
          ds.begin(), ds.end(),
          [&](const Delivery& d) { return d.receipt == a.receipt; });
      for (const Delivery& d : ds) {
        if (mine != ds.end() && d.lease_start > mine->lease_start &&
            d.got < a.sent) {
          ++c.stale_ack;  // delivered again before this ack was sent
        }
        if (d.asked > a.got) ++c.lost_ack;  // asked for after the ack
      }
    }
  }
  return c;
}

class CrashCampaign : public ServerTest {
 protected:
  // Runs `cycles` kills on `db_url`; `crash_db`, when set, kills the
  // database instead of the server every third cycle.
  Counts Run(const std::string& db_url, int cycles,
             const std::function<bool()>& crash_db = nullptr) {
    if (const char* e = std::getenv("SQLQ_CRASH_CYCLES")) {
      cycles = std::max(1, std::atoi(e));
    }
    server_.emplace(dir_, std::vector<std::string>{}, db_url);
    EXPECT_TRUE(server_->Start()) << server_->log();
    server_->KeepPort();
    const int port = server_->port();
    {
      Client admin(port);
      const Response r = admin.Post(
          "/v1/queues/jobs", {{"lease_ms", kLeaseMs}, {"max_attempts", 1000}});
      EXPECT_EQ(r.status, 201) << r.body;
    }
    History h;
    std::atomic<bool> producing{true}, consuming{true};
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        Client c(port);
        std::mt19937 rng(static_cast<unsigned>(t));
        for (int n = 0; producing; ++n) {
          // Producers stay at most a few hundred messages ahead of the
          // consumers, so that the drain at the end is short.
          if (h.sends - h.acked > 400) {
            std::this_thread::sleep_for(milliseconds(5));
            continue;
          }
          const int batch = 1 + static_cast<int>(rng() % 4);
          Json messages = Json::array();
          std::vector<std::string> payloads;
          for (int i = 0; i < batch; ++i) {
            payloads.push_back("p" + std::to_string(t) + "-" +
                               std::to_string(n) + "-" + std::to_string(i));
            messages.push_back({{"payload", payloads.back()}});
          }
          {
            std::lock_guard<std::mutex> lock(h.mu);
            h.attempted.insert(payloads.begin(), payloads.end());
          }
          const Response r = c.Call("POST", "/v1/queues/jobs/messages",
                                    Json{{"messages", messages}}.dump(),
                                    std::chrono::seconds(5));
          if (r.status == 200) {
            std::lock_guard<std::mutex> lock(h.mu);
            h.sent.insert(payloads.begin(), payloads.end());
            h.sends += batch;
          } else {
            ++h.errors;
            // The server is down or restarting: try again soon.
            std::this_thread::sleep_for(milliseconds(20));
          }
        }
      });
    }
    std::atomic<int> idle_looks{0};
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&, t] {
        Client c(port);
        std::mt19937 rng(static_cast<unsigned>(100 + t));
        while (consuming) {
          const auto asked = SteadyClock::now();
          const Response r = c.Call("POST", "/v1/queues/jobs/claim",
                                    Json{{"max", 20}, {"wait_ms", 300}}.dump(),
                                    std::chrono::seconds(5));
          const auto got = SteadyClock::now();
          if (r.status != 200 || !r.json.contains("messages")) {
            ++h.errors;
            std::this_thread::sleep_for(milliseconds(20));
            continue;
          }
          if (r.json["messages"].empty()) {
            ++idle_looks;
            continue;
          }
          idle_looks = 0;
          std::vector<std::pair<std::string, std::string>> mine;
          {
            std::lock_guard<std::mutex> lock(h.mu);
            for (const Json& m : r.json["messages"]) {
              const std::int64_t end = ParseTime(m["lease_expires_at"]);
              const std::string payload = m["payload"];
              h.deliveries[payload].push_back(
                  {m["receipt"], end - std::int64_t{kLeaseMs} * 1000, end,
                   asked, got});
              mine.emplace_back(payload, m["receipt"]);
            }
          }
          // One claim in ten is held past its lease before the acks: they
          // must be refused if the messages went to someone else meanwhile.
          if (rng() % 10 == 0) {
            std::this_thread::sleep_for(milliseconds(kLeaseMs + 300));
          }
          // One ack call for the claim's messages: one result each.
          Json receipts = Json::array();
          for (const auto& [payload, receipt] : mine)
            receipts.push_back(receipt);
          const auto sent = SteadyClock::now();
          const Response a = c.Call("POST", "/v1/queues/jobs/ack",
                                    Json{{"receipts", receipts}}.dump(),
                                    std::chrono::seconds(5));
          const auto acked_at = SteadyClock::now();
          if (a.status != 200 || !a.json.contains("results") ||
              a.json["results"].size() != mine.size()) {
            ++h.errors;
            continue;
          }
          std::lock_guard<std::mutex> lock(h.mu);
          for (std::size_t i = 0; i < mine.size(); ++i) {
            const Json& res = a.json["results"][i];
            if (res.value("ok", false)) {
              h.acks[mine[i].first].push_back({mine[i].second, sent, acked_at});
              ++h.acked;
            } else if (res["error"].value("code", "") ==
                       "failed_precondition") {
              ++h.refused_stale;
            } else {
              ++h.errors;
            }
          }
        }
      });
    }

    // The faults: a kill every 0.3 to 1.2 s of work.
    std::mt19937 rng(7);
    int server_kills = 0, db_kills = 0;
    for (int cycle = 0; cycle < cycles; ++cycle) {
      std::this_thread::sleep_for(milliseconds(300 + rng() % 900));
      if (crash_db && cycle % 3 == 2) {
        EXPECT_TRUE(crash_db()) << "the database did not come back";
        ++db_kills;
      } else {
        server_->Kill9();
        EXPECT_TRUE(server_->Start()) << server_->log();
        ++server_kills;
      }
    }
    producing = false;
    // Drain: until the queue holds nothing and the consumers have found
    // nothing for a while (leases of killed claims run out meanwhile).
    Client admin(port);
    EXPECT_TRUE(WaitFor(
        [&] {
          const Response s = admin.Get("/v1/queues/jobs");
          if (s.status != 200) return false;
          const Json& st = s.json["stats"];
          return st["ready"] == 0 && st["delayed"] == 0 && st["leased"] == 0 &&
                 idle_looks > 6;
        },
        std::chrono::seconds(60)))
        << admin.Get("/v1/queues/jobs").body;
    consuming = false;
    for (auto& t : threads) t.join();
    const Response dead = admin.Get("/v1/queues/jobs");
    EXPECT_EQ(dead.json["stats"]["dead"], 0) << dead.body;

    Counts c = Check(h);
    std::cout << "crash campaign on " << db_url.substr(0, db_url.find(':'))
              << ": " << server_kills << " server kills, " << db_kills
              << " database kills; " << c.sent << " sends answered 200, "
              << c.delivered << " deliveries (" << c.unconfirmed
              << " of sends not answered 200), " << c.acked
              << " acks answered 200, " << h.refused_stale
              << " stale acks refused, " << h.errors
              << " calls failed while down; lost " << c.lost << ", unexpected "
              << c.unexpected << ", duplicated " << c.duplicated
              << ", stale acks accepted " << c.stale_ack << ", lost acks "
              << c.lost_ack << "\n";
    EXPECT_GT(c.sent, 0u);
    EXPECT_EQ(c.lost, 0);
    EXPECT_EQ(c.unexpected, 0);
    EXPECT_EQ(c.duplicated, 0);
    EXPECT_EQ(c.stale_ack, 0);
    EXPECT_EQ(c.lost_ack, 0);
    return c;
  }
  std::string SqliteUrl() const { return "sqlite:" + (dir_ / "q.db").string(); }
};

TEST_F(CrashCampaign, Sqlite) { Run(SqliteUrl(), 8); }

// Each runs a database server of its own (the scripts that make the shared
// ones), where the shared one runs.
TEST_F(CrashCampaign, Postgres) {
  SQLQ_REQUIRE_SERVER(test::kPostgresServer);
  test::PrivatePgServer pg;
  ASSERT_TRUE(pg.ok());
  Run(pg.url(), 8, [&] { return pg.Restart("immediate"); });
}

TEST_F(CrashCampaign, Mariadb) {
  SQLQ_REQUIRE_SERVER(test::kMariadbServer);
  PrivateMariadb my;
  ASSERT_TRUE(my.ok());
  Run(my.url(), 8, [&] { return my.Crash(); });
}

TEST_F(CrashCampaign, SlowSqlite) { Run(SqliteUrl(), 120); }

TEST_F(CrashCampaign, SlowPostgres) {
  SQLQ_REQUIRE_SERVER(test::kPostgresServer);
  test::PrivatePgServer pg;
  ASSERT_TRUE(pg.ok());
  Run(pg.url(), 60, [&] { return pg.Restart("immediate"); });
}

TEST_F(CrashCampaign, SlowMariadb) {
  SQLQ_REQUIRE_SERVER(test::kMariadbServer);
  PrivateMariadb my;
  ASSERT_TRUE(my.ok());
  Run(my.url(), 60, [&] { return my.Crash(); });
}

// The disk fills up under a running server (SQLite on a 16 MiB tmpfs of the
// test's own): every write is refused with a clear 503 `unavailable` that
// says the disk is full, reads go on, nothing already stored is lost, and
// once space returns the same server serves writes again, without a
// restart.
class DiskFull : public ServerTest {
 protected:
  void TearDown() override {
    if (mounted_) {
      server_.reset();
      (void)std::system(("umount " + small_.string()).c_str());
    }
    ServerTest::TearDown();
  }
  fs::path small_;
  bool mounted_ = false;
};

TEST_F(DiskFull, WritesAreRefusedClearlyAndNothingStoredIsLost) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
  small_ = dir_ / "small";
  fs::create_directories(small_);
  if (std::system(("mount -t tmpfs -o size=16m tmpfs " + small_.string() +
                   " 2>/dev/null")
                      .c_str()) != 0) {
    // A container without CAP_SYS_ADMIN: root, but no mounts.
    GTEST_SKIP() << "cannot mount a tmpfs here (needs CAP_SYS_ADMIN)";
  }
  mounted_ = true;
  // Room to give back once the disk is full: 4 MiB, what SQLite's WAL
  // takes between two checkpoints (docs/engines/sqlite.md).
  {
    std::ofstream ballast(small_ / "ballast", std::ios::binary);
    const std::string mib(1 << 20, 'b');
    for (int i = 0; i < 4; ++i) ballast << mib;
  }
  server_.emplace(dir_, std::vector<std::string>{},
                  "sqlite:" + (small_ / "q.db").string());
  ASSERT_TRUE(server_->Start()) << server_->log();
  Client c(port());
  ASSERT_EQ(c.Post("/v1/queues/jobs", Json::object()).status, 201);

  std::vector<std::string> stored;
  const std::string fill(8000, 'x');
  Response refused;
  for (int n = 0; n < 4000; ++n) {
    const std::string payload = std::to_string(n) + "-" + fill;
    const Response r = c.Post("/v1/queues/jobs/messages",
                              {{"messages", {{{"payload", payload}}}}});
    if (r.status == 200) {
      stored.push_back(payload);
      continue;
    }
    refused = r;
    break;
  }
  ASSERT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(refused.error_code(), "unavailable") << refused.body;
  EXPECT_NE(refused.body.find("disk full"), std::string::npos) << refused.body;
  ASSERT_GT(stored.size(), 100u);
  // Full: more writes are refused the same way, reads answer, and the
  // server says it is not ready.
  for (int i = 0; i < 3; ++i) {
    const Response r = c.Post("/v1/queues/jobs/messages",
                              {{"messages", {{{"payload", fill}}}}});
    EXPECT_EQ(r.status, 503) << r.body;
    EXPECT_EQ(r.error_code(), "unavailable") << r.body;
  }
  const Response stats = c.Get("/v1/queues/jobs");
  ASSERT_EQ(stats.status, 200) << stats.body;
  EXPECT_EQ(stats.json["stats"]["ready"], stored.size());
  EXPECT_TRUE(WaitFor([&] { return c.Get("/readyz").status == 503; }));

  // Space comes back: the same server takes writes again.
  fs::remove(small_ / "ballast");
  EXPECT_TRUE(WaitFor([&] { return c.Get("/readyz").status == 200; }));
  EXPECT_EQ(c.Post("/v1/queues/jobs/messages",
                   {{"messages", {{{"payload", "after"}}}}})
                .status,
            200);
  // Everything answered 200 is there, once, and can be taken and acked.
  std::multiset<std::string> got;
  while (true) {
    const Response r = c.Post("/v1/queues/jobs/claim", {{"max", 100}});
    ASSERT_EQ(r.status, 200) << r.body;
    if (r.json["messages"].empty()) break;
    Json receipts = Json::array();
    for (const Json& m : r.json["messages"]) {
      got.insert(m["payload"].get<std::string>());
      receipts.push_back(m["receipt"]);
    }
    const Response a = c.Post("/v1/queues/jobs/ack", {{"receipts", receipts}});
    ASSERT_EQ(a.status, 200) << a.body;
    ASSERT_EQ(a.json["acked"], receipts.size()) << a.body;
  }
  EXPECT_EQ(got.count("after"), 1u);
  got.erase("after");
  EXPECT_EQ(got, std::multiset<std::string>(stored.begin(), stored.end()));
  EXPECT_FALSE(server_->Exited());
  std::cout << "disk full after " << stored.size()
            << " sends of 8 kB on a 16 MiB tmpfs; all of them kept\n";
}

}  // namespace
}  // namespace sqlq::server_test
