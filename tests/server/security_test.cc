// The token file under attack and under change: failed authentications
// logged and limited per client address (native API and SQS endpoint), and
// the file read again on SIGHUP without dropping a connection or a waiting
// claim.

#include "tests/server/server_fixture.h"

namespace sqlq::server_test {
namespace {

std::string Http(const std::string& method, const std::string& target,
                 const std::string& token, const std::string& body = "") {
  std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  if (!token.empty()) req += "Authorization: Bearer " + token + "\r\n";
  if (!body.empty()) {
    req += "Content-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n";
  }
  return req + "\r\n" + body;
}

// One request on a kept-alive raw connection; its whole reply.
std::string Ask(RawConn& c, const std::string& request) {
  if (!c.Write(request)) return "";
  return c.ReadResponse();
}

std::string HeaderOf(const std::string& raw, const std::string& name) {
  const std::string head = Lower(raw.substr(0, raw.find("\r\n\r\n")));
  const auto at = head.find("\r\n" + Lower(name) + ":");
  if (at == std::string::npos) return "";
  const auto start = at + name.size() + 3;
  std::string v = raw.substr(start, raw.find("\r\n", start) - start);
  while (!v.empty() && v.front() == ' ') v.erase(0, 1);
  return v;
}

class Security : public ServerTest {
 protected:
  // Replaces the token file whole (written beside and renamed, as an
  // operator's tooling would), so the server never reads half of it.
  void WriteTokens(const std::string& text) {
    const fs::path tmp = dir_ / "tokens.tmp";
    std::ofstream(tmp) << text;
    fs::rename(tmp, tokens());
  }
  fs::path tokens() const { return dir_ / "tokens.txt"; }
  bool Logged(const std::string& what, std::size_t times = 1) {
    return WaitFor([&] { return Occurrences(server_->log(), what) >= times; });
  }
};

TEST_F(Security, SighupReloadsTheTokenFileWithoutDroppingConnections) {
  WriteTokens("old-token-0001 admin:*\n");
  StartServer({"--tokens", tokens().string()});
  RawConn conn(port());
  ASSERT_TRUE(conn.ok());
  ASSERT_EQ(StatusOf(Ask(
                conn, Http("POST", "/v1/queues/jobs", "old-token-0001", "{}"))),
            201);
  // A claim parked with the old token, on a connection of its own.
  RawConn parked(port());
  ASSERT_TRUE(parked.Write(Http("POST", "/v1/queues/jobs/claim",
                                "old-token-0001", R"({"wait_ms":30000})")));
  ASSERT_TRUE(WaitFor([&] {
    Client c(port(), "old-token-0001");
    return Metric(c, "sqlq_server_waiting_consumers") == 1;
  }));

  WriteTokens("new-token-0001 admin:*\nsha256:" +
              std::string("7a2038c466dbff5887365b306a1c0b826261c3f89c4cba32"
                          "1f7bebc0892e9f48") +
              " send:jobs\n");  // the hash of my-token-12345
  server_->Signal(SIGHUP);
  ASSERT_TRUE(Logged("event=tokens_reloaded")) << server_->log();
  EXPECT_NE(server_->log().find("tokens=2 keys=0"), std::string::npos);

  // The same connection, still open: the old token is gone, the new ones
  // (one given by its hash only) work.
  EXPECT_EQ(StatusOf(Ask(conn, Http("GET", "/v1/queues", "old-token-0001"))),
            401);
  EXPECT_EQ(StatusOf(Ask(conn, Http("GET", "/v1/queues", "new-token-0001"))),
            200);
  EXPECT_EQ(StatusOf(Ask(
                conn, Http("POST", "/v1/queues/jobs/messages", "my-token-12345",
                           R"({"messages":[{"payload":"after reload"}]})"))),
            200);
  // The claim that was waiting gets the message: a reload ends no wait.
  const std::string got = parked.ReadResponse();
  ASSERT_EQ(StatusOf(got), 200) << got;
  ASSERT_EQ(BodyOf(got)["messages"].size(), 1u) << got;
  EXPECT_EQ(BodyOf(got)["messages"][0]["payload"], "after reload");

  // A file that does not parse changes nothing, and says why.
  WriteTokens("new-token-0001 bogus:*\n");
  server_->Signal(SIGHUP);
  ASSERT_TRUE(Logged("event=tokens_reload_failed")) << server_->log();
  EXPECT_NE(server_->log().find("line 1: unknown permission 'bogus'"),
            std::string::npos)
      << server_->log();
  EXPECT_EQ(StatusOf(Ask(conn, Http("GET", "/v1/queues", "new-token-0001"))),
            200);
  EXPECT_EQ(StatusOf(Ask(conn, Http("POST", "/v1/queues/jobs/claim",
                                    "my-token-12345", "{}"))),
            403);  // a grant of send only
  EXPECT_FALSE(server_->Exited());
}

TEST_F(Security, SighupWithoutATokenFileIsLoggedAndChangesNothing) {
  StartServer();
  server_->Signal(SIGHUP);
  ASSERT_TRUE(Logged("event=tokens_not_reloaded")) << server_->log();
  Client c(port());
  EXPECT_EQ(c.Get("/v1/queues").status, 200);
  EXPECT_FALSE(server_->Exited());
}

TEST_F(Security, FailedAuthenticationsAreLoggedAndLimitedPerAddress) {
  WriteTokens("good-token-0001 admin:*\n");
  // Three failures, then one more try a second.
  StartServer({"--tokens", tokens().string(), "--auth-failures", "3/3s"});
  RawConn a(port(), "127.0.0.1");
  ASSERT_TRUE(a.ok());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(StatusOf(Ask(a, Http("GET", "/v1/queues",
                                   "guess-000" + std::to_string(i)))),
              401);
  }
  ASSERT_TRUE(Logged("event=auth_failed peer=127.0.0.1 credential=token", 3));
  ASSERT_TRUE(Logged("event=auth_blocked peer=127.0.0.1 failures=3"));
  // Now even the right token is refused from this address, before it is
  // looked at, with when to come back.
  const std::string refused =
      Ask(a, Http("GET", "/v1/queues", "good-token-0001"));
  EXPECT_EQ(StatusOf(refused), 429) << refused;
  EXPECT_EQ(BodyOf(refused)["error"]["code"], "too_many_auth_failures");
  EXPECT_EQ(HeaderOf(refused, "Retry-After"), "1") << refused;
  // What needs no token still answers.
  EXPECT_EQ(StatusOf(Ask(a, Http("GET", "/healthz", ""))), 200);

