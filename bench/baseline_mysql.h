// The queue a user writes by hand on MariaDB/MySQL, measured in the same run
// as sqlq (issue 4): one InnoDB table; producers INSERT (one multi-row
// INSERT per batch); consumers take and finish work in one short
// transaction,
//   START TRANSACTION;
//   SELECT id, payload FROM t ORDER BY id LIMIT n FOR UPDATE SKIP LOCKED;
//   DELETE FROM t WHERE id IN (...);
//   COMMIT;
// one connection per thread, prepared statements, durability as the server
// has it (innodb_flush_log_at_trx_commit=1 on the test server). It has no
// leases, retries or dead letters: it is the fast, fragile thing sqlq is
// compared with.

#ifndef SQLQ_BENCH_BASELINE_MYSQL_H_
#define SQLQ_BENCH_BASELINE_MYSQL_H_

#include <chrono>
#include <string>

#include "bench/baseline_sqlite.h"
#include "sqlq/status.h"

namespace sqlq::bench {

// `url` is mysql://user:password@host:port/database (or mariadb://).
// `table` is created (and dropped afterwards); it must be a plain identifier
// chosen by the bench, never user input.
// `threads` connections insert `total` messages, `batch` per autocommitted
// multi-row INSERT (baseline-send-1: one row each).
Result<BaselineResult> MysqlBaselineSendBatch(const std::string& url,
                                              const std::string& table,
                                              long total, int threads,
                                              int batch, std::size_t payload);

// Fills `table` with `total` messages, then `threads` connections take up
// to `per_claim` at a time as above until it is empty.
Result<BaselineResult> MysqlBaselineDrain(const std::string& url,
                                          const std::string& table, long total,
                                          int threads, int per_claim,
                                          std::size_t payload);

Result<BaselineResult> MysqlBaselineMixed(
    const std::string& url, const std::string& table, int producers,
    int consumers, int batch, int claim_max, long max_backlog,
    std::chrono::milliseconds duration, std::size_t payload);

}  // namespace sqlq::bench

#endif  // SQLQ_BENCH_BASELINE_MYSQL_H_
