// The rotation conformance suite: docs/rings-and-rotations.md, rule by
// rule, through the public API only (Store::CreateRotation/GetRotation/
// DropRotation and sqlq::Rotation). Engine-neutral: it runs on every engine
// of Engines() (engine_fixture.h).

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sqlq/ring.h"
#include "sqlq/rotation.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "tests/conformance/engine_fixture.h"

namespace sqlq::test {
namespace {

class RotationConformance : public EngineTest {
 protected:
  // Keys of what next(n) served, in the order returned.
  std::vector<std::string> NextKeys(Rotation& rot, int n) {
    auto r = rot.Next(n);
    if (!r.ok()) {
      ADD_FAILURE() << "next: " << r.status().ToString();
      return {};
    }
    std::vector<std::string> out;
    for (const RotationItem& item : *r) out.push_back(item.key);
    return out;
  }

  std::vector<std::string> ListKeys(Rotation& rot) {
    auto r = rot.List();
    if (!r.ok()) {
      ADD_FAILURE() << "list: " << r.status().ToString();
      return {};
    }
    std::vector<std::string> out;
    for (const RotationItem& item : *r) out.push_back(item.key);
    return out;
  }

  // key -> item, from List().
  std::map<std::string, RotationItem> Items(Rotation& rot) {
    auto r = rot.List();
    if (!r.ok()) {
      ADD_FAILURE() << "list: " << r.status().ToString();
      return {};
    }
    std::map<std::string, RotationItem> out;
    for (const RotationItem& item : *r) out[item.key] = item;
    return out;
  }

  RotationStats StatsOf(Rotation& rot) {
    auto r = rot.Stats();
    if (!r.ok()) {
      ADD_FAILURE() << "stats: " << r.status().ToString();
      return {};
    }
    return *r;
  }
};

std::vector<std::string> Keys(std::initializer_list<int> ids) {
  std::vector<std::string> out;
  for (int id : ids) out.push_back(std::to_string(id));
  return out;
}

// The example of docs/rings-and-rotations.md, exactly: 20 items; next(10) ->
// 1-10; next(10) -> 11-20; items 5, 10, 15 reach max failures; next(10) -> 1,
// 2, 3, 4, 6, 7, 8, 9, 11, 12; next(10) -> 13, 14, 16, 17, 18, 19, 20, 1, 2, 3.
TEST_P(RotationConformance, DesignMdSection23Example) {
  ASSERT_OK_AND_ASSIGN(Rotation rot,
                       store_->CreateRotation("relays", {.max_failures = 2}));
  for (int i = 1; i <= 20; ++i) {
    ASSERT_OK(rot.Add(std::to_string(i), "relay-" + std::to_string(i)));
  }

  ASSERT_OK_AND_ASSIGN(auto first, rot.Next(10));
  ASSERT_EQ(first.size(), 10u);
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(first[i].key, std::to_string(i + 1));
    EXPECT_EQ(first[i].payload, "relay-" + std::to_string(i + 1));
    EXPECT_EQ(first[i].served, 1);
    EXPECT_EQ(first[i].failures, 0);
    EXPECT_FALSE(first[i].parked);
  }
  EXPECT_EQ(NextKeys(rot, 10), Keys({11, 12, 13, 14, 15, 16, 17, 18, 19, 20}));

  // Items 5, 10 and 15 reach max failures (2): the first failure does not
  // park, the second does.
  for (int id : {5, 10, 15}) {
    const std::string key = std::to_string(id);
    ASSERT_OK_AND_ASSIGN(RotationItem once, rot.Fail(key));
    EXPECT_EQ(once.failures, 1);
    EXPECT_FALSE(once.parked);
    ASSERT_OK_AND_ASSIGN(RotationItem twice, rot.Fail(key));
    EXPECT_EQ(twice.failures, 2);
    EXPECT_TRUE(twice.parked);
  }

