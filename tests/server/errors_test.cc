// Every error reply of docs/http-api.md: status, and the JSON error code.
// A server with small limits, so that each can be reached cheaply.

#include <future>

#include "tests/server/server_fixture.h"

namespace sqlq::server_test {
namespace {

class Errors : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    StartServer({"--max-body", "4096", "--max-batch", "3", "--max-payload",
                 "100", "--max-wait", "5s", "--max-polls-per-token", "2",
                 "--max-header", "2048", "--request-timeout", "1s"});
    c_.emplace(port());
    ASSERT_EQ(c_->Post("/v1/queues/jobs", Json::object()).status, 201);
  }
  Client& c() { return *c_; }
  // Sends raw bytes on a fresh connection and returns the reply.
  std::string Raw(const std::string& bytes) {
    RawConn raw(port());
    EXPECT_TRUE(raw.Write(bytes));
    return raw.ReadResponse();
  }
  void ExpectError(const Response& r, int status, const std::string& code) {
    EXPECT_EQ(r.status, status) << r.body;
    EXPECT_EQ(r.error_code(), code) << r.body;
    EXPECT_TRUE(r.json["error"]["message"].is_string()) << r.body;
    EXPECT_EQ(r.header("content-type"), "application/json");
  }
  std::optional<Client> c_;
};

TEST_F(Errors, MalformedJsonWrongTypeUnknownField) {
  ExpectError(c().Call("POST", "/v1/queues/jobs/messages", "{\"messages\":"),
              400, "malformed_json");
  ExpectError(c().Call("POST", "/v1/queues/jobs/messages", "[1,2]"), 400,
              "wrong_type");
  ExpectError(c().Post("/v1/queues/jobs/claim", {{"max", "ten"}}), 400,
              "wrong_type");
  ExpectError(c().Post("/v1/queues/jobs/claim", {{"max", 1.5}}), 400,
              "wrong_type");
  ExpectError(c().Post("/v1/queues/jobs/messages", {{"messages", "x"}}), 400,
              "wrong_type");
  // ("payload" may be any JSON value; base64 must be a string.)
  ExpectError(c().Post("/v1/queues/jobs/messages",
                       {{"messages", {{{"payload_base64", 5}}}}}),
              400, "wrong_type");
  ExpectError(c().Post("/v1/queues/jobs/claim", {{"max", 1}, {"maxx", 2}}), 400,
              "unknown_field");
  ExpectError(c().Post("/v1/queues/jobs/messages",
                       {{"messages", {{{"payload", "a"}, {"prio", 1}}}}}),
              400, "unknown_field");
  // Nothing was stored by any of them.
  EXPECT_EQ(c().Get("/v1/queues/jobs").json["stats"]["sends"], 0);
}

// Regression: the server checked every duration against 400 days and named
// that limit, where the library's are 365 days for delays, 12 h for leases
// and 3,650 days for retention.
TEST_F(Errors, DurationErrorsNameTheLimitThatApplies) {
  constexpr std::int64_t kDay = 24LL * 3600 * 1000;
  struct Case {
    std::string target;
    Json body;
    std::string limit;
  };
  for (const Case& k : std::vector<Case>{
           {"/v1/queues/jobs/messages",
            {{"messages", {{{"payload", "x"}, {"delay_ms", 366 * kDay}}}}},
            "31536000000"},
           {"/v1/queues/jobs/messages",
            {{"messages", {{{"payload", "x"}, {"delay_ms", 401 * kDay}}}}},
            "31536000000"},
           {"/v1/queues/jobs/claim",
            {{"lease_ms", 13 * 3600 * 1000}},
            "43200000"},
           {"/v1/queues/other",
            {{"retention_ms", 3651 * kDay}},
            "315360000000"},
       }) {
    auto r = c().Post(k.target, k.body);
    ExpectError(r, 400, "invalid_argument");
    const std::string message = r.json["error"]["message"];
    EXPECT_NE(message.find(k.limit), std::string::npos) << message;
    EXPECT_EQ(message.find("34560000000"), std::string::npos) << message;
  }
  EXPECT_EQ(c().Get("/v1/queues/jobs").json["stats"]["sends"], 0);
}

