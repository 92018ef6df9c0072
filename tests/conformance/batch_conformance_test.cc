// Conformance of batches (docs/semantics.md, "Batches"): members in any
// queues sent under one id with a callback that is ready, once, when every
// member has completed or died, and carries the counts (completed, dead,
// cancelled); the batch's status by id; a cancel of its pending members.
// Every engine runs it unchanged, on a ManualClock.

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "sqlq/batch.h"
#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "sqlq/worker.h"
#include "tests/conformance/engine_fixture.h"
#include "tests/conformance/raw_db.h"

namespace sqlq::test {
namespace {

using std::chrono::hours;
using std::chrono::seconds;

class BatchConformance : public EngineTest {
 protected:
  WorkQueue MakeQueue(const std::string& name, const QueueOptions& o = {}) {
    auto q = store_->CreateQueue(name, o);
    EXPECT_TRUE(q.ok()) << q.status().ToString();
    return std::move(*q);
  }

  // A batch of `n` members in `queue` (payloads "0", "1", ...) with its
  // callback in "done".
  BatchSpec Spec(const std::string& id, const std::string& queue, int n) {
    BatchSpec spec{.id = id, .callback = {"done", {.payload = "callback"}}};
    for (int i = 0; i < n; ++i) {
      spec.members.push_back({queue, {.payload = std::to_string(i)}});
    }
    return spec;
  }

