// Queue handles by name, so that a request does not look its queue up in
// the database each time. Shared by the native API and the SQS endpoint.
// An entry is forgotten when the server drops the queue or an operation
// finds it gone (dropped, perhaps made again, elsewhere).
//
// Thread-safe.

#ifndef SQLQ_SERVER_QUEUE_CACHE_H_
#define SQLQ_SERVER_QUEUE_CACHE_H_

#include <mutex>
#include <string>
#include <unordered_map>

#include "sqlq/store.h"

namespace sqlq::server {

class QueueCache {
 public:
  explicit QueueCache(Store& store) : store_(store) {}

  // The handle of queue `name`; `hit` tells whether it came from the
  // cache (and so may be stale).
  Result<WorkQueue> Get(const std::string& name, bool& hit) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = cache_.find(name);
      hit = it != cache_.end();
      if (hit) return it->second;
    }
    auto q = store_.Queue(name);
    if (!q.ok()) return q;
    std::lock_guard<std::mutex> lock(mu_);
    if (cache_.size() >= 10000) cache_.clear();  // bound it; refills on use
    cache_.insert_or_assign(name, *q);
    return q;
  }

  void Forget(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    cache_.erase(name);
  }

 private:
  Store& store_;
  std::mutex mu_;
  std::unordered_map<std::string, WorkQueue> cache_;  // guarded by mu_
};

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_QUEUE_CACHE_H_
