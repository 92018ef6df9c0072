// Results and progress of jobs (docs/semantics.md "Results"): an ack that
// keeps the job's result in its own transaction, progress recorded under
// the job's lease, and reads of both that can wait for the job to end.
//
// Both go into one row of sqlq_results per message (ResultOps), which only
// these calls touch: a claim, a plain ack and a nack cost what they did.
// The progress value and note are kept as one JSON text, so that a new
// field needs no migration.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "core/receipt.h"
#include "core/rows.h"
#include "core/store_impl.h"
#include "sqlq/queue.h"

namespace sqlq {

namespace {

// How long a progress row is kept after its last report, when the job
// completes without a result (or never completes).
constexpr Duration kProgressTtl = std::chrono::hours(24);
// The longest wait ReadResult takes.
constexpr Duration kMaxResultWait = std::chrono::hours(1);

std::string EncodeProgress(double progress, std::string_view note) {
  nlohmann::json j = {{"progress", progress}};
  if (!note.empty()) j["note"] = std::string(note);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void DecodeProgress(const std::string& text, JobResult& out) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return;
  if (auto it = j.find("progress"); it != j.end() && it->is_number()) {
    out.progress = it->get<double>();
  }
  if (auto it = j.find("note"); it != j.end() && it->is_string()) {
    out.note = it->get<std::string>();
  }
}

}  // namespace

std::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kReady:
      return "ready";
    case JobState::kDelayed:
      return "delayed";
    case JobState::kLeased:
      return "leased";
    case JobState::kCompleted:
      return "completed";
    case JobState::kDead:
      return "dead";
    case JobState::kWaiting:
      return "waiting";
  }
  return "ready";
}

Status WorkQueue::Progress(std::string_view receipt, double progress,
                           std::string_view note) {
  if (!std::isfinite(progress)) {
    return Status::InvalidArgument("progress must be a finite number");
  }
  if (note.size() > kMaxProgressNote) {
    return Status::TooLarge(
        fmt::format("a progress note of {} bytes exceeds the limit of {}",
                    note.size(), kMaxProgressNote));
  }
  auto parsed = core::ParseReceipt(receipt);
  if (!parsed.ok()) return parsed.status();
  const std::string text = EncodeProgress(progress, note);
  return impl_->store().batcher().Run([&](core::Conn& conn) {
    return impl_->store().engine().SaveProgress(
        conn, {.queue_id = impl_->id(),
               .receipt = *parsed,
               .progress = text,
               .ttl = core::Micros(kProgressTtl)});
  });
}

JobEndWatch::~JobEndWatch() { queue_->store().results().Unwatch(id_); }

std::unique_ptr<JobEndWatch> WorkQueue::WatchJobEnd(
    std::int64_t id, std::function<void()> on_end) {
  const std::uint64_t watch =
      impl_->store().results().Watch(impl_->id(), id, std::move(on_end));
  return std::unique_ptr<JobEndWatch>(new JobEndWatch(impl_, watch));
}

Result<JobResult> WorkQueue::ReadResult(std::int64_t id, Duration wait) {
  if (id <= 0) {
    return Status::InvalidArgument(
        fmt::format("message id {} is not positive", id));
  }
  if (wait < Duration(0) || wait > kMaxResultWait) {
    return Status::InvalidArgument(
        fmt::format("wait {} ms is out of range (0..{} ms)", wait.count(),
                    kMaxResultWait.count()));
  }
  using Steady = std::chrono::steady_clock;
  const auto deadline = Steady::now() + wait;
  core::ResultBell& bell = impl_->store().results();
  Duration next = kResultFirstLook;
  for (;;) {
    const std::uint64_t rung = bell.rung();
    // The message first, its result row after: a job acked between the two
    // reads is gone from the first and has its result (written in the
    // ack's transaction) in the second, whatever the isolation level. The
    // other order could find neither.
    auto info = Get(id);
    if (!info.ok() && info.status().code() != Code::kNotFound) {
      return info.status();
    }
    auto record = core::SnapshotRead<std::optional<core::ResultRecord>>(
        impl_->store(), [&](core::ResultOps& e, core::Conn& c) {
          return e.ReadResult(c, impl_->id(), id);
        });
    if (!record.ok()) return record.status();
    JobResult out{.id = id};
    if (*record && !(*record)->progress.empty()) {
      DecodeProgress((*record)->progress, out);
      out.progress_at = core::FromUs((*record)->progress_us);
    }
    if (info.ok()) out.attempts = info->attempts;
    bool known = true;
    if (*record && (*record)->result) {
      out.state = JobState::kCompleted;
      out.result = std::move((*record)->result);
      out.completed_at = core::FromUs((*record)->completed_us);
    } else if (!info.ok()) {
      known = false;
    } else {
      switch (info->state) {
        case MessageState::kReady:
          out.state = JobState::kReady;
          break;
        case MessageState::kDelayed:
          out.state = JobState::kDelayed;
          break;
        case MessageState::kLeased:
          out.state = JobState::kLeased;
          break;
        case MessageState::kDead:
          out.state = JobState::kDead;
          out.error = info->last_error;
          break;
        case MessageState::kArchived:
          out.state = JobState::kCompleted;
          out.completed_at = info->completed_at;
          break;
        case MessageState::kWaiting:
          out.state = JobState::kWaiting;
          break;
      }
    }
    if (!known) {
      return Status::NotFound(fmt::format(
          "queue '{}' knows nothing of job {}: never sent, deleted, acked "
          "without a result, or its result ran out",
          name(), id));
    }
    const auto now = Steady::now();
    if (out.ended() || now >= deadline) return out;
    bell.WaitPast(rung, std::min(deadline, now + next));
    next = std::min(next * 2, kResultLookEvery);
  }
}

}  // namespace sqlq
