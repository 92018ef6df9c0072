// The dashboard's view of the store (server/overview.h) over a real SQLite
// store with a steady clock the test moves: pictures shared while fresh,
// rates between pictures, and each queue's history, step by step; and
// GET /v1/overview and /history through Api::Handle, with what each token
// may see and do.

#include "server/overview.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/api.h"
#include "server/auth.h"
#include "sqlq/store.h"
#include "tests/support/test_util.h"

namespace sqlq::server {
namespace {

using std::chrono::seconds;
using test::TempDir;
using Json = nlohmann::json;

class OverviewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = Store::Open("sqlite:" + (dir_.path() / "q.db").string());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  Overview::Options Moved(std::size_t points = 360) {
    return {.fresh = seconds(1),
            .step = seconds(10),
            .points = points,
            .now = [this] { return now_; }};
  }
  void Send(WorkQueue& q, int n) {
    ASSERT_OK(q.SendBatch(std::vector<Message>(n, Message{.payload = "m"})));
  }

  TempDir dir_;
  std::unique_ptr<Store> store_;
  std::chrono::steady_clock::time_point now_ =
      std::chrono::steady_clock::time_point() + std::chrono::hours(1);
};

TEST_F(OverviewTest, HistoryKeepsEachStepsDepthAndRates) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  Overview ov(*store_, Moved(/*points=*/3));
  Send(q, 10);
  ASSERT_OK(ov.Sample());
  std::vector<HistoryPoint> h = ov.History("jobs");
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].ready, 10);
  EXPECT_EQ(h[0].rates[0], 0.0);  // nothing to count from yet

  Send(q, 20);
  ASSERT_OK_AND_ASSIGN(auto claimed, q.Claim({.max = 5}));
  ASSERT_EQ(claimed.size(), 5u);
  ASSERT_OK(q.Ack(claimed[0].receipt));
  now_ += seconds(10);
  ASSERT_OK(ov.Sample());
  h = ov.History("jobs");
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[1].ready, 25);
  EXPECT_EQ(h[1].leased, 4);
  EXPECT_DOUBLE_EQ(h[1].rates[0], 2.0);  // 20 sends in 10 s
  EXPECT_DOUBLE_EQ(h[1].rates[1], 0.5);  // 5 claims
  EXPECT_DOUBLE_EQ(h[1].rates[2], 0.1);  // 1 ack
  EXPECT_GE(h[1].at, h[0].at);

  // An hour is `points` steps: the oldest go.
  for (int i = 0; i < 3; ++i) {
    now_ += seconds(10);
    ASSERT_OK(ov.Sample());
  }
  h = ov.History("jobs");
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h.back().rates[0], 0.0);

  // A queue dropped has no history; made again, it starts afresh.
  ASSERT_OK(store_->DropQueue("jobs"));
  ASSERT_OK(ov.Sample());
  EXPECT_TRUE(ov.History("jobs").empty());
  ASSERT_OK_AND_ASSIGN(WorkQueue again, store_->CreateQueue("jobs", {}));
  Send(again, 3);
  now_ += seconds(10);
  ASSERT_OK(ov.Sample());
  h = ov.History("jobs");
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].ready, 3);
}

TEST_F(OverviewTest, ManyQueuesShareACapOnTheHistorysPoints) {
  std::vector<WorkQueue> queues;
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK_AND_ASSIGN(WorkQueue q,
                         store_->CreateQueue("q" + std::to_string(i), {}));
    queues.push_back(std::move(q));
  }
  Overview::Options o = Moved(/*points=*/10);
  o.max_points = 12;  // 3 a queue
  Overview ov(*store_, o);
  for (int i = 0; i < 6; ++i) {
    Send(queues[0], 1);
    now_ += seconds(10);
    ASSERT_OK(ov.Sample());
  }
  for (int i = 0; i < 4; ++i) {
    std::vector<HistoryPoint> h = ov.History("q" + std::to_string(i));
    ASSERT_EQ(h.size(), 3u) << i;
  }
  // The newest three: 4, 5 and 6 messages.
  std::vector<HistoryPoint> h = ov.History("q0");
  EXPECT_EQ(h[0].ready, 4);
  EXPECT_EQ(h[2].ready, 6);
  // With fewer queues, each keeps more again (up to `points`).
  ASSERT_OK(store_->DropQueue("q1"));
  ASSERT_OK(store_->DropQueue("q2"));
  ASSERT_OK(store_->DropQueue("q3"));
  for (int i = 0; i < 10; ++i) {
    now_ += seconds(10);
    ASSERT_OK(ov.Sample());
  }
  EXPECT_EQ(ov.History("q0").size(), 10u);
}