TEST_F(Errors, InvalidArguments) {
  ExpectError(c().Post("/v1/queues/bad%20name", Json::object()), 400,
              "invalid_argument");
  ExpectError(c().Post("/v1/queues/jobs/claim", {{"max", 0}}), 400,
              "invalid_argument");
  ExpectError(
      c().Post("/v1/queues/jobs/messages", {{"messages", Json::array()}}), 400,
      "invalid_argument");
  ExpectError(c().Post("/v1/queues/jobs/messages",
                       {{"messages", {{{"payload_base64", "!!"}}}}}),
              400, "invalid_argument");
  ExpectError(c().Post("/v1/queues/jobs/messages",
                       {{"messages",
                         {{{"payload", "a"}, {"payload_base64", "YQ=="}}}}}),
              400, "invalid_argument");
  ExpectError(c().Post("/v1/queues/jobs/ack", {{"receipt", "garbage"}}), 400,
              "invalid_argument");
  ExpectError(c().Post("/v1/queues/jobs/nack", Json::object()), 400,
              "invalid_argument");
  ExpectError(c().Get("/v1/queues/jobs/dead?limit=0"), 400, "invalid_argument");
  ExpectError(c().Get("/v1/queues/jobs%zz"), 400, "bad_request");
}

TEST_F(Errors, NotFoundNoRouteMethodNotAllowed) {
  ExpectError(c().Get("/v1/queues/nope"), 404, "not_found");
  ExpectError(c().Post("/v1/queues/nope/messages",
                       {{"messages", {{{"payload", "a"}}}}}),
              404, "not_found");
  ExpectError(c().Get("/v2/queues"), 404, "no_route");
  ExpectError(c().Get("/v1/queues/jobs/frobnicate"), 404, "no_route");
  ExpectError(c().Call("PUT", "/v1/queues/jobs/claim", "{}"), 405,
              "method_not_allowed");
  ExpectError(c().Call("POST", "/healthz", ""), 405, "method_not_allowed");
}

TEST_F(Errors, ConflictsAlreadyExistsWrongKindStaleReceipt) {
  ExpectError(c().Post("/v1/queues/jobs", Json::object()), 409,
              "already_exists");
  ExpectError(c().Get("/v1/rings/jobs"), 409, "failed_precondition");

  ASSERT_EQ(
      c().Post("/v1/queues/jobs/messages", {{"messages", {{{"payload", "a"}}}}})
          .status,
      200);
  auto first = c().Post("/v1/queues/jobs/claim", {{"lease_ms", 1}});
  ASSERT_EQ(first.json["messages"].size(), 1u);
  // The lease runs out; a second consumer claims the message again (its
  // wait ends when the lease expires).
  auto second = c().Post("/v1/queues/jobs/claim", {{"wait_ms", 5000}});
  ASSERT_EQ(second.json["messages"].size(), 1u) << second.body;
  ExpectError(c().Post("/v1/queues/jobs/ack",
                       {{"receipt", first.json["messages"][0]["receipt"]}}),
              409, "failed_precondition");
  EXPECT_EQ(c().Post("/v1/queues/jobs/ack",
                     {{"receipt", second.json["messages"][0]["receipt"]}})
                .status,
            200);
}

TEST_F(Errors, LimitsBodyBatchPayloadWaitHeaders) {
  std::string big(5000, 'x');
  ExpectError(c().Post("/v1/queues/jobs/messages",
                       {{"messages", {{{"payload", big}}}}}),
              413, "body_too_large");
  ExpectError(c().Post("/v1/queues/jobs/messages", {{"messages",
                                                     {{{"payload", "1"}},
                                                      {{"payload", "2"}},
                                                      {{"payload", "3"}},
                                                      {{"payload", "4"}}}}}),
              413, "batch_too_large");
  ExpectError(c().Post("/v1/queues/jobs/messages",
                       {{"messages", {{{"payload", std::string(101, 'p')}}}}}),
              413, "too_large");
  ExpectError(
      c().Post("/v1/queues/jobs/ack", {{"receipts", {"a", "b", "c", "d"}}}),
      413, "batch_too_large");
  ExpectError(c().Post("/v1/queues/jobs/claim", {{"wait_ms", 5001}}), 400,
              "wait_too_long");
  std::string r =
      Raw("GET /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
          "application/json\r\nX-Big: " +
          std::string(3000, 'h') + "\r\n\r\n");
  EXPECT_EQ(StatusOf(r), 431) << r;
  EXPECT_EQ(BodyOf(r)["error"]["code"], "headers_too_large");
  EXPECT_EQ(c().Get("/v1/queues/jobs").json["stats"]["sends"], 0);
}

