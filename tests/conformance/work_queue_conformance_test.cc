// The work-queue conformance suite: docs/semantics.md, rule by rule,
// through the public API only. Every engine of Engines() (engine_fixture.h)
// runs it unchanged.
//
// Time: the store runs on a ManualClock, so leases, delays and backoff are
// moved forward with clock_->Advance() instead of sleeping. Only the tests
// of waiting claims measure real time, and they wait on events.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "sqlq/worker.h"
#include "tests/conformance/engine_fixture.h"
#include "tests/support/task_threads.h"

namespace sqlq::test {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;
using SteadyClock = std::chrono::steady_clock;

constexpr Duration kDay = hours(24);

class WorkQueueConformance : public EngineTest {
 protected:
  // The next ready message, or nullopt when none is ready.
  std::optional<ClaimedMessage> ClaimOne(WorkQueue& q, ClaimOptions o = {}) {
    o.max = 1;
    auto r = q.Claim(o);
    if (!r.ok()) {
      ADD_FAILURE() << "claim: " << r.status().ToString();
      return std::nullopt;
    }
    if (r->empty()) return std::nullopt;
    EXPECT_EQ(r->size(), 1u);
    return std::move(r->front());
  }

  // Claims everything ready now and returns it in claim order.
  std::vector<ClaimedMessage> ClaimAll(WorkQueue& q) {
    auto r = q.Claim({.max = 1000});
    if (!r.ok()) {
      ADD_FAILURE() << "claim: " << r.status().ToString();
      return {};
    }
    return std::move(*r);
  }

  // Sends `messages` messages, runs `consume` (which returns the ids it
  // took) on `threads` threads at once, and checks that every message was
  // taken exactly once.
  void ExpectEachTakenOnce(
      WorkQueue& q, int messages, int threads,
      const std::function<std::vector<std::int64_t>(WorkQueue)>& consume) {
    std::vector<Message> batch(messages, Message{.payload = "x"});
    ASSERT_OK(q.SendBatch(batch));
    std::vector<std::future<std::vector<std::int64_t>>> futures;
    for (int t = 0; t < threads; ++t) {
      futures.push_back(std::async(std::launch::async, consume, q));
    }
    std::multiset<std::int64_t> all;
    for (auto& f : futures) {
      for (std::int64_t id : f.get()) all.insert(id);
    }
    EXPECT_EQ(all.size(), static_cast<std::size_t>(messages));
    EXPECT_EQ(std::set<std::int64_t>(all.begin(), all.end()).size(),
              static_cast<std::size_t>(messages))
        << "a message was handed out twice";
  }

  std::vector<std::string> ClaimAllPayloads(WorkQueue& q) {
    std::vector<std::string> out;
    for (auto& m : ClaimAll(q)) out.push_back(m.payload);
    return out;
  }

  std::int64_t SendOne(WorkQueue& q, Message m) {
    auto r = q.Send(m);
    if (!r.ok()) {
      ADD_FAILURE() << "send: " << r.status().ToString();
      return 0;
    }
    return r->id;
  }

  QueueStats StatsOf(WorkQueue& q) {
    auto r = q.Stats();
    if (!r.ok()) {
      ADD_FAILURE() << "stats: " << r.status().ToString();
      return {};
    }
    return *r;
  }

  std::vector<DeadLetter> DeadOf(WorkQueue& q) {
    auto r = q.ListDead();
    if (!r.ok()) {
      ADD_FAILURE() << "list dead: " << r.status().ToString();
      return {};
    }
    return *r;
  }

  // Opens a store with the engine's own clock on a fresh database, for the
  // tests that need real time to pass.
  std::unique_ptr<Store> OpenRealClockStore(std::unique_ptr<TestDatabase>& db) {
    db = GetParam().make();
    return OpenOrFail(db->url());
  }
};

void ExpectSameOptions(const QueueOptions& a, const QueueOptions& b) {
  EXPECT_EQ(a.max_attempts, b.max_attempts);
  EXPECT_EQ(a.lease.count(), b.lease.count());
  EXPECT_EQ(a.backoff_base.count(), b.backoff_base.count());
  EXPECT_EQ(a.backoff_max.count(), b.backoff_max.count());
  EXPECT_EQ(a.archive, b.archive);
  EXPECT_EQ(a.retention.count(), b.retention.count());
  EXPECT_EQ(a.max_payload_bytes, b.max_payload_bytes);
}

const QueueOptions kCustomOptions{.max_attempts = 7,
                                  .lease = seconds(45),
                                  .backoff_base = milliseconds(250),
                                  .backoff_max = minutes(3),
                                  .archive = true,
                                  .retention = hours(5),
                                  .max_payload_bytes = 4096};

// --- queues ------------------------------------------------------------------

TEST_P(WorkQueueConformance, CreatedQueueIsListedWithItsOptions) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("emails", kCustomOptions));
  EXPECT_EQ(q.name(), "emails");
  ExpectSameOptions(q.options(), kCustomOptions);

  ASSERT_OK_AND_ASSIGN(auto queues, store_->ListQueues());
  ASSERT_EQ(queues.size(), 1u);
  EXPECT_EQ(queues[0].name, "emails");
  ExpectSameOptions(queues[0].options, kCustomOptions);
  EXPECT_EQ(Us(queues[0].created_at), Us(clock_->Now()));

  ASSERT_OK_AND_ASSIGN(WorkQueue again, store_->Queue("emails"));
  EXPECT_EQ(again.name(), "emails");
  ExpectSameOptions(again.options(), kCustomOptions);
}

TEST_P(WorkQueueConformance, ListQueuesReturnsEveryQueue) {
  ASSERT_OK_AND_ASSIGN(auto queues, store_->ListQueues());
  EXPECT_TRUE(queues.empty());
  for (const char* name : {"b", "a", "c"}) {
    ASSERT_OK(store_->CreateQueue(name, {}));
  }
  ASSERT_OK_AND_ASSIGN(queues, store_->ListQueues());
  std::vector<std::string> names;
  for (auto& info : queues) names.push_back(info.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "c"}));
}

TEST_P(WorkQueueConformance, CreatingAnExistingQueueFailsWithAlreadyExists) {
  ASSERT_OK(store_->CreateQueue("jobs", kCustomOptions));
  EXPECT_CODE(store_->CreateQueue("jobs", {}), Code::kAlreadyExists);
  // The first queue's options are untouched.
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->Queue("jobs"));
  ExpectSameOptions(q.options(), kCustomOptions);
  ASSERT_OK_AND_ASSIGN(auto queues, store_->ListQueues());
  EXPECT_EQ(queues.size(), 1u);
}

// The readiness probe of sqlq serve: a write that leaves nothing behind.
// Were the schema version not restored, the next open would see another
// schema and refuse it or migrate again.
TEST_P(WorkQueueConformance, CheckWritableCommitsAndLeavesTheStoreAsItWas) {
  ASSERT_OK(store_->CreateQueue("jobs", kCustomOptions));
  ASSERT_OK(store_->CheckWritable());
  ASSERT_OK(store_->CheckWritable());
  store_.reset();
  auto again = Store::Open(db_->url(), StoreOptions{.clock = clock_});
  ASSERT_OK(again);
  ASSERT_OK_AND_ASSIGN(auto queues, (*again)->ListQueues());
  ASSERT_EQ(queues.size(), 1u);
  ExpectSameOptions(queues[0].options, kCustomOptions);
  EXPECT_OK((*again)->CheckWritable());
}

TEST_P(WorkQueueConformance, OpeningAnUnknownQueueFailsWithNotFound) {
  EXPECT_CODE(store_->Queue("nope"), Code::kNotFound);
}

TEST_P(WorkQueueConformance, DroppingAnUnknownQueueFailsWithNotFound) {
  EXPECT_CODE(store_->DropQueue("nope"), Code::kNotFound);
}

TEST_P(WorkQueueConformance, DroppedQueueIsGoneWithItsMessages) {
  ASSERT_OK_AND_ASSIGN(
      WorkQueue q,
      store_->CreateQueue("jobs", {.max_attempts = 1, .archive = true}));
  SendOne(q, {.payload = "acked"});
  SendOne(q, {.payload = "dead"});
  SendOne(q, {.payload = "ready"});
  auto acked = ClaimOne(q);
  ASSERT_TRUE(acked);
  ASSERT_OK(q.Ack(acked->receipt));
  auto dead = ClaimOne(q);
  ASSERT_TRUE(dead);
  ASSERT_OK(q.Nack(dead->receipt));

  ASSERT_OK(store_->DropQueue("jobs"));
  ASSERT_OK_AND_ASSIGN(auto queues, store_->ListQueues());
  EXPECT_TRUE(queues.empty());
  EXPECT_CODE(store_->Queue("jobs"), Code::kNotFound);

  // A new queue of the same name starts empty.
  ASSERT_OK_AND_ASSIGN(WorkQueue fresh, store_->CreateQueue("jobs", {}));
  QueueStats st = StatsOf(fresh);
  EXPECT_EQ(st.ready, 0);
  EXPECT_EQ(st.dead, 0);
  EXPECT_EQ(st.archived, 0);
  EXPECT_EQ(st.sends, 0);
  EXPECT_TRUE(ClaimAll(fresh).empty());
}

TEST_P(WorkQueueConformance, HandleOfADroppedQueueReportsNotFound) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  ASSERT_OK(store_->DropQueue("jobs"));
  EXPECT_CODE(q.Send({.payload = "x"}), Code::kNotFound);
  EXPECT_CODE(q.Claim(), Code::kNotFound);
  EXPECT_CODE(q.Stats(), Code::kNotFound);
  EXPECT_CODE(q.ListDead(), Code::kNotFound);
  // The failed send left nothing behind for a queue of the same name.
  ASSERT_OK_AND_ASSIGN(WorkQueue fresh, store_->CreateQueue("jobs", {}));
  EXPECT_EQ(StatsOf(fresh).ready, 0);
}

TEST_P(WorkQueueConformance, InvalidQueueNamesAreRejectedAndNothingCreated) {
  const std::vector<std::string> bad = {"",
                                        std::string(65, 'a'),
                                        "a b",
                                        "x;DROP TABLE",
                                        "caf\xc3\xa9",
                                        ".hidden",
                                        "a/b",
                                        "'q'"};
  for (const std::string& name : bad) {
    SCOPED_TRACE("name '" + name + "'");
    EXPECT_CODE(store_->CreateQueue(name, {}), Code::kInvalidArgument);
    EXPECT_CODE(store_->Queue(name), Code::kInvalidArgument);
    EXPECT_CODE(store_->DropQueue(name), Code::kInvalidArgument);
  }
  ASSERT_OK_AND_ASSIGN(auto queues, store_->ListQueues());
  EXPECT_TRUE(queues.empty());
}

TEST_P(WorkQueueConformance, NamesOfOneToSixtyFourAllowedCharactersWork) {
  for (const std::string& name :
       {std::string("a"), std::string(64, 'z'), std::string("Az09_-")}) {
    SCOPED_TRACE("name '" + name + "'");
    ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue(name, {}));
    EXPECT_EQ(q.name(), name);
    EXPECT_OK(store_->Queue(name));
  }
}

TEST_P(WorkQueueConformance, InvalidQueueOptionsAreRejected) {
  std::vector<std::pair<std::string, QueueOptions>> bad;
  bad.push_back({"max_attempts 0", {.max_attempts = 0}});
  bad.push_back({"max_attempts 1000001", {.max_attempts = 1000001}});
  bad.push_back({"lease 0", {.lease = milliseconds(0)}});
  bad.push_back({"lease over 12h", {.lease = hours(12) + milliseconds(1)}});
  bad.push_back({"backoff_max < backoff_base",
                 {.backoff_base = seconds(10), .backoff_max = seconds(9)}});
  bad.push_back({"payload limit 0", {.max_payload_bytes = 0}});
  bad.push_back({"payload limit over 64 MiB",
                 {.max_payload_bytes = (std::size_t{64} << 20) + 1}});
  for (const auto& [what, options] : bad) {
    SCOPED_TRACE(what);
    EXPECT_CODE(store_->CreateQueue("jobs", options), Code::kInvalidArgument);
  }
  ASSERT_OK_AND_ASSIGN(auto queues, store_->ListQueues());
  EXPECT_TRUE(queues.empty());
}

