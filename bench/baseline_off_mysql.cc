// The MariaDB/MySQL baseline of a sqlq built without it
// (SQLQ_WITH_MYSQL=OFF): every call says so. The bench opens the store
// first, which refuses the URL with the same words, so these are reached
// only by a caller that skips that.

#include "bench/baseline_mysql.h"

namespace sqlq::bench {

namespace {
Status Off() {
  return Status::InvalidArgument(
      "this sqlq was built without MariaDB/MySQL support");
}
}  // namespace

Result<BaselineResult> MysqlBaselineSendBatch(const std::string&,
                                              const std::string&, long, int,
                                              int, std::size_t) {
  return Off();
}

Result<BaselineResult> MysqlBaselineDrain(const std::string&,
                                          const std::string&, long, int, int,
                                          std::size_t) {
  return Off();
}

Result<BaselineResult> MysqlBaselineMixed(const std::string&,
                                          const std::string&, int, int, int,
                                          int, long, std::chrono::milliseconds,
                                          std::size_t) {
  return Off();
}

}  // namespace sqlq::bench
