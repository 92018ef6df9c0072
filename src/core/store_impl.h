// Internals behind the public Store, WorkQueue and Tx handles.

#ifndef SQLQ_CORE_STORE_IMPL_H_
#define SQLQ_CORE_STORE_IMPL_H_

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

 private:
  StoreImpl* store_;
  QueueRecord record_;
};

class TxImpl {
 public:
  TxImpl(StoreImpl* store, std::unique_ptr<Conn> conn)
      : store_(store), conn_(std::move(conn)) {}
  StoreImpl& store() { return *store_; }
  // nullptr once committed or rolled back.
  Conn* conn() { return conn_.get(); }
  std::unique_ptr<Conn> Close() { return std::move(conn_); }
  // Queues this transaction sent to, with how many messages: woken on
  // commit.
  std::map<std::int64_t, std::int64_t>& sent() { return sent_; }

 private:
  StoreImpl* store_;
  std::unique_ptr<Conn> conn_;
  std::map<std::int64_t, std::int64_t> sent_;
};

}  // namespace sqlq::core

#endif  // SQLQ_CORE_STORE_IMPL_H_
