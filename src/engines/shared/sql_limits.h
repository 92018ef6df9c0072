// SqlEngine (sql_engine.h): the state of limited claims (core/limits.h),
// the same on PostgreSQL and MariaDB. Included only where an engine
// instantiates SqlEngine<D>.
//
// A queue's row in sqlq_limits is locked (FOR UPDATE) by each limited
// claim for the rest of its transaction: limited claims of one queue run
// one at a time, across processes, so that the leases they count and the
// bucket they take from are not changed under them. Claims of queues
// without limits never touch it.
//
// max_leased counts the rows of sqlq_leases (the messages limited claims
// leased, with the lease's token) whose message still carries that token
// under a live lease: an ack, a nack, a lease that ran out or a message
// deleted ends the count without touching sqlq_leases; the rows of ended
// leases are deleted by the next limited claim.

#ifndef SQLQ_ENGINES_SHARED_SQL_LIMITS_H_
#define SQLQ_ENGINES_SHARED_SQL_LIMITS_H_

#include "core/errors.h"
#include "engines/shared/sql_engine.h"

namespace sqlq::engines::shared {

// The statements (tests EXPLAIN them): lock the limit row; delete the
// leases that ended (queue, now); count the live ones and the first end
// (queue, now).
// (The lock is the dialect's D::kForUpdate, after the first.)
inline constexpr const char* kLockLimitsSql = R"sql(
  SELECT tokens_u, at_us FROM sqlq_limits WHERE queue_id = ?)sql";
inline constexpr const char* kEndedLeasesSql = R"sql(
  DELETE FROM sqlq_leases WHERE queue_id = ? AND NOT EXISTS (
    SELECT 1 FROM sqlq_messages m WHERE m.id = sqlq_leases.message_id
      AND m.token = sqlq_leases.token AND m.ready_us > ?))sql";
inline constexpr const char* kLiveLeasesSql = R"sql(
  SELECT count(*), coalesce(min(m.ready_us), 0)
  FROM sqlq_leases l JOIN sqlq_messages m
    ON m.id = l.message_id AND m.token = l.token
  WHERE l.queue_id = ? AND m.ready_us > ?)sql";

template <class D>
Result<core::LimitState> SqlEngine<D>::LockLimits(
    core::Conn& c, const core::LockLimitsParams& p) {
  const auto& [queue_id, count_leased] = p;
  DConn& conn = Native(c);
  static const std::string kLock =
      D::Statement(std::string(kLockLimitsSql) + D::kForUpdate);
  static const std::string kMake = D::Statement(D::kMakeLimits);
  static const std::string kEnded = D::Statement(kEndedLeasesSql);
  static const std::string kLive = D::Statement(kLiveLeasesSql);
  core::LimitState st;
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  st.now_us = *now;
  auto rows = conn.Run(kLock, Params().Int(queue_id), "limited claim");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) {
    // The queue's first limited claim: its row, then the lock on it.
    auto made = conn.Run(kMake, Params().Int(queue_id), "limited claim");
    if (!made.ok()) return made.status();
    rows = conn.Run(kLock, Params().Int(queue_id), "limited claim");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0) return core::QueueGone(queue_id);
  }
  st.tokens_u = rows->Int(0, 0);
  st.at_us = rows->Int(0, 1);
  if (count_leased) {
    auto ended = conn.Run(kEnded, Params().Int(queue_id).Int(st.now_us),
                          "limited claim");
    if (!ended.ok()) return ended.status();
    auto live =
        conn.Run(kLive, Params().Int(queue_id).Int(st.now_us), "limited claim");
    if (!live.ok()) return live.status();
    st.leased = live->Int(0, 0);
    st.first_end_us = live->Int(0, 1);
  }
  return st;
}

template <class D>
Status SqlEngine<D>::SaveLimits(core::Conn& c,
                                const core::SaveLimitsParams& p) {
  const auto& [queue_id, state, bucket, leased, token] = p;
  DConn& conn = Native(c);
  static const std::string kBucket = D::Statement(
      "UPDATE sqlq_limits SET tokens_u = ?, at_us = ? WHERE queue_id = ?");
  static const std::string kRecord = D::Statement(D::kRecordLease);
  if (bucket) {
    auto r = conn.Run(
        kBucket, Params().Int(state.tokens_u).Int(state.at_us).Int(queue_id),
        "limited claim");
    if (!r.ok()) return r.status();
  }
  for (std::int64_t id : leased) {
    auto r = conn.Run(kRecord, Params().Int(queue_id).Int(id).Int(token),
                      "limited claim");
    if (!r.ok()) return r.status();
  }
  return Status::Ok();
}

}  // namespace sqlq::engines::shared

#endif  // SQLQ_ENGINES_SHARED_SQL_LIMITS_H_
