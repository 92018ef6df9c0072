// The CLI contract of topics (docs/cli.md, docs/semantics.md "Topics"), as a
// script sees it: the real sqlq program, its JSON lines, exit codes (2
// invalid, 3 not found, 4 exists, 5 a name of another kind) and one-line
// errors.

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/cli_assertions.h"
#include "tests/cli/cli_fixture.h"
#include "tests/cli/cli_runner.h"

namespace sqlq::cli_test {
namespace {

class TopicCliTest : public CliFixture {};

TEST_F(TopicCliTest, CreateSubscribePublishListAndDrop) {
  EXPECT_TRUE(
      FailsWith(Human({"topic", "create", "bad name"}), kUsage, "bad name"));
  EXPECT_FALSE(std::filesystem::exists(db_path_));
  EXPECT_EQ(One({"topic", "create", "orders"}),
            json::parse(R"({"name":"orders","kind":"topic"})"));
  EXPECT_TRUE(
      FailsWith(Human({"topic", "create", "orders"}), kExists, "orders"));
  One({"queue", "create", "emails"});
  One({"queue", "create", "eu"});
  EXPECT_TRUE(
      FailsWith(Human({"topic", "create", "emails"}), kExists, "emails"));
  // Nobody subscribes: nothing is stored.
  EXPECT_TRUE(Ok({"topic", "publish", "orders", "o1"}).empty());

  json sub = One({"topic", "subscribe", "orders", "emails"});
  EXPECT_EQ(sub.value("created", false), true) << sub;
  sub = One({"topic", "subscribe", "orders", "eu", "--filter", "region=eu"});
  EXPECT_EQ(sub["filter"], json::parse(R"({"region":"eu"})")) << sub;
  EXPECT_TRUE(FailsWith(
      Human({"topic", "subscribe", "orders", "eu", "--filter", "region"}),
      kUsage, "NAME=VALUE"));
  EXPECT_TRUE(FailsWith(Human({"topic", "subscribe", "orders", "nope"}),
                        kNotFound, "nope"));
  EXPECT_TRUE(FailsWith(Human({"topic", "subscribe", "emails", "eu"}), kStale,
                        "not a topic"));

  auto subs = Ok({"topic", "subscriptions", "orders"});
  ASSERT_EQ(subs.size(), 2u);
  EXPECT_EQ(subs[0].value("queue", ""), "emails");
  EXPECT_EQ(subs[1]["filter"], json::parse(R"({"region":"eu"})"));
  auto topics = Ok({"topic", "list"});
  ASSERT_EQ(topics.size(), 1u);
  EXPECT_EQ(topics[0].value("kind", ""), "topic");
  // Everything in the store: the topic after the queues.
  auto all = Ok({"list"});
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[2], topics[0]);
  EXPECT_EQ(topics[0].value("name", ""), "orders");
  EXPECT_EQ(topics[0].value("subscriptions", -1), 2);

  auto d = Ok({"topic", "publish", "orders", "o2", "--header", "region=eu"});
  std::map<std::string, std::int64_t> ids;
  for (const json& x : d) ids[x.value("queue", "")] = x.value("id", 0);
  ASSERT_EQ(ids.size(), 2u);
  d = Ok({"topic", "publish", "orders", "o3"});
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].value("queue", ""), "emails");
  auto claimed = Ok({"claim", "eu", "--max", "10"});
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0].value("id", 0), ids["eu"]);
  EXPECT_EQ(claimed[0].value("payload", ""), "o2");
  EXPECT_EQ(Ok({"claim", "emails", "--max", "10"}).size(), 2u);

  One({"topic", "unsubscribe", "orders", "eu"});
  EXPECT_TRUE(FailsWith(Human({"topic", "unsubscribe", "orders", "eu"}),
                        kNotFound, "not subscribed"));
  One({"topic", "drop", "orders"});
  EXPECT_TRUE(FailsWith(Human({"topic", "publish", "orders", "x"}), kNotFound,
                        "orders"));
  EXPECT_TRUE(Ok({"topic", "list"}).empty());
}

}  // namespace
}  // namespace sqlq::cli_test
