// The topic conformance suite: docs/semantics.md, "Topics", rule by rule,
// through the public API only (Store's topic calls). Engine-neutral: it
// runs on every engine of Engines() (engine_fixture.h).

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "sqlq/status.h"
#include "sqlq/store.h"
#include "sqlq/topic.h"
#include "tests/conformance/engine_fixture.h"

namespace sqlq::test {
namespace {

class TopicConformance : public EngineTest {
 protected:
  WorkQueue MakeQueue(std::string_view name, QueueOptions o = {}) {
    auto q = store_->CreateQueue(name, o);
    EXPECT_TRUE(q.ok()) << q.status().ToString();
    return std::move(*q);
  }

  // The payloads a claim of everything in `q` gets, in claim order.
  std::vector<std::string> Drain(WorkQueue& q) {
    auto r = q.Claim({.max = 1000});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    std::vector<std::string> out;
    if (!r.ok()) return out;
    for (const ClaimedMessage& m : *r) out.push_back(m.payload);
    return out;
  }

  // queue -> how many deliveries of the publish went there.
  static std::map<std::string, int> PerQueue(const std::vector<Delivery>& d) {
    std::map<std::string, int> out;
    for (const Delivery& x : d) ++out[x.queue];
    return out;
  }
};

using Payloads = std::vector<std::string>;

TEST_P(TopicConformance, PublishReachesEverySubscriberOnce) {
  ASSERT_OK(store_->CreateTopic("orders"));
  WorkQueue a = MakeQueue("a"), b = MakeQueue("b"), c = MakeQueue("c");
  ASSERT_OK_AND_ASSIGN(bool added, store_->Subscribe("orders", "a"));
  EXPECT_TRUE(added);
  ASSERT_OK(store_->Subscribe("orders", "b").status());
  // Subscribing again changes nothing but the filter: still once.
  ASSERT_OK_AND_ASSIGN(added, store_->Subscribe("orders", "b"));
  EXPECT_FALSE(added);
  ASSERT_OK_AND_ASSIGN(auto d,
                       store_->Publish("orders", {.payload = "order 1"}));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].queue, "a");
  EXPECT_EQ(d[1].queue, "b");
  EXPECT_EQ(d[0].message, 0u);
  EXPECT_FALSE(d[0].sent.duplicate);
  EXPECT_EQ(Drain(a), Payloads{"order 1"});
  EXPECT_EQ(Drain(b), Payloads{"order 1"});
  EXPECT_EQ(Drain(c), Payloads{});
  // The ids are the queues' own: what each got.
  ASSERT_OK_AND_ASSIGN(auto got, a.Get(d[0].sent.id));
  EXPECT_EQ(got.payload, "order 1");
}

TEST_P(TopicConformance, LaterSubscriberGetsOnlyLaterPublishes) {
  ASSERT_OK(store_->CreateTopic("t"));
  WorkQueue early = MakeQueue("early"), late = MakeQueue("late");
  ASSERT_OK(store_->Subscribe("t", "early").status());
  ASSERT_OK(store_->Publish("t", {.payload = "first"}).status());
  ASSERT_OK(store_->Subscribe("t", "late").status());
  ASSERT_OK(store_->Publish("t", {.payload = "second"}).status());
  EXPECT_EQ(Drain(early), (Payloads{"first", "second"}));
  EXPECT_EQ(Drain(late), Payloads{"second"});
}

TEST_P(TopicConformance, NoSubscriberStoresNothing) {
  ASSERT_OK(store_->CreateTopic("t"));
  ASSERT_OK_AND_ASSIGN(auto d, store_->Publish("t", {.payload = "x"}));
  EXPECT_TRUE(d.empty());
  WorkQueue q = MakeQueue("q");
  ASSERT_OK(store_->Subscribe("t", "q", {{"region", "eu"}}).status());
  ASSERT_OK_AND_ASSIGN(d, store_->Publish("t", {.payload = "y"}));
  EXPECT_TRUE(d.empty());
  EXPECT_EQ(Count(q), 0);
}

