// Long-poll claims: parked without a thread each, woken by sends, one
// waiter per message.

#include <sys/resource.h>

#include <future>
#include <set>

#include "tests/server/server_fixture.h"

namespace sqlq::server_test {
namespace {

std::string ClaimRequest(int wait_ms, int max = 1) {
  std::string body = Json{{"max", max}, {"wait_ms", wait_ms}}.dump();
  return "POST /v1/queues/jobs/claim HTTP/1.1\r\nHost: localhost\r\n"
         "Content-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

class LongPoll : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    StartServer(GetParam_args());
    c_.emplace(port());
    ASSERT_EQ(c_->Post("/v1/queues/jobs", Json::object()).status, 201);
  }
  virtual std::vector<std::string> GetParam_args() { return {}; }
  Client& c() { return *c_; }
  bool WaitingIs(int n) {
    return WaitFor(
        [&] { return Metric(c(), "sqlq_server_waiting_consumers") == n; },
        std::chrono::seconds(30));
  }
  std::optional<Client> c_;
};

TEST_F(LongPoll, ParkedClaimIsAnsweredWhenAMessageIsSent) {
  auto claim = std::async(std::launch::async, [&] {
    Client waiter(port());
    auto start = SteadyClock::now();
    auto r =
        waiter.Post("/v1/queues/jobs/claim", {{"max", 5}, {"wait_ms", 30000}});
    return std::make_pair(r, SteadyClock::now() - start);
  });
  ASSERT_TRUE(WaitingIs(1));
  ASSERT_EQ(c().Post("/v1/queues/jobs/messages",
                     {{"messages", {{{"payload", "wake up"}}}}})
                .status,
            200);
  // Answered with the message, well before its 30 s wait ran out.
  ASSERT_EQ(claim.wait_for(std::chrono::seconds(15)),
            std::future_status::ready);
  auto [r, elapsed] = claim.get();
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.json["messages"].size(), 1u);
  EXPECT_EQ(r.json["messages"][0]["payload"], "wake up");
  EXPECT_LT(elapsed, std::chrono::seconds(15));
  EXPECT_EQ(Metric(c(), "sqlq_server_waiting_consumers"), 0);
}

// A parked claim is a waiting consumer of the database too, as the server
// reports it (every 5 s while claims wait): in /metrics and the overview.
TEST_F(LongPoll, ParkedClaimsCountAmongTheDatabasesWaitingConsumers) {
  const std::string gauge = "sqlq_queue_waiting_consumers{queue=\"jobs\"}";
  EXPECT_EQ(Metric(c(), gauge), 0);
  auto claim = std::async(std::launch::async, [&] {
    Client waiter(port());
    return waiter.Post("/v1/queues/jobs/claim", {{"wait_ms", 30000}});
  });
  ASSERT_TRUE(WaitingIs(1));
  ASSERT_TRUE(WaitFor([&] { return Metric(c(), gauge) == 1; },
                      std::chrono::seconds(15)));
  Json o = c().Get("/v1/overview").json;
  EXPECT_EQ(o["waiting_consumers"], 1) << o.dump();
  ASSERT_EQ(c().Post("/v1/queues/jobs/messages",
                     {{"messages", {{{"payload", "wake up"}}}}})
                .status,
            200);
  EXPECT_EQ(claim.get().status, 200);
  ASSERT_TRUE(WaitFor([&] { return Metric(c(), gauge) == 0; },
                      std::chrono::seconds(15)));
}

