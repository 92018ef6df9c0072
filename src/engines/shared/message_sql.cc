#include "engines/shared/message_sql.h"

#include <algorithm>

#include "core/columns.h"
#include "core/rows.h"

namespace sqlq::engines::shared {

namespace {

// Collects the arguments of one statement and names their placeholders.
class Args {
 public:
  explicit Args(const MessageSqlStyle& style) : style_(style) {}
  std::string Int(std::int64_t v) {
    out_.push_back({.kind = SqlArg::kInt, .i = v});
    return Next();
  }
  std::string Text(std::string v) {
    out_.push_back({.kind = SqlArg::kText, .s = std::move(v)});
    return Next();
  }
  std::string Bytes(std::string v) {
    out_.push_back({.kind = SqlArg::kBytes, .s = std::move(v)});
    return Next();
  }
  std::vector<SqlArg> Take() { return std::move(out_); }

 private:
  std::string Next() {
    return style_.placeholder(static_cast<int>(out_.size()));
  }
  const MessageSqlStyle& style_;
  std::vector<SqlArg> out_;
};

const char* TableName(core::MessageTable t) {
  switch (t) {
    case core::MessageTable::kQueued:
      return "sqlq_messages";
    case core::MessageTable::kDead:
      return "sqlq_dead";
    case core::MessageTable::kArchived:
      return "sqlq_archive";
  }
  return "sqlq_messages";
}

std::string Columns(const MessageSqlStyle& s, core::MessageTable t) {
  const std::string tail =
      std::string(", payload, ") + s.headers_column + ", " + s.errors_column;
  switch (t) {
    case core::MessageTable::kQueued:
      return "id, priority, attempts, enqueued_us, ready_us, token, dedup, "
             "worker, last_error" +
             tail + ", " + s.null_int + ", grp, snoozes";
    case core::MessageTable::kDead:
      return std::string("id, priority, attempts, enqueued_us, ") + s.null_int +
             ", 0, " + s.null_bytes + ", " + s.null_bytes + ", last_error" +
             tail + ", died_us, grp, 0";
    case core::MessageTable::kArchived:
      return std::string("id, priority, attempts, enqueued_us, ") + s.null_int +
             ", 0, " + s.null_bytes + ", worker, " + s.null_bytes + tail +
             ", completed_us, " + s.null_bytes + ", 0";
  }
  return {};
}

// " AND ..." for the queue, the ids and the filter.
// `by_id`: the statement walks sqlq_messages by primary key (a listing).
std::string Conditions(const MessageSqlStyle& style, Args& a,
                       std::int64_t queue_id, core::MessageTable table,
                       std::span<const std::int64_t> ids,
                       const MessageFilter* f, std::int64_t now_us,
                       bool by_id = false) {
  std::string w = std::string(by_id ? style.queue_id_by_id : "queue_id") +
                  " = " + a.Int(queue_id);
  if (!ids.empty()) {
    w += " AND id IN (";
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (i > 0) w += ", ";
      w += a.Int(ids[i]);
    }
    w += ")";
  }
  if (f == nullptr) return w;
  if (table == core::MessageTable::kQueued && f->state) {
    switch (*f->state) {
      case MessageState::kReady:
        w += " AND ready_us <= " + a.Int(now_us);
        break;
      case MessageState::kDelayed:
        w += " AND token = 0 AND ready_us > " + a.Int(now_us) +
             " AND ready_us < " SQLQ_WAITING_US;
        break;
      case MessageState::kWaiting:
        w += " AND token = 0 AND ready_us >= " SQLQ_WAITING_US;
        break;
      case MessageState::kLeased:
        w += " AND token <> 0 AND ready_us > " + a.Int(now_us);
        break;
      default:
        break;
    }
  }
  if (f->min_priority) w += " AND priority >= " + a.Int(*f->min_priority);
  if (f->max_priority) w += " AND priority <= " + a.Int(*f->max_priority);
  if (!f->dedup_key.empty()) {
    // Only messages in the queue hold a key.
    if (table != core::MessageTable::kQueued) {
      w += " AND 1 = 0";
    } else {
      if (style.dedup_keys_apart) {
        // One placeholder a statement: the operands of + are not sequenced.
        w += " AND id IN (SELECT message_id FROM sqlq_dedup_keys WHERE "
             "queue_id = " +
             a.Int(queue_id);
        w += " AND dedup = " + a.Bytes(f->dedup_key) + ")";
      }
      w += " AND dedup = " + a.Bytes(f->dedup_key);
    }
  }
  if (f->group) {
    // The archive keeps no group.
    w += table == core::MessageTable::kArchived
             ? std::string(" AND 1 = 0")
             : " AND grp = " + a.Bytes(*f->group);
  }
  // A header with this value; the kind is kept as one (core/columns.h).
  auto header_is = [&](std::string_view key, std::string_view value) {
    const std::string k =
        a.Text(style.header_key_is_path ? "$.\"" + std::string(key) + "\""
                                        : std::string(key));
    const std::string v = a.Text(std::string(value));
    w += " AND " + style.header_equals(k, v);
  };
  if (f->header) header_is(f->header->first, f->header->second);
  if (f->kind) header_is(core::kKindHeader, *f->kind);
  if (!f->payload_prefix.empty()) {
    const std::string len =
        a.Int(static_cast<std::int64_t>(f->payload_prefix.size()));
    w += " AND " + style.payload_starts(len, a.Bytes(f->payload_prefix));
  }
  if (f->enqueued_after) {
    w += " AND enqueued_us >= " + a.Int(core::Us(*f->enqueued_after));
  }
  if (f->enqueued_before) {
    w += " AND enqueued_us < " + a.Int(core::Us(*f->enqueued_before));
  }
  return w;
}

}  // namespace