  EXPECT_EQ(NextKeys(rot, 10), Keys({1, 2, 3, 4, 6, 7, 8, 9, 11, 12}));
  EXPECT_EQ(NextKeys(rot, 10), Keys({13, 14, 16, 17, 18, 19, 20, 1, 2, 3}));
}

// --- create, names, get, drop ----------------------------------------------

TEST_P(RotationConformance, CreateValidatesOptionsAndNames) {
  for (int max : {0, -1, 1000001}) {
    SCOPED_TRACE(max);
    EXPECT_CODE(store_->CreateRotation("rot", {.max_failures = max}),
                Code::kInvalidArgument);
  }
  EXPECT_CODE(store_->CreateRotation("rot", {.max_payload_bytes = 0}),
              Code::kInvalidArgument);
  EXPECT_CODE(store_->CreateRotation("bad name", {}), Code::kInvalidArgument);
  EXPECT_CODE(store_->CreateRotation("", {}), Code::kInvalidArgument);
  EXPECT_CODE(store_->CreateRotation(std::string(65, 'r'), {}),
              Code::kInvalidArgument);
  EXPECT_CODE(store_->GetRotation("rot"), Code::kNotFound);

  ASSERT_OK_AND_ASSIGN(Rotation one,
                       store_->CreateRotation("one", {.max_failures = 1}));
  ASSERT_OK_AND_ASSIGN(
      Rotation big, store_->CreateRotation("big", {.max_failures = 1000000}));
  EXPECT_EQ(one.name(), "one");
  EXPECT_EQ(StatsOf(one).max_failures, 1);
  EXPECT_EQ(StatsOf(big).max_failures, 1000000);
  ASSERT_OK_AND_ASSIGN(Rotation dflt, store_->CreateRotation("dflt", {}));
  EXPECT_EQ(StatsOf(dflt).max_failures, 3);
}

TEST_P(RotationConformance, NamesAreSharedWithQueuesAndRings) {
  ASSERT_OK(store_->CreateQueue("q", {}));
  ASSERT_OK(store_->CreateRing("ring", {.capacity = 3}));
  ASSERT_OK(store_->CreateRotation("rot", {.max_failures = 4}));

  EXPECT_CODE(store_->CreateRotation("q", {}), Code::kAlreadyExists);
  EXPECT_CODE(store_->CreateRotation("ring", {}), Code::kAlreadyExists);
  EXPECT_CODE(store_->CreateRotation("rot", {.max_failures = 9}),
              Code::kAlreadyExists);
  EXPECT_CODE(store_->CreateRing("rot", {.capacity = 3}), Code::kAlreadyExists);
  EXPECT_CODE(store_->CreateQueue("rot", {}), Code::kAlreadyExists);
  ASSERT_OK_AND_ASSIGN(Rotation rot, store_->GetRotation("rot"));
  EXPECT_EQ(StatsOf(rot).max_failures, 4);

  EXPECT_CODE(store_->GetRotation("q"), Code::kFailedPrecondition);
  EXPECT_CODE(store_->GetRotation("ring"), Code::kFailedPrecondition);
  EXPECT_CODE(store_->GetRing("rot"), Code::kFailedPrecondition);
  EXPECT_CODE(store_->GetRotation("nope"), Code::kNotFound);
  EXPECT_CODE(store_->DropRotation("ring"), Code::kFailedPrecondition);
  EXPECT_OK(store_->GetRing("ring"));
}

TEST_P(RotationConformance, DropRemovesTheRotationAndItsItems) {
  ASSERT_OK_AND_ASSIGN(Rotation rot, store_->CreateRotation("rot", {}));
  ASSERT_OK(rot.Add("a"));
  ASSERT_OK(store_->DropRotation("rot"));
  EXPECT_CODE(store_->GetRotation("rot"), Code::kNotFound);
  EXPECT_CODE(store_->DropRotation("rot"), Code::kNotFound);
  EXPECT_CODE(rot.Add("b"), Code::kNotFound);

  ASSERT_OK_AND_ASSIGN(Rotation fresh, store_->CreateRotation("rot", {}));
  EXPECT_TRUE(ListKeys(fresh).empty());
  EXPECT_EQ(StatsOf(fresh).items, 0);
  EXPECT_TRUE(NextKeys(fresh, 5).empty());
}

// --- add and remove ----------------------------------------------------------

TEST_P(RotationConformance, AddAndRemoveItems) {
  ASSERT_OK_AND_ASSIGN(Rotation rot, store_->CreateRotation("rot", {}));
  ASSERT_OK(rot.Add("a", "payload-a"));
  ASSERT_OK(rot.Add("b"));  // payload is optional
  ASSERT_OK_AND_ASSIGN(auto served, rot.Next(2));
  ASSERT_EQ(served.size(), 2u);
  EXPECT_EQ(served[0].key, "a");
  EXPECT_EQ(served[0].payload, "payload-a");
  EXPECT_EQ(served[1].key, "b");
  EXPECT_EQ(served[1].payload, "");

  // A duplicate add is refused and changes nothing: payload, served count
  // and place in the rotation stay.
  EXPECT_CODE(rot.Add("a", "other"), Code::kAlreadyExists);
  auto items = Items(rot);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items["a"].payload, "payload-a");
  EXPECT_EQ(items["a"].served, 1);
  EXPECT_EQ(NextKeys(rot, 1), std::vector<std::string>{"a"});
  EXPECT_EQ(StatsOf(rot).items, 2);

