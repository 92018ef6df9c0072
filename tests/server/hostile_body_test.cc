// Request bodies written to hurt the server: refused with a clear error,
// nothing stored, and memory bounded by a small multiple of the bodies
// however many arrive at once.

#include <algorithm>
#include <chrono>
#include <future>

#include "tests/server/server_fixture.h"

namespace sqlq::server_test {
namespace {

class HostileBody : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    // A sanitized server reads six 16 MiB bodies at once more slowly than
    // the default --request-timeout allows (TSan: about 10 s); the plain
    // build keeps the default.
    StartServer(Sanitized()
                    ? std::vector<std::string>{"--request-timeout", "60s"}
                    : std::vector<std::string>{});
    c_.emplace(port());
    ASSERT_EQ(c_->Post("/v1/queues/jobs", Json::object()).status, 201);
  }
  static std::string Post(const std::string& target, const std::string& body) {
    return "POST " + target +
           " HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
           "application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }
  std::string Raw(const std::string& bytes) {
    RawConn raw(port());
    EXPECT_TRUE(raw.Write(bytes));
    return raw.ReadResponse(std::chrono::seconds(60));
  }
  int Sends() { return c_->Get("/v1/queues/jobs").json["stats"]["sends"]; }
  // A form-encoded request: the SQS endpoint's query protocol.
  static std::string Form(const std::string& body) {
    return "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
           "application/x-www-form-urlencoded\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  }
  // The reply to `request`, and how long it took.
  std::pair<std::string, std::chrono::milliseconds> Timed(
      const std::string& request, std::chrono::milliseconds timeout) {
    RawConn raw(port());
    const auto start = SteadyClock::now();
    EXPECT_TRUE(raw.Write(request));
    std::string reply = raw.ReadResponse(timeout);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        SteadyClock::now() - start);
    RecordProperty("ms_" + std::to_string(request.size()),
                   std::to_string(took.count()));
    return {std::move(reply), took};
  }
  // How long a body 100 to 1,000 times larger than one that took `small`
  // may take: what reading and scanning it costs, where parsing it at the
  // square of its keys or parameters takes hours. Sanitizers slow the
  // reading of a large body more than the handling of a small one.
  static std::chrono::milliseconds Bound(std::chrono::milliseconds small) {
    return (Sanitized() ? 1000 : 200) * small;
  }
  // The median time of five answers to `request`, checked by `ok`.
  template <typename Check>
  std::chrono::milliseconds Median(const std::string& request, Check ok) {
    std::vector<std::chrono::milliseconds> times;
    for (int i = 0; i < 5; ++i) {
      auto [reply, took] = Timed(request, std::chrono::seconds(60));
      ok(reply);
      times.push_back(took);
    }
    std::sort(times.begin(), times.end());
    // At least a millisecond: the bound below is a multiple of it.
    return std::max(times[2], std::chrono::milliseconds(1));
  }
  std::optional<Client> c_;
};

TEST_F(HostileBody, BodyFollowedByNulAndGarbageIsRefused) {
  std::string body = R"({"messages":[{"payload":"a"}]})";
  body += std::string("\0garbage", 8);
  std::string r = Raw(Post("/v1/queues/jobs/messages", body));
  EXPECT_EQ(StatusOf(r), 400) << r;
  EXPECT_EQ(BodyOf(r)["error"]["code"], "malformed_json") << r;
  EXPECT_EQ(Sends(), 0);
  // Escaped inside a string, NUL is a payload byte like any other.
  r = Raw(Post("/v1/queues/jobs/messages",
               R"({"messages":[{"payload":"a\u0000b"}]})"));
  EXPECT_EQ(StatusOf(r), 200) << r;
}

TEST_F(HostileBody, DuplicateFieldsAreRefusedNotResolved) {
  auto r = c_->Call("POST", "/v1/queues/jobs/claim", R"({"max":1,"max":1000})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.error_code(), "duplicate_field") << r.body;
  r = c_->Call("POST", "/v1/queues/jobs/messages",
               R"({"messages":[{"payload":"a","priority":1,"priority":9}]})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.error_code(), "duplicate_field") << r.body;
  // The same key in two objects is not a duplicate.
  r = c_->Call("POST", "/v1/queues/jobs/messages",
               R"({"messages":[{"payload":"a"},{"payload":"b"}]})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Sends(), 2);
}

TEST_F(HostileBody, DeepNestingAndHugeArraysAreRefused) {
  std::string deep =
      R"({"messages":)" + std::string(20, '[') + std::string(20, ']') + "}";
  auto r = c_->Call("POST", "/v1/queues/jobs/messages", deep);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.error_code(), "json_too_complex") << r.body;
  std::string wide = R"({"messages":[)";
  for (int i = 0; i < 200000; ++i) wide += i ? ",0" : "0";
  wide += "]}";
  r = c_->Call("POST", "/v1/queues/jobs/messages", wide);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(r.error_code(), "json_too_complex") << r.body;
  EXPECT_EQ(Sends(), 0);
}

// {"k0":"v","k1":"v",...}
std::string WideObject(int keys) {
  std::string s = "{";
  for (int i = 0; i < keys; ++i) {
    s += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":\"v\"";
  }
  return s + "}";
}

// Regression: the parser looked up each key among the object's keys before
// it (Json's objects keep them in a list), so 20,000 keys took 21 s on the
// database pool, stalling every send and claim. An object may hold 1,000
// keys, and is refused at the next: a body of 100,000 keys is answered in
// the time of a few 1,000-key ones, where the square of its keys would
// take 10,000 times as long.
TEST_F(HostileBody, AnObjectOfTooManyKeysIsRefusedAtTheLimit) {
  auto body = [](int keys) {
    return R"({"messages":[{"payload":"a","headers":)" + WideObject(keys) +
           "}]}";
  };
  // 1,000 keys are parsed whole, and refused by the rule on headers.
  const auto small = Median(
      Post("/v1/queues/jobs/messages", body(1000)), [](const std::string& r) {
        EXPECT_EQ(StatusOf(r), 400) << r;
        EXPECT_EQ(BodyOf(r)["error"]["code"], "invalid_argument") << r;
      });
  const auto bound = Bound(small);
  auto [r, took] = Timed(Post("/v1/queues/jobs/messages", body(100000)), bound);
  EXPECT_EQ(StatusOf(r), 400) << r.substr(0, 300);
  EXPECT_EQ(BodyOf(r)["error"]["code"], "json_too_complex") << r;
  EXPECT_EQ(BodyOf(r)["error"]["message"],
            "an object in the request body has more than 1000 keys")
      << r;
  EXPECT_LT(took, bound) << "1,000 keys took " << small.count() << " ms";
  EXPECT_EQ(Sends(), 0);
}

// The same on the SQS endpoint's query protocol, whose parameters were
// each put in a tree of such objects: 20,000 took 21 s. A request may have
// 1,000 parameters; 1,000,000 are refused after a count, before any is
// decoded, with the protocol's error.
TEST_F(HostileBody, SqsRequestsOfTooManyParametersAreRefusedAtTheLimit) {
  auto body = [](int params) {
    std::string s = "Action=ListQueues&Version=2012-11-05";
    for (int i = 2; i < params; ++i) s += "&X." + std::to_string(i) + "=v";
    return s;
  };
  const auto small = Median(Form(body(1000)), [](const std::string& r) {
    EXPECT_EQ(StatusOf(r), 200) << r;
    EXPECT_NE(r.find("<ListQueuesResponse"), std::string::npos) << r;
  });
  const auto bound = Bound(small);
  auto [r, took] = Timed(Form(body(1000000)), bound);
  EXPECT_EQ(StatusOf(r), 400) << r.substr(0, 300);
  EXPECT_NE(r.find("<Code>MalformedQueryString</Code>"), std::string::npos)
      << r;
  EXPECT_NE(r.find("more than 1000 parameters"), std::string::npos) << r;
  EXPECT_LT(took, bound) << "1,000 parameters took " << small.count() << " ms";
  // 1,001 are refused as well.
  std::tie(r, took) = Timed(Form(body(1001)), std::chrono::seconds(60));
  EXPECT_EQ(StatusOf(r), 400) << r;
}

// The JSON protocol's bodies have the HTTP API's bounds, answered in the
// protocol's error shape.
TEST_F(HostileBody, SqsJsonBodiesOfTooManyKeysAreRefusedAtTheLimit) {
  auto request = [](int keys) {
    std::string b = R"({"QueueNamePrefix":"x","X":)" + WideObject(keys) + "}";
    return "POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
           "application/x-amz-json-1.0\r\nX-Amz-Target: "
           "AmazonSQS.ListQueues\r\nContent-Length: " +
           std::to_string(b.size()) + "\r\n\r\n" + b;
  };
  const auto small = Median(request(1000), [](const std::string& r) {
    EXPECT_EQ(StatusOf(r), 200) << r;
  });
  const auto bound = Bound(small);
  auto [r, took] = Timed(request(100000), bound);
  EXPECT_EQ(StatusOf(r), 400) << r.substr(0, 300);
  EXPECT_EQ(BodyOf(r)["__type"], "com.amazonaws.sqs#SerializationException")
      << r;
  EXPECT_EQ(BodyOf(r)["message"],
            "an object in the request body has more than 1000 keys")
      << r;
  EXPECT_LT(took, bound) << "1,000 keys took " << small.count() << " ms";
}

// Regression: one 16 MiB body of brackets took 645 MB to parse, six at once
// 4.2 GB, of which 3.5 GB stayed held afterwards.
TEST_F(HostileBody, ConcurrentHugeBodiesKeepMemoryBounded) {
  constexpr std::size_t kBody = 16 << 20;  // the default --max-body
  constexpr int kClients = 6;
  const long before_kb = server_->ProcStatus("VmRSS");
  std::vector<std::string> bodies;
  bodies.push_back(std::string(kBody, '['));
  std::string zeros = R"({"messages":[)";
  while (zeros.size() + 4 < kBody) zeros += "0,";
  zeros += "0]}";
  bodies.push_back(std::move(zeros));
  std::string empties = R"({"messages":[)";
  while (empties.size() + 8 < kBody) empties += "{},";
  empties += "{}]}";
  bodies.push_back(std::move(empties));
  std::vector<std::future<std::string>> replies;
  for (int i = 0; i < kClients; ++i) {
    replies.push_back(std::async(std::launch::async, [&, i] {
      return Raw(Post("/v1/queues/jobs/messages", bodies[i % bodies.size()]));
    }));
  }
  for (auto& f : replies) {
    std::string r = f.get();
    EXPECT_EQ(StatusOf(r), 400) << r.substr(0, 300);
  }
  const long peak_kb = server_->ProcStatus("VmHWM");
  // The bodies themselves must be held while they arrive (6 x 16 MiB);
  // anything a parse adds must stay within as much again.
  const long bound_kb = 2L * kClients * (kBody >> 10) + (32 << 10);
  RecordProperty("peak_growth_kb", std::to_string(peak_kb - before_kb));
  if (!Sanitized()) {
    EXPECT_LT(peak_kb - before_kb, bound_kb) << "KiB";
  }
  // And it is given back: the server does not keep its peak.
  if (!Sanitized()) {
    EXPECT_TRUE(WaitFor([&] {
      return server_->ProcStatus("VmRSS") - before_kb < (48 << 10);
    })) << server_->ProcStatus("VmRSS") - before_kb
        << " KiB still held";
  }
  EXPECT_EQ(Sends(), 0);
  // And it still serves.
  EXPECT_EQ(c_->Post("/v1/queues/jobs/messages",
                     {{"messages", {{{"payload", "after"}}}}})
                .status,
            200);
}

}  // namespace
}  // namespace sqlq::server_test
