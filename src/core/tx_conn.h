// What the engines share around their SQL: the state of one transaction
// that core's rules need (the queues it checked, the counters it defers to
// commit, whether it may be run again) for every engine; and, for the
// server engines (PostgreSQL, MariaDB/MySQL), a pool of connections and the
// one policy for running a write transaction again after a deadlock, a
// serialization failure or a pooled connection that the server closed
// while it sat idle.
//
// An engine subclasses TxConn for its connection, tells the pool how to
// open one, and says how one run of a transaction goes (begin, body,
// commit); everything else is here. No database client header is needed.

#ifndef SQLQ_CORE_SERVER_CONN_H_
#define SQLQ_CORE_SERVER_CONN_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/engine.h"

namespace sqlq::core {

// A connection of an engine, with the state of the transaction open on it
// that core's rules need. Reset when a transaction begins.
class TxConn : public Conn {
 public:
  // Engines that keep more per-transaction state reset it here too, and
  // call this.
  virtual void ResetTxState();

  // Adds to the counters this transaction writes once, at commit. False
  // when this transaction does not defer them (a caller's Tx): then the
  // engine writes them at once.
  bool DeferCounters(std::int64_t queue_id, const QueueCounters& d) {
    if (!defer_counters) return false;
    pending_counters[queue_id] += d;
    return true;
  }

  // A deadlock or serialization failure: the server rolled the whole
  // transaction back, so it may be run again.
  bool retry_tx = false;
  // The connection turned out closed before any statement of this
  // transaction ran (a pooled connection the server closed while idle).
  bool lost_at_begin = false;
  // The server answered as one that cannot take writes now: it is read-only
  // (a standby, or a primary demoted by a failover), shutting down, or not
  // part of its cluster's primary component. The other idle connections of
  // the pool likely lead to the same server, so the pool drops them all
  // when this one comes back, and the next transaction connects afresh
  // (which, with several hosts in the URL, finds the new primary).
  bool failover = false;
  // A statement failed: the transaction is not committed.
  std::optional<Status> tx_error;
  // The database clock of this transaction, microseconds since the epoch.
  std::optional<std::int64_t> tx_now_us;
  bool read_only = false;
  // Queues checked (and in write transactions share-locked) in this
  // transaction.
  std::unordered_set<std::int64_t> known_queues;
  // Queues whose dependents flag (core::DependencyOps) this transaction
  // read with its lock, and of those the flagged ones. A send can take the
  // lock without reading the flag: known_queues then has the queue and
  // flags_read does not.
  std::unordered_set<std::int64_t> flags_read;
  std::unordered_set<std::int64_t> dependent_queues;
  // Counters are gathered (DeferCounters) and written at commit; false in a
  // caller's transaction, whose commit is the caller's.
  bool defer_counters = false;
  std::map<std::int64_t, QueueCounters> pending_counters;
};

// How often and after how long a write transaction that hit a deadlock or
// serialization failure runs again.
struct RetryPolicy {
  // Runs in all, the first included.
  int attempts = 10;
  // Pooled connections found closed before a run began, replaced by fresh
  // ones without counting as an attempt (a restarted server closes every
  // idle connection at once; the pool is emptied the first time).
  int reconnects = 2;
  // Wait before run n+1: base * 2^min(n, max_doublings) plus a random
  // jitter below `jitter`, so that the transactions that deadlocked do not
  // meet again in step.
  std::chrono::microseconds base{200};
  int max_doublings = 6;
  std::chrono::microseconds jitter{500};
  // Runs after this many that deadlocked go alone: they wait until no
  // other write transaction of this pool runs, and hold new ones off until
  // they end. Deadlocks between one process's own concurrent transactions
  // (several write groups) then cannot repeat, so every transaction makes
  // progress, whatever the load; the others run side by side as before.
  int alone_after = 3;

  // How long a call whose transaction did not reach a commit because the
  // database was unreachable, read-only or not ready (kUnavailable: nothing
  // was committed) is tried again before its error is returned, so that a
  // failover shows as latency rather than as errors. Tries are spaced from
  // failover_step, doubling up to a second. Zero: the error is returned at
  // once. A commit whose outcome is unknown is never tried again.
  std::chrono::milliseconds failover_wait{0};
  std::chrono::milliseconds failover_step{50};