  BatchCounts CountsOf(const std::string& id) {
    auto st = store_->GetBatch(id);
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    return st.ok() ? st->counts : BatchCounts{};
  }
};

TEST_P(BatchConformance, TheCallbackComesOnceWhenEveryMemberHasEnded) {
  WorkQueue images = MakeQueue("images", {.max_attempts = 1});
  WorkQueue mail = MakeQueue("mail");
  WorkQueue done = MakeQueue("done");
  BatchSpec spec{.id = "album-7",
                 .members = {{"images", {.payload = "a.png"}},
                             {"images", {.payload = "b.png"}},
                             {"mail", {.payload = "notice"}},
                             {"mail", {.payload = "digest"}},
                             {"mail", {.payload = "summary"}}},
                 .callback = {"done",
                              {.payload = "album ready",
                               .headers = {{"album", "7"}},
                               .kind = "album.done"}}};
  ASSERT_OK_AND_ASSIGN(BatchSent sent, store_->CreateBatch(spec));
  EXPECT_EQ(sent.id, "album-7");
  ASSERT_EQ(sent.members.size(), 5u);

  ASSERT_OK_AND_ASSIGN(BatchStatus st, store_->GetBatch("album-7"));
  EXPECT_EQ(st.counts, (BatchCounts{.total = 5}));
  EXPECT_EQ(st.counts.pending(), 5);
  EXPECT_FALSE(st.done);
  EXPECT_EQ(st.callback_queue, "done");
  EXPECT_EQ(st.callback_id, sent.callback_id);
  EXPECT_EQ(st.queues, (std::vector<std::string>{"images", "mail"}));
  EXPECT_FALSE(st.done_at);
  // The callback waits, and says whose callback it is; a member says its
  // batch.
  ASSERT_OK_AND_ASSIGN(MessageInfo cb, done.Get(sent.callback_id));
  EXPECT_EQ(cb.state, MessageState::kWaiting);
  ASSERT_TRUE(cb.batch);
  EXPECT_EQ(cb.batch->id, "album-7");
  EXPECT_TRUE(cb.batch->callback);
  EXPECT_FALSE(cb.batch->counts);
  EXPECT_EQ(cb.headers, (Headers{{"album", "7"}}));
  EXPECT_TRUE(NothingReady(done));

  // a.png completes; b.png dies (one attempt); "notice" is cancelled;
  // "digest" and "summary" complete in one batch of acks.
  ClaimedMessage a = ClaimOne(images);
  ASSERT_TRUE(a.batch);
  EXPECT_EQ(a.batch->id, "album-7");
  EXPECT_FALSE(a.batch->callback);
  EXPECT_TRUE(a.headers.empty());
  ASSERT_OK(images.Ack(a.receipt));
  ClaimedMessage b = ClaimOne(images);
  ASSERT_OK(images.Nack(b.receipt, {.error = "corrupt"}));
  EXPECT_EQ(CountsOf("album-7"),
            (BatchCounts{.total = 5, .completed = 1, .dead = 1}));
  ASSERT_OK_AND_ASSIGN(std::int64_t n,
                       mail.Cancel({.ids = std::vector{sent.members[2]}}));
  EXPECT_EQ(n, 1);
  EXPECT_TRUE(NothingReady(done));
  ASSERT_OK_AND_ASSIGN(auto two, mail.Claim({.max = 10}));
  ASSERT_EQ(two.size(), 2u);
  ASSERT_OK_AND_ASSIGN(auto acked, mail.AckBatch(std::vector<std::string>{
                                       two[0].receipt, two[1].receipt}));
  EXPECT_OK(acked[0]);
  EXPECT_OK(acked[1]);

  ASSERT_OK_AND_ASSIGN(st, store_->GetBatch("album-7"));
  const BatchCounts want{.total = 5, .completed = 3, .dead = 1, .cancelled = 1};
  EXPECT_EQ(st.counts, want);
  EXPECT_EQ(st.counts.pending(), 0);
  EXPECT_TRUE(st.done);
  EXPECT_TRUE(st.done_at);
  EXPECT_FALSE(st.cancelled_at);
  ASSERT_TRUE(st.expires_at);
  EXPECT_EQ(*st.expires_at - *st.done_at, hours(24 * 7));

  ASSERT_OK_AND_ASSIGN(auto got, done.Claim({.max = 10}));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, sent.callback_id);
  EXPECT_EQ(got[0].payload, "album ready");
  EXPECT_EQ(got[0].kind, "album.done");
  EXPECT_EQ(got[0].headers, (Headers{{"album", "7"}}));
  ASSERT_TRUE(got[0].batch);
  EXPECT_EQ(got[0].batch->id, "album-7");
  EXPECT_TRUE(got[0].batch->callback);
  ASSERT_TRUE(got[0].batch->counts);
  EXPECT_EQ(*got[0].batch->counts, want);
  ASSERT_OK(done.Ack(got[0].receipt));
  EXPECT_EQ(Count(done), 0);
  // Still readable after the callback's ack.
  EXPECT_EQ(CountsOf("album-7"), want);
}

// Two processes ack the members at the same time: the callback is
// released once, with every member counted.
TEST_P(BatchConformance, ConcurrentAcksInTwoProcessesCountEveryMemberOnce) {
  WorkQueue jobs = MakeQueue("jobs");
  WorkQueue done = MakeQueue("done");
  constexpr int kMembers = 60;
  ASSERT_OK_AND_ASSIGN(BatchSent sent,
                       store_->CreateBatch(Spec("race", "jobs", kMembers)));
  ASSERT_OK_AND_ASSIGN(auto claimed, jobs.Claim({.max = kMembers}));
  ASSERT_EQ(claimed.size(), static_cast<std::size_t>(kMembers));
  std::vector<std::string> mine, theirs;
  for (std::size_t i = 0; i < claimed.size(); ++i) {
    (i % 2 == 0 ? mine : theirs).push_back(claimed[i].receipt);
  }
  std::unique_ptr<Store> other = OtherStore();
  ASSERT_NE(other, nullptr);
  ASSERT_OK_AND_ASSIGN(WorkQueue jobs2, other->Queue("jobs"));
  std::atomic<int> failures = 0;
  auto ack_all = [&](WorkQueue q, const std::vector<std::string>& rs) {
    for (const std::string& r : rs) {
      if (!q.Ack(r).ok()) ++failures;
    }
  };
  std::thread t1(ack_all, jobs, mine);
  std::thread t2(ack_all, jobs2, theirs);
  t1.join();
  t2.join();
  EXPECT_EQ(failures, 0);
  const BatchCounts want{.total = kMembers, .completed = kMembers};
  EXPECT_EQ(CountsOf("race"), want);
  ASSERT_OK_AND_ASSIGN(auto got, done.Claim({.max = 10}));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, sent.callback_id);
  EXPECT_EQ(got[0].attempt, 1);
  ASSERT_TRUE(got[0].batch && got[0].batch->counts);
  EXPECT_EQ(*got[0].batch->counts, want);
  ASSERT_OK(done.Ack(got[0].receipt));
  EXPECT_EQ(Count(done), 0);
}