  ASSERT_OK(rot.Remove("a"));
  EXPECT_CODE(rot.Remove("a"), Code::kNotFound);
  EXPECT_CODE(rot.Remove("never"), Code::kNotFound);
  EXPECT_EQ(ListKeys(rot), std::vector<std::string>{"b"});
  EXPECT_EQ(NextKeys(rot, 5), std::vector<std::string>{"b"});

  // Added again after removal: a new item, never served.
  ASSERT_OK(rot.Add("a", "again"));
  ASSERT_OK_AND_ASSIGN(auto next, rot.Next(1));
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].key, "a");
  EXPECT_EQ(next[0].payload, "again");
  EXPECT_EQ(next[0].served, 1);
}

TEST_P(RotationConformance, KeysMustBeOneTo255BytesOfTextWithoutNul) {
  ASSERT_OK_AND_ASSIGN(Rotation rot, store_->CreateRotation("rot", {}));
  ASSERT_OK(rot.Add("present"));
  for (const std::string& key :
       {std::string(), std::string(256, 'k'), std::string("bad\xff"),
        std::string("\xe2\x82"), std::string("a\0b", 3)}) {
    SCOPED_TRACE(::testing::PrintToString(key));
    EXPECT_CODE(rot.Add(key), Code::kInvalidArgument);
    EXPECT_CODE(rot.Remove(key), Code::kInvalidArgument);
    EXPECT_CODE(rot.Fail(key), Code::kInvalidArgument);
    EXPECT_CODE(rot.Ok(key), Code::kInvalidArgument);
    EXPECT_CODE(rot.Reset(key), Code::kInvalidArgument);
  }
  EXPECT_EQ(ListKeys(rot), std::vector<std::string>{"present"});

  const std::string longest(255, 'k');
  const std::string text = "smtp relay №2 / eu";
  ASSERT_OK(rot.Add(longest));
  ASSERT_OK(rot.Add(text));
  EXPECT_EQ(NextKeys(rot, 3),
            (std::vector<std::string>{"present", longest, text}));

  // Unknown but valid keys.
  EXPECT_CODE(rot.Fail("ghost"), Code::kNotFound);
  EXPECT_CODE(rot.Ok("ghost"), Code::kNotFound);
  EXPECT_CODE(rot.Reset("ghost"), Code::kNotFound);
}