BuiltSql WindowSql(const MessageSqlStyle& style,
                   const core::FindMessagesParams& p) {
  Args a(style);
  std::string sql = "SELECT count(*), max(id) FROM (SELECT id FROM ";
  sql += TableName(p.table);
  if (p.table == core::MessageTable::kQueued) {
    sql += std::string(style.by_id) + " WHERE ";
  } else {
    sql += " WHERE queue_id = " + a.Int(p.queue_id) + " AND ";
  }
  sql += "id > " + a.Int(p.after_id);
  sql += " ORDER BY id LIMIT " + a.Int(p.scan) + ") w";
  return {std::move(sql), a.Take()};
}

BuiltSql FindSql(const MessageSqlStyle& style,
                 const core::FindMessagesParams& p, std::int64_t now_us,
                 std::int64_t bound) {
  Args a(style);
  std::string sql =
      "SELECT " + Columns(style, p.table) + " FROM " + TableName(p.table);
  const bool by_id = p.table == core::MessageTable::kQueued;
  if (by_id) sql += style.by_id;
  sql += " WHERE ";
  sql +=
      Conditions(style, a, p.queue_id, p.table, p.ids, p.filter, now_us, by_id);
  if (p.after_id > 0) sql += " AND id > " + a.Int(p.after_id);
  if (bound > 0) sql += " AND id <= " + a.Int(bound);
  sql += " ORDER BY id LIMIT " + a.Int(p.limit);
  return {std::move(sql), a.Take()};
}

BuiltSql CountSql(const MessageSqlStyle& style,
                  const core::FindMessagesParams& p, std::int64_t now_us) {
  Args a(style);
  std::string sql =
      std::string("SELECT count(*) FROM ") + TableName(p.table) + " WHERE " +
      Conditions(style, a, p.queue_id, p.table, p.ids, p.filter, now_us);
  return {std::move(sql), a.Take()};
}

std::vector<BuiltSql> ReportWaitingSql(const MessageSqlStyle& style,
                                       const core::ReportWaitingParams& r,
                                       std::int64_t now_us) {
  std::vector<BuiltSql> out;
  {
    Args a(style);
    std::string sql = "DELETE FROM sqlq_waiting WHERE process = " +
                      a.Text(std::string(r.process));
    out.push_back({std::move(sql), a.Take()});
  }
  {
    Args a(style);
    std::string sql = "DELETE FROM sqlq_waiting WHERE reported_us < " +
                      a.Int(now_us - r.forget_after.count());
    out.push_back({std::move(sql), a.Take()});
  }
  if (!r.waiting.empty()) {
    Args a(style);
    std::string sql =
        "INSERT INTO sqlq_waiting (process, queue_id, waiting, reported_us) "
        "VALUES ";
    for (std::size_t i = 0; i < r.waiting.size(); ++i) {
      // One placeholder at a time: "?" placeholders go by their order in
      // the text, and the operands of + have no order of evaluation.
      sql += i > 0 ? ", (" : "(";
      sql += a.Text(std::string(r.process));
      sql += ", " + a.Int(r.waiting[i].first);
      sql += ", " + a.Int(r.waiting[i].second);
      sql += ", " + a.Int(now_us) + ")";
    }
    out.push_back({std::move(sql), a.Take()});
  }
  return out;
}

