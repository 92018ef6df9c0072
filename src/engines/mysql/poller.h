// Wake-ups on MariaDB/MySQL, which has no LISTEN/NOTIFY: while a claim of
// this process waits, a thread polls sqlq_counters for the sends, nacks,
// acks and dead letters of other processes, with a capped backoff
// (docs/engines/mysql.md, "Wake-ups").

#ifndef SQLQ_ENGINES_MYSQL_POLLER_H_
#define SQLQ_ENGINES_MYSQL_POLLER_H_

#include <mysql.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace sqlq::engines::mysql {

// Wake-up polling: from kPollMin, doubling while nothing changes, up to
// kPollMax; only while some claim waits.
constexpr std::chrono::milliseconds kPollMin{2};
constexpr std::chrono::milliseconds kPollMax{50};

// The counters whose sum the poll watches: whatever may make a message
// claimable to a waiting claim. Sends and nacks make messages ready; an
// ack or a dead letter (a cancel, a dead-lettering nack or claim) frees a
// place under max_leased or a group of an ordered queue, whose waiting
// claims nothing else would tell. The engine adds the same counters of its
// own commits to `own` (WakeBumps).
constexpr std::string_view kWakeSum = "sends + nacks + acks + dead_lettered";

// Polls sqlq_counters for the changes of other processes while some claim
// waits (docs/engines/mysql.md, "Wake-ups").
class Poller {
 public:
  Poller(std::function<MYSQL*()> connect, std::function<std::size_t()> waiting,
         std::function<std::int64_t()> own, std::function<void()> changed)
      : connect_(std::move(connect)),
        waiting_(std::move(waiting)),
        own_(std::move(own)),
        changed_(std::move(changed)),
        thread_([this] { Loop(); }) {}
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;
  ~Poller() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  // For tests and the probe: queries sent so far.
  std::int64_t queries() const { return queries_.load(); }
  // Whether commits of other processes wake the waiting claims now: a claim
  // waits and the first poll since it began is done (that poll has every
  // waiting claim look again: it cannot tell what changed before it).
  bool watching() const { return watching_.load(); }

 private:
  bool Sleep(std::chrono::milliseconds d) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, d, [this] { return stop_; });
    return !stop_;
  }

  void Loop() {
    MYSQL* conn = nullptr;
    bool have_base = false;
    std::int64_t base_sum = 0, base_rows = 0;
    auto interval = kPollMin;
    auto retry = std::chrono::milliseconds(50);
    for (;;) {
      if (waiting_() == 0) {
        // Nobody waits: no queries at all. The next waiter starts afresh.
        have_base = false;
        watching_ = false;
        interval = kPollMin;
        if (!Sleep(kPollMax)) break;
        continue;
      }
      if (conn == nullptr) {
        conn = connect_();
        if (conn == nullptr) {
          if (!Sleep(retry)) break;
          retry = std::min(retry * 2, std::chrono::milliseconds(1000));
          continue;
        }
        retry = std::chrono::milliseconds(50);
        have_base = false;
        watching_ = false;
      }
      static const std::string kSql = "SELECT COALESCE(SUM(" +
                                      std::string(kWakeSum) +
                                      "), 0), COUNT(*) FROM sqlq_counters";
      ++queries_;
      std::int64_t sum = 0, rows = 0;
      bool ok = mysql_real_query(conn, kSql.data(), kSql.size()) == 0;
      if (ok) {
        MYSQL_RES* res = mysql_store_result(conn);
        MYSQL_ROW row = res != nullptr ? mysql_fetch_row(res) : nullptr;
        ok = row != nullptr && row[0] != nullptr && row[1] != nullptr;
        if (ok) {
          sum = std::strtoll(row[0], nullptr, 10);
          rows = std::strtoll(row[1], nullptr, 10);
        }
        if (res != nullptr) mysql_free_result(res);
      }
      if (!ok) {
        mysql_close(conn);
        conn = nullptr;
        continue;
      }
      // This process's own sends (and acks) woke its waiters already.
      sum -= own_();
      if (!have_base) {
        // A foreign send may have committed between a waiter's look and
        // this first poll: wake the waiters once to look again.
        have_base = true;
        changed_();
        watching_ = true;
      } else if (sum != base_sum || rows != base_rows) {
        changed_();
        interval = kPollMin;
      } else {
        interval = std::min(interval * 2, kPollMax);
      }
      base_sum = sum;
      base_rows = rows;
      if (!Sleep(interval)) break;
    }
    if (conn != nullptr) mysql_close(conn);
  }

  std::function<MYSQL*()> connect_;
  std::function<std::size_t()> waiting_;
  std::function<std::int64_t()> own_;
  std::function<void()> changed_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::atomic<std::int64_t> queries_{0};
  std::atomic<bool> watching_{false};
  std::thread thread_;
};

}  // namespace sqlq::engines::mysql

#endif  // SQLQ_ENGINES_MYSQL_POLLER_H_