TEST_P(RotationConformance, PayloadOverTheLimitIsTooLargeAndAddsNothing) {
  ASSERT_OK_AND_ASSIGN(Rotation rot,
                       store_->CreateRotation("rot", {.max_payload_bytes = 4}));
  EXPECT_CODE(rot.Add("a", "12345"), Code::kTooLarge);
  EXPECT_TRUE(ListKeys(rot).empty());
  EXPECT_EQ(StatsOf(rot).items, 0);
  const std::string binary("\0\xff\x01z", 4);
  ASSERT_OK(rot.Add("a", binary));
  ASSERT_OK_AND_ASSIGN(auto next, rot.Next(1));
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].payload, binary);
}

// --- next ------------------------------------------------------------------

TEST_P(RotationConformance, NextRefusesNOutOfRange) {
  ASSERT_OK_AND_ASSIGN(Rotation rot, store_->CreateRotation("rot", {}));
  ASSERT_OK(rot.Add("a"));
  for (int n : {0, -1, 10001}) {
    EXPECT_CODE(rot.Next(n), Code::kInvalidArgument);
  }
  // Refused calls served nothing.
  EXPECT_EQ(StatsOf(rot).serves, 0);
  EXPECT_EQ(Items(rot)["a"].served, 0);
  EXPECT_EQ(NextKeys(rot, 10000), std::vector<std::string>{"a"});
  EXPECT_EQ(NextKeys(rot, 1), std::vector<std::string>{"a"});  // default 1
}

TEST_P(RotationConformance, EmptyPoolServesNothingWithoutError) {
  ASSERT_OK_AND_ASSIGN(Rotation rot, store_->CreateRotation("rot", {}));
  ASSERT_OK_AND_ASSIGN(auto none, rot.Next(5));
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(StatsOf(rot).serves, 0);
}

TEST_P(RotationConformance, FullyParkedPoolServesNothingWithoutError) {
  ASSERT_OK_AND_ASSIGN(Rotation rot,
                       store_->CreateRotation("rot", {.max_failures = 1}));
  ASSERT_OK(rot.Add("a"));
  ASSERT_OK(rot.Add("b"));
  ASSERT_OK(rot.Fail("a"));
  ASSERT_OK(rot.Fail("b"));
  ASSERT_OK_AND_ASSIGN(auto none, rot.Next(5));
  EXPECT_TRUE(none.empty());
  RotationStats st = StatsOf(rot);
  EXPECT_EQ(st.serves, 0);
  EXPECT_EQ(st.parked, 2);
  auto items = Items(rot);
  EXPECT_EQ(items["a"].served, 0);
  EXPECT_EQ(items["b"].served, 0);
}

