// The statements that find and change messages chosen by a filter
// (WorkQueue::Get, ListMessages and the bulk changes), built once for
// every engine from its style: how it writes a parameter, reads a header
// and types a NULL. Every value goes in as a parameter, never into the SQL
// text; the only input-derived text is the number of id placeholders.
//
// The columns every found row has, in this order (core::DecodeMessageInfo):
//   id, priority, attempts, enqueued_us, ready_us, token, dedup, worker,
//   last_error, payload, headers, errors, left_us (died or completed), grp,
//   snoozes (0 outside the queue)
// with NULL where the table has no such column.

#ifndef SQLQ_ENGINES_SHARED_MESSAGE_SQL_H_
#define SQLQ_ENGINES_SHARED_MESSAGE_SQL_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/engine.h"

namespace sqlq::engines::shared {

// One bound value of a built statement.
struct SqlArg {
  enum Kind { kInt, kText, kBytes } kind = kInt;
  std::int64_t i = 0;
  std::string s;
};

struct BuiltSql {
  std::string sql;
  std::vector<SqlArg> args;
};

struct MessageSqlStyle {
  // The placeholder of parameter n (1-based): "?", "?3" or "$3".
  std::string (*placeholder)(int n);
  // The condition that the message has header `key` with value `value`,
  // given their placeholders.
  std::string (*header_equals)(const std::string& key,
                               const std::string& value);
  // The condition that the payload's first `len` bytes are `prefix`, given
  // their placeholders.
  std::string (*payload_starts)(const std::string& len,
                                const std::string& prefix);
  // Whether the key goes in as a JSON path ($."key") rather than the name.
  bool header_key_is_path = false;
  const char* headers_column;  // as text
  const char* errors_column;
  const char* null_int;
  const char* null_bytes;
  // MariaDB keeps npriority = -priority beside priority.
  bool has_npriority = false;
  // A dedup key filter goes through sqlq_dedup_keys, which holds the keys
  // (MariaDB since schema version 25: no index on sqlq_messages has them).
  bool dedup_keys_apart = false;
  // How a listing names its walk of sqlq_messages by primary key, after
  // the table's name (MariaDB: FORCE INDEX (PRIMARY)).
  const char* by_id = "";
  // The queue column as a listing of sqlq_messages compares it, so that no
  // index on it is taken instead of the primary key (SQLite: +queue_id;
  // PostgreSQL: queue_id + 0).
  const char* queue_id_by_id = "queue_id";
};

// The window a listing page reads: how many rows lie past `after_id`, up
// to `scan`, and the last of their ids (SELECT count, max id). In the dead
// letters and the archive, the queue's rows, by their (queue_id, id)
// index; in sqlq_messages, the rows of every queue, by the primary key:
// ids are one sequence over all queues, and an index of each queue's ids
// would cost every send and ack a write more (a fifth of a batched send's
// rate) for the listing's sake. A page of a queue among larger ones may
// therefore find none of its messages and still have a next cursor.
BuiltSql WindowSql(const MessageSqlStyle& style,
                   const core::FindMessagesParams& p);

// The rows of the page: the filter's messages with after_id < id <= bound
// (no upper bound when `bound` is 0), in id order, at most p.limit.
BuiltSql FindSql(const MessageSqlStyle& style,
                 const core::FindMessagesParams& p, std::int64_t now_us,
                 std::int64_t bound);

// How many messages the filter chooses (SELECT count(*)), in the queue's
// part of the table, found by whichever index the database picks.
BuiltSql CountSql(const MessageSqlStyle& style,
                  const core::FindMessagesParams& p, std::int64_t now_us);

// The statements of Engine::ReportWaiting, in order, at the engine's
// clock `now_us`: this process's earlier rows of sqlq_waiting go, so do
// every process's rows older than forget_after, and the new counts go in
// (none when there are none).
std::vector<BuiltSql> ReportWaitingSql(const MessageSqlStyle& style,
                                       const core::ReportWaitingParams& r,
                                       std::int64_t now_us);
// Engine::ReadWaiting: (queue name, claims waiting) of the queues that
// have any in reports made at `since_us` or later.
BuiltSql ReadWaitingSql(const MessageSqlStyle& style, std::int64_t since_us);
// WorkerOps: the statements of ReportWorker, in order; of RemoveWorker; of
// ListWorkers (id, info, seen_us, expires_us), at the engine's now_us.
std::vector<BuiltSql> ReportWorkerSql(const MessageSqlStyle& style,
                                      const core::ReportWorkerParams& p,
                                      std::int64_t now_us);
BuiltSql RemoveWorkerSql(const MessageSqlStyle& style, std::string_view id);
BuiltSql ListWorkersSql(const MessageSqlStyle& style, std::int64_t now_us);

// The statement of a bulk change (core::SteerMessagesParams); its affected rows
// are what changed.
BuiltSql SteerSql(const MessageSqlStyle& style,
                  const core::SteerMessagesParams& p, std::int64_t now_us);

// Engine::FindMessages over an engine's way of running statements, the
// same for every engine: `window(sql)` runs WindowSql and returns its
// (count, max id); `rows(sql)` runs FindSql and returns the messages.
template <class Window, class Rows>
Result<core::FoundMessages> FindMessagesWith(const MessageSqlStyle& style,
                                             const core::FindMessagesParams& p,
                                             std::int64_t now_us, Window window,
                                             Rows rows) {
  core::FoundMessages out;
  std::int64_t bound = 0;
  if (p.scan > 0 && p.ids.empty()) {
    Result<std::pair<std::int64_t, std::int64_t>> w =
        window(WindowSql(style, p));
    if (!w.ok()) return w.status();
    if (w->first == 0) return out;  // nothing past after_id
    bound = w->second;
    if (w->first >= p.scan) out.scanned_to = bound;
  }
  auto found = rows(FindSql(style, p, now_us, bound));
  if (!found.ok()) return found.status();
  out.messages = std::move(*found);
  return out;
}

}  // namespace sqlq::engines::shared

#endif  // SQLQ_ENGINES_SHARED_MESSAGE_SQL_H_