// The same race through workers that ack each job with their next claim.
TEST_P(BatchConformance, WorkersAckingWithTheirNextClaimCountEveryMember) {
  WorkQueue jobs = MakeQueue("jobs");
  WorkQueue done = MakeQueue("done");
  constexpr int kMembers = 30;
  ASSERT_OK(store_->CreateBatch(Spec("workers", "jobs", kMembers)));
  std::unique_ptr<Store> other = OtherStore();
  ASSERT_NE(other, nullptr);
  ASSERT_OK_AND_ASSIGN(WorkQueue jobs2, other->Queue("jobs"));
  std::atomic<int> ran = 0;
  auto work = [&](WorkQueue q) {
    Worker w(q, {.prefetch = 1});
    while (ran < kMembers) {
      auto m = w.Next(std::chrono::milliseconds(50));
      if (!m.ok() || !m->has_value()) continue;
      ++ran;
      (void)w.Done(**m);
    }
    (void)w.Close();
  };
  std::thread t1(work, jobs);
  std::thread t2(work, jobs2);
  t1.join();
  t2.join();
  EXPECT_EQ(ran, kMembers);
  const BatchCounts want{.total = kMembers, .completed = kMembers};
  EXPECT_EQ(CountsOf("workers"), want);
  ASSERT_OK_AND_ASSIGN(auto got, done.Claim({.max = 10}));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].batch && got[0].batch->counts);
  EXPECT_EQ(*got[0].batch->counts, want);
}

TEST_P(BatchConformance, ACancelEndsThePendingMembersAndReleasesTheCallback) {
  WorkQueue jobs = MakeQueue("jobs");
  WorkQueue done = MakeQueue("done");
  ASSERT_OK_AND_ASSIGN(BatchSent sent,
                       store_->CreateBatch(Spec("cancel-me", "jobs", 4)));
  ASSERT_OK_AND_ASSIGN(auto two, jobs.Claim({.max = 2}));
  ASSERT_EQ(two.size(), 2u);
  ASSERT_OK(jobs.Ack(two[0].receipt));  // one completed, one leased
  ASSERT_OK_AND_ASSIGN(BatchStatus st, store_->CancelBatch("cancel-me"));
  const BatchCounts want{.total = 4, .completed = 1, .cancelled = 3};
  EXPECT_EQ(st.counts, want);
  EXPECT_TRUE(st.done);
  EXPECT_TRUE(st.cancelled_at);
  // The leased one's lease ended with it.
  EXPECT_CODE(jobs.Ack(two[1].receipt), Code::kNotFound);
  for (int i = 1; i < 4; ++i) {
    ASSERT_OK_AND_ASSIGN(MessageInfo m, jobs.Get(sent.members[i]));
    EXPECT_EQ(m.state, MessageState::kDead);
    EXPECT_EQ(m.last_error, "cancelled: batch cancel-me was cancelled");
  }
  EXPECT_TRUE(NothingReady(jobs));
  ASSERT_OK_AND_ASSIGN(auto got, done.Claim({.max = 10}));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].batch && got[0].batch->counts);
  EXPECT_EQ(*got[0].batch->counts, want);
  // A second cancel changes nothing.
  ASSERT_OK_AND_ASSIGN(BatchStatus again, store_->CancelBatch("cancel-me"));
  EXPECT_EQ(again.counts, want);
  EXPECT_EQ(again.cancelled_at, st.cancelled_at);
  EXPECT_CODE(store_->CancelBatch("no-such-batch"), Code::kNotFound);
}

