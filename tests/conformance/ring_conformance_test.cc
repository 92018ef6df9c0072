// The ring conformance suite: docs/rings-and-rotations.md, rule by
// rule, through the public API only (Store::CreateRing/GetRing/DropRing and
// sqlq::Ring). Engine-neutral: it runs on every engine of Engines()
// (engine_fixture.h).

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "sqlq/ring.h"
#include "sqlq/rotation.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "tests/conformance/engine_fixture.h"

namespace sqlq::test {
namespace {

static_assert(std::is_same_v<decltype(RingEntry::seq), std::int64_t>,
              "sequence numbers are 64-bit");

class RingConformance : public EngineTest {
 protected:
  std::int64_t PushOne(Ring& ring, std::string_view group,
                       std::string_view payload) {
    auto r = ring.Push(group, payload);
    if (!r.ok()) {
      ADD_FAILURE() << "push: " << r.status().ToString();
      return 0;
    }
    return r->seq;
  }

  // The group's sequence numbers, oldest first.
  std::vector<std::int64_t> Seqs(Ring& ring, std::string_view group) {
    auto r = ring.Read(group, {.oldest_first = true, .limit = 10000});
    if (!r.ok()) {
      ADD_FAILURE() << "read: " << r.status().ToString();
      return {};
    }
    std::vector<std::int64_t> out;
    for (const RingEntry& e : *r) out.push_back(e.seq);
    return out;
  }

  std::vector<std::string> Payloads(Ring& ring, std::string_view group,
                                    RingReadOptions o = {}) {
    auto r = ring.Read(group, o);
    if (!r.ok()) {
      ADD_FAILURE() << "read: " << r.status().ToString();
      return {};
    }
    std::vector<std::string> out;
    for (const RingEntry& e : *r) out.push_back(e.payload);
    return out;
  }

  std::map<std::string, std::int64_t> GroupsOf(Ring& ring) {
    auto r = ring.Groups();
    if (!r.ok()) {
      ADD_FAILURE() << "groups: " << r.status().ToString();
      return {};
    }
    std::map<std::string, std::int64_t> out;
    std::vector<std::string> order;
    for (const RingGroup& g : *r) {
      out[g.group] = g.entries;
      order.push_back(g.group);
    }
    EXPECT_TRUE(std::is_sorted(order.begin(), order.end()))
        << "groups are listed by name";
    return out;
  }

