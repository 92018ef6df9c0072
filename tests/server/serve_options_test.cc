// What an operator meets running `sqlq serve` (docs/server.md): the
// help's value placeholders, the log's level and format, the access log,
// a port already taken, and HEAD on the health checks.

#include <cstdio>
#include <regex>
#include <set>

#include "tests/server/server_fixture.h"

namespace sqlq::server_test {
namespace {

// The output of a shell command, with its exit code.
std::string Shell(const std::string& cmd, int* code = nullptr) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) {
    out.append(buf, n);
  }
  const int st = ::pclose(p);
  if (code != nullptr) *code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

// The log's lines.
std::vector<std::string> Lines(const std::string& log) {
  std::vector<std::string> out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

class ServeOptions : public ServerTest {};

TEST_F(ServeOptions, HelpNamesWhatEachValueIs) {
  int code = -1;
  const std::string help =
      Shell(std::string(SQLQ_BIN) + " serve --help", &code);
  EXPECT_EQ(code, 0) << help;
  EXPECT_EQ(help.find("TEXT"), std::string::npos) << help;
  for (const char* option :
       {"--bind ADDR", "--port PORT", "--port-file PATH", "--tokens PATH",
        "--max-body BYTES", "--max-batch N", "--max-wait DURATION",
        "--auth-failures N/PERIOD", "--allowed-hosts LIST",
        "--schedules true|false", "--log-level debug|info|warn|error",
        "--log-format logfmt|json", "--access-log true|false",
        "--config PATH"}) {
    EXPECT_NE(help.find(option), std::string::npos) << option << "\n" << help;
  }
}

TEST_F(ServeOptions, APortInUseSaysSoAndExitsUnavailable) {
  StartServer();
  ServerProcess second(dir_ / "second");
  fs::create_directories(dir_ / "second");
  second.UsePort(port());
  EXPECT_FALSE(second.Start());
  // 8: busy or unavailable, try again (docs/cli.md); not 2, a usage error.
  EXPECT_EQ(second.WaitExit(std::chrono::seconds(10)), 8) << second.log();
  EXPECT_NE(second.log().find("cannot listen on 127.0.0.1:" +
                              std::to_string(port()) + ": the port is in use"),
            std::string::npos)
      << second.log();
  // The first server goes on serving.
  Client c(port());
  EXPECT_EQ(c.Get("/healthz").status, 200);
}

TEST_F(ServeOptions, HeadOnHealthAndReadinessAnswersWithoutABody) {
  StartServer();
  Client c(port());
  for (const char* path : {"/healthz", "/readyz"}) {
    const Response get = c.Get(path);
    const Response head = c.Call("HEAD", path);
    EXPECT_EQ(head.status, 200) << path << " " << head.body;
    EXPECT_EQ(head.body, "") << path;
    EXPECT_EQ(head.header("content-type"), get.header("content-type"));
    EXPECT_EQ(head.header("content-length"), std::to_string(get.body.size()))
        << path;
  }
  // Elsewhere HEAD is refused as before, still without a body: the
  // connection stays in step for the next request on it.
  const Response refused = c.Call("HEAD", "/v1/queues");
  EXPECT_EQ(refused.status, 405);
  EXPECT_EQ(refused.body, "");
  EXPECT_EQ(c.Get("/healthz").json["status"], "ok");
  // Counted under routes of their own.
  const std::string metrics = c.Get("/metrics").body;
  EXPECT_NE(metrics.find(R"(route="HEAD /healthz",status="2xx")"),
            std::string::npos);
  EXPECT_NE(metrics.find(R"(route="HEAD /readyz",status="2xx")"),
            std::string::npos);
}

TEST_F(ServeOptions, AccessLogLinesEachRequestWithoutTokensOrBodies) {
  std::ofstream(dir_ / "tokens.txt") << "secret-token-0001 admin:*\n";
  StartServer(
      {"--tokens", (dir_ / "tokens.txt").string(), "--access-log", "true"});
  Client c(port(), "secret-token-0001");
  ASSERT_EQ(c.Post("/v1/queues/jobs", Json::object()).status, 201);
  ASSERT_EQ(c.Post("/v1/queues/jobs/messages", {{"payload", "secret-payload"}})
                .status,
            200);
  auto claimed = c.Post("/v1/queues/jobs/claim", Json::object());
  const std::string receipt = claimed.json["messages"][0]["receipt"];
  ASSERT_EQ(c.Post("/v1/queues/jobs/ack", {{"receipt", receipt}}).status, 200);
  ASSERT_EQ(c.Get("/v1/queues/nope").status, 404);

  // Each reply is logged before it is written: all are there now.
  const std::string log = server_->log();
  std::vector<std::string> requests;
  for (const std::string& line : Lines(log)) {
    if (line.find(" event=request ") != std::string::npos) {
      requests.push_back(line);
    }
  }
  ASSERT_EQ(requests.size(), 5u) << log;
  const std::regex shape(
      R"(^ts=\S+ level=info event=request peer=127\.0\.0\.1:\d+ )"
      R"(route="[A-Z]+ /[^"]*" status=\d{3} duration_ms=\d+\.\d{3}$)");
  for (const std::string& line : requests) {
    EXPECT_TRUE(std::regex_match(line, shape)) << line;
  }
  EXPECT_NE(requests[1].find(
                R"(route="POST /v1/queues/{name}/messages" status=200 )"),
            std::string::npos)
      << requests[1];
  EXPECT_NE(requests[4].find(R"(route="GET /v1/queues/{name}" status=404 )"),
            std::string::npos)
      << requests[4];
  EXPECT_EQ(log.find("secret-token"), std::string::npos) << log;
  EXPECT_EQ(log.find("secret-payload"), std::string::npos) << log;
  EXPECT_EQ(log.find(receipt), std::string::npos) << log;
}

// A request that carries a trace context (OpenTelemetry's traceparent, or
// the AWS SDKs' X-Amzn-Trace-Id) is logged with its trace id; curl stands
// for the instrumented client.
TEST_F(ServeOptions, TheAccessLogCarriesTheTraceIdOfARequest) {
  StartServer({"--access-log", "true"});
  const std::string url =
      "http://127.0.0.1:" + std::to_string(port()) + "/healthz";
  int code = -1;
  Shell(
      "curl -sS -o /dev/null -H 'traceparent: "
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' " +
          url,
      &code);
  ASSERT_EQ(code, 0);
  Shell(
      "curl -sS -o /dev/null -H 'X-Amzn-Trace-Id: "
      "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1' " +
          url,
      &code);
  ASSERT_EQ(code, 0);
  Shell("curl -sS -o /dev/null -H 'traceparent: not-a-trace' " + url, &code);
  ASSERT_EQ(code, 0);
  std::vector<std::string> requests;
  for (const std::string& line : Lines(server_->log())) {
    if (line.find(" event=request ") != std::string::npos) {
      requests.push_back(line);
    }
  }
  ASSERT_EQ(requests.size(), 3u) << server_->log();
  EXPECT_NE(requests[0].find(" trace_id=4bf92f3577b34da6a3ce929d0e0e4736"),
            std::string::npos)
      << requests[0];
  EXPECT_NE(requests[1].find(" trace_id=5759e988bd862e3fe1be46a994272793"),
            std::string::npos)
      << requests[1];
  EXPECT_EQ(requests[2].find("trace_id"), std::string::npos) << requests[2];
}

TEST_F(ServeOptions, NoAccessLogByDefault) {
  StartServer();
  Client c(port());
  ASSERT_EQ(c.Get("/healthz").status, 200);
  ASSERT_EQ(c.Post("/v1/queues/jobs", Json::object()).status, 201);
  EXPECT_EQ(Occurrences(server_->log(), "event=request"), 0u) << server_->log();
}

TEST_F(ServeOptions, JsonLinesAtTheLevelAsked) {
  StartServer({"--log-format", "json", "--log-level", "debug"});
  {
    Client c(port());
    ASSERT_EQ(c.Get("/healthz").status, 200);
  }  // closed: the server logs it at debug
  ASSERT_TRUE(WaitFor(
      [&] { return Occurrences(server_->log(), "connection_closed") > 0; },
      std::chrono::seconds(10)))
      << server_->log();
  std::set<std::string> events;
  for (const std::string& line : Lines(server_->log())) {
    const Json j = Json::parse(line, nullptr, false);
    ASSERT_TRUE(j.is_object()) << line;
    ASSERT_TRUE(j["ts"].is_string() && j["level"].is_string() &&
                j["event"].is_string())
        << line;
    events.insert(j["event"].get<std::string>());
    if (j["event"] == "listening") {
      EXPECT_EQ(j["level"], "info");
      EXPECT_EQ(j["port"], port()) << line;  // a number
      EXPECT_EQ(j["addr"], "127.0.0.1") << line;
    }
    if (j["event"] == "connection_closed") {
      EXPECT_EQ(j["level"], "debug");
      EXPECT_EQ(j["replies"], 1) << line;
    }
  }
  EXPECT_TRUE(events.contains("listening"));
  EXPECT_TRUE(events.contains("connection_opened"));
}

TEST_F(ServeOptions, WarnLevelLeavesInfoOut) {
  std::ofstream(dir_ / "tokens.txt") << "secret-token-0001 admin:*\n";
  StartServer({"--tokens", (dir_ / "tokens.txt").string(), "--log-level",
               "warn", "--access-log", "true"});
  Client c(port(), "wrong-token-0001");
  ASSERT_EQ(c.Get("/v1/queues").status, 401);
  const std::string log = server_->log();
  EXPECT_NE(log.find("level=warn event=auth_failed peer=127.0.0.1"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("level=info"), std::string::npos) << log;
}

TEST_F(ServeOptions, BadLogSettingsAreRefused) {
  for (const auto& [args, says] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--log-level", "loud"},
            "--log-level: 'loud' is none of debug, info, warn, error"},
           {{"--log-format", "xml"},
            "--log-format: 'xml' is neither logfmt nor json"},
           {{"--access-log", "yes"},
            "--access-log: 'yes' is neither true nor false"},
       }) {
    ServerProcess bad(dir_, args);
    EXPECT_FALSE(bad.Start());
    EXPECT_EQ(bad.WaitExit(std::chrono::seconds(10)), 2);
    EXPECT_NE(bad.log().find(says), std::string::npos) << bad.log();
    fs::remove(bad.log_file());
  }
}

}  // namespace
}  // namespace sqlq::server_test
