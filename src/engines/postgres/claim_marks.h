// ClaimMarks: where a queue's claims may start reading the claim index.
//
// The claim index (queue_id, priority DESC, ready_us, id + 0) keeps an entry
// for every row version of a message: the version before its claim, the leased
// one, and so on. Once vacuum removes the dead versions (or, with no older
// snapshot open, index scans mark them dead), claims step over few of them.
// But while any transaction in the cluster holds an old snapshot open,
// nothing can be removed or marked, and a claim that reads the index from
// the queue's start visits the heap for every message processed since that
// snapshot began: its cost grows without bound.
//
// A mark is a claim-order key below which, as far as this store knows, no
// claimable message lies: the last message its claims took in claim order,
// capped at the claim's clock minus a lag. Claims then read from the mark
// (an index bound, docs/engines/postgres.md, "A snapshot held open
// elsewhere"). A message can still appear below a mark:
//  - from a write committed more than the lag after it read the clock
//    (ready_us is at least the writer's clock): this store lowers its marks
//    after its own such commits (Lower); other processes' are caught by the
//    rescan;
//  - from a transaction that locked rows a claim skipped and then rolled
//    back: this store forgets its marks at its own rollbacks (ForgetAll);
//    other processes' are caught by the rescan;
//  - whatever else: a claim that found nothing while the queue's next ready
//    message lies below the mark forgets the mark (ReadyAt).
// The rescan: a claim reads from the queue's start again once the interval
// since the last full read passed; the interval is the last full read's
// cost times kRescanFactor, clamped, so full reads cost at most about one
// part in kRescanFactor of the time however many dead entries they walk.
//
// Marks of a claim are applied only after its transaction committed
// (Advance), and only if no Lower/Forget came between its start and then
// (the epoch): a claim in flight could otherwise move a mark over a message
// written or released meanwhile.
//
// Thread-safe.

#ifndef SQLQ_ENGINES_POSTGRES_CLAIM_MARKS_H_
#define SQLQ_ENGINES_POSTGRES_CLAIM_MARKS_H_

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace sqlq::engines::postgres {

// A position in claim order: priority DESC, ready_us ASC, id ASC.
struct ClaimKey {
  std::int32_t priority = 0;
  std::int64_t ready_us = 0;
  std::int64_t id = 0;
};

// True when `a` comes before `b` in claim order.
bool Before(const ClaimKey& a, const ClaimKey& b);

class ClaimMarks {
 public:
  using SteadyClock = std::chrono::steady_clock;

  struct Options {
    // How long after reading the clock a write may commit and still be
    // found by the marked claims of other processes.
    std::chrono::microseconds lag{50'000};
    // Full reads of the claim index: at least this often...
    std::chrono::milliseconds max_rescan{60'000};
    // ...and no more often than this.
    std::chrono::milliseconds min_rescan{20};
  };
  static constexpr int kRescanFactor = 20;

  // What a claim is to do: read from `from`, or the whole queue when empty.
  struct Plan {
    std::optional<ClaimKey> from;
    std::uint64_t epoch = 0;
  };

  ClaimMarks() = default;
  explicit ClaimMarks(Options o) : options_(o) {}

  const Options& options() const { return options_; }

  Plan Start(std::int64_t queue_id, SteadyClock::time_point now);

  // A claim run with `plan` committed. `last`: the last message it leased,
  // in claim order, if any; `now_us`: the store clock it claimed at;
  // `cost`: how long its statements took.
  void Advance(std::int64_t queue_id, const Plan& plan,
               std::optional<ClaimKey> last, std::int64_t now_us,
               SteadyClock::duration cost, SteadyClock::time_point at);

  // A message with this ready time became claimable in `queue_id` later
  // than marks may assume.
  void Lower(std::int64_t queue_id, std::int64_t ready_us);

  // The queue's next message, of `priority`, is ready at `ready_us`; asked
  // when a claim found nothing. Forgets the mark if that message lies below
  // it (and so is ready already: a mark is never after the clock of the
  // claim that set it).
  void ReadyAt(std::int64_t queue_id, std::int32_t priority,
               std::int64_t ready_us);

  // Read every queue from its start at its next claim (a transaction that
  // held row locks rolled back).
  void ForgetAll();

  // The mark of a queue, if any; for tests.
  std::optional<ClaimKey> TEST_mark(std::int64_t queue_id);

 private:
  struct QueueMark {
    std::optional<ClaimKey> mark;
    // When the next claim reads the whole queue, and how long after the
    // last full read that comes.
    SteadyClock::time_point next_full{};
    SteadyClock::duration interval{};
  };

  const Options options_;
  std::mutex mu_;
  std::uint64_t epoch_ = 0;                             // guarded by mu_
  std::unordered_map<std::int64_t, QueueMark> queues_;  // guarded by mu_
};

}  // namespace sqlq::engines::postgres

#endif  // SQLQ_ENGINES_POSTGRES_CLAIM_MARKS_H_
