// SQLite engine: claims, acks, nacks and extends (the lease of a message).

#include <string>
#include <unordered_map>
#include <vector>

#include "core/group_walk.h"
#include "engines/sqlite/sqlite_engine_impl.h"

namespace sqlq::engines::sqlite {

Status SqliteEngine::LeaseCandidate(SqliteConn& conn,
                                    const core::ClaimParams& p, Candidate& m,
                                    std::int64_t until,
                                    core::ClaimOutcome& out) {
  // A lease that ran out is an attempt that failed: its history says so.
  static constexpr const char* kLease = R"sql(
    UPDATE sqlq_messages
    SET token = ?2, attempts = attempts + 1, ready_us = ?3, worker = ?4
    WHERE id = ?1)sql";
  static constexpr const char* kLeaseExpired =
      "UPDATE sqlq_messages SET errors = " SQLQ_SQLITE_APPEND_ERROR(
          "?5", "?6") ", token = ?2, attempts = attempts + 1, "
                      "ready_us = ?3, worker = ?4 WHERE id = ?1";
  SQLQ_PREPARE(st, conn, m.token != 0 ? kLeaseExpired : kLease);
  st.Bind(1, m.id)
      .Bind(2, TokenBits(p.token))
      .Bind(3, until)
      .BindTextOrNull(4, p.worker);
  if (m.token != 0) st.Bind(5, m.ready_us).BindText(6, core::kLeaseExpired);
  Status s = st.Run("claim");
  if (!s.ok()) return s;
  ClaimedMessage cm;
  cm.id = m.id;
  cm.attempt = static_cast<int>(m.attempts + 1);
  cm.priority = static_cast<std::int32_t>(m.priority);
  cm.payload = std::move(m.payload);
  cm.enqueued_at = FromUs(m.enqueued_us);
  cm.lease_expires_at = FromUs(until);
  cm.headers = core::DecodeJob(m.headers, cm);
  cm.group = std::move(m.group);
  out.messages.push_back(std::move(cm));
  return Status::Ok();
}

Status SqliteEngine::BuryCandidate(SqliteConn& conn, const core::ClaimParams& p,
                                   const Candidate& m, std::int64_t now) {
  std::string why = fmt::format("lease expired on attempt {} of {}", m.attempts,
                                p.max_attempts);
  return MoveToDead(conn, m.id, why, now, core::kLeaseExpired, m.ready_us,
                    p.unique_for);
}