TEST_F(OverviewTest, PicturesAreSharedWhileFreshAndRatesCountBetweenThem) {
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store_->CreateQueue("jobs", {}));
  ASSERT_OK(store_->CreateRing("views", {}).status());
  Overview ov(*store_, Moved());
  ASSERT_OK_AND_ASSIGN(auto first, ov.Latest());
  ASSERT_EQ(first->infos.size(), 1u);
  EXPECT_EQ(first->infos[0].name, "jobs");
  ASSERT_EQ(first->figures.rings.size(), 1u);
  Send(q, 8);
  // Within a second: the same picture, whoever asks.
  now_ += std::chrono::milliseconds(900);
  ASSERT_OK_AND_ASSIGN(auto same, ov.Latest());
  EXPECT_EQ(same.get(), first.get());
  EXPECT_EQ(same->figures.queues[0].ready, 0);
  // Then a new one, its rates since the last: 8 sends in 2 s.
  now_ += std::chrono::milliseconds(1100);
  ASSERT_OK_AND_ASSIGN(auto next, ov.Latest());
  EXPECT_NE(next.get(), first.get());
  EXPECT_EQ(next->figures.queues[0].ready, 8);
  EXPECT_DOUBLE_EQ(next->rates[0][0], 4.0);
}

// ---- through Api::Handle ---------------------------------------------------

class OverviewRoutes : public OverviewTest {
 protected:
  Api MakeApi(const Auth& auth) {
    return Api(*store_, limits_, auth, metrics_,
               {.read = [] { return Metrics::Gauges{.waiting_consumers = 3}; },
                .shutting_down = [] { return false; }});
  }
  Limits limits_;
  Metrics metrics_;
};

TEST_F(OverviewRoutes, ShowsWhatTheTokenMaySeeAndWhatItMayDo) {
  const std::string path = (dir_.path() / "tokens").string();
  std::ofstream(path) << "worker-token claim:jobs\nboss-token admin:*\n";
  auto auth = Auth::Load(path);
  ASSERT_TRUE(auth.ok());
  Api api = MakeApi(*auth);
  for (const char* name : {"jobs", "billing"}) {
    ASSERT_EQ(api.Handle({"POST", fmt::format("/v1/queues/{}", name),
                          "Bearer boss-token", "{}"})
                  .reply.status,
              201u);
  }
  ASSERT_EQ(api.Handle({"POST", "/v1/rings/views", "Bearer boss-token", "{}"})
                .reply.status,
            201u);
  EXPECT_EQ(api.Handle({"GET", "/v1/overview", "", ""}).reply.status, 401u);

  Outcome boss = api.Handle({"GET", "/v1/overview", "Bearer boss-token", ""});
  ASSERT_EQ(boss.reply.status, 200u);
  Json all = Json::parse(boss.reply.Body());
  ASSERT_EQ(all["queues"].size(), 2u);
  EXPECT_EQ(all["queues"][0]["name"], "billing");  // by name
  EXPECT_EQ(all["queues"][0]["can"], Json({"send", "claim", "admin"}));
  EXPECT_EQ(all["rings"].size(), 1u);
  EXPECT_EQ(all["metrics"], true);
  EXPECT_EQ(all["server"]["waiting_consumers"], 3);

  Outcome worker =
      api.Handle({"GET", "/v1/overview", "Bearer worker-token", ""});
  ASSERT_EQ(worker.reply.status, 200u);
  Json mine = Json::parse(worker.reply.Body());
  ASSERT_EQ(mine["queues"].size(), 1u);
  EXPECT_EQ(mine["queues"][0]["name"], "jobs");
  EXPECT_EQ(mine["queues"][0]["can"], Json({"claim"}));
  EXPECT_TRUE(mine["rings"].empty());
  EXPECT_EQ(mine["metrics"], false);
  EXPECT_TRUE(mine["server"].is_null());  // the server's figures need metrics

  // History: for whoever sees the queue.
  Outcome history =
      api.Handle({"GET", "/v1/queues/jobs/history", "Bearer worker-token", ""});
  ASSERT_EQ(history.reply.status, 200u);
  EXPECT_EQ(Json::parse(history.reply.Body())["step_s"], 10.0);
  EXPECT_EQ(api.Handle({"GET", "/v1/queues/billing/history",
                        "Bearer worker-token", ""})
                .reply.status,
            403u);
  EXPECT_EQ(
      api.Handle({"GET", "/v1/queues/nope/history", "Bearer boss-token", ""})
          .reply.status,
      404u);
}

}  // namespace
}  // namespace sqlq::server
