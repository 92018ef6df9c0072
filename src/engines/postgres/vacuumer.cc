#include "engines/postgres/vacuumer.h"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "engines/postgres/pg_conn.h"
#include "engines/postgres/schema.h"

namespace sqlq::engines::postgres {

namespace {
// Longest wait between vacuums that leave their dead rows behind.
constexpr std::chrono::milliseconds kMaxInterval{60000};
}  // namespace

Vacuumer::Vacuumer(std::function<PGconn*()> connect, std::int64_t threshold,
                   std::int64_t fold_threshold,
                   std::chrono::milliseconds min_interval, ConnWatch watch)
    : connect_(std::move(connect)),
      watch_(std::move(watch)),
      threshold_(threshold),
      fold_threshold_(fold_threshold),
      min_interval_(min_interval),
      thread_([this] { Loop(); }) {}

Vacuumer::~Vacuumer() {
  PGcancel* running = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    std::swap(running, running_);
  }
  cv_.notify_all();
  if (running != nullptr) CancelDetached(running);
  thread_.join();
}

void Vacuumer::Churned(std::int64_t rows) {
  if (threshold_ > 0) Add(churn_, threshold_, rows);
}

void Vacuumer::Counted(std::int64_t rows) {
  if (fold_threshold_ > 0) Add(counted_, fold_threshold_, rows);
}

void Vacuumer::Add(std::atomic<std::int64_t>& counter, std::int64_t threshold,
                   std::int64_t rows) {
  const std::int64_t before = counter.fetch_add(rows);
  // Wake the thread once per threshold crossed, not per commit.
  if (before < threshold && before + rows >= threshold) {
    std::lock_guard<std::mutex> lock(mu_);
    due_ = true;
    cv_.notify_all();
  }
}

void Vacuumer::Loop() {
  PGconn* conn = nullptr;
  std::function<void()> unwatch;
  auto close = [&] {
    if (unwatch) unwatch();
    unwatch = nullptr;
    PQfinish(conn);
    conn = nullptr;
  };
  // Runs `sql` unless the Vacuumer is stopping (null then); the destructor
  // cancels it meanwhile.
  auto run = [&](const char* sql) -> PGresult* {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) return nullptr;
      running_ = PQgetCancel(conn);
    }
    PGresult* res = PQexec(conn, sql);
    std::lock_guard<std::mutex> l(mu_);
    if (running_ != nullptr) PQfreeCancel(running_);
    running_ = nullptr;
    return res;
  };
  auto last = std::chrono::steady_clock::now() - min_interval_;
  // Grows while vacuums leave most dead rows behind: a snapshot open
  // elsewhere keeps them, and vacuuming again would only scan for nothing.
  auto interval = min_interval_;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || due_; });
    if (stop_) break;
    // At most one vacuum per interval, however fast rows churn.
    if (cv_.wait_until(lock, last + interval, [&] { return stop_; })) {
      break;
    }
    due_ = false;
    const bool vacuum = threshold_ > 0 && churn_ >= threshold_;
    const bool fold = fold_threshold_ > 0 && counted_ >= fold_threshold_;
    if (vacuum) churn_ = 0;
    if (fold) counted_ = 0;
    lock.unlock();
    if (conn != nullptr && PQstatus(conn) != CONNECTION_OK) close();
    if (conn == nullptr) {
      conn = connect_();
      if (conn != nullptr && PQstatus(conn) == CONNECTION_OK && watch_) {
        unwatch = watch_(conn);
      }
    }
    if (conn != nullptr && PQstatus(conn) == CONNECTION_OK) {
      // Failures (no permission, server gone, a deadlock between two
      // processes' folds) are left to the next round and to autovacuum:
      // neither is ever required.
      if (fold) {
        PGresult* res = run(kFoldCountersSql);
        if (PQresultStatus(res) == PGRES_COMMAND_OK) {
          ++folds_;
        } else {
          // Try again after the interval (a queue dropped meanwhile, two
          // processes' folds deadlocked), even if nothing more is counted.
          Add(counted_, fold_threshold_, fold_threshold_);
        }
        PQclear(res);
      }
      if (vacuum) {
        PQclear(
            run("VACUUM (SKIP_LOCKED) sqlq_messages, sqlq_counters, "
                "sqlq_counter_deltas"));
        ++vacuums_;
      }
    }
    last = std::chrono::steady_clock::now();
    lock.lock();
  }
  lock.unlock();
  if (conn != nullptr) close();
}

}  // namespace sqlq::engines::postgres
