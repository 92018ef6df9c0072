// Worker: prefetching claims and acks deferred into the next claim's
// transaction (include/sqlq/worker.h).

#include "sqlq/worker.h"

#include <fmt/format.h>

#include "core/receipt.h"
#include "core/store_impl.h"
#include "core/validate.h"

namespace sqlq {

namespace {

// The receipts of `texts`, which Done checked.
std::vector<core::Receipt> Parse(const std::vector<std::string>& texts) {
  std::vector<core::Receipt> out;
  out.reserve(texts.size());
  for (const std::string& t : texts) {
    auto r = core::ParseReceipt(t);
    if (r.ok()) out.push_back(*r);
  }
  return out;
}

}  // namespace

Worker::Worker(WorkQueue queue, WorkerOptions options)
    : queue_(std::move(queue)), options_(std::move(options)) {
  invalid_ = core::ValidateClaim({.max = options_.prefetch,
                                  .lease = options_.lease,
                                  .worker = options_.worker});
  if (!invalid_.ok()) {
    invalid_ = Status::InvalidArgument("worker: " + invalid_.message());
  }
}

Worker::~Worker() { (void)Close(); }

void Worker::Count(const std::vector<Status>& statuses) {
  for (const Status& s : statuses) {
    if (s.ok()) continue;
    ++refused_acks_;
    last_refusal_ = s;
  }
}

Result<std::optional<ClaimedMessage>> Worker::Next(Duration wait,
                                                   ClaimNote* note) {
  if (!invalid_.ok()) return invalid_;
  if (note != nullptr) *note = ClaimNote{};
  // The snapshot's lease, not a copy of every option (they hold strings).
  const Duration lease =
      options_.lease.value_or(queue_.impl_->Current()->options.lease);
  while (!buffer_.empty()) {
    Prefetched p = std::move(buffer_.front());
    buffer_.pop_front();
    // Renewed once less than half of the lease is left, so that the
    // message is handed out with at least that much.
    if (std::chrono::steady_clock::now() - p.claimed > lease / 2) {
      auto until = queue_.Extend(p.message.receipt, lease);
      if (!until.ok()) {
        // Gone to another consumer (the lease ran out meanwhile): not ours
        // to hand out. Any other error is the caller's to see.
        if (core::IsCleanFailure(until.status())) continue;
        buffer_.push_front(std::move(p));
        return until.status();
      }
      p.message.lease_expires_at = *until;
    }
    return std::optional<ClaimedMessage>(std::move(p.message));
  }
  const ClaimOptions o{.max = options_.prefetch,
                       .lease = options_.lease,
                       .wait = wait,
                       .worker = options_.worker};
  Status s = core::ValidateClaim(o);
  if (!s.ok()) return s;
  const std::vector<core::Receipt> done = Parse(done_);
  std::vector<Status> statuses;
  auto r = core::ClaimWaiting(*queue_.impl_, o,
                              {.done = done, .done_status = &statuses}, note);
  // The acks committed with the first look when it reported on them, even
  // if a later look (while waiting) failed.
  if (statuses.size() == done.size()) {
    Count(statuses);
    done_.clear();
  }
  if (!r.ok()) return r.status();
  if (!done.empty()) core::AfterAcks(queue_, *queue_.impl_);
  if (r->empty()) return std::optional<ClaimedMessage>();
  const auto now = std::chrono::steady_clock::now();
  for (std::size_t i = 1; i < r->size(); ++i) {
    buffer_.push_back({.message = std::move((*r)[i]), .claimed = now});
  }
  return std::optional<ClaimedMessage>(std::move(r->front()));
}

Status Worker::Done(const ClaimedMessage& message) {
  auto parsed = core::ParseReceipt(message.receipt);
  if (!parsed.ok()) return parsed.status();
  done_.push_back(message.receipt);
  return Status::Ok();
}

Result<NackOutcome> Worker::Fail(const ClaimedMessage& message,
                                 const NackOptions& options) {
  return queue_.Nack(message.receipt, options);
}

Status Worker::Flush() {
  if (done_.empty()) return Status::Ok();
  auto r = queue_.AckBatch(done_);
  if (!r.ok()) return r.status();
  done_.clear();
  Count(*r);
  for (const Status& s : *r) {
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Status Worker::Close() {
  Status flushed = Flush();
  if (buffer_.empty()) return flushed;
  core::QueueImpl& impl = *queue_.impl_;
  std::int64_t released = 0;
  // One transaction for all of them; one that is no longer ours (its lease
  // ran out and another consumer took it) is skipped.
  Status s = impl.store().batcher().Run([&](core::Conn& conn) -> Status {
    released = 0;
    for (const Prefetched& p : buffer_) {
      auto receipt = core::ParseReceipt(p.message.receipt);
      if (!receipt.ok()) continue;
      Status one = impl.store().engine().Retry(
          conn, {.queue_id = impl.id(), .receipt = *receipt, .release = true});
      if (one.ok()) {
        ++released;
      } else if (!core::IsCleanFailure(one)) {
        return one;
      }
    }
    return Status::Ok();
  });
  if (s.ok()) {
    buffer_.clear();
    impl.store().hub().Notify(impl.id(), released);
  }
  return flushed.ok() ? s : flushed;
}

}  // namespace sqlq