TEST_F(Errors, TooManyLongPollsPerToken) {
  std::vector<std::unique_ptr<RawConn>> parked;
  std::string body = Json{{"wait_ms", 5000}}.dump();
  std::string req =
      "POST /v1/queues/jobs/claim HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
      "application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  for (int i = 0; i < 2; ++i) {
    parked.push_back(std::make_unique<RawConn>(port()));
    ASSERT_TRUE(parked.back()->Write(req));
  }
  ASSERT_TRUE(WaitFor([&] {
    return c().Get("/metrics").body.find("sqlq_server_waiting_consumers 2") !=
           std::string::npos;
  }));
  ExpectError(c().Post("/v1/queues/jobs/claim", {{"wait_ms", 5000}}), 429,
              "too_many_polls");
  // A claim that does not wait is not a long poll.
  EXPECT_EQ(c().Post("/v1/queues/jobs/claim", Json::object()).status, 200);
}

TEST_F(Errors, MalformedHttpAndAmbiguousLength) {
  std::string r = Raw("THIS IS NOT HTTP\r\n\r\n");
  EXPECT_EQ(StatusOf(r), 400) << r;
  EXPECT_EQ(BodyOf(r)["error"]["code"], "bad_request");

  r =
      Raw("POST /v1/queues/jobs/messages HTTP/1.1\r\nHost: "
          "localhost\r\nContent-Type: application/json\r\n"
          "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
          "0\r\n\r\n");
  EXPECT_EQ(StatusOf(r), 400) << r;
  EXPECT_EQ(BodyOf(r)["error"]["code"], "bad_request");
  r =
      Raw("POST /v1/queues/jobs/messages HTTP/1.1\r\nHost: "
          "localhost\r\nContent-Type: application/json\r\n"
          "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n"
          "0\r\n\r\n");
  EXPECT_EQ(StatusOf(r), 400) << r;
  r =
      Raw("GET /healthz HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
          "application/json\r\nContent-Length: abc\r\n\r\n");
  EXPECT_EQ(StatusOf(r), 400) << r;
  // A chunked body is fine on its own.
  std::string body = Json{{"messages", {{{"payload", "chunked"}}}}}.dump();
  char hex[16];
  std::snprintf(hex, sizeof hex, "%zx", body.size());
  r =
      Raw("POST /v1/queues/jobs/messages HTTP/1.1\r\nHost: "
          "localhost\r\nContent-Type: application/json\r\n"
          "Transfer-Encoding: chunked\r\n\r\n" +
          std::string(hex) + "\r\n" + body + "\r\n0\r\n\r\n");
  EXPECT_EQ(StatusOf(r), 200) << r;
  EXPECT_EQ(c().Get("/v1/queues/jobs").json["stats"]["sends"], 1);
}

TEST_F(Errors, SlowClientIsCutOffWhileOthersAreServed) {
  RawConn slow(port());
  ASSERT_TRUE(slow.Write("POST /v1/queues/jobs/messages HTTP/1.1\r\nHo"));
  RawConn garbage(port());
  ASSERT_TRUE(garbage.Write(std::string("\x16\x03\x01\x02\x00", 5)));
  // Others are served while both misbehave.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(c().Get("/healthz").status, 200);
  // The request timeout is 1 s: the slow client is closed well within 10 s.
  EXPECT_TRUE(slow.ClosedWithin(std::chrono::seconds(10)));
  EXPECT_TRUE(garbage.ClosedWithin(std::chrono::seconds(10)));
  EXPECT_EQ(c().Get("/healthz").status, 200);
}

TEST(ErrorsConnections, OverTheConnectionLimitIsAnswered503) {
  fs::path dir = fs::temp_directory_path() /
                 ("sqlq-server-conns-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    ServerProcess server(dir, {"--max-connections", "2"});
    ASSERT_TRUE(server.Start()) << server.log();
    RawConn a(server.port()), b(server.port());
    ASSERT_TRUE(a.Write("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"));
    ASSERT_TRUE(b.Write("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"));
    EXPECT_EQ(StatusOf(a.ReadResponse()), 200);
    EXPECT_EQ(StatusOf(b.ReadResponse()), 200);
    RawConn third(server.port());
    std::string r = third.ReadResponse();
    EXPECT_EQ(StatusOf(r), 503) << r;
    EXPECT_EQ(BodyOf(r)["error"]["code"], "too_many_connections");
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sqlq::server_test
