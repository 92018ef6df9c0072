// The claims waiting for messages in every process that uses a database,
// not only in this one (Store::WaitingConsumers). Each store whose claims
// wait writes how many wait for each queue into sqlq_waiting: when its
// first claim waits, then every kWaitingReportEvery while any wait, and
// once more when none do (which clears its rows); a store that closes
// clears them too. A report counts for kWaitingFresh after it was made by
// the database's clock, so the claims of a process that died stop counting
// within that; rows older than kWaitingForget are deleted by the next
// report of any process.

#ifndef SQLQ_CORE_WAITING_REPORT_H_
#define SQLQ_CORE_WAITING_REPORT_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>

#include "sqlq/status.h"

namespace sqlq::core {

class StoreImpl;

inline constexpr std::chrono::seconds kWaitingReportEvery{5};
inline constexpr std::chrono::seconds kWaitingFresh{15};
inline constexpr std::chrono::minutes kWaitingForget{1};

class WaitingReporter {
 public:
  // Starts reporting at once, on a thread of its own.
  explicit WaitingReporter(StoreImpl& store);
  ~WaitingReporter();  // clears this store's rows, stops, joins
  WaitingReporter(const WaitingReporter&) = delete;
  WaitingReporter& operator=(const WaitingReporter&) = delete;

 private:
  void Loop();
  // Writes this store's counts when it has any or its rows are still there
  // (clearing them); failures are left for the next time.
  void Report(const std::map<std::int64_t, std::int64_t>& waiting);

  StoreImpl& store_;
  bool rows_ = false;  // whether the last report left rows (the thread's)
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace sqlq::core

#endif  // SQLQ_CORE_WAITING_REPORT_H_