TEST_P(WorkQueueConformance,
       PurgeDeletesMessagesButKeepsDeadLettersAndArchive) {
  ASSERT_OK_AND_ASSIGN(
      WorkQueue q,
      store_->CreateQueue("jobs", {.max_attempts = 1, .archive = true}));
  SendOne(q, {.payload = "acked"});
  SendOne(q, {.payload = "dead"});
  SendOne(q, {.payload = "leased"});
  SendOne(q, {.payload = "ready"});
  SendOne(q, {.payload = "delayed", .delay = hours(1)});
  auto a = ClaimOne(q);
  ASSERT_TRUE(a);
  ASSERT_OK(q.Ack(a->receipt));
  auto d = ClaimOne(q);
  ASSERT_TRUE(d);
  ASSERT_OK(q.Nack(d->receipt));
  auto leased = ClaimOne(q);
  ASSERT_TRUE(leased);
  EXPECT_EQ(leased->payload, "leased");

  ASSERT_OK_AND_ASSIGN(std::int64_t purged, q.Purge());
  EXPECT_EQ(purged, 3);
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.ready, 0);
  EXPECT_EQ(st.delayed, 0);
  EXPECT_EQ(st.leased, 0);
  EXPECT_EQ(st.dead, 1);
  EXPECT_EQ(st.archived, 1);
  EXPECT_CODE(q.Ack(leased->receipt), Code::kNotFound);
  clock_->Advance(hours(2));
  EXPECT_TRUE(ClaimAll(q).empty());
}

// --- send --------------------------------------------------------------------

TEST_P(WorkQueueConformance, SentIdsArePositiveIncreasingAndSixtyFourBit) {
  static_assert(std::is_same_v<decltype(SendResult::id), std::int64_t>);
  static_assert(std::is_same_v<decltype(ClaimedMessage::id), std::int64_t>);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(SendOne(q, {.payload = "x"}));
  std::vector<Message> batch(3, Message{.payload = "y"});
  ASSERT_OK_AND_ASSIGN(auto results, q.SendBatch(batch));
  ASSERT_EQ(results.size(), 3u);
  for (auto& r : results) {
    EXPECT_FALSE(r.duplicate);
    ids.push_back(r.id);
  }
  EXPECT_GT(ids[0], 0);
  for (size_t i = 1; i < ids.size(); ++i) {
    EXPECT_GT(ids[i], ids[i - 1]) << "at " << i;
  }
}

TEST_P(WorkQueueConformance, SendBatchReturnsResultsInMessageOrder) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  std::vector<Message> batch;
  for (int i = 0; i < 5; ++i) {
    batch.push_back({.payload = "m" + std::to_string(i), .priority = i % 2});
  }
  ASSERT_OK_AND_ASSIGN(auto results, q.SendBatch(batch));
  ASSERT_EQ(results.size(), batch.size());
  std::map<std::int64_t, std::string> sent;
  for (size_t i = 0; i < batch.size(); ++i) {
    sent[results[i].id] = batch[i].payload;
  }
  auto claimed = ClaimAll(q);
  ASSERT_EQ(claimed.size(), batch.size());
  for (auto& m : claimed) EXPECT_EQ(m.payload, sent[m.id]) << "id " << m.id;
}

TEST_P(WorkQueueConformance, OversizedPayloadIsTooLarge) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  const std::size_t limit = q.options().max_payload_bytes;
  EXPECT_EQ(limit, std::size_t{1} << 20);
  EXPECT_CODE(q.Send({.payload = std::string(limit + 1, 'x')}),
              Code::kTooLarge);
  EXPECT_EQ(StatsOf(q).ready, 0);
  ASSERT_OK(q.Send({.payload = std::string(limit, 'x')}));
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->payload.size(), limit);
}

TEST_P(WorkQueueConformance, PerQueuePayloadLimitIsRespected) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("small", {.max_payload_bytes = 10}));
  EXPECT_OK(q.Send({.payload = std::string(10, 'x')}));
  EXPECT_CODE(q.Send({.payload = std::string(11, 'x')}), Code::kTooLarge);
  // Another queue's limit is its own.
  ASSERT_OK_AND_ASSIGN(WorkQueue big, store_->CreateQueue("big", {}));
  EXPECT_OK(big.Send({.payload = std::string(11, 'x')}));
  EXPECT_EQ(StatsOf(q).ready, 1);
}

TEST_P(WorkQueueConformance, BatchWithOneOversizedMessageStoresNothing) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.max_payload_bytes = 8}));
  std::vector<Message> batch = {{.payload = "ok"},
                                {.payload = "also ok"},
                                {.payload = "far too large"},
                                {.payload = "ok too"}};
  EXPECT_CODE(q.SendBatch(batch), Code::kTooLarge);
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.ready, 0);
  EXPECT_EQ(st.sends, 0);
  EXPECT_TRUE(ClaimAll(q).empty());
}

TEST_P(WorkQueueConformance, DelayOutOfRangeIsRejected) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  EXPECT_CODE(q.Send({.payload = "x", .delay = milliseconds(-1)}),
              Code::kInvalidArgument);
  EXPECT_CODE(q.Send({.payload = "x", .delay = 365 * kDay + milliseconds(1)}),
              Code::kInvalidArgument);
  std::vector<Message> batch = {{.payload = "ok"},
                                {.payload = "x", .delay = milliseconds(-5)}};
  EXPECT_CODE(q.SendBatch(batch), Code::kInvalidArgument);
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.ready + st.delayed, 0);
  // The bound itself is allowed.
  EXPECT_OK(q.Send({.payload = "x", .delay = 365 * kDay}));
  EXPECT_EQ(StatsOf(q).delayed, 1);
}

TEST_P(WorkQueueConformance, EmptyBatchIsRejected) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  std::vector<Message> none;
  EXPECT_CODE(q.SendBatch(none), Code::kInvalidArgument);
}

TEST_P(WorkQueueConformance, OverlongDedupKeyIsRejected) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  EXPECT_CODE(q.Send({.payload = "x", .dedup_key = std::string(256, 'k')}),
              Code::kInvalidArgument);
  EXPECT_OK(q.Send({.payload = "x", .dedup_key = std::string(255, 'k')}));
  EXPECT_EQ(StatsOf(q).ready, 1);
}

TEST_P(WorkQueueConformance, PayloadAndPriorityRoundTripExactly) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  std::string binary("\0\x01\xff\xfe\n'\"\\%_", 11);
  for (int c = 0; c < 256; ++c) binary.push_back(static_cast<char>(c));
  const std::int32_t kMax = std::numeric_limits<std::int32_t>::max();
  const std::int32_t kMin = std::numeric_limits<std::int32_t>::min();
  SendOne(q, {.payload = binary, .priority = kMax});
  SendOne(q, {.payload = "", .priority = kMin});
  auto first = ClaimOne(q);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->payload, binary);
  EXPECT_EQ(first->priority, kMax);
  EXPECT_EQ(Us(first->enqueued_at), Us(clock_->Now()));
  auto second = ClaimOne(q);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->payload, "");
  EXPECT_EQ(second->priority, kMin);
}

TEST_P(WorkQueueConformance, SentMessageSurvivesReopeningTheStore) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", kCustomOptions));
  std::int64_t id = SendOne(q, {.payload = "durable", .priority = 3});
  store_.reset();

  ASSERT_OK_AND_ASSIGN(store_,
                       Store::Open(db_->url(), StoreOptions{.clock = clock_}));
  ASSERT_OK_AND_ASSIGN(WorkQueue again, store_->Queue("jobs"));
  ExpectSameOptions(again.options(), kCustomOptions);
  auto m = ClaimOne(again);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->id, id);
  EXPECT_EQ(m->payload, "durable");
  EXPECT_EQ(m->priority, 3);
}

TEST_P(WorkQueueConformance, ConcurrentSendsAreAllStoredWithDistinctIds) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  constexpr int kThreads = 4, kPerThread = 25;
  std::vector<std::future<std::vector<std::int64_t>>> futures;
  for (int t = 0; t < kThreads; ++t) {
    futures.push_back(std::async(std::launch::async, [q, t]() mutable {
      std::vector<std::int64_t> ids;
      for (int i = 0; i < kPerThread; ++i) {
        auto r =
            q.Send({.payload = std::to_string(t) + ":" + std::to_string(i)});
        ids.push_back(r.ok() ? r->id : -1);
      }
      return ids;
    }));
  }
  std::set<std::int64_t> ids;
  for (auto& f : futures) {
    for (std::int64_t id : f.get()) {
      EXPECT_GT(id, 0);
      ids.insert(id);
    }
  }
  EXPECT_EQ(ids.size(), std::size_t{kThreads * kPerThread});
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.ready, kThreads * kPerThread);
  EXPECT_EQ(st.sends, kThreads * kPerThread);
}

// Concurrent sends through one handle may be stored together (one engine
// call for several callers); each caller must still get the ids of its own
// messages, in its own order.
TEST_P(WorkQueueConformance, ConcurrentSendersGetTheIdsOfTheirOwnMessages) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  constexpr int kThreads = 16, kRounds = 10;
  using Sent = std::vector<std::pair<std::int64_t, std::string>>;
  std::vector<std::future<Sent>> futures;
  for (int t = 0; t < kThreads; ++t) {
    futures.push_back(std::async(std::launch::async, [q, t]() mutable {
      Sent sent;
      for (int i = 0; i < kRounds; ++i) {
        std::vector<Message> batch;
        for (int k = 0; k < 1 + (t + i) % 3; ++k) {
          batch.push_back({.payload = fmt::format("{}:{}:{}", t, i, k)});
        }
        auto r = q.SendBatch(batch);
        if (!r.ok() || r->size() != batch.size()) {
          ADD_FAILURE() << "send failed: " << r.status().ToString();
          continue;
        }
        for (size_t k = 0; k < batch.size(); ++k) {
          EXPECT_FALSE((*r)[k].duplicate);
          sent.emplace_back((*r)[k].id, batch[k].payload);
        }
      }
      return sent;
    }));
  }
  std::map<std::int64_t, std::string> told;
  for (auto& f : futures) {
    for (auto& [id, payload] : f.get()) {
      EXPECT_TRUE(told.emplace(id, payload).second) << "id " << id << " twice";
    }
  }
  auto claimed = ClaimAll(q);
  EXPECT_EQ(claimed.size(), told.size());
  for (auto& m : claimed) EXPECT_EQ(m.payload, told[m.id]) << "id " << m.id;
  EXPECT_EQ(StatsOf(q).sends, static_cast<std::int64_t>(told.size()));
}

TEST_P(WorkQueueConformance, ConcurrentSendsOfOneDedupKeyStoreOneMessage) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  constexpr int kThreads = 16;
  std::vector<std::future<Result<SendResult>>> futures;
  for (int t = 0; t < kThreads; ++t) {
    futures.push_back(std::async(std::launch::async, [q, t]() mutable {
      return q.Send({.payload = std::to_string(t), .dedup_key = "once"});
    }));
  }
  std::set<std::int64_t> ids;
  int stored = 0;
  for (auto& f : futures) {
    auto r = f.get();
    ASSERT_OK(r.status());
    ids.insert(r->id);
    if (!r->duplicate) ++stored;
  }
  EXPECT_EQ(stored, 1);
  EXPECT_EQ(ids.size(), 1u);
  EXPECT_EQ(StatsOf(q).ready, 1);
}

// --- claim order -------------------------------------------------------------

TEST_P(WorkQueueConformance, ClaimsHigherPriorityFirst) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "p0", .priority = 0});
  SendOne(q, {.payload = "p5-first", .priority = 5});
  SendOne(q, {.payload = "p-3", .priority = -3});
  SendOne(q, {.payload = "p5-second", .priority = 5});
  SendOne(q, {.payload = "pmax", .priority = 2147483647});
  // Priority beats an earlier ready time.
  clock_->Advance(seconds(1));
  SendOne(q, {.payload = "p1-later", .priority = 1});
  EXPECT_EQ(ClaimAllPayloads(q),
            (std::vector<std::string>{"pmax", "p5-first", "p5-second",
                                      "p1-later", "p0", "p-3"}));
}

TEST_P(WorkQueueConformance, ClaimsEarlierReadyTimeFirstWithinAPriority) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  // The delayed message has the lowest id but becomes ready last.
  SendOne(q, {.payload = "delayed-10s", .delay = seconds(10)});
  clock_->Advance(seconds(1));
  SendOne(q, {.payload = "at-1s"});
  clock_->Advance(seconds(1));
  SendOne(q, {.payload = "delayed-3s", .delay = seconds(3)});  // ready at 5s
  SendOne(q, {.payload = "at-2s"});
  clock_->Advance(seconds(20));
  SendOne(q, {.payload = "at-22s"});
  EXPECT_EQ(ClaimAllPayloads(q),
            (std::vector<std::string>{"at-1s", "at-2s", "delayed-3s",
                                      "delayed-10s", "at-22s"}));
}

