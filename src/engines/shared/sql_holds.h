// PooledSqlEngine (pooled_sql_engine.h): dedup windows (core/engine.h,
// SendParams) on the server engines, whose sends look for the holds after
// their inserts. Included only where an engine instantiates
// PooledSqlEngine<D>.

#ifndef SQLQ_ENGINES_SHARED_SQL_HOLDS_H_
#define SQLQ_ENGINES_SHARED_SQL_HOLDS_H_

#include <optional>
#include <utility>
#include <vector>

#include "engines/shared/pooled_sql_engine.h"

namespace sqlq::engines::shared {

template <class D>
Status PooledSqlEngine<D>::HoldKeys(DConn& conn, std::int64_t queue_id,
                                    const std::vector<HeldKey>& keys,
                                    core::Micros unique_for) {
  if (keys.empty() || unique_for.count() == 0) return Status::Ok();
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  return D::WriteHolds(conn, queue_id, keys, *now + unique_for.count());
}

template <class D>
Status PooledSqlEngine<D>::ApplyHolds(DConn& conn, const core::SendParams& p,
                                      std::vector<SendResult>& out,
                                      std::int64_t& stored) {
  if (p.unique_for.count() == 0) return Status::Ok();
  // D::kHeldBy reads the latest committed holds (MariaDB: a locking read;
  // PostgreSQL's READ COMMITTED statement sees them).
  static const std::string kHeld = D::Statement(D::kHeldBy);
  static const std::string kUnsend =
      D::Statement("DELETE FROM sqlq_messages WHERE id = ?");
  std::optional<std::int64_t> now;
  // Ids deleted again -> the hold's message, for later duplicates of them
  // in the same batch.
  std::vector<std::pair<std::int64_t, std::int64_t>> replaced;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const Message& m = p.messages[i];
    if (m.dedup_key.empty()) continue;
    if (out[i].duplicate) {
      for (const auto& [was, now_id] : replaced) {
        if (out[i].id == was) out[i].id = now_id;
      }
      continue;
    }
    if (!now) {
      auto n = NowUs(conn);
      if (!n.ok()) return n.status();
      now = *n;
    }
    auto held =
        conn.Run(kHeld, Params().Int(p.queue_id).Bytes(m.dedup_key).Int(*now),
                 "send (dedup window)");
    if (!held.ok()) return held.status();
    if (held->size() == 0) continue;
    auto gone =
        conn.Run(kUnsend, Params().Int(out[i].id), "send (dedup window)");
    if (!gone.ok()) return gone.status();
    replaced.emplace_back(out[i].id, held->Int(0, 0));
    out[i] = {.id = held->Int(0, 0), .duplicate = true};
    --stored;
  }
  return Status::Ok();
}

}  // namespace sqlq::engines::shared

#endif  // SQLQ_ENGINES_SHARED_SQL_HOLDS_H_
