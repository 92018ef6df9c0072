#include "core/send_combiner.h"

#include <utility>
#include <vector>

namespace sqlq::core {

Result<std::vector<SendResult>> SendCombiner::Send(
    WriteBatcher& batcher, std::span<const Message> messages,
    const SendFn& send) {
  std::size_t bytes = 0;
  for (const Message& m : messages) bytes += m.payload.size();
  if (messages.size() > kMaxMessages || bytes > kMaxBytes) {
    std::optional<std::vector<SendResult>> out;
    Status s = batcher.Run([&](Conn& conn) -> Status {
      auto r = send(conn, messages);
      if (!r.ok()) return r.status();
      out = std::move(*r);
      return Status::Ok();
    });
    if (!s.ok()) return s;
    return std::move(*out);
  }

  Request self{.messages = messages};
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiting_.push_back(&self);
  }
  // Decided the first time our operation runs (a transaction that is run
  // again, after a deadlock, runs it again with the same decision).
  enum class Role { kUndecided, kCarrier, kPassenger } role = Role::kUndecided;
  std::vector<Request*> carried;
  std::vector<Message> joined;
  std::vector<SendResult> results;
  Status s = batcher.Run([&](Conn& conn) -> Status {
    if (role == Role::kUndecided) {
      std::lock_guard<std::mutex> lock(mu_);
      if (self.taken) {
        role = Role::kPassenger;
      } else {
        role = Role::kCarrier;
        carried = std::move(waiting_);
        waiting_.clear();
        for (Request* r : carried) r->taken = true;
      }
    }
    if (role == Role::kPassenger) return Status::Ok();
    std::span<const Message> all = self.messages;
    if (carried.size() > 1) {
      if (joined.empty()) {
        for (Request* r : carried) {
          joined.insert(joined.end(), r->messages.begin(), r->messages.end());
        }
      }
      all = joined;
    }
    auto r = send(conn, all);
    if (!r.ok()) return r.status();
    results = std::move(*r);
    return Status::Ok();
  });

  std::unique_lock<std::mutex> lock(mu_);
  if (role == Role::kCarrier) {
    std::size_t at = 0;
    for (Request* r : carried) {
      if (!s.ok()) {
        r->result = s;
      } else {
        r->result = std::vector<SendResult>(
            results.begin() + static_cast<std::ptrdiff_t>(at),
            results.begin() +
                static_cast<std::ptrdiff_t>(at + r->messages.size()));
      }
      at += r->messages.size();
      r->done = true;
    }
    answered_.notify_all();
  }
  if (role == Role::kUndecided && !self.taken) {
    // Our operation never ran (the transaction could not even begin, e.g.
    // the server is unreachable) and nobody carried our messages: take them
    // back and report why.
    std::erase(waiting_, &self);
    return s.ok() ? Status::Internal("send: not run") : s;
  }
  // A passenger's own transaction carried nothing of it: its outcome is
  // the carrier's.
  answered_.wait(lock, [&] { return self.done; });
  return std::move(self.result);
}

}  // namespace sqlq::core