TEST_F(LongPoll, ParkedClaimOnAFullQueueIsAnsweredWhenAnAckFreesAPlace) {
  ASSERT_EQ(c().Post("/v1/queues/one", {{"max_leased", 1}}).status, 201);
  ASSERT_EQ(
      c().Post("/v1/queues/one/messages",
               {{"messages", {{{"payload", "first"}}, {{"payload", "next"}}}}})
          .status,
      200);
  Response first = c().Post("/v1/queues/one/claim", {{"max", 5}});
  ASSERT_EQ(first.json["messages"].size(), 1u) << first.body;
  auto claim = std::async(std::launch::async, [&] {
    Client waiter(port());
    return waiter.Post("/v1/queues/one/claim",
                       {{"max", 5}, {"wait_ms", 30000}});
  });
  ASSERT_TRUE(WaitingIs(1));
  ASSERT_EQ(c().Post("/v1/queues/one/ack",
                     {{"receipt", first.json["messages"][0]["receipt"]}})
                .status,
            200);
  // The queue's lease is 30 s: only the ack can answer it before then.
  ASSERT_EQ(claim.wait_for(std::chrono::seconds(15)),
            std::future_status::ready);
  Response r = claim.get();
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.json["messages"].size(), 1u) << r.body;
  EXPECT_EQ(r.json["messages"][0]["payload"], "next");
}

TEST_F(LongPoll, ParkedClaimWithAnAckHasAckedBeforeItWaits) {
  ASSERT_EQ(c().Post("/v1/queues/jobs/messages",
                     {{"messages", {{{"payload", "first"}}}}})
                .status,
            200);
  auto first = c().Post("/v1/queues/jobs/claim", Json::object());
  ASSERT_EQ(first.json["messages"].size(), 1u) << first.body;
  auto claim = std::async(std::launch::async, [&] {
    Client waiter(port());
    return waiter.Post(
        "/v1/queues/jobs/claim",
        {{"ack", first.json["messages"][0]["receipt"]}, {"wait_ms", 30000}});
  });
  ASSERT_TRUE(WaitingIs(1));
  // The ack commits with the claim's first look (which may still be running
  // when the claim counts as waiting); the claim then waits on.
  ASSERT_TRUE(WaitFor(
      [&] { return c().Get("/v1/queues/jobs").json["stats"]["acks"] == 1; },
      std::chrono::seconds(30)));
  EXPECT_EQ(claim.wait_for(std::chrono::seconds(0)),
            std::future_status::timeout)
      << "the claim returned with nothing to take";
  ASSERT_EQ(c().Post("/v1/queues/jobs/messages",
                     {{"messages", {{{"payload", "second"}}}}})
                .status,
            200);
  ASSERT_EQ(claim.wait_for(std::chrono::seconds(15)),
            std::future_status::ready);
  auto r = claim.get();
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(r.json["messages"].size(), 1u);
  EXPECT_EQ(r.json["messages"][0]["payload"], "second");
}

TEST_F(LongPoll, WaitRunsOutWithAnEmptyList) {
  auto r = c().Post("/v1/queues/jobs/claim", {{"wait_ms", 200}});
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.json["messages"], Json::array());
}

TEST_F(LongPoll, DelayedMessageIsDeliveredToAParkedClaimWhenItBecomesReady) {
  ASSERT_EQ(c().Post("/v1/queues/jobs/messages",
                     {{"messages", {{{"payload", "soon"}, {"delay_ms", 300}}}}})
                .status,
            200);
  auto r = c().Post("/v1/queues/jobs/claim", {{"wait_ms", 20000}});
  ASSERT_EQ(r.status, 200);
  ASSERT_EQ(r.json["messages"].size(), 1u);
  EXPECT_EQ(r.json["messages"][0]["payload"], "soon");
}

TEST_F(LongPoll, OneSendWakesExactlyOneOfSeveralParkedClaims) {
  std::vector<std::unique_ptr<RawConn>> conns;
  for (int i = 0; i < 5; ++i) {
    conns.push_back(std::make_unique<RawConn>(port()));
    ASSERT_TRUE(conns.back()->Write(ClaimRequest(30000)));
  }
  ASSERT_TRUE(WaitingIs(5));
  double wakeups = Metric(c(), "sqlq_server_claim_wakeups_total");
  ASSERT_EQ(c().Post("/v1/queues/jobs/messages",
                     {{"messages", {{{"payload", "only one"}}}}})
                .status,
            200);
  // Wake-ups are delivered inside the send, before its reply.
  EXPECT_EQ(Metric(c(), "sqlq_server_claim_wakeups_total"), wakeups + 1);
  // Exactly one claim answers, with the message; four stay parked.
  int answered = -1;
  ASSERT_TRUE(WaitFor([&] {
    for (std::size_t i = 0; i < conns.size(); ++i) {
      pollfd p{conns[i]->fd(), POLLIN, 0};
      if (::poll(&p, 1, 0) > 0) answered = static_cast<int>(i);
    }
    return answered >= 0;
  }));
  std::string r = conns[answered]->ReadResponse();
  EXPECT_EQ(StatusOf(r), 200);
  EXPECT_EQ(BodyOf(r)["messages"][0]["payload"], "only one");
  EXPECT_EQ(Metric(c(), "sqlq_server_waiting_consumers"), 4);
}