TEST_P(TopicConformance, FilterMatchesEveryHeaderExactly) {
  ASSERT_OK(store_->CreateTopic("t"));
  WorkQueue eu = MakeQueue("eu"), eu_big = MakeQueue("eu_big"),
            all = MakeQueue("all");
  ASSERT_OK(store_->Subscribe("t", "eu", {{"region", "eu"}}).status());
  ASSERT_OK(
      store_->Subscribe("t", "eu_big", {{"region", "eu"}, {"size", "big"}})
          .status());
  ASSERT_OK(store_->Subscribe("t", "all").status());
  std::vector<Message> batch = {
      {.payload = "1", .headers = {{"region", "eu"}}},
      {.payload = "2", .headers = {{"region", "eu"}, {"size", "big"}}},
      {.payload = "3", .headers = {{"region", "us"}, {"size", "big"}}},
      {.payload = "4", .headers = {{"region", "EU"}}},
      {.payload = "5"}};
  ASSERT_OK_AND_ASSIGN(auto d, store_->PublishBatch("t", batch));
  EXPECT_EQ(PerQueue(d),
            (std::map<std::string, int>{{"all", 5}, {"eu", 2}, {"eu_big", 1}}));
  for (const Delivery& x : d) {
    if (x.queue == "eu_big") {
      EXPECT_EQ(x.message, 1u);
    }
  }
  EXPECT_EQ(Drain(eu), (Payloads{"1", "2"}));
  EXPECT_EQ(Drain(eu_big), Payloads{"2"});
  EXPECT_EQ(Drain(all), (Payloads{"1", "2", "3", "4", "5"}));
  // Subscribing again replaces the filter.
  ASSERT_OK(store_->Subscribe("t", "eu", {{"region", "us"}}).status());
  ASSERT_OK(store_->PublishBatch("t", batch).status());
  EXPECT_EQ(Drain(eu), Payloads{"3"});
  ASSERT_OK_AND_ASSIGN(auto subs, store_->ListSubscriptions("t"));
  ASSERT_EQ(subs.size(), 3u);
  EXPECT_EQ(subs[0].queue, "all");
  EXPECT_TRUE(subs[0].filter.empty());
  EXPECT_EQ(subs[1].queue, "eu");
  EXPECT_EQ(subs[1].filter, (Headers{{"region", "us"}}));
  EXPECT_EQ(subs[2].filter, (Headers{{"region", "eu"}, {"size", "big"}}));
  EXPECT_EQ(subs[2].topic, "t");
}

TEST_P(TopicConformance, UnsubscribeStopsDeliveries) {
  ASSERT_OK(store_->CreateTopic("t"));
  WorkQueue q = MakeQueue("q");
  ASSERT_OK(store_->Subscribe("t", "q").status());
  ASSERT_OK(store_->Publish("t", {.payload = "before"}).status());
  ASSERT_OK(store_->Unsubscribe("t", "q"));
  EXPECT_CODE(store_->Unsubscribe("t", "q"), Code::kNotFound);
  ASSERT_OK_AND_ASSIGN(auto d, store_->Publish("t", {.payload = "after"}));
  EXPECT_TRUE(d.empty());
  EXPECT_EQ(Drain(q), Payloads{"before"});
  ASSERT_OK_AND_ASSIGN(auto subs, store_->ListSubscriptions("t"));
  EXPECT_TRUE(subs.empty());
}

TEST_P(TopicConformance, DroppingAQueueRemovesItsSubscription) {
  ASSERT_OK(store_->CreateTopic("t"));
  WorkQueue q = MakeQueue("q"), other = MakeQueue("other");
  ASSERT_OK(store_->Subscribe("t", "q").status());
  ASSERT_OK(store_->Subscribe("t", "other").status());
  ASSERT_OK(store_->DropQueue("q"));
  ASSERT_OK_AND_ASSIGN(auto subs, store_->ListSubscriptions("t"));
  ASSERT_EQ(subs.size(), 1u);
  EXPECT_EQ(subs[0].queue, "other");
  // A queue made again under the name is not subscribed.
  WorkQueue again = MakeQueue("q");
  ASSERT_OK_AND_ASSIGN(auto d, store_->Publish("t", {.payload = "x"}));
  EXPECT_EQ(PerQueue(d), (std::map<std::string, int>{{"other", 1}}));
  EXPECT_EQ(Count(again), 0);
  ASSERT_OK_AND_ASSIGN(auto topics, store_->ListTopics());
  ASSERT_EQ(topics.size(), 1u);
  EXPECT_EQ(topics[0].subscriptions, 1);
}