TEST_P(WorkQueueConformance, ClaimsLowerIdFirstWhenPriorityAndReadyTimeTie) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  std::vector<Message> batch;
  for (int i = 0; i < 5; ++i) batch.push_back({.payload = std::to_string(i)});
  ASSERT_OK_AND_ASSIGN(auto results, q.SendBatch(batch));
  std::int64_t single = SendOne(q, {.payload = "5"});
  std::vector<std::int64_t> expected;
  for (auto& r : results) expected.push_back(r.id);
  expected.push_back(single);
  std::sort(expected.begin(), expected.end());
  std::vector<std::int64_t> claimed;
  for (auto& m : ClaimAll(q)) claimed.push_back(m.id);
  EXPECT_EQ(claimed, expected);
}

TEST_P(WorkQueueConformance, RetriedMessageGoesBehindMessagesReadyEarlier) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "A"});
  clock_->Advance(seconds(1));
  SendOne(q, {.payload = "B"});
  clock_->Advance(seconds(1));
  SendOne(q, {.payload = "C"});
  clock_->Advance(seconds(1));
  auto a = ClaimOne(q);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->payload, "A");
  ASSERT_OK_AND_ASSIGN(NackOutcome outcome,
                       q.Nack(a->receipt, {.delay = milliseconds(0)}));
  EXPECT_EQ(outcome, NackOutcome::kRetry);
  clock_->Advance(seconds(1));
  SendOne(q, {.payload = "D"});
  EXPECT_EQ(ClaimAllPayloads(q),
            (std::vector<std::string>{"B", "C", "A", "D"}));
}

TEST_P(WorkQueueConformance, ClaimReturnsUpToMaxMessagesInClaimOrder) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  for (int i = 0; i < 5; ++i) {
    SendOne(q, {.payload = std::to_string(i), .priority = i});
  }
  ASSERT_OK_AND_ASSIGN(auto first, q.Claim({.max = 3}));
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[0].payload, "4");
  EXPECT_EQ(first[1].payload, "3");
  EXPECT_EQ(first[2].payload, "2");
  ASSERT_OK_AND_ASSIGN(auto rest, q.Claim({.max = 3}));
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0].payload, "1");
  EXPECT_EQ(rest[1].payload, "0");
}

// max_bytes bounds what one claim hands out (the server's reply size):
// messages are taken in claim order while their payloads fit, the first
// always; the rest stay ready, their attempts untouched.
TEST_P(WorkQueueConformance, ClaimStopsAtTheByteLimitAndAlwaysTakesOne) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  const std::vector<std::size_t> sizes = {100, 100, 100, 1000, 10};
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    SendOne(q, {.payload = std::string(sizes[i], static_cast<char>('a' + i))});
  }
  auto claim = [&](std::size_t max_bytes) {
    auto r = q.Claim({.max = 10, .max_bytes = max_bytes});
    EXPECT_OK(r);
    std::vector<std::size_t> got;
    if (r.ok()) {
      for (auto& m : *r) {
        got.push_back(m.payload.size());
        EXPECT_EQ(m.attempt, 1) << "a message left behind lost an attempt";
      }
    }
    return got;
  };
  // 100 + 100 fit in 250; a third 100 would not.
  EXPECT_EQ(claim(250), (std::vector<std::size_t>{100, 100}));
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.ready, 3);
  EXPECT_EQ(st.leased, 2);
  // The first message is taken even when it alone is over the limit.
  EXPECT_EQ(claim(50), (std::vector<std::size_t>{100}));
  EXPECT_EQ(claim(500), (std::vector<std::size_t>{1000}));
  // No limit: the rest.
  EXPECT_EQ(claim(0), (std::vector<std::size_t>{10}));
  ASSERT_OK_AND_ASSIGN(st, q.Stats());
  EXPECT_EQ(st.ready, 0);
  EXPECT_EQ(st.claims, 5);
}

TEST_P(WorkQueueConformance, ClaimOptionsOutOfRangeAreRejected) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "x"});
  EXPECT_CODE(q.Claim({.max = 0}), Code::kInvalidArgument);
  EXPECT_CODE(q.Claim({.max = 1001}), Code::kInvalidArgument);
  EXPECT_CODE(q.Claim({.lease = milliseconds(0)}), Code::kInvalidArgument);
  EXPECT_CODE(q.Claim({.wait = milliseconds(-1)}), Code::kInvalidArgument);
  EXPECT_CODE(q.Claim({.wait = hours(1) + milliseconds(1)}),
              Code::kInvalidArgument);
  EXPECT_CODE(q.Claim({.worker = std::string(256, 'w')}),
              Code::kInvalidArgument);
  // None of them took the message.
  EXPECT_EQ(StatsOf(q).ready, 1);
  EXPECT_EQ(StatsOf(q).claims, 0);
}

// --- delay -------------------------------------------------------------------

TEST_P(WorkQueueConformance, DelayedMessageIsNotClaimableBeforeItsDelay) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "later", .delay = seconds(10)});
  EXPECT_FALSE(ClaimOne(q));
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.delayed, 1);
  EXPECT_EQ(st.ready, 0);
  clock_->Advance(seconds(10) - milliseconds(1));
  EXPECT_FALSE(ClaimOne(q));
  clock_->Advance(milliseconds(1));
  EXPECT_EQ(StatsOf(q).ready, 1);
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->payload, "later");
  EXPECT_EQ(m->attempt, 1);
}

// --- leases and receipts -----------------------------------------------------

TEST_P(WorkQueueConformance, ClaimCountsAnAttempt) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.lease = seconds(10)}));
  SendOne(q, {.payload = "x"});
  auto first = ClaimOne(q);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->attempt, 1);
  clock_->Advance(seconds(11));
  auto second = ClaimOne(q);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->id, first->id);
  EXPECT_EQ(second->attempt, 2);
}

TEST_P(WorkQueueConformance, ExpiredLeaseRedeliversWithANewReceipt) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.lease = seconds(30)}));
  SendOne(q, {.payload = "x"});
  const Timestamp claimed_at = clock_->Now();
  auto first = ClaimOne(q);
  ASSERT_TRUE(first);
  EXPECT_EQ(Us(first->lease_expires_at), Us(claimed_at + seconds(30)));
  EXPECT_EQ(StatsOf(q).leased, 1);

  clock_->Advance(seconds(30) - milliseconds(1));
  EXPECT_FALSE(ClaimOne(q)) << "redelivered before the lease ran out";
  clock_->Advance(milliseconds(2));
  EXPECT_EQ(StatsOf(q).ready, 1);
  auto second = ClaimOne(q);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->id, first->id);
  EXPECT_EQ(second->payload, "x");
  EXPECT_NE(second->receipt, first->receipt);
  EXPECT_EQ(Us(second->lease_expires_at), Us(clock_->Now() + seconds(30)));
}

TEST_P(WorkQueueConformance, ClaimUsesTheQueueLeaseUnlessTheClaimNamesOne) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.lease = seconds(30)}));
  SendOne(q, {.payload = "a"});
  SendOne(q, {.payload = "b"});
  auto a = ClaimOne(q, {.lease = seconds(5)});
  ASSERT_TRUE(a);
  EXPECT_EQ(Us(a->lease_expires_at), Us(clock_->Now() + seconds(5)));
  auto b = ClaimOne(q);
  ASSERT_TRUE(b);
  EXPECT_EQ(Us(b->lease_expires_at), Us(clock_->Now() + seconds(30)));
  clock_->Advance(seconds(6));
  auto again = ClaimOne(q);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->id, a->id);
}

TEST_P(WorkQueueConformance, StaleReceiptCannotAck) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.lease = seconds(10)}));
  SendOne(q, {.payload = "x"});
  auto slow = ClaimOne(q);
  ASSERT_TRUE(slow);
  clock_->Advance(seconds(11));
  auto fast = ClaimOne(q);
  ASSERT_TRUE(fast);

  Status s = q.Ack(slow->receipt);
  EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("stale"), std::string::npos) << s.ToString();
  // The new holder's lease is intact.
  EXPECT_EQ(StatsOf(q).leased, 1);
  EXPECT_OK(q.Ack(fast->receipt));
  EXPECT_EQ(StatsOf(q).leased, 0);
}

TEST_P(WorkQueueConformance, StaleReceiptCannotNack) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.lease = seconds(10)}));
  SendOne(q, {.payload = "x"});
  auto slow = ClaimOne(q);
  ASSERT_TRUE(slow);
  clock_->Advance(seconds(11));
  auto fast = ClaimOne(q);
  ASSERT_TRUE(fast);

  auto r = q.Nack(slow->receipt, {.delay = milliseconds(0)});
  EXPECT_CODE(r, Code::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("stale"), std::string::npos)
      << r.status().ToString();
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.leased, 1);
  EXPECT_EQ(st.ready, 0);
  EXPECT_EQ(st.nacks, 0);
}

TEST_P(WorkQueueConformance, StaleReceiptCannotExtend) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.lease = seconds(10)}));
  SendOne(q, {.payload = "x"});
  auto slow = ClaimOne(q);
  ASSERT_TRUE(slow);
  clock_->Advance(seconds(11));
  auto fast = ClaimOne(q);
  ASSERT_TRUE(fast);

  auto r = q.Extend(slow->receipt, hours(1));
  EXPECT_CODE(r, Code::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("stale"), std::string::npos)
      << r.status().ToString();
  // The new holder's lease was not stretched by the stale extend.
  clock_->Advance(seconds(11));
  auto third = ClaimOne(q);
  ASSERT_TRUE(third);
  EXPECT_EQ(third->attempt, 3);
}

TEST_P(WorkQueueConformance, NackedReceiptCannotBeUsedAgain) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "x"});
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  ASSERT_OK(q.Nack(m->receipt, {.delay = seconds(5)}));
  EXPECT_CODE(q.Ack(m->receipt), Code::kFailedPrecondition);
  EXPECT_CODE(q.Nack(m->receipt), Code::kFailedPrecondition);
  EXPECT_CODE(q.Extend(m->receipt, hours(1)), Code::kFailedPrecondition);
  // Still waiting for its retry, not leased again by the extend.
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.delayed, 1);
  EXPECT_EQ(st.leased, 0);
}

TEST_P(WorkQueueConformance, ReceiptOfAnAckedMessageIsNotFound) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "x"});
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  ASSERT_OK(q.Ack(m->receipt));
  EXPECT_CODE(q.Ack(m->receipt), Code::kNotFound);
  EXPECT_CODE(q.Nack(m->receipt), Code::kNotFound);
  EXPECT_CODE(q.Extend(m->receipt, seconds(1)), Code::kNotFound);
  EXPECT_EQ(StatsOf(q).acks, 1);
}

TEST_P(WorkQueueConformance, MalformedReceiptsAreInvalidArgument) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "x"});
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  for (const char* bad : {"", "abc", "1-1-zz", "0-1-0000000000000001"}) {
    SCOPED_TRACE(std::string("receipt '") + bad + "'");
    EXPECT_CODE(q.Ack(bad), Code::kInvalidArgument);
    EXPECT_CODE(q.Nack(bad), Code::kInvalidArgument);
    EXPECT_CODE(q.Extend(bad, seconds(1)), Code::kInvalidArgument);
  }
  EXPECT_EQ(StatsOf(q).leased, 1);
}

TEST_P(WorkQueueConformance, ReceiptFromAnotherQueueIsRefused) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q1, store_->CreateQueue("one", {}));
  ASSERT_OK_AND_ASSIGN(WorkQueue q2, store_->CreateQueue("two", {}));
  SendOne(q1, {.payload = "x"});
  SendOne(q2, {.payload = "y"});
  auto m = ClaimOne(q1);
  ASSERT_TRUE(m);
  EXPECT_CODE(q2.Ack(m->receipt), Code::kNotFound);
  EXPECT_CODE(q2.Nack(m->receipt), Code::kNotFound);
  EXPECT_CODE(q2.Extend(m->receipt, hours(1)), Code::kNotFound);
  EXPECT_EQ(StatsOf(q1).leased, 1);
  EXPECT_EQ(StatsOf(q2).ready, 1);
  EXPECT_OK(q1.Ack(m->receipt));
}

TEST_P(WorkQueueConformance, LeasedMessageIsNotHandedToASecondConsumer) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.lease = seconds(10)}));
  SendOne(q, {.payload = "only"});
  auto first = ClaimOne(q);
  ASSERT_TRUE(first);
  EXPECT_FALSE(ClaimOne(q));
  clock_->Advance(seconds(9));
  EXPECT_FALSE(ClaimOne(q));
  ASSERT_OK_AND_ASSIGN(auto batch, q.Claim({.max = 10}));
  EXPECT_TRUE(batch.empty());
}

TEST_P(WorkQueueConformance, ConcurrentClaimsNeverHandOutAMessageTwice) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  ExpectEachTakenOnce(q, 60, 4, [](WorkQueue consumer) {
    std::vector<std::int64_t> ids;
    for (;;) {
      auto r = consumer.Claim({.max = 4});
      if (!r.ok()) {
        ADD_FAILURE() << r.status().ToString();
        break;
      }
      if (r->empty()) break;
      for (auto& m : *r) ids.push_back(m.id);
    }
    return ids;
  });
}

