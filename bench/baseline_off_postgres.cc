// What the benchmark has of PostgreSQL in a sqlq built without it
// (SQLQ_WITH_POSTGRES=OFF): every call says so. The bench opens the store
// first, which refuses the URL with the same words, so these are reached
// only by a caller that skips that.

#include "bench/baseline.h"
#include "bench/baseline_postgres.h"

namespace sqlq::bench {

namespace {
Status Off() {
  return Status::InvalidArgument(
      "this sqlq was built without PostgreSQL support");
}
}  // namespace

Result<std::unique_ptr<Baseline>> PgBaseline(const std::string&,
                                             const std::string&, std::size_t) {
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
