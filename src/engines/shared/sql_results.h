// SqlEngine (sql_engine.h): what jobs keep besides their message, the same
// on every engine: results and progress (core/results.cc), and the read of
// a job's own retry policy (its headers) by a nack. Included only where an
// engine instantiates SqlEngine<D>.
//
// One row of sqlq_results per message that recorded progress or completed
// with a result, until expires_us. Nothing else reads or writes the table:
// a claim, an ack without a result and a nack never touch it.

#ifndef SQLQ_ENGINES_SHARED_SQL_RESULTS_H_
#define SQLQ_ENGINES_SHARED_SQL_RESULTS_H_

#include "core/errors.h"
#include "engines/shared/sql_engine.h"

namespace sqlq::engines::shared {

template <class D>
Result<std::optional<std::string>> SqlEngine<D>::ReadHeaders(
    core::Conn& c, std::int64_t queue_id, std::int64_t id) {
  DConn& conn = Native(c);
  static const std::string kSql =
      D::Statement(std::string("SELECT ") + D::kMessageStyle.headers_column +
                   " FROM sqlq_messages WHERE id = ? AND queue_id = ?");
  auto rows = conn.Run(kSql, Params().Int(id).Int(queue_id), "read headers");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return std::optional<std::string>();
  return std::optional<std::string>(rows->IsNull(0, 0) ? std::string()
                                                       : rows->Bytes(0, 0));
}

template <class D>
Status SqlEngine<D>::SaveProgress(core::Conn& c,
                                  const core::SaveProgressParams& p) {
  DConn& conn = Native(c);
  auto now = CheckedNow(conn, p.queue_id);
  if (!now.ok()) return now.status();
  // The receipt must still hold the message, as for an ack.
  auto holder =
      conn.Run(D::kReceiptHolder, Params().Int(p.receipt.id).Int(p.queue_id),
               "check receipt");
  if (!holder.ok()) return holder.status();
  if (holder->size() == 0 ||
      static_cast<std::uint64_t>(holder->Int(0, 0)) != p.receipt.token ||
      holder->Int(0, 1) != p.receipt.attempt) {
    return Refused(conn, p.queue_id, p.receipt);
  }
  static const std::string kSql = D::Statement(D::kSaveProgress);
  auto rows = conn.Run(kSql,
                       Params()
                           .Int(p.queue_id)
                           .Int(p.receipt.id)
                           .Text(p.progress)
                           .Int(*now)
                           .Int(*now + p.ttl.count()),
                       "save progress");
  return rows.ok() ? Status::Ok() : rows.status();
}

template <class D>
Status SqlEngine<D>::SaveResult(core::Conn& c,
                                const core::SaveResultParams& p) {
  DConn& conn = Native(c);
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  static const std::string kSql = D::Statement(D::kSaveResult);
  auto rows = conn.Run(kSql,
                       Params()
                           .Int(p.queue_id)
                           .Int(p.message_id)
                           .Bytes(p.result)
                           .Int(*now)
                           .Int(*now + p.ttl.count()),
                       "save result");
  return rows.ok() ? Status::Ok() : rows.status();
}

template <class D>
Result<std::optional<core::ResultRecord>> SqlEngine<D>::ReadResult(
    core::Conn& c, std::int64_t queue_id, std::int64_t message_id) {
  DConn& conn = Native(c);
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  static const std::string kSql = D::Statement(R"sql(
    SELECT progress, progress_us, result, completed_us FROM sqlq_results
    WHERE queue_id = ? AND message_id = ? AND expires_us >= ?)sql");
  auto rows = conn.Run(kSql, Params().Int(queue_id).Int(message_id).Int(*now),
                       "read result");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return std::optional<core::ResultRecord>();
  core::ResultRecord r;
  if (!rows->IsNull(0, 0)) {
    r.progress = rows->Bytes(0, 0);
    r.progress_us = rows->Int(0, 1);
  }
  if (!rows->IsNull(0, 3)) {
    r.result = rows->Bytes(0, 2);
    r.completed_us = rows->Int(0, 3);
  }
  return std::optional<core::ResultRecord>(std::move(r));
}

template <class D>
Result<std::int64_t> SqlEngine<D>::PruneResults(core::Conn& c) {
  DConn& conn = Native(c);
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  static const std::string kSql =
      D::Statement("DELETE FROM sqlq_results WHERE expires_us < ?");
  auto rows = conn.Run(kSql, Params().Int(*now), "prune results");
  if (!rows.ok()) return rows.status();
  return rows->affected();
}

}  // namespace sqlq::engines::shared

#endif  // SQLQ_ENGINES_SHARED_SQL_RESULTS_H_
