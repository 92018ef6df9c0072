// The CLI contract of rings and rotations (docs/rings-and-rotations.md,
// docs/cli.md), as a script sees it: the real sqlq program, its JSON lines,
// exit codes (2 invalid, 3 not found, 4 exists, 5 wrong kind or parked, 6 too
// large), one-line errors on stderr, and stored data untouched by bad input.

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tests/cli/cli_assertions.h"
#include "tests/cli/cli_fixture.h"
#include "tests/cli/cli_runner.h"

namespace sqlq::cli_test {
namespace {

class RingRotationCliTest : public CliFixture {
 protected:
  // The sequence numbers `ring read` prints, in its order.
  std::vector<std::int64_t> ReadSeqs(std::vector<std::string> args) {
    std::vector<std::int64_t> out;
    for (const json& e : Ok(std::move(args))) out.push_back(e.value("seq", -1));
    return out;
  }
  std::vector<std::string> NextKeys(const std::string& rotation, int n) {
    std::vector<std::string> out;
    for (const json& item :
         Ok({"rotation", "next", rotation, "--n", std::to_string(n)})) {
      out.push_back(item.value("key", "?"));
    }
    return out;
  }
};

std::vector<std::string> Keys(std::initializer_list<int> ids) {
  std::vector<std::string> out;
  for (int id : ids) out.push_back(std::to_string(id));
  return out;
}

// ------------------------------------------------------------------ rings

TEST_F(RingRotationCliTest, RingCreatePushReadGroupsStats) {
  EXPECT_EQ(One({"ring", "create", "views", "--capacity", "3"}),
            json::parse(R"({"name":"views","kind":"ring","capacity":3,
                "max_payload_bytes":1048576})"));

  const std::int64_t before = NowUs();
  for (int i = 1; i <= 5; ++i) {
    json pushed =
        One({"ring", "push", "views", "article/42", "u" + std::to_string(i)});
    EXPECT_EQ(pushed.value("seq", -1), i);
    EXPECT_EQ(pushed.value("group", ""), "article/42");
    EXPECT_EQ(pushed.value("payload", ""), "u" + std::to_string(i));
    ASSERT_TRUE(pushed.contains("pushed_at")) << pushed;
  }
  One({"ring", "push", "views", "article/7", "someone"});

  // Newest first by default: the 3 newest survive.
  auto read = Ok({"ring", "read", "views", "article/42"});
  ASSERT_EQ(read.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const json& e = read[i];
    EXPECT_EQ(e.value("seq", -1), 5 - i) << e;
    EXPECT_EQ(e.value("group", ""), "article/42") << e;
    EXPECT_EQ(e.value("payload", ""), "u" + std::to_string(5 - i)) << e;
    ASSERT_TRUE(e.contains("pushed_at")) << e;
    const std::int64_t at = ParseTimeUs(e["pushed_at"]);
    EXPECT_GE(at, before - 5'000'000);
    EXPECT_LE(at, NowUs() + 5'000'000);
  }
  EXPECT_EQ(ReadSeqs({"ring", "read", "views", "article/42", "--oldest-first",
                      "--limit", "2"}),
            (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(ReadSeqs({"ring", "read", "views", "article/42", "--limit", "1"}),
            (std::vector<std::int64_t>{5}));
  EXPECT_TRUE(Ok({"ring", "read", "views", "nobody"}).empty());

  auto groups = Ok({"ring", "groups", "views"});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0], json::parse(R"({"group":"article/42","entries":3})"));
  EXPECT_EQ(groups[1], json::parse(R"({"group":"article/7","entries":1})"));

  EXPECT_EQ(One({"ring", "stats", "views"}),
            json::parse(R"({"name":"views","capacity":3,"groups":2,
                "entries":4,"pushes":6})"));
}

TEST_F(RingRotationCliTest, RingDeleteAndCapacity) {
  One({"ring", "create", "r", "--capacity", "4"});
  for (int i = 0; i < 4; ++i) One({"ring", "push", "r", "g", "p"});
  for (int i = 0; i < 2; ++i) One({"ring", "push", "r", "h", "p"});

  EXPECT_EQ(One({"ring", "delete", "r", "g", "2"}),
            json::parse(R"({"deleted":1})"));
  EXPECT_EQ(ReadSeqs({"ring", "read", "r", "g", "--oldest-first"}),
            (std::vector<std::int64_t>{1, 3, 4}));
  // After the delete, pushes still keep exactly the newest 4.
  EXPECT_EQ(One({"ring", "push", "r", "g", "p"}).value("seq", -1), 5);
  EXPECT_EQ(One({"ring", "push", "r", "g", "p"}).value("seq", -1), 6);
  EXPECT_EQ(ReadSeqs({"ring", "read", "r", "g", "--oldest-first"}),
            (std::vector<std::int64_t>{3, 4, 5, 6}));

  // Shrinking evicts the oldest of every group at once.
  EXPECT_EQ(One({"ring", "capacity", "r", "2"}),
            json::parse(R"({"capacity":2,"evicted":2})"));
  EXPECT_EQ(ReadSeqs({"ring", "read", "r", "g", "--oldest-first"}),
            (std::vector<std::int64_t>{5, 6}));
  EXPECT_EQ(ReadSeqs({"ring", "read", "r", "h", "--oldest-first"}),
            (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(One({"ring", "capacity", "r", "10"}),
            json::parse(R"({"capacity":10,"evicted":0})"));

  // Deleting the whole group; its numbers are not reused.
  EXPECT_EQ(One({"ring", "delete", "r", "g"}), json::parse(R"({"deleted":2})"));
  EXPECT_TRUE(Ok({"ring", "read", "r", "g"}).empty());
  EXPECT_EQ(One({"ring", "push", "r", "g", "p"}).value("seq", -1), 7);

  auto groups = Ok({"ring", "groups", "r"});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0], json::parse(R"({"group":"g","entries":1})"));
  EXPECT_EQ(groups[1], json::parse(R"({"group":"h","entries":2})"));
  EXPECT_EQ(One({"ring", "stats", "r"}),
            json::parse(R"({"name":"r","capacity":10,"groups":2,"entries":3,
                "pushes":9})"));
}

TEST_F(RingRotationCliTest, RingBadInputFailsCleanlyAndLeavesDataUntouched) {
  // Refused creates make nothing (an invalid name is refused before the
  // database is even opened).
  EXPECT_TRUE(
      FailsWith(Human({"ring", "create", "bad name", "--capacity", "3"}),
                kUsage, "bad name"));
  EXPECT_FALSE(std::filesystem::exists(db_path_));
  EXPECT_TRUE(FailsWith(Human({"ring", "create", "r", "--capacity", "0"}),
                        kUsage, "capacity"));
  EXPECT_TRUE(FailsWith(Human({"ring", "create", "r", "--capacity", "1000001"}),
                        kUsage, "capacity"));
  EXPECT_TRUE(FailsWith(Human({"ring", "stats", "r"}), kNotFound, "r"));

  One({"ring", "create", "r", "--capacity", "3", "--max-payload", "4"});
  One({"ring", "push", "r", "g", "a"});
  One({"ring", "push", "r", "g", "b"});
  One({"queue", "create", "jobs"});
  const auto entries = Ok({"ring", "read", "r", "g"});
  const json stats = One({"ring", "stats", "r"});

  EXPECT_TRUE(FailsWith(Human({"ring", "create", "r", "--capacity", "9"}),
                        kExists, "r"));
  EXPECT_TRUE(FailsWith(Human({"ring", "create", "jobs", "--capacity", "9"}),
                        kExists, "jobs"));
  EXPECT_TRUE(
      FailsWith(Human({"ring", "push", "nope", "g", "x"}), kNotFound, "nope"));
  EXPECT_TRUE(
      FailsWith(Human({"ring", "push", "jobs", "g", "x"}), kStale, "jobs"));
  EXPECT_TRUE(FailsWith(Human({"ring", "push", "r", "g", "12345"}), kTooLarge,
                        "payload"));
  EXPECT_TRUE(
      FailsWith(Human({"ring", "push", "r", "", "x"}), kUsage, "group"));
  EXPECT_TRUE(
      FailsWith(Human({"ring", "push", "r", std::string(256, 'g'), "x"}),
                kUsage, "group"));
  EXPECT_TRUE(FailsWith(Human({"ring", "read", "r", "g", "--limit", "0"}),
                        kUsage, "limit"));
  EXPECT_TRUE(
      FailsWith(Human({"ring", "delete", "r", "g", "9"}), kNotFound, "9"));
  EXPECT_TRUE(
      FailsWith(Human({"ring", "delete", "r", "g", "0"}), kUsage, "seq"));
  EXPECT_TRUE(
      FailsWith(Human({"ring", "capacity", "r", "0"}), kUsage, "capacity"));
  EXPECT_TRUE(FailsWith(Human({"ring", "groups", "jobs"}), kStale, "jobs"));
  EXPECT_TRUE(FailsWith(Human({"ring", "drop", "jobs"}), kStale, "jobs"));

  // With --json the error is one JSON object on stderr, nothing on stdout.
  RunResult j = Json({"ring", "push", "r", "g", "12345"});
  EXPECT_EQ(j.exit_code, kTooLarge) << Show(j);
  EXPECT_EQ(j.out, "") << Show(j);
  std::vector<json> err;
  ASSERT_TRUE(ParseLines(j.err, &err));
  ASSERT_EQ(err.size(), 1u) << Show(j);
  EXPECT_EQ(err[0]["error"]["code"], "too_large") << Show(j);

  EXPECT_EQ(Ok({"ring", "read", "r", "g"}), entries);
  EXPECT_EQ(One({"ring", "stats", "r"}), stats);
  // The refused pushes took no sequence number.
  EXPECT_EQ(One({"ring", "push", "r", "g", "c"}).value("seq", -1), 3);
}

TEST_F(RingRotationCliTest, RingDrop) {
  One({"ring", "create", "r", "--capacity", "3"});
  One({"ring", "push", "r", "g", "a"});
  EXPECT_EQ(One({"ring", "drop", "r"}), json::parse(R"({"dropped":"r"})"));
  EXPECT_TRUE(FailsWith(Human({"ring", "read", "r", "g"}), kNotFound, "r"));
  EXPECT_TRUE(FailsWith(Human({"ring", "drop", "r"}), kNotFound, "r"));
}

TEST_F(RingRotationCliTest, RingAndRotationListsNameEveryOneWithItsSettings) {
  One({"queue", "create", "jobs"});
  EXPECT_TRUE(Ok({"ring", "list"}).empty()) << "a queue listed as a ring";
  EXPECT_TRUE(Ok({"rotation", "list"}).empty());
  One({"ring", "create", "views", "--capacity", "3"});
  One({"ring", "create", "audit", "--capacity", "50"});
  One({"rotation", "create", "relays", "--max-failures", "2"});
  auto rings = Ok({"ring", "list"});
  ASSERT_EQ(rings.size(), 2u);
  EXPECT_EQ(rings[0], json::parse(R"({"name":"audit","kind":"ring",
      "capacity":50,"max_payload_bytes":1048576})"));
  EXPECT_EQ(rings[1]["name"], "views");
  auto rotations = Ok({"rotation", "list"});
  ASSERT_EQ(rotations.size(), 1u);
  EXPECT_EQ(rotations[0], json::parse(R"({"name":"relays","kind":"rotation",
      "max_failures":2,"max_payload_bytes":1048576})"));
}

// -------------------------------------------------------------- rotations

TEST_F(RingRotationCliTest, RotationCommands) {
  EXPECT_EQ(One({"rotation", "create", "relays", "--max-failures", "2"}),
            json::parse(R"({"name":"relays","kind":"rotation",
                "max_failures":2,"max_payload_bytes":1048576})"));
  EXPECT_EQ(One({"rotation", "add", "relays", "a", "smtp://a"}),
            json::parse(R"({"key":"a","added":true})"));
  One({"rotation", "add", "relays", "b"});  // payload optional
  One({"rotation", "add", "relays", "c", "smtp://c"});

  auto next = Ok({"rotation", "next", "relays", "--n", "2"});
  ASSERT_EQ(next.size(), 2u);
  EXPECT_EQ(next[0], json::parse(R"({"key":"a","payload":"smtp://a",
      "served":1,"failures":0})"));
  EXPECT_EQ(next[1],
            json::parse(R"({"key":"b","payload":"","served":1,"failures":0})"));
  // Default n is 1.
  auto one = Ok({"rotation", "next", "relays"});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].value("key", ""), "c");