BuiltSql ReadWaitingSql(const MessageSqlStyle& style, std::int64_t since_us) {
  Args a(style);
  std::string sql =
      "SELECT q.name, sum(w.waiting) FROM sqlq_waiting w "
      "JOIN sqlq_queues q ON q.id = w.queue_id "
      "WHERE w.reported_us >= " +
      a.Int(since_us) + " GROUP BY q.name";
  return {std::move(sql), a.Take()};
}

std::vector<BuiltSql> ReportWorkerSql(const MessageSqlStyle& style,
                                      const core::ReportWorkerParams& p,
                                      std::int64_t now_us) {
  std::vector<BuiltSql> out;
  {
    Args a(style);
    std::string sql =
        "DELETE FROM sqlq_workers WHERE id = " + a.Text(std::string(p.id));
    out.push_back({std::move(sql), a.Take()});
  }
  {
    Args a(style);
    std::string sql = "DELETE FROM sqlq_workers WHERE expires_us < " +
                      a.Int(now_us - p.forget_after.count());
    out.push_back({std::move(sql), a.Take()});
  }
  Args a(style);
  // One placeholder at a time (ReportWaitingSql says why).
  std::string sql =
      "INSERT INTO sqlq_workers (id, info, seen_us, expires_us) VALUES (";
  sql += a.Text(std::string(p.id));
  sql += ", " + a.Text(std::string(p.info));
  sql += ", " + a.Int(now_us);
  sql += ", " + a.Int(now_us + p.ttl.count()) + ")";
  out.push_back({std::move(sql), a.Take()});
  return out;
}

BuiltSql RemoveWorkerSql(const MessageSqlStyle& style, std::string_view id) {
  Args a(style);
  std::string sql =
      "DELETE FROM sqlq_workers WHERE id = " + a.Text(std::string(id));
  return {std::move(sql), a.Take()};
}

BuiltSql ListWorkersSql(const MessageSqlStyle& style, std::int64_t now_us) {
  Args a(style);
  std::string sql =
      "SELECT id, info, seen_us, expires_us FROM sqlq_workers "
      "WHERE expires_us >= " +
      a.Int(now_us) + " ORDER BY id";
  return {std::move(sql), a.Take()};
}

BuiltSql SteerSql(const MessageSqlStyle& style,
                  const core::SteerMessagesParams& p, std::int64_t now_us) {
  Args a(style);
  std::string sql;
  // The SET list first: its placeholders come before the WHERE's.
  switch (p.action) {
    case core::SteerAction::kDelete:
      sql = std::string("DELETE FROM ") + TableName(p.table) + " WHERE ";
      break;
    case core::SteerAction::kMakeReady:
    case core::SteerAction::kReschedule: {
      const std::int64_t at = p.action == core::SteerAction::kMakeReady
                                  ? now_us
                                  : std::max(p.at_us, now_us);
      // token = 0: a message whose lease ran out is no longer leased.
      sql = "UPDATE sqlq_messages SET ready_us = " + a.Int(at) +
            ", token = 0 WHERE ";
      break;
    }
    case core::SteerAction::kSetPriority:
      sql = "UPDATE sqlq_messages SET priority = " + a.Int(p.priority);
      if (style.has_npriority) {
        sql += ", npriority = " + a.Int(-static_cast<std::int64_t>(p.priority));
      }
      sql += " WHERE ";
      break;
  }
  sql += Conditions(style, a, p.queue_id, p.table, p.ids, p.filter, now_us);
  switch (p.action) {
    case core::SteerAction::kMakeReady:
      // Delayed ones only: a ready message keeps its place in the order,
      // and a waiting one waits for what it depends on.
      sql += " AND token = 0 AND ready_us > " + a.Int(now_us) +
             " AND ready_us < " SQLQ_WAITING_US;
      break;
    case core::SteerAction::kReschedule:
      sql += " AND (token = 0 OR ready_us <= " + a.Int(now_us) +
             ") AND ready_us < " SQLQ_WAITING_US;
      break;
    default:
      break;
  }
  return {std::move(sql), a.Take()};
}

}  // namespace sqlq::engines::shared