Result<core::ClaimOutcome> SqliteEngine::Claim(Conn& c,
                                               const core::ClaimParams& p) {
  SqliteConn& conn = Sql(c);
  Status checked = CheckQueue(conn, p.queue_id);
  if (!checked.ok()) return checked;
  if (p.groups != GroupMode::kNone) return ClaimGroups(conn, p);
  const std::int64_t now = Us(clock_->Now());
  const std::int64_t until = now + p.lease.count();
  core::ClaimOutcome out;
  // Payload bytes leased so far, against p.max_bytes.
  std::size_t bytes = 0;
  bool full = false;
  auto fits = [&](std::size_t size) {
    return p.max_bytes == 0 || out.messages.empty() ||
           bytes + size <= p.max_bytes;
  };
  // Candidates in claim order. Those whose attempts are used up go to the
  // dead letters, and we look again for the places they leave free.
  for (;;) {
    const int want = p.max - static_cast<int>(out.messages.size());
    std::vector<Candidate> found;
    // One index range per priority level, highest first: "priority = ?
    // AND ready_us <= now" is a range of the claim index, so leased and
    // delayed messages are never read, however many there are (a single
    // query ordered by priority would have to skip over them).
    std::optional<std::int64_t> below;
    std::size_t fetched = bytes;  // payload bytes leased and found
    while (static_cast<int>(found.size()) < want) {
      auto level = NextPriority(conn, p.queue_id, below);
      if (!level.ok()) return level.status();
      if (!level->has_value()) break;
      below = **level;
      SQLQ_PREPARE(st, conn, R"sql(
        SELECT id, priority, ready_us, token, attempts, enqueued_us, payload,
               headers, grp
        FROM sqlq_messages
        WHERE queue_id = ?1 AND priority = ?2 AND ready_us <= ?3
        ORDER BY ready_us, id
        LIMIT ?4)sql");
      st.Bind(1, p.queue_id)
          .Bind(2, *below)
          .Bind(3, now)
          .Bind(4, want - static_cast<int>(found.size()));
      int rc;
      while ((rc = st.Step()) == SQLITE_ROW) {
        found.push_back({st.Int(0), st.Int(1), st.Int(2), st.Int(3), st.Int(4),
                         st.Int(5), st.Blob(6),
                         st.IsNull(7) ? std::string() : st.Text(7),
                         st.IsNull(8) ? std::string() : st.Text(8)});
        fetched += found.back().payload.size();
        // Past the byte limit no more payloads are read: the reply they
        // would go into is full.
        if (p.max_bytes != 0 && fetched > p.max_bytes) break;
      }
      if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        return Translate(rc, conn.db(), "claim");
      }
      if (p.max_bytes != 0 && fetched > p.max_bytes) break;
    }
    bool buried = false;
    for (Candidate& m : found) {
      const bool dies = m.attempts >= p.max_attempts;
      if (!dies && !fits(m.payload.size())) {
        // Left as it is, for the next claim.
        full = true;
        break;
      }
      if (m.token != 0) ++out.expirations;
      if (dies) {
        Status s = BuryCandidate(conn, p, m, now);
        if (!s.ok()) return s;
        ++out.dead_lettered;
        buried = true;
        continue;
      }
      bytes += m.payload.size();
      Status s = LeaseCandidate(conn, p, m, until, out);
      if (!s.ok()) return s;
    }
    if (full || !buried || static_cast<int>(found.size()) < want) break;
  }
  const std::int64_t claimed = static_cast<std::int64_t>(out.messages.size());
  if (claimed + out.expirations + out.dead_lettered == 0) {
    // Nothing written: an empty claim stays read-only, so that idle
    // waiters make no commits (which would wake other waiters).
    return out;
  }
  Status s = AddCounters(conn, p.queue_id, out.Counters());
  if (!s.ok()) return s;
  return out;
}

