// Internals behind the public Store, WorkQueue and Tx handles.

#ifndef SQLQ_CORE_STORE_IMPL_H_
#define SQLQ_CORE_STORE_IMPL_H_

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "core/engine.h"
#include "core/wake_hub.h"
#include "core/write_batcher.h"
#include "sqlq/store.h"

namespace sqlq::core {

class StoreImpl {
 public:
  StoreImpl(std::string url, std::unique_ptr<Engine> engine);
  ~StoreImpl();

  const std::string& url() const { return url_; }
  Engine& engine() { return *engine_; }
  WriteBatcher& batcher() { return batcher_; }
  const WriteBatcher& batcher() const { return batcher_; }
  WakeHub& hub() { return hub_; }
  // How often a waiting claim looks again without being woken: rarely when
  // the engine reports foreign writes, more often when it cannot.
  std::chrono::milliseconds poll_interval() const;

 private:
  std::string url_;
  std::unique_ptr<Engine> engine_;
  WriteBatcher batcher_;
  WakeHub hub_;
};

class QueueImpl {
 public:
  QueueImpl(StoreImpl* store, QueueRecord record)
      : store_(store), record_(std::move(record)) {}

  StoreImpl& store() { return *store_; }
  std::int64_t id() const { return record_.id; }
  const QueueInfo& info() const { return record_.info; }

  // True at most once per interval: whether this ack should also prune the
  // archive (retention is enforced without anyone running a command).
  bool PruneDue() {
    auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    auto due = next_prune_.load(std::memory_order_relaxed);
    if (now < due) return false;
    auto next =
        now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                  std::chrono::minutes(1))
                  .count();
    return next_prune_.compare_exchange_strong(due, next);
  }

 private:
  StoreImpl* store_;
  QueueRecord record_;
  std::atomic<std::int64_t> next_prune_{0};
};

class TxImpl {
 public:
  // `joined`: the transaction is the caller's (Store::JoinTx), who may end
  // it on their own; sqlq then never ends it implicitly.
  TxImpl(StoreImpl* store, std::unique_ptr<Conn> conn, bool joined)
      : store_(store), conn_(std::move(conn)), joined_(joined) {}
  StoreImpl& store() { return *store_; }
  bool joined() const { return joined_; }
  // nullptr once committed or rolled back.
  Conn* conn() { return conn_.get(); }
  std::unique_ptr<Conn> Close() { return std::move(conn_); }
  // Queues this transaction sent to, with how many messages: woken on
  // commit.
  std::map<std::int64_t, std::int64_t>& sent() { return sent_; }

 private:
  StoreImpl* store_;
  std::unique_ptr<Conn> conn_;
  bool joined_;
  std::map<std::int64_t, std::int64_t> sent_;
};

}  // namespace sqlq::core

#endif  // SQLQ_CORE_STORE_IMPL_H_