// A cancel in one process while another acks the members: each member is
// counted once, as completed or as cancelled, and the callback comes once
// with counts that add up.
TEST_P(BatchConformance, ACancelRacingAcksCountsEachMemberOnce) {
  WorkQueue jobs = MakeQueue("jobs");
  WorkQueue done = MakeQueue("done");
  constexpr int kMembers = 40;
  ASSERT_OK(store_->CreateBatch(Spec("race", "jobs", kMembers)));
  ASSERT_OK_AND_ASSIGN(auto claimed, jobs.Claim({.max = kMembers}));
  ASSERT_EQ(claimed.size(), static_cast<std::size_t>(kMembers));
  std::unique_ptr<Store> other = OtherStore();
  ASSERT_NE(other, nullptr);
  std::atomic<int> acked = 0;
  std::thread acker([&] {
    for (const ClaimedMessage& m : claimed) {
      if (jobs.Ack(m.receipt).ok()) ++acked;
    }
  });
  auto cancelled = other->CancelBatch("race");
  acker.join();
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  const BatchCounts counts = CountsOf("race");
  EXPECT_EQ(counts.completed, acked.load());
  EXPECT_EQ(counts.completed + counts.cancelled, kMembers);
  EXPECT_EQ(counts.dead, 0);
  EXPECT_EQ(Count(jobs, {.state = MessageState::kDead}), counts.cancelled);
  ASSERT_OK_AND_ASSIGN(auto got, done.Claim({.max = 10}));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_TRUE(got[0].batch && got[0].batch->counts);
  EXPECT_EQ(*got[0].batch->counts, counts);
}

// Members that depend on each other, one whose dependency is dead at the
// send (cancelled then, and counted so), and a member deleted by hand.
TEST_P(BatchConformance, MembersMayDependOnOthersAndDeletedOnesCountCancelled) {
  WorkQueue jobs = MakeQueue("jobs", {.max_attempts = 1});
  WorkQueue done = MakeQueue("done");
  ASSERT_OK_AND_ASSIGN(SendResult doomed, jobs.Send({.payload = "doomed"}));
  ClaimedMessage d = ClaimOne(jobs);
  ASSERT_OK(jobs.Nack(d.receipt, {.error = "boom"}));
  BatchSpec spec{
      .id = "graph",
      .members = {{"jobs", {.payload = "first"}},
                  {"jobs", {.payload = "second", .depends_on_batch = {0}}},
                  {"jobs", {.payload = "orphan", .depends_on = {doomed.id}}},
                  {"jobs", {.payload = "deleted"}}},
      .callback = {"done", {.payload = "cb"}}};
  ASSERT_OK_AND_ASSIGN(BatchSent sent, store_->CreateBatch(spec));
  EXPECT_EQ(CountsOf("graph"), (BatchCounts{.total = 4, .cancelled = 1}));
  ASSERT_OK_AND_ASSIGN(std::int64_t deleted,
                       jobs.Delete({.ids = std::vector{sent.members[3]}}));
  EXPECT_EQ(deleted, 1);
  EXPECT_EQ(CountsOf("graph"), (BatchCounts{.total = 4, .cancelled = 2}));
  ClaimedMessage first = ClaimOne(jobs);
  EXPECT_EQ(first.payload, "first");
  ASSERT_OK(jobs.Ack(first.receipt));
  EXPECT_TRUE(NothingReady(done));
  ClaimedMessage second = ClaimOne(jobs);
  EXPECT_EQ(second.payload, "second");
  ASSERT_OK(jobs.Ack(second.receipt));
  const BatchCounts want{.total = 4, .completed = 2, .cancelled = 2};
  ClaimedMessage cb = ClaimOne(done);
  ASSERT_TRUE(cb.batch && cb.batch->counts);
  EXPECT_EQ(*cb.batch->counts, want);
}

TEST_P(BatchConformance, AMemberCancelledAtTheSendLeavesTheBatchDoneAtOnce) {
  WorkQueue jobs = MakeQueue("jobs", {.max_attempts = 1});
  WorkQueue done = MakeQueue("done");
  ASSERT_OK_AND_ASSIGN(SendResult doomed, jobs.Send({.payload = "doomed"}));
  ClaimedMessage d = ClaimOne(jobs);
  ASSERT_OK(jobs.Nack(d.receipt, {.error = "boom"}));
  BatchSpec spec{
      .id = "stillborn",
      .members = {{"jobs", {.payload = "x", .depends_on = {doomed.id}}}},
      .callback = {"done", {.payload = "cb"}}};
  ASSERT_OK(store_->CreateBatch(spec));
  ASSERT_OK_AND_ASSIGN(BatchStatus st, store_->GetBatch("stillborn"));
  EXPECT_TRUE(st.done);
  EXPECT_EQ(st.counts, (BatchCounts{.total = 1, .cancelled = 1}));
  ClaimedMessage cb = ClaimOne(done);
  ASSERT_TRUE(cb.batch && cb.batch->counts);
  EXPECT_EQ(*cb.batch->counts, st.counts);
}