Result<core::ClaimOutcome> SqliteEngine::ClaimGroups(
    SqliteConn& conn, const core::ClaimParams& p) {
  const std::int64_t now = Us(clock_->Now());
  const std::int64_t until = now + p.lease.count();
  const bool ordered = p.groups == GroupMode::kOrdered;
  core::ClaimOutcome out;
  // The group after `from` in key order (the first when unset); none past
  // the last. Each is one seek of the group index.
  auto next_group = [&](const std::optional<std::string>& from)
      -> Result<std::optional<std::string>> {
    static constexpr const char* kAfter = R"sql(
      SELECT grp FROM sqlq_messages WHERE queue_id = ?1 AND grp > ?2
      ORDER BY grp LIMIT 1)sql";
    static constexpr const char* kFirst = R"sql(
      SELECT grp FROM sqlq_messages WHERE queue_id = ?1 AND grp IS NOT NULL
      ORDER BY grp LIMIT 1)sql";
    SQLQ_PREPARE(st, conn, from ? kAfter : kFirst);
    st.Bind(1, p.queue_id);
    if (from) st.BindText(2, *from);
    int rc = st.Step();
    if (rc == SQLITE_ROW) return std::optional<std::string>(st.Text(0));
    if (rc != SQLITE_DONE) return Translate(rc, conn.db(), "claim");
    return std::optional<std::string>();
  };
  // A group's candidates, up to `limit` of them in id order: ordered, its
  // first message if that is ready (limit 1); fair, its first ready
  // messages.
  auto candidates = [&](const std::string& group,
                        int limit) -> Result<std::vector<Candidate>> {
    static constexpr const char* kHead = R"sql(
      SELECT id, priority, ready_us, token, attempts, enqueued_us, payload,
             headers
      FROM sqlq_messages WHERE queue_id = ?1 AND grp = ?2
      ORDER BY id LIMIT 1)sql";
    static constexpr const char* kReady = R"sql(
      SELECT id, priority, ready_us, token, attempts, enqueued_us, payload,
             headers
      FROM sqlq_messages WHERE queue_id = ?1 AND grp = ?2 AND ready_us <= ?3
      ORDER BY id LIMIT ?4)sql";
    // A group limit: the first ready messages of the group's window, its
    // ?3 oldest messages.
    static constexpr const char* kWindow = R"sql(
      SELECT id, priority, ready_us, token, attempts, enqueued_us, payload,
             headers
      FROM (SELECT * FROM sqlq_messages WHERE queue_id = ?1 AND grp = ?2
            ORDER BY id LIMIT ?3)
      WHERE ready_us <= ?4 ORDER BY id LIMIT ?5)sql";
    const bool window = !ordered && p.group_limit > 0;
    SQLQ_PREPARE(st, conn, ordered ? kHead : window ? kWindow : kReady);
    st.Bind(1, p.queue_id).BindText(2, group);
    if (window) {
      st.Bind(3, p.group_limit).Bind(4, now).Bind(5, limit);
    } else if (!ordered) {
      st.Bind(3, now).Bind(4, limit);
    }
    std::vector<Candidate> found;
    int rc;
    while ((rc = st.Step()) == SQLITE_ROW) {
      if (st.Int(2) > now) break;  // an ordered head not ready
      found.push_back(Candidate{
          st.Int(0), st.Int(1), st.Int(2), st.Int(3), st.Int(4), st.Int(5),
          st.Blob(6), st.IsNull(7) ? std::string() : st.Text(7), group});
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
      return Translate(rc, conn.db(), "claim");
    }
    return found;
  };
  auto candidate =
      [&](const std::string& group) -> Result<std::optional<Candidate>> {
    auto c = candidates(group, 1);
    if (!c.ok()) return c.status();
    if (c->empty()) return std::optional<Candidate>();
    return std::optional<Candidate>(std::move(c->front()));
  };
  // Candidates are read whole by the look; "locking" them takes them from
  // here (writes are one at a time: nothing else changes them meanwhile).
  std::unordered_map<std::int64_t, Candidate> seen;
  auto look = [&](std::optional<std::string> after, int n,
                  int want) -> Result<core::GroupLooks> {
    core::GroupLooks looks;
    bool from_first = !after;
    int found = 0;
    while (static_cast<int>(looks.groups.size()) < n && found < want) {
      auto group = next_group(after);
      if (!group.ok()) return group.status();
      if (!group->has_value()) {
        if (looks.groups.empty() && !from_first) {  // none after: wrap
          from_first = true;
          after.reset();
          continue;
        }
        looks.whole = from_first;
        break;
      }
      auto c = candidate(**group);
      if (!c.ok()) return c.status();
      core::GroupLook& g = looks.groups.emplace_back();
      g.group = **group;
      if (*c) {
        ++found;
        g.candidates.push_back((*c)->id);
        seen.insert_or_assign((*c)->id, std::move(**c));
      }
      after = std::move(*group);
    }
    // Every group seen: more candidates of each, for the later rounds.
    const int per = core::PerGroup(want, looks.groups.size());
    if (looks.whole && !ordered && per > 1) {
      for (core::GroupLook& g : looks.groups) {
        if (g.candidates.empty()) continue;
        auto more = candidates(g.group, per);
        if (!more.ok()) return more.status();
        g.candidates.clear();
        for (Candidate& m : *more) {
          g.candidates.push_back(m.id);
          seen.insert_or_assign(m.id, std::move(m));
        }
      }
    }
    return looks;
  };
  auto lock = [&](const std::vector<std::int64_t>& ids)
      -> Result<std::vector<Candidate>> { return core::TakeSeen(seen, ids); };
  Status walked = core::WalkGroups<Candidate>(
      p, out, look, lock, candidate,
      [&](const Candidate& m) { return BuryCandidate(conn, p, m, now); },
      [&](std::vector<Candidate>& taken) {
        for (Candidate& m : taken) {
          Status s = LeaseCandidate(conn, p, m, until, out);
          if (!s.ok()) return s;
        }
        return Status::Ok();
      });
  if (!walked.ok()) return walked;
  if (out.messages.size() + out.expirations + out.dead_lettered == 0) {
    return out;
  }
  Status s = AddCounters(conn, p.queue_id, out.Counters());
  if (!s.ok()) return s;
  return out;
}

