// PostgreSQL engine: its side of the logic shared with MariaDB
// (dialect.h), and that logic's one instantiation for this engine.

#include "engines/postgres/dialect.h"
#include "engines/postgres/postgres_engine_impl.h"
#include "engines/shared/sql_batches.h"
#include "engines/shared/sql_deps.h"
#include "engines/shared/sql_groups.h"
#include "engines/shared/sql_holds.h"
#include "engines/shared/sql_limits.h"
#include "engines/shared/sql_queue.h"
#include "engines/shared/sql_results.h"
#include "engines/shared/sql_ring.h"
#include "engines/shared/sql_rotation.h"
#include "engines/shared/sql_schedules.h"
#include "engines/shared/sql_topics.h"

namespace sqlq::engines::postgres {

Status Dialect::WriteHolds(PgConn& conn, std::int64_t queue_id,
                           const std::vector<shared::HeldKey>& keys,
                           std::int64_t until_us) {
  static constexpr const char* kSql = R"sql(
    INSERT INTO sqlq_dedup_holds (queue_id, dedup, message_id, until_us)
    SELECT $1, h.dedup, h.id, $4
    FROM unnest($2::bytea[], $3::bigint[]) AS h(dedup, id)
    ON CONFLICT (queue_id, dedup) DO UPDATE
      SET message_id = excluded.message_id, until_us = excluded.until_us)sql";
  std::vector<std::optional<std::string_view>> dedup;
  std::vector<std::int64_t> ids;
  for (const shared::HeldKey& k : keys) {
    dedup.emplace_back(k.key);
    ids.push_back(k.message_id);
  }
  auto rows = conn.Run(
      kSql,
      Params().Int(queue_id).BytesArray(dedup).IntArray(ids).Int(until_us),
      "hold dedup keys");
  return rows.ok() ? Status::Ok() : rows.status();
}

}  // namespace sqlq::engines::postgres

template class sqlq::engines::shared::SqlEngine<
    sqlq::engines::postgres::Dialect>;
template class sqlq::engines::shared::PooledSqlEngine<
    sqlq::engines::postgres::Dialect>;
