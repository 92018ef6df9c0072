// The PostgreSQL baseline of a sqlq built without PostgreSQL
// (SQLQ_WITH_POSTGRES=OFF): every call says so. The bench opens the store
// first, which refuses the URL with the same words, so these are reached
// only by a caller that skips that.

#include "bench/baseline_postgres.h"

namespace sqlq::bench {

namespace {
Status Off() {
  return Status::InvalidArgument(
      "this sqlq was built without PostgreSQL support");
}
}  // namespace

Result<BaselineResult> PgBaselineSendBatch(const std::string&,
                                           const std::string&, long, int, int,
                                           std::size_t) {
  return Off();
}

Result<BaselineResult> PgBaselineDrain(const std::string&, const std::string&,
                                       long, int, int, std::size_t) {
  return Off();
}

Result<BaselineResult> PgBaselineMixed(const std::string&, const std::string&,
                                       int, int, int, int, long,
                                       std::chrono::milliseconds, std::size_t,
                                       std::atomic<long>*) {
  return Off();
}

Result<PgTupleCounts> PgTuples(const std::string&, const std::string&) {
  return Off();
}

Result<std::unique_ptr<PgSnapshotHolder>> PgSnapshotHolder::Open(
    const std::string&) {
  return Off();
}

PgSnapshotHolder::~PgSnapshotHolder() = default;

}  // namespace sqlq::bench
