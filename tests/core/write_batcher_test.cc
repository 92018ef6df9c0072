// WriteBatcher: concurrent writes of one process share transactions, and
// each caller still gets its own outcome.
//
// The engine is a fake that keeps a list of integers: each operation appends
// to it and a transaction publishes the list on commit. Its operations keep
// the engine contract (engine.h, "Clean failures"): one that fails cleanly
// wrote nothing; one that fails otherwise may have written part of itself.
// Its first Write can be held open, so that other callers queue up behind a
// leader the test controls.

#include "core/write_batcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <latch>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/engine.h"
#include "tests/support/task_threads.h"
#include "tests/support/test_util.h"

namespace sqlq::core {
namespace {

class FakeConn : public Conn {};

Status Unused() { return Status::Internal("not used by WriteBatcher"); }

class FakeEngine : public Engine {
 public:
  // The next Write blocks, once inside, until Release().
  void HoldNextWrite() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = true;
  }
  void WaitUntilHeld() { held_.get_future().wait(); }
  // Every Write blocks, once inside, until Release().
  void HoldEveryWrite() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_every_ = true;
  }
  // Waits (up to 10 s) until `n` Writes are held at once.
  bool WaitUntilHolding(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10),
                        [&] { return holding_ >= n; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  void FailCommits(Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    commit_error_ = std::move(s);
  }

  // An operation: appends `v` inside the current transaction and returns
  // `result`; a clean failure appends nothing.
  std::function<Status(Conn&)> Append(int v, Status result = Status::Ok()) {
    return [this, v, result](Conn&) {
      std::lock_guard<std::mutex> lock(mu_);
      ran_.back().push_back(v);
      if (!IsCleanFailure(result)) pending_.push_back(v);
      return result;
    };
  }

  std::vector<int> committed() {
    std::lock_guard<std::mutex> lock(mu_);
    auto out = committed_;
    std::sort(out.begin(), out.end());
    return out;
  }
  bool IsCommitted(int v) {
    auto c = committed();
    return std::find(c.begin(), c.end(), v) != c.end();
  }
  int writes() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(ran_.size());
  }
  // For each transaction, the operations it ran (by value), in order.
  std::vector<std::vector<int>> ran() {
    std::lock_guard<std::mutex> lock(mu_);
    return ran_;
  }

