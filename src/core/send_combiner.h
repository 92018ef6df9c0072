// SendCombiner: concurrent sends to one queue become one engine Send.
//
// Group commit (write_batcher.h) already puts concurrent callers in one
// transaction, but runs their operations one after the other: 48 merged
// single-message sends were 48 INSERT round trips before their one commit.
// Here the first send of a group to run takes every send to the queue that
// is waiting at that moment and stores all their messages with one engine
// Send (on PostgreSQL one INSERT ... SELECT FROM unnest), in the order the
// callers arrived; each caller then gets its own slice of the results, after
// the transaction that carried its messages committed (or its error). The
// operations of callers whose messages were carried by another do nothing.
// Only small sends are combined (kMaxMessages, kMaxBytes), so that large
// batches are never copied.
//
// Thread-safe.

#ifndef SQLQ_CORE_SEND_COMBINER_H_
#define SQLQ_CORE_SEND_COMBINER_H_

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "core/engine.h"
#include "core/write_batcher.h"

namespace sqlq::core {

class SendCombiner {
 public:
  // Stores `messages` inside the transaction on `conn`.
  using SendFn = std::function<Result<std::vector<SendResult>>(
      Conn& conn, std::span<const Message> messages)>;

  // Sends `messages` through `batcher` (possibly together with other
  // callers' messages) and returns once they are committed, with one result
  // per message in order, or the error that kept them from being stored.
  Result<std::vector<SendResult>> Send(WriteBatcher& batcher,
                                       std::span<const Message> messages,
                                       const SendFn& send);

  static constexpr std::size_t kMaxMessages = 100;
  static constexpr std::size_t kMaxBytes = 64 << 10;

 private:
  struct Request {
    std::span<const Message> messages;
    bool taken = false;  // guarded by mu_: a carrier holds it
    bool done = false;   // guarded by mu_: result is final
    Result<std::vector<SendResult>> result =
        Status::Internal("send: no result");
  };

  std::mutex mu_;
  std::condition_variable answered_;
  std::vector<Request*> waiting_;  // guarded by mu_; not yet taken
};

}  // namespace sqlq::core

#endif  // SQLQ_CORE_SEND_COMBINER_H_