  // Another address is not touched, and asking without a token is no
  // failure.
  RawConn b(port(), "127.0.0.2");
  ASSERT_TRUE(b.ok());
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(StatusOf(Ask(b, Http("GET", "/v1/queues", ""))), 401);
  }
  EXPECT_EQ(StatusOf(Ask(b, Http("GET", "/v1/queues", "good-token-0001"))),
            200);
  EXPECT_EQ(Occurrences(server_->log(), "peer=127.0.0.2"), 0u);

  // Bad AWS signatures count the same on the SQS endpoint.
  RawConn c(port(), "127.0.0.3");
  ASSERT_TRUE(c.ok());
  const std::string body = "Action=ListQueues&Version=2012-11-05";
  const std::string sqs =
      "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Content-Type: application/x-www-form-urlencoded\r\n"
      "X-Amz-Date: 20261127T000000Z\r\n"
      "Authorization: AWS4-HMAC-SHA256 "
      "Credential=AKIAGUESS/20261127/us-east-1/sqs/aws4_request, "
      "SignedHeaders=host;x-amz-date, Signature=" +
      std::string(64, '0') +
      "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  for (int i = 0; i < 3; ++i) {
    const std::string r = Ask(c, sqs);
    EXPECT_EQ(StatusOf(r), 403) << r;
    EXPECT_EQ(r.find("RequestThrottled"), std::string::npos) << r;
  }
  ASSERT_TRUE(
      Logged("event=auth_failed peer=127.0.0.3 credential=sqs_signature", 3));
  const std::string throttled = Ask(c, sqs);
  EXPECT_EQ(StatusOf(throttled), 400) << throttled;
  EXPECT_NE(throttled.find("RequestThrottled"), std::string::npos) << throttled;

  // A try is earned back after a third of the period: the right token
  // works again from the first address; a wrong one uses the try up.
  ASSERT_TRUE(WaitFor(
      [&] {
        return StatusOf(Ask(a, Http("GET", "/v1/queues", "good-token-0001"))) ==
               200;
      },
      std::chrono::seconds(5)));
  EXPECT_EQ(StatusOf(Ask(a, Http("GET", "/v1/queues", "guess-0004"))), 401);
  EXPECT_EQ(StatusOf(Ask(a, Http("GET", "/v1/queues", "good-token-0001"))),
            429);
}

}  // namespace
}  // namespace sqlq::server_test