  Status Write(const std::function<Status(Conn&)>& body) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      ran_.emplace_back();
      if (hold_) {
        hold_ = false;
        held_.set_value();
        cv_.wait(lock, [&] { return released_; });
      } else if (hold_every_ && !released_) {
        ++holding_;
        cv_.notify_all();
        cv_.wait(lock, [&] { return released_; });
      }
      pending_ = committed_;
    }
    FakeConn conn;
    Status s = body(conn);
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.ok()) return s;  // rolled back: pending_ is dropped
    if (!commit_error_.ok()) return commit_error_;
    committed_ = pending_;
    return Status::Ok();
  }
  Status Read(const std::function<Status(Conn&)>&) override { return Unused(); }

  // The rest of the interface is not reached by WriteBatcher.
  Result<std::unique_ptr<Conn>> BeginTx() override { return Unused(); }
  Result<std::unique_ptr<Conn>> JoinTx(void*) override { return Unused(); }
  Status CommitTx(Conn&) override { return Unused(); }
  Status RollbackTx(Conn&) override { return Unused(); }
  void* NativeHandle(Conn&) override { return nullptr; }
  void WatchForeignWrites(std::function<void()>) override {}
  Result<QueueRecord> CreateQueue(Conn&,
                                  const core::CreateQueueParams&) override {
    return Unused();
  }
  Result<QueueRecord> GetQueue(Conn&, std::string_view) override {
    return Unused();
  }
  Result<std::vector<QueueRecord>> ListQueues(Conn&) override {
    return Unused();
  }
  Status DropQueue(Conn&, std::int64_t) override { return Unused(); }
  Result<std::int64_t> UnlinkDeadLetterQueue(Conn&, std::string_view) override {
    return Unused();
  }
  Status TouchSchema(Conn&) override { return Unused(); }
  Result<std::int64_t> PurgeQueue(Conn&, std::int64_t) override {
    return Unused();
  }
  Result<QueueStats> GetQueueStats(Conn&, std::int64_t) override {
    return Unused();
  }
  // Sends go to the hook, when set.
  std::function<Result<std::vector<SendResult>>(const SendParams&)> send_hook;
  Result<std::vector<SendResult>> Send(Conn&, const SendParams& p) override {
    if (send_hook) return send_hook(p);
    return Unused();
  }
  // Claims and acks of many go to the hooks, when set.
  std::function<Result<ClaimOutcome>(const ClaimParams&)> claim_hook;
  Result<ClaimOutcome> Claim(Conn&, const ClaimParams& p) override {
    if (claim_hook) return claim_hook(p);
    return Unused();
  }
  std::function<Result<std::vector<Status>>(const AckManyParams&)> ack_hook;
  Result<std::vector<Status>> AckMany(Conn&, const AckManyParams& p) override {
    if (ack_hook) return ack_hook(p);
    return Unused();
  }
  // A group of sends and claims, when set (else the default: the general
  // way).
  std::function<Result<std::optional<ClaimCommitted>>(
      SendsFirst&, const ClaimParams&, const AckManyParams&,
      std::span<const int>)>
      sends_claim_hook;
  Result<std::optional<ClaimCommitted>> SendsAndClaimAndCommit(
      SendsFirst& sends, const ClaimParams& p, const AckManyParams& acks,
      std::span<const int> gates) override {
    if (sends_claim_hook) return sends_claim_hook(sends, p, acks, gates);
    return Engine::SendsAndClaimAndCommit(sends, p, acks, gates);
  }
  Result<std::optional<Timestamp>> NextReadyAt(Conn&, std::int64_t) override {
    return Unused();
  }
  Result<Timestamp> Now(Conn&) override { return Unused(); }
  Status Ack(Conn&, const AckParams&) override { return Unused(); }
  Status Retry(Conn&, const RetryParams&) override { return Unused(); }
  Status Bury(Conn&, const BuryParams&) override { return Unused(); }
  Result<std::int64_t> CountMessages(Conn&,
                                     const FindMessagesParams&) override {
    return Unused();
  }
  Status ReportWaiting(Conn&, const ReportWaitingParams&) override {
    return Unused();
  }
  Result<std::map<std::string, std::int64_t>> ReadWaiting(
      Conn&, const ReadWaitingParams&) override {
    return Unused();
  }
  Result<std::int64_t> Cancel(Conn&, const CancelParams&) override {
    return Unused();
  }
  Result<Timestamp> Extend(Conn&, const core::ExtendParams&) override {
    return Unused();
  }
  Result<std::vector<DeadLetter>> ListDead(
      Conn&, const core::ListDeadParams&) override {
    return Unused();
  }
  Result<std::int64_t> Redrive(Conn&, const core::RedriveParams&) override {
    return Unused();
  }
  Result<std::int64_t> PurgeDead(Conn&, std::int64_t) override {
    return Unused();
  }
  Result<std::vector<ArchivedMessage>> ListArchive(
      Conn&, const core::ListArchiveParams&) override {
    return Unused();
  }
  Result<std::int64_t> PruneArchive(Conn&,
                                    const core::PruneArchiveParams&) override {
    return Unused();
  }
  // Rings and rotations: not used by the batcher's tests.
  Result<RingRecord> CreateRing(Conn&, const core::CreateRingParams&) override {
    return Unused();
  }
  Result<RingRecord> GetRing(Conn&, std::string_view) override {
    return Unused();
  }
  Result<KindsRecord> ListRingsAndRotations(Conn&) override { return Unused(); }
  Result<FoundMessages> FindMessages(Conn&,
                                     const FindMessagesParams&) override {
    return Unused();
  }
  Result<std::int64_t> SteerMessages(Conn&,
                                     const SteerMessagesParams&) override {
    return Unused();
  }
  Status AlterQueue(Conn&, const AlterQueueParams&) override {
    return Unused();
  }
  Status SetQueuePaused(Conn&, const SetQueuePausedParams&) override {
    return Unused();
  }
  Result<std::int64_t> PruneDead(Conn&, const PruneDeadParams&) override {
    return Unused();
  }
  Result<std::int64_t> PruneHolds(Conn&, std::int64_t) override {
    return Unused();
  }
  Result<std::int64_t> CreateSchedule(Conn&, const ScheduleInfo&) override {
    return Unused();
  }
  Result<std::vector<ScheduleRecord>> ListSchedules(Conn&) override {
    return Unused();
  }
  Status DropSchedule(Conn&, std::string_view) override { return Unused(); }
  Status ReportWorker(Conn&, const ReportWorkerParams&) override {
    return Unused();
  }
  Result<bool> RemoveWorker(Conn&, std::string_view) override {
    return Unused();
  }
  Result<std::vector<WorkerRecord>> ListWorkers(Conn&) override {
    return Unused();
  }
  Status SaveProgress(Conn&, const SaveProgressParams&) override {
    return Unused();
  }
  Status SaveResult(Conn&, const SaveResultParams&) override {
    return Unused();
  }
  Result<std::optional<ResultRecord>> ReadResult(Conn&, std::int64_t,
                                                 std::int64_t) override {
    return Unused();
  }
  Result<std::int64_t> PruneResults(Conn&) override { return Unused(); }
  Status FlagDependents(Conn&, std::span<const std::int64_t>,
                        std::span<const std::int64_t>) override {
    return Unused();
  }
  Result<std::vector<ParentState>> LockParents(
      Conn&, std::span<const std::int64_t>) override {
    return Unused();
  }
  Result<std::map<std::int64_t, std::string>> QueueNames(
      Conn&, std::span<const std::int64_t>) override {
    return Unused();
  }
  Result<std::vector<DeadDependent>> TakeDeadDependents(
      Conn&, std::int64_t, std::span<const std::int64_t>, bool) override {
    return Unused();
  }
  Status WriteLinks(Conn&, std::span<const DependencyLink>,
                    std::span<const ChildWaits>) override {
    return Unused();
  }
  // No message here has dependents.
  Result<ReleaseOutcome> ReleaseDependents(
      Conn&, std::int64_t, std::span<const std::int64_t>) override {
    return ReleaseOutcome{};
  }
  Result<std::vector<EndedDependency>> EndedDependencies(
      Conn&, std::int64_t) override {
    return Unused();
  }
  Result<bool> SettleDependency(Conn&, const EndedDependency&) override {
    return Unused();
  }
  Result<std::vector<DependencyRecord>> ListDependencies(
      Conn&, std::int64_t) override {
    return Unused();
  }
  Result<std::vector<LinkRecord>> ListLinks(Conn&, std::int64_t, std::int64_t,
                                            int) override {
    return Unused();
  }
  Status DropDependencies(Conn&, std::int64_t) override { return Unused(); }
  Result<std::int64_t> MoveParents(Conn&, std::int64_t, std::int64_t) override {
    return Unused();
  }
  Result<std::optional<std::int64_t>> AddBatch(Conn&,
                                               const AddBatchParams&) override {
    return Unused();
  }
  Status SealBatch(Conn&, const SealBatchParams&) override { return Unused(); }
  Result<std::optional<BatchRecord>> CountBatch(Conn&, std::int64_t,
                                                const BatchCounts&) override {
    return Unused();
  }
  Status FinishBatch(Conn&, const FinishBatchParams&) override {
    return Unused();
  }
  Result<std::optional<BatchRecord>> FindBatch(Conn&,
                                               std::string_view) override {
    return Unused();
  }
  Result<std::vector<BatchMember>> PendingBatchMembers(Conn&,
                                                       std::int64_t) override {
    return Unused();
  }
  Result<std::vector<EndedDependency>> EndedBatchMembers(
      Conn&, std::int64_t) override {
    return Unused();
  }
  Status MarkBatchCancelled(Conn&, std::int64_t) override { return Unused(); }
  Result<std::int64_t> PruneBatches(Conn&) override { return Unused(); }
  Result<std::int64_t> CreateTopic(Conn&, std::string_view) override {
    return Unused();
  }
  Result<std::int64_t> GetTopic(Conn&, std::string_view) override {
    return Unused();
  }
  Result<std::vector<TopicRecord>> ListTopics(Conn&) override {
    return Unused();
  }
  Status DropTopic(Conn&, std::int64_t) override { return Unused(); }
  Result<bool> Subscribe(Conn&, const SubscribeParams&) override {
    return Unused();
  }
  Result<bool> Unsubscribe(Conn&, std::int64_t, std::int64_t) override {
    return Unused();
  }
  Result<std::vector<SubscriberRecord>> ListSubscribers(Conn&,
                                                        std::int64_t) override {
    return Unused();
  }
  Result<std::vector<SubscriberRecord>> LockSubscribers(
      Conn&, std::string_view) override {
    return Unused();
  }
  Status DropSubscriptionsOf(Conn&, std::int64_t) override { return Unused(); }
  Result<std::optional<std::string>> ReadHeaders(Conn&, std::int64_t,
                                                 std::int64_t) override {
    return Unused();
  }
  Status SetSchedulePaused(Conn&, const SetSchedulePausedParams&) override {
    return Unused();
  }
  Result<bool> TakeSchedulerLease(Conn&,
                                  const TakeSchedulerLeaseParams&) override {
    return Unused();
  }
  Result<bool> AdvanceSchedule(Conn&, const AdvanceScheduleParams&) override {
    return Unused();
  }
  Result<LimitState> LockLimits(Conn&, const LockLimitsParams&) override {
    return Unused();
  }
  Status SaveLimits(Conn&, const SaveLimitsParams&) override {
    return Unused();
  }
  Status DropRing(Conn&, std::int64_t) override { return Unused(); }
  Result<RingEntry> PushToRing(Conn&, const core::PushToRingParams&) override {
    return Unused();
  }
  Result<std::vector<RingEntry>> ReadRing(
      Conn&, const core::ReadRingParams&) override {
    return Unused();
  }
  Result<std::vector<RingGroup>> ListRingGroups(Conn&, std::int64_t) override {
    return Unused();
  }
  Status DeleteRingEntry(Conn&, const core::DeleteRingEntryParams&) override {
    return Unused();
  }
  Result<std::int64_t> DeleteRingGroup(
      Conn&, const core::DeleteRingGroupParams&) override {
    return Unused();
  }
  Result<std::int64_t> SetRingCapacity(
      Conn&, const core::SetRingCapacityParams&) override {
    return Unused();
  }
  Result<RingStats> GetRingStats(Conn&, std::int64_t) override {
    return Unused();
  }
  Result<RotationRecord> CreateRotation(
      Conn&, const core::CreateRotationParams&) override {
    return Unused();
  }
  Result<RotationRecord> GetRotation(Conn&, std::string_view) override {
    return Unused();
  }
  Status DropRotation(Conn&, std::int64_t) override { return Unused(); }
  Status AddToRotation(Conn&, const core::AddToRotationParams&) override {
    return Unused();
  }
  Status RemoveFromRotation(Conn&,
                            const core::RemoveFromRotationParams&) override {
    return Unused();
  }
  Result<std::vector<RotationItem>> ServeFromRotation(
      Conn&, const core::ServeFromRotationParams&) override {
    return Unused();
  }
  Result<RotationItem> ReportRotationFailure(
      Conn&, const core::ReportRotationFailureParams&) override {
    return Unused();
  }
  Result<RotationItem> ReportRotationSuccess(
      Conn&, const core::ReportRotationSuccessParams&) override {
    return Unused();
  }
  Result<RotationItem> ResetRotationItem(
      Conn&, const core::ResetRotationItemParams&) override {
    return Unused();
  }
  Result<std::vector<RotationItem>> ListRotationItems(Conn&,
                                                      std::int64_t) override {
    return Unused();
  }
  Result<RotationStats> GetRotationStats(Conn&, std::int64_t) override {
    return Unused();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool hold_ = false;
  bool hold_every_ = false;
  int holding_ = 0;  // Writes held by hold_every_ so far
  bool released_ = false;
  std::promise<void> held_;
  Status commit_error_;
  std::vector<int> committed_;
  std::vector<int> pending_;
  std::vector<std::vector<int>> ran_;
};