TEST_P(TopicConformance, DroppingATopicKeepsItsQueues) {
  ASSERT_OK(store_->CreateTopic("t"));
  WorkQueue q = MakeQueue("q");
  ASSERT_OK(store_->Subscribe("t", "q").status());
  ASSERT_OK(store_->Publish("t", {.payload = "kept"}).status());
  ASSERT_OK(store_->DropTopic("t"));
  EXPECT_CODE(store_->Publish("t", {.payload = "x"}).status(), Code::kNotFound);
  EXPECT_CODE(store_->DropTopic("t"), Code::kNotFound);
  EXPECT_EQ(Drain(q), Payloads{"kept"});
  // A topic made again under the name has no subscriptions.
  ASSERT_OK(store_->CreateTopic("t"));
  ASSERT_OK_AND_ASSIGN(auto subs, store_->ListSubscriptions("t"));
  EXPECT_TRUE(subs.empty());
}

TEST_P(TopicConformance, RolledBackPublishStoresNothing) {
  ASSERT_OK(store_->CreateTopic("t"));
  WorkQueue a = MakeQueue("a"), b = MakeQueue("b");
  ASSERT_OK(store_->Subscribe("t", "a").status());
  ASSERT_OK(store_->Subscribe("t", "b").status());
  {
    ASSERT_OK_AND_ASSIGN(Tx tx, store_->BeginTx());
    ASSERT_OK_AND_ASSIGN(auto d, store_->Publish(tx, "t", {.payload = "no"}));
    EXPECT_EQ(d.size(), 2u);
    ASSERT_OK(tx.Rollback());
  }
  EXPECT_EQ(Count(a), 0);
  EXPECT_EQ(Count(b), 0);
  {
    ASSERT_OK_AND_ASSIGN(Tx tx, store_->BeginTx());
    ASSERT_OK(store_->Publish(tx, "t", {.payload = "yes"}).status());
    ASSERT_OK(tx.Commit());
  }
  EXPECT_EQ(Drain(a), Payloads{"yes"});
  EXPECT_EQ(Drain(b), Payloads{"yes"});
}

TEST_P(TopicConformance, EachQueueChecksAsItsOwnSendWould) {
  ASSERT_OK(store_->CreateTopic("t"));
  WorkQueue small = MakeQueue("small", {.max_payload_bytes = 4});
  WorkQueue big = MakeQueue("big");
  WorkQueue dedup = MakeQueue("dedup");
  ASSERT_OK(store_->Subscribe("t", "small").status());
  ASSERT_OK(store_->Subscribe("t", "big").status());
  ASSERT_OK(store_->Subscribe("t", "dedup").status());
  // Too large for one subscriber: stored in none.
  EXPECT_CODE(store_->Publish("t", {.payload = "too long"}).status(),
              Code::kTooLarge);
  EXPECT_EQ(Count(big), 0);
  EXPECT_EQ(Count(dedup), 0);
  // Dedup is each queue's: a key held in one queue is a duplicate there.
  ASSERT_OK(dedup.Send({.payload = "held", .dedup_key = "k"}).status());
  ASSERT_OK_AND_ASSIGN(
      auto d, store_->Publish("t", {.payload = "new", .dedup_key = "k"}));
  ASSERT_EQ(d.size(), 3u);
  for (const Delivery& x : d) {
    EXPECT_EQ(x.sent.duplicate, x.queue == "dedup") << x.queue;
  }
  // A paused queue takes the publish as it takes sends.
  ASSERT_OK(big.Pause());
  ASSERT_OK(store_->Publish("t", {.payload = "p"}).status());
  EXPECT_EQ(Count(big), 2);
}

