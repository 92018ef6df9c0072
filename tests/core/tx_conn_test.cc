// The connection pool and retry loop the server engines share
// (core/tx_conn.h), with a connection that only counts, and the URL
// tuning parameters (core/url_params.h).

#include "core/tx_conn.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "core/errors.h"
#include "core/url_params.h"

namespace sqlq::core {
namespace {

struct CountingConn : TxConn {
  explicit CountingConn(int n) : id(n) {}
  bool healthy() const { return open; }
  bool StillOpen() { return open; }
  bool Poolable() const { return open && !in_tx; }
  int id;
  bool open = true;
  bool in_tx = false;
};

class Pool : public ::testing::Test {
 protected:
  ConnPool<CountingConn> pool_{
      [this]() -> Result<std::unique_ptr<CountingConn>> {
        return std::make_unique<CountingConn>(++connects_);
      },
      /*max_idle=*/2,
      RetryPolicy{.attempts = 4,
                  .reconnects = 2,
                  .base = std::chrono::microseconds(1),
                  .max_doublings = 2,
                  .jitter = std::chrono::microseconds(1)}};
  int connects_ = 0;
};

TEST_F(Pool, ReusesIdleConnectionsAndClosesTheUnpoolable) {
  bool pooled = true;
  auto a = pool_.Acquire(&pooled);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(pooled);
  pool_.Release(std::move(*a));
  auto b = pool_.Acquire(&pooled);
  EXPECT_TRUE(pooled);
  EXPECT_EQ((*b)->id, 1);
  (*b)->in_tx = true;  // a transaction left open: never pooled
  pool_.Release(std::move(*b));
  auto c = pool_.Acquire(&pooled);
  EXPECT_FALSE(pooled);
  EXPECT_EQ((*c)->id, 2);
}

TEST_F(Pool, ADeadlockedTransactionRunsAgainUpToTheAttempts) {
  int runs = 0;
  Status s = pool_.RunWrite([&](CountingConn& c) {
    ++runs;
    EXPECT_FALSE(c.retry_tx) << "state is reset before each run";
    c.known_queues.insert(7);
    if (runs < 3) {
      c.retry_tx = true;
      return Status::Busy("deadlock");
    }
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(runs, 3);

  runs = 0;
  s = pool_.RunWrite([&](CountingConn& c) {
    ++runs;
    c.retry_tx = true;
    return Status::Busy("deadlock");
  });
  EXPECT_EQ(s.code(), Code::kBusy);
  EXPECT_EQ(runs, 4);
}

TEST_F(Pool, OtherFailuresAreNotRunAgain) {
  int runs = 0;
  Status s = pool_.RunWrite([&](CountingConn&) {
    ++runs;
    return Status::NotFound("gone");
  });
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(runs, 1);
}

TEST_F(Pool, APooledConnectionFoundClosedIsReplacedWithoutUsingAnAttempt) {
  // Two idle connections that the "server" then closes.
  auto a = pool_.Acquire();
  auto b = pool_.Acquire();
  const int first = (*a)->id, second = (*b)->id;
  pool_.Release(std::move(*a));
  pool_.Release(std::move(*b));
  int runs = 0;
  Status s = pool_.RunWrite([&](CountingConn& c) {
    ++runs;
    if (c.id == first || c.id == second) {
      c.open = false;
      c.lost_at_begin = true;
      return Status::Unavailable("server closed the connection");
    }
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  // The first lost run dropped the other idle connection too: one fresh
  // connection then did the work.
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(connects_, 3);
}

TEST_F(Pool, AcquireBegunReplacesAClosedPooledConnection) {
  auto a = pool_.Acquire();
  const int stale = (*a)->id;
  pool_.Release(std::move(*a));
  auto begun = pool_.AcquireBegun([&](CountingConn& c) {
    if (c.id == stale) {
      c.open = false;
      return Status::Unavailable("lost");
    }
    return Status::Ok();
  });
  ASSERT_TRUE(begun.ok());
  EXPECT_NE((*begun)->id, stale);
  // A fresh connection that fails to begin is the caller's error.
  auto failed = pool_.AcquireBegun(
      [](CountingConn&) { return Status::Unavailable("x"); });
  EXPECT_EQ(failed.status().code(), Code::kUnavailable);
}

// A transaction that keeps deadlocking with this process's others runs
// alone from its (alone_after + 1)-th run: it waits for the others that
// run to end, no other starts until it ends, and then they go on side by
// side again.
TEST(PoolGate, ATransactionThatKeepsDeadlockingRunsAlone) {
  int connects = 0;
  std::mutex mu;  // guards connects
  ConnPool<CountingConn> pool(
      [&]() -> Result<std::unique_ptr<CountingConn>> {
        std::lock_guard<std::mutex> lock(mu);
        return std::make_unique<CountingConn>(++connects);
      },
      /*max_idle=*/8,
      RetryPolicy{.attempts = 4,
                  .base = std::chrono::microseconds(1),
                  .jitter = std::chrono::microseconds(1),
                  .alone_after = 2});
  std::atomic<int> running{0};
  std::atomic<int> overlaps{0};  // other bodies seen during the lone run
  std::atomic<bool> stop{false};
  // Others write all the time, each staying a while in its body, so that
  // some always run when the lone run wants to start.
  std::vector<std::thread> others;
  for (int t = 0; t < 3; ++t) {
    others.emplace_back([&] {
      while (!stop) {
        Status s = pool.RunWrite([&](CountingConn&) {
          ++running;
          const auto until =
              std::chrono::steady_clock::now() + std::chrono::microseconds(200);
          while (std::chrono::steady_clock::now() < until) {
            std::this_thread::yield();
          }
          --running;
          return Status::Ok();
        });
        EXPECT_TRUE(s.ok());
      }
    });
  }
  while (running.load() == 0) std::this_thread::yield();
  int runs = 0;
  Status s = pool.RunWrite([&](CountingConn& c) {
    ++runs;
    if (runs <= 2) {
      c.retry_tx = true;
      return Status::Busy("deadlock");
    }
    // While it runs, no other body runs or starts.
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
    while (std::chrono::steady_clock::now() < until) {
      overlaps += running.load();
      std::this_thread::yield();
    }
    return Status::Ok();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(runs, 3);
  EXPECT_EQ(overlaps.load(), 0);
  stop = true;
  for (auto& t : others) t.join();
}

TEST(RetryPolicy, BackoffDoublesUpToItsCapPlusJitter) {
  RetryPolicy p;
  EXPECT_EQ(p.Delay(0, 0), std::chrono::microseconds(200));
  EXPECT_EQ(p.Delay(1, 0), std::chrono::microseconds(400));
  EXPECT_EQ(p.Delay(6, 0), std::chrono::microseconds(200 * 64));
  EXPECT_EQ(p.Delay(9, 0), std::chrono::microseconds(200 * 64));
  EXPECT_EQ(p.Delay(0, 499), std::chrono::microseconds(699));
  EXPECT_EQ(p.Delay(0, 500), std::chrono::microseconds(200));
}

TEST(TxConn, CountersAreDeferredOnlyInEngineRunTransactions) {
  CountingConn c(1);
  EXPECT_FALSE(c.DeferCounters(1, {.sends = 1}));
  c.defer_counters = true;
  EXPECT_TRUE(c.DeferCounters(1, {.sends = 2}));
  EXPECT_TRUE(c.DeferCounters(1, {.acks = 1}));
  EXPECT_EQ(c.pending_counters[1].sends, 2);
  EXPECT_EQ(c.pending_counters[1].acks, 1);
  c.ResetTxState();
  EXPECT_TRUE(c.pending_counters.empty());
}

TEST(UrlParams, TakesOnlyTheNamedParameters) {
  constexpr std::string_view names[] = {"write_groups", "fold_rows"};
  UrlTuning t = TakeUrlParams(
      "postgresql://h/db?sslmode=require&write_groups=8&application_name=x",
      names);
  EXPECT_EQ(t.rest, "postgresql://h/db?sslmode=require&application_name=x");
  EXPECT_EQ(*t.Int("write_groups", 4, 1, 64), 8);
  EXPECT_EQ(*t.Int("fold_rows", 1000, 1, 10), 1000);  // absent: default
  UrlTuning only = TakeUrlParams("postgresql://h/db?write_groups=2", names);
  EXPECT_EQ(only.rest, "postgresql://h/db");
  UrlTuning none = TakeUrlParams("postgresql://h/db", names);
  EXPECT_EQ(none.rest, "postgresql://h/db");
  EXPECT_TRUE(none.values.empty());
}

TEST(UrlParams, BadValuesNameTheParameter) {
  constexpr std::string_view names[] = {"write_groups"};
  for (const char* bad : {"0", "65", "x", "", "4x", "-1"}) {
    UrlTuning t = TakeUrlParams(
        std::string("postgresql://h/db?write_groups=") + bad, names);
    auto v = t.Int("write_groups", 4, 1, 64);
    EXPECT_EQ(v.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(v.status().message().find("write_groups"), std::string::npos);
  }
}

TEST(Errors, ReceiptsSayWhyTheyWereRefused) {
  Receipt r{.id = 4, .attempt = 2, .token = 9};
  EXPECT_EQ(NotInQueue(4).code(), Code::kNotFound);
  EXPECT_NE(StaleReceipt(r, 5, 3).message().find("claimed again (attempt 3)"),
            std::string::npos);
  EXPECT_NE(StaleReceipt(r, 0, 2).message().find("nacked"), std::string::npos);
  EXPECT_NE(StaleReceipt(r, 5, 2).message().find("does not match"),
            std::string::npos);
  EXPECT_EQ(NotA("jobs", "ring", "queue").code(), Code::kFailedPrecondition);
  EXPECT_EQ(NotA("jobs", std::nullopt, "queue").code(), Code::kNotFound);
  EXPECT_EQ(NameTaken("jobs", std::nullopt).message(),
            "name 'jobs' already exists");
}

}  // namespace
}  // namespace sqlq::core
