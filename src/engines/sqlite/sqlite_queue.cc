// SQLite engine: queues and names, sends, stats, dead letters and the archive.

#include "engines/sqlite/sqlite_engine_impl.h"

namespace sqlq::engines::sqlite {

namespace {

// A queue's options, bound from parameter `first` on in the order
// CreateQueue's and AlterQueue's statements take them.
// `labels`: EncodeHeaders(o.labels), which must outlive the statement's
// execution.
Stmt& BindOptions(Stmt& st, int first, const QueueOptions& o,
                  const std::string& labels) {
  return st.Bind(first, o.max_attempts)
      .Bind(first + 1, Us(o.lease))
      .Bind(first + 2, Us(o.backoff_base))
      .Bind(first + 3, Us(o.backoff_max))
      .Bind(first + 4, o.archive ? 1 : 0)
      .Bind(first + 5, Us(o.retention))
      .Bind(first + 6, static_cast<std::int64_t>(o.max_payload_bytes))
      .Bind(first + 7, Us(o.dead_retention))
      .Bind(first + 8, Us(o.unique_for))
      .Bind(first + 9, core::LimitColumn(o.max_leased))
      .Bind(first + 10, core::RateColumn(o.rate_limit))
      .Bind(first + 11, core::LimitColumn(o.rate_burst))
      .Bind(first + 12, core::LimitColumn(o.group_limit))
      .BindText(first + 13, o.dead_letter_queue)
      .BindTextOrNull(first + 14, labels);
}

}  // namespace

Result<core::QueueRecord> SqliteEngine::CreateQueue(
    Conn& c, const core::CreateQueueParams& op) {
  const auto& [name, o] = op;
  SqliteConn& conn = Sql(c);
  const Timestamp now = clock_->Now();
  SQLQ_PREPARE(st, conn, R"sql(
    INSERT INTO sqlq_queues (name, max_attempts, lease_us, backoff_base_us,
      backoff_max_us, archive, retention_us, max_payload, dead_retention_us,
      unique_for_us, max_leased, rate_u, rate_burst, group_limit,
      dead_letter_queue, labels, created_us, group_mode)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,
      ?16, ?17, ?18)
    ON CONFLICT (name) DO NOTHING)sql");
  const std::string labels = core::EncodeHeaders(o.labels);
  BindOptions(st.BindText(1, name), 2, o, labels)
      .Bind(17, Us(now))
      .Bind(18, static_cast<int>(o.groups));
  Status s = st.Run("create queue");
  if (!s.ok()) return s;
  if (conn.changes() == 0) return Taken(conn, name);
  core::QueueRecord r;
  r.id = sqlite3_last_insert_rowid(conn.db());
  r.info = {.name = std::string(name), .options = o, .created_at = now};
  // created_at as stored, at microsecond resolution.
  return r;
}

Result<core::QueueRecord> SqliteEngine::GetQueue(Conn& c,
                                                 std::string_view name) {
  static const std::string sql =
      std::string(kSelectQueue) + " WHERE name = ?1 AND kind = 'queue'";
  SqliteConn& conn = Sql(c);
  SQLQ_PREPARE(st, conn, sql.c_str());
  st.BindText(1, name);
  int rc = st.Step();
  if (rc == SQLITE_ROW) return core::DecodeQueue(st);
  if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "look up queue");
  return Missing(conn, name, "queue");
}

Result<std::vector<core::QueueRecord>> SqliteEngine::ListQueues(Conn& c) {
  static const std::string sql =
      std::string(kSelectQueue) + " WHERE kind = 'queue' ORDER BY name";
  SqliteConn& conn = Sql(c);
  SQLQ_PREPARE(st, conn, sql.c_str());
  return st.All([](const Stmt& r) { return core::DecodeQueue(r); },
                "list queues");
}

