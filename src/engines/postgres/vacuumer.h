// Vacuumer: keeps the message table's dead rows few under sustained load.
//
// Every claim, ack and nack leaves dead row versions in sqlq_messages and
// dead entries in its claim index; claims walk those entries. Autovacuum
// visits a database at most once per autovacuum_naptime (1 minute by
// default) and throttles itself, so at thousands of messages a second the
// dead rows pile up to millions between its visits and claims slow down
// with them. The Vacuumer runs `VACUUM (SKIP_LOCKED)` on the hot tables
// itself, on its own autocommit connection, once enough rows were churned
// (Churned()) and at most once per interval. VACUUM does not block reads or
// writes: the tables that churn carry vacuum_truncate = false (schema.h,
// version 25), so no vacuum takes their exclusive lock to give their empty
// end back. SKIP_LOCKED makes it give way to another process's VACUUM of the
// same table instead of waiting. A role that
// does not own the tables gets a warning from the server and nothing happens:
// autovacuum remains. docs/engines/postgres.md, "Sustained load".
//
// It can also fold the counter deltas (schema.h, kFoldCountersSql) into
// sqlq_counters once enough were appended (Counted()), at most once per
// interval, so that the deltas table stays small for Stats to sum. A store
// runs one Vacuumer for each, so that a long VACUUM (of a table a held
// snapshot keeps large) does not hold up the folds. Folding is not
// required either: Stats sums the deltas that are left.
//
// Thread-safe.

#ifndef SQLQ_ENGINES_POSTGRES_VACUUMER_H_
#define SQLQ_ENGINES_POSTGRES_VACUUMER_H_

#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

#include "engines/postgres/leader_watch.h"

namespace sqlq::engines::postgres {

class Vacuumer {
 public:
  // `connect` opens a connection (or returns null); called on the
  // Vacuumer's thread, only when a vacuum or a fold is due. `threshold`:
  // churned rows that make a vacuum due (0 or less: never vacuum);
  // `fold_threshold`: counter rows that make a fold due (0 or less: never
  // fold). `watch` registers each connection it opens: a fold's commit on an
  // old primary that still takes writes would wait for its standby for
  // ever. A statement still running when the Vacuumer goes is cancelled,
  // so that a fold waiting (for a lock, for a synchronous standby that
  // does not answer) does not hold up the store's close.
  Vacuumer(std::function<PGconn*()> connect, std::int64_t threshold,
           std::int64_t fold_threshold, std::chrono::milliseconds min_interval,
           ConnWatch watch = {});
  Vacuumer(const Vacuumer&) = delete;
  Vacuumer& operator=(const Vacuumer&) = delete;
  ~Vacuumer();

  // `rows` message rows were updated or deleted by a commit.
  void Churned(std::int64_t rows);
  // `rows` counter delta rows were appended by a commit.
  void Counted(std::int64_t rows);

  // Vacuums and folds run so far; for tests and benchmarks.
  std::int64_t TEST_vacuums() const { return vacuums_; }
  std::int64_t TEST_folds() const { return folds_; }

 private:
  void Loop();

  // Wakes the thread when `counter` crosses `threshold`.
  void Add(std::atomic<std::int64_t>& counter, std::int64_t threshold,
           std::int64_t rows);

  const std::function<PGconn*()> connect_;
  const ConnWatch watch_;
  const std::int64_t threshold_;
  const std::int64_t fold_threshold_;
  const std::chrono::milliseconds min_interval_;
  std::atomic<std::int64_t> churn_{0};
  std::atomic<std::int64_t> counted_{0};
  std::atomic<std::int64_t> vacuums_{0};
  std::atomic<std::int64_t> folds_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  bool due_ = false;   // guarded by mu_
  // The cancel of the statement running now, for the destructor; guarded
  // by mu_.
  PGcancel* running_ = nullptr;
  std::thread thread_;
};

}  // namespace sqlq::engines::postgres

#endif  // SQLQ_ENGINES_POSTGRES_VACUUMER_H_
