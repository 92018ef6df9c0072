#include "core/waiting_report.h"

#include <utility>
#include <vector>

#include "core/periodic_thread.h"
#include "core/store_impl.h"

namespace sqlq::core {

WaitingReporter::WaitingReporter(StoreImpl& store)
    : store_(store), thread_(std::make_unique<PeriodicThread>([this] {
        Report(store_.hub().WaitingByQueue());
        return kWaitingReportEvery;
      })) {}

WaitingReporter::~WaitingReporter() {
  thread_.reset();
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