TEST_P(TopicConformance, NamesAreOneNamespaceAndFiltersAreChecked) {
  WorkQueue q = MakeQueue("q");
  ASSERT_OK(store_->CreateTopic("t"));
  EXPECT_CODE(store_->CreateTopic("t"), Code::kAlreadyExists);
  EXPECT_CODE(store_->CreateTopic("q"), Code::kAlreadyExists);
  EXPECT_CODE(store_->CreateQueue("t", {}).status(), Code::kAlreadyExists);
  ASSERT_OK(store_->CreateRing("r", {}).status());
  EXPECT_CODE(store_->CreateTopic("r"), Code::kAlreadyExists);
  // A name of another kind.
  EXPECT_CODE(store_->Publish("q", {.payload = "x"}).status(),
              Code::kFailedPrecondition);
  EXPECT_CODE(store_->Subscribe("t", "r").status(), Code::kFailedPrecondition);
  EXPECT_CODE(store_->Subscribe("t", "t").status(), Code::kFailedPrecondition);
  EXPECT_CODE(store_->Queue("t").status(), Code::kFailedPrecondition);
  EXPECT_CODE(store_->DropQueue("t"), Code::kFailedPrecondition);
  // Missing.
  EXPECT_CODE(store_->Subscribe("nope", "q").status(), Code::kNotFound);
  EXPECT_CODE(store_->Subscribe("t", "nope").status(), Code::kNotFound);
  EXPECT_CODE(store_->ListSubscriptions("nope").status(), Code::kNotFound);
  // Bad names and filters.
  EXPECT_CODE(store_->CreateTopic("has space"), Code::kInvalidArgument);
  EXPECT_CODE(store_->CreateTopic(""), Code::kInvalidArgument);
  EXPECT_CODE(store_->CreateTopic(std::string(65, 'a')),
              Code::kInvalidArgument);
  auto bad = store_->Subscribe("t", "q", {{"bad key", "v"}});
  EXPECT_CODE(bad.status(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("filter"), std::string::npos)
      << bad.status().ToString();
  EXPECT_CODE(store_->Subscribe("t", "q", {{"sqlq:kind", "x"}}).status(),
              Code::kInvalidArgument);
  EXPECT_CODE(store_->PublishBatch("t", {}).status(), Code::kInvalidArgument);
  // Lists: topics apart from rings, rotations and queues.
  ASSERT_OK_AND_ASSIGN(auto topics, store_->ListTopics());
  ASSERT_EQ(topics.size(), 1u);
  EXPECT_EQ(topics[0].name, "t");
  EXPECT_EQ(topics[0].subscriptions, 0);
  ASSERT_OK_AND_ASSIGN(auto queues, store_->ListQueues());
  EXPECT_EQ(queues.size(), 1u);
  ASSERT_OK_AND_ASSIGN(auto rings, store_->ListRings());
  EXPECT_EQ(rings.size(), 1u);
  ASSERT_OK_AND_ASSIGN(auto rotations, store_->ListRotations());
  EXPECT_TRUE(rotations.empty());
}

TEST_P(TopicConformance, ConcurrentPublishesEachDeliverOnce) {
  ASSERT_OK(store_->CreateTopic("t"));
  constexpr int kQueues = 10, kThreads = 4, kEach = 25;
  std::vector<WorkQueue> queues;
  for (int i = 0; i < kQueues; ++i) {
    queues.push_back(MakeQueue("q" + std::to_string(i)));
    ASSERT_OK(store_->Subscribe("t", "q" + std::to_string(i)).status());
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        auto d = store_->Publish(
            "t", {.payload = std::to_string(t) + "-" + std::to_string(i)});
        EXPECT_TRUE(d.ok()) << d.status().ToString();
        if (d.ok()) {
          EXPECT_EQ(d->size(), std::size_t{kQueues});
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (WorkQueue& q : queues) {
    auto got = Drain(q);
    std::map<std::string, int> seen;
    for (const auto& p : got) ++seen[p];
    EXPECT_EQ(seen.size(), std::size_t{kThreads * kEach}) << q.name();
    for (const auto& [p, n] : seen) EXPECT_EQ(n, 1) << p;
  }
}

// Queues dropped while publishes run: no publish fails for it, and a
// queue that stays gets every publish once.
TEST_P(TopicConformance, QueuesDroppedDuringPublishesAreSkipped) {
  ASSERT_OK(store_->CreateTopic("t"));
  constexpr int kDropped = 6, kPublishes = 60;
  WorkQueue kept = MakeQueue("kept");
  ASSERT_OK(store_->Subscribe("t", "kept").status());
  for (int i = 0; i < kDropped; ++i) {
    MakeQueue("d" + std::to_string(i));
    ASSERT_OK(store_->Subscribe("t", "d" + std::to_string(i)).status());
  }
  std::unique_ptr<Store> other = OtherStore();
  ASSERT_TRUE(other);
  std::thread dropper([&] {
    for (int i = 0; i < kDropped; ++i) {
      EXPECT_OK(other->DropQueue("d" + std::to_string(i)));
    }
  });
  for (int i = 0; i < kPublishes; ++i) {
    auto d = store_->Publish("t", {.payload = std::to_string(i)});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
  }
  dropper.join();
  auto got = Drain(kept);
  ASSERT_EQ(got.size(), std::size_t{kPublishes});
  for (int i = 0; i < kPublishes; ++i) EXPECT_EQ(got[i], std::to_string(i));
  ASSERT_OK_AND_ASSIGN(auto subs, store_->ListSubscriptions("t"));
  ASSERT_EQ(subs.size(), 1u);
  EXPECT_EQ(subs[0].queue, "kept");
}

// A batch published to several queues, plain and grouped, larger than one
// statement of the engine's: every delivery's id is its message in its
// queue, and each queue gets the batch in order.
TEST_P(TopicConformance, ABatchToManyQueuesKeepsEachIdAndOrder) {
  ASSERT_OK(store_->CreateTopic("t"));
  WorkQueue a = MakeQueue("a");
  WorkQueue b = MakeQueue("b", {.groups = GroupMode::kOrdered});
  WorkQueue c = MakeQueue("c");
  for (const char* q : {"a", "b", "c"}) {
    ASSERT_OK(store_->Subscribe("t", q).status());
  }
  std::vector<Message> batch;
  for (int i = 0; i < 150; ++i) {
    batch.push_back({.payload = "m" + std::to_string(i),
                     .priority = i % 3,
                     .headers = {{"n", std::to_string(i)}},
                     .group = i % 2 == 0 ? "even" : ""});
  }
  ASSERT_OK_AND_ASSIGN(auto d, store_->PublishBatch("t", batch));
  ASSERT_EQ(d.size(), 450u);
  EXPECT_EQ(PerQueue(d),
            (std::map<std::string, int>{{"a", 150}, {"b", 150}, {"c", 150}}));
  std::map<std::string, WorkQueue*> by_name = {{"a", &a}, {"b", &b}, {"c", &c}};
  std::map<std::string, std::int64_t> last;
  for (const Delivery& x : d) {
    SCOPED_TRACE(x.queue + " " + std::to_string(x.message));
    ASSERT_LT(x.message, batch.size());
    EXPECT_FALSE(x.sent.duplicate);
    ASSERT_OK_AND_ASSIGN(MessageInfo got, by_name[x.queue]->Get(x.sent.id));
    const Message& m = batch[x.message];
    EXPECT_EQ(got.payload, m.payload);
    EXPECT_EQ(got.priority, m.priority);
    EXPECT_EQ(got.headers.at("n"), m.headers.at("n"));
    EXPECT_EQ(got.group, m.group);
    // Ids grow in the batch's order within each queue.
    EXPECT_GT(x.sent.id, last[x.queue]);
    last[x.queue] = x.sent.id;
  }
  // Each queue counts its own sends.
  for (WorkQueue* q : {&a, &b, &c}) {
    ASSERT_OK_AND_ASSIGN(QueueStats stats, q->Stats());
    EXPECT_EQ(stats.ready, 150) << q->name();
    EXPECT_EQ(stats.sends, 150) << q->name();
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, TopicConformance,
                         ::testing::ValuesIn(Engines()), EngineName);

}  // namespace
}  // namespace sqlq::test
