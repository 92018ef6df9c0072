// Limits held by the database, not by a server: two sqlq serve processes
// on one database share a queue's rate bucket and its max_leased.

#include <gtest/gtest.h>

#include <string>

#include "tests/server/server_fixture.h"

namespace sqlq::server_test {
namespace {

class SharedLimits : public ServerTest {
 protected:
  void StartBoth() {
    const std::string db = "sqlite:" + (dir_ / "q.db").string();
    fs::create_directories(dir_ / "a");
    fs::create_directories(dir_ / "b");
    a_.emplace(dir_ / "a", std::vector<std::string>{}, db);
    ASSERT_TRUE(a_->Start()) << a_->log();
    b_.emplace(dir_ / "b", std::vector<std::string>{}, db);
    ASSERT_TRUE(b_->Start()) << b_->log();
  }
  int Claimed(Client& c, const std::string& queue, Response* out = nullptr) {
    Response r = c.Post("/v1/queues/" + queue + "/claim", {{"max", 10}});
    EXPECT_EQ(r.status, 200) << r.body;
    if (out != nullptr) *out = r;
    return static_cast<int>(r.json["messages"].size());
  }
  // A send body's messages: "0" to "19".
  static Json Twenty() {
    Json batch = Json::array();
    for (int i = 0; i < 20; ++i) {
      batch.push_back({{"payload", std::to_string(i)}});
    }
    return batch;
  }
  std::optional<ServerProcess> a_, b_;
};

TEST_F(SharedLimits, TwoServersShareOneRateBucket) {
  StartBoth();
  Client ca(a_->port()), cb(b_->port());
  // One claim every 1000 s after a burst of 3: whatever the two servers
  // claim in this test, together they get 3.
  ASSERT_EQ(
      ca.Post("/v1/queues/slow", {{"rate_limit", 0.001}, {"rate_burst", 3}})
          .status,
      201);
  ASSERT_EQ(
      ca.Post("/v1/queues/slow/messages", {{"messages", Twenty()}}).status,
      200);
  Response last;
  const int from_a = Claimed(ca, "slow");
  const int from_b = Claimed(cb, "slow", &last);
  EXPECT_EQ(from_a, 3);
  EXPECT_EQ(from_b, 0);
  EXPECT_EQ(last.json["limited_by"], "rate_limit") << last.body;
  EXPECT_GT(last.json["retry_after_ms"].get<std::int64_t>(), 900000)
      << last.body;
  EXPECT_EQ(Claimed(ca, "slow") + Claimed(cb, "slow"), 0);
}

TEST_F(SharedLimits, TwoServersShareMaxLeased) {
  StartBoth();
  Client ca(a_->port()), cb(b_->port());
  ASSERT_EQ(ca.Post("/v1/queues/few", {{"max_leased", 4}}).status, 201);
  ASSERT_EQ(cb.Post("/v1/queues/few/messages", {{"messages", Twenty()}}).status,
            200);
  Response first;
  const int from_a = Claimed(ca, "few", &first);
  const int from_b = Claimed(cb, "few");
  EXPECT_EQ(from_a + from_b, 4);
  // An ack on one server frees a place for the other.
  ASSERT_EQ(ca.Post("/v1/queues/few/ack",
                    {{"receipt", first.json["messages"][0]["receipt"]}})
                .status,
            200);
  EXPECT_EQ(Claimed(cb, "few"), 1);
  EXPECT_EQ(Claimed(ca, "few"), 0);
}

}  // namespace
}  // namespace sqlq::server_test