  std::chrono::microseconds Delay(int attempt, std::uint64_t random) const;
};

// The failover wait of a store whose URL set `failover_wait_ms` to `ms`
// (-1: not set). Unset, it is 15 s when the URL names several servers (a
// failover list: the next primary is among them) and zero for one server,
// which fails at once when it is down (set it for a proxy or a virtual IP
// in front of a cluster).
std::chrono::milliseconds FailoverWaitFor(std::int64_t ms, bool several_hosts);

// The tries of one call through a failover (RetryPolicy::failover_wait).
class FailoverWait {
 public:
  explicit FailoverWait(const RetryPolicy& policy) : policy_(policy) {}
  // For a call that ended in `s`: true after waiting for the next try when
  // `s` says nothing was committed because the database was unavailable and
  // the wait has time left; false when `s` is the call's answer.
  bool Again(const Status& s);

 private:
  const RetryPolicy& policy_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  std::chrono::milliseconds step_{0};
};

// Runs `once` until it succeeds or ends in an error a failover wait does not
// cover: opening a store (connect, then migrate) while the database fails
// over waits for the next primary as a call does.
Status WithFailoverWait(const RetryPolicy& policy,
                        const std::function<Status()>& once);

// Idle connections of one server engine, and the write loop over them.
// C is the engine's TxConn, with
//   bool healthy() const  the connection is open as far as the client
//                         library knows;
//   bool StillOpen()      checked when an idle connection is handed out
//                         (the engine may look for a close the server sent
//                         while it sat idle);
//   bool Poolable() const checked when it comes back: open, with no
//                         transaction left on it (otherwise it is closed).
// Thread-safe.
template <class C>
class ConnPool {
 public:
  using Connect = std::function<Result<std::unique_ptr<C>>()>;

  ConnPool(Connect connect, std::size_t max_idle, RetryPolicy policy = {})
      : connect_(std::move(connect)), max_idle_(max_idle), policy_(policy) {
    std::random_device rd;
    rng_.seed(rd());
  }