TEST_P(WorkQueueConformance, ExtendPushesTheLeaseExpiryOut) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.lease = seconds(10)}));
  SendOne(q, {.payload = "long work"});
  const Timestamp start = clock_->Now();
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  clock_->Advance(seconds(5));
  ASSERT_OK_AND_ASSIGN(Timestamp expiry, q.Extend(m->receipt, seconds(20)));
  EXPECT_EQ(Us(expiry), Us(start + seconds(25)));

  clock_->Advance(seconds(6));  // past the original expiry
  EXPECT_FALSE(ClaimOne(q)) << "redelivered despite the extension";
  EXPECT_EQ(StatsOf(q).leased, 1);
  clock_->Advance(seconds(14) - milliseconds(1));  // just before the new one
  EXPECT_FALSE(ClaimOne(q));
  clock_->Advance(milliseconds(2));
  auto again = ClaimOne(q);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->id, m->id);
  EXPECT_EQ(again->attempt, 2);
}

TEST_P(WorkQueueConformance, ExtendedLeaseCanStillBeAcked) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.lease = seconds(10)}));
  SendOne(q, {.payload = "x"});
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  ASSERT_OK(q.Extend(m->receipt, seconds(60)));
  clock_->Advance(seconds(30));
  EXPECT_OK(q.Ack(m->receipt));
  EXPECT_EQ(StatsOf(q).acks, 1);
}

TEST_P(WorkQueueConformance, ExtendWithAnInvalidLeaseIsRejected) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.lease = seconds(10)}));
  SendOne(q, {.payload = "x"});
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  EXPECT_CODE(q.Extend(m->receipt, milliseconds(0)), Code::kInvalidArgument);
  EXPECT_CODE(q.Extend(m->receipt, hours(12) + milliseconds(1)),
              Code::kInvalidArgument);
  // The lease is unchanged: it still runs out after 10 s.
  clock_->Advance(seconds(11));
  EXPECT_TRUE(ClaimOne(q));
}

// --- nack --------------------------------------------------------------------

TEST_P(WorkQueueConformance, NackWithDelayRetriesAfterExactlyThatDelay) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "x"});
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  ASSERT_OK_AND_ASSIGN(NackOutcome outcome,
                       q.Nack(m->receipt, {.delay = seconds(5)}));
  EXPECT_EQ(outcome, NackOutcome::kRetry);
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.delayed, 1);
  EXPECT_EQ(st.leased, 0);
  EXPECT_EQ(st.nacks, 1);

  clock_->Advance(seconds(5) - milliseconds(1));
  EXPECT_FALSE(ClaimOne(q));
  clock_->Advance(milliseconds(1));
  auto retry = ClaimOne(q);
  ASSERT_TRUE(retry);
  EXPECT_EQ(retry->id, m->id);
  EXPECT_EQ(retry->attempt, 2);
}

TEST_P(WorkQueueConformance, NackWithZeroDelayIsReadyAtOnce) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "x"});
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  ASSERT_OK(q.Nack(m->receipt, {.delay = milliseconds(0)}));
  auto retry = ClaimOne(q);
  ASSERT_TRUE(retry);
  EXPECT_EQ(retry->attempt, 2);
}

TEST_P(WorkQueueConformance, NackWithoutDelayBacksOffExponentiallyUpToTheCap) {
  ASSERT_OK_AND_ASSIGN(
      WorkQueue q, store_->CreateQueue("jobs", {.max_attempts = 10,
                                                .lease = hours(1),
                                                .backoff_base = seconds(1),
                                                .backoff_max = seconds(4)}));
  SendOne(q, {.payload = "flaky"});
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  // Nominal delays after attempts 1..5: 1s, 2s, 4s, then capped at 4s. Each
  // is jittered into [nominal/2, nominal].
  const std::vector<Duration> nominal = {seconds(1), seconds(2), seconds(4),
                                         seconds(4), seconds(4)};
  for (size_t i = 0; i < nominal.size(); ++i) {
    SCOPED_TRACE("after attempt " + std::to_string(i + 1));
    ASSERT_EQ(m->attempt, static_cast<int>(i + 1));
    ASSERT_OK_AND_ASSIGN(NackOutcome outcome, q.Nack(m->receipt));
    EXPECT_EQ(outcome, NackOutcome::kRetry);
    const Duration lower = nominal[i] / 2;
    clock_->Advance(lower - milliseconds(1));
    EXPECT_FALSE(ClaimOne(q)) << "ready before half the nominal backoff";
    clock_->Advance(nominal[i] - (lower - milliseconds(1)));
    m = ClaimOne(q);
    ASSERT_TRUE(m) << "not ready after the nominal backoff";
  }
  EXPECT_EQ(m->attempt, 6);
}

TEST_P(WorkQueueConformance, NackWithAnInvalidDelayIsRejected) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "x"});
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  EXPECT_CODE(q.Nack(m->receipt, {.delay = milliseconds(-1)}),
              Code::kInvalidArgument);
  EXPECT_CODE(q.Nack(m->receipt, {.delay = 365 * kDay + milliseconds(1)}),
              Code::kInvalidArgument);
  EXPECT_EQ(StatsOf(q).leased, 1);
  EXPECT_OK(q.Ack(m->receipt));
}

// --- max attempts and dead letters -------------------------------------------

TEST_P(WorkQueueConformance, NackOnTheLastAttemptDeadLettersTheMessage) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.max_attempts = 2}));
  const Timestamp sent_at = clock_->Now();
  std::int64_t id = SendOne(q, {.payload = "poison", .priority = 4});
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  ASSERT_OK_AND_ASSIGN(
      NackOutcome first,
      q.Nack(m->receipt, {.delay = milliseconds(0), .error = "try 1"}));
  EXPECT_EQ(first, NackOutcome::kRetry);
  clock_->Advance(seconds(1));
  m = ClaimOne(q);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->attempt, 2);
  clock_->Advance(seconds(1));
  ASSERT_OK_AND_ASSIGN(NackOutcome last,
                       q.Nack(m->receipt, {.error = "boom: disk on fire"}));
  EXPECT_EQ(last, NackOutcome::kDead);

  auto dead = DeadOf(q);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].id, id);
  EXPECT_EQ(dead[0].payload, "poison");
  EXPECT_EQ(dead[0].priority, 4);
  EXPECT_EQ(dead[0].attempts, 2);
  EXPECT_EQ(dead[0].last_error, "boom: disk on fire");
  EXPECT_EQ(Us(dead[0].enqueued_at), Us(sent_at));
  EXPECT_EQ(Us(dead[0].died_at), Us(clock_->Now()));

  clock_->Advance(hours(1));
  EXPECT_FALSE(ClaimOne(q));
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.dead, 1);
  EXPECT_EQ(st.dead_lettered, 1);
  EXPECT_EQ(st.ready + st.delayed + st.leased, 0);
  EXPECT_CODE(q.Ack(m->receipt), Code::kNotFound);
}

TEST_P(WorkQueueConformance, DeadLetterWithoutNackErrorSaysWhyItDied) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.max_attempts = 1}));
  SendOne(q, {.payload = "x"});
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  ASSERT_OK_AND_ASSIGN(NackOutcome outcome, q.Nack(m->receipt));
  EXPECT_EQ(outcome, NackOutcome::kDead);
  auto dead = DeadOf(q);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_FALSE(dead[0].last_error.empty());
  EXPECT_EQ(dead[0].attempts, 1);
}

TEST_P(WorkQueueConformance, LongNackErrorIsCutToFourKilobytes) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.max_attempts = 1}));
  SendOne(q, {.payload = "x"});
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  const std::string error(10000, 'e');
  ASSERT_OK(q.Nack(m->receipt, {.error = error}));
  auto dead = DeadOf(q);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].last_error, error.substr(0, 4096));
}

TEST_P(WorkQueueConformance,
       LeaseExpiringOnTheLastAttemptDeadLettersTheMessage) {
  ASSERT_OK_AND_ASSIGN(
      WorkQueue q,
      store_->CreateQueue("jobs", {.max_attempts = 2, .lease = seconds(10)}));
  std::int64_t id = SendOne(q, {.payload = "crasher"});
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  clock_->Advance(seconds(11));
  m = ClaimOne(q);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->attempt, 2);
  clock_->Advance(seconds(11));
  EXPECT_FALSE(ClaimOne(q)) << "delivered beyond max_attempts";

  auto dead = DeadOf(q);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].id, id);
  EXPECT_EQ(dead[0].attempts, 2);
  EXPECT_NE(dead[0].last_error.find("lease"), std::string::npos)
      << dead[0].last_error;
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.dead, 1);
  EXPECT_EQ(st.dead_lettered, 1);
  EXPECT_EQ(st.expirations, 2);
  EXPECT_EQ(st.claims, 2);
  EXPECT_EQ(st.ready + st.leased, 0);
}

TEST_P(WorkQueueConformance, DeadLetteredMessageLeavesItsPlaceToTheNext) {
  ASSERT_OK_AND_ASSIGN(
      WorkQueue q,
      store_->CreateQueue("jobs", {.max_attempts = 1, .lease = seconds(10)}));
  SendOne(q, {.payload = "crasher", .priority = 1});
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  SendOne(q, {.payload = "next"});
  clock_->Advance(seconds(11));
  // The expired lease comes first in claim order, but is out of attempts:
  // the claim of one message returns the next one instead of nothing.
  auto next = ClaimOne(q);
  ASSERT_TRUE(next);
  EXPECT_EQ(next->payload, "next");
  EXPECT_EQ(DeadOf(q).size(), 1u);
}

TEST_P(WorkQueueConformance, RedriveMovesADeadLetterBackWithFreshAttempts) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.max_attempts = 1}));
  std::int64_t a = SendOne(q, {.payload = "a", .priority = 2});
  std::int64_t b = SendOne(q, {.payload = "b"});
  for (int i = 0; i < 2; ++i) {
    auto m = ClaimOne(q);
    ASSERT_TRUE(m);
    ASSERT_OK(q.Nack(m->receipt, {.error = "bad"}));
  }
  ASSERT_EQ(DeadOf(q).size(), 2u);

  std::vector<std::int64_t> ids = {a};
  ASSERT_OK_AND_ASSIGN(std::int64_t moved, q.Redrive(ids));
  EXPECT_EQ(moved, 1);
  auto dead = DeadOf(q);
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0].id, b);
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.ready, 1);
  EXPECT_EQ(st.dead, 1);

  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->id, a);
  EXPECT_EQ(m->payload, "a");
  EXPECT_EQ(m->priority, 2);
  EXPECT_EQ(m->attempt, 1);
  EXPECT_OK(q.Ack(m->receipt));
}

TEST_P(WorkQueueConformance, RedriveAllMovesEveryDeadLetterBack) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.max_attempts = 1}));
  std::set<std::int64_t> sent;
  for (int i = 0; i < 3; ++i) sent.insert(SendOne(q, {.payload = "x"}));
  for (int i = 0; i < 3; ++i) {
    auto m = ClaimOne(q);
    ASSERT_TRUE(m);
    ASSERT_OK(q.Nack(m->receipt));
  }
  ASSERT_OK_AND_ASSIGN(std::int64_t moved, q.RedriveAll());
  EXPECT_EQ(moved, 3);
  EXPECT_TRUE(DeadOf(q).empty());
  std::set<std::int64_t> claimed;
  for (auto& m : ClaimAll(q)) {
    EXPECT_EQ(m.attempt, 1);
    claimed.insert(m.id);
  }
  EXPECT_EQ(claimed, sent);
}

TEST_P(WorkQueueConformance, RedriveOfAnUnknownIdMovesNothing) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.max_attempts = 1}));
  std::int64_t id = SendOne(q, {.payload = "x"});
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  ASSERT_OK(q.Nack(m->receipt));
  std::int64_t ready_id = SendOne(q, {.payload = "ready"});
  std::vector<std::int64_t> ids = {id + 1000, ready_id};
  ASSERT_OK_AND_ASSIGN(std::int64_t moved, q.Redrive(ids));
  EXPECT_EQ(moved, 0);
  EXPECT_EQ(DeadOf(q).size(), 1u);
  EXPECT_EQ(StatsOf(q).ready, 1);
}