  EXPECT_EQ(One({"rotation", "fail", "relays", "a"}),
            json::parse(R"({"key":"a","payload":"smtp://a","served":1,
                "failures":1,"parked":false})"));
  EXPECT_EQ(One({"rotation", "ok", "relays", "a"}),
            json::parse(R"({"key":"a","payload":"smtp://a","served":1,
                "failures":0,"parked":false})"));
  One({"rotation", "fail", "relays", "b"});
  EXPECT_EQ(One({"rotation", "fail", "relays", "b"}),
            json::parse(R"({"key":"b","payload":"","served":1,
                "failures":2,"parked":true})"));
  // b is parked: skipped.
  EXPECT_EQ(NextKeys("relays", 3), (std::vector<std::string>{"a", "c"}));

  auto list = Ok({"rotation", "list", "relays"});
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0], json::parse(R"({"key":"a","payload":"smtp://a",
      "served":2,"failures":0,"parked":false})"));
  EXPECT_EQ(list[1], json::parse(R"({"key":"c","payload":"smtp://c",
      "served":2,"failures":0,"parked":false})"));
  EXPECT_EQ(list[2], json::parse(R"({"key":"b","payload":"","served":1,
      "failures":2,"parked":true})"));
  EXPECT_EQ(One({"rotation", "stats", "relays"}),
            json::parse(R"({"name":"relays","max_failures":2,"items":3,
                "parked":1,"serves":5})"));

  EXPECT_EQ(One({"rotation", "reset", "relays", "b"}),
            json::parse(R"({"key":"b","payload":"","served":1,
                "failures":0,"parked":false})"));
  EXPECT_EQ(NextKeys("relays", 1), std::vector<std::string>{"b"});

  EXPECT_EQ(One({"rotation", "remove", "relays", "a"}),
            json::parse(R"({"key":"a","removed":true})"));
  EXPECT_EQ(NextKeys("relays", 5), (std::vector<std::string>{"c", "b"}));
  EXPECT_EQ(One({"rotation", "drop", "relays"}),
            json::parse(R"({"dropped":"relays"})"));
  EXPECT_TRUE(
      FailsWith(Human({"rotation", "list", "relays"}), kNotFound, "relays"));
}