TEST_F(LongPoll, ClaimOfAClientThatWentAwayIsReleasedAndTakesNoMessage) {
  {
    RawConn gone(port());
    ASSERT_TRUE(gone.Write(ClaimRequest(30000)));
    ASSERT_TRUE(WaitingIs(1));
  }  // closed
  ASSERT_TRUE(WaitingIs(0));
  ASSERT_EQ(c().Post("/v1/queues/jobs/messages",
                     {{"messages", {{{"payload", "for the living"}}}}})
                .status,
            200);
  auto r = c().Post("/v1/queues/jobs/claim", Json::object());
  ASSERT_EQ(r.json["messages"].size(), 1u) << r.body;
  EXPECT_EQ(r.json["messages"][0]["payload"], "for the living");
}

// A client that closes its side only (a worker that stops, cutting its
// long poll short) gets its claim's answer at once, and then the
// connection closes.
TEST_F(LongPoll, AClientThatClosesItsSideGetsTheAnswerAtOnce) {
  RawConn conn(port());
  ASSERT_TRUE(conn.Write(ClaimRequest(30000)));
  ASSERT_TRUE(WaitingIs(1));
  const auto cut = std::chrono::steady_clock::now();
  ASSERT_EQ(::shutdown(conn.fd(), SHUT_WR), 0);
  std::string r = conn.ReadResponse();
  EXPECT_EQ(StatusOf(r), 200) << r;
  EXPECT_EQ(BodyOf(r)["messages"], Json::array());
  EXPECT_LT(std::chrono::steady_clock::now() - cut, std::chrono::seconds(10));
  EXPECT_NE(r.find("Connection: close"), std::string::npos) << r;
  ASSERT_TRUE(WaitingIs(0));
}

// Regression: a client that cut its claim short as the server claimed a
// message for it lost the answer, and the message stayed leased to no one
// until its lease ran out (with max_attempts 1, a dead letter). Cut now by
// closing its side, the claim is answered with what it took: each time,
// the message is either in the answer or still ready.
TEST_F(LongPoll, AClaimCutShortAsItTakesAMessageAnswersWithIt) {
  int answered = 0, left = 0;
  for (int i = 0; i < 30; ++i) {
    RawConn conn(port());
    ASSERT_TRUE(conn.Write(ClaimRequest(30000)));
    ASSERT_TRUE(WaitingIs(1));
    // The send wakes the parked claim; the cut comes as it claims.
    ASSERT_EQ(c().Post("/v1/queues/jobs/messages",
                       {{"messages", {{{"payload", "m" + std::to_string(i)}}}}})
                  .status,
              200);
    ASSERT_EQ(::shutdown(conn.fd(), SHUT_WR), 0);
    std::string r = conn.ReadResponse();
    ASSERT_EQ(StatusOf(r), 200) << r;
    const Json got = BodyOf(r)["messages"];
    if (got.size() == 1) {
      ++answered;
      const std::string receipt = got[0]["receipt"];
      ASSERT_EQ(c().Post("/v1/queues/jobs/ack", {{"receipt", receipt}}).status,
                200);
    } else {
      ++left;
      auto stats = c().Get("/v1/queues/jobs").json["stats"];
      ASSERT_EQ(stats["leased"], 0) << stats;
      auto taken = c().Post("/v1/queues/jobs/claim", Json::object());
      ASSERT_EQ(taken.json["messages"].size(), 1u) << taken.body;
      ASSERT_EQ(c().Post("/v1/queues/jobs/ack",
                         {{"receipt", taken.json["messages"][0]["receipt"]}})
                    .status,
                200);
    }
  }
  EXPECT_EQ(answered + left, 30);
  auto stats = c().Get("/v1/queues/jobs").json["stats"];
  EXPECT_EQ(stats["ready"], 0) << stats;
  EXPECT_EQ(stats["leased"], 0) << stats;
}

