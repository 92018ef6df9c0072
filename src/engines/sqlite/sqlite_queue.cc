// SQLite engine: dropping a queue, sends and redrives (the rest of the
// operations on queues are engines/shared/, over dialect.h).

#include <array>
#include <bit>
#include <span>
#include <string>

#include "engines/shared/sql_deps.h"
#include "engines/sqlite/sqlite_engine_impl.h"

namespace sqlq::engines::sqlite {

Status SqliteEngine::DropQueue(Conn& c, std::int64_t queue_id) {
  SqliteConn& conn = Sql(c);
  static constexpr const char* kDeletes[] = {
      "DELETE FROM sqlq_messages WHERE queue_id = ?1",
      "DELETE FROM sqlq_dead WHERE queue_id = ?1",
      "DELETE FROM sqlq_archive WHERE queue_id = ?1",
      "DELETE FROM sqlq_dedup_holds WHERE queue_id = ?1",
      "DELETE FROM sqlq_limits WHERE queue_id = ?1",
      "DELETE FROM sqlq_leases WHERE queue_id = ?1",
      "DELETE FROM sqlq_results WHERE queue_id = ?1",
      "DELETE FROM sqlq_queues WHERE id = ?1",
  };
  for (const char* sql : kDeletes) {
    SQLQ_PREPARE(st, conn, sql);
    st.Bind(1, queue_id);
    Status s = st.Run("drop queue");
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

namespace {

// A send's multi-row INSERTs (Send): kInsertRows[n] stores n messages of
// kColumns values each, for n a power of two from 2 to kMaxRows (a
// connection keeps at most six of them prepared).
constexpr std::size_t kMaxRows = 64;
constexpr int kColumns = 7;

std::array<std::string, kMaxRows + 1> InsertRowsSql() {
  std::array<std::string, kMaxRows + 1> out;
  for (std::size_t n = 2; n <= kMaxRows; n *= 2) {
    // Plain ? placeholders: SQLite numbers them in order, row by row.
    out[n] =
        "INSERT INTO sqlq_messages (queue_id, priority, ready_us, "
        "enqueued_us, payload, headers, grp) VALUES " +
        shared::deps_sql::Marks(n, "(?, ?, ?, ?, ?, ?, ?)");
  }
  return out;
}

// Kept prepared by their addresses (SqliteConn::Prepare).
const std::array<std::string, kMaxRows + 1> kInsertRows = InsertRowsSql();

// Binds message `m`'s kColumns values, in the order of kInsertRows's
// columns, from parameter at + 1 on. `headers` (its encoded headers) is
// bound as is (SQLITE_STATIC): it must live until the statement has run.
void BindMessage(Stmt& st, int at, const core::SendParams& p, const Message& m,
                 std::int64_t now_us, const std::string& headers) {
  st.Bind(at + 1, p.queue_id)
      .Bind(at + 2, m.priority)
      .Bind(at + 3, std::max(now_us + Us(m.delay), core::NotBeforeUs(m)))
      .Bind(at + 4, now_us)
      .BindBlob(at + 5, m.payload)
      .BindTextOrNull(at + 6, headers);
  if (auto g = core::GroupOf(m, p.grouped)) {
    st.BindText(at + 7, *g);
  } else {
    st.BindNull(at + 7);
  }
}

}  // namespace

Result<std::vector<SendResult>> SqliteEngine::Send(Conn& c,
                                                   const core::SendParams& p) {
  SqliteConn& conn = Sql(c);
  // Checked before writing, so that a send to a dropped queue is a clean
  // failure (engine.h).
  Status checked = CheckQueue(conn, p.queue_id);
  if (!checked.ok()) return checked;
  const Timestamp now = clock_->Now();
  std::vector<SendResult> out;
  out.reserve(p.messages.size());
  std::int64_t stored = 0;
  // Messages without a dedup key go up to kMaxRows to a statement: one
  // statement per message costs a statement's setup and its AUTOINCREMENT
  // bookkeeping (a read and a write of sqlite_sequence) for each.
  const std::span<const Message> all = p.messages;
  std::vector<std::string> headers;
  for (std::size_t i = 0; i < all.size(); ++i) {
    std::size_t run = 0;
    while (i + run < all.size() && run < kMaxRows &&
           all[i + run].dedup_key.empty()) {
      ++run;
    }
    const std::size_t n = std::bit_floor(run);  // 0 or a power of two
    if (n >= 2) {
      headers.resize(n);
      SQLQ_PREPARE(st, conn, kInsertRows[n].c_str());
      for (std::size_t k = 0; k < n; ++k) {
        headers[k] = core::EncodeMessageHeaders(all[i + k]);
        BindMessage(st, static_cast<int>(k) * kColumns, p, all[i + k], Us(now),
                    headers[k]);
      }
      Status s = st.Run("send");
      if (!s.ok()) return s;
      // SQLite numbers the rows of one INSERT in the order of its VALUES,
      // each one above the last (AUTOINCREMENT: above the table's highest
      // id and sqlite_sequence); nothing else inserts meanwhile (the write
      // lock is held, and sqlq's tables have no triggers). So the ids are
      // the last one and those just below it.
      if (conn.changes() != static_cast<std::int64_t>(n)) {
        return Status::Internal("send: fewer rows stored than sent");
      }
      const std::int64_t last = sqlite3_last_insert_rowid(conn.db());
      for (std::size_t k = 0; k < n; ++k) {
        out.push_back({.id = last - static_cast<std::int64_t>(n - 1 - k)});
      }
      stored += static_cast<std::int64_t>(n);
      i += n - 1;
      continue;
    }
    const Message& m = all[i];
    if (p.unique_for.count() > 0 && !m.dedup_key.empty()) {
      // A key held after its message left (SendParams). Looked up first:
      // writers take turns, so no ack can commit in between.
      SQLQ_PREPARE(st, conn, R"sql(
        SELECT message_id FROM sqlq_dedup_holds
        WHERE queue_id = ?1 AND dedup = ?2 AND until_us > ?3)sql");
      st.Bind(1, p.queue_id).BindText(2, m.dedup_key).Bind(3, Us(now));
      int rc = st.Step();
      if (rc == SQLITE_ROW) {
        out.push_back({.id = st.Int(0), .duplicate = true});
        continue;
      }
      if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "send (dedup)");
    }
    {
      const std::string encoded = core::EncodeMessageHeaders(m);
      SQLQ_PREPARE(st, conn, R"sql(
        INSERT INTO sqlq_messages
          (queue_id, priority, ready_us, enqueued_us, payload, headers, grp,
           dedup)
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
        ON CONFLICT (queue_id, dedup) WHERE dedup IS NOT NULL DO NOTHING)sql");
      BindMessage(st, 0, p, m, Us(now), encoded);
      st.BindTextOrNull(kColumns + 1, m.dedup_key);
      Status s = st.Run("send");
      if (!s.ok()) return s;
    }
    if (conn.changes() == 1) {
      out.push_back({.id = sqlite3_last_insert_rowid(conn.db())});
      ++stored;
      continue;
    }
    // The dedup key is held by a message still in the queue.
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT id FROM sqlq_messages WHERE queue_id = ?1 AND dedup = ?2)sql");
    st.Bind(1, p.queue_id).BindText(2, m.dedup_key);
    int rc = st.Step();
    if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "send (dedup)");
    out.push_back({.id = st.Int(0), .duplicate = true});
  }
  if (stored > 0) {
    Status s = AddCounters(conn, p.queue_id, {.sends = stored});
    if (!s.ok()) return s;
  }
  return out;
}