  // An idle connection, or a new one. `pooled` tells which.
  Result<std::unique_ptr<C>> Acquire(bool* pooled = nullptr) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (!idle_.empty()) {
        std::unique_ptr<C> c = std::move(idle_.back());
        idle_.pop_back();
        if (c->StillOpen()) {
          if (pooled != nullptr) *pooled = true;
          return c;
        }
      }
    }
    if (pooled != nullptr) *pooled = false;
    return connect_();
  }

  // Pools the connection when Poolable(); closes it otherwise. A
  // connection that met a failover (TxConn::failover) is closed, and so is
  // every idle one.
  void Release(std::unique_ptr<C> conn) {
    if (conn->failover) {
      DropIdle();
      return;  // closed by its destructor
    }
    if (!conn->Poolable()) return;  // closed by its destructor
    std::lock_guard<std::mutex> lock(mu_);
    if (idle_.size() < max_idle_) idle_.push_back(std::move(conn));
  }

  // Closes every idle connection.
  void DropIdle() {
    std::vector<std::unique_ptr<C>> dropped;
    std::lock_guard<std::mutex> lock(mu_);
    dropped.swap(idle_);
  }

  // A connection on which `begin` succeeded. A pooled connection that turns
  // out closed is replaced by a fresh one (and the other idle ones, likely
  // closed too, are dropped).
  Result<std::unique_ptr<C>> AcquireBegun(
      const std::function<Status(C&)>& begin) {
    for (;;) {
      bool pooled = false;
      auto conn = Acquire(&pooled);
      if (!conn.ok()) return conn.status();
      (*conn)->ResetTxState();
      Status s = begin(**conn);
      if (s.ok()) return conn;
      if (!pooled || (*conn)->healthy()) return s;
      DropIdle();
    }
  }

  // Runs a read transaction: `begin` begins it, `run` runs the body and
  // ends it; the connection goes back to the pool.
  Status RunRead(const std::function<Status(C&)>& begin,
                 const std::function<Status(C&)>& run) {
    FailoverWait failover(policy_);
    for (;;) {
      auto conn = AcquireBegun(begin);
      Status s = conn.status();
      if (conn.ok()) {
        s = run(**conn);
        Release(std::move(*conn));
      }
      if (!failover.Again(s)) return s;
    }
  }

  // A connection, begun by `begin`, lent to a caller's transaction (the
  // public Tx): its counters are written at once (the caller commits, not
  // the engine), and it comes back to the pool when core destroys it after
  // the commit or rollback (a Tx never outlives its Store, hence its pool).
  // C has set_recycler(std::function<void(std::unique_ptr<C>)>).
  Result<std::unique_ptr<C>> Lend(const std::function<Status(C&)>& begin) {
    FailoverWait failover(policy_);
    auto conn = AcquireBegun(begin);
    while (!conn.ok() && failover.Again(conn.status())) {
      conn = AcquireBegun(begin);
    }
    if (!conn.ok()) return conn.status();
    (*conn)->defer_counters = false;
    (*conn)->set_recycler(
        [this](std::unique_ptr<C> c) { Release(std::move(c)); });
    return conn;
  }

  // Runs a write transaction: `run` begins it on the connection, runs the
  // body and commits (or rolls back). Run again, on the policy's terms,
  // when it ended in a deadlock or serialization failure (retry_tx), and
  // on a fresh connection when a pooled one was found closed before
  // anything ran (lost_at_begin).
  Status RunWrite(const std::function<Status(C&)>& run) {
    Status s;
    int reconnects = 0;
    FailoverWait failover(policy_);
    for (int attempt = 0; attempt < policy_.attempts; ++attempt) {
      const bool alone = attempt >= policy_.alone_after;
      gate_.Enter(alone);
      bool pooled = false;
      auto conn = Acquire(&pooled);
      if (!conn.ok()) {
        gate_.Leave(alone);
        s = conn.status();
        if (failover.Again(s)) {
          --attempt;
          continue;
        }
        return s;
      }
      C& c = **conn;
      c.ResetTxState();
      s = run(c);
      gate_.Leave(alone);
      const bool again = c.retry_tx;
      const bool lost = pooled && c.lost_at_begin;
      Release(std::move(*conn));
      if (lost && reconnects++ < policy_.reconnects) {
        DropIdle();
        --attempt;
        continue;
      }
      if (!again && failover.Again(s)) {
        --attempt;
        continue;
      }
      if (s.ok() || !again) break;
      std::uint64_t random;
      {
        std::lock_guard<std::mutex> lock(mu_);
        random = rng_();
      }
      std::this_thread::sleep_for(policy_.Delay(attempt, random));
    }
    return s;
  }

  const RetryPolicy& policy() const { return policy_; }
  // REQUIRES: no call is running yet.
  void set_failover_wait(std::chrono::milliseconds wait) {
    policy_.failover_wait = wait;
  }

 private:
  // Write transactions run side by side, or one alone (alone_after). A
  // transaction waiting to run alone holds new ones off, so that it is not
  // starved by a steady stream of them.
  class Gate {
   public:
    void Enter(bool alone) {
      std::unique_lock<std::mutex> lock(mu_);
      if (alone) {
        ++want_alone_;
        cv_.wait(lock, [&] { return !alone_ && running_ == 0; });
        --want_alone_;
        alone_ = true;
      } else {
        cv_.wait(lock, [&] { return !alone_ && want_alone_ == 0; });
        ++running_;
      }
    }
    void Leave(bool alone) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (alone) {
          alone_ = false;
        } else {
          --running_;
        }
      }
      cv_.notify_all();
    }

   private:
    std::mutex mu_;
    std::condition_variable cv_;
    int running_ = 0;     // guarded by mu_
    int want_alone_ = 0;  // guarded by mu_
    bool alone_ = false;  // guarded by mu_
  };

  const Connect connect_;
  const std::size_t max_idle_;
  RetryPolicy policy_;
  std::mutex mu_;
  std::vector<std::unique_ptr<C>> idle_;  // guarded by mu_
  std::mt19937_64 rng_;                   // guarded by mu_
  Gate gate_;
};

}  // namespace sqlq::core

#endif  // SQLQ_CORE_SERVER_CONN_H_