// One round: a leader holds the engine's first transaction open while
// `ops.size()` followers call Run; then the leader is let go. Returns each
// follower's status, in order.
std::vector<Status> RunBehindAHeldLeader(
    FakeEngine& engine, WriteBatcher& batcher,
    const std::vector<std::function<Status(Conn&)>>& ops) {
  engine.HoldNextWrite();
  auto leader_op = engine.Append(0);
  auto leader =
      std::async(std::launch::async, [&] { return batcher.Run(leader_op); });
  engine.WaitUntilHeld();
  std::latch started(static_cast<std::ptrdiff_t>(ops.size()));
  std::vector<std::future<Status>> followers;
  for (const auto& op : ops) {
    followers.push_back(std::async(std::launch::async, [&] {
      started.count_down();
      return batcher.Run(op);
    }));
  }
  started.wait();
  engine.Release();
  EXPECT_OK(leader.get());
  std::vector<Status> out;
  for (auto& f : followers) out.push_back(f.get());
  return out;
}

// Rounds are repeated until the followers happened to queue up in time to
// share a transaction; every round checks the outcome regardless. A batcher
// that never merges fails after kRounds.
constexpr int kRounds = 200;

TEST(WriteBatcher, UncontendedOperationCommitsInItsOwnTransaction) {
  FakeEngine engine;
  WriteBatcher batcher(engine);
  EXPECT_OK(batcher.Run(engine.Append(1)));
  EXPECT_EQ(engine.committed(), std::vector<int>{1});
  EXPECT_EQ(engine.writes(), 1);
  EXPECT_EQ(batcher.TEST_transactions(), 1u);
  EXPECT_EQ(batcher.TEST_operations(), 1u);
  EXPECT_OK(batcher.Run(engine.Append(2)));
  EXPECT_EQ(engine.committed(), (std::vector<int>{1, 2}));
  EXPECT_EQ(engine.writes(), 2);
}

TEST(WriteBatcher, OperationsErrorIsReturnedAndItsWritesAreNotStored) {
  FakeEngine engine;
  WriteBatcher batcher(engine);
  Status clean = batcher.Run(engine.Append(1, Status::NotFound("gone")));
  EXPECT_EQ(clean.code(), Code::kNotFound);
  EXPECT_EQ(clean.message(), "gone");
  // Wrote part of itself, then failed: the transaction is rolled back.
  Status dirty = batcher.Run(engine.Append(2, Status::Unavailable("I/O")));
  EXPECT_EQ(dirty.code(), Code::kUnavailable);
  EXPECT_EQ(dirty.message(), "I/O");
  EXPECT_TRUE(engine.committed().empty());
}

TEST(WriteBatcher, FailedCommitIsReportedToTheOperation) {
  FakeEngine engine;
  WriteBatcher batcher(engine);
  engine.FailCommits(Status::Unavailable("disk full"));
  EXPECT_CODE(batcher.Run(engine.Append(1)), Code::kUnavailable);
  EXPECT_TRUE(engine.committed().empty());
}

TEST(WriteBatcher, MergesConcurrentOperationsIntoFewerTransactions) {
  bool merged = false;
  for (int round = 0; round < kRounds && !merged; ++round) {
    FakeEngine engine;
    WriteBatcher batcher(engine);
    std::vector<std::function<Status(Conn&)>> ops;
    for (int v = 1; v <= 4; ++v) ops.push_back(engine.Append(v));
    auto statuses = RunBehindAHeldLeader(engine, batcher, ops);
    for (const Status& s : statuses) EXPECT_OK(s);
    ASSERT_EQ(engine.committed(), (std::vector<int>{0, 1, 2, 3, 4}));
    EXPECT_EQ(batcher.TEST_operations(), 5u);
    EXPECT_EQ(batcher.TEST_transactions(),
              static_cast<std::size_t>(engine.writes()));
    merged = engine.writes() < 5;
  }
  EXPECT_TRUE(merged) << "in " << kRounds
                      << " rounds, no two operations shared a transaction";
}

TEST(WriteBatcher, CleanFailureDoesNotUndoTheOthersInItsGroup) {
  bool merged = false;
  for (int round = 0; round < kRounds && !merged; ++round) {
    FakeEngine engine;
    WriteBatcher batcher(engine);
    std::vector<std::function<Status(Conn&)>> ops = {
        engine.Append(1), engine.Append(2, Status::FailedPrecondition("stale")),
        engine.Append(3), engine.Append(4, Status::NotFound("gone"))};
    auto statuses = RunBehindAHeldLeader(engine, batcher, ops);
    EXPECT_OK(statuses[0]);
    EXPECT_CODE(statuses[1], Code::kFailedPrecondition);
    EXPECT_EQ(statuses[1].message(), "stale");
    EXPECT_OK(statuses[2]);
    EXPECT_CODE(statuses[3], Code::kNotFound);
    ASSERT_EQ(engine.committed(), (std::vector<int>{0, 1, 3}));
    for (const auto& ran : engine.ran()) {
      bool has_failure = std::count(ran.begin(), ran.end(), 2) +
                             std::count(ran.begin(), ran.end(), 4) >
                         0;
      if (has_failure && ran.size() > 1) merged = true;
    }
  }
  EXPECT_TRUE(merged) << "in " << kRounds
                      << " rounds, no failure shared a transaction";
}

TEST(WriteBatcher, OtherFailureAbortsItsWholeGroup) {
  bool merged = false;
  for (int round = 0; round < kRounds && !merged; ++round) {
    FakeEngine engine;
    WriteBatcher batcher(engine);
    // Operation 2 writes part of itself and then fails (an I/O error).
    std::vector<std::function<Status(Conn&)>> ops;
    for (int v = 1; v <= 6; ++v) {
      ops.push_back(
          engine.Append(v, v == 2 ? Status::Unavailable("I/O") : Status::Ok()));
    }
    auto statuses = RunBehindAHeldLeader(engine, batcher, ops);
    EXPECT_CODE(statuses[1], Code::kUnavailable);
    EXPECT_FALSE(engine.IsCommitted(2));
    // Every other operation either committed, or got the group's error and
    // left nothing behind.
    for (int v = 1; v <= 6; ++v) {
      if (v == 2) continue;
      const Status& s = statuses[v - 1];
      if (s.ok()) {
        EXPECT_TRUE(engine.IsCommitted(v)) << v;
      } else {
        EXPECT_CODE(s, Code::kUnavailable);
        EXPECT_EQ(s.message(), "I/O");
        EXPECT_FALSE(engine.IsCommitted(v)) << v;
      }
    }
    for (const auto& ran : engine.ran()) {
      if (std::count(ran.begin(), ran.end(), 2) == 0) continue;
      // Whoever ran in the failed transaction shares its fate.
      for (int v : ran) {
        EXPECT_CODE(statuses[v - 1], Code::kUnavailable);
        EXPECT_FALSE(engine.IsCommitted(v));
      }
    }
    // Another operation got the error: it was in the failed group (it ran
    // before operation 2, or was queued behind it and never ran).
    for (int v = 1; v <= 6; ++v) {
      if (v != 2 && !statuses[v - 1].ok()) merged = true;
    }
  }
  EXPECT_TRUE(merged) << "in " << kRounds
                      << " rounds, the failure shared no transaction";
}

TEST(WriteBatcher, FailedCommitOfAGroupIsReportedToEveryOperation) {
  bool merged = false;
  for (int round = 0; round < kRounds && !merged; ++round) {
    FakeEngine engine;
    WriteBatcher batcher(engine);
    std::vector<std::function<Status(Conn&)>> ops = {
        engine.Append(1), engine.Append(2), engine.Append(3),
        engine.Append(4, Status::NotFound("own error"))};
    engine.HoldNextWrite();
    auto leader_op = engine.Append(0);
    auto leader =
        std::async(std::launch::async, [&] { return batcher.Run(leader_op); });
    engine.WaitUntilHeld();
    std::latch started(4);
    std::vector<std::future<Status>> followers;
    for (const auto& op : ops) {
      followers.push_back(std::async(std::launch::async, [&] {
        started.count_down();
        return batcher.Run(op);
      }));
    }
    started.wait();
    // From here on every commit fails, the held leader's included.
    engine.FailCommits(Status::Unavailable("disk full"));
    engine.Release();
    EXPECT_CODE(leader.get(), Code::kUnavailable);
    for (int i = 0; i < 3; ++i) {
      EXPECT_CODE(followers[i].get(), Code::kUnavailable);
    }
    // An operation that failed by itself keeps its own error.
    EXPECT_CODE(followers[3].get(), Code::kNotFound);
    EXPECT_TRUE(engine.committed().empty());
    merged = engine.writes() < 5;
  }
  EXPECT_TRUE(merged);
}