TEST_P(WorkQueueConformance, RedriveOfAnotherQueuesDeadLetterMovesNothing) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q1,
                       store_->CreateQueue("one", {.max_attempts = 1}));
  ASSERT_OK_AND_ASSIGN(WorkQueue q2,
                       store_->CreateQueue("two", {.max_attempts = 1}));
  std::int64_t id = SendOne(q1, {.payload = "x"});
  auto m = ClaimOne(q1);
  ASSERT_TRUE(m);
  ASSERT_OK(q1.Nack(m->receipt));
  std::vector<std::int64_t> ids = {id};
  ASSERT_OK_AND_ASSIGN(std::int64_t moved, q2.Redrive(ids));
  EXPECT_EQ(moved, 0);
  ASSERT_OK_AND_ASSIGN(moved, q2.RedriveAll());
  EXPECT_EQ(moved, 0);
  EXPECT_EQ(DeadOf(q1).size(), 1u);
  EXPECT_EQ(StatsOf(q2).ready, 0);
}

TEST_P(WorkQueueConformance, RedriveWithoutIdsIsRejected) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  std::vector<std::int64_t> none;
  EXPECT_CODE(q.Redrive(none), Code::kInvalidArgument);
}

TEST_P(WorkQueueConformance, PurgeDeadDeletesEveryDeadLetter) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.max_attempts = 1}));
  for (int i = 0; i < 2; ++i) SendOne(q, {.payload = "x"});
  SendOne(q, {.payload = "alive"});
  for (int i = 0; i < 2; ++i) {
    auto m = ClaimOne(q);
    ASSERT_TRUE(m);
    ASSERT_OK(q.Nack(m->receipt));
  }
  ASSERT_OK_AND_ASSIGN(std::int64_t purged, q.PurgeDead());
  EXPECT_EQ(purged, 2);
  EXPECT_TRUE(DeadOf(q).empty());
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.dead, 0);
  EXPECT_EQ(st.ready, 1);
}

TEST_P(WorkQueueConformance, ListDeadPagesInIdOrder) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.max_attempts = 1}));
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 5; ++i) {
    // Descending priority so that claim order differs from id order.
    ids.push_back(SendOne(q, {.payload = "x", .priority = -i}));
  }
  for (auto& m : ClaimAll(q)) ASSERT_OK(q.Nack(m.receipt));
  ASSERT_OK_AND_ASSIGN(auto page1, q.ListDead({.limit = 2}));
  ASSERT_EQ(page1.size(), 2u);
  EXPECT_EQ(page1[0].id, ids[0]);
  EXPECT_EQ(page1[1].id, ids[1]);
  ASSERT_OK_AND_ASSIGN(auto page2,
                       q.ListDead({.limit = 10, .after_id = page1[1].id}));
  ASSERT_EQ(page2.size(), 3u);
  EXPECT_EQ(page2[0].id, ids[2]);
  EXPECT_EQ(page2[2].id, ids[4]);
  EXPECT_CODE(q.ListDead({.limit = 0}), Code::kInvalidArgument);
  EXPECT_CODE(q.ListDead({.limit = 10001}), Code::kInvalidArgument);
}

// --- archive -----------------------------------------------------------------

TEST_P(WorkQueueConformance, AckOnAnArchiveQueueKeepsTheMessage) {
  ASSERT_OK_AND_ASSIGN(
      WorkQueue q,
      store_->CreateQueue("jobs", {.lease = seconds(10), .archive = true}));
  const Timestamp sent_at = clock_->Now();
  std::int64_t id = SendOne(q, {.payload = "report", .priority = 7});
  auto m = ClaimOne(q, {.worker = "host-a/pid-1"});
  ASSERT_TRUE(m);
  clock_->Advance(seconds(11));
  m = ClaimOne(q, {.worker = "host-b/pid-2"});
  ASSERT_TRUE(m);
  clock_->Advance(seconds(3));
  ASSERT_OK(q.Ack(m->receipt));

  ASSERT_OK_AND_ASSIGN(auto archived, q.ListArchive());
  ASSERT_EQ(archived.size(), 1u);
  EXPECT_EQ(archived[0].id, id);
  EXPECT_EQ(archived[0].payload, "report");
  EXPECT_EQ(archived[0].priority, 7);
  EXPECT_EQ(archived[0].attempts, 2);
  EXPECT_EQ(archived[0].worker, "host-b/pid-2");
  EXPECT_EQ(Us(archived[0].enqueued_at), Us(sent_at));
  EXPECT_EQ(Us(archived[0].completed_at), Us(clock_->Now()));
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.archived, 1);
  EXPECT_EQ(st.ready + st.leased + st.delayed, 0);
  EXPECT_FALSE(ClaimOne(q));
}

TEST_P(WorkQueueConformance, AckOnAQueueWithoutArchiveDeletesTheMessage) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "x"});
  auto m = ClaimOne(q, {.worker = "w"});
  ASSERT_TRUE(m);
  ASSERT_OK(q.Ack(m->receipt));
  ASSERT_OK_AND_ASSIGN(auto archived, q.ListArchive());
  EXPECT_TRUE(archived.empty());
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.archived, 0);
  EXPECT_EQ(st.ready + st.leased + st.delayed + st.dead, 0);
  clock_->Advance(hours(24));
  EXPECT_FALSE(ClaimOne(q));
}

TEST_P(WorkQueueConformance, PruneArchiveRemovesEntriesOlderThanRetention) {
  ASSERT_OK_AND_ASSIGN(
      WorkQueue q,
      store_->CreateQueue("jobs", {.archive = true, .retention = hours(1)}));
  SendOne(q, {.payload = "old"});
  SendOne(q, {.payload = "new"});
  auto old_msg = ClaimOne(q);
  ASSERT_TRUE(old_msg);
  ASSERT_OK(q.Ack(old_msg->receipt));
  clock_->Advance(minutes(30));
  auto new_msg = ClaimOne(q);
  ASSERT_TRUE(new_msg);
  ASSERT_OK(q.Ack(new_msg->receipt));

  clock_->Advance(minutes(30) - milliseconds(1));  // old one: just under 1h
  ASSERT_OK_AND_ASSIGN(std::int64_t pruned, q.PruneArchive());
  EXPECT_EQ(pruned, 0);
  clock_->Advance(milliseconds(2));  // old one: just over 1h
  ASSERT_OK_AND_ASSIGN(pruned, q.PruneArchive());
  EXPECT_EQ(pruned, 1);
  ASSERT_OK_AND_ASSIGN(auto archived, q.ListArchive());
  ASSERT_EQ(archived.size(), 1u);
  EXPECT_EQ(archived[0].payload, "new");
  EXPECT_EQ(StatsOf(q).archived, 1);
}

TEST_P(WorkQueueConformance, AcksPruneArchiveEntriesPastRetention) {
  ASSERT_OK_AND_ASSIGN(
      WorkQueue q,
      store_->CreateQueue("jobs", {.archive = true, .retention = hours(1)}));
  SendOne(q, {.payload = "old"});
  SendOne(q, {.payload = "new"});
  auto old_msg = ClaimOne(q);
  ASSERT_TRUE(old_msg);
  ASSERT_OK(q.Ack(old_msg->receipt));
  clock_->Advance(hours(2));
  // Retention holds without anyone calling PruneArchive: a later ack (here
  // through a fresh handle, which has not pruned yet) removes the old entry.
  ASSERT_OK_AND_ASSIGN(WorkQueue other, store_->Queue("jobs"));
  auto new_msg = ClaimOne(other);
  ASSERT_TRUE(new_msg);
  ASSERT_OK(other.Ack(new_msg->receipt));
  ASSERT_OK_AND_ASSIGN(auto archived, q.ListArchive());
  ASSERT_EQ(archived.size(), 1u);
  EXPECT_EQ(archived[0].payload, "new");
}

// --- dedup keys --------------------------------------------------------------

TEST_P(WorkQueueConformance, DedupKeyOfAReadyMessageReturnsItsId) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(SendResult first,
                       q.Send({.payload = "first", .dedup_key = "order-1"}));
  EXPECT_FALSE(first.duplicate);
  ASSERT_OK_AND_ASSIGN(SendResult second,
                       q.Send({.payload = "second", .dedup_key = "order-1"}));
  EXPECT_TRUE(second.duplicate);
  EXPECT_EQ(second.id, first.id);
  EXPECT_EQ(StatsOf(q).ready, 1);
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->payload, "first");
  EXPECT_FALSE(ClaimOne(q));
}

TEST_P(WorkQueueConformance, DedupKeyOfADelayedMessageReturnsItsId) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(
      SendResult first,
      q.Send({.payload = "a", .delay = hours(1), .dedup_key = "k"}));
  ASSERT_OK_AND_ASSIGN(SendResult second,
                       q.Send({.payload = "b", .dedup_key = "k"}));
  EXPECT_TRUE(second.duplicate);
  EXPECT_EQ(second.id, first.id);
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.delayed, 1);
  EXPECT_EQ(st.ready, 0);
}

TEST_P(WorkQueueConformance, DedupKeyOfALeasedMessageReturnsItsId) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(SendResult first,
                       q.Send({.payload = "a", .dedup_key = "k"}));
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  ASSERT_OK_AND_ASSIGN(SendResult second,
                       q.Send({.payload = "b", .dedup_key = "k"}));
  EXPECT_TRUE(second.duplicate);
  EXPECT_EQ(second.id, first.id);
  EXPECT_FALSE(ClaimOne(q));
}

TEST_P(WorkQueueConformance, DedupKeyIsFreeAgainAfterAck) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(SendResult first,
                       q.Send({.payload = "a", .dedup_key = "k"}));
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  ASSERT_OK(q.Ack(m->receipt));
  ASSERT_OK_AND_ASSIGN(SendResult again,
                       q.Send({.payload = "b", .dedup_key = "k"}));
  EXPECT_FALSE(again.duplicate);
  EXPECT_NE(again.id, first.id);
  auto m2 = ClaimOne(q);
  ASSERT_TRUE(m2);
  EXPECT_EQ(m2->payload, "b");
}

TEST_P(WorkQueueConformance, DedupKeysAreScopedToTheirQueue) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q1, store_->CreateQueue("one", {}));
  ASSERT_OK_AND_ASSIGN(WorkQueue q2, store_->CreateQueue("two", {}));
  ASSERT_OK_AND_ASSIGN(SendResult a,
                       q1.Send({.payload = "a", .dedup_key = "k"}));
  ASSERT_OK_AND_ASSIGN(SendResult b,
                       q2.Send({.payload = "b", .dedup_key = "k"}));
  EXPECT_FALSE(b.duplicate);
  EXPECT_NE(a.id, b.id);
  EXPECT_EQ(StatsOf(q2).ready, 1);
}

TEST_P(WorkQueueConformance, DuplicateKeysInOneBatchStoreOneMessage) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  std::vector<Message> batch = {{.payload = "a", .dedup_key = "k"},
                                {.payload = "b"},
                                {.payload = "c", .dedup_key = "k"}};
  ASSERT_OK_AND_ASSIGN(auto results, q.SendBatch(batch));
  ASSERT_EQ(results.size(), 3u);
  EXPECT_FALSE(results[0].duplicate);
  EXPECT_FALSE(results[1].duplicate);
  EXPECT_TRUE(results[2].duplicate);
  EXPECT_EQ(results[2].id, results[0].id);
  EXPECT_EQ(ClaimAllPayloads(q), (std::vector<std::string>{"a", "b"}));
}

// --- stats -------------------------------------------------------------------

TEST_P(WorkQueueConformance, StatsCountMessagesByStateAndEveryOperation) {
  ASSERT_OK_AND_ASSIGN(
      WorkQueue q,
      store_->CreateQueue(
          "jobs", {.max_attempts = 1, .lease = seconds(10), .archive = true}));
  for (const char* p : {"a", "b", "c", "d", "e"}) SendOne(q, {.payload = p});
  SendOne(q, {.payload = "f", .delay = hours(1)});
  auto a = ClaimOne(q);
  ASSERT_TRUE(a);
  ASSERT_OK(q.Ack(a->receipt));
  auto b = ClaimOne(q);
  ASSERT_TRUE(b);
  ASSERT_OK_AND_ASSIGN(NackOutcome outcome, q.Nack(b->receipt));
  EXPECT_EQ(outcome, NackOutcome::kDead);
  auto c = ClaimOne(q);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->payload, "c");

  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.name, "jobs");
  EXPECT_EQ(st.ready, 2);     // d, e
  EXPECT_EQ(st.delayed, 1);   // f
  EXPECT_EQ(st.leased, 1);    // c
  EXPECT_EQ(st.dead, 1);      // b
  EXPECT_EQ(st.archived, 1);  // a
  EXPECT_EQ(st.sends, 6);
  EXPECT_EQ(st.claims, 3);
  EXPECT_EQ(st.acks, 1);
  EXPECT_EQ(st.nacks, 1);
  EXPECT_EQ(st.expirations, 0);
  EXPECT_EQ(st.dead_lettered, 1);

  // c's lease runs out: it counts as ready again until claimed.
  clock_->Advance(seconds(11));
  st = StatsOf(q);
  EXPECT_EQ(st.ready, 3);
  EXPECT_EQ(st.leased, 0);

  // Claiming everything leases d and e and buries c, out of attempts.
  ASSERT_OK_AND_ASSIGN(auto claimed, q.Claim({.max = 10}));
  EXPECT_EQ(claimed.size(), 2u);
  st = StatsOf(q);
  EXPECT_EQ(st.ready, 0);
  EXPECT_EQ(st.delayed, 1);
  EXPECT_EQ(st.leased, 2);
  EXPECT_EQ(st.dead, 2);
  EXPECT_EQ(st.archived, 1);
  EXPECT_EQ(st.sends, 6);
  EXPECT_EQ(st.claims, 5);
  EXPECT_EQ(st.acks, 1);
  EXPECT_EQ(st.nacks, 1);
  EXPECT_EQ(st.expirations, 1);
  EXPECT_EQ(st.dead_lettered, 2);
}

