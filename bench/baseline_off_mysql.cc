// The MariaDB/MySQL baseline of a sqlq built without it
// (SQLQ_WITH_MYSQL=OFF) says so. The bench opens the store first, which
// refuses the URL with the same words, so this is reached only by a caller
// that skips that.

#include "bench/baseline.h"

namespace sqlq::bench {

Result<std::unique_ptr<Baseline>> MysqlBaseline(const std::string&,
                                                const std::string&,
                                                std::size_t) {
  return Status::InvalidArgument(
      "this sqlq was built without MariaDB/MySQL support");
}

}  // namespace sqlq::bench
