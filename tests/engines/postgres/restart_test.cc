// A PostgreSQL server restarted under load: callers see retryable errors (or
// outcome_unknown for commits cut off), never anything else; the store
// reconnects by itself; no acknowledged send is lost. Runs its own server
// (scripts/pg-test-server.sh), so as not to disturb the shared one.

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "tests/conformance/engine_fixture.h"
#include "tests/engines/postgres/private_pg_server.h"

namespace sqlq::test {
namespace {

using std::chrono::seconds;
using SteadyClock = std::chrono::steady_clock;

TEST(PostgresRestart, SendsSurviveAServerRestartWithRetryableErrorsOnly) {
  SQLQ_SKIP_UNLESS_AVAILABLE(PostgresFactory());
  PrivatePgServer server;
  ASSERT_TRUE(server.ok()) << "could not start a private server";
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(server.url()));
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));

  std::mutex mu;
  std::set<std::int64_t> acknowledged;  // ids of sends that returned OK
  std::vector<Status> errors;
  std::atomic<int> ok_sends{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> senders;
  for (int t = 0; t < 4; ++t) {
    senders.emplace_back([&, t] {
      for (int i = 0; !stop; ++i) {
        auto r =
            q.Send({.payload = std::to_string(t) + ":" + std::to_string(i)});
        std::lock_guard<std::mutex> lock(mu);
        if (r.ok()) {
          acknowledged.insert(r->id);
          ++ok_sends;
        } else {
          errors.push_back(r.status());
          // A caller would back off before trying again.
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
    });
  }
  auto wait_for_sends = [&](int n) {
    const int target = ok_sends + n;
    const auto deadline = SteadyClock::now() + seconds(30);
    while (ok_sends < target && SteadyClock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return ok_sends >= target;
  };
  EXPECT_TRUE(wait_for_sends(50));
  EXPECT_TRUE(server.Restart());
  EXPECT_TRUE(wait_for_sends(50)) << "sends did not resume after the restart";
  stop = true;
  for (auto& t : senders) t.join();

  std::string codes;
  for (const Status& s : errors) codes += std::string(CodeName(s.code())) + " ";
  RecordProperty("send_errors", codes);
  for (const Status& s : errors) {
    EXPECT_TRUE(s.retryable() || s.code() == Code::kOutcomeUnknown)
        << s.ToString();
  }
  // Every acknowledged send is stored (a send whose outcome was unknown may
  // be stored too).
  std::set<std::int64_t> stored;
  for (;;) {
    ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 1000}));
    if (got.empty()) break;
    for (auto& m : got) stored.insert(m.id);
  }
  for (std::int64_t id : acknowledged) {
    EXPECT_TRUE(stored.contains(id)) << "acknowledged send " << id << " lost";
  }
  store.reset();
}

// Senders and consumers at once while the server restarts, in both
// shutdown modes. A consumer acks what it claims; leases (60 s) outlast the
// test, so a message claimed twice would be one handed out twice within a
// live lease. Afterwards every send that returned OK was delivered or is
// still in the queue.
class PostgresFault : public ::testing::TestWithParam<std::string> {};

