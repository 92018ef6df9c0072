// The CLI contract of batches (docs/cli.md, docs/semantics.md "Batches"), as
// a script sees it: the real sqlq program, its JSON lines, exit codes (2
// invalid, 3 not found, 4 exists) and one-line errors.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/cli/cli_assertions.h"
#include "tests/cli/cli_fixture.h"
#include "tests/cli/cli_runner.h"

namespace sqlq::cli_test {
namespace {

class BatchCliTest : public CliFixture {};

TEST_F(BatchCliTest, SendStatusClaimAndCancel) {
  One({"queue", "create", "images"});
  One({"queue", "create", "mail"});
  One({"queue", "create", "done"});
  json sent = One({"batch", "send", "done", "album ready", "--id", "album-7",
                   "--member", "images=a.png", "--member", "mail=notice",
                   "--stdin", "images", "--callback-kind", "album.done"},
                  "b.png\nc.png\n");
  EXPECT_EQ(sent.value("id", ""), "album-7");
  ASSERT_EQ(sent["members"].size(), 4u) << sent;
  const std::int64_t callback = sent.value("callback_id", 0);
  EXPECT_TRUE(FailsWith(Human({"batch", "send", "done", "x", "--id", "album-7",
                               "--member", "images=y"}),
                        kExists, "album-7"));

  json st = One({"batch", "status", "album-7"});
  EXPECT_EQ(st.value("total", 0), 4);
  EXPECT_EQ(st.value("pending", 0), 4);
  EXPECT_EQ(st.value("done", true), false);
  EXPECT_EQ(st["queues"], json::parse(R"(["images","mail"])"));
  RunResult text = Human({"batch", "status", "album-7"});
  EXPECT_EQ(text.exit_code, kOk) << Show(text);
  EXPECT_NE(text.out.find("batch album-7: 0 of 4 ended"), std::string::npos)
      << text.out;

  // Two images complete; then the rest is cancelled.
  auto claimed = Ok({"claim", "images", "--max", "2"});
  ASSERT_EQ(claimed.size(), 2u);
  EXPECT_EQ(claimed[0]["batch"], json::parse(R"({"id":"album-7"})"));
  for (const json& m : claimed) {
    Ok({"ack", "images", m.value("receipt", "")});
  }
  EXPECT_TRUE(Ok({"claim", "done"}).empty());
  st = One({"batch", "cancel", "album-7"});
  EXPECT_EQ(st.value("completed", 0), 2);
  EXPECT_EQ(st.value("cancelled", 0), 2);
  EXPECT_EQ(st.value("done", false), true);
  EXPECT_TRUE(st.contains("cancelled_at"));
  auto cb = Ok({"claim", "done"});
  ASSERT_EQ(cb.size(), 1u);
  EXPECT_EQ(cb[0].value("id", 0), callback);
  EXPECT_EQ(cb[0].value("kind", ""), "album.done");
  EXPECT_EQ(cb[0]["batch"],
            json::parse(R"({"id":"album-7","callback":true,"total":4,)"
                        R"("completed":2,"dead":0,"cancelled":2})"));
}

TEST_F(BatchCliTest, BadInputIsRefusedAndStoresNothing) {
  One({"queue", "create", "jobs"});
  One({"queue", "create", "done"});
  EXPECT_TRUE(FailsWith(Human({"batch", "send", "done", "cb"}), kUsage,
                        "at least one member"));
  EXPECT_TRUE(
      FailsWith(Human({"batch", "send", "done", "cb", "--member", "no-equals"}),
                kUsage, "QUEUE=PAYLOAD"));
  EXPECT_TRUE(FailsWith(Human({"batch", "send", "done", "cb", "--member",
                               "jobs=x", "--id", "white space"}),
                        kUsage, "batch id"));
  EXPECT_TRUE(
      FailsWith(Human({"batch", "send", "done", "cb", "--member", "nope=x"}),
                kNotFound, "member 1"));
  EXPECT_TRUE(
      FailsWith(Human({"batch", "send", "nope", "cb", "--member", "jobs=x"}),
                kNotFound, "callback"));
  EXPECT_TRUE(FailsWith(Human({"batch", "send", "done", "cb", "--member",
                               "jobs=x", "--retention", "10ms"}),
                        kUsage, "--retention"));
  EXPECT_TRUE(FailsWith(Human({"batch", "send", "done", "{", "--member",
                               "jobs={}", "--json-payload"}),
                        kUsage, "JSON"));
  EXPECT_TRUE(FailsWith(Human({"batch", "status", "nope"}), kNotFound, "nope"));
  EXPECT_TRUE(FailsWith(Human({"batch", "cancel", "nope"}), kNotFound, "nope"));
  EXPECT_EQ(One({"queue", "stats", "jobs"}).value("sends", -1), 0);
  EXPECT_EQ(One({"queue", "stats", "done"}).value("sends", -1), 0);
}

}  // namespace
}  // namespace sqlq::cli_test