TEST_F(RingRotationCliTest, RotationEmptyOrFullyParkedPoolPrintsNothing) {
  One({"rotation", "create", "rot", "--max-failures", "1"});
  EXPECT_TRUE(Ok({"rotation", "next", "rot", "--n", "5"}).empty());
  One({"rotation", "add", "rot", "a"});
  One({"rotation", "fail", "rot", "a"});
  EXPECT_TRUE(Ok({"rotation", "next", "rot", "--n", "5"}).empty());
  EXPECT_EQ(One({"rotation", "stats", "rot"}).value("serves", -1), 0);
}

// The rotation example of docs/rings-and-rotations.md, through the program.
TEST_F(RingRotationCliTest, RotationDesignMdSection23Example) {
  One({"rotation", "create", "relays", "--max-failures", "1"});
  for (int i = 1; i <= 20; ++i) {
    One({"rotation", "add", "relays", std::to_string(i)});
  }
  EXPECT_EQ(NextKeys("relays", 10), Keys({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(NextKeys("relays", 10),
            Keys({11, 12, 13, 14, 15, 16, 17, 18, 19, 20}));
  for (const char* k : {"5", "10", "15"}) {
    EXPECT_EQ(One({"rotation", "fail", "relays", k}).value("parked", false),
              true);
  }
  EXPECT_EQ(NextKeys("relays", 10), Keys({1, 2, 3, 4, 6, 7, 8, 9, 11, 12}));
  EXPECT_EQ(NextKeys("relays", 10),
            Keys({13, 14, 16, 17, 18, 19, 20, 1, 2, 3}));
}

TEST_F(RingRotationCliTest,
       RotationBadInputFailsCleanlyAndLeavesDataUntouched) {
  EXPECT_TRUE(
      FailsWith(Human({"rotation", "create", "bad/name"}), kUsage, "bad/name"));
  EXPECT_TRUE(
      FailsWith(Human({"rotation", "create", "rot", "--max-failures", "0"}),
                kUsage, "max failures"));
  EXPECT_TRUE(FailsWith(Human({"rotation", "stats", "rot"}), kNotFound, "rot"));

  One({"rotation", "create", "rot", "--max-failures", "1", "--max-payload",
       "4"});
  One({"rotation", "add", "rot", "a", "pa"});
  One({"rotation", "add", "rot", "b", "pb"});
  One({"rotation", "fail", "rot", "b"});  // parked
  One({"ring", "create", "ring", "--capacity", "2"});
  const auto list = Ok({"rotation", "list", "rot"});
  const json stats = One({"rotation", "stats", "rot"});

  EXPECT_TRUE(FailsWith(Human({"rotation", "create", "rot"}), kExists, "rot"));
  EXPECT_TRUE(
      FailsWith(Human({"rotation", "create", "ring"}), kExists, "ring"));
  EXPECT_TRUE(
      FailsWith(Human({"rotation", "add", "rot", "a", "new"}), kExists, "'a'"));
  EXPECT_TRUE(FailsWith(Human({"rotation", "add", "rot", "c", "12345"}),
                        kTooLarge, "payload"));
  EXPECT_TRUE(FailsWith(Human({"rotation", "add", "rot", ""}), kUsage, "key"));
  EXPECT_TRUE(
      FailsWith(Human({"rotation", "remove", "rot", "zz"}), kNotFound, "zz"));
  EXPECT_TRUE(
      FailsWith(Human({"rotation", "fail", "rot", "zz"}), kNotFound, "zz"));
  EXPECT_TRUE(
      FailsWith(Human({"rotation", "ok", "rot", "b"}), kStale, "parked"));
  EXPECT_TRUE(
      FailsWith(Human({"rotation", "next", "rot", "--n", "0"}), kUsage, "n 0"));
  EXPECT_TRUE(FailsWith(Human({"rotation", "next", "rot", "--n", "10001"}),
                        kUsage, "10001"));
  EXPECT_TRUE(
      FailsWith(Human({"rotation", "add", "nope", "a"}), kNotFound, "nope"));
  EXPECT_TRUE(FailsWith(Human({"rotation", "next", "ring"}), kStale, "ring"));

  RunResult j = Json({"rotation", "ok", "rot", "b"});
  EXPECT_EQ(j.exit_code, kStale) << Show(j);
  EXPECT_EQ(j.out, "") << Show(j);
  std::vector<json> err;
  ASSERT_TRUE(ParseLines(j.err, &err));
  ASSERT_EQ(err.size(), 1u) << Show(j);
  EXPECT_EQ(err[0]["error"]["code"], "failed_precondition") << Show(j);

  EXPECT_EQ(Ok({"rotation", "list", "rot"}), list);
  EXPECT_EQ(One({"rotation", "stats", "rot"}), stats);
  EXPECT_EQ(list.size(), 2u);
  if (!list.empty()) {
    EXPECT_EQ(list[0].value("payload", ""), "pa");
  }
}

}  // namespace
}  // namespace sqlq::cli_test
