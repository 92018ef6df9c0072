// A send of one message without the "messages" array, and what a send
// that is neither shape is told (docs/http-api.md, "Send").

#include "tests/server/server_fixture.h"

namespace sqlq::server_test {
namespace {

class SendOne : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    StartServer();
    c_.emplace(port());
    ASSERT_EQ(c_->Post("/v1/queues/jobs", Json::object()).status, 201);
  }
  Client& c() { return *c_; }
  // The 400 of a body that is no send, with the code and a message that
  // says both shapes a send takes.
  void ExpectToldWhatToSend(const Response& r, const std::string& code) {
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_EQ(r.error_code(), code) << r.body;
    const std::string message = r.json["error"]["message"];
    EXPECT_NE(message.find(R"({"payload":...})"), std::string::npos) << message;
    EXPECT_NE(message.find(R"({"messages":[{"payload":...},...]})"),
              std::string::npos)
        << message;
  }
  std::optional<Client> c_;
};

TEST_F(SendOne, AMessageAtTheTopLevelIsABatchOfOne) {
  auto r = c().Post("/v1/queues/jobs/messages", {{"payload", "x"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json, Json::parse(R"({"ids":[1],"duplicate":[false]})"));

  // Every field of a message works there, as in the array.
  r = c().Post("/v1/queues/jobs/messages",
               Json::parse(R"({"payload":{"to":"ada"},"priority":5,
                   "dedup":"k1","group":"g","headers":{"tenant":"acme"}})"));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json, Json::parse(R"({"ids":[2],"duplicate":[false]})"));
  r = c().Post("/v1/queues/jobs/messages",
               {{"payload", "again"}, {"dedup", "k1"}});
  EXPECT_EQ(r.json, Json::parse(R"({"ids":[2],"duplicate":[true]})"));

  auto claimed = c().Post("/v1/queues/jobs/claim", {{"max", 10}});
  ASSERT_EQ(claimed.status, 200) << claimed.body;
  const Json& got = claimed.json["messages"];
  ASSERT_EQ(got.size(), 2u) << claimed.body;
  EXPECT_EQ(got[0]["id"], 2);  // priority 5 first
  EXPECT_EQ(got[0]["payload"], Json::parse(R"({"to":"ada"})"));
  EXPECT_EQ(got[0]["priority"], 5);
  EXPECT_EQ(got[0]["group"], "g");
  EXPECT_EQ(got[0]["headers"]["tenant"], "acme");
  EXPECT_EQ(got[1]["id"], 1);
  EXPECT_EQ(got[1]["payload"], "x");
}

TEST_F(SendOne, ABodyOfNeitherShapeSaysWhatToSend) {
  const std::string kSend = "/v1/queues/jobs/messages";
  ExpectToldWhatToSend(c().Post(kSend, Json::object()), "invalid_argument");
  ExpectToldWhatToSend(c().Call("POST", kSend, ""), "invalid_argument");
  ExpectToldWhatToSend(c().Post(kSend, {{"body", "x"}}), "unknown_field");
  ExpectToldWhatToSend(c().Post(kSend, {{"payload", "x"}, {"prio", 1}}),
                       "unknown_field");
  ExpectToldWhatToSend(c().Call("POST", kSend, R"(["x"])"), "wrong_type");
  ExpectToldWhatToSend(c().Post(kSend, {{"messages", Json::array()}}),
                       "invalid_argument");
  // Both shapes at once: which one was meant is not guessed.
  auto r = c().Post(
      kSend, Json::parse(R"({"payload":"x","messages":[{"payload":"y"}]})"));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.error_code(), "unknown_field") << r.body;
  EXPECT_NE(r.body.find(R"(unknown field \"payload\" beside \"messages\")"),
            std::string::npos)
      << r.body;
  // A message without a payload is told that, not the shapes.
  r = c().Post(kSend, {{"priority", 1}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.json["error"]["message"],
            R"("payload" or "payload_base64" is required)");
  EXPECT_EQ(c().Get("/v1/queues/jobs").json["stats"]["sends"], 0);
}

}  // namespace
}  // namespace sqlq::server_test