TEST_F(LongPoll, KeepAliveConnectionGoesOnAfterAParkedClaimIsAnswered) {
  RawConn conn(port());
  ASSERT_TRUE(conn.Write(ClaimRequest(30000)));
  ASSERT_TRUE(WaitingIs(1));
  ASSERT_EQ(c().Post("/v1/queues/jobs/messages",
                     {{"messages", {{{"payload", "one"}}}}})
                .status,
            200);
  EXPECT_EQ(StatusOf(conn.ReadResponse()), 200);
  // The same connection serves the next requests.
  ASSERT_TRUE(conn.Write("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  EXPECT_EQ(StatusOf(conn.ReadResponse()), 200);
  ASSERT_TRUE(conn.Write(ClaimRequest(100)));
  std::string r = conn.ReadResponse();
  EXPECT_EQ(StatusOf(r), 200) << r;
  EXPECT_EQ(BodyOf(r)["messages"], Json::array());
}

// Regression: once a byte arrived behind a parked claim the server stopped
// watching its connection, so a client that pipelined a request and went
// away left a claim parked that later took a message and held it for a
// whole lease.
TEST_F(LongPoll, ClientThatPipelinesAndLeavesReleasesItsClaim) {
  {
    RawConn conn(port());
    ASSERT_TRUE(conn.Write(ClaimRequest(60000)));
    ASSERT_TRUE(WaitingIs(1));
    ASSERT_TRUE(conn.Write("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"));
    // The server read those bytes (a look at its buffers is not possible
    // from here; a second request after them shows the watch goes on).
    ASSERT_TRUE(conn.Write("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  }  // closed
  ASSERT_TRUE(WaitFor([&] {
    return Metric(c(), "sqlq_server_waiting_consumers") == 0;
  })) << "the parked claim of a closed connection stays";
  ASSERT_EQ(c().Post("/v1/queues/jobs/messages",
                     {{"messages", {{{"payload", "for the living"}}}}})
                .status,
            200);
  auto stats = c().Get("/v1/queues/jobs").json["stats"];
  EXPECT_EQ(stats["ready"], 1) << stats;
  EXPECT_EQ(stats["leased"], 0) << stats;
  auto r = c().Post("/v1/queues/jobs/claim", Json::object());
  ASSERT_EQ(r.json["messages"].size(), 1u) << r.body;
}

TEST_F(LongPoll, RequestsPipelinedBehindAParkedClaimAreAnsweredInOrder) {
  RawConn conn(port());
  ASSERT_TRUE(conn.Write(ClaimRequest(30000)));
  ASSERT_TRUE(WaitingIs(1));
  ASSERT_TRUE(
      conn.Write("GET /v1/queues/jobs HTTP/1.1\r\nHost: localhost\r\n\r\n" +
                 ClaimRequest(0)));
  ASSERT_EQ(
      c().Post("/v1/queues/jobs/messages",
               {{"messages", {{{"payload", "one"}}, {{"payload", "two"}}}}})
          .status,
      200);
  std::string first = conn.ReadResponse();
  ASSERT_EQ(StatusOf(first), 200) << first;
  EXPECT_EQ(BodyOf(first)["messages"][0]["payload"], "one") << first;
  std::string second = conn.ReadResponse();
  ASSERT_EQ(StatusOf(second), 200) << second;
  EXPECT_EQ(BodyOf(second)["name"], "jobs") << second;
  std::string third = conn.ReadResponse();
  ASSERT_EQ(StatusOf(third), 200) << third;
  EXPECT_EQ(BodyOf(third)["messages"][0]["payload"], "two") << third;
}

TEST_F(LongPoll, FloodBehindAParkedClaimAnswersItEarlyThenTheRest) {
  RawConn conn(port());
  ASSERT_TRUE(conn.Write(ClaimRequest(30000)));
  ASSERT_TRUE(WaitingIs(1));
  // More pipelined requests than the server buffers behind a waiting claim.
  std::string many;
  const std::string one = "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";
  const int n = static_cast<int>((96 << 10) / one.size());
  for (int i = 0; i < n; ++i) many += one;
  auto start = SteadyClock::now();
  ASSERT_TRUE(conn.Write(many));
  std::string first = conn.ReadResponse(std::chrono::seconds(40));
  EXPECT_EQ(StatusOf(first), 200) << first;
  EXPECT_EQ(BodyOf(first)["messages"], Json::array()) << first;
  EXPECT_LT(SteadyClock::now() - start, std::chrono::seconds(20))
      << "answered by its 30 s wait, not early";
  for (int i = 0; i < n; ++i) {
    std::string r = conn.ReadResponse();
    ASSERT_EQ(StatusOf(r), 200) << i << ": " << r;
  }
  EXPECT_EQ(Metric(c(), "sqlq_server_waiting_consumers"), 0);
}

TEST_F(LongPoll, TwoThousandParkedClaimsCostNoThreadEachAndLittleMemory) {
  constexpr int kWaiters = 2000;
  rlimit rl{};
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < 2 * kWaiters + 100) {
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, 2 * kWaiters + 100);
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  ASSERT_GE(rl.rlim_cur, static_cast<rlim_t>(kWaiters + 100))
      << "the test needs more file descriptors";
  const long threads_before = server_->ProcStatus("Threads");
  const long rss_before_kb = server_->ProcStatus("VmRSS");

  std::vector<std::unique_ptr<RawConn>> conns;
  for (int i = 0; i < kWaiters; ++i) {
    conns.push_back(std::make_unique<RawConn>(port()));
    ASSERT_TRUE(conns.back()->ok()) << i;
    ASSERT_TRUE(conns.back()->Write(ClaimRequest(60000)));
  }
  ASSERT_TRUE(WaitingIs(kWaiters));
  const long threads = server_->ProcStatus("Threads");
  const long rss_kb = server_->ProcStatus("VmRSS");
  RecordProperty("threads", std::to_string(threads));
  RecordProperty("rss_growth_kb", std::to_string(rss_kb - rss_before_kb));
  // No thread per waiter: the pools the server started with, nothing more.
  EXPECT_EQ(threads, threads_before);
  EXPECT_LT(threads, 64);
  // Bounded memory: well under 32 KiB per parked claim.
  if (!Sanitized()) {
    EXPECT_LT(rss_kb - rss_before_kb, kWaiters * 32L) << "KiB";
  }

  // 2,000 messages wake every one of them, each with its own message.
  for (int batch = 0; batch < 2; ++batch) {
    Json msgs = Json::array();
    for (int i = 0; i < kWaiters / 2; ++i) {
      msgs.push_back({{"payload", "m" + std::to_string(batch * 1000 + i)}});
    }
    ASSERT_EQ(c().Post("/v1/queues/jobs/messages", {{"messages", msgs}}).status,
              200);
  }
  std::set<std::int64_t> ids;
  for (auto& conn : conns) {
    std::string r = conn->ReadResponse(std::chrono::seconds(30));
    ASSERT_EQ(StatusOf(r), 200) << r;
    Json body = BodyOf(r);
    ASSERT_EQ(body["messages"].size(), 1u) << r;
    ids.insert(body["messages"][0]["id"].get<std::int64_t>());
  }
  EXPECT_EQ(ids.size(), static_cast<std::size_t>(kWaiters));
}

}  // namespace
}  // namespace sqlq::server_test