  RingStats StatsOf(Ring& ring) {
    auto r = ring.Stats();
    if (!r.ok()) {
      ADD_FAILURE() << "stats: " << r.status().ToString();
      return {};
    }
    return *r;
  }
};

// --- create, names, get, drop ----------------------------------------------

TEST_P(RingConformance, RingsAndRotationsAreListedByNameWithTheirSettings) {
  ASSERT_OK_AND_ASSIGN(auto empty, store_->ListRings());
  EXPECT_TRUE(empty.empty());
  ASSERT_OK(store_->CreateQueue("a-queue", {}));
  ASSERT_OK(store_->CreateRing("views", {.capacity = 3}));
  ASSERT_OK(
      store_->CreateRing("audit", {.capacity = 50, .max_payload_bytes = 4096}));
  ASSERT_OK(store_->CreateRotation("relays", {.max_failures = 2}));
  ASSERT_OK_AND_ASSIGN(auto rings, store_->ListRings());
  ASSERT_EQ(rings.size(), 2u) << "a queue or rotation was listed as a ring";
  EXPECT_EQ(rings[0].name, "audit");
  EXPECT_EQ(rings[0].options.capacity, 50);
  EXPECT_EQ(rings[0].options.max_payload_bytes, 4096u);
  EXPECT_EQ(rings[1].name, "views");
  EXPECT_EQ(rings[1].options.capacity, 3);
  ASSERT_OK_AND_ASSIGN(auto rotations, store_->ListRotations());
  ASSERT_EQ(rotations.size(), 1u);
  EXPECT_EQ(rotations[0].name, "relays");
  EXPECT_EQ(rotations[0].options.max_failures, 2);
  EXPECT_EQ(rotations[0].options.max_payload_bytes, std::size_t{1} << 20);
  // Queues are listed as queues only.
  ASSERT_OK_AND_ASSIGN(auto queues, store_->ListQueues());
  ASSERT_EQ(queues.size(), 1u);
  EXPECT_EQ(queues[0].name, "a-queue");
  ASSERT_OK(store_->DropRing("views"));
  ASSERT_OK_AND_ASSIGN(rings, store_->ListRings());
  ASSERT_EQ(rings.size(), 1u);
  EXPECT_EQ(rings[0].name, "audit");
}

TEST_P(RingConformance, CreateAcceptsCapacityFromOneToAMillion) {
  ASSERT_OK_AND_ASSIGN(Ring one, store_->CreateRing("one", {.capacity = 1}));
  ASSERT_OK_AND_ASSIGN(Ring big,
                       store_->CreateRing("big", {.capacity = 1000000}));
  EXPECT_EQ(one.name(), "one");
  EXPECT_EQ(StatsOf(one).capacity, 1);
  EXPECT_EQ(StatsOf(big).capacity, 1000000);

  // Capacity 1: every push replaces the group's only entry.
  EXPECT_EQ(PushOne(one, "g", "a"), 1);
  EXPECT_EQ(PushOne(one, "g", "b"), 2);
  EXPECT_EQ(Payloads(one, "g"), std::vector<std::string>{"b"});
  EXPECT_EQ(Seqs(one, "g"), std::vector<std::int64_t>{2});

  // A handle from GetRing sees the same ring and its options.
  ASSERT_OK_AND_ASSIGN(Ring again, store_->GetRing("big"));
  EXPECT_EQ(again.name(), "big");
  EXPECT_EQ(StatsOf(again).capacity, 1000000);
}

TEST_P(RingConformance, CreateRefusesInvalidCapacityAndCreatesNothing) {
  for (std::int64_t capacity : {std::int64_t{0}, std::int64_t{-1},
                                std::int64_t{1000001}, INT64_MAX, INT64_MIN}) {
    SCOPED_TRACE(capacity);
    EXPECT_CODE(store_->CreateRing("r", {.capacity = capacity}),
                Code::kInvalidArgument);
    EXPECT_CODE(store_->GetRing("r"), Code::kNotFound);
  }
  EXPECT_CODE(store_->CreateRing("r", {.capacity = 5, .max_payload_bytes = 0}),
              Code::kInvalidArgument);
  EXPECT_CODE(store_->CreateRing(
                  "r", {.capacity = 5, .max_payload_bytes = (64u << 20) + 1}),
              Code::kInvalidArgument);
  EXPECT_CODE(store_->GetRing("r"), Code::kNotFound);
  // The name is still free.
  EXPECT_OK(store_->CreateRing("r", {.capacity = 5}));
}

TEST_P(RingConformance, CreateRefusesInvalidNamesAndCreatesNothing) {
  for (const std::string& name :
       {std::string(), std::string("has space"), std::string("a/b"),
        std::string(".dot"), std::string(65, 'x'), std::string("caf\xc3\xa9"),
        std::string("nul\0x", 5)}) {
    SCOPED_TRACE(name);
    EXPECT_CODE(store_->CreateRing(name, {.capacity = 3}),
                Code::kInvalidArgument);
    EXPECT_CODE(store_->GetRing(name), Code::kInvalidArgument);
  }
  // 64 characters of the allowed set is fine.
  const std::string longest = std::string(62, 'a') + "_-";
  EXPECT_OK(store_->CreateRing(longest, {.capacity = 3}));
  EXPECT_OK(store_->GetRing(longest));
}

TEST_P(RingConformance, NamesAreSharedWithQueuesAndRotations) {
  ASSERT_OK(store_->CreateQueue("q", {}));
  ASSERT_OK(store_->CreateRotation("rot", {}));
  ASSERT_OK(store_->CreateRing("r", {.capacity = 3}));

  EXPECT_CODE(store_->CreateRing("q", {.capacity = 3}), Code::kAlreadyExists);
  EXPECT_CODE(store_->CreateRing("rot", {.capacity = 3}), Code::kAlreadyExists);
  EXPECT_CODE(store_->CreateRing("r", {.capacity = 7}), Code::kAlreadyExists);
  EXPECT_CODE(store_->CreateQueue("r", {}), Code::kAlreadyExists);
  EXPECT_CODE(store_->CreateRotation("r", {}), Code::kAlreadyExists);

  // A refused create changed nothing: the ring keeps its capacity.
  ASSERT_OK_AND_ASSIGN(Ring r, store_->GetRing("r"));
  EXPECT_EQ(StatsOf(r).capacity, 3);

  // Another kind's name is not a ring (and says so), a free name is missing.
  EXPECT_CODE(store_->GetRing("q"), Code::kFailedPrecondition);
  EXPECT_CODE(store_->GetRing("rot"), Code::kFailedPrecondition);
  EXPECT_CODE(store_->GetRing("nope"), Code::kNotFound);
  EXPECT_CODE(store_->Queue("r"), Code::kFailedPrecondition);
  EXPECT_CODE(store_->GetRotation("r"), Code::kFailedPrecondition);
  // Dropping as a ring what is not a ring drops nothing.
  EXPECT_CODE(store_->DropRing("q"), Code::kFailedPrecondition);
  EXPECT_CODE(store_->DropRing("nope"), Code::kNotFound);
  EXPECT_OK(store_->Queue("q"));
}

TEST_P(RingConformance, DropRemovesTheRingAndItsEntries) {
  ASSERT_OK_AND_ASSIGN(Ring r, store_->CreateRing("r", {.capacity = 3}));
  PushOne(r, "g", "a");
  PushOne(r, "g", "b");
  ASSERT_OK(store_->DropRing("r"));
  EXPECT_CODE(store_->GetRing("r"), Code::kNotFound);
  EXPECT_CODE(store_->DropRing("r"), Code::kNotFound);
  // A handle to the dropped ring can no longer push.
  EXPECT_CODE(r.Push("g", "c"), Code::kNotFound);

  // The name is free again, and the new ring starts empty from seq 1.
  ASSERT_OK_AND_ASSIGN(Ring fresh, store_->CreateRing("r", {.capacity = 3}));
  EXPECT_TRUE(GroupsOf(fresh).empty());
  EXPECT_EQ(Seqs(fresh, "g"), std::vector<std::int64_t>{});
  EXPECT_EQ(PushOne(fresh, "g", "x"), 1);
  EXPECT_EQ(StatsOf(fresh).pushes, 1);
}

// --- push ------------------------------------------------------------------

TEST_P(RingConformance, PushNumbersEachGroupFromOne) {
  ASSERT_OK_AND_ASSIGN(Ring r, store_->CreateRing("r", {.capacity = 100}));
  EXPECT_EQ(PushOne(r, "a", "a1"), 1);
  EXPECT_EQ(PushOne(r, "a", "a2"), 2);
  EXPECT_EQ(PushOne(r, "b", "b1"), 1);
  EXPECT_EQ(PushOne(r, "a", "a3"), 3);
  EXPECT_EQ(PushOne(r, "b", "b2"), 2);
  EXPECT_EQ(PushOne(r, "c", "c1"), 1);

  // A second ring's groups have their own sequences.
  ASSERT_OK_AND_ASSIGN(Ring other,
                       store_->CreateRing("other", {.capacity = 100}));
  EXPECT_EQ(PushOne(other, "a", "x"), 1);

  EXPECT_EQ(Seqs(r, "a"), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(Seqs(r, "b"), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(Seqs(r, "c"), (std::vector<std::int64_t>{1}));
}

TEST_P(RingConformance, PushReturnsTheStoredEntry) {
  ASSERT_OK_AND_ASSIGN(Ring r, store_->CreateRing("r", {.capacity = 5}));
  const std::string payload("bin\0ary\xff", 8);
  ASSERT_OK_AND_ASSIGN(RingEntry e, r.Push("article/42", payload));
  EXPECT_EQ(e.seq, 1);
  EXPECT_EQ(e.group, "article/42");
  EXPECT_EQ(e.payload, payload);
  EXPECT_EQ(Us(e.pushed_at), Us(ManualClock::kStart));

  clock_->Advance(std::chrono::seconds(7));
  // An empty payload, as a default-constructed string_view (null data).
  ASSERT_OK_AND_ASSIGN(RingEntry e2, r.Push("article/42", std::string_view()));
  EXPECT_EQ(Us(e2.pushed_at), Us(ManualClock::kStart) + 7000000);

  ASSERT_OK_AND_ASSIGN(auto read, r.Read("article/42", {.oldest_first = true}));
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[0].seq, 1);
  EXPECT_EQ(read[0].group, "article/42");
  EXPECT_EQ(read[0].payload, payload);
  EXPECT_EQ(Us(read[0].pushed_at), Us(e.pushed_at));
  EXPECT_EQ(read[1].seq, 2);
  EXPECT_EQ(read[1].payload, "");
  EXPECT_EQ(Us(read[1].pushed_at), Us(e2.pushed_at));
}

TEST_P(RingConformance, FullGroupEvictsExactlyItsOldestEntry) {
  ASSERT_OK_AND_ASSIGN(Ring r, store_->CreateRing("r", {.capacity = 3}));
  for (int i = 1; i <= 3; ++i) PushOne(r, "g", "p" + std::to_string(i));
  PushOne(r, "other", "o1");
  EXPECT_EQ(Seqs(r, "g"), (std::vector<std::int64_t>{1, 2, 3}));

  EXPECT_EQ(PushOne(r, "g", "p4"), 4);
  EXPECT_EQ(Seqs(r, "g"), (std::vector<std::int64_t>{2, 3, 4}));
  EXPECT_EQ(PushOne(r, "g", "p5"), 5);
  EXPECT_EQ(Payloads(r, "g", {.oldest_first = true}),
            (std::vector<std::string>{"p3", "p4", "p5"}));
  // Another group is untouched by g's evictions.
  EXPECT_EQ(Payloads(r, "other"), std::vector<std::string>{"o1"});
  EXPECT_EQ(GroupsOf(r),
            (std::map<std::string, std::int64_t>{{"g", 3}, {"other", 1}}));
}

TEST_P(RingConformance, PayloadOverTheLimitIsTooLargeAndStoresNothing) {
  ASSERT_OK_AND_ASSIGN(
      Ring r, store_->CreateRing("r", {.capacity = 3, .max_payload_bytes = 8}));
  EXPECT_CODE(r.Push("g", std::string(9, 'x')), Code::kTooLarge);
  EXPECT_TRUE(GroupsOf(r).empty());
  RingStats st = StatsOf(r);
  EXPECT_EQ(st.pushes, 0);
  EXPECT_EQ(st.entries, 0);
  // The refused push used no sequence number.
  EXPECT_EQ(PushOne(r, "g", std::string(8, 'x')), 1);
  EXPECT_CODE(r.Push("g", std::string(1000, 'x')), Code::kTooLarge);
  EXPECT_EQ(Payloads(r, "g"), std::vector<std::string>{std::string(8, 'x')});
  EXPECT_EQ(PushOne(r, "g", "y"), 2);
}

TEST_P(RingConformance, GroupMustBeOneTo255BytesOfTextWithoutNul) {
  ASSERT_OK_AND_ASSIGN(Ring r, store_->CreateRing("r", {.capacity = 3}));
  const std::vector<std::string> bad = {
      std::string(), std::string(256, 'g'), std::string("bad\xff"),
      std::string("\xc3"), std::string("a\0b", 3)};
  for (const std::string& g : bad) {
    SCOPED_TRACE(::testing::PrintToString(g));
    EXPECT_CODE(r.Push(g, "p"), Code::kInvalidArgument);
    EXPECT_CODE(r.Read(g), Code::kInvalidArgument);
    EXPECT_CODE(r.Delete(g, 1), Code::kInvalidArgument);
    EXPECT_CODE(r.DeleteGroup(g), Code::kInvalidArgument);
  }
  EXPECT_TRUE(GroupsOf(r).empty());
  EXPECT_EQ(StatsOf(r).pushes, 0);

  // Any text of 1..255 bytes is a group: spaces, slashes, non-ASCII.
  const std::string longest(255, 'g');
  const std::string text = "статья 42 / comments";
  EXPECT_EQ(PushOne(r, longest, "p"), 1);
  EXPECT_EQ(PushOne(r, text, "p"), 1);
  EXPECT_EQ(PushOne(r, "x", "p"), 1);
  EXPECT_EQ(GroupsOf(r), (std::map<std::string, std::int64_t>{
                             {longest, 1}, {text, 1}, {"x", 1}}));
}

// --- read ------------------------------------------------------------------

// Pages of a group: after_seq goes on from the last entry read, in either
// order, and a page after the last entry is empty.
TEST_P(RingConformance, ReadGoesOnAfterASeqInEitherOrder) {
  ASSERT_OK_AND_ASSIGN(Ring r, store_->CreateRing("r", {.capacity = 10}));
  std::vector<std::int64_t> seqs;
  for (int i = 1; i <= 5; ++i) {
    seqs.push_back(PushOne(r, "g", "p" + std::to_string(i)));
  }
  EXPECT_EQ(Payloads(r, "g", {.limit = 2, .after_seq = seqs[3]}),
            (std::vector<std::string>{"p3", "p2"}));
  EXPECT_EQ(Payloads(r, "g", {.limit = 10, .after_seq = seqs[1]}),
            (std::vector<std::string>{"p1"}));
  EXPECT_EQ(Payloads(r, "g",
                     {.oldest_first = true, .limit = 2, .after_seq = seqs[1]}),
            (std::vector<std::string>{"p3", "p4"}));
  EXPECT_TRUE(Payloads(r, "g", {.limit = 10, .after_seq = seqs[0]}).empty());
  EXPECT_TRUE(
      Payloads(r, "g", {.oldest_first = true, .after_seq = seqs[4]}).empty());
}

TEST_P(RingConformance, ReadIsNewestFirstByDefaultWithALimit) {
  ASSERT_OK_AND_ASSIGN(Ring r, store_->CreateRing("r", {.capacity = 10}));
  for (int i = 1; i <= 5; ++i) PushOne(r, "g", "p" + std::to_string(i));

  EXPECT_EQ(Payloads(r, "g"),
            (std::vector<std::string>{"p5", "p4", "p3", "p2", "p1"}));
  EXPECT_EQ(Payloads(r, "g", {.limit = 2}),
            (std::vector<std::string>{"p5", "p4"}));
  EXPECT_EQ(Payloads(r, "g", {.oldest_first = true}),
            (std::vector<std::string>{"p1", "p2", "p3", "p4", "p5"}));
  EXPECT_EQ(Payloads(r, "g", {.oldest_first = true, .limit = 2}),
            (std::vector<std::string>{"p1", "p2"}));
  EXPECT_EQ(Payloads(r, "g", {.limit = 1}), std::vector<std::string>{"p5"});
  EXPECT_EQ(Payloads(r, "g", {.limit = 10000}).size(), 5u);

  EXPECT_CODE(r.Read("g", {.limit = 0}), Code::kInvalidArgument);
  EXPECT_CODE(r.Read("g", {.limit = -1}), Code::kInvalidArgument);
  EXPECT_CODE(r.Read("g", {.limit = 10001}), Code::kInvalidArgument);

  // A group never pushed to reads as empty.
  ASSERT_OK_AND_ASSIGN(auto none, r.Read("never"));
  EXPECT_TRUE(none.empty());
}

TEST_P(RingConformance, GroupsListsGroupsWithEntriesAndTheirCounts) {
  ASSERT_OK_AND_ASSIGN(Ring r, store_->CreateRing("r", {.capacity = 3}));
  EXPECT_TRUE(GroupsOf(r).empty());
  PushOne(r, "b", "1");
  PushOne(r, "b", "2");
  PushOne(r, "a", "1");
  for (int i = 0; i < 5; ++i) PushOne(r, "c", "x");  // capped at 3
  PushOne(r, "d", "1");
  EXPECT_EQ(GroupsOf(r), (std::map<std::string, std::int64_t>{
                             {"a", 1}, {"b", 2}, {"c", 3}, {"d", 1}}));

  // Emptied groups are not listed: one by deleting its only entry, one by
  // deleting the group.
  ASSERT_OK(r.Delete("a", 1));
  ASSERT_OK(r.DeleteGroup("c"));
  EXPECT_EQ(GroupsOf(r),
            (std::map<std::string, std::int64_t>{{"b", 2}, {"d", 1}}));
}

// --- delete ----------------------------------------------------------------

TEST_P(RingConformance, DeleteRemovesOneEntry) {
  ASSERT_OK_AND_ASSIGN(Ring r, store_->CreateRing("r", {.capacity = 5}));
  for (int i = 1; i <= 3; ++i) PushOne(r, "g", "p" + std::to_string(i));
  PushOne(r, "h", "h1");

  ASSERT_OK(r.Delete("g", 2));
  EXPECT_EQ(Seqs(r, "g"), (std::vector<std::int64_t>{1, 3}));
  EXPECT_EQ(Payloads(r, "g"), (std::vector<std::string>{"p3", "p1"}));
  EXPECT_EQ(Seqs(r, "h"), std::vector<std::int64_t>{1});

  EXPECT_CODE(r.Delete("g", 2), Code::kNotFound);     // already deleted
  EXPECT_CODE(r.Delete("g", 4), Code::kNotFound);     // never pushed
  EXPECT_CODE(r.Delete("nope", 1), Code::kNotFound);  // no such group
  EXPECT_CODE(r.Delete("g", 0), Code::kInvalidArgument);
  EXPECT_CODE(r.Delete("g", -3), Code::kInvalidArgument);
  EXPECT_EQ(Seqs(r, "g"), (std::vector<std::int64_t>{1, 3}));
  EXPECT_EQ(GroupsOf(r),
            (std::map<std::string, std::int64_t>{{"g", 2}, {"h", 1}}));
  EXPECT_EQ(StatsOf(r).entries, 3);
}

TEST_P(RingConformance, EvictedEntryIsNotFound) {
  ASSERT_OK_AND_ASSIGN(Ring r, store_->CreateRing("r", {.capacity = 2}));
  for (int i = 1; i <= 3; ++i) PushOne(r, "g", "p");
  EXPECT_CODE(r.Delete("g", 1), Code::kNotFound);
  EXPECT_EQ(Seqs(r, "g"), (std::vector<std::int64_t>{2, 3}));
}

TEST_P(RingConformance, DeleteGroupRemovesEveryEntryAndCountsThem) {
  ASSERT_OK_AND_ASSIGN(Ring r, store_->CreateRing("r", {.capacity = 5}));
  for (int i = 0; i < 4; ++i) PushOne(r, "g", "p");
  PushOne(r, "h", "h1");
  ASSERT_OK_AND_ASSIGN(std::int64_t deleted, r.DeleteGroup("g"));
  EXPECT_EQ(deleted, 4);
  EXPECT_TRUE(Seqs(r, "g").empty());
  EXPECT_EQ(GroupsOf(r), (std::map<std::string, std::int64_t>{{"h", 1}}));
  // Nothing left to delete.
  ASSERT_OK_AND_ASSIGN(std::int64_t again, r.DeleteGroup("g"));
  EXPECT_EQ(again, 0);
  ASSERT_OK_AND_ASSIGN(std::int64_t never, r.DeleteGroup("never"));
  EXPECT_EQ(never, 0);
  EXPECT_EQ(Seqs(r, "h"), std::vector<std::int64_t>{1});
}

TEST_P(RingConformance, SequenceNumbersAreNeverReusedAfterDeletes) {
  ASSERT_OK_AND_ASSIGN(Ring r, store_->CreateRing("r", {.capacity = 3}));
  for (int i = 0; i < 3; ++i) PushOne(r, "g", "p");
  // Deleting the newest entry does not give its number back.
  ASSERT_OK(r.Delete("g", 3));
  EXPECT_EQ(PushOne(r, "g", "p"), 4);
  // Nor does deleting the whole group.
  ASSERT_OK_AND_ASSIGN(std::int64_t n, r.DeleteGroup("g"));
  EXPECT_EQ(n, 3);
  EXPECT_EQ(PushOne(r, "g", "p"), 5);
  EXPECT_EQ(Seqs(r, "g"), std::vector<std::int64_t>{5});
  // Nor deleting the group's only entry.
  ASSERT_OK(r.Delete("g", 5));
  EXPECT_EQ(PushOne(r, "g", "p"), 6);
  EXPECT_EQ(Seqs(r, "g"), std::vector<std::int64_t>{6});
}

TEST_P(RingConformance, AfterDeletesPushesKeepExactlyTheNewestN) {
  ASSERT_OK_AND_ASSIGN(Ring r, store_->CreateRing("r", {.capacity = 3}));
  for (int i = 0; i < 3; ++i) PushOne(r, "g", "p");
  // A hole in the middle: the group holds 2, so the next push evicts none.
  ASSERT_OK(r.Delete("g", 2));
  EXPECT_EQ(PushOne(r, "g", "p"), 4);
  EXPECT_EQ(Seqs(r, "g"), (std::vector<std::int64_t>{1, 3, 4}));
  // Full again: the oldest (1) goes, not the one after the hole.
  EXPECT_EQ(PushOne(r, "g", "p"), 5);
  EXPECT_EQ(Seqs(r, "g"), (std::vector<std::int64_t>{3, 4, 5}));
  // A hole at the oldest end.
  ASSERT_OK(r.Delete("g", 3));
  EXPECT_EQ(PushOne(r, "g", "p"), 6);
  EXPECT_EQ(Seqs(r, "g"), (std::vector<std::int64_t>{4, 5, 6}));
  // Two holes, then three pushes: always exactly the newest three.
  ASSERT_OK(r.Delete("g", 4));
  ASSERT_OK(r.Delete("g", 6));
  EXPECT_EQ(PushOne(r, "g", "p"), 7);
  EXPECT_EQ(Seqs(r, "g"), (std::vector<std::int64_t>{5, 7}));
  EXPECT_EQ(PushOne(r, "g", "p"), 8);
  EXPECT_EQ(Seqs(r, "g"), (std::vector<std::int64_t>{5, 7, 8}));
  EXPECT_EQ(PushOne(r, "g", "p"), 9);
  EXPECT_EQ(Seqs(r, "g"), (std::vector<std::int64_t>{7, 8, 9}));
  EXPECT_EQ(GroupsOf(r), (std::map<std::string, std::int64_t>{{"g", 3}}));
  // After the group is deleted, it fills up to exactly N again.
  ASSERT_OK(r.DeleteGroup("g"));
  for (int i = 0; i < 5; ++i) PushOne(r, "g", "p");
  EXPECT_EQ(Seqs(r, "g"), (std::vector<std::int64_t>{12, 13, 14}));
  EXPECT_EQ(GroupsOf(r), (std::map<std::string, std::int64_t>{{"g", 3}}));
}

// A long random mix of pushes, deletes and group deletes over a few groups,
// checked after every step against a model: each group holds the newest
// `capacity` of its entries not deleted, numbered from 1 without reuse.
TEST_P(RingConformance, RandomPushesAndDeletesMatchTheModel) {
  constexpr std::int64_t kCapacity = 4;
  ASSERT_OK_AND_ASSIGN(Ring r,
                       store_->CreateRing("r", {.capacity = kCapacity}));
  const std::vector<std::string> groups = {"a", "b", "c"};
  std::map<std::string, std::deque<std::int64_t>> model;
  std::map<std::string, std::int64_t> last_seq;
  std::int64_t pushes = 0;
  std::mt19937 rng(12345);
  for (int step = 0; step < 400; ++step) {
    const std::string& g = groups[rng() % groups.size()];
    auto& entries = model[g];
    const unsigned op = rng() % 10;
    if (op < 6) {
      const std::int64_t seq = PushOne(r, g, "s" + std::to_string(step));
      ASSERT_EQ(seq, ++last_seq[g]) << "step " << step;
      ++pushes;
      entries.push_back(seq);
      if (static_cast<std::int64_t>(entries.size()) > kCapacity) {
        entries.pop_front();
      }
    } else if (op < 9) {
      if (entries.empty()) continue;
      const std::int64_t seq = entries[rng() % entries.size()];
      ASSERT_OK(r.Delete(g, seq));
      entries.erase(std::find(entries.begin(), entries.end(), seq));
    } else {
      ASSERT_OK_AND_ASSIGN(std::int64_t n, r.DeleteGroup(g));
      ASSERT_EQ(n, static_cast<std::int64_t>(entries.size()))
          << "step " << step;
      entries.clear();
    }
    std::map<std::string, std::int64_t> want_groups;
    std::int64_t total = 0;
    for (const auto& [name, seqs] : model) {
      ASSERT_EQ(Seqs(r, name),
                std::vector<std::int64_t>(seqs.begin(), seqs.end()))
          << "group " << name << " after step " << step;
      if (!seqs.empty()) want_groups[name] = seqs.size();
      total += seqs.size();
    }
    ASSERT_EQ(GroupsOf(r), want_groups) << "after step " << step;
    RingStats st = StatsOf(r);
    ASSERT_EQ(st.entries, total) << "after step " << step;
    ASSERT_EQ(st.groups, static_cast<std::int64_t>(want_groups.size()));
    ASSERT_EQ(st.pushes, pushes);
  }
}

// --- capacity --------------------------------------------------------------

TEST_P(RingConformance, ShrinkingCapacityEvictsOldestInEveryGroupAtOnce) {
  ASSERT_OK_AND_ASSIGN(Ring r, store_->CreateRing("r", {.capacity = 5}));
  for (int i = 0; i < 5; ++i) PushOne(r, "a", "p");
  for (int i = 0; i < 2; ++i) PushOne(r, "b", "p");
  for (int i = 0; i < 4; ++i) PushOne(r, "c", "p");

  ASSERT_OK_AND_ASSIGN(std::int64_t evicted, r.SetCapacity(3));
  EXPECT_EQ(evicted, 2 + 0 + 1);
  EXPECT_EQ(Seqs(r, "a"), (std::vector<std::int64_t>{3, 4, 5}));
  EXPECT_EQ(Seqs(r, "b"), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(Seqs(r, "c"), (std::vector<std::int64_t>{2, 3, 4}));
  RingStats st = StatsOf(r);
  EXPECT_EQ(st.capacity, 3);
  EXPECT_EQ(st.entries, 8);
  // Pushes keep the new capacity.
  EXPECT_EQ(PushOne(r, "b", "p"), 3);
  EXPECT_EQ(PushOne(r, "b", "p"), 4);
  EXPECT_EQ(Seqs(r, "b"), (std::vector<std::int64_t>{2, 3, 4}));

  ASSERT_OK_AND_ASSIGN(std::int64_t to_one, r.SetCapacity(1));
  EXPECT_EQ(to_one, 2 + 2 + 2);
  EXPECT_EQ(GroupsOf(r), (std::map<std::string, std::int64_t>{
                             {"a", 1}, {"b", 1}, {"c", 1}}));
  EXPECT_EQ(Seqs(r, "a"), std::vector<std::int64_t>{5});
}

TEST_P(RingConformance, GrowingCapacityKeepsEntries) {
  ASSERT_OK_AND_ASSIGN(Ring r, store_->CreateRing("r", {.capacity = 2}));
  for (int i = 0; i < 3; ++i) PushOne(r, "g", "p");
  ASSERT_OK_AND_ASSIGN(std::int64_t evicted, r.SetCapacity(4));
  EXPECT_EQ(evicted, 0);
  EXPECT_EQ(Seqs(r, "g"), (std::vector<std::int64_t>{2, 3}));
  for (int i = 0; i < 3; ++i) PushOne(r, "g", "p");
  EXPECT_EQ(Seqs(r, "g"), (std::vector<std::int64_t>{3, 4, 5, 6}));
  EXPECT_EQ(StatsOf(r).capacity, 4);
  // The stored capacity is what a new handle sees.
  ASSERT_OK_AND_ASSIGN(Ring again, store_->GetRing("r"));
  EXPECT_EQ(StatsOf(again).capacity, 4);
}

TEST_P(RingConformance, CapacityChangedThroughOneHandleBindsEveryHandle) {
  ASSERT_OK_AND_ASSIGN(Ring first, store_->CreateRing("r", {.capacity = 5}));
  ASSERT_OK_AND_ASSIGN(Ring second, store_->GetRing("r"));
  ASSERT_OK(second.SetCapacity(2));
  for (int i = 0; i < 4; ++i) PushOne(first, "g", "p");
  EXPECT_EQ(Seqs(first, "g"), (std::vector<std::int64_t>{3, 4}));
}

TEST_P(RingConformance, InvalidCapacityChangesNothing) {
  ASSERT_OK_AND_ASSIGN(Ring r, store_->CreateRing("r", {.capacity = 3}));
  for (int i = 0; i < 3; ++i) PushOne(r, "g", "p");
  for (std::int64_t c :
       {std::int64_t{0}, std::int64_t{-5}, std::int64_t{1000001}}) {
    EXPECT_CODE(r.SetCapacity(c), Code::kInvalidArgument);
  }
  EXPECT_EQ(StatsOf(r).capacity, 3);
  EXPECT_EQ(Seqs(r, "g"), (std::vector<std::int64_t>{1, 2, 3}));
  ASSERT_OK_AND_ASSIGN(std::int64_t evicted, r.SetCapacity(1000000));
  EXPECT_EQ(evicted, 0);
}

// --- stats -----------------------------------------------------------------

TEST_P(RingConformance, StatsCountGroupsEntriesAndPushes) {
  ASSERT_OK_AND_ASSIGN(Ring r, store_->CreateRing("views", {.capacity = 2}));
  RingStats empty = StatsOf(r);
  EXPECT_EQ(empty.name, "views");
  EXPECT_EQ(empty.capacity, 2);
  EXPECT_EQ(empty.groups, 0);
  EXPECT_EQ(empty.entries, 0);
  EXPECT_EQ(empty.pushes, 0);

  for (int i = 0; i < 5; ++i) PushOne(r, "a", "p");  // 3 evicted
  PushOne(r, "b", "p");
  PushOne(r, "c", "p");
  ASSERT_OK(r.Delete("c", 1));  // c is empty now
  RingStats st = StatsOf(r);
  EXPECT_EQ(st.name, "views");
  EXPECT_EQ(st.capacity, 2);
  EXPECT_EQ(st.groups, 2);   // a and b; c holds nothing
  EXPECT_EQ(st.entries, 3);  // 2 + 1
  EXPECT_EQ(st.pushes, 7);   // since creation, evicted and deleted included
}

// --- concurrency -----------------------------------------------------------

// Issue 5: 16 pushers on one group of a ring of capacity 10. Never more than
// 10 entries at any observation; at the end exactly the 10 newest; every
// sequence number handed out once, 1..3200.
TEST_P(RingConformance, SixteenConcurrentPushersOnOneGroup) {
  constexpr int kThreads = 16;
  constexpr int kPushesEach = 200;
  constexpr std::int64_t kTotal = kThreads * kPushesEach;
  constexpr std::int64_t kCapacity = 10;
  ASSERT_OK_AND_ASSIGN(Ring r,
                       store_->CreateRing("r", {.capacity = kCapacity}));

  std::vector<std::vector<std::int64_t>> seqs(kThreads);
  std::vector<std::string> errors(kThreads);
  std::atomic<int> pushers_left{kThreads};
  std::atomic<int> observations{0};
  std::string reader_error;
  std::int64_t most_seen = 0;

  std::thread reader([&] {
    // Reads until every pusher is done, then once more.
    bool last = false;
    while (!last) {
      last = pushers_left.load() == 0;
      auto entries = r.Read("g", {.limit = 10000});
      if (!entries.ok()) {
        reader_error = entries.status().ToString();
        return;
      }
      most_seen = std::max<std::int64_t>(most_seen, entries->size());
      // Newest first, no duplicates.
      for (size_t i = 1; i < entries->size(); ++i) {
        if ((*entries)[i].seq >= (*entries)[i - 1].seq) {
          reader_error = "read is not strictly newest-first";
          return;
        }
      }
      auto groups = r.Groups();
      if (!groups.ok()) {
        reader_error = groups.status().ToString();
        return;
      }
      for (const RingGroup& g : *groups) {
        most_seen = std::max(most_seen, g.entries);
      }
      ++observations;
    }
  });

  std::vector<std::thread> pushers;
  for (int t = 0; t < kThreads; ++t) {
    pushers.emplace_back([&, t] {
      for (int i = 0; i < kPushesEach; ++i) {
        auto e = r.Push("g", "t" + std::to_string(t) + "-" + std::to_string(i));
        if (!e.ok()) {
          errors[t] = e.status().ToString();
          break;
        }
        seqs[t].push_back(e->seq);
      }
      --pushers_left;
    });
  }
  for (auto& th : pushers) th.join();
  reader.join();

  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(errors[t], "") << "pusher " << t;
  }
  ASSERT_EQ(reader_error, "");
  EXPECT_GT(observations.load(), 0);
  EXPECT_LE(most_seen, kCapacity) << "a reader saw more than N entries";

  // Every push got its own number, and together they are 1..3200; each
  // pusher's own numbers increase.
  std::set<std::int64_t> all;
  for (const auto& s : seqs) {
    EXPECT_TRUE(std::is_sorted(s.begin(), s.end()));
    all.insert(s.begin(), s.end());
  }
  ASSERT_EQ(all.size(), static_cast<size_t>(kTotal)) << "a number was reused";
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kTotal);

  // Survivors: exactly the 10 highest numbers.
  std::vector<std::int64_t> want;
  for (std::int64_t s = kTotal - kCapacity + 1; s <= kTotal; ++s) {
    want.push_back(s);
  }
  EXPECT_EQ(Seqs(r, "g"), want);
  RingStats st = StatsOf(r);
  EXPECT_EQ(st.entries, kCapacity);
  EXPECT_EQ(st.groups, 1);
  EXPECT_EQ(st.pushes, kTotal);
  EXPECT_EQ(GroupsOf(r), (std::map<std::string, std::int64_t>{{"g", 10}}));
  // The next push goes on from there.
  EXPECT_EQ(PushOne(r, "g", "after"), kTotal + 1);
}

INSTANTIATE_TEST_SUITE_P(Engines, RingConformance,
                         ::testing::ValuesIn(Engines()), EngineName);

}  // namespace
}  // namespace sqlq::test