Result<std::optional<Timestamp>> SqliteEngine::NextReadyAt(
    Conn& c, std::int64_t queue_id) {
  SqliteConn& conn = Sql(c);
  // The earliest ready time of each priority level is the first entry of
  // its index range: one seek per level, not a scan of the queue.
  std::optional<std::int64_t> earliest;
  std::optional<std::int64_t> below;
  for (;;) {
    auto level = NextPriority(conn, queue_id, below);
    if (!level.ok()) return level.status();
    if (!level->has_value()) break;
    below = **level;
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT min(ready_us) FROM sqlq_messages
      WHERE queue_id = ?1 AND priority = ?2)sql");
    st.Bind(1, queue_id).Bind(2, *below);
    int rc = st.Step();
    if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "next ready");
    if (!st.IsNull(0) && (!earliest || st.Int(0) < *earliest)) {
      earliest = st.Int(0);
    }
  }
  if (!earliest) return std::optional<Timestamp>();
  return std::optional<Timestamp>(FromUs(*earliest));
}

Status SqliteEngine::Ack(Conn& c, const core::AckParams& p) {
  SqliteConn& conn = Sql(c);
  const std::int64_t now = Us(clock_->Now());
  if (p.unique_for.count() > 0) {
    // Before the delete, and only if the receipt is current (the same
    // fence), so that a refused ack holds nothing.
    SQLQ_PREPARE(st, conn,
                 "INSERT INTO sqlq_dedup_holds " SQLQ_SQLITE_HOLD(
                     "id = ?1 AND queue_id = ?2 AND token = ?3 AND "
                     "attempts = ?4"));
    BindFence(st, p.queue_id, p.receipt).Bind(5, now + p.unique_for.count());
    Status s = st.Run("ack (dedup window)");
    if (!s.ok()) return s;
  }
  if (p.archive) {
    SQLQ_PREPARE(st, conn, R"sql(
      INSERT INTO sqlq_archive (id, queue_id, priority, attempts,
        enqueued_us, completed_us, worker, payload, headers, errors)
      SELECT id, queue_id, priority, attempts, enqueued_us, ?5, worker,
             payload, headers, errors
      FROM sqlq_messages
      WHERE id = ?1 AND queue_id = ?2 AND token = ?3 AND attempts = ?4)sql");
    BindFence(st, p.queue_id, p.receipt).Bind(5, now);
    Status s = st.Run("ack (archive)");
    if (!s.ok()) return s;
  }
  SQLQ_PREPARE(st, conn, R"sql(
    DELETE FROM sqlq_messages
    WHERE id = ?1 AND queue_id = ?2 AND token = ?3 AND attempts = ?4)sql");
  BindFence(st, p.queue_id, p.receipt);
  Status s = st.Run("ack");
  if (!s.ok()) return s;
  if (conn.changes() == 0) return Refused(conn, p.queue_id, p.receipt);
  return AddCounters(conn, p.queue_id, core::AckCounters(p));
}