TEST_P(WorkQueueConformance, OldestReadyAgeFollowsTheClock) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  EXPECT_EQ(StatsOf(q).oldest_ready_age.count(), 0);
  SendOne(q, {.payload = "old"});
  clock_->Advance(seconds(5));
  SendOne(q, {.payload = "new"});
  SendOne(q, {.payload = "not ready", .delay = hours(1)});
  EXPECT_EQ(StatsOf(q).oldest_ready_age.count(), 5000);
  clock_->Advance(seconds(2));
  EXPECT_EQ(StatsOf(q).oldest_ready_age.count(), 7000);
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->payload, "old");
  EXPECT_EQ(StatsOf(q).oldest_ready_age.count(), 2000);
  m = ClaimOne(q);
  ASSERT_TRUE(m);
  EXPECT_EQ(StatsOf(q).oldest_ready_age.count(), 0);
}

// --- AckBatch ----------------------------------------------------------------

TEST_P(WorkQueueConformance, AckBatchReportsAStatusPerReceipt) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.lease = seconds(10)}));
  SendOne(q, {.payload = "retried"});
  auto stale = ClaimOne(q);
  ASSERT_TRUE(stale);
  clock_->Advance(seconds(11));
  auto fresh = ClaimOne(q);  // the same message, claimed again
  ASSERT_TRUE(fresh);
  ASSERT_EQ(fresh->id, stale->id);
  SendOne(q, {.payload = "a"});
  SendOne(q, {.payload = "b"});
  auto good1 = ClaimOne(q);
  auto good2 = ClaimOne(q);
  ASSERT_TRUE(good1 && good2);

  std::vector<std::string> receipts = {good1->receipt, stale->receipt, "1-1-zz",
                                       good2->receipt};
  ASSERT_OK_AND_ASSIGN(auto statuses, q.AckBatch(receipts));
  ASSERT_EQ(statuses.size(), 4u);
  EXPECT_OK(statuses[0]);
  EXPECT_CODE(statuses[1], Code::kFailedPrecondition);
  EXPECT_CODE(statuses[2], Code::kInvalidArgument);
  EXPECT_OK(statuses[3]);

  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.acks, 2);
  EXPECT_EQ(st.leased, 1);  // only `fresh` is still held
  EXPECT_CODE(q.Ack(good1->receipt), Code::kNotFound);
  EXPECT_OK(q.Ack(fresh->receipt));
}

// --- ack and claim next
// -------------------------------------------------------

TEST_P(WorkQueueConformance, AckAndClaimAcksOneAndLeasesTheNext) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "first"});
  SendOne(q, {.payload = "second"});
  SendOne(q, {.payload = "third", .priority = -1});
  auto first = ClaimOne(q);
  ASSERT_TRUE(first);
  ASSERT_OK_AND_ASSIGN(auto next, q.AckAndClaim(first->receipt, {.max = 1}));
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].payload, "second");
  EXPECT_EQ(next[0].attempt, 1);
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.acks, 1);
  EXPECT_EQ(st.claims, 2);
  EXPECT_EQ(st.leased, 1);
  EXPECT_EQ(st.ready, 1);
  // The acked message is gone; the new receipt works like any other.
  EXPECT_CODE(q.Ack(first->receipt), Code::kNotFound);
  ASSERT_OK_AND_ASSIGN(auto last, q.AckAndClaim(next[0].receipt, {.max = 5}));
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].payload, "third");
  ASSERT_OK_AND_ASSIGN(auto none, q.AckAndClaim(last[0].receipt));
  EXPECT_TRUE(none.empty());
  st = StatsOf(q);
  EXPECT_EQ(st.acks, 3);
  EXPECT_EQ(st.leased + st.ready + st.delayed, 0);
}

TEST_P(WorkQueueConformance, AckAndClaimOnAStaleReceiptClaimsNothing) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.lease = seconds(10)}));
  SendOne(q, {.payload = "slow"});
  auto slow = ClaimOne(q);
  ASSERT_TRUE(slow);
  clock_->Advance(seconds(11));
  auto fast = ClaimOne(q);  // the same message, claimed again
  ASSERT_TRUE(fast);
  SendOne(q, {.payload = "waiting"});

  auto r = q.AckAndClaim(slow->receipt, {.max = 10});
  EXPECT_CODE(r, Code::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("stale"), std::string::npos)
      << r.status().ToString();
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.ready, 1) << "a refused ack must not claim";
  EXPECT_EQ(st.leased, 1);
  EXPECT_EQ(st.acks, 0);
  // A malformed receipt, and one of a message that is gone, claim nothing
  // either.
  EXPECT_CODE(q.AckAndClaim("1-1-zz"), Code::kInvalidArgument);
  EXPECT_OK(q.Ack(fast->receipt));
  EXPECT_CODE(q.AckAndClaim(fast->receipt), Code::kNotFound);
  EXPECT_EQ(StatsOf(q).ready, 1);
  // Bad claim options are refused before the ack.
  auto held = ClaimOne(q);
  ASSERT_TRUE(held);
  EXPECT_CODE(q.AckAndClaim(held->receipt, {.max = 0}), Code::kInvalidArgument);
  EXPECT_EQ(StatsOf(q).leased, 1);
  EXPECT_OK(q.Ack(held->receipt));
}

TEST_P(WorkQueueConformance, AckAndClaimOnAnArchiveQueueArchives) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.archive = true}));
  SendOne(q, {.payload = "kept"});
  auto m = ClaimOne(q, {.worker = "w1"});
  ASSERT_TRUE(m);
  ASSERT_OK_AND_ASSIGN(auto next, q.AckAndClaim(m->receipt));
  EXPECT_TRUE(next.empty());
  ASSERT_OK_AND_ASSIGN(auto archived, q.ListArchive());
  ASSERT_EQ(archived.size(), 1u);
  EXPECT_EQ(archived[0].payload, "kept");
  EXPECT_EQ(archived[0].worker, "w1");
}

TEST_P(WorkQueueConformance, ConcurrentAckAndClaimWorkersTakeEachMessageOnce) {
  // Concurrent claims of one queue are merged into one engine claim (and
  // their acks into one ack): every message still goes to one worker once,
  // and every ack lands.
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  constexpr int kMessages = 300;
  ExpectEachTakenOnce(q, kMessages, 8, [](WorkQueue consumer) {
    std::vector<std::int64_t> ids;
    auto r = consumer.Claim();
    while (r.ok() && !r->empty()) {
      EXPECT_EQ(r->size(), 1u);
      ids.push_back(r->front().id);
      r = consumer.AckAndClaim(r->front().receipt);
    }
    EXPECT_OK(r);
    return ids;
  });
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.acks, kMessages);
  EXPECT_EQ(st.claims, kMessages);
  EXPECT_EQ(st.ready + st.leased + st.delayed, 0);
}

// --- claims without a waiting thread (ClaimThen)
// -------------------------------------------------------

// Threads that run what the store hands them (Store::SetRunner), as a
// server's database pool does; ended, then cleared from the store.
class Runner {
 public:
  Runner(Store& store, int threads) : store_(store) {
    threads_.emplace(threads);
    store_.SetRunner(threads_->AsRunner());
  }
  ~Runner() {
    threads_.reset();
    store_.SetRunner(nullptr);
  }
  int posted() { return threads_->posted(); }

 private:
  Store& store_;
  std::optional<TaskThreads> threads_;
};

struct ClaimedThenResult {
  Result<std::vector<ClaimedMessage>> messages = Status::Internal("unset");
  ClaimNote note;
};

// ClaimThen's answer, waited for (up to a minute: a lost answer fails the
// test rather than hanging it).
ClaimedThenResult ClaimThenAndWait(WorkQueue& q, std::string_view ack,
                                   const ClaimOptions& o) {
  auto promise = std::make_shared<std::promise<ClaimedThenResult>>();
  auto answer = promise->get_future();
  q.ClaimThen(ack, o,
              [promise](Result<std::vector<ClaimedMessage>> r, ClaimNote n) {
                promise->set_value({std::move(r), std::move(n)});
              });
  if (answer.wait_for(minutes(1)) != std::future_status::ready) {
    ADD_FAILURE() << "ClaimThen never answered";
    return {};
  }
  return answer.get();
}

TEST_P(WorkQueueConformance, ClaimThenClaimsAndAcksAsAckAndClaimDoes) {
  Runner runner(*store_, 2);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "first"});
  SendOne(q, {.payload = "second"});
  auto first = ClaimThenAndWait(q, "", {.max = 1});
  ASSERT_OK(first.messages);
  ASSERT_EQ(first.messages->size(), 1u);
  EXPECT_EQ(first.messages->front().payload, "first");
  auto next = ClaimThenAndWait(q, first.messages->front().receipt, {.max = 5});
  ASSERT_OK(next.messages);
  ASSERT_EQ(next.messages->size(), 1u);
  EXPECT_EQ(next.messages->front().payload, "second");
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.acks, 1);
  EXPECT_EQ(st.leased, 1);
  // The acked receipt is spent; the new one works like any other.
  EXPECT_CODE(q.Ack(first.messages->front().receipt), Code::kNotFound);
  auto none = ClaimThenAndWait(q, next.messages->front().receipt, {});
  ASSERT_OK(none.messages);
  EXPECT_TRUE(none.messages->empty());
  st = StatsOf(q);
  EXPECT_EQ(st.acks, 2);
  EXPECT_EQ(st.leased + st.ready, 0);
}

TEST_P(WorkQueueConformance, ClaimThenRefusesWhatAckAndClaimRefuses) {
  Runner runner(*store_, 2);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "held"});
  EXPECT_CODE(ClaimThenAndWait(q, "1-1-zz", {}).messages,
              Code::kInvalidArgument);
  EXPECT_CODE(ClaimThenAndWait(q, "", {.max = 0}).messages,
              Code::kInvalidArgument);
  // A waiting claim parks a thread: not this call's.
  EXPECT_CODE(ClaimThenAndWait(q, "", {.wait = seconds(1)}).messages,
              Code::kInvalidArgument);
  EXPECT_EQ(StatsOf(q).ready, 1) << "a refused call claimed";
  auto held = ClaimOne(q);
  ASSERT_TRUE(held);
  ASSERT_OK(q.Ack(held->receipt));
  // A receipt of a message that is gone: nothing is claimed.
  SendOne(q, {.payload = "next"});
  EXPECT_CODE(ClaimThenAndWait(q, held->receipt, {}).messages, Code::kNotFound);
  EXPECT_EQ(StatsOf(q).ready, 1);
}

TEST_P(WorkQueueConformance, ClaimThenOnAPausedQueueAcksAndSaysSo) {
  Runner runner(*store_, 2);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "a"});
  SendOne(q, {.payload = "b"});
  auto a = ClaimOne(q);
  ASSERT_TRUE(a);
  ASSERT_OK(q.Pause());
  auto r = ClaimThenAndWait(q, a->receipt, {});
  ASSERT_OK(r.messages);
  EXPECT_TRUE(r.messages->empty());
  EXPECT_TRUE(r.note.paused);
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.acks, 1) << "the ack a paused claim carries is done";
  EXPECT_EQ(st.ready, 1);
}

TEST_P(WorkQueueConformance, ClaimThenKeepsWhatFollowsTheCommit) {
  // What follows a claim's commit and touches the store (an archive of the
  // acked job; a job's own timeout, shorter than the lease) runs on the
  // runner, and its effects are in the answer.
  Runner runner(*store_, 2);
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.archive = true}));
  SendOne(q, {.payload = "kept"});
  SendOne(q, {.payload = "short", .timeout = seconds(5)});
  auto kept = ClaimThenAndWait(q, "", {.max = 1, .worker = "w1"});
  ASSERT_OK(kept.messages);
  ASSERT_EQ(kept.messages->size(), 1u);
  auto before = runner.posted();
  auto next = ClaimThenAndWait(q, kept.messages->front().receipt,
                               {.max = 1, .lease = minutes(10)});
  ASSERT_OK(next.messages);
  ASSERT_EQ(next.messages->size(), 1u);
  EXPECT_GT(runner.posted(), before);
  const ClaimedMessage& m = next.messages->front();
  EXPECT_EQ(m.payload, "short");
  EXPECT_LE(m.lease_expires_at - clock_->Now(), seconds(5))
      << "the job's timeout did not shorten its lease";
  ASSERT_OK_AND_ASSIGN(auto archived, q.ListArchive());
  ASSERT_EQ(archived.size(), 1u);
  EXPECT_EQ(archived[0].payload, "kept");
}