// A send refused stores nothing of the batch: not its members, not its
// callback, not its id.
TEST_P(BatchConformance, RefusedSendsStoreNothing) {
  WorkQueue jobs = MakeQueue("jobs");
  WorkQueue done = MakeQueue("done");
  ASSERT_OK(store_->CreateBatch(Spec("taken", "jobs", 2)));
  // The id is taken: the second send stores none of its members.
  EXPECT_CODE(store_->CreateBatch(Spec("taken", "jobs", 3)),
              Code::kAlreadyExists);
  EXPECT_EQ(Count(jobs), 2);
  EXPECT_EQ(Count(done), 1);
  EXPECT_EQ(CountsOf("taken").total, 2);

  BatchSpec missing = Spec("missing", "jobs", 2);
  missing.callback.queue = "no-such-queue";
  EXPECT_CODE(store_->CreateBatch(missing), Code::kNotFound);
  BatchSpec bad = Spec("bad", "jobs", 2);
  bad.members[0].message.depends_on_batch = {1};
  EXPECT_CODE(store_->CreateBatch(bad), Code::kInvalidArgument);
  BatchSpec dedup = Spec("dedup", "jobs", 1);
  dedup.members[0].message.dedup_key = "k";
  EXPECT_CODE(store_->CreateBatch(dedup), Code::kInvalidArgument);
  BatchSpec delayed = Spec("delayed", "jobs", 1);
  delayed.callback.message.delay = seconds(5);
  EXPECT_CODE(store_->CreateBatch(delayed), Code::kInvalidArgument);
  BatchSpec reserved = Spec("reserved", "jobs", 1);
  reserved.members[0].message.headers["sqlq:batch"] = "other";
  EXPECT_CODE(store_->CreateBatch(reserved), Code::kInvalidArgument);
  EXPECT_CODE(store_->CreateBatch(Spec("white space", "jobs", 1)),
              Code::kInvalidArgument);
  EXPECT_CODE(store_->CreateBatch(Spec("empty", "jobs", 0)),
              Code::kInvalidArgument);
  BatchSpec brief = Spec("brief", "jobs", 1);
  brief.retention = std::chrono::milliseconds(10);
  EXPECT_CODE(store_->CreateBatch(brief), Code::kInvalidArgument);
  EXPECT_EQ(Count(jobs), 2);
  EXPECT_EQ(Count(done), 1);
  for (const char* id : {"missing", "bad", "dedup", "delayed", "brief"}) {
    SCOPED_TRACE(id);
    EXPECT_CODE(store_->GetBatch(id), Code::kNotFound);
  }
  EXPECT_CODE(store_->GetBatch("white space"), Code::kInvalidArgument);
}