TEST(WriteBatcher, GroupsNeverExceedMaxGroup) {
  FakeEngine engine;
  WriteBatcher batcher(engine, 2);
  std::vector<std::function<Status(Conn&)>> ops;
  for (int v = 1; v <= 6; ++v) ops.push_back(engine.Append(v));
  auto statuses = RunBehindAHeldLeader(engine, batcher, ops);
  for (const Status& s : statuses) EXPECT_OK(s);
  EXPECT_EQ(engine.committed(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
  for (const auto& ran : engine.ran()) EXPECT_LE(ran.size(), 2u);
  EXPECT_GE(batcher.TEST_transactions(), 4u);  // 1 + ceil(6 / 2)
}

TEST(WriteBatcher, ManyThreadsAllCommitEveryOperation) {
  FakeEngine engine;
  WriteBatcher batcher(engine);
  constexpr int kThreads = 8, kPerThread = 200;
  std::vector<std::future<void>> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.push_back(std::async(std::launch::async, [&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        EXPECT_OK(batcher.Run(engine.Append(t * kPerThread + i)));
      }
    }));
  }
  for (auto& t : threads) t.get();
  std::vector<int> expected(kThreads * kPerThread);
  for (int i = 0; i < kThreads * kPerThread; ++i) expected[i] = i;
  EXPECT_EQ(engine.committed(), expected);
  EXPECT_EQ(batcher.TEST_operations(),
            static_cast<std::size_t>(kThreads * kPerThread));
  EXPECT_LE(batcher.TEST_transactions(), batcher.TEST_operations());
}

// Counts the transactions in flight at once. Each Write waits (up to a
// generous deadline) until `target` are in flight, so that a batcher that
// allows `target` leaders is seen to reach them; once reached, writes go
// straight through.
class ParallelEngine : public FakeEngine {
 public:
  explicit ParallelEngine(int target) : target_(target) {}

  Status Write(const std::function<Status(Conn&)>& body) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++in_flight_;
      peak_ = std::max(peak_, in_flight_);
      if (in_flight_ >= target_) reached_ = true;
      cv_.notify_all();
      cv_.wait_for(lock, std::chrono::seconds(10), [&] { return reached_; });
    }
    FakeConn conn;
    Status s = body(conn);
    std::lock_guard<std::mutex> lock(mu_);
    --in_flight_;
    return s;
  }
  int peak() {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
  }

 private:
  const int target_;
  std::mutex mu_;
  std::condition_variable cv_;
  int in_flight_ = 0;
  int peak_ = 0;
  bool reached_ = false;
};

// Runs kThreads x kPerThread operations through `batcher`; operation n
// fails cleanly with its own number when n % 3 == 0. Checks that every
// operation ran exactly once and its caller got its own outcome.
void RunNumberedOperations(WriteBatcher& batcher, int threads, int per_thread) {
  const int total = threads * per_thread;
  std::vector<std::atomic<int>> runs(total);
  std::vector<std::future<void>> pool;
  for (int t = 0; t < threads; ++t) {
    pool.push_back(std::async(std::launch::async, [&, t] {
      for (int i = 0; i < per_thread; ++i) {
        const int n = t * per_thread + i;
        Status s = batcher.Run([&, n](Conn&) {
          ++runs[n];
          return n % 3 == 0 ? Status::NotFound(std::to_string(n))
                            : Status::Ok();
        });
        if (n % 3 == 0) {
          EXPECT_EQ(s.code(), Code::kNotFound) << n;
          EXPECT_EQ(s.message(), std::to_string(n));
        } else {
          EXPECT_TRUE(s.ok()) << n << ": " << s.ToString();
        }
      }
    }));
  }
  for (auto& f : pool) f.get();
  for (int n = 0; n < total; ++n) EXPECT_EQ(runs[n].load(), 1) << n;
  EXPECT_EQ(batcher.TEST_operations(), static_cast<std::size_t>(total));
  EXPECT_LE(batcher.TEST_transactions(), batcher.TEST_operations());
}

TEST(WriteBatcher, RunsUpToMaxLeadersGroupsAtOnceAndNeverMore) {
  ParallelEngine engine(4);
  WriteBatcher batcher(engine, 512, /*max_leaders=*/4);
  RunNumberedOperations(batcher, 32, 50);
  EXPECT_EQ(engine.peak(), 4);
  EXPECT_EQ(batcher.TEST_peak_leaders(), 4);
}

TEST(WriteBatcher, OneLeaderNeverOverlapsTransactions) {
  ParallelEngine engine(1);
  WriteBatcher batcher(engine);
  RunNumberedOperations(batcher, 16, 50);
  EXPECT_EQ(engine.peak(), 1);
  EXPECT_EQ(batcher.TEST_peak_leaders(), 1);
}

TEST(WriteBatcher, ManyThreadsWithSeveralLeadersEachGetTheirOwnStatus) {
  ParallelEngine engine(1);  // no waiting: as fast as the batcher goes
  WriteBatcher batcher(engine, 512, /*max_leaders=*/4);
  RunNumberedOperations(batcher, 64, 100);
  EXPECT_LE(engine.peak(), 4);
  EXPECT_LE(batcher.TEST_peak_leaders(), 4);
}

// Sends: each message's payload is "queue:number"; the engine's Send
// records each call (queue and size) and answers each message with its
// number as id, so that every caller can check it got the ids of its own
// messages. Sends to queue 3 fail cleanly, as to a dropped queue.
class SendRecorder {
 public:
  struct Call {
    std::int64_t queue_id;
    std::size_t size;
    bool mixed_queues;
  };

  explicit SendRecorder(FakeEngine& engine) {
    engine.send_hook =
        [this](const SendParams& p) -> Result<std::vector<SendResult>> {
      bool mixed = false;
      std::vector<SendResult> out;
      for (const Message& m : p.messages) {
        const auto colon = m.payload.find(':');
        mixed = mixed || std::stoll(m.payload.substr(0, colon)) != p.queue_id;
        out.push_back({.id = std::stoll(m.payload.substr(colon + 1))});
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        calls_.push_back({p.queue_id, p.messages.size(), mixed});
      }
      if (p.queue_id == 3) return Status::NotFound("queue dropped");
      return out;
    };
  }
  std::vector<Call> calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  std::mutex mu_;
  std::vector<Call> calls_;
};

std::vector<Message> Numbered(std::int64_t key, int first, int count) {
  std::vector<Message> out;
  for (int i = 0; i < count; ++i) {
    out.push_back(
        {.payload = std::to_string(key) + ":" + std::to_string(first + i)});
  }
  return out;
}

// Waits until `n` callers wait in `batcher`'s queue; false if they never
// do (within a generous deadline).
bool WaitUntilQueued(const WriteBatcher& batcher, std::size_t n) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (batcher.TEST_queued() < n &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  return batcher.TEST_queued() == n;
}

struct Sender {
  std::int64_t queue_id;
  std::vector<Message> messages;
};