TEST_P(WorkQueueConformance, ClaimThenWithoutARunnerAnswersBeforeReturning) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "only"});
  std::optional<Result<std::vector<ClaimedMessage>>> got;
  q.ClaimThen("", {}, [&](Result<std::vector<ClaimedMessage>> r, ClaimNote) {
    got = std::move(r);
  });
  ASSERT_TRUE(got.has_value());
  ASSERT_OK(*got);
  ASSERT_EQ((*got)->size(), 1u);
  EXPECT_EQ((*got)->front().payload, "only");
}

TEST_P(WorkQueueConformance,
       ClaimThenBesideBlockingCallersTakesEachMessageOnce) {
  // Workers acking and claiming with ClaimThen beside others with
  // AckAndClaim, on a runner of two threads (fewer than the callers):
  // every message goes to one worker once, and every ack lands.
  Runner runner(*store_, 2);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  constexpr int kMessages = 300;
  std::atomic<int> next_worker{0};
  ExpectEachTakenOnce(q, kMessages, 8, [&](WorkQueue consumer) {
    std::vector<std::int64_t> ids;
    const bool blocking = next_worker++ % 2 == 0;
    std::string ack;
    for (;;) {
      Result<std::vector<ClaimedMessage>> r =
          blocking
              ? (ack.empty() ? consumer.Claim() : consumer.AckAndClaim(ack))
              : ClaimThenAndWait(consumer, ack, {}).messages;
      EXPECT_OK(r);
      if (!r.ok() || r->empty()) break;
      EXPECT_EQ(r->size(), 1u);
      ids.push_back(r->front().id);
      ack = r->front().receipt;
    }
    return ids;
  });
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.acks, kMessages);
  EXPECT_EQ(st.ready + st.leased + st.delayed, 0);
}

TEST_P(WorkQueueConformance, AckAndClaimWaitsAfterCommittingTheAck) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "only"});
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  auto waiting = std::async(std::launch::async, [&]() {
    return q.AckAndClaim(m->receipt, {.wait = seconds(30)});
  });
  // The ack is visible while the call still waits for a message.
  for (;;) {
    if (StatsOf(q).acks == 1) break;
    ASSERT_EQ(waiting.wait_for(milliseconds(5)), std::future_status::timeout)
        << "returned before a message was sent";
  }
  ASSERT_OK(q.Send({.payload = "wake up"}));
  auto got = waiting.get();
  ASSERT_OK(got);
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].payload, "wake up");
}

// --- workers
// -------------------------------------------------------------------

TEST_P(WorkQueueConformance, WorkerHandsOutOneAtATimeAndAcksWithTheNextClaim) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  for (const char* p : {"a", "b", "c", "d", "e"}) SendOne(q, {.payload = p});
  Worker w(q, {.prefetch = 2});
  std::vector<std::string> got;
  ASSERT_OK_AND_ASSIGN(auto m, w.Next());
  ASSERT_TRUE(m);
  got.push_back(m->payload);
  // One claim of two: one handed out, one kept.
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.claims, 2);
  EXPECT_EQ(st.leased, 2);
  EXPECT_EQ(w.prefetched(), 1u);
  ASSERT_OK(w.Done(*m));
  EXPECT_EQ(StatsOf(q).acks, 0) << "the ack waits for the next claim";
  ASSERT_OK_AND_ASSIGN(m, w.Next());
  ASSERT_TRUE(m);
  got.push_back(m->payload);
  EXPECT_EQ(StatsOf(q).claims, 2) << "handed out from the prefetched";
  ASSERT_OK(w.Done(*m));
  // The next claim commits both acks.
  ASSERT_OK_AND_ASSIGN(m, w.Next());
  ASSERT_TRUE(m);
  got.push_back(m->payload);
  st = StatsOf(q);
  EXPECT_EQ(st.acks, 2);
  EXPECT_EQ(st.claims, 4);
  ASSERT_OK(w.Done(*m));
  while (true) {
    ASSERT_OK_AND_ASSIGN(m, w.Next());
    if (!m) break;
    got.push_back(m->payload);
    ASSERT_OK(w.Done(*m));
  }
  EXPECT_EQ(got, (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  // The last claim found nothing and committed the acks before it.
  st = StatsOf(q);
  EXPECT_EQ(st.acks, 5);
  EXPECT_EQ(st.leased + st.ready, 0);
  EXPECT_EQ(w.refused_acks(), 0);
}

TEST_P(WorkQueueConformance, WorkerFlushCommitsItsAcksAndReportsRefusals) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.lease = seconds(10)}));
  SendOne(q, {.payload = "slow"});
  Worker w(q, {.prefetch = 1});
  ASSERT_OK_AND_ASSIGN(auto slow, w.Next());
  ASSERT_TRUE(slow);
  // The lease runs out and another consumer takes the message.
  clock_->Advance(seconds(11));
  auto other = ClaimOne(q);
  ASSERT_TRUE(other);
  ASSERT_EQ(other->id, slow->id);
  SendOne(q, {.payload = "fine"});
  ASSERT_OK(w.Done(*slow));
  EXPECT_CODE(w.Flush(), Code::kFailedPrecondition);
  EXPECT_EQ(w.refused_acks(), 1);
  EXPECT_CODE(w.last_refusal(), Code::kFailedPrecondition);
  EXPECT_EQ(StatsOf(q).acks, 0);
  // Refusals of deferred acks do not stop the next claim.
  ASSERT_OK_AND_ASSIGN(auto fine, w.Next());
  ASSERT_TRUE(fine);
  EXPECT_EQ(fine->payload, "fine");
  ASSERT_OK(w.Done(*fine));
  ASSERT_OK(w.Flush());
  EXPECT_EQ(StatsOf(q).acks, 1);
  EXPECT_CODE(w.Done(ClaimedMessage{.receipt = "bogus"}),
              Code::kInvalidArgument);
}

TEST_P(WorkQueueConformance, WorkerCloseGivesPrefetchedMessagesBackUnspent) {
  // One attempt only: a message given back must not come back dead.
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.max_attempts = 1}));
  for (const char* p : {"a", "b", "c"}) SendOne(q, {.payload = p});
  Worker w(q, {.prefetch = 3});
  ASSERT_OK_AND_ASSIGN(auto a, w.Next());
  ASSERT_TRUE(a);
  EXPECT_EQ(w.prefetched(), 2u);
  ASSERT_OK(w.Done(*a));
  ASSERT_OK(w.Close());
  EXPECT_EQ(w.prefetched(), 0u);
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.acks, 1);
  EXPECT_EQ(st.ready, 2) << "given back at once";
  EXPECT_EQ(st.leased, 0);
  EXPECT_EQ(st.claims, 1) << "a message given back was never handed out";
  EXPECT_EQ(st.nacks, 0);
  auto rest = ClaimAll(q);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0].payload, "b");
  EXPECT_EQ(rest[0].attempt, 1) << "its attempt was returned";
  EXPECT_EQ(StatsOf(q).dead, 0);
}

TEST_P(WorkQueueConformance, WorkerWithBadOptionsRefusesEveryCall) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "x"});
  Worker zero(q, {.prefetch = 0});
  EXPECT_CODE(zero.Next(), Code::kInvalidArgument);
  Worker huge(q, {.prefetch = 1001});
  EXPECT_CODE(huge.Next(), Code::kInvalidArgument);
  Worker w(q, {});
  EXPECT_CODE(w.Next(hours(2)), Code::kInvalidArgument);
  EXPECT_EQ(StatsOf(q).claims, 0);
}

TEST_P(WorkQueueConformance, WorkerRenewsTheLeaseOfAMessageItHeldLong) {
  std::unique_ptr<TestDatabase> db;
  std::unique_ptr<Store> store = OpenRealClockStore(db);
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "a"});
  SendOne(q, {.payload = "b"});
  constexpr auto kLease = milliseconds(600);
  Worker w(q, {.prefetch = 2, .lease = kLease});
  ASSERT_OK_AND_ASSIGN(auto a, w.Next());
  ASSERT_TRUE(a);
  const Timestamp first_expiry = a->lease_expires_at;
  // Working on "a" for more than half the lease...
  std::this_thread::sleep_for(kLease / 2 + milliseconds(50));
  ASSERT_OK(w.Done(*a));
  // ...so "b", prefetched with it, is renewed before it is handed out.
  ASSERT_OK_AND_ASSIGN(auto b, w.Next());
  ASSERT_TRUE(b);
  EXPECT_EQ(b->payload, "b");
  EXPECT_GE(b->lease_expires_at - first_expiry, kLease / 2)
      << "handed out with the lease of its claim";
  ASSERT_OK(w.Done(*b));
  ASSERT_OK(w.Close());
  ASSERT_OK_AND_ASSIGN(auto st, q.Stats());
  EXPECT_EQ(st.acks, 2);
}

TEST_P(WorkQueueConformance, AckBatchWithTheSameReceiptTwiceAcksItOnce) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "a"});
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  std::vector<std::string> receipts = {m->receipt, m->receipt};
  ASSERT_OK_AND_ASSIGN(auto statuses, q.AckBatch(receipts));
  ASSERT_EQ(statuses.size(), 2u);
  EXPECT_OK(statuses[0]);
  EXPECT_CODE(statuses[1], Code::kNotFound);
  EXPECT_EQ(StatsOf(q).acks, 1);
}

TEST_P(WorkQueueConformance, AckBatchOnAnArchiveQueueArchivesEachMessage) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.archive = true}));
  for (const char* p : {"a", "b", "c"}) SendOne(q, {.payload = p});
  ASSERT_OK_AND_ASSIGN(auto claimed, q.Claim({.max = 3}));
  ASSERT_EQ(claimed.size(), 3u);
  std::vector<std::string> receipts;
  for (auto& m : claimed) receipts.push_back(m.receipt);
  ASSERT_OK_AND_ASSIGN(auto statuses, q.AckBatch(receipts));
  for (const Status& s : statuses) EXPECT_OK(s);
  ASSERT_OK_AND_ASSIGN(auto archived, q.ListArchive({}));
  ASSERT_EQ(archived.size(), 3u);
  std::set<std::string> payloads;
  for (auto& a : archived) payloads.insert(a.payload);
  EXPECT_EQ(payloads, (std::set<std::string>{"a", "b", "c"}));
  EXPECT_EQ(StatsOf(q).archived, 3);
  EXPECT_EQ(StatsOf(q).leased, 0);
}

TEST_P(WorkQueueConformance, SendBatchKeepsEveryPayloadByteAndIdsFollowOrder) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "held", .dedup_key = "old"});
  std::vector<Message> batch = {
      {.payload = std::string("\0\x01\xff", 3)},
      {.payload = ""},
      {.payload = "again", .dedup_key = "old"},
      {.payload = std::string(1000, '\0'), .dedup_key = std::string("\0k", 2)},
      {.payload = "last", .priority = -3, .delay = std::chrono::seconds(0)}};
  ASSERT_OK_AND_ASSIGN(auto results, q.SendBatch(batch));
  ASSERT_EQ(results.size(), batch.size());
  EXPECT_TRUE(results[2].duplicate);
  std::vector<std::int64_t> stored_ids;
  for (size_t i : {0, 1, 3, 4}) {
    EXPECT_FALSE(results[i].duplicate) << i;
    stored_ids.push_back(results[i].id);
  }
  EXPECT_TRUE(std::is_sorted(stored_ids.begin(), stored_ids.end()));
  EXPECT_EQ(std::set<std::int64_t>(stored_ids.begin(), stored_ids.end()).size(),
            4u);
  std::map<std::int64_t, ClaimedMessage> got;
  for (auto& m : ClaimAll(q)) got[m.id] = m;
  ASSERT_EQ(got.size(), 5u);  // the four and "held"
  EXPECT_EQ(got[results[2].id].payload, "held");
  for (size_t i : {0, 1, 3, 4}) {
    EXPECT_EQ(got[results[i].id].payload, batch[i].payload) << i;
    EXPECT_EQ(got[results[i].id].priority, batch[i].priority) << i;
  }
}

