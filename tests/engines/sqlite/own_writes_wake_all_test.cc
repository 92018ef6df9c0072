// Review: this process's own commits reach the inotify watcher too
// (src/engines/sqlite/file_watcher.cc cannot tell them from another
// process's), and every event calls WakeHub::NotifyAll(). So each local send
// (or claim, ack, nack...) to queue A also wakes every claim waiting on any
// other queue of the store, and each of those runs an empty claim: a
// BEGIN IMMEDIATE write transaction through the WriteBatcher plus a
// NextReadyAt read. docs/semantics.md "Waiting": a same-process send of n
// messages wakes at most n waiters *of that queue*; an idle waiter costs at
// most one look a second.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "sqlq/store.h"

namespace sqlq {
namespace {

using std::chrono::milliseconds;

TEST(WaitingReview, SendsToOneQueueDoNotWakeWaitersOfAnother) {
  std::string dir = "/tmp/sqlq-review-XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  {
    auto store = Store::Open("sqlite:" + dir + "/q.db");
    ASSERT_TRUE(store.ok());
    auto a = (*store)->CreateQueue("a", {});
    auto b = (*store)->CreateQueue("b", {});
    ASSERT_TRUE(a.ok() && b.ok());

    std::thread waiter([&] {
      auto r = b->Claim({.wait = milliseconds(1500)});
      EXPECT_TRUE(r.ok() && r->empty());
    });
    // Until the waiter is registered and asleep: no time to guess.
    const auto registered =
        std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while ((*store)->TEST_waiting_claims() == 0 &&
           std::chrono::steady_clock::now() < registered) {
      std::this_thread::yield();
    }
    EXPECT_EQ((*store)->TEST_waiting_claims(), 1u);
    const std::size_t before = (*store)->TEST_write_transactions();
    constexpr int kSends = 40;
    for (int i = 0; i < kSends; ++i) {
      ASSERT_TRUE(a->Send({.payload = "x"}).ok());
      std::this_thread::sleep_for(milliseconds(20));
    }
    const std::size_t during = (*store)->TEST_write_transactions() - before;
    waiter.join();
    // kSends transactions for the sends, plus at most ~1 poll look of the
    // idle waiter on b in that second.
    EXPECT_LE(during, static_cast<std::size_t>(kSends + 2))
        << "the waiter on queue b ran " << during - kSends
        << " empty claims, woken by sends to queue a";
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sqlq