// Runs `senders` behind a held leader; checks that each got the ids of its
// own messages (or, on queue 3, the clean failure) and that the leader's
// operation committed.
void SendBehindAHeldLeader(FakeEngine& engine, WriteBatcher& batcher,
                           const std::vector<Sender>& senders) {
  engine.HoldNextWrite();
  auto leader_op = engine.Append(0);
  auto leader =
      std::async(std::launch::async, [&] { return batcher.Run(leader_op); });
  engine.WaitUntilHeld();
  std::latch started(static_cast<std::ptrdiff_t>(senders.size()));
  std::vector<std::future<Result<std::vector<SendResult>>>> results;
  for (const Sender& sender : senders) {
    results.push_back(std::async(std::launch::async, [&] {
      started.count_down();
      return batcher.Send(
          {.queue_id = sender.queue_id, .messages = sender.messages});
    }));
  }
  started.wait();
  engine.Release();
  EXPECT_OK(leader.get());
  for (std::size_t i = 0; i < senders.size(); ++i) {
    auto r = results[i].get();
    if (senders[i].queue_id == 3) {
      EXPECT_CODE(r.status(), Code::kNotFound);
      continue;
    }
    ASSERT_OK(r.status());
    ASSERT_EQ(r->size(), senders[i].messages.size());
    for (std::size_t j = 0; j < r->size(); ++j) {
      const std::string& p = senders[i].messages[j].payload;
      EXPECT_EQ((*r)[j].id, std::stoll(p.substr(p.find(':') + 1))) << p;
    }
  }
  EXPECT_EQ(engine.committed(), std::vector<int>{0});
}

TEST(WriteBatcher, SendsToOneQueueInAGroupShareOneCallAndKeepTheirOwnIds) {
  bool merged = false;
  for (int round = 0; round < kRounds && !merged; ++round) {
    FakeEngine engine;
    SendRecorder recorder(engine);
    WriteBatcher batcher(engine, 512, /*max_leaders=*/1);
    // Queue 1: four small sends and one over kMaxMessages; queue 2: two
    // small sends; queue 3: two sends that fail cleanly, which leaves the
    // others of their group alone.
    std::vector<Sender> senders;
    for (int i = 0; i < 4; ++i) senders.push_back({1, Numbered(1, 100 * i, 3)});
    senders.push_back({1, Numbered(1, 1000, WriteBatcher::kMaxMessages + 1)});
    for (int i = 0; i < 2; ++i) senders.push_back({2, Numbered(2, 10 * i, 2)});
    for (int i = 0; i < 2; ++i) senders.push_back({3, Numbered(3, 10 * i, 1)});
    SendBehindAHeldLeader(engine, batcher, senders);
    std::size_t small_calls = 0, large_calls = 0;
    for (const auto& c : recorder.calls()) {
      EXPECT_FALSE(c.mixed_queues) << "a call carried another queue's messages";
      if (c.size == WriteBatcher::kMaxMessages + 1) {
        ++large_calls;  // never joined with others
        continue;
      }
      EXPECT_LE(c.size, 4u * 3) << "queue " << c.queue_id;
      ++small_calls;
    }
    EXPECT_EQ(large_calls, 1u);
    merged = small_calls < senders.size() - 1;
  }
  EXPECT_TRUE(merged) << "in " << kRounds
                      << " rounds, no two sends shared a call";
}

TEST(WriteBatcher, AGroupOfSendsToOneQueueIsOneCall) {
  bool merged = false;
  for (int round = 0; round < kRounds && !merged; ++round) {
    FakeEngine engine;
    SendRecorder recorder(engine);
    WriteBatcher batcher(engine, 512, /*max_leaders=*/1);
    std::vector<Sender> senders;
    for (int i = 0; i < 6; ++i) senders.push_back({1, Numbered(1, 10 * i, 1)});
    SendBehindAHeldLeader(engine, batcher, senders);
    const auto calls = recorder.calls();
    std::size_t messages = 0;
    for (const auto& c : calls) messages += c.size;
    EXPECT_EQ(messages, senders.size());
    merged = calls.size() == 1;
  }
  EXPECT_TRUE(merged) << "in " << kRounds
                      << " rounds, six queued sends never shared a call";
}

// Publishes queued behind a leader: those to one topic are one publish of
// their messages joined, each caller getting the deliveries of its own
// messages (numbered from its first); a caller whose message the joined
// publish refuses cleanly gets that error alone, the others of its topic
// their deliveries.
TEST(WriteBatcher, PublishesToOneTopicInAGroupAreOnePublish) {
  FakeEngine engine;
  WriteBatcher batcher(engine, 512, /*max_leaders=*/1);
  std::mutex mu;
  std::vector<std::pair<std::string, std::size_t>> calls;  // topic, messages
  batcher.set_publish(
      [&](Conn&, std::string_view topic, std::span<const Message> messages)
          -> Result<std::vector<WriteBatcher::Published>> {
        {
          std::lock_guard<std::mutex> lock(mu);
          calls.emplace_back(std::string(topic), messages.size());
        }
        std::vector<WriteBatcher::Published> out;
        for (std::size_t i = 0; i < messages.size(); ++i) {
          if (messages[i].payload == "bad") {
            return Status::InvalidArgument("refused by a subscriber");
          }
          // Two subscribers each: a delivery per queue and message.
          for (std::int64_t q : {1, 2}) {
            out.push_back(
                {.delivery = {.queue = "q" + std::to_string(q),
                              .message = i,
                              .sent = {.id = std::stoll(messages[i].payload)}},
                 .queue_id = q});
          }
        }
        return out;
      });
  struct Publisher {
    std::string topic;
    std::vector<std::string> payloads;
  };
  const std::vector<Publisher> publishers = {
      {"t", {"10", "11"}},       {"t", {"20"}}, {"u", {"30"}},
      {"t", {"40", "41", "42"}}, {"v", {"50"}}, {"v", {"bad"}}};
  engine.HoldNextWrite();
  auto leader_op = engine.Append(0);
  auto leader =
      std::async(std::launch::async, [&] { return batcher.Run(leader_op); });
  engine.WaitUntilHeld();
  std::vector<std::vector<Message>> messages;
  for (const Publisher& p : publishers) {
    auto& m = messages.emplace_back();
    for (const std::string& payload : p.payloads)
      m.push_back({.payload = payload});
  }
  std::vector<std::future<Result<std::vector<WriteBatcher::Published>>>>
      results;
  for (std::size_t i = 0; i < publishers.size(); ++i) {
    results.push_back(std::async(std::launch::async, [&, i] {
      return batcher.Publish(publishers[i].topic, messages[i]);
    }));
  }
  ASSERT_TRUE(WaitUntilQueued(batcher, publishers.size()));
  engine.Release();
  EXPECT_OK(leader.get());
  for (std::size_t i = 0; i < publishers.size(); ++i) {
    auto r = results[i].get();
    if (publishers[i].payloads[0] == "bad") {
      EXPECT_CODE(r.status(), Code::kInvalidArgument);
      continue;
    }
    ASSERT_OK(r.status());
    ASSERT_EQ(r->size(), 2 * publishers[i].payloads.size()) << i;
    for (const WriteBatcher::Published& p : *r) {
      ASSERT_LT(p.delivery.message, publishers[i].payloads.size());
      EXPECT_EQ(p.delivery.sent.id,
                std::stoll(publishers[i].payloads[p.delivery.message]));
      EXPECT_EQ(p.delivery.queue, "q" + std::to_string(p.queue_id));
    }
  }
  // One call for t's three publishers (6 messages) and one for u; v's
  // joined call failed, then each of v's ran alone (in whatever order the
  // callers queued).
  std::lock_guard<std::mutex> lock(mu);
  std::sort(calls.begin(), calls.end());
  const std::vector<std::pair<std::string, std::size_t>> want = {
      {"t", 6}, {"u", 1}, {"v", 1}, {"v", 1}, {"v", 2}};
  EXPECT_EQ(calls, want);
  EXPECT_EQ(engine.committed(), std::vector<int>{0});
}

// Sends to queue 1, one per element of `messages`, each started on a thread
// of its own.
std::vector<std::future<Result<std::vector<SendResult>>>> StartSends(
    WriteBatcher& batcher, const std::vector<std::vector<Message>>& messages) {
  std::vector<std::future<Result<std::vector<SendResult>>>> out;
  for (const auto& m : messages) {
    out.push_back(std::async(std::launch::async, [&batcher, m] {
      return batcher.Send({.queue_id = 1, .messages = m});
    }));
  }
  return out;
}