Result<std::int64_t> SqliteEngine::MoveDeadLetters(
    SqliteConn& conn, const core::RedriveParams& op, std::int64_t to,
    std::int64_t now) {
  const auto& [queue_id, ids, to_queue_id] = op;
  Status s;
  // A redriven message is ready now with fresh attempts, in queue ?4; it
  // keeps its id (never reused, see schema.h) but not a dedup key.
  static constexpr const char* kInsertAll = R"sql(
    INSERT INTO sqlq_messages (id, queue_id, priority, ready_us, attempts,
      enqueued_us, last_error, payload, headers, errors, grp)
    SELECT id, ?4, priority, ?2, 0, enqueued_us, last_error, payload,
           headers, errors, grp
    FROM sqlq_dead WHERE queue_id = ?1 ORDER BY id)sql";
  static constexpr const char* kInsertOne = R"sql(
    INSERT INTO sqlq_messages (id, queue_id, priority, ready_us, attempts,
      enqueued_us, last_error, payload, headers, errors, grp)
    SELECT id, ?4, priority, ?2, 0, enqueued_us, last_error, payload,
           headers, errors, grp
    FROM sqlq_dead WHERE queue_id = ?1 AND id = ?3)sql";
  std::int64_t moved = 0;
  if (ids.empty()) {
    {
      SQLQ_PREPARE(st, conn, kInsertAll);
      st.Bind(1, queue_id).Bind(2, now).Bind(4, to);
      s = st.Run("redrive");
      if (!s.ok()) return s;
      moved = conn.changes();
    }
    SQLQ_PREPARE(st, conn, "DELETE FROM sqlq_dead WHERE queue_id = ?1");
    st.Bind(1, queue_id);
    s = st.Run("redrive");
    if (!s.ok()) return s;
    return moved;
  }
  for (std::int64_t id : ids) {
    {
      SQLQ_PREPARE(st, conn, kInsertOne);
      st.Bind(1, queue_id).Bind(2, now).Bind(3, id).Bind(4, to);
      s = st.Run("redrive");
      if (!s.ok()) return s;
      if (conn.changes() == 0) continue;
      ++moved;
    }
    SQLQ_PREPARE(st, conn,
                 "DELETE FROM sqlq_dead WHERE queue_id = ?1 AND id = ?2");
    st.Bind(1, queue_id).Bind(2, id);
    s = st.Run("redrive");
    if (!s.ok()) return s;
  }
  return moved;
}

}  // namespace sqlq::engines::sqlite
