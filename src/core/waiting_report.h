// The claims waiting for messages in every process that uses a database,
// not only in this one (Store::WaitingConsumers). Each store that reports
// (StoreOptions::report_waiting) writes how many of its claims wait for
// each queue into sqlq_waiting every kWaitingReportEvery while any wait,
// and once more when none do (which clears its rows); nothing while none
// wait. A store that closes clears its rows too. A report counts for
// kWaitingFresh after it was made by the database's clock, so the claims of a
// process that died stop counting within that; rows older than kWaitingForget
// are deleted by the next report of any process.

#ifndef SQLQ_CORE_WAITING_REPORT_H_
#define SQLQ_CORE_WAITING_REPORT_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>

#include "sqlq/status.h"

namespace sqlq::core {

class PeriodicThread;
class StoreImpl;

inline constexpr std::chrono::seconds kWaitingReportEvery{5};
inline constexpr std::chrono::seconds kWaitingFresh{15};
inline constexpr std::chrono::minutes kWaitingForget{1};

class WaitingReporter {
 public:
  // Reports from now on, on a thread of its own.
  explicit WaitingReporter(StoreImpl& store);
  ~WaitingReporter();  // clears this store's rows, stops, joins
  WaitingReporter(const WaitingReporter&) = delete;
  WaitingReporter& operator=(const WaitingReporter&) = delete;

 private:
  // Writes this store's counts when it has any or its rows are still there
  // (clearing them); failures are left for the next time.
  void Report(const std::map<std::int64_t, std::int64_t>& waiting);

  StoreImpl& store_;
  bool rows_ = false;                       // whether the last report left rows
  std::unique_ptr<PeriodicThread> thread_;  // last: it uses the others
};

}  // namespace sqlq::core

#endif  // SQLQ_CORE_WAITING_REPORT_H_