// Holds every write of `engine`, then starts two single-message senders
// (ids 0 and 1), the second once the first is in its transaction. Both
// lead (two callers in all: waiting could share nothing), so both end up
// held at once; returns their futures, or, when they were not (then
// everything is released and answered), none.
std::vector<std::future<Result<std::vector<SendResult>>>> TwoHeldSenders(
    FakeEngine& engine, WriteBatcher& batcher) {
  engine.HoldEveryWrite();
  auto out = StartSends(batcher, {Numbered(1, 0, 1)});
  bool held = engine.WaitUntilHolding(1);
  if (held) {
    auto second = StartSends(batcher, {Numbered(1, 1, 1)});
    out.push_back(std::move(second[0]));
    held = engine.WaitUntilHolding(2);
  }
  if (held) return out;
  engine.Release();
  for (auto& f : out) f.wait();
  return {};
}

TEST(WriteBatcher, ASmallSendBesideTheOnlyOtherSendersGroupLeadsItsOwn) {
  FakeEngine engine;
  SendRecorder recorder(engine);
  WriteBatcher batcher(engine, 512, /*max_leaders=*/4);
  // Two callers in all: the second could share nothing with the first,
  // which is already in its transaction, so it does not wait for it (two
  // single-message senders each get a transaction of their own).
  auto senders = TwoHeldSenders(engine, batcher);
  ASSERT_EQ(senders.size(), 2u) << "the two sends were not held at once";
  EXPECT_EQ(batcher.TEST_peak_leaders(), 2);
  engine.Release();
  for (auto& f : senders) {
    auto r = f.get();
    ASSERT_OK(r.status());
    EXPECT_EQ(r->size(), 1u);
  }
  EXPECT_EQ(recorder.calls().size(), 2u);
  EXPECT_EQ(engine.writes(), 2);
}

TEST(WriteBatcher, SmallSendsBesideRunningLeadersWaitAndJoinOneOfTheirGroups) {
  FakeEngine engine;
  SendRecorder recorder(engine);
  WriteBatcher batcher(engine, 512, /*max_leaders=*/4);
  // Two senders lead groups of their own (the test above); held there.
  auto leaders = TwoHeldSenders(engine, batcher);
  ASSERT_EQ(leaders.size(), 2u) << "the two sends were not held at once";
  // Places for two more leaders are free, but five more single-message
  // sends are too little for a group of their own each: they wait, and
  // join one of the running groups of sends to their queue as it opens its
  // transaction (JoinLate): one call for the six.
  std::vector<std::vector<Message>> more;
  for (int i = 0; i < 5; ++i) more.push_back(Numbered(1, 10 + i, 1));
  auto waiting = StartSends(batcher, more);
  ASSERT_TRUE(WaitUntilQueued(batcher, more.size()));
  engine.Release();
  for (auto& f : leaders) ASSERT_OK(f.get().status());
  for (std::size_t i = 0; i < waiting.size(); ++i) {
    auto r = waiting[i].get();
    ASSERT_OK(r.status());
    ASSERT_EQ(r->size(), 1u);
    EXPECT_EQ((*r)[0].id, 10 + static_cast<std::int64_t>(i));
  }
  std::vector<std::size_t> sizes;
  for (const auto& c : recorder.calls()) sizes.push_back(c.size);
  std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(sizes, (std::vector<std::size_t>{1, 6}));
  EXPECT_EQ(engine.writes(), 2);
  EXPECT_EQ(batcher.TEST_peak_leaders(), 2);
}

TEST(WriteBatcher, LargeSendsLeadBesideARunningLeader) {
  FakeEngine engine;
  SendRecorder recorder(engine);
  WriteBatcher batcher(engine, 512, /*max_leaders=*/4);
  engine.HoldNextWrite();
  auto leader_op = engine.Append(0);
  auto leader =
      std::async(std::launch::async, [&] { return batcher.Run(leader_op); });
  engine.WaitUntilHeld();
  // Each send has enough for a group of its own: the three run while the
  // first leader is still held.
  for (int i = 0; i < 3; ++i) {
    const auto messages =
        Numbered(1, 100 * i, static_cast<int>(WriteBatcher::kMinGroupWeight));
    auto r = batcher.Send({.queue_id = 1, .messages = messages});
    ASSERT_OK(r.status());
    EXPECT_EQ(r->size(), messages.size());
  }
  EXPECT_EQ(recorder.calls().size(), 3u);
  engine.Release();
  EXPECT_OK(leader.get());
  EXPECT_EQ(batcher.TEST_peak_leaders(), 2);
}

TEST(WriteBatcher, SendsQueuedWhileASendGroupOpensItsTransactionJoinIt) {
  FakeEngine engine;
  SendRecorder recorder(engine);
  WriteBatcher batcher(engine, 512, /*max_leaders=*/1);
  // The first send leads; its transaction is held open before it asks for
  // its messages, while three more sends queue up behind it.
  engine.HoldNextWrite();
  const auto first_messages = Numbered(1, 0, 1);
  auto first = std::async(std::launch::async, [&] {
    return batcher.Send({.queue_id = 1, .messages = first_messages});
  });
  engine.WaitUntilHeld();
  std::vector<std::vector<Message>> later;
  for (int i = 1; i <= 3; ++i) later.push_back(Numbered(1, i, 1));
  std::vector<std::future<Result<std::vector<SendResult>>>> results;
  for (const auto& m : later) {
    results.push_back(std::async(std::launch::async, [&] {
      return batcher.Send({.queue_id = 1, .messages = m});
    }));
  }
  EXPECT_TRUE(WaitUntilQueued(batcher, later.size()));
  engine.Release();
  auto r = first.get();
  ASSERT_OK(r.status());
  EXPECT_EQ((*r)[0].id, 0);
  for (std::size_t i = 0; i < results.size(); ++i) {
    auto got = results[i].get();
    ASSERT_OK(got.status());
    EXPECT_EQ((*got)[0].id, static_cast<std::int64_t>(i + 1));
  }
  // All four in the held transaction's one call.
  const auto calls = recorder.calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].size, 4u);
  EXPECT_EQ(engine.writes(), 1);
}

TEST(WriteBatcher, TwoConsumersClaimingOneEachRunSideBySideWhileASendWaits) {
  FakeEngine engine;
  SendRecorder recorder(engine);
  std::atomic<std::int64_t> next_id{1};
  engine.claim_hook = [&](const ClaimParams& p) -> Result<ClaimOutcome> {
    ClaimOutcome out;
    for (int i = 0; i < p.max; ++i) {
      out.messages.push_back({.id = next_id++, .attempt = 1});
    }
    return out;
  };
  WriteBatcher batcher(engine, 512, /*max_leaders=*/4);
  engine.HoldEveryWrite();
  const WriteBatcher::ClaimRequest request{
      .params = {.queue_id = 1,
                 .max = 1,
                 .lease = std::chrono::seconds(30),
                 .token = 7,
                 .max_attempts = 5}};
  // The second claim does not wait for the first's transaction (where it
  // could not join the first's engine claim): both are held in theirs at
  // once.
  auto first =
      std::async(std::launch::async, [&] { return batcher.Claim(request); });
  ASSERT_TRUE(engine.WaitUntilHolding(1));
  auto second =
      std::async(std::launch::async, [&] { return batcher.Claim(request); });
  ASSERT_TRUE(engine.WaitUntilHolding(2));
  // A single-message send with two callers about waits to share a running
  // leader's next commit rather than start a third transaction.
  auto send = StartSends(batcher, {Numbered(1, 50, 1)});
  ASSERT_TRUE(WaitUntilQueued(batcher, 1));
  engine.Release();
  std::set<std::int64_t> ids;
  for (auto* f : {&first, &second}) {
    auto r = f->get();
    ASSERT_OK(r.status());
    ASSERT_EQ(r->outcome.messages.size(), 1u);
    ids.insert(r->outcome.messages[0].id);
  }
  EXPECT_EQ(ids, (std::set<std::int64_t>{1, 2}));
  auto sent = send[0].get();
  ASSERT_OK(sent.status());
  ASSERT_EQ(sent->size(), 1u);
  EXPECT_EQ((*sent)[0].id, 50);
  EXPECT_EQ(engine.writes(), 3);
  EXPECT_EQ(batcher.TEST_peak_leaders(), 2);
}