TEST_P(RotationConformance, NextNeverReturnsAnItemTwiceInOneCall) {
  ASSERT_OK_AND_ASSIGN(Rotation rot, store_->CreateRotation("rot", {}));
  ASSERT_OK(rot.Add("a"));
  ASSERT_OK(rot.Add("b"));
  ASSERT_OK(rot.Add("c"));
  // Asking for more than the pool holds gives each eligible item once.
  EXPECT_EQ(NextKeys(rot, 10), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(NextKeys(rot, 10), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(StatsOf(rot).serves, 6);
}

TEST_P(RotationConformance, NewItemIsServedBeforeItemsServedAlready) {
  ASSERT_OK_AND_ASSIGN(Rotation rot, store_->CreateRotation("rot", {}));
  ASSERT_OK(rot.Add("a"));
  ASSERT_OK(rot.Add("b"));
  ASSERT_OK(rot.Add("c"));
  EXPECT_EQ(NextKeys(rot, 2), (std::vector<std::string>{"a", "b"}));
  // d is never served, like c, but added after c: c, then d, then a, b.
  ASSERT_OK(rot.Add("d"));
  EXPECT_EQ(NextKeys(rot, 3), (std::vector<std::string>{"c", "d", "a"}));
  // Every item served now; a new one goes first.
  ASSERT_OK(rot.Add("e"));
  EXPECT_EQ(NextKeys(rot, 2), (std::vector<std::string>{"e", "b"}));
  EXPECT_EQ(NextKeys(rot, 5),
            (std::vector<std::string>{"c", "d", "a", "e", "b"}));
}

TEST_P(RotationConformance, ServedCountsWhatNextHandedOut) {
  ASSERT_OK_AND_ASSIGN(Rotation rot, store_->CreateRotation("rot", {}));
  ASSERT_OK(rot.Add("a"));
  ASSERT_OK(rot.Add("b"));
  ASSERT_OK(rot.Add("c"));
  ASSERT_OK_AND_ASSIGN(auto one, rot.Next(2));  // a b
  ASSERT_OK_AND_ASSIGN(auto two, rot.Next(2));  // c a
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[0].key, "c");
  EXPECT_EQ(two[0].served, 1);
  EXPECT_EQ(two[1].key, "a");
  EXPECT_EQ(two[1].served, 2);
  auto items = Items(rot);
  EXPECT_EQ(items["a"].served, 2);
  EXPECT_EQ(items["b"].served, 1);
  EXPECT_EQ(items["c"].served, 1);
  EXPECT_EQ(StatsOf(rot).serves, 4);
  // fail/ok/reset do not serve.
  ASSERT_OK_AND_ASSIGN(RotationItem failed, rot.Fail("b"));
  EXPECT_EQ(failed.served, 1);
  EXPECT_EQ(StatsOf(rot).serves, 4);
}

// Strict turns: with items served in the order returned, a pool of 7 asked
// 4 at a time goes 1-4, 5-7 and 1, 2-5, 6-7 and 1-2, ... and no item is
// ever more than one serve ahead of another.
TEST_P(RotationConformance, ServesInStrictTurnsAcrossCallBoundaries) {
  ASSERT_OK_AND_ASSIGN(Rotation rot, store_->CreateRotation("rot", {}));
  constexpr int kItems = 7;
  for (int i = 1; i <= kItems; ++i) ASSERT_OK(rot.Add(std::to_string(i)));
  std::map<std::string, int> counts;
  int turn = 0;
  for (int call = 0; call < 50; ++call) {
    std::vector<std::string> want;
    for (int i = 0; i < 4; ++i)
      want.push_back(std::to_string(turn++ % kItems + 1));
    ASSERT_EQ(NextKeys(rot, 4), want) << "call " << call;
    for (const auto& k : want) ++counts[k];
    int lo = INT32_MAX, hi = 0;
    for (const auto& [k, c] : counts) {
      lo = std::min(lo, c);
      hi = std::max(hi, c);
    }
    if (counts.size() < kItems) lo = 0;
    ASSERT_LE(hi - lo, 1) << "after call " << call;
  }
}

// --- fail, ok, reset
// ----------------------------------------------------------

TEST_P(RotationConformance, FailCountsAndParksAtMaxFailures) {
  ASSERT_OK_AND_ASSIGN(Rotation rot,
                       store_->CreateRotation("rot", {.max_failures = 3}));
  ASSERT_OK(rot.Add("a", "pa"));
  ASSERT_OK(rot.Add("b"));
  for (int i = 1; i <= 2; ++i) {
    ASSERT_OK_AND_ASSIGN(RotationItem item, rot.Fail("a"));
    EXPECT_EQ(item.key, "a");
    EXPECT_EQ(item.payload, "pa");
    EXPECT_EQ(item.failures, i);
    EXPECT_FALSE(item.parked);
  }
  // Not yet parked: still served.
  EXPECT_EQ(NextKeys(rot, 2), (std::vector<std::string>{"a", "b"}));
  ASSERT_OK_AND_ASSIGN(RotationItem parked, rot.Fail("a"));
  EXPECT_EQ(parked.failures, 3);
  EXPECT_TRUE(parked.parked);
  EXPECT_EQ(NextKeys(rot, 2), std::vector<std::string>{"b"});
  EXPECT_EQ(NextKeys(rot, 2), std::vector<std::string>{"b"});
  EXPECT_EQ(StatsOf(rot).parked, 1);
  EXPECT_TRUE(Items(rot)["a"].parked);
}

TEST_P(RotationConformance, OkClearsFailuresButNotParking) {
  ASSERT_OK_AND_ASSIGN(Rotation rot,
                       store_->CreateRotation("rot", {.max_failures = 3}));
  ASSERT_OK(rot.Add("a"));
  ASSERT_OK(rot.Fail("a"));
  ASSERT_OK(rot.Fail("a"));
  ASSERT_OK_AND_ASSIGN(RotationItem ok, rot.Ok("a"));
  EXPECT_EQ(ok.key, "a");
  EXPECT_EQ(ok.failures, 0);
  EXPECT_FALSE(ok.parked);
  EXPECT_EQ(Items(rot)["a"].failures, 0);
  // Counting starts over: two more failures do not park it.
  ASSERT_OK(rot.Fail("a"));
  ASSERT_OK_AND_ASSIGN(RotationItem two, rot.Fail("a"));
  EXPECT_EQ(two.failures, 2);
  EXPECT_FALSE(two.parked);
  ASSERT_OK_AND_ASSIGN(RotationItem three, rot.Fail("a"));
  EXPECT_TRUE(three.parked);

  // ok() on a parked item is refused and leaves it parked.
  EXPECT_CODE(rot.Ok("a"), Code::kFailedPrecondition);
  auto item = Items(rot)["a"];
  EXPECT_TRUE(item.parked);
  EXPECT_EQ(item.failures, 3);
  EXPECT_TRUE(NextKeys(rot, 1).empty());
}

TEST_P(RotationConformance, ResetUnparksAndClearsFailures) {
  ASSERT_OK_AND_ASSIGN(Rotation rot,
                       store_->CreateRotation("rot", {.max_failures = 1}));
  ASSERT_OK(rot.Add("a"));
  ASSERT_OK(rot.Add("b"));
  ASSERT_OK_AND_ASSIGN(RotationItem parked, rot.Fail("a"));
  EXPECT_TRUE(parked.parked);
  EXPECT_EQ(NextKeys(rot, 2), std::vector<std::string>{"b"});

  ASSERT_OK_AND_ASSIGN(RotationItem reset, rot.Reset("a"));
  EXPECT_EQ(reset.key, "a");
  EXPECT_EQ(reset.failures, 0);
  EXPECT_FALSE(reset.parked);
  EXPECT_EQ(StatsOf(rot).parked, 0);
  // Never served, so it goes first.
  EXPECT_EQ(NextKeys(rot, 2), (std::vector<std::string>{"a", "b"}));
  // Reset on an item that is fine is harmless.
  ASSERT_OK_AND_ASSIGN(RotationItem again, rot.Reset("b"));
  EXPECT_EQ(again.failures, 0);
  EXPECT_FALSE(again.parked);
}

// --- list and stats ----------------------------------------------------------

TEST_P(RotationConformance, ListIsInServingOrderWithParkedItemsLast) {
  ASSERT_OK_AND_ASSIGN(Rotation rot,
                       store_->CreateRotation("rot", {.max_failures = 1}));
  EXPECT_TRUE(ListKeys(rot).empty());
  for (const char* k : {"a", "b", "c", "d", "e"}) ASSERT_OK(rot.Add(k));
  EXPECT_EQ(ListKeys(rot), (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(NextKeys(rot, 2), (std::vector<std::string>{"a", "b"}));
  ASSERT_OK(rot.Fail("c"));  // parked
  ASSERT_OK_AND_ASSIGN(auto list, rot.List());
  ASSERT_EQ(list.size(), 5u);
  std::vector<std::string> keys;
  for (const auto& item : list) keys.push_back(item.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"d", "e", "a", "b", "c"}));
  EXPECT_FALSE(list[0].parked);
  EXPECT_TRUE(list[4].parked);
  EXPECT_EQ(list[4].failures, 1);
  // The list is what next serves, in that order.
  EXPECT_EQ(NextKeys(rot, 4), (std::vector<std::string>{"d", "e", "a", "b"}));
  // Listing serves nothing.
  EXPECT_EQ(StatsOf(rot).serves, 6);
}

TEST_P(RotationConformance, StatsCountItemsParkedAndServes) {
  ASSERT_OK_AND_ASSIGN(Rotation rot,
                       store_->CreateRotation("pool", {.max_failures = 2}));
  RotationStats empty = StatsOf(rot);
  EXPECT_EQ(empty.name, "pool");
  EXPECT_EQ(empty.max_failures, 2);
  EXPECT_EQ(empty.items, 0);
  EXPECT_EQ(empty.parked, 0);
  EXPECT_EQ(empty.serves, 0);

  for (const char* k : {"a", "b", "c"}) ASSERT_OK(rot.Add(k));
  ASSERT_OK(rot.Next(2));
  ASSERT_OK(rot.Next(3));
  ASSERT_OK(rot.Fail("b"));
  ASSERT_OK(rot.Fail("b"));
  ASSERT_OK(rot.Remove("c"));
  RotationStats st = StatsOf(rot);
  EXPECT_EQ(st.name, "pool");
  EXPECT_EQ(st.items, 2);
  EXPECT_EQ(st.parked, 1);
  EXPECT_EQ(st.serves, 5);  // since creation, removed items included
}

// --- concurrency -----------------------------------------------------------

// Issue 5: 4 concurrent callers, 10,000 calls of next(3) over 17 items.
// Every item is served the same number of times +-1 (counted from what the
// calls returned), and no call returns an item twice.
TEST_P(RotationConformance, FourConcurrentCallersServeEveryItemEqually) {
  constexpr int kItems = 17;
  constexpr int kThreads = 4;
  constexpr int kCalls = 10000;
  constexpr int kN = 3;
  ASSERT_OK_AND_ASSIGN(Rotation rot, store_->CreateRotation("rot", {}));
  for (int i = 0; i < kItems; ++i) {
    ASSERT_OK(rot.Add("item-" + std::to_string(i)));
  }

  std::vector<std::map<std::string, std::int64_t>> counts(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int call = 0; call < kCalls / kThreads; ++call) {
        auto r = rot.Next(kN);
        if (!r.ok()) {
          errors[t] = r.status().ToString();
          return;
        }
        if (r->size() != static_cast<size_t>(kN)) {
          errors[t] = "a call returned " + std::to_string(r->size());
          return;
        }
        std::set<std::string> in_call;
        for (const RotationItem& item : *r) {
          if (!in_call.insert(item.key).second) {
            errors[t] = "one call returned '" + item.key + "' twice";
            return;
          }
          ++counts[t][item.key];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) ASSERT_EQ(errors[t], "") << "thread " << t;

  std::map<std::string, std::int64_t> total;
  for (const auto& c : counts) {
    for (const auto& [k, n] : c) total[k] += n;
  }
  ASSERT_EQ(total.size(), static_cast<size_t>(kItems));
  std::int64_t lo = INT64_MAX, hi = 0, sum = 0;
  for (const auto& [k, n] : total) {
    lo = std::min(lo, n);
    hi = std::max(hi, n);
    sum += n;
  }
  EXPECT_EQ(sum, std::int64_t{kCalls} * kN);
  EXPECT_LE(hi - lo, 1) << "least served " << lo << ", most served " << hi;

  // The store counted the same.
  auto items = Items(rot);
  for (const auto& [k, n] : total) EXPECT_EQ(items[k].served, n) << k;
  EXPECT_EQ(StatsOf(rot).serves, std::int64_t{kCalls} * kN);
}

INSTANTIATE_TEST_SUITE_P(Engines, RotationConformance,
                         ::testing::ValuesIn(Engines()), EngineName);

}  // namespace
}  // namespace sqlq::test
