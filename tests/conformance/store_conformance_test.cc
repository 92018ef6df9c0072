// What every engine does the same when stores open a database and share it
// with other stores (other processes, in production): schema versions,
// concurrent opens, wake-ups across stores, and, on the server engines,
// many stores claiming from one queue.

#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "tests/conformance/engine_fixture.h"
#include "tests/conformance/raw_db.h"

namespace sqlq::test {
namespace {

using std::chrono::seconds;
using SteadyClock = std::chrono::steady_clock;

class StoreConformance : public ::testing::TestWithParam<EngineFactory> {
 protected:
  void SetUp() override {
    SQLQ_SKIP_UNLESS_AVAILABLE(GetParam());
    db_ = GetParam().make();
  }
  std::unique_ptr<Store> OpenStore() { return OpenOrFail(db_->url()); }
  std::unique_ptr<TestDatabase> db_;
};

// The same, for what only the server engines share: many stores writing
// at once, and databases made by someone else.
class ServerStoreConformance : public StoreConformance {};

TEST_P(StoreConformance, NewerSchemaIsRefused) {
  ASSERT_TRUE(OpenStore());
  {
    RawDb raw(GetParam().name, *db_);
    ASSERT_EQ(raw.exec()("INSERT INTO sqlq_schema (version, applied_at) "
                         "SELECT 999, applied_at FROM sqlq_schema "
                         "WHERE version = 1"),
              "");
  }
  auto s = Store::Open(db_->url());
  EXPECT_CODE(s, Code::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("newer"), std::string::npos)
      << s.status().ToString();
}

TEST_P(StoreConformance, ConcurrentOpensMigrateTheSchemaOnce) {
  std::vector<std::future<Status>> opens;
  for (int i = 0; i < 8; ++i) {
    opens.push_back(std::async(std::launch::async, [this] {
      auto s = Store::Open(db_->url());
      return s.ok() ? Status::Ok() : s.status();
    }));
  }
  for (auto& f : opens) EXPECT_OK(f.get());
  RawDb raw(GetParam().name, *db_);
  // Every step recorded exactly once, however many there are.
  EXPECT_EQ(raw.Query("SELECT CASE WHEN count(*) = count(DISTINCT version) "
                      "AND count(*) = max(version) THEN 1 ELSE 0 END "
                      "FROM sqlq_schema"),
            "1");
}

// On a server, a database without sqlq's tables is what a read-only
// command finds when pointed at the wrong database: it gets kNotFound and
// creates nothing. (SQLite says the same of a missing file, in its own
// tests.)
TEST_P(ServerStoreConformance, OpeningWithoutCreateFindsNoTablesAndMakesNone) {
  EXPECT_CODE(Store::Open(db_->url(), {.create_if_missing = false}),
              Code::kNotFound);
  {
    RawDb raw(GetParam().name, *db_);
    EXPECT_EQ(
        raw.Query("SELECT count(*) FROM information_schema.tables "
                  "WHERE table_name LIKE 'sqlq%' AND table_schema = " +
                  std::string(GetParam().name == "Postgres" ? "current_schema()"
                                                            : "DATABASE()")),
        "0");
  }
  ASSERT_TRUE(OpenStore());
  EXPECT_OK(Store::Open(db_->url(), {.create_if_missing = false}));
}

// A claim waiting in one store is woken by a send from another store on
// the same database, by the engine's own notice of foreign writes (inotify,
// NOTIFY, the counters poller), not by its once-a-second safety net.
TEST_P(StoreConformance, SendFromAnotherStoreWakesAWaitingClaim) {
  auto a = OpenStore();
  auto b = OpenStore();
  ASSERT_TRUE(a && b);
  ASSERT_OK_AND_ASSIGN(WorkQueue qa, a->CreateQueue("jobs", {}));
  ASSERT_OK_AND_ASSIGN(WorkQueue qb, b->Queue("jobs"));
  a->TEST_set_poll_interval(std::chrono::hours(1));
  for (int i = 0; i < 3; ++i) {
    auto claim = std::async(std::launch::async,
                            [&] { return qa.Claim({.wait = seconds(30)}); });
    // Were the claim still looking when the message lands, it would find
    // it at once and prove nothing.
    const auto deadline = SteadyClock::now() + seconds(10);
    while (a->TEST_waiting_claims() < 1 && SteadyClock::now() < deadline) {
      std::this_thread::yield();
    }
    ASSERT_EQ(a->TEST_waiting_claims(), 1u);
    ASSERT_OK(qb.Send({.payload = "wake " + std::to_string(i)}));
    auto got = claim.get();
    ASSERT_OK(got);
    ASSERT_EQ(got->size(), 1u) << "round " << i << ": not woken";
    EXPECT_EQ((*got)[0].payload, "wake " + std::to_string(i));
    ASSERT_OK(qa.Ack((*got)[0].receipt));
  }
}

// Claims waiting in any store (process) of the database that reports
// them are counted by every store: each reports its own every 5 s while
// claims wait; a report counts for 15 s by the database's clock.
TEST_P(StoreConformance, WaitingClaimsOfEveryStoreAreCounted) {
  using Counts = std::map<std::string, std::int64_t>;
  auto open = [&] {
    auto s = Store::Open(db_->url(), {.report_waiting = true});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  };
  auto a = open();
  auto b = open();
  ASSERT_TRUE(a && b);
  ASSERT_OK_AND_ASSIGN(WorkQueue jobs, a->CreateQueue("jobs", {}));
  ASSERT_OK(a->CreateQueue("other", {}).status());
  ASSERT_OK_AND_ASSIGN(Counts none, a->WaitingConsumers());
  EXPECT_TRUE(none.empty());
  // Until `want` is what `a` reads, or 20 s (four reports) have passed.
  auto reads = [&](const Counts& want) {
    const auto deadline = SteadyClock::now() + seconds(20);
    Result<Counts> got = Counts();
    while (SteadyClock::now() < deadline) {
      got = a->WaitingConsumers();
      if (got.ok() && *got == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::string seen;
    if (!got.ok()) seen = got.status().ToString();
    for (const auto& [name, n] : got.ok() ? *got : Counts()) {
      seen += name + "=" + std::to_string(n) + " ";
    }
    ADD_FAILURE() << "waiting claims never became what was expected: " << seen;
    return false;
  };
  ASSERT_OK_AND_ASSIGN(WorkQueue bjobs, b->Queue("jobs"));
  ASSERT_OK_AND_ASSIGN(WorkQueue bother, b->Queue("other"));
  auto first = std::async(std::launch::async,
                          [&] { return bjobs.Claim({.wait = seconds(60)}); });
  auto second = std::async(std::launch::async,
                           [&] { return bjobs.Claim({.wait = seconds(60)}); });
  auto third = std::async(std::launch::async,
                          [&] { return bother.Claim({.wait = seconds(60)}); });
  ASSERT_TRUE(reads({{"jobs", 2}, {"other", 1}}));

  // A process that died left rows: the fresh one counts, the old one not.
  const std::int64_t now_us =
      Us(std::chrono::time_point_cast<std::chrono::microseconds>(
          std::chrono::system_clock::now()));
  const std::string jobs_id =
      RawDb(GetParam().name, *db_)
          .Query("SELECT id FROM sqlq_queues WHERE name = 'jobs'");
  {
    RawDb raw(GetParam().name, *db_);
    for (auto [process, age] : {std::pair{"died-now", 13},
                                {"died-long-ago", 20},
                                {"died-hours-ago", 7200}}) {
      ASSERT_EQ(raw.exec()(
                    "INSERT INTO sqlq_waiting (process, queue_id, waiting, "
                    "reported_us) VALUES ('" +
                    std::string(process) + "', " + jobs_id + ", 5, " +
                    std::to_string(now_us - age * std::int64_t{1000000}) + ")"),
                "");
    }
  }
  ASSERT_OK_AND_ASSIGN(Counts with_dead, a->WaitingConsumers());
  EXPECT_EQ(with_dead, (Counts{{"jobs", 7}, {"other", 1}}));

  // Claims that end stop counting at the next report; so does the dead
  // process's row once 15 s have passed since its report (2 s from now).
  ASSERT_OK(jobs.Send({.payload = "one"}));
  ASSERT_OK(jobs.Send({.payload = "two"}));
  ASSERT_OK_AND_ASSIGN(auto got, first.get());
  ASSERT_OK_AND_ASSIGN(auto got2, second.get());
  EXPECT_EQ(got.size() + got2.size(), 2u);
  ASSERT_TRUE(reads({{"other", 1}}));
  // Rows a minute old are deleted by the reports.
  EXPECT_EQ(RawDb(GetParam().name, *db_)
                .Query("SELECT count(*) FROM sqlq_waiting WHERE process = "
                       "'died-hours-ago'"),
            "0");
  // A store that closes clears its rows at once (rather than at its next
  // report, up to 5 s later).
  ASSERT_OK_AND_ASSIGN(WorkQueue other, a->Queue("other"));
  ASSERT_OK(other.Send({.payload = "three"}));
  ASSERT_OK_AND_ASSIGN(auto got3, third.get());
  EXPECT_EQ(got3.size(), 1u);
  b.reset();
  ASSERT_OK_AND_ASSIGN(Counts after, a->WaitingConsumers());
  EXPECT_TRUE(after.empty());
}

// Many stores (processes) claim from one queue at once: concurrent
// transactions that compete for the same rows. No message goes to two
// consumers, none is lost, and no lock wait or deadlock reaches a caller.
TEST_P(ServerStoreConformance, SixtyFourConcurrentConsumersNeverShareAMessage) {
  constexpr int kStores = 16, kThreadsPerStore = 4, kMessages = 2000;
  auto producer = OpenStore();
  ASSERT_TRUE(producer);
  ASSERT_OK_AND_ASSIGN(WorkQueue q,
                       producer->CreateQueue("jobs", {.lease = seconds(600)}));
  std::vector<Message> batch;
  for (int i = 0; i < kMessages; ++i) {
    batch.push_back({.payload = std::to_string(i), .priority = i % 3});
  }
  ASSERT_OK(q.SendBatch(batch));
  std::vector<std::unique_ptr<Store>> stores;
  for (int i = 0; i < kStores; ++i) {
    stores.push_back(OpenStore());
    ASSERT_TRUE(stores.back());
  }
  std::mutex mu;
  std::multiset<std::int64_t> seen;
  std::vector<std::future<Status>> consumers;
  for (int s = 0; s < kStores; ++s) {
    for (int t = 0; t < kThreadsPerStore; ++t) {
      consumers.push_back(std::async(std::launch::async, [&, s]() -> Status {
        auto handle = stores[s]->Queue("jobs");
        if (!handle.ok()) return handle.status();
        for (;;) {
          auto got = handle->Claim({.max = 3});
          if (!got.ok()) return got.status();
          if (got->empty()) return Status::Ok();
          for (const ClaimedMessage& m : *got) {
            {
              std::lock_guard<std::mutex> lock(mu);
              seen.insert(m.id);
            }
            Status acked = handle->Ack(m.receipt);
            if (!acked.ok()) return acked;
          }
        }
      }));
    }
  }
  for (auto& f : consumers) EXPECT_OK(f.get());
  EXPECT_EQ(seen.size(), std::size_t{kMessages});
  EXPECT_EQ(std::set<std::int64_t>(seen.begin(), seen.end()).size(),
            std::size_t{kMessages})
      << "a message was handed to two consumers";
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.ready + st.leased, 0);
  EXPECT_EQ(st.claims, kMessages);
  EXPECT_EQ(st.acks, kMessages);
}

INSTANTIATE_TEST_SUITE_P(Engines, StoreConformance,
                         ::testing::ValuesIn(Engines()), EngineName);
INSTANTIATE_TEST_SUITE_P(Engines, ServerStoreConformance,
                         ::testing::ValuesIn(ServerEngines()), EngineName);

}  // namespace
}  // namespace sqlq::test
