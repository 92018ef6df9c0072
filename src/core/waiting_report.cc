#include "core/waiting_report.h"

#include <utility>
#include <vector>

#include "core/store_impl.h"

namespace sqlq::core {

WaitingReporter::WaitingReporter(StoreImpl& store)
    : store_(store), thread_([this] { Loop(); }) {}

WaitingReporter::~WaitingReporter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void WaitingReporter::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    Report(store_.hub().WaitingByQueue());
    lock.lock();
    cv_.wait_for(lock, kWaitingReportEvery, [this] { return stop_; });
  }
  lock.unlock();
  // Closing: what waited here waits no more.
  Report({});
}

void WaitingReporter::Report(
    const std::map<std::int64_t, std::int64_t>& waiting) {
  if (waiting.empty() && !rows_) return;
  const std::vector<std::pair<std::int64_t, std::int64_t>> counts(
      waiting.begin(), waiting.end());
  Status s = store_.batcher().Run([&](Conn& conn) {
    return store_.engine().ReportWaiting(conn,
                                         {.process = store_.scheduler_holder(),
                                          .waiting = counts,
                                          .forget_after = kWaitingForget});
  });
  if (s.ok()) rows_ = !counts.empty();
}

}  // namespace sqlq::core