// Claims of one queue queued behind a held leader: an engine that hands out
// ids in order, and acks that succeed unless the receipt's id is 99.
TEST(WriteBatcher, ClaimsOfOneQueueInAGroupAreOneEngineClaim) {
  bool merged = false;
  for (int round = 0; round < kRounds && !merged; ++round) {
    FakeEngine engine;
    std::mutex mu;
    std::int64_t next_id = 1;
    std::vector<ClaimParams> calls;
    engine.claim_hook = [&](const ClaimParams& p) -> Result<ClaimOutcome> {
      std::lock_guard<std::mutex> lock(mu);
      calls.push_back(p);
      ClaimOutcome out;
      for (int i = 0; i < p.max; ++i) {
        out.messages.push_back({.id = next_id++, .attempt = 1});
      }
      return out;
    };
    engine.ack_hook =
        [](const AckManyParams& p) -> Result<std::vector<Status>> {
      std::vector<Status> out;
      for (const Receipt& r : p.receipts) {
        out.push_back(r.id == 99 ? Status::FailedPrecondition("stale")
                                 : Status::Ok());
      }
      return out;
    };
    WriteBatcher batcher(engine, 512, /*max_leaders=*/1);
    auto claim = [](int max, std::size_t max_bytes,
                    std::optional<Receipt> ack = std::nullopt) {
      return WriteBatcher::ClaimRequest{
          .params = {.queue_id = 1,
                     .max = max,
                     .lease = std::chrono::seconds(30),
                     .token = 7,
                     .max_attempts = 5,
                     .max_bytes = max_bytes},
          .ack = ack};
    };
    // Three that combine (a byte limit does not matter for one message),
    // one whose ack is refused, one of two messages with a byte limit.
    const std::vector<WriteBatcher::ClaimRequest> requests = {
        claim(1, 0), claim(2, 0, Receipt{.id = 5, .attempt = 1, .token = 1}),
        claim(1, 4096),
        claim(1, 0, Receipt{.id = 99, .attempt = 1, .token = 1}),
        claim(2, 4096)};
    engine.HoldNextWrite();
    auto leader_op = engine.Append(0);
    auto leader =
        std::async(std::launch::async, [&] { return batcher.Run(leader_op); });
    engine.WaitUntilHeld();
    std::latch started(static_cast<std::ptrdiff_t>(requests.size()));
    std::vector<std::future<Result<WriteBatcher::Claimed>>> results;
    for (const auto& r : requests) {
      results.push_back(std::async(std::launch::async, [&] {
        started.count_down();
        return batcher.Claim(r);
      }));
    }
    started.wait();
    engine.Release();
    EXPECT_OK(leader.get());
    std::set<std::int64_t> ids;
    std::size_t handed = 0;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      auto r = results[i].get();
      if (i == 3) {
        EXPECT_CODE(r.status(), Code::kFailedPrecondition);
        continue;
      }
      ASSERT_OK(r);
      EXPECT_EQ(r->outcome.messages.size(),
                static_cast<std::size_t>(requests[i].params.max));
      for (const auto& m : r->outcome.messages) ids.insert(m.id);
      handed += r->outcome.messages.size();
    }
    EXPECT_EQ(ids.size(), handed) << "a message went to two callers";
    int asked = 0, limited_pairs = 0;
    for (const ClaimParams& p : calls) {
      asked += p.max;
      // A byte limit stays only with a claim that runs alone: a combined
      // claim has none (only the lone claim of two may ask for two with a
      // limit).
      if (p.max > 2) {
        EXPECT_EQ(p.max_bytes, 0u);
      }
      if (p.max == 2 && p.max_bytes != 0) ++limited_pairs;
    }
    EXPECT_LE(limited_pairs, 1);
    EXPECT_EQ(asked, 1 + 2 + 1 + 2) << "the refused caller's share was claimed";
    merged = calls.size() < requests.size() - 1;
  }
  EXPECT_TRUE(merged) << "in " << kRounds
                      << " rounds, no two claims shared an engine claim";
}

// A group of producers' sends to one queue and consumers' claims (one
// acking first), queued behind a held leader: one engine call stores the
// sends, in the callers' order, before one claim for every claimer, and
// each caller gets its own share. When the engine stores the sends but
// leaves the claim to the caller, the claims go the general way, and the
// sends are not stored twice.
TEST(WriteBatcher, SendsAndClaimsInAGroupAreOneEngineCall) {
  enum class Claim { kDone, kGeneral, kFailed };
  for (const Claim how : {Claim::kDone, Claim::kGeneral, Claim::kFailed}) {
    const bool claim_too = how == Claim::kDone;
    SCOPED_TRACE(claim_too                ? "one call"
                 : how == Claim::kGeneral ? "claims the general way"
                                          : "the claim failed after the sends");
    FakeEngine engine;
    SendRecorder recorder(engine);  // the general way's sends
    std::mutex mu;
    std::vector<std::vector<std::string>> sent_calls;
    std::vector<ClaimParams> combined_claims, general_claims;
    std::vector<std::size_t> acked;
    auto lease = [](int first, int n) {
      ClaimOutcome out;
      for (int i = 0; i < n; ++i) {
        out.messages.push_back({.id = first + i, .attempt = 1});
      }
      return out;
    };
    engine.sends_claim_hook =
        [&](Engine::SendsFirst& sends, const ClaimParams& p,
            const AckManyParams& acks, std::span<const int> gates)
        -> Result<std::optional<Engine::ClaimCommitted>> {
      std::lock_guard<std::mutex> lock(mu);
      std::vector<std::string> payloads;
      std::vector<SendResult> ids;
      for (const Message& m : sends.to.messages) {
        payloads.push_back(m.payload);
        ids.push_back({.id = std::stoll(m.payload.substr(2))});
      }
      sent_calls.push_back(payloads);
      EXPECT_EQ(sends.to.queue_id, 1);
      sends.sent = ids;
      if (how == Claim::kFailed) return Status::NotFound("queue dropped");
      if (!claim_too) return std::optional<Engine::ClaimCommitted>();
      combined_claims.push_back(p);
      EXPECT_EQ(gates.size(), acks.receipts.size());
      Engine::ClaimCommitted done{
          .acks = std::vector<Status>(acks.receipts.size(), Status::Ok()),
          .outcome = lease(100, p.max)};
      return std::optional<Engine::ClaimCommitted>(std::move(done));
    };
    engine.claim_hook = [&](const ClaimParams& p) -> Result<ClaimOutcome> {
      std::lock_guard<std::mutex> lock(mu);
      general_claims.push_back(p);
      return lease(200, p.max);
    };
    engine.ack_hook =
        [&](const AckManyParams& p) -> Result<std::vector<Status>> {
      std::lock_guard<std::mutex> lock(mu);
      acked.push_back(p.receipts.size());
      return std::vector<Status>(p.receipts.size(), Status::Ok());
    };
    WriteBatcher batcher(engine, 512, /*max_leaders=*/1);
    engine.HoldNextWrite();
    auto leader_op = engine.Append(0);
    auto leader =
        std::async(std::launch::async, [&] { return batcher.Run(leader_op); });
    engine.WaitUntilHeld();
    const std::vector<Message> first = Numbered(1, 10, 2);
    const std::vector<Message> second = Numbered(1, 20, 1);
    auto send = [&](const std::vector<Message>& m) {
      return std::async(std::launch::async, [&batcher, &m] {
        return batcher.Send({.queue_id = 1, .messages = m});
      });
    };
    auto claim = [&](std::optional<Receipt> ack) {
      return std::async(std::launch::async, [&batcher, ack] {
        return batcher.Claim({.params = {.queue_id = 1,
                                         .max = 1,
                                         .lease = std::chrono::seconds(30),
                                         .token = 7,
                                         .max_attempts = 5},
                              .ack = ack});
      });
    };
    // In this order in the queue: send, claim, send, claim with an ack.
    auto s1 = send(first);
    ASSERT_TRUE(WaitUntilQueued(batcher, 1));
    auto c1 = claim(std::nullopt);
    ASSERT_TRUE(WaitUntilQueued(batcher, 2));
    auto s2 = send(second);
    ASSERT_TRUE(WaitUntilQueued(batcher, 3));
    auto c2 = claim(Receipt{.id = 5, .attempt = 1, .token = 1});
    ASSERT_TRUE(WaitUntilQueued(batcher, 4));
    engine.Release();
    EXPECT_OK(leader.get());
    auto r1 = s1.get();
    auto r2 = s2.get();
    ASSERT_OK(r1.status());
    ASSERT_OK(r2.status());
    ASSERT_EQ(r1->size(), 2u);
    EXPECT_EQ((*r1)[0].id, 10);
    EXPECT_EQ((*r1)[1].id, 11);
    ASSERT_EQ(r2->size(), 1u);
    EXPECT_EQ((*r2)[0].id, 20);
    auto k1 = c1.get();
    auto k2 = c2.get();
    if (how == Claim::kFailed) {
      // The sends were stored; the claimers get the claim's error.
      EXPECT_CODE(k1.status(), Code::kNotFound);
      EXPECT_CODE(k2.status(), Code::kNotFound);
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_EQ(sent_calls.size(), 1u);
      EXPECT_TRUE(general_claims.empty());
      continue;
    }
    ASSERT_OK(k1.status());
    ASSERT_OK(k2.status());
    ASSERT_EQ(k1->outcome.messages.size(), 1u);
    ASSERT_EQ(k2->outcome.messages.size(), 1u);
    const std::int64_t base = claim_too ? 100 : 200;
    EXPECT_EQ(k1->outcome.messages[0].id, base);
    EXPECT_EQ(k2->outcome.messages[0].id, base + 1);
    std::lock_guard<std::mutex> lock(mu);
    // The sends once, joined in their callers' order, and never again the
    // general way.
    EXPECT_EQ(
        sent_calls,
        (std::vector<std::vector<std::string>>{{"1:10", "1:11", "1:20"}}));
    EXPECT_TRUE(recorder.calls().empty());
    if (claim_too) {
      ASSERT_EQ(combined_claims.size(), 1u);
      EXPECT_EQ(combined_claims[0].max, 2);
      EXPECT_TRUE(general_claims.empty());
      EXPECT_TRUE(acked.empty());
      EXPECT_EQ(engine.writes(), 1);  // the held leader's alone
    } else {
      ASSERT_EQ(general_claims.size(), 1u);
      EXPECT_EQ(general_claims[0].max, 2);
      EXPECT_EQ(acked, std::vector<std::size_t>{1});
      EXPECT_EQ(engine.writes(), 2);  // and the claims' transaction
    }
  }
}