Status SqliteEngine::DropQueue(Conn& c, std::int64_t queue_id) {
  SqliteConn& conn = Sql(c);
  static constexpr const char* kDeletes[] = {
      "DELETE FROM sqlq_messages WHERE queue_id = ?1",
      "DELETE FROM sqlq_dead WHERE queue_id = ?1",
      "DELETE FROM sqlq_archive WHERE queue_id = ?1",
      "DELETE FROM sqlq_dedup_holds WHERE queue_id = ?1",
      "DELETE FROM sqlq_limits WHERE queue_id = ?1",
      "DELETE FROM sqlq_leases WHERE queue_id = ?1",
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

Status SqliteEngine::AlterQueue(Conn& c, const core::AlterQueueParams& op) {
  const auto& [queue_id, o] = op;
  SqliteConn& conn = Sql(c);
  SQLQ_PREPARE(st, conn, R"sql(
    UPDATE sqlq_queues SET max_attempts = ?1, lease_us = ?2,
      backoff_base_us = ?3, backoff_max_us = ?4, archive = ?5,
      retention_us = ?6, max_payload = ?7, dead_retention_us = ?8,
      unique_for_us = ?9, max_leased = ?10, rate_u = ?11, rate_burst = ?12,
      group_limit = ?13, dead_letter_queue = ?14, labels = ?15
    WHERE id = ?16 AND kind = 'queue')sql");
  const std::string labels = core::EncodeHeaders(o.labels);
  BindOptions(st, 1, o, labels).Bind(16, queue_id);
  Status s = st.Run("alter queue");
  if (!s.ok()) return s;
  if (conn.changes() == 0) return core::QueueGone(queue_id);
  return Status::Ok();
}

Result<std::int64_t> SqliteEngine::UnlinkDeadLetterQueue(
    Conn& c, std::string_view name) {
  SqliteConn& conn = Sql(c);
  SQLQ_PREPARE(st, conn, R"sql(
    UPDATE sqlq_queues SET dead_letter_queue = ''
    WHERE dead_letter_queue = ?1 AND kind = 'queue')sql");
  st.BindText(1, name);
  Status s = st.Run("unlink dead letters");
  if (!s.ok()) return s;
  return static_cast<std::int64_t>(conn.changes());
}

Status SqliteEngine::SetPaused(Conn& c, const core::SetPausedParams& p) {
  SqliteConn& conn = Sql(c);
  SQLQ_PREPARE(st, conn,
               "UPDATE sqlq_queues SET paused = ?1 WHERE id = ?2 AND kind = "
               "'queue'");
  st.Bind(1, p.paused ? 1 : 0).Bind(2, p.queue_id);
  Status s = st.Run(p.paused ? "pause queue" : "resume queue");
  if (!s.ok()) return s;
  if (conn.changes() == 0) return core::QueueGone(p.queue_id);
  return Status::Ok();
}

Result<std::int64_t> SqliteEngine::PruneDead(Conn& c,
                                             const core::PruneDeadParams& op) {
  const auto& [queue_id, retention] = op;
  return DeleteBefore(Sql(c), queue_id,
                      "DELETE FROM sqlq_dead WHERE queue_id = ?1 AND "
                      "died_us < ?2",
                      Us(clock_->Now()) - retention.count(),
                      "prune dead letters");
}

Result<std::int64_t> SqliteEngine::PruneHolds(Conn& c, std::int64_t queue_id) {
  return DeleteBefore(Sql(c), queue_id,
                      "DELETE FROM sqlq_dedup_holds WHERE queue_id = ?1 AND "
                      "until_us <= ?2",
                      Us(clock_->Now()), "prune dedup holds");
}

Result<std::int64_t> SqliteEngine::PurgeQueue(Conn& c, std::int64_t queue_id) {
  return DeleteOfQueue(Sql(c), queue_id,
                       "DELETE FROM sqlq_messages WHERE queue_id = ?1",
                       "purge queue");
}

Result<std::int64_t> SqliteEngine::DeleteBefore(SqliteConn& conn,
                                                std::int64_t queue_id,
                                                const char* sql,
                                                std::int64_t cutoff_us,
                                                std::string_view what) {
  Status s = CheckQueue(conn, queue_id);
  if (!s.ok()) return s;
  SQLQ_PREPARE(st, conn, sql);
  st.Bind(1, queue_id).Bind(2, cutoff_us);
  s = st.Run(what);
  if (!s.ok()) return s;
  return conn.changes();
}

Result<std::int64_t> SqliteEngine::DeleteOfQueue(SqliteConn& conn,
                                                 std::int64_t queue_id,
                                                 const char* sql,
                                                 std::string_view what) {
  Status s = CheckQueue(conn, queue_id);
  if (!s.ok()) return s;
  SQLQ_PREPARE(st, conn, sql);
  st.Bind(1, queue_id);
  s = st.Run(what);
  if (!s.ok()) return s;
  return conn.changes();
}

Result<QueueStats> SqliteEngine::Stats(Conn& c, std::int64_t queue_id) {
  SqliteConn& conn = Sql(c);
  QueueStats out;
  const std::int64_t now = Us(clock_->Now());
  {
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT name, sends, claims, acks, nacks, expirations, dead_lettered
      FROM sqlq_queues WHERE id = ?1)sql");
    st.Bind(1, queue_id);
    int rc = st.Step();
    if (rc == SQLITE_DONE) return core::QueueGone(queue_id);
    if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "stats");
    out.name = st.Text(0);
    out.sends = st.Int(1);
    out.claims = st.Int(2);
    out.acks = st.Int(3);
    out.nacks = st.Int(4);
    out.expirations = st.Int(5);
    out.dead_lettered = st.Int(6);
  }
  {
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT coalesce(sum(ready_us <= ?2), 0),
             coalesce(sum(ready_us > ?2 AND token = 0), 0),
             coalesce(sum(ready_us > ?2 AND token != 0), 0),
             min(CASE WHEN ready_us <= ?2 THEN ready_us END)
      FROM sqlq_messages WHERE queue_id = ?1)sql");
    st.Bind(1, queue_id).Bind(2, now);
    int rc = st.Step();
    if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "stats");
    out.ready = st.Int(0);
    out.delayed = st.Int(1);
    out.leased = st.Int(2);
    if (!st.IsNull(3)) {
      out.oldest_ready_age =
          std::chrono::duration_cast<Duration>(Micros(now - st.Int(3)));
    }
  }
  auto count = [&](const char* sql, std::int64_t& into) -> Status {
    SQLQ_PREPARE(st, conn, sql);
    st.Bind(1, queue_id);
    int rc = st.Step();
    if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "stats");
    into = st.Int(0);
    return Status::Ok();
  };
  Status s =
      count("SELECT count(*) FROM sqlq_dead WHERE queue_id = ?1", out.dead);
  if (!s.ok()) return s;
  s = count("SELECT count(*) FROM sqlq_archive WHERE queue_id = ?1",
            out.archived);
  if (!s.ok()) return s;
  return out;
}

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
  for (const Message& m : p.messages) {
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
      // Bound as is (SQLITE_STATIC): lives until the statement has run.
      const std::string headers = core::EncodeHeaders(m.headers);
      SQLQ_PREPARE(st, conn, R"sql(
        INSERT INTO sqlq_messages
          (queue_id, priority, ready_us, enqueued_us, dedup, payload, headers,
           grp)
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
        ON CONFLICT (queue_id, dedup) WHERE dedup IS NOT NULL DO NOTHING)sql");
      st.Bind(1, p.queue_id)
          .Bind(2, m.priority)
          .Bind(3, std::max(Us(now) + Us(m.delay), core::NotBeforeUs(m)))
          .Bind(4, Us(now))
          .BindTextOrNull(5, m.dedup_key)
          .BindBlob(6, m.payload)
          .BindTextOrNull(7, headers);
      if (auto g = core::GroupOf(m, p.grouped)) {
        st.BindText(8, *g);
      } else {
        st.BindNull(8);
      }
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

Result<std::vector<DeadLetter>> SqliteEngine::ListDead(
    Conn& c, const core::ListDeadParams& op) {
  const auto& [queue_id, o] = op;
  SqliteConn& conn = Sql(c);
  Status s = CheckQueue(conn, queue_id);
  if (!s.ok()) return s;
  SQLQ_PREPARE(st, conn, R"sql(
    SELECT id, priority, attempts, enqueued_us, died_us, last_error, payload,
           headers, errors
    FROM sqlq_dead WHERE queue_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3)sql");
  st.Bind(1, queue_id).Bind(2, o.after_id).Bind(3, o.limit);
  return st.All([](const Stmt& r) { return core::DecodeDead(r); }, "list dead");
}

Result<std::int64_t> SqliteEngine::Redrive(Conn& c,
                                           const core::RedriveParams& op) {
  const auto& [queue_id, ids, to_queue_id] = op;
  const std::int64_t to = to_queue_id != 0 ? to_queue_id : queue_id;
  SqliteConn& conn = Sql(c);
  Status s = CheckQueue(conn, queue_id);
  if (!s.ok()) return s;
  if (to != queue_id) {
    s = CheckQueue(conn, to);
    if (!s.ok()) return s;
  }
  const std::int64_t now = Us(clock_->Now());
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

Result<std::int64_t> SqliteEngine::PurgeDead(Conn& c, std::int64_t queue_id) {
  return DeleteOfQueue(Sql(c), queue_id,
                       "DELETE FROM sqlq_dead WHERE queue_id = ?1",
                       "purge dead letters");
}

Result<std::vector<ArchivedMessage>> SqliteEngine::ListArchive(
    Conn& c, const core::ListArchiveParams& op) {
  const auto& [queue_id, o] = op;
  SqliteConn& conn = Sql(c);
  Status s = CheckQueue(conn, queue_id);
  if (!s.ok()) return s;
  SQLQ_PREPARE(st, conn, R"sql(
    SELECT id, priority, attempts, enqueued_us, completed_us, worker, payload,
           headers, errors
    FROM sqlq_archive WHERE queue_id = ?1 AND id > ?2
    ORDER BY id LIMIT ?3)sql");
  st.Bind(1, queue_id).Bind(2, o.after_id).Bind(3, o.limit);
  return st.All([](const Stmt& r) { return core::DecodeArchived(r); },
                "list archive");
}

Result<std::int64_t> SqliteEngine::PruneArchive(
    Conn& c, const core::PruneArchiveParams& op) {
  const auto& [queue_id, retention] = op;
  return DeleteBefore(Sql(c), queue_id,
                      "DELETE FROM sqlq_archive WHERE queue_id = ?1 AND "
                      "completed_us < ?2",
                      Us(clock_->Now()) - retention.count(), "prune archive");
}

namespace {

constexpr const shared::MessageSqlStyle& kMessageStyle = Dialect::kMessageStyle;

// Runs a statement built at run time, prepared for this call only (the
// connection's cache keeps statements by their text's address), calling
// `row(stmt)` for each row.
template <class Row>
Status RunBuilt(SqliteConn& conn, const shared::BuiltSql& b,
                std::string_view what, Row row) {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(conn.db(), b.sql.c_str(), -1, &raw, nullptr);
  if (rc != SQLITE_OK) return Translate(rc, conn.db(), what);
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> owned(raw,
                                                              sqlite3_finalize);
  Stmt st(conn.db(), raw);
  for (std::size_t i = 0; i < b.args.size(); ++i) {
    const shared::SqlArg& a = b.args[i];
    const int n = static_cast<int>(i + 1);
    // Dedup keys are text columns here: kBytes binds as text too.
    if (a.kind == shared::SqlArg::kInt) {
      st.Bind(n, a.i);
    } else {
      st.BindText(n, a.s);
    }
  }
  while ((rc = st.Step()) == SQLITE_ROW) row(st);
  if (rc != SQLITE_DONE) return Translate(rc, conn.db(), what);
  return Status::Ok();
}

}  // namespace

Result<core::FoundMessages> SqliteEngine::FindMessages(
    Conn& c, const core::FindMessagesParams& p) {
  SqliteConn& conn = Sql(c);
  Status s = CheckQueue(conn, p.queue_id);
  if (!s.ok()) return s;
  const std::int64_t now = Us(clock_->Now());
  return shared::FindMessagesWith(
      kMessageStyle, p, now,
      [&](const shared::BuiltSql& b)
          -> Result<std::pair<std::int64_t, std::int64_t>> {
        std::pair<std::int64_t, std::int64_t> w{0, 0};
        Status r = RunBuilt(conn, b, "find messages", [&](const Stmt& st) {
          if (!st.IsNull(1)) w = {st.Int(0), st.Int(1)};
        });
        if (!r.ok()) return r;
        return w;
      },
      [&](const shared::BuiltSql& b) -> Result<std::vector<MessageInfo>> {
        std::vector<MessageInfo> out;
        Status r = RunBuilt(conn, b, "find messages", [&](const Stmt& st) {
          out.push_back(core::DecodeMessageInfo(st, p.table, now));
        });
        if (!r.ok()) return r;
        return out;
      });
}

Result<std::int64_t> SqliteEngine::CountMessages(
    Conn& c, const core::FindMessagesParams& p) {
  SqliteConn& conn = Sql(c);
  Status s = CheckQueue(conn, p.queue_id);
  if (!s.ok()) return s;
  std::int64_t n = 0;
  s = RunBuilt(conn, shared::CountSql(kMessageStyle, p, Us(clock_->Now())),
               "count messages", [&](const Stmt& st) { n = st.Int(0); });
  if (!s.ok()) return s;
  return n;
}

Status SqliteEngine::ReportWaiting(Conn& c, const core::WaitingReport& r) {
  SqliteConn& conn = Sql(c);
  for (const shared::BuiltSql& b :
       shared::ReportWaitingSql(kMessageStyle, r, Us(clock_->Now()))) {
    Status s = RunBuilt(conn, b, "report waiting claims", [](const Stmt&) {});
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Result<std::map<std::string, std::int64_t>> SqliteEngine::ReadWaiting(
    Conn& c, core::Micros fresh) {
  SqliteConn& conn = Sql(c);
  std::map<std::string, std::int64_t> out;
  Status s = RunBuilt(
      conn,
      shared::ReadWaitingSql(kMessageStyle, Us(clock_->Now()) - fresh.count()),
      "read waiting claims",
      [&](const Stmt& st) { out[st.Text(0)] = st.Int(1); });
  if (!s.ok()) return s;
  return out;
}

Result<std::int64_t> SqliteEngine::Steer(Conn& c, const core::SteerParams& p) {
  SqliteConn& conn = Sql(c);
  Status s = CheckQueue(conn, p.queue_id);
  if (!s.ok()) return s;
  s = RunBuilt(conn, shared::SteerSql(kMessageStyle, p, Us(clock_->Now())),
               "change messages", [](const Stmt&) {});
  if (!s.ok()) return s;
  return conn.changes();
}

Result<std::int64_t> SqliteEngine::InsertKind(
    SqliteConn& conn, std::string_view name, const char* kind,
    std::size_t max_payload, std::int64_t capacity, int max_failures) {
  SQLQ_PREPARE(st, conn, R"sql(
    INSERT INTO sqlq_queues (name, kind, max_attempts, lease_us,
      backoff_base_us, backoff_max_us, archive, retention_us, max_payload,
      created_us, capacity, max_failures)
    VALUES (?1, ?2, 0, 0, 0, 0, 0, 0, ?3, ?4, ?5, ?6)
    ON CONFLICT (name) DO NOTHING)sql");
  st.BindText(1, name)
      .BindText(2, kind)
      .Bind(3, static_cast<std::int64_t>(max_payload))
      .Bind(4, Us(clock_->Now()))
      .Bind(5, capacity)
      .Bind(6, max_failures);
  Status s = st.Run(fmt::format("create {}", kind));
  if (!s.ok()) return s;
  if (conn.changes() == 0) return Taken(conn, name);
  return sqlite3_last_insert_rowid(conn.db());
}

Status SqliteEngine::Missing(SqliteConn& conn, std::string_view name,
                             std::string_view want) {
  SQLQ_PREPARE(st, conn, "SELECT kind FROM sqlq_queues WHERE name = ?1");
  st.BindText(1, name);
  int rc = st.Step();
  if (rc == SQLITE_ROW) {
    return core::NotA(name, st.Text(0), want);
  }
  if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "look up name");
  return core::NotA(name, std::nullopt, want);
}

Status SqliteEngine::Taken(SqliteConn& conn, std::string_view name) {
  SQLQ_PREPARE(st, conn, "SELECT kind FROM sqlq_queues WHERE name = ?1");
  st.BindText(1, name);
  int rc = st.Step();
  if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "look up name");
  return core::NameTaken(name, st.Text(0));
}

Status SqliteEngine::CheckQueue(SqliteConn& conn, std::int64_t queue_id) {
  if (conn.known_queues.contains(queue_id)) return Status::Ok();
  SQLQ_PREPARE(st, conn, "SELECT 1 FROM sqlq_queues WHERE id = ?1");
  st.Bind(1, queue_id);
  int rc = st.Step();
  if (rc == SQLITE_ROW) {
    conn.known_queues.insert(queue_id);
    return Status::Ok();
  }
  if (rc == SQLITE_DONE) return core::QueueGone(queue_id);
  return Translate(rc, conn.db(), "look up queue");
}

}  // namespace sqlq::engines::sqlite