TEST_P(PostgresFault,
       RestartUnderMixedLoadLosesNothingAndDeliversNothingTwice) {
  SQLQ_SKIP_UNLESS_AVAILABLE(PostgresFactory());
  PrivatePgServer server;
  ASSERT_TRUE(server.ok()) << "could not start a private server";
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(server.url()));
  ASSERT_OK_AND_ASSIGN(
      WorkQueue q,
      store->CreateQueue("jobs", {.lease = std::chrono::minutes(1)}));

  std::mutex mu;
  std::set<std::int64_t> acknowledged;  // sends that returned OK
  std::set<std::int64_t> delivered;     // ids handed to a consumer
  std::vector<std::int64_t> twice;      // ids handed out again
  std::vector<Status> errors;
  std::atomic<int> ok_sends{0}, claimed{0};
  std::atomic<bool> stop{false};
  auto failed = [&](const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    errors.push_back(s);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; !stop; ++i) {
        std::vector<Message> batch(
            1 + i % 10,
            Message{.payload = std::to_string(t) + ":" + std::to_string(i)});
        auto r = q.SendBatch(batch);
        if (!r.ok()) {
          failed(r.status());
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          continue;
        }
        std::lock_guard<std::mutex> lock(mu);
        for (const SendResult& sr : *r) acknowledged.insert(sr.id);
        ok_sends += static_cast<int>(r->size());
      }
    });
  }
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      while (!stop) {
        auto got = q.Claim({.max = 20, .wait = std::chrono::milliseconds(100)});
        if (!got.ok()) {
          failed(got.status());
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          continue;
        }
        std::vector<std::string> receipts;
        {
          std::lock_guard<std::mutex> lock(mu);
          for (const ClaimedMessage& m : *got) {
            if (!delivered.insert(m.id).second) twice.push_back(m.id);
            receipts.push_back(m.receipt);
          }
        }
        claimed += static_cast<int>(got->size());
        if (receipts.empty()) continue;
        // A failed ack leaves the message leased: it was delivered all the
        // same, and must not come back within the lease.
        auto acked = q.AckBatch(receipts);
        if (!acked.ok()) failed(acked.status());
      }
    });
  }
  auto wait_for = [&](std::atomic<int>& counter, int n) {
    const int target = counter + n;
    const auto deadline = SteadyClock::now() + seconds(30);
    while (counter < target && SteadyClock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return counter >= target;
  };
  EXPECT_TRUE(wait_for(ok_sends, 200));
  EXPECT_TRUE(wait_for(claimed, 100));
  EXPECT_TRUE(server.Restart(GetParam()));
  EXPECT_TRUE(wait_for(ok_sends, 200)) << "sends did not resume";
  EXPECT_TRUE(wait_for(claimed, 100)) << "claims did not resume";
  stop = true;
  for (auto& t : threads) t.join();

  std::string codes;
  for (const Status& s : errors) codes += std::string(CodeName(s.code())) + " ";
  RecordProperty("errors", codes);
  for (const Status& s : errors) {
    EXPECT_TRUE(s.retryable() || s.code() == Code::kOutcomeUnknown)
        << s.ToString();
  }
  EXPECT_TRUE(twice.empty()) << twice.size()
                             << " messages were handed out twice within a "
                                "live lease, the first "
                             << (twice.empty() ? 0 : twice.front());
  std::set<std::int64_t> left;
  for (;;) {
    ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 1000}));
    if (got.empty()) break;
    for (auto& m : got) {
      EXPECT_FALSE(delivered.contains(m.id))
          << "message " << m.id << " came back within its lease";
      left.insert(m.id);
    }
  }
  // A claim whose commit outcome was unknown (the server killed after it
  // committed but before the answer came back) leased its messages without
  // handing them to anyone: they are still stored, under a lease.
  PGconn* pg = PQconnectdb(server.url().c_str());
  ASSERT_EQ(PQstatus(pg), CONNECTION_OK) << PQerrorMessage(pg);
  PGresult* r = PQexec(pg, "SELECT id FROM sqlq_messages WHERE token <> 0");
  ASSERT_EQ(PQresultStatus(r), PGRES_TUPLES_OK) << PQerrorMessage(pg);
  for (int i = 0; i < PQntuples(r); ++i) {
    const std::int64_t id = std::atoll(PQgetvalue(r, i, 0));
    if (!delivered.contains(id)) left.insert(id);
  }
  PQclear(r);
  PQfinish(pg);
  for (std::int64_t id : acknowledged) {
    EXPECT_TRUE(delivered.contains(id) || left.contains(id))
        << "acknowledged send " << id << " lost";
  }
  store.reset();
}

INSTANTIATE_TEST_SUITE_P(ServerRestart, PostgresFault,
                         ::testing::Values("fast", "immediate"),
                         [](const auto& mode) { return mode.param; });

}  // namespace
}  // namespace sqlq::test
