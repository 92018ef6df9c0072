// Requests a browser would send on behalf of a page of another site, and
// requests that reach the server through a name that is not its own (DNS
// rebinding): refused before any handler runs, leaving the queues as they
// were. The same refusals in a real browser: tests/web/cross_site_test.mjs.

#include "tests/server/server_fixture.h"

namespace sqlq::server_test {
namespace {

class CrossSite : public ServerTest {
 protected:
  void Start(std::vector<std::string> args = {}) {
    StartServer(std::move(args));
    c_.emplace(port());
    ASSERT_EQ(c_->Post("/v1/queues/jobs", Json::object()).status, 201);
    ASSERT_EQ(c_->Post("/v1/queues/jobs/messages",
                       {{"messages", {{{"payload", "a"}}, {{"payload", "b"}}}}})
                  .status,
              200);
  }
  // A request with exactly the given head lines and body, on a fresh
  // connection; returns the raw reply.
  std::string Raw(const std::string& method, const std::string& target,
                  const std::vector<std::string>& headers,
                  const std::string& body = "") {
    std::string req = method + " " + target + " HTTP/1.1\r\n";
    bool framed = false;
    for (const auto& h : headers) {
      req += h + "\r\n";
      framed = framed || Lower(h).starts_with("transfer-encoding:");
    }
    if (!framed && (!body.empty() || method == "POST")) {
      req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    }
    req += "\r\n" + body;
    RawConn raw(port());
    EXPECT_TRUE(raw.Write(req));
    return raw.ReadResponse();
  }
  std::string Here() { return "Host: 127.0.0.1:" + std::to_string(port()); }
  int Ready() { return c_->Get("/v1/queues/jobs").json["stats"]["ready"]; }
  static std::string Header(const std::string& raw, const std::string& name) {
    std::string head = Lower(raw.substr(0, raw.find("\r\n\r\n")));
    auto at = head.find("\r\n" + Lower(name) + ": ");
    if (at == std::string::npos) return "";
    at += name.size() + 4;
    return raw.substr(at, head.find("\r\n", at) - at);
  }
  std::optional<Client> c_;
};

// The attack as reported: a page's text/plain POST with its own Origin and
// a rebound Host purged the queue.
TEST_F(CrossSite, TextPlainPurgeFromAnotherSiteIsRefused) {
  Start();
  std::string r = Raw("POST", "/v1/queues/jobs/purge",
                      {"Host: evil.example", "Origin: http://evil.example",
                       "Content-Type: text/plain"},
                      "x");
  EXPECT_EQ(StatusOf(r), 403) << r;
  EXPECT_EQ(Ready(), 2);
}

TEST_F(CrossSite, HostThatIsNotTheServersNameIsRefused) {
  Start();
  // DNS rebinding: the page's own name now points at 127.0.0.1, so its
  // requests are same-origin to the browser and carry that name as Host.
  std::string r = Raw("GET", "/v1/queues",
                      {"Host: evil.example:" + std::to_string(port())});
  EXPECT_EQ(StatusOf(r), 403) << r;
  EXPECT_EQ(BodyOf(r)["error"]["code"], "host_not_allowed") << r;
  EXPECT_EQ(BodyOf(r)["error"]["message"].get<std::string>().find("queue"),
            std::string::npos)
      << "the refusal must not show queue data: " << r;
  r = Raw("POST", "/v1/queues/jobs/purge",
          {"Host: evil.example", "Content-Type: application/json"}, "{}");
  EXPECT_EQ(StatusOf(r), 403) << r;
  EXPECT_EQ(Ready(), 2);
  // The server's own names pass: loopback addresses, localhost, IPv6.
  for (std::string host :
       {"127.0.0.1", "localhost", "LocalHost.", "[::1]", "api.localhost"}) {
    r = Raw("GET", "/v1/queues", {"Host: " + host + ":8080"});
    EXPECT_EQ(StatusOf(r), 200) << host << "\n" << r;
  }
}

TEST_F(CrossSite, AllowedHostsNameMoreHosts) {
  Start({"--allowed-hosts", "queue.internal, Other.Example"});
  EXPECT_EQ(StatusOf(Raw("GET", "/v1/queues", {"Host: queue.internal"})), 200);
  EXPECT_EQ(StatusOf(Raw("GET", "/v1/queues", {"Host: other.example:80"})),
            200);
  EXPECT_EQ(StatusOf(Raw("GET", "/v1/queues", {"Host: evil.example"})), 403);
}

TEST_F(CrossSite, RequestWithoutHostIsRefused) {
  Start();
  std::string r = Raw("GET", "/v1/queues", {});
  EXPECT_EQ(StatusOf(r), 400) << r;
  EXPECT_EQ(BodyOf(r)["error"]["code"], "missing_host") << r;
}

TEST_F(CrossSite, PageOfAnotherOriginIsRefused) {
  Start();
  std::string r = Raw(
      "POST", "/v1/queues/jobs/purge",
      {Here(), "Origin: http://evil.example", "Content-Type: application/json"},
      "{}");
  EXPECT_EQ(StatusOf(r), 403) << r;
  EXPECT_EQ(BodyOf(r)["error"]["code"], "origin_not_allowed") << r;
  // A bodiless POST, as fetch(url, {method: "POST", mode: "no-cors"}) sends.
  r = Raw("POST", "/v1/queues/jobs/purge",
          {Here(), "Origin: http://evil.example"});
  EXPECT_EQ(StatusOf(r), 403) << r;
  // A sandboxed frame or a file:// page sends Origin: null.
  r = Raw("POST", "/v1/queues/jobs/purge", {Here(), "Origin: null"});
  EXPECT_EQ(StatusOf(r), 403) << r;
  // An <img> or <script> of another site sends no Origin, but says so.
  r = Raw("GET", "/v1/queues",
          {Here(), "Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: no-cors"});
  EXPECT_EQ(StatusOf(r), 403) << r;
  EXPECT_EQ(Ready(), 2);
  // No CORS preflight is granted either.
  r = Raw("OPTIONS", "/v1/queues/jobs/purge",
          {Here(), "Origin: http://evil.example",
           "Access-Control-Request-Method: POST"});
  EXPECT_EQ(StatusOf(r), 403) << r;
  EXPECT_EQ(Header(r, "Access-Control-Allow-Origin"), "");
}

TEST_F(CrossSite, SameOriginRequestsOfTheDashboardPass) {
  Start();
  const std::string origin =
      "Origin: http://127.0.0.1:" + std::to_string(port());
  std::string r = Raw("POST", "/v1/queues/jobs/claim",
                      {Here(), origin, "Content-Type: application/json",
                       "Sec-Fetch-Site: same-origin", "Sec-Fetch-Mode: cors"},
                      R"({"max":1})");
  EXPECT_EQ(StatusOf(r), 200) << r;
  EXPECT_EQ(BodyOf(r)["messages"].size(), 1u) << r;
  // Opening the dashboard from a link on another site is a navigation.
  r = Raw("GET", "/",
          {Here(), "Sec-Fetch-Site: cross-site", "Sec-Fetch-Mode: navigate"});
  EXPECT_EQ(StatusOf(r), 200) << r;
}

TEST_F(CrossSite, BodiesMustBeDeclaredJson) {
  Start();
  for (std::string type :
       {"Content-Type: text/plain",
        "Content-Type: application/x-www-form-urlencoded",
        "Content-Type: multipart/form-data; boundary=x", ""}) {
    std::vector<std::string> head = {Here()};
    if (!type.empty()) head.push_back(type);
    std::string r = Raw("POST", "/v1/queues/jobs/purge", head, "{}");
    EXPECT_EQ(StatusOf(r), 415) << type << "\n" << r;
    EXPECT_EQ(BodyOf(r)["error"]["code"], "unsupported_media_type") << r;
  }
  EXPECT_EQ(Ready(), 2);
  std::string r = Raw("POST", "/v1/queues/jobs/messages",
                      {Here(), "Content-Type: Application/JSON; charset=utf-8"},
                      R"({"messages":[{"payload":"c"}]})");
  EXPECT_EQ(StatusOf(r), 200) << r;
  // Bodiless POSTs need no type (curl -X POST .../purge).
  r = Raw("POST", "/v1/queues/jobs/purge", {Here()});
  EXPECT_EQ(StatusOf(r), 200) << r;
  EXPECT_EQ(Ready(), 0);
}

// The SQS endpoint takes form bodies (its query protocol), but not from a
// browser: a page's form must not drop a queue of a server without a
// token file. SQS clients send neither Origin nor Sec-Fetch-Site.
TEST_F(CrossSite, SqsFormsFromBrowsersAreRefused) {
  Start();
  const std::string form =
      "Action=DeleteQueue&QueueUrl=http%3A%2F%2F127.0.0.1%2F000000000000%"
      "2Fjobs";
  // A page of this origin: the form is refused as a body that is not
  // JSON; one of another site already for where it comes from.
  for (const auto& [browser, status] : std::vector<std::pair<std::string, int>>{
           {"Sec-Fetch-Site: same-origin", 415},
           {"Origin: http://" + Here().substr(Here().find(' ') + 1), 415},
           {"Sec-Fetch-Site: cross-site", 403}}) {
    std::string r = Raw(
        "POST", "/",
        {Here(), "Content-Type: application/x-www-form-urlencoded", browser},
        form);
    EXPECT_EQ(StatusOf(r), status) << browser << "\n" << r;
  }
  EXPECT_EQ(Ready(), 2);
  // A form to /v1 is no SQS request, whoever sends it.
  std::string r =
      Raw("POST", "/v1/queues/jobs/purge",
          {Here(), "Content-Type: application/x-www-form-urlencoded"}, "{}");
  EXPECT_EQ(StatusOf(r), 415) << r;
  EXPECT_EQ(Ready(), 2);
  // The same form from a client that is no browser is an SQS call.
  r = Raw("POST", "/",
          {Here(), "Content-Type: application/x-www-form-urlencoded"},
          "Action=GetQueueUrl&QueueName=jobs");
  EXPECT_EQ(StatusOf(r), 200) << r;
  EXPECT_NE(r.find("/000000000000/jobs</QueueUrl>"), std::string::npos) << r;
}

// A link or a script's GET reaches the SQS endpoint with no body: without a
// token file (no signature needed), anything a browser sends is refused.
TEST_F(CrossSite, SqsGetsFromBrowsersAreRefused) {
  Start();
  const std::string target =
      "/?Action=DeleteQueue&QueueUrl=%2F000000000000%2Fjobs";
  for (const std::string browser :
       {"Sec-Fetch-Mode: navigate", "Sec-Fetch-Site: none",
        "Sec-Fetch-Dest: image", "Origin: http://evil.example"}) {
    std::string r = Raw("GET", target, {Here(), browser}, "");
    EXPECT_EQ(StatusOf(r), 403) << browser << "\n" << r;
    // Another origin is refused before the endpoint sees it; the rest by
    // the endpoint, as SQS refuses.
    if (browser.starts_with("Sec-Fetch")) {
      EXPECT_NE(r.find("<Code>AccessDenied</Code>"), std::string::npos) << r;
    }
  }
  EXPECT_EQ(Ready(), 2);  // the queue is still there
  // The same GET from a client that is no browser is an SQS call.
  std::string r =
      Raw("GET", "/?Action=GetQueueUrl&QueueName=jobs", {Here()}, "");
  EXPECT_EQ(StatusOf(r), 200) << r;
}

// Hostile SQS input is refused with the SQS error, and the server goes on.
TEST_F(CrossSite, HostileSqsInputIsRefusedAndTheServerGoesOn) {
  Start();
  const std::string form = "Content-Type: application/x-www-form-urlencoded";
  std::string deep = "Action=ListQueues&";
  for (int i = 0; i < 20000; ++i) deep += "a.";
  deep += "a=1";
  std::string r = Raw("POST", "/", {Here(), form}, deep);
  EXPECT_EQ(StatusOf(r), 400) << r.substr(0, 400);
  EXPECT_NE(r.find("MalformedQueryString"), std::string::npos)
      << r.substr(0, 400);
  // A value that is not UTF-8 where a number is expected.
  r = Raw("POST", "/", {Here(), form}, "Action=ListQueues&MaxResults.1=%FF");
  EXPECT_EQ(StatusOf(r), 400) << r;
  EXPECT_NE(r.find("InvalidParameterValue"), std::string::npos) << r;
  // The JSON protocol: nesting past the limit, and a bad escape in a
  // QueueUrl, answered in JSON.
  const std::string json = "Content-Type: application/x-amz-json-1.0";
  std::string nested = R"({"QueueName":"jobs","x":)";
  for (int i = 0; i < 50000; ++i) nested += '[';
  for (int i = 0; i < 50000; ++i) nested += ']';
  nested += '}';
  r = Raw("POST", "/", {Here(), json, "X-Amz-Target: AmazonSQS.GetQueueUrl"},
          nested);
  EXPECT_EQ(StatusOf(r), 400) << r.substr(0, 400);
  EXPECT_NE(r.find("SerializationException"), std::string::npos)
      << r.substr(0, 400);
  r = Raw("POST", "/", {Here(), json, "X-Amz-Target: AmazonSQS.PurgeQueue"},
          R"({"QueueUrl":"http://h/000000000000/%zz"})");
  EXPECT_EQ(StatusOf(r), 400) << r;
  EXPECT_NE(r.find(R"("__type")"), std::string::npos) << r;
  EXPECT_EQ(Ready(), 2);
}

TEST_F(CrossSite, BodiesOnRoutesThatTakeNoneAreRefused) {
  Start();
  for (std::string method : {"GET", "DELETE"}) {
    std::string r = Raw(method, "/v1/queues/jobs",
                        {Here(), "Content-Type: application/json"}, "[[[[]]]]");
    EXPECT_EQ(StatusOf(r), 400) << method << "\n" << r;
    EXPECT_EQ(BodyOf(r)["error"]["code"], "body_not_allowed") << r;
  }
  EXPECT_EQ(Ready(), 2);
}

TEST_F(CrossSite, TransferCodingsOtherThanChunkedAreRefused) {
  Start();
  std::string r = Raw("POST", "/v1/queues/jobs/messages",
                      {Here(), "Content-Type: application/json",
                       "Transfer-Encoding: gzip, chunked"});
  EXPECT_EQ(StatusOf(r), 501) << r;
  EXPECT_EQ(BodyOf(r)["error"]["code"], "unsupported_transfer_encoding") << r;
  EXPECT_EQ(Ready(), 2);
}

TEST_F(CrossSite, CorsOriginsAreAllowedWithProperHeaders) {
  Start({"--cors-origins", "https://app.example.com"});
  const std::string app = "Origin: https://app.example.com";
  std::string r =
      Raw("OPTIONS", "/v1/queues/jobs/claim",
          {Here(), app, "Access-Control-Request-Method: POST",
           "Access-Control-Request-Headers: authorization,content-type"});
  EXPECT_EQ(StatusOf(r), 204) << r;
  EXPECT_EQ(Header(r, "Access-Control-Allow-Origin"),
            "https://app.example.com");
  EXPECT_NE(Header(r, "Access-Control-Allow-Headers").find("Authorization"),
            std::string::npos)
      << r;
  EXPECT_NE(Header(r, "Access-Control-Allow-Methods").find("POST"),
            std::string::npos)
      << r;
  r = Raw("POST", "/v1/queues/jobs/claim",
          {Here(), app, "Content-Type: application/json"}, R"({"max":1})");
  EXPECT_EQ(StatusOf(r), 200) << r;
  EXPECT_EQ(Header(r, "Access-Control-Allow-Origin"),
            "https://app.example.com");
  EXPECT_EQ(Header(r, "Vary"), "Origin");
  // Errors carry the header too, so the page can read why.
  r = Raw("GET", "/v1/queues/nope", {Here(), app});
  EXPECT_EQ(StatusOf(r), 404) << r;
  EXPECT_EQ(Header(r, "Access-Control-Allow-Origin"),
            "https://app.example.com");
  // Any other origin is still refused.
  r = Raw("POST", "/v1/queues/jobs/purge",
          {Here(), "Origin: https://evil.example.com"});
  EXPECT_EQ(StatusOf(r), 403) << r;
  EXPECT_EQ(Ready(), 1);
}

TEST_F(CrossSite, BadPolicyFlagsStopTheServer) {
  ServerProcess s(dir_, {"--cors-origins", "app.example.com/path"});
  ASSERT_FALSE(s.Start());
  EXPECT_EQ(s.WaitExit(std::chrono::seconds(10)), 2);
  EXPECT_NE(s.log().find("--cors-origins"), std::string::npos) << s.log();
}

}  // namespace
}  // namespace sqlq::server_test