// A failure inside the send's transaction, after the batch's row, its
// members and its callback were written (a trigger refuses the last
// statement, which links the callback into the batch's row): all of it is
// rolled back.
TEST_P(BatchConformance, AFailureInTheSendsTransactionRollsBackEverything) {
  WorkQueue jobs = MakeQueue("jobs");
  WorkQueue done = MakeQueue("done");
  RawDb raw(GetParam().name, *db_);
  const std::string engine = GetParam().name;
  const std::string trigger =
      engine == "Sqlite"
          ? "CREATE TRIGGER fail_seal BEFORE UPDATE OF callback_id ON "
            "sqlq_batches BEGIN SELECT RAISE(ABORT, 'injected'); END"
      : engine == "Postgres"
          ? "CREATE FUNCTION fail_seal() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'injected'; END $$; CREATE TRIGGER "
            "fail_seal BEFORE UPDATE OF callback_id ON sqlq_batches FOR EACH "
            "ROW EXECUTE FUNCTION fail_seal()"
          : "CREATE TRIGGER fail_seal BEFORE UPDATE ON sqlq_batches FOR EACH "
            "ROW BEGIN IF OLD.callback_id IS NULL AND NEW.callback_id IS NOT "
            "NULL THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'injected'; "
            "END IF; END";
  ASSERT_EQ(raw.exec()(trigger), "");
  auto failed = store_->CreateBatch(Spec("rolled-back", "jobs", 3));
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("injected"), std::string::npos)
      << failed.status().ToString();
  EXPECT_EQ(Count(jobs), 0);
  EXPECT_EQ(Count(done), 0);
  EXPECT_CODE(store_->GetBatch("rolled-back"), Code::kNotFound);
  EXPECT_EQ(raw.Query("SELECT count(*) FROM sqlq_batches"), "0");
  EXPECT_EQ(raw.Query("SELECT count(*) FROM sqlq_deps"), "0");

  ASSERT_EQ(
      raw.exec()(engine == "Postgres" ? "DROP TRIGGER fail_seal ON sqlq_batches"
                                      : "DROP TRIGGER fail_seal"),
      "");
  ASSERT_OK_AND_ASSIGN(BatchSent sent,
                       store_->CreateBatch(Spec("rolled-back", "jobs", 3)));
  EXPECT_EQ(Count(jobs), 3);
  EXPECT_EQ(CountsOf("rolled-back").total, 3);
  EXPECT_EQ(raw.Query("SELECT count(*) FROM sqlq_deps"), "3");
  (void)sent;
}

TEST_P(BatchConformance, AnIdIsMadeWhenNoneIsGivenAndFreedAfterItsRetention) {
  MakeQueue("jobs");
  WorkQueue done = MakeQueue("done");
  BatchSpec spec = Spec("", "jobs", 1);
  spec.retention = hours(1);
  ASSERT_OK_AND_ASSIGN(BatchSent a, store_->CreateBatch(spec));
  EXPECT_EQ(a.id.size(), 32u);
  ASSERT_OK_AND_ASSIGN(BatchSent b, store_->CreateBatch(spec));
  EXPECT_NE(a.id, b.id);

  spec.id = "nightly";
  ASSERT_OK(store_->CreateBatch(spec));
  ASSERT_OK_AND_ASSIGN(BatchStatus st, store_->CancelBatch("nightly"));
  ASSERT_TRUE(st.done);
  clock_->Advance(std::chrono::minutes(59));
  EXPECT_OK(store_->GetBatch("nightly"));
  EXPECT_CODE(store_->CreateBatch(spec), Code::kAlreadyExists);
  clock_->Advance(std::chrono::minutes(2));
  EXPECT_CODE(store_->GetBatch("nightly"), Code::kNotFound);
  ASSERT_OK(store_->CreateBatch(spec));
  ASSERT_OK_AND_ASSIGN(st, store_->GetBatch("nightly"));
  EXPECT_FALSE(st.done);
}

TEST_P(BatchConformance, DroppingTheCallbacksQueueForgetsTheBatch) {
  WorkQueue jobs = MakeQueue("jobs");
  MakeQueue("done");
  ASSERT_OK(store_->CreateBatch(Spec("orphaned", "jobs", 2)));
  ASSERT_OK(store_->DropQueue("done"));
  EXPECT_CODE(store_->GetBatch("orphaned"), Code::kNotFound);
  // Its members go on as plain messages.
  ASSERT_OK_AND_ASSIGN(auto two, jobs.Claim({.max = 2}));
  ASSERT_EQ(two.size(), 2u);
  EXPECT_OK(jobs.Ack(two[0].receipt));
  EXPECT_OK(jobs.Ack(two[1].receipt));
  // The id is free.
  MakeQueue("done");
  EXPECT_OK(store_->CreateBatch(Spec("orphaned", "jobs", 1)));
}

INSTANTIATE_TEST_SUITE_P(Engines, BatchConformance,
                         ::testing::ValuesIn(Engines()), EngineName);

}  // namespace
}  // namespace sqlq::test
