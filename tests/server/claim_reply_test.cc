// The claim reply is written by hand rather than by a JSON library (for
// speed): every payload a client sends must come back byte for byte, as
// valid JSON, whatever characters it holds.

#include "tests/server/server_fixture.h"

namespace sqlq::server_test {
namespace {

class ClaimReply : public ServerTest {};

TEST_F(ClaimReply, EveryPayloadComesBackExactly) {
  StartServer();
  Client c(port());
  ASSERT_EQ(c.Post("/v1/queues/jobs", Json::object()).status, 201);
  const std::vector<std::string> payloads = {
      "plain",
      "quote \" and backslash \\ and slash /",
      "newline\n tab\t return\r backspace\b formfeed\f",
      std::string("control \x01\x1f and nul ") + std::string(1, '\0') + "!",
      "delete \x7f",
      "unicode: \xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80",
      "",
  };
  Json msgs = Json::array();
  for (const auto& p : payloads) msgs.push_back({{"payload", p}});
  auto sent = c.Post("/v1/queues/jobs/messages", {{"messages", msgs}});
  ASSERT_EQ(sent.status, 200) << sent.body;
  ASSERT_EQ(sent.json["ids"].size(), payloads.size());
  EXPECT_EQ(sent.json["duplicate"], Json(std::vector<bool>(payloads.size())));

  auto claimed = c.Post("/v1/queues/jobs/claim", {{"max", 100}});
  ASSERT_EQ(claimed.status, 200) << claimed.body;
  ASSERT_TRUE(claimed.json.is_object()) << "not JSON: " << claimed.body;
  const Json& got = claimed.json["messages"];
  ASSERT_EQ(got.size(), payloads.size());
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    EXPECT_EQ(got[i]["payload"], payloads[i]) << i;
    EXPECT_EQ(got[i]["id"], sent.json["ids"][i]);
    EXPECT_EQ(got[i]["attempt"], 1);
    EXPECT_FALSE(got[i]["receipt"].get<std::string>().empty());
  }
}

}  // namespace
}  // namespace sqlq::server_test