Status SqliteEngine::Retry(Conn& c, const core::RetryParams& p) {
  SqliteConn& conn = Sql(c);
  const std::int64_t now = Us(clock_->Now());
  if (p.release) {
    SQLQ_PREPARE(st, conn, R"sql(
      UPDATE sqlq_messages SET token = 0, ready_us = ?5, attempts = attempts - 1
      WHERE id = ?1 AND queue_id = ?2 AND token = ?3 AND attempts = ?4)sql");
    BindFence(st, p.queue_id, p.receipt).Bind(5, now + p.delay.count());
    Status s = st.Run("release");
    if (!s.ok()) return s;
    if (conn.changes() == 0) return Refused(conn, p.queue_id, p.receipt);
    return AddCounters(conn, p.queue_id, {.claims = -1});
  }
  if (p.snooze) {
    SQLQ_PREPARE(st, conn, R"sql(
      UPDATE sqlq_messages SET token = 0, ready_us = ?5,
        attempts = attempts - 1, snoozes = snoozes + 1
      WHERE id = ?1 AND queue_id = ?2 AND token = ?3 AND attempts = ?4
        AND snoozes < ?6)sql");
    BindFence(st, p.queue_id, p.receipt)
        .Bind(5, now + p.delay.count())
        .Bind(6, std::int64_t{kMaxSnoozes});
    Status s = st.Run("snooze");
    if (!s.ok()) return s;
    *p.snoozed = conn.changes() > 0;
    return Status::Ok();
  }
  SQLQ_PREPARE(
      st, conn,
      "UPDATE sqlq_messages SET token = 0, ready_us = ?5, last_error = ?6, "
      "errors = " SQLQ_SQLITE_APPEND_ERROR(
          "?7", "?8") " WHERE id = ?1 AND queue_id = ?2 AND token = ?3 AND "
                      "attempts = ?4");
  BindFence(st, p.queue_id, p.receipt)
      .Bind(5, now + p.delay.count())
      .BindTextOrNull(6, p.error)
      .Bind(7, now)
      .BindText(8, p.history_error);
  Status s = st.Run("nack");
  if (!s.ok()) return s;
  if (conn.changes() == 0) return Refused(conn, p.queue_id, p.receipt);
  return AddCounters(conn, p.queue_id, {.nacks = 1});
}

Result<Timestamp> SqliteEngine::Extend(Conn& c, const core::ExtendParams& op) {
  const auto& [queue_id, receipt, lease] = op;
  SqliteConn& conn = Sql(c);
  const std::int64_t until = Us(clock_->Now()) + lease.count();
  SQLQ_PREPARE(st, conn, R"sql(
    UPDATE sqlq_messages SET ready_us = ?5
    WHERE id = ?1 AND queue_id = ?2 AND token = ?3 AND attempts = ?4)sql");
  BindFence(st, queue_id, receipt).Bind(5, until);
  Status s = st.Run("extend");
  if (!s.ok()) return s;
  if (conn.changes() == 0) return Refused(conn, queue_id, receipt);
  return FromUs(until);
}

Status SqliteEngine::Bury(Conn& c, const core::BuryParams& p) {
  SqliteConn& conn = Sql(c);
  const std::int64_t now = Us(clock_->Now());
  {
    SQLQ_PREPARE(st, conn, R"sql(
      SELECT 1 FROM sqlq_messages
      WHERE id = ?1 AND queue_id = ?2 AND token = ?3 AND attempts = ?4)sql");
    BindFence(st, p.queue_id, p.receipt);
    int rc = st.Step();
    if (rc == SQLITE_DONE) return Refused(conn, p.queue_id, p.receipt);
    if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "nack");
  }
  Status s = MoveToDead(conn, p.receipt.id, p.error, now, p.history_error, now,
                        p.unique_for);
  if (!s.ok()) return s;
  return AddCounters(conn, p.queue_id, core::BuryCounters(p));
}

