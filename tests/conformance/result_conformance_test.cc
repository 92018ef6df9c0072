// Conformance of jobs' results and progress (docs/semantics.md "Results"):
// a result kept with its ack or not at all, read by id until its ttl runs
// out; progress recorded only under the job's lease; a wait that ends when
// the job ends, whichever process ends it. Every engine runs it unchanged,
// on a ManualClock.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <string>
#include <thread>

#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "tests/conformance/engine_fixture.h"
#include "tests/conformance/raw_db.h"

namespace sqlq::test {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::seconds;

class ResultConformance : public EngineTest {
 protected:
  WorkQueue MakeQueue(const std::string& name, const QueueOptions& o = {}) {
    auto q = store_->CreateQueue(name, o);
    EXPECT_TRUE(q.ok()) << q.status().ToString();
    return std::move(*q);
  }
};

TEST_P(ResultConformance, AResultIsKeptWithItsAckAndReadUntilItsTtlRunsOut) {
  WorkQueue q = MakeQueue("jobs");
  ASSERT_OK_AND_ASSIGN(SendResult sent, q.Send({.payload = "resize 42"}));
  ASSERT_OK_AND_ASSIGN(JobResult waiting, q.ReadResult(sent.id));
  EXPECT_EQ(waiting.state, JobState::kReady);
  EXPECT_FALSE(waiting.result);
  EXPECT_FALSE(waiting.progress);

  ClaimedMessage m = ClaimOne(q);
  ASSERT_OK(q.Progress(m.receipt, 50, "half the tiles"));
  ASSERT_OK_AND_ASSIGN(JobResult running, q.ReadResult(sent.id));
  EXPECT_EQ(running.state, JobState::kLeased);
  EXPECT_EQ(running.progress, 50);
  EXPECT_EQ(running.note, "half the tiles");
  EXPECT_EQ(running.progress_at, clock_->Now());
  EXPECT_EQ(running.attempts, 1);
  // The latest progress replaces the one before.
  clock_->Advance(seconds(1));
  ASSERT_OK(q.Progress(m.receipt, 99.5));
  ASSERT_OK_AND_ASSIGN(running, q.ReadResult(sent.id));
  EXPECT_EQ(running.progress, 99.5);
  EXPECT_EQ(running.note, "");
  EXPECT_EQ(running.progress_at, clock_->Now());

  clock_->Advance(seconds(1));
  const Timestamp acked_at = clock_->Now();
  ASSERT_OK(q.Ack(m.receipt, {.result = std::string("ok\0bytes", 8),
                              .result_ttl = hours(1)}));
  ASSERT_OK_AND_ASSIGN(JobResult done, q.ReadResult(sent.id));
  EXPECT_EQ(done.state, JobState::kCompleted);
  EXPECT_EQ(done.result, std::string("ok\0bytes", 8));
  EXPECT_EQ(done.completed_at, acked_at);
  EXPECT_EQ(done.progress, 99.5);
  ASSERT_OK_AND_ASSIGN(QueueStats st, q.Stats());
  EXPECT_EQ(st.acks, 1);

  // Kept for its ttl, then gone: the queue knows nothing of the job.
  clock_->Advance(hours(1) - seconds(1));
  ASSERT_OK_AND_ASSIGN(done, q.ReadResult(sent.id));
  EXPECT_EQ(done.result, std::string("ok\0bytes", 8));
  clock_->Advance(seconds(2));
  EXPECT_CODE(q.ReadResult(sent.id), Code::kNotFound);
  EXPECT_CODE(q.ReadResult(sent.id + 1000), Code::kNotFound);
}

TEST_P(ResultConformance, AnAckWithoutAResultKeepsNothingButTheArchive) {
  WorkQueue plain = MakeQueue("plain");
  WorkQueue archived = MakeQueue("archived", {.archive = true});
  ASSERT_OK_AND_ASSIGN(SendResult a, plain.Send({.payload = "a"}));
  ASSERT_OK_AND_ASSIGN(SendResult b, archived.Send({.payload = "b"}));
  ASSERT_OK(plain.Ack(ClaimOne(plain).receipt, AckOptions{}));
  ASSERT_OK(archived.Ack(ClaimOne(archived).receipt));
  EXPECT_CODE(plain.ReadResult(a.id), Code::kNotFound);
  ASSERT_OK_AND_ASSIGN(JobResult r, archived.ReadResult(b.id));
  EXPECT_EQ(r.state, JobState::kCompleted);
  EXPECT_FALSE(r.result);
  EXPECT_EQ(r.completed_at, clock_->Now());
  // A job of another queue is not this queue's.
  EXPECT_CODE(plain.ReadResult(b.id), Code::kNotFound);
}

TEST_P(ResultConformance, AnAckRefusedKeepsNoResult) {
  WorkQueue q = MakeQueue("jobs", {.max_payload_bytes = 100});
  ASSERT_OK_AND_ASSIGN(SendResult sent, q.Send({.payload = "x"}));
  ClaimedMessage first = ClaimOne(q);

  // Too large, or a ttl out of range: refused, the job still leased.
  EXPECT_CODE(q.Ack(first.receipt, {.result = std::string(101, 'r')}),
              Code::kTooLarge);
  EXPECT_CODE(
      q.Ack(first.receipt, {.result = "r", .result_ttl = milliseconds(999)}),
      Code::kInvalidArgument);
  EXPECT_CODE(
      q.Ack(first.receipt, {.result = "r", .result_ttl = hours(24 * 31)}),
      Code::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(JobResult r, q.ReadResult(sent.id));
  EXPECT_EQ(r.state, JobState::kLeased);

  // The lease ran out and another worker holds the job: the first
  // worker's ack, with its result, is refused and stores nothing.
  clock_->Advance(seconds(31));
  ClaimedMessage second = ClaimOne(q);
  ASSERT_EQ(second.id, sent.id);
  EXPECT_CODE(q.Ack(first.receipt, {.result = "stale"}),
              Code::kFailedPrecondition);
  ASSERT_OK_AND_ASSIGN(r, q.ReadResult(sent.id));
  EXPECT_EQ(r.state, JobState::kLeased);
  EXPECT_FALSE(r.result);
  ASSERT_OK(q.Ack(second.receipt, {.result = "fresh"}));
  ASSERT_OK_AND_ASSIGN(r, q.ReadResult(sent.id));
  EXPECT_EQ(r.result, "fresh");
  // Acked: the same receipt again is refused and changes nothing.
  EXPECT_CODE(q.Ack(second.receipt, {.result = "again"}), Code::kNotFound);
  ASSERT_OK_AND_ASSIGN(r, q.ReadResult(sent.id));
  EXPECT_EQ(r.result, "fresh");
}

TEST_P(ResultConformance, ProgressNeedsTheJobsLease) {
  WorkQueue q = MakeQueue("jobs");
  ASSERT_OK_AND_ASSIGN(SendResult sent, q.Send({.payload = "x"}));
  ClaimedMessage first = ClaimOne(q);
  EXPECT_CODE(q.Progress(first.receipt, std::nan("")), Code::kInvalidArgument);
  EXPECT_CODE(q.Progress(first.receipt, 1, std::string(4097, 'n')),
              Code::kTooLarge);
  EXPECT_CODE(q.Progress("not a receipt", 1), Code::kInvalidArgument);
  clock_->Advance(seconds(31));
  ClaimedMessage second = ClaimOne(q);
  EXPECT_CODE(q.Progress(first.receipt, 10), Code::kFailedPrecondition);
  ASSERT_OK_AND_ASSIGN(JobResult r, q.ReadResult(sent.id));
  EXPECT_FALSE(r.progress);
  EXPECT_EQ(r.attempts, 2);
  ASSERT_OK(q.Progress(second.receipt, 20));
  ASSERT_OK(q.Ack(second.receipt));
  EXPECT_CODE(q.Progress(second.receipt, 30), Code::kNotFound);
}

TEST_P(ResultConformance, ADeadJobsResultSaysItDiedAndWhy) {
  WorkQueue q = MakeQueue("jobs", {.max_attempts = 1});
  ASSERT_OK_AND_ASSIGN(SendResult sent, q.Send({.payload = "x"}));
  ClaimedMessage m = ClaimOne(q);
  ASSERT_OK(q.Progress(m.receipt, 10));
  ASSERT_OK(q.Nack(m.receipt, {.error = "no such user"}));
  ASSERT_OK_AND_ASSIGN(JobResult r, q.ReadResult(sent.id, seconds(30)));
  EXPECT_EQ(r.state, JobState::kDead);
  EXPECT_NE(r.error.find("no such user"), std::string::npos) << r.error;
  EXPECT_EQ(r.progress, 10);
  EXPECT_FALSE(r.result);
}

// One process waits for the job's result; another's worker completes it.
// The wait ends with the result (the test's 60 s is only a safety net).
TEST_P(ResultConformance, AWaitEndsWhenTheJobEndsInAnyProcess) {
  WorkQueue q = MakeQueue("jobs");
  ASSERT_OK_AND_ASSIGN(SendResult sent, q.Send({.payload = "2+2"}));
  // A wait that runs out says where the job is.
  ASSERT_OK_AND_ASSIGN(JobResult r, q.ReadResult(sent.id, milliseconds(30)));
  EXPECT_EQ(r.state, JobState::kReady);

  auto waiting = std::async(std::launch::async,
                            [&] { return q.ReadResult(sent.id, seconds(60)); });
  auto other = OtherStore();
  ASSERT_TRUE(other);
  ASSERT_OK_AND_ASSIGN(WorkQueue there, other->Queue("jobs"));
  ClaimedMessage m = ClaimOne(there);
  ASSERT_OK(there.Ack(m.receipt, {.result = "4"}));
  ASSERT_EQ(waiting.wait_for(seconds(60)), std::future_status::ready);
  auto got = waiting.get();
  ASSERT_OK(got.status());
  EXPECT_EQ(got->state, JobState::kCompleted);
  EXPECT_EQ(got->result, "4");

  // In this process, the ack rings the wait at once.
  ASSERT_OK_AND_ASSIGN(SendResult next, q.Send({.payload = "3+3"}));
  auto waiting2 = std::async(
      std::launch::async, [&] { return q.ReadResult(next.id, seconds(60)); });
  ASSERT_OK(q.Ack(ClaimOne(q).receipt, {.result = "6"}));
  ASSERT_EQ(waiting2.wait_for(seconds(60)), std::future_status::ready);
  auto got2 = waiting2.get();
  ASSERT_OK(got2.status());
  EXPECT_EQ(got2->result, "6");
  EXPECT_CODE(q.ReadResult(next.id, hours(2)), Code::kInvalidArgument);
  EXPECT_CODE(q.ReadResult(0), Code::kInvalidArgument);
}

TEST_P(ResultConformance, AJobDroppedAtItsExpiryEndsItsWaitsNotFound) {
  WorkQueue q = MakeQueue("jobs");
  ASSERT_OK_AND_ASSIGN(SendResult sent,
                       q.Send({.payload = "remind me",
                               .expire_after = seconds(10),
                               .on_expiry = ExpiryAction::kDrop}));
  std::atomic<int> ended{0};
  auto watch = q.WatchJobEnd(sent.id, [&] { ++ended; });
  clock_->Advance(seconds(30));
  ASSERT_OK_AND_ASSIGN(auto claimed, q.Claim({.max = 1}));
  EXPECT_TRUE(claimed.empty());
  // Rung by the claim that dropped it, before the claim returned.
  EXPECT_EQ(ended.load(), 1);
  EXPECT_CODE(q.ReadResult(sent.id, seconds(60)), Code::kNotFound);
}

TEST_P(ResultConformance, DroppingAQueueDropsItsResults) {
  WorkQueue q = MakeQueue("jobs");
  ASSERT_OK_AND_ASSIGN(SendResult sent, q.Send({.payload = "x"}));
  ASSERT_OK(q.Ack(ClaimOne(q).receipt, {.result = "kept"}));
  RawDb raw(GetParam().name, *db_);
  const std::string rows = "SELECT count(*) FROM sqlq_results";
  EXPECT_EQ(raw.Query(rows), "1");
  ASSERT_OK(store_->DropQueue("jobs"));
  EXPECT_EQ(raw.Query(rows), "0");
  WorkQueue again = MakeQueue("jobs");
  EXPECT_CODE(again.ReadResult(sent.id), Code::kNotFound);
}

// Results that ran out are deleted by a later ack with a result, without
// anyone running a command.
TEST_P(ResultConformance, ResultsThatRanOutAreDeleted) {
  WorkQueue q = MakeQueue("jobs");
  RawDb raw(GetParam().name, *db_);
  const std::string rows = "SELECT count(*) FROM sqlq_results";
  ASSERT_OK(q.Send({.payload = "x"}));
  ASSERT_OK(q.Ack(ClaimOne(q).receipt,
                  {.result = "short", .result_ttl = seconds(1)}));
  EXPECT_EQ(raw.Query(rows), "1");
  clock_->Advance(seconds(2));
  // Another handle (pruning is once a minute per handle).
  auto other = OtherStore();
  ASSERT_TRUE(other);
  ASSERT_OK_AND_ASSIGN(WorkQueue there, other->Queue("jobs"));
  ASSERT_OK(there.Send({.payload = "y"}));
  ASSERT_OK(there.Ack(ClaimOne(there).receipt, {.result = "long"}));
  EXPECT_EQ(raw.Query(rows), "1");
}

INSTANTIATE_TEST_SUITE_P(Engines, ResultConformance,
                         ::testing::ValuesIn(Engines()), EngineName);

}  // namespace
}  // namespace sqlq::test
