#include "engines/postgres/vacuumer.h"

#include <algorithm>
#include <cstdlib>

namespace sqlq::engines::postgres {

namespace {
// Longest wait between vacuums that leave their dead rows behind.
constexpr std::chrono::milliseconds kMaxInterval{60000};
}  // namespace

Vacuumer::Vacuumer(std::function<PGconn*()> connect, std::int64_t threshold,
                   std::chrono::milliseconds min_interval)
    : connect_(std::move(connect)),
      threshold_(threshold),
      min_interval_(min_interval),
      thread_([this] { Loop(); }) {}

Vacuumer::~Vacuumer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Vacuumer::Churned(std::int64_t rows) {
  const std::int64_t before = churn_.fetch_add(rows);
  // Wake the thread once per threshold crossed, not per commit.
  if (before < threshold_ && before + rows >= threshold_) {
    std::lock_guard<std::mutex> lock(mu_);
    due_ = true;
    cv_.notify_all();
  }
}

void Vacuumer::Loop() {
  PGconn* conn = nullptr;
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
    churn_ = 0;
    lock.unlock();
    if (conn != nullptr && PQstatus(conn) != CONNECTION_OK) {
      PQfinish(conn);
      conn = nullptr;
    }
    if (conn == nullptr) conn = connect_();
    if (conn != nullptr && PQstatus(conn) == CONNECTION_OK) {
      // Failures (no permission, server gone) are left to the next round
      // and to autovacuum: vacuuming is an optimisation, never required.
      PQclear(
          PQexec(conn, "VACUUM (SKIP_LOCKED) sqlq_messages, sqlq_counters"));
      ++vacuums_;
    }
    last = std::chrono::steady_clock::now();
    lock.lock();
  }
  lock.unlock();
  if (conn != nullptr) PQfinish(conn);
}

}  // namespace sqlq::engines::postgres