// A batch longer than an engine's statement of many rows (SQLite stores up
// to 64 messages without a dedup key in one INSERT), with keyed messages
// (and a duplicate) between runs of them: every id is its own message's,
// with its payload, priority and headers, and the counters count what was
// stored.
TEST_P(WorkQueueConformance, LongBatchesWithKeysBetweenKeepEveryMessageItsId) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "held", .dedup_key = "old"});
  std::vector<Message> batch;
  for (int i = 0; i < 150; ++i) {
    Message m{.payload = "m" + std::to_string(i), .priority = (i * 7) % 5};
    if (i % 3 == 0) m.headers = {{"n", std::to_string(i)}};
    if (i == 70 || i == 71) m.dedup_key = "k" + std::to_string(i);
    if (i == 72) m.dedup_key = "old";
    batch.push_back(std::move(m));
  }
  ASSERT_OK_AND_ASSIGN(auto results, q.SendBatch(batch));
  ASSERT_EQ(results.size(), batch.size());
  std::vector<std::int64_t> stored_ids;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    EXPECT_EQ(results[i].duplicate, i == 72) << i;
    if (!results[i].duplicate) stored_ids.push_back(results[i].id);
  }
  EXPECT_TRUE(std::is_sorted(stored_ids.begin(), stored_ids.end()));
  EXPECT_EQ(std::set<std::int64_t>(stored_ids.begin(), stored_ids.end()).size(),
            149u);
  std::map<std::int64_t, ClaimedMessage> got;
  for (auto& m : ClaimAll(q)) got[m.id] = m;
  ASSERT_EQ(got.size(), 150u);  // the 149 and "held"
  EXPECT_EQ(got[results[72].id].payload, "held");
  for (std::size_t i = 0; i < batch.size(); ++i) {
    if (i == 72) continue;
    const ClaimedMessage& m = got[results[i].id];
    EXPECT_EQ(m.payload, batch[i].payload) << i;
    EXPECT_EQ(m.priority, batch[i].priority) << i;
    EXPECT_EQ(m.headers, batch[i].headers) << i;
  }
  EXPECT_EQ(StatsOf(q).sends, 150);
}

TEST_P(WorkQueueConformance, EmptyAckBatchDoesNothing) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  std::vector<std::string> none;
  ASSERT_OK_AND_ASSIGN(auto statuses, q.AckBatch(none));
  EXPECT_TRUE(statuses.empty());
}

// --- caller transactions -----------------------------------------------------

TEST_P(WorkQueueConformance, RolledBackTransactionalSendStoresNothing) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(Tx tx, store_->BeginTx());
  ASSERT_OK_AND_ASSIGN(SendResult sent, q.Send(tx, {.payload = "x"}));
  EXPECT_GT(sent.id, 0);
  ASSERT_OK(tx.Rollback());
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.ready, 0);
  EXPECT_EQ(st.sends, 0);
  EXPECT_FALSE(ClaimOne(q));
}

TEST_P(WorkQueueConformance, CommittedTransactionalSendStoresTheMessage) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(Tx tx, store_->BeginTx());
  ASSERT_OK_AND_ASSIGN(SendResult a, q.Send(tx, {.payload = "a"}));
  ASSERT_OK_AND_ASSIGN(SendResult b,
                       q.Send(tx, {.payload = "b", .priority = 1}));
  // Not visible to others before the commit.
  EXPECT_EQ(StatsOf(q).ready, 0);
  ASSERT_OK(tx.Commit());
  EXPECT_EQ(StatsOf(q).ready, 2);
  auto first = ClaimOne(q);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->id, b.id);
  auto second = ClaimOne(q);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->id, a.id);
  EXPECT_EQ(second->payload, "a");
}

TEST_P(WorkQueueConformance, DestroyingAnOpenTransactionRollsItBack) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  {
    ASSERT_OK_AND_ASSIGN(Tx tx, store_->BeginTx());
    ASSERT_OK(q.Send(tx, {.payload = "x"}));
  }
  EXPECT_EQ(StatsOf(q).ready, 0);
  // The store still takes writes: the transaction's lock is gone.
  EXPECT_OK(q.Send({.payload = "y"}));
  EXPECT_EQ(StatsOf(q).ready, 1);
}

TEST_P(WorkQueueConformance, RolledBackTransactionalAckLeavesTheMessageLeased) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "x"});
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  ASSERT_OK_AND_ASSIGN(Tx tx, store_->BeginTx());
  ASSERT_OK(q.Ack(tx, m->receipt));
  ASSERT_OK(tx.Rollback());
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.leased, 1);
  EXPECT_EQ(st.acks, 0);
  EXPECT_OK(q.Ack(m->receipt));
}

TEST_P(WorkQueueConformance, CommittedTransactionalAckRemovesTheMessage) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.archive = true}));
  SendOne(q, {.payload = "x"});
  auto m = ClaimOne(q, {.worker = "tx-worker"});
  ASSERT_TRUE(m);
  ASSERT_OK_AND_ASSIGN(Tx tx, store_->BeginTx());
  ASSERT_OK(q.Ack(tx, m->receipt));
  EXPECT_EQ(StatsOf(q).leased, 1);  // not before the commit
  ASSERT_OK(tx.Commit());
  QueueStats st = StatsOf(q);
  EXPECT_EQ(st.leased, 0);
  EXPECT_EQ(st.acks, 1);
  EXPECT_EQ(st.archived, 1);
  EXPECT_CODE(q.Ack(m->receipt), Code::kNotFound);
}

TEST_P(WorkQueueConformance, TransactionalAckRefusesAStaleReceipt) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       store_->CreateQueue("jobs", {.lease = seconds(10)}));
  SendOne(q, {.payload = "x"});
  auto slow = ClaimOne(q);
  ASSERT_TRUE(slow);
  clock_->Advance(seconds(11));
  auto fast = ClaimOne(q);
  ASSERT_TRUE(fast);
  ASSERT_OK_AND_ASSIGN(Tx tx, store_->BeginTx());
  EXPECT_CODE(q.Ack(tx, slow->receipt), Code::kFailedPrecondition);
  EXPECT_CODE(q.Ack(tx, "abc"), Code::kInvalidArgument);
  ASSERT_OK(tx.Commit());
  EXPECT_EQ(StatsOf(q).leased, 1);
}

TEST_P(WorkQueueConformance, ClosedTransactionCannotBeUsed) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(Tx tx, store_->BeginTx());
  ASSERT_OK(tx.Commit());
  EXPECT_CODE(q.Send(tx, {.payload = "x"}), Code::kFailedPrecondition);
  EXPECT_CODE(q.Ack(tx, "1-1-0000000000000001"), Code::kFailedPrecondition);
  EXPECT_CODE(tx.Commit(), Code::kFailedPrecondition);
  EXPECT_CODE(tx.Rollback(), Code::kFailedPrecondition);
  EXPECT_EQ(tx.native_handle(), nullptr);
  EXPECT_EQ(StatsOf(q).ready, 0);
}

TEST_P(WorkQueueConformance, TransactionOfAnotherStoreIsRejected) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  auto other_db = GetParam().make();
  ASSERT_OK_AND_ASSIGN(auto other, Store::Open(other_db->url()));
  {
    ASSERT_OK_AND_ASSIGN(Tx tx, other->BeginTx());
    EXPECT_CODE(q.Send(tx, {.payload = "x"}), Code::kInvalidArgument);
    ASSERT_OK(tx.Rollback());
  }
  EXPECT_EQ(StatsOf(q).ready, 0);
}

// --- waiting claims ----------------------------------------------------------

struct TimedClaim {
  Result<std::vector<ClaimedMessage>> result;
  std::int64_t elapsed_ms;
};

// Starts a claim with `wait` on another thread; `started` is set just before
// the claim begins.
std::future<TimedClaim> ClaimInBackground(WorkQueue q, Duration wait,
                                          std::promise<void>& started) {
  return std::async(std::launch::async, [q, wait, &started]() mutable {
    started.set_value();
    const auto t0 = SteadyClock::now();
    auto r = q.Claim({.wait = wait});
    return TimedClaim{std::move(r), MsSince(t0)};
  });
}

TEST_P(WorkQueueConformance, WaitingClaimReturnsAsSoonAsAMessageIsSent) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  std::promise<void> started;
  auto claim = ClaimInBackground(q, seconds(30), started);
  started.get_future().wait();
  ASSERT_OK(q.Send({.payload = "wake up"}));
  TimedClaim done = claim.get();
  ASSERT_OK(done.result);
  ASSERT_EQ(done.result->size(), 1u);
  EXPECT_EQ((*done.result)[0].payload, "wake up");
  EXPECT_LT(done.elapsed_ms, 5000) << "the claim was not woken by the send";
}

TEST_P(WorkQueueConformance, WaitingClaimOnAnEmptyQueueReturnsEmptyAfterWait) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  const auto t0 = SteadyClock::now();
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.wait = milliseconds(200)}));
  const std::int64_t elapsed_ms = MsSince(t0);
  EXPECT_TRUE(got.empty());
  EXPECT_GE(elapsed_ms, 200);
  EXPECT_LT(elapsed_ms, 5000);
}

TEST_P(WorkQueueConformance, WaitingClaimWakesWhenADelayedMessageIsReady) {
  // Real time here: the store's own clock must reach the delay.
  std::unique_ptr<TestDatabase> db;
  auto store = OpenRealClockStore(db);
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  const auto t0 = SteadyClock::now();
  ASSERT_OK(q.Send({.payload = "soon", .delay = milliseconds(200)}));
  ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.wait = seconds(30)}));
  const std::int64_t elapsed_ms = MsSince(t0);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "soon");
  EXPECT_GE(elapsed_ms, 200);
  // Woken at the message's ready time, not by the 1 s fallback poll.
  EXPECT_LT(elapsed_ms, 800);
}

TEST_P(WorkQueueConformance, WaitingClaimTakesOverALeaseThatExpires) {
  // Real time here: the store's own clock must reach the lease's end.
  std::unique_ptr<TestDatabase> db;
  auto store = OpenRealClockStore(db);
  ASSERT_TRUE(store);
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
  ASSERT_OK(q.Send({.payload = "abandoned"}));
  const auto t0 = SteadyClock::now();
  ASSERT_OK_AND_ASSIGN(auto first, q.Claim({.lease = milliseconds(200)}));
  ASSERT_EQ(first.size(), 1u);
  ASSERT_OK_AND_ASSIGN(auto second, q.Claim({.wait = seconds(30)}));
  const std::int64_t elapsed_ms = MsSince(t0);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].id, first[0].id);
  EXPECT_EQ(second[0].attempt, 2);
  EXPECT_GE(elapsed_ms, 200);
  // Woken at the lease's end, not by the 1 s fallback poll.
  EXPECT_LT(elapsed_ms, 800);
}

TEST_P(WorkQueueConformance, NackWithoutDelayWakesAWaitingClaim) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  SendOne(q, {.payload = "retry me"});
  auto m = ClaimOne(q);
  ASSERT_TRUE(m);
  std::promise<void> started;
  auto claim = ClaimInBackground(q, seconds(30), started);
  started.get_future().wait();
  ASSERT_OK(q.Nack(m->receipt, {.delay = milliseconds(0)}));
  TimedClaim done = claim.get();
  ASSERT_OK(done.result);
  ASSERT_EQ(done.result->size(), 1u);
  EXPECT_EQ((*done.result)[0].id, m->id);
  EXPECT_EQ((*done.result)[0].attempt, 2);
  EXPECT_LT(done.elapsed_ms, 5000);
}

TEST_P(WorkQueueConformance, CommittedTransactionalSendWakesAWaitingClaim) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  std::promise<void> started;
  auto claim = ClaimInBackground(q, seconds(30), started);
  started.get_future().wait();
  {
    ASSERT_OK_AND_ASSIGN(Tx tx, store_->BeginTx());
    ASSERT_OK(q.Send(tx, {.payload = "from tx"}));
    ASSERT_OK(tx.Commit());
  }
  TimedClaim done = claim.get();
  ASSERT_OK(done.result);
  ASSERT_EQ(done.result->size(), 1u);
  EXPECT_EQ((*done.result)[0].payload, "from tx");
  EXPECT_LT(done.elapsed_ms, 5000);
}

TEST_P(WorkQueueConformance, DroppingTheQueueEndsAWaitingClaimWithNotFound) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  std::promise<void> started;
  auto claim = ClaimInBackground(q, seconds(30), started);
  started.get_future().wait();
  ASSERT_OK(store_->DropQueue("jobs"));
  TimedClaim done = claim.get();
  EXPECT_CODE(done.result, Code::kNotFound);
  EXPECT_LT(done.elapsed_ms, 5000);
}

INSTANTIATE_TEST_SUITE_P(Engines, WorkQueueConformance,
                         ::testing::ValuesIn(Engines()), EngineName);

}  // namespace
}  // namespace sqlq::test