// ClaimThen callers of one message each, queued behind a held leader in
// a batcher of groups of one (so that they are more groups than a leader
// runs before it hands the lead on), and their answers.
class ClaimThenBehindALeader {
 public:
  ClaimThenBehindALeader() {
    engine_.claim_hook = [this](const ClaimParams& p) -> Result<ClaimOutcome> {
      std::lock_guard<std::mutex> lock(mu_);
      ClaimOutcome out;
      for (int i = 0; i < p.max; ++i) {
        out.messages.push_back({.id = next_id_++, .attempt = 1});
      }
      return out;
    };
  }
  WriteBatcher& batcher() { return batcher_; }
  static WriteBatcher::ClaimRequest Request() {
    return {
        .params = {.queue_id = 1, .max = 1, .lease = std::chrono::seconds(30)}};
  }
  // Holds a leader's write, then queues `n` ClaimThen callers behind it;
  // true once they are queued, all unanswered.
  bool QueueBehindAHeldLeader(int n) {
    engine_.HoldNextWrite();
    leader_ = std::async(std::launch::async,
                         [this] { return batcher_.Run(leader_op_); });
    engine_.WaitUntilHeld();
    for (int i = 0; i < n; ++i) {
      batcher_.ClaimThen(Request(), [this](Result<WriteBatcher::Claimed> r) {
        std::lock_guard<std::mutex> lock(mu_);
        answers_.push_back(std::move(r));
        answered_.notify_all();
      });
    }
    if (!WaitUntilQueued(batcher_, static_cast<std::size_t>(n))) return false;
    std::lock_guard<std::mutex> lock(mu_);
    return answers_.empty();
  }
  // Lets the leader go; its own call's status.
  Status ReleaseTheLeader() {
    engine_.Release();
    return leader_.get();
  }
  // Waits (up to 30 s) for `n` answers; the ids of their messages, one
  // each, or nullopt when they did not all come.
  std::optional<std::set<std::int64_t>> Answers(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!answered_.wait_for(lock, std::chrono::seconds(30), [&] {
          return answers_.size() == static_cast<std::size_t>(n);
        })) {
      ADD_FAILURE() << "ClaimThen callers were left unanswered";
      return std::nullopt;
    }
    std::set<std::int64_t> ids;
    for (auto& a : answers_) {
      EXPECT_OK(a.status());
      if (!a.ok()) continue;
      EXPECT_EQ(a->outcome.messages.size(), 1u);
      for (const auto& m : a->outcome.messages) ids.insert(m.id);
    }
    return ids;
  }

 private:
  FakeEngine engine_;
  WriteBatcher batcher_{engine_, /*max_group=*/1, /*max_leaders=*/1};
  std::function<Status(Conn&)> leader_op_ = engine_.Append(0);
  std::future<Status> leader_;
  std::mutex mu_;
  std::int64_t next_id_ = 1;  // guarded by mu_
  std::condition_variable answered_;
  std::vector<Result<WriteBatcher::Claimed>> answers_;  // guarded by mu_
};

// ClaimThen callers queued behind a running leader have no thread to lead
// with: a leader hands the lead only to a caller a thread waits for, and
// never appoints them, as the runner's threads may all be waiting for that
// very group (a server's database pool). Each gets its own message, once.
TEST(WriteBatcher, ClaimThenCallersAreLedByThreadsThatWait) {
  ClaimThenBehindALeader t;
  // A runner that never runs anything: threads all busy.
  std::atomic<int> runner_calls{0};
  t.batcher().set_runner([&](std::function<void()>) { ++runner_calls; });
  constexpr int kPending = 6;
  ASSERT_TRUE(t.QueueBehindAHeldLeader(kPending));
  // A caller whose thread waits, behind them.
  auto waiting = std::async(std::launch::async, [&] {
    return t.batcher().Claim(ClaimThenBehindALeader::Request());
  });
  ASSERT_TRUE(WaitUntilQueued(t.batcher(), kPending + 1));
  EXPECT_OK(t.ReleaseTheLeader());
  auto ids = t.Answers(kPending);
  ASSERT_TRUE(ids);
  auto last = waiting.get();
  ASSERT_OK(last.status());
  ASSERT_EQ(last->outcome.messages.size(), 1u);
  ids->insert(last->outcome.messages[0].id);
  EXPECT_EQ(ids->size(), static_cast<std::size_t>(kPending + 1))
      << "a message went to two callers";
  EXPECT_EQ(runner_calls.load(), 0);
  EXPECT_EQ(t.batcher().TEST_peak_leaders(), 1);
}

// A leader with only ClaimThen callers left after its groups gives the
// lead up (its own caller is answered) and a thread of the runner leads
// them.
TEST(WriteBatcher, ClaimThenCallersLeftAfterALeadersGroupsGoToTheRunner) {
  ClaimThenBehindALeader t;
  // Ended (what it runs finished) before the batcher goes.
  test::TaskThreads runner(1);
  t.batcher().set_runner(runner.AsRunner());
  constexpr int kPending = 9;
  ASSERT_TRUE(t.QueueBehindAHeldLeader(kPending));
  EXPECT_OK(t.ReleaseTheLeader());
  auto ids = t.Answers(kPending);
  ASSERT_TRUE(ids);
  EXPECT_EQ(ids->size(), static_cast<std::size_t>(kPending))
      << "a message went to two callers";
  EXPECT_GE(runner.posted(), 1) << "nobody asked the runner to lead";
  EXPECT_EQ(t.batcher().TEST_peak_leaders(), 1);
}

}  // namespace
}  // namespace sqlq::core