Result<std::int64_t> SqliteEngine::Cancel(Conn& c,
                                          const core::CancelParams& p) {
  SqliteConn& conn = Sql(c);
  Status s = CheckQueue(conn, p.queue_id);
  if (!s.ok()) return s;
  const std::int64_t now = Us(clock_->Now());
  std::int64_t moved = 0;
  for (std::int64_t id : p.ids) {
    {
      SQLQ_PREPARE(st, conn, R"sql(
        SELECT 1 FROM sqlq_messages WHERE id = ?1 AND queue_id = ?2)sql");
      st.Bind(1, id).Bind(2, p.queue_id);
      const int rc = st.Step();
      if (rc == SQLITE_DONE) continue;
      if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "cancel");
    }
    s = MoveToDead(conn, id, p.error, now, p.error, now, p.unique_for);
    if (!s.ok()) return s;
    ++moved;
  }
  if (moved == 0) return 0;
  s = AddCounters(conn, p.queue_id, {.dead_lettered = moved});
  if (!s.ok()) return s;
  return moved;
}

Result<std::optional<std::int64_t>> SqliteEngine::NextPriority(
    SqliteConn& conn, std::int64_t queue_id,
    std::optional<std::int64_t> below) {
  static constexpr const char* kTop = R"sql(
    SELECT max(priority) FROM sqlq_messages WHERE queue_id = ?1)sql";
  static constexpr const char* kBelow = R"sql(
    SELECT max(priority) FROM sqlq_messages
    WHERE queue_id = ?1 AND priority < ?2)sql";
  SQLQ_PREPARE(st, conn, below ? kBelow : kTop);
  st.Bind(1, queue_id);
  if (below) st.Bind(2, *below);
  int rc = st.Step();
  if (rc != SQLITE_ROW) return Translate(rc, conn.db(), "claim");
  if (st.IsNull(0)) return std::optional<std::int64_t>();
  return std::optional<std::int64_t>(st.Int(0));
}

Stmt& SqliteEngine::BindFence(Stmt& st, std::int64_t queue_id,
                              const core::Receipt& r) {
  return st.Bind(1, r.id)
      .Bind(2, queue_id)
      .Bind(3, TokenBits(r.token))
      .Bind(4, r.attempt);
}

Status SqliteEngine::MoveToDead(SqliteConn& conn, std::int64_t id,
                                std::string_view error, std::int64_t now,
                                std::string_view history_error,
                                std::int64_t failed_at,
                                core::Micros unique_for) {
  if (unique_for.count() > 0) {
    SQLQ_PREPARE(st, conn,
                 "INSERT INTO sqlq_dedup_holds " SQLQ_SQLITE_HOLD("id = ?1"));
    st.Bind(1, id).Bind(5, now + unique_for.count());
    Status s = st.Run("dead-letter (dedup window)");
    if (!s.ok()) return s;
  }
  {
    SQLQ_PREPARE(st, conn,
                 "INSERT INTO sqlq_dead (id, queue_id, priority, attempts, "
                 "enqueued_us, died_us, last_error, payload, headers, grp, "
                 "errors) SELECT id, queue_id, priority, attempts, "
                 "enqueued_us, ?2, ?3, payload, headers, grp, "
                 "" SQLQ_SQLITE_APPEND_ERROR(
                     "?4", "?5") " FROM sqlq_messages WHERE id = ?1");
    st.Bind(1, id)
        .Bind(2, now)
        .BindText(3, error)
        .Bind(4, failed_at)
        .BindText(5, history_error);
    Status s = st.Run("dead-letter");
    if (!s.ok()) return s;
  }
  SQLQ_PREPARE(st, conn, "DELETE FROM sqlq_messages WHERE id = ?1");
  st.Bind(1, id);
  return st.Run("dead-letter");
}

}  // namespace sqlq::engines::sqlite
