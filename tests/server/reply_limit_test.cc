// Replies have a size limit (--max-reply): a claim takes fewer messages and
// says so, listings stop early and say so, payloads never grow by more than
// a third on the wire, and nothing is lost or left leased on the way.

#include <future>
#include <set>

#include "tests/server/server_fixture.h"

namespace sqlq::server_test {
namespace {

class ReplyLimit : public ServerTest {
 protected:
  void Start(std::vector<std::string> args) {
    StartServer(std::move(args));
    c_.emplace(port());
  }
  // Sends `n` messages of `size` bytes of U+0001, the character JSON
  // escapes as six bytes, `per_request` to a request (as base64, which is
  // cheaper to send).
  void SendControlCharacters(const std::string& queue, int n, std::size_t size,
                             int per_request) {
    std::string payload;
    for (std::size_t i = 0; i < size; i += 3) {
      payload += size - i >= 3 ? "AQEB" : size - i == 2 ? "AQE=" : "AQ==";
    }
    for (int sent = 0; sent < n; sent += per_request) {
      Json msgs = Json::array();
      for (int i = sent; i < std::min(n, sent + per_request); ++i) {
        msgs.push_back({{"payload_base64", payload}});
      }
      auto r =
          c_->Post("/v1/queues/" + queue + "/messages", {{"messages", msgs}});
      ASSERT_EQ(r.status, 200) << r.body.substr(0, 300);
    }
  }
  // Reads a listing page by page while its replies say "limited", each
  // page from after the last row's `cursor` field (appended to `target`);
  // returns those fields in order and counts the pages. Every reply must
  // keep to the 200,000-byte limit these tests set.
  std::vector<std::int64_t> PageThrough(const std::string& target,
                                        const std::string& list,
                                        const std::string& cursor, int& pages) {
    std::vector<std::int64_t> seen;
    std::int64_t after = 0;
    for (pages = 1; pages <= 20; ++pages) {
      auto r = c_->Get(target + std::to_string(after));
      EXPECT_EQ(r.status, 200) << r.body.substr(0, 200);
      EXPECT_LE(r.body.size(), 200000u) << target;
      for (const Json& row : r.json[list]) {
        after = row[cursor];
        seen.push_back(after);
      }
      if (!r.json.value("limited", false)) break;
    }
    return seen;
  }
  Json Stats(const std::string& queue) {
    return c_->Get("/v1/queues/" + queue).json["stats"];
  }
  std::optional<Client> c_;
};

TEST_F(ReplyLimit, ClaimTakesFewerMessagesThanMaxAndSaysSo) {
  Start({"--max-reply", "200000"});
  // Leases far longer than the test: an expired one would be handed out
  // again and no longer count as leased below.
  ASSERT_EQ(c_->Post("/v1/queues/jobs", {{"lease_ms", 3600000}}).status, 201);
  SendControlCharacters("jobs", 20, 50000, 20);
  std::set<std::int64_t> ids;
  int claims = 0;
  while (ids.size() < 20 && claims < 40) {
    ++claims;
    auto r = c_->Post("/v1/queues/jobs/claim", {{"max", 20}});
    ASSERT_EQ(r.status, 200);
    EXPECT_LE(r.body.size(), 200000u);
    const Json& msgs = r.json["messages"];
    ASSERT_FALSE(msgs.empty());
    for (const Json& m : msgs) {
      // Not sent as 300,000 bytes of \u0001 escapes: as base64.
      EXPECT_FALSE(m.contains("payload"));
      ASSERT_TRUE(m.contains("payload_base64"));
      EXPECT_EQ(m["payload_base64"].get<std::string>().size(), 66668u);
      ids.insert(m["id"].get<std::int64_t>());
    }
    const bool more = ids.size() < 20;
    EXPECT_EQ(r.json.value("limited", false), more) << r.json.dump().size();
  }
  EXPECT_EQ(ids.size(), 20u);
  EXPECT_GE(claims, 7) << "20 payloads of 66,668 bytes do not fit in 3 replies";
  // Every message was handed out once; none is leased but those claimed.
  EXPECT_EQ(Stats("jobs")["leased"], 20);
  EXPECT_EQ(Stats("jobs")["ready"], 0);
  EXPECT_EQ(Stats("jobs")["claims"], 20);
}

TEST_F(ReplyLimit, OneMessageLargerThanTheLimitStillComes) {
  Start({"--max-reply", "4096"});
  ASSERT_EQ(c_->Post("/v1/queues/jobs", Json::object()).status, 201);
  ASSERT_EQ(c_->Post("/v1/queues/jobs/messages",
                     {{"messages",
                       {{{"payload", std::string(10000, 'x')}},
                        {{"payload", "small"}}}}})
                .status,
            200);
  auto r = c_->Post("/v1/queues/jobs/claim", {{"max", 10}});
  ASSERT_EQ(r.json["messages"].size(), 1u) << r.body.substr(0, 200);
  EXPECT_EQ(r.json["messages"][0]["payload"].get<std::string>().size(), 10000u);
  EXPECT_EQ(r.json["limited"], true);
  r = c_->Post("/v1/queues/jobs/claim", {{"max", 10}});
  ASSERT_EQ(r.json["messages"].size(), 1u);
  EXPECT_EQ(r.json["messages"][0]["payload"], "small");
  EXPECT_FALSE(r.json.contains("limited"));
}

TEST_F(ReplyLimit, DeadLetterAndArchiveListingsStopEarlyAndGoOnFromTheLastId) {
  Start({"--max-reply", "200000"});
  ASSERT_EQ(
      c_->Post("/v1/queues/jobs", {{"max_attempts", 1}, {"archive", true}})
          .status,
      201);
  SendControlCharacters("jobs", 16, 30000, 16);
  auto claimed = c_->Post("/v1/queues/jobs/claim", {{"max", 16}});
  std::vector<std::string> receipts;
  while (receipts.size() < 16) {
    for (const Json& m : claimed.json["messages"]) {
      receipts.push_back(m["receipt"]);
    }
    if (receipts.size() < 16) {
      claimed = c_->Post("/v1/queues/jobs/claim", {{"max", 16}});
      ASSERT_FALSE(claimed.json["messages"].empty());
    }
  }
  for (std::size_t i = 0; i < receipts.size(); ++i) {
    if (i % 2 == 0) {
      ASSERT_EQ(c_->Post("/v1/queues/jobs/nack",
                         {{"receipt", receipts[i]}, {"error", "boom"}})
                    .json["outcome"],
                "dead");
    } else {
      ASSERT_EQ(
          c_->Post("/v1/queues/jobs/ack", {{"receipt", receipts[i]}}).status,
          200);
    }
  }
  for (std::string what : {"dead", "archive"}) {
    int pages = 0;
    auto ids = PageThrough(
        "/v1/queues/jobs/" + what + "?limit=1000&after_id=", what, "id", pages);
    EXPECT_EQ(std::set<std::int64_t>(ids.begin(), ids.end()).size(), 8u)
        << what;
    EXPECT_EQ(ids.size(), 8u) << what;
    EXPECT_GE(pages, 2) << what << ": 8 rows of 40,000 bytes in one reply";
  }
}

TEST_F(ReplyLimit, RingReadsStopEarlyAndGoOnAfterTheLastSeq) {
  Start({"--max-reply", "200000"});
  ASSERT_EQ(c_->Post("/v1/rings/viewers", {{"capacity", 100}}).status, 201);
  const std::string payload(50000, '\x01');
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(
        c_->Post("/v1/rings/viewers/groups/g", {{"payload", payload}}).status,
        200);
  }
  for (std::string order : {"newest", "oldest"}) {
    int pages = 0;
    auto seen = PageThrough(
        "/v1/rings/viewers/groups/g?limit=100&order=" + order + "&after_seq=",
        "entries", "seq", pages);
    ASSERT_EQ(seen.size(), 10u) << order;
    EXPECT_GE(pages, 3) << order;
    for (std::size_t i = 1; i < seen.size(); ++i) {
      EXPECT_EQ(seen[i], order == "newest" ? seen[i - 1] - 1 : seen[i - 1] + 1);
    }
  }
}

// Regression: a claim of 100 messages of 1 MiB of U+0001 made a 629 MB
// reply and took the server from 0.30 to 1.48 GB. Four such claims at once
// must stay within a bound set by the reply limit (16 MiB by default).
TEST_F(ReplyLimit, ConcurrentClaimsOfHugeEscapedPayloadsKeepMemoryBounded) {
  Start({});
  // Leases far longer than the test: under load its sends and claims of
  // 32 MiB can take longer than the default lease, and an expired lease
  // would no longer count as leased below.
  ASSERT_EQ(c_->Post("/v1/queues/jobs", {{"lease_ms", 3600000}}).status, 201);
  SendControlCharacters("jobs", 32, 1 << 20, 4);
  const long before_kb = server_->ProcStatus("VmRSS");
  std::vector<std::future<Response>> claims;
  for (int i = 0; i < 4; ++i) {
    claims.push_back(std::async(std::launch::async, [&] {
      Client c(port());
      return c.Post("/v1/queues/jobs/claim", {{"max", 100}});
    }));
  }
  std::size_t got = 0;
  for (auto& f : claims) {
    Response r = f.get();
    ASSERT_EQ(r.status, 200);
    EXPECT_LE(r.body.size(), 16u << 20);
    got += r.json["messages"].size();
  }
  const long peak_kb = server_->ProcStatus("VmHWM");
  RecordProperty("peak_growth_kb", std::to_string(peak_kb - before_kb));
  // Each claim holds its payloads (<= 12 MiB) and its reply (<= 16 MiB).
  if (!Sanitized()) {
    EXPECT_LT(peak_kb - before_kb, 4L * (28 << 10) + (32 << 10)) << "KiB";
  }
  EXPECT_GT(got, 0u);
  EXPECT_EQ(Stats("jobs")["leased"], static_cast<int>(got));
}

}  // namespace
}  // namespace sqlq::server_test
