// PostgreSQL engine: claims, acks, nacks and extends (the lease of a message).

#include "engines/postgres/postgres_engine_impl.h"

namespace sqlq::engines::postgres {

namespace {

// A message a claim leased, with what orders it.
struct Leased {
  std::int64_t priority, old_ready;
  ClaimedMessage m;
};

// Row i of a claim's result, one that leased a message (kClaimSelect's
// columns, from the second on), leased until `until`.
Leased LeasedAt(const Rows& rows, int i, std::int64_t until) {
  Leased l{.priority = rows.Int(i, 2), .old_ready = rows.Int(i, 3)};
  l.m.id = rows.Int(i, 1);
  l.m.attempt = static_cast<int>(rows.Int(i, 5));
  l.m.priority = static_cast<std::int32_t>(l.priority);
  l.m.payload = rows.Bytes(i, 7);
  l.m.enqueued_at = FromUs(rows.Int(i, 6));
  l.m.lease_expires_at = FromUs(until);
  if (!rows.IsNull(i, 8)) {
    l.m.headers = core::DecodeJob(rows.Bytes(i, 8), l.m);
  }
  if (!rows.IsNull(i, 9)) l.m.group = rows.Bytes(i, 9);
  return l;
}

// Appends `leased` (in no order: RETURNING gives none) to `out` in claim
// order; `last` becomes the furthest of them in that order (ClaimMarks).
void InClaimOrder(std::vector<Leased>& leased, std::vector<ClaimedMessage>& out,
                  std::optional<ClaimKey>& last) {
  std::sort(leased.begin(), leased.end(), [](const Leased& a, const Leased& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.old_ready != b.old_ready) return a.old_ready < b.old_ready;
    return a.m.id < b.m.id;
  });
  for (Leased& l : leased) {
    const ClaimKey key{
        .priority = l.m.priority, .ready_us = l.old_ready, .id = l.m.id};
    if (!last || Before(*last, key)) last = key;
    out.push_back(std::move(l.m));
  }
}

}  // namespace

Result<core::ClaimOutcome> PostgresEngine::Claim(Conn& c,
                                                 const core::ClaimParams& p) {
  PgConn& conn = Native(c);
  if (p.groups != GroupMode::kNone) return ClaimGroups(conn, p);
  // No FOR KEY SHARE here: an empty claim must stay a transaction without
  // writes, whose COMMIT needs no WAL flush, so that idle consumers cost
  // the server next to nothing. A claim that leases rows takes the lock
  // at its counter update (foreign key); racing a DROP QUEUE that way can
  // deadlock, which the server breaks and Write() retries.
  auto now_r = NowUs(conn);
  if (!now_r.ok()) return now_r.status();
  const std::int64_t now = *now_r;
  const std::int64_t until = now + p.lease.count();
  // One statement (statements.h), from the queue's start or from this
  // store's mark (claim_marks.h). Differs from the SQLite engine, which
  // reads candidates and updates them one by one under its database-wide
  // write lock.
  const auto started = std::chrono::steady_clock::now();
  ClaimMarks::Plan plan;
  if (marks_) plan = marks_->Start(p.queue_id, started);
  std::optional<ClaimKey> last;
  core::ClaimOutcome out;
  std::size_t bytes = 0;  // payload bytes leased, against p.max_bytes
  for (;;) {
    const int want = p.max - static_cast<int>(out.messages.size());
    // What is left of the byte limit. A round after the first (after dead
    // letters left places free) takes no first message for free.
    if (p.max_bytes != 0 && !out.messages.empty() && bytes >= p.max_bytes) {
      break;
    }
    // (None for a first claim of one message: its first is always taken.)
    const std::int64_t budget =
        p.max_bytes == 0 || (want == 1 && out.messages.empty()) ? 0
        : out.messages.empty()
            ? static_cast<std::int64_t>(p.max_bytes)
            : -static_cast<std::int64_t>(p.max_bytes - bytes);
    Params params;
    params.Int(p.queue_id)
        .Int(now)
        .Int(want)
        .Int(TokenBits(p.token))
        .Int(until);
    if (p.worker.empty()) {
      params.Null();
    } else {
      params.Bytes(p.worker);
    }
    params.Int(p.max_attempts);
    if (plan.from) {
      params.Int(plan.from->priority)
          .Int(plan.from->ready_us)
          .Int(plan.from->id);
    }
    params.Int(budget);
    const bool budgeted = budget != 0;
    auto rows = conn.Run(plan.from ? kClaimFromSql[budgeted].c_str()
                                   : kClaimSql[budgeted].c_str(),
                         params, "claim");
    if (!rows.ok()) return rows.status();
    std::vector<Leased> leased;
    int buried = 0;
    // Dead letters' keys, to hold: a dead row has its key where a leased
    // one has its payload (statements.h).
    std::vector<shared::HeldKey> held;
    for (int i = 0; i < rows->size(); ++i) {
      if (rows->Int(i, 4) != 0) ++out.expirations;
      if (rows->Int(i, 0) != 0) {
        ++buried;
        if (p.unique_for.count() > 0 && !rows->IsNull(i, 7)) {
          held.push_back({rows->Int(i, 1), rows->Bytes(i, 7)});
        }
        continue;
      }
      leased.push_back(LeasedAt(*rows, i, until));
      bytes += leased.back().m.payload.size();
    }
    InClaimOrder(leased, out.messages, last);
    out.dead_lettered += buried;
    Status s = HoldKeys(conn, p.queue_id, held, p.unique_for);
    if (!s.ok()) return s;
    // Dead letters left places free: look again for messages behind them.
    if (buried == 0 || rows->size() < want) break;
  }
  if (marks_) {
    conn.claims.push_back({.queue_id = p.queue_id,
                           .plan = plan,
                           .last = last,
                           .now_us = now,
                           .cost = std::chrono::steady_clock::now() - started});
  }
  const std::int64_t claimed = static_cast<std::int64_t>(out.messages.size());
  if (claimed + out.expirations + out.dead_lettered == 0) {
    // Empty or gone? Looked up only now, saving a round trip on every
    // claim that finds messages (a dropped queue has none).
    Status checked = CheckQueue(conn, p.queue_id, /*lock=*/false);
    if (!checked.ok()) return checked;
    return out;
  }
  conn.churned += claimed + out.dead_lettered;
  Status s = AddCounters(conn, p.queue_id, out.Counters());
  if (!s.ok()) return s;
  return out;
}

Result<std::optional<core::Engine::ClaimCommitted>>
PostgresEngine::ClaimAndCommit(const core::ClaimParams& p,
                               const core::AckManyParams& acks,
                               std::span<const int> gates) {
  return ClaimCommit(nullptr, p, acks, gates);
}

Result<std::optional<core::Engine::ClaimCommitted>>
PostgresEngine::SendsAndClaimAndCommit(SendsFirst& sends,
                                       const core::ClaimParams& p,
                                       const core::AckManyParams& acks,
                                       std::span<const int> gates) {
  if (sends.to.messages.empty() || !OneStatementSend(sends.to)) {
    return std::optional<ClaimCommitted>();
  }
  return ClaimCommit(&sends, p, acks, gates);
}

Result<std::optional<core::Engine::ClaimCommitted>> PostgresEngine::ClaimCommit(
    SendsFirst* sends, const core::ClaimParams& p,
    const core::AckManyParams& acks, std::span<const int> gates) {
  using Out = std::optional<ClaimCommitted>;
  if (p.groups != GroupMode::kNone || p.unique_for.count() > 0 ||
      acks.archive || acks.unique_for.count() > 0) {
    return Out();
  }
  if (!acks.receipts.empty() && AcksReleaseDependents(p.queue_id)) {
    return Out();
  }
  // The sends' ids, or why they were not stored, once committed.
  std::vector<SendResult> sent;
  std::optional<Status> unsent;
  ClaimCommitted out;
  std::vector<std::int64_t> ids, tokens, attempts, gate;
  std::int64_t gated = 0;
  for (std::size_t i = 0; i < acks.receipts.size(); ++i) {
    const core::Receipt& r = acks.receipts[i];
    ids.push_back(r.id);
    tokens.push_back(TokenBits(r.token));
    attempts.push_back(r.attempt);
    gate.push_back(i < gates.size() ? gates[i] : 0);
    gated += gate.back();
  }
  std::int64_t base = p.max - gated;
  std::size_t bytes = 0;  // payload bytes leased, against p.max_bytes
  // Rounds: the first acks and claims; another claims the places that
  // dead letters left free, as Claim does within its transaction.
  for (bool first = true;; first = false) {
    std::vector<Leased> leased;
    // Receipt id -> times acked; receipt id -> its message's token and
    // attempts when it was not acked (none: not in the queue).
    std::unordered_map<std::int64_t, int> acked;
    std::unordered_map<std::int64_t,
                       std::optional<std::pair<std::int64_t, std::int64_t>>>
        refused;
    std::int64_t found = 0, dependents = 0, want = 0, buried = 0;
    std::int64_t expirations = 0;
    // (None for a first claim of one message: its first is always taken.)
    const std::int64_t budget =
        p.max_bytes == 0 || (first && p.max == 1) ? 0
        : first ? static_cast<std::int64_t>(p.max_bytes)
                : -static_cast<std::int64_t>(p.max_bytes - bytes);
    // The statement's rows, once its transaction committed.
    auto read = [&](PgConn& conn, const Rows& rows,
                    const ClaimMarks::Plan& plan,
                    std::chrono::steady_clock::time_point started) {
      std::int64_t now = 0;
      for (int i = 0; i < rows.size(); ++i) {
        switch (rows.Int(i, 0)) {
          case 0:
            if (rows.Int(i, 4) != 0) ++expirations;
            // Its lease's end once the clock is read (the last row).
            leased.push_back(LeasedAt(rows, i, 0));
            break;
          case 1:
            if (rows.Int(i, 4) != 0) ++expirations;
            ++buried;
            break;
          case 2:
            ++acked[rows.Int(i, 1)];
            break;
          case 3:
            refused[rows.Int(i, 1)] =
                rows.IsNull(i, 4)
                    ? std::nullopt
                    : std::optional(std::pair(rows.Int(i, 4), rows.Int(i, 5)));
            break;
          default:
            found = rows.Int(i, 1);
            dependents = rows.Int(i, 2);
            now = rows.Int(i, 3);
            want = rows.Int(i, 4);
        }
      }
      const std::int64_t until = now + p.lease.count();
      std::optional<ClaimKey> last;
      for (Leased& l : leased) {
        l.m.lease_expires_at = FromUs(until);
        bytes += l.m.payload.size();
      }
      InClaimOrder(leased, out.outcome.messages, last);
      std::int64_t n_acked = 0;
      for (const auto& [id, n] : acked) n_acked += n;
      const std::int64_t changed =
          static_cast<std::int64_t>(leased.size()) + buried + n_acked;
      conn.churned += changed;
      if (changed > 0) ++conn.counted;
      if (marks_ && found == 1 && p.max > 0) {
        conn.claims.push_back(
            {.queue_id = p.queue_id,
             .plan = plan,
             .last = last,
             .now_us = now,
             .cost = std::chrono::steady_clock::now() - started});
      }
    };
    auto body = [&](Conn& c) -> Status {
      PgConn& conn = Native(c);
      // The sends go first, so that the claim may take their messages.
      if (first && sends != nullptr) {
        unsent.reset();
        StageSend(conn, sends->to, sent, unsent);
      }
      const auto started = std::chrono::steady_clock::now();
      ClaimMarks::Plan plan;
      // One call of sqlq__claim_commit (schema.h, migration 26): acks
      // alone (no claim: none wanted, no gates), or a claim with or without
      // receipts (NULL: none, and the queue row is only read), from the
      // queue's start or a mark (NULL: none).
      if (p.max > 0 && marks_) plan = marks_->Start(p.queue_id, started);
      Params params;
      params.Int(p.queue_id)
          .Int(p.max == 0 ? 0 : p.lease.count())
          .Int(p.max == 0 ? 0 : base)
          .Int(p.max == 0 ? 0 : TokenBits(p.token));
      if (ids.empty()) {
        params.Null();
      } else {
        params.IntArray(ids);
      }
      if (p.worker.empty() || p.max == 0) {
        params.Null();
      } else {
        params.Bytes(p.worker);
      }
      params.Int(p.max_attempts).Int(p.max == 0 ? 0 : budget);
      if (ids.empty()) {
        params.Null().Null().Null();
      } else {
        params.IntArray(tokens).IntArray(attempts);
        if (p.max == 0) {
          params.Null();
        } else {
          params.IntArray(gate);
        }
      }
      if (clock_) {
        params.Int(Us(clock_->Now()));
      } else {
        params.Null();
      }
      if (plan.from) {
        params.Int(plan.from->priority)
            .Int(plan.from->ready_us)
            .Int(plan.from->id);
      } else {
        params.Null().Null().Null();
      }
      conn.StageForCommit(kClaimCommitCall, std::move(params),
                          p.max == 0 ? "ack" : "claim",
                          [&, plan, started](const Rows& rows) {
                            read(conn, rows, plan, started);
                          });
      return Status::Ok();
    };
    // The write batcher says when acks alone go unflushed.
    Status s = acks.flush ? Write(body) : WriteUnflushed(body);
    if (!s.ok()) return s;
    if (first && sends != nullptr) {
      sends->sent = unsent ? Result<std::vector<SendResult>>(*unsent)
                           : Result<std::vector<SendResult>>(std::move(sent));
    }
    if (found == 0) return core::QueueGone(p.queue_id);
    if (dependents != 0 && !ids.empty()) {
      // Nothing was done; the acks must release dependents.
      NoteAcksReleaseDependents(p.queue_id);
      return Out();
    }
    out.outcome.expirations += expirations;
    out.outcome.dead_lettered += buried;
    for (const core::Receipt& r : acks.receipts) {
      if (!first) break;
      auto it = acked.find(r.id);
      if (it != acked.end() && it->second > 0) {
        --it->second;
        out.acks.push_back(Status::Ok());
        continue;
      }
      auto held = refused.find(r.id);
      out.acks.push_back(held == refused.end() || !held->second
                             ? core::NotInQueue(r.id)
                             : core::StaleReceipt(r, held->second->first,
                                                  held->second->second));
    }
    // Dead letters left places free: look again for messages behind them
    // (with a byte limit, while the leased payloads leave room).
    const std::int64_t taken = static_cast<std::int64_t>(leased.size());
    if (buried == 0 || taken + buried < want ||
        (p.max_bytes != 0 && bytes >= p.max_bytes)) {
      break;
    }
    base = want - taken;
    ids.clear();
    tokens.clear();
    attempts.clear();
    gate.clear();
  }
  return Out(std::move(out));
}

Status PostgresEngine::BuryExhausted(PgConn& conn,
                                     const std::vector<std::int64_t>& ids,
                                     std::int64_t now,
                                     const core::ClaimParams& p) {
  static const std::string kSql =
      R"sql(
    WITH d AS (
      DELETE FROM sqlq_messages WHERE id = ANY($1::bigint[])
      RETURNING id, queue_id, priority, attempts, enqueued_us, payload,
                headers, errors, grp, dedup, ready_us),
    b AS ()sql" +
      InsertLeaseExpiredDead("d", "$2", "$3", "ready_us") +
      ") SELECT id, dedup FROM d";
  auto rows = conn.Run(kSql.c_str(),
                       Params().IntArray(ids).Int(now).Int(p.max_attempts),
                       "claim (dead-letter)");
  if (!rows.ok()) return rows.status();
  conn.churned += rows->size();
  return HoldKeys(conn, p.queue_id, KeysOf(*rows), p.unique_for);
}

Result<std::optional<Timestamp>> PostgresEngine::NextReadyAt(
    Conn& c, std::int64_t queue_id) {
  PgConn& conn = Native(c);
  auto rows = conn.Run(kNextReadySql, Params().Int(queue_id), "next ready");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0 || rows->IsNull(0, 0)) {
    return std::optional<Timestamp>();
  }
  const std::int64_t at = rows->Int(0, 0);
  if (marks_) {
    // Asked after a claim found nothing: a message below the mark is one
    // the marked claims cannot see (claim_marks.h). It is ready: a mark
    // lies at or before the clock of an earlier claim.
    marks_->ReadyAt(queue_id, static_cast<std::int32_t>(rows->Int(0, 1)), at);
  }
  return std::optional<Timestamp>(FromUs(at));
}

Status PostgresEngine::Ack(Conn& c, const core::AckParams& p) {
  PgConn& conn = Native(c);
  Status s = CheckQueue(conn, p.queue_id);
  if (!s.ok()) return s;
  static constexpr const char* kDelete = R"sql(
    DELETE FROM sqlq_messages
    WHERE id = $1 AND queue_id + 0 = $2 AND token = $3 AND attempts = $4)sql";
  // The archiving ack: the deleted row goes to the archive.
  static constexpr const char* kDeleted = R"sql(
    DELETE FROM sqlq_messages
    WHERE id = $1 AND queue_id + 0 = $2 AND token = $3 AND attempts = $4
    RETURNING id, queue_id, priority, attempts, enqueued_us, worker,
              payload, headers, errors)sql";
  static constexpr const char* kToArchive = R"sql(
    INSERT INTO sqlq_archive (id, queue_id, priority, attempts, enqueued_us,
      completed_us, worker, payload, headers, errors)
    SELECT id, queue_id, priority, attempts, enqueued_us, $5, worker, payload,
           headers, errors
    FROM d)sql";
  static const std::string kArchive = FromDeleted(kDeleted, kToArchive, false);
  // With a dedup window: the same, returning the message's id and key.
  static const std::string kDeleteKeyed =
      std::string(kDelete) + " RETURNING id, dedup";
  static const std::string kArchiveKeyed =
      FromDeleted(kDeleted, kToArchive, true);
  const bool keyed = p.unique_for.count() > 0;
  Params params = Fence(p.queue_id, p.receipt);
  if (p.archive) {
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    params.Int(*now);
  }
  const char* sql = p.archive ? (keyed ? kArchiveKeyed : kArchive).c_str()
                              : (keyed ? kDeleteKeyed.c_str() : kDelete);
  auto rows = conn.Run(sql, params, "ack");
  if (!rows.ok()) return rows.status();
  if ((keyed ? rows->size() : rows->affected()) == 0) {
    return Refused(conn, p.queue_id, p.receipt);
  }
  if (keyed) {
    s = HoldKeys(conn, p.queue_id, KeysOf(*rows), p.unique_for);
    if (!s.ok()) return s;
  }
  ++conn.churned;
  return AddCounters(conn, p.queue_id, core::AckCounters(p));
}

Result<std::vector<Status>> PostgresEngine::AckMany(
    Conn& c, const core::AckManyParams& op) {
  const auto& [queue_id, receipts, archive, unique_for, flush] = op;
  (void)flush;  // ClaimAndCommit's only
  const bool keyed = unique_for.count() > 0;
  PgConn& conn = Native(c);
  Status checked = CheckQueue(conn, queue_id);
  if (!checked.ok()) {
    if (!core::IsCleanFailure(checked)) return checked;
    return std::vector<Status>(receipts.size(), checked);
  }
  std::vector<std::int64_t> ids, tokens, attempts;
  for (const core::Receipt& r : receipts) {
    ids.push_back(r.id);
    tokens.push_back(TokenBits(r.token));
    attempts.push_back(r.attempt);
  }
  Params params;
  params.Int(queue_id).IntArray(ids).IntArray(tokens).IntArray(attempts);
  if (archive) {
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    params.Int(*now);
  }
  const std::string& sql =
      archive ? (keyed ? kAckManyArchiveKeyedSql : kAckManyArchiveSql)
              : (keyed ? kAckManyKeyedSql : kAckManySql);
  auto rows = conn.Run(sql.c_str(), params, "ack");
  if (!rows.ok()) return rows.status();
  if (keyed) {
    Status s = HoldKeys(conn, queue_id, KeysOf(*rows), unique_for);
    if (!s.ok()) return s;
  }
  std::unordered_set<std::int64_t> matched;
  for (int i = 0; i < rows->size(); ++i) matched.insert(rows->Int(i, 0));
  const auto acked = static_cast<std::int64_t>(matched.size());
  std::vector<Status> out;
  out.reserve(receipts.size());
  for (const core::Receipt& r : receipts) {
    if (matched.erase(r.id) == 1) {
      out.push_back(Status::Ok());
      continue;
    }
    Status why = Refused(conn, queue_id, r);
    if (!core::IsCleanFailure(why)) return why;
    out.push_back(std::move(why));
  }
  if (acked > 0) {
    conn.churned += acked;
    Status s = AddCounters(conn, queue_id, {.acks = acked});
    if (!s.ok()) return s;
  }
  return out;
}

Status PostgresEngine::Retry(Conn& c, const core::RetryParams& p) {
  PgConn& conn = Native(c);
  auto now = CheckedNow(conn, p.queue_id);
  if (!now.ok()) return now.status();
  static const std::string kSql =
      "UPDATE sqlq_messages SET token = 0, ready_us = $5, last_error = $6, "
      "errors = " +
      AppendError("errors", "attempts", "$7::bigint", "$8::text") +
      " WHERE id = $1 AND queue_id + 0 = $2 AND token = $3 AND attempts = $4";
  static constexpr const char* kRelease = R"sql(
    UPDATE sqlq_messages SET token = 0, ready_us = $5, attempts = attempts - 1
    WHERE id = $1 AND queue_id + 0 = $2 AND token = $3 AND attempts = $4)sql";
  static constexpr const char* kSnooze = R"sql(
    UPDATE sqlq_messages SET token = 0, ready_us = $5,
      attempts = attempts - 1, snoozes = snoozes + 1
    WHERE id = $1 AND queue_id + 0 = $2 AND token = $3 AND attempts = $4
      AND snoozes < $6)sql";
  Params params = Fence(p.queue_id, p.receipt);
  params.Int(*now + p.delay.count());
  if (p.snooze) {
    params.Int(kMaxSnoozes);
  } else if (p.release) {
    // No error to keep.
  } else {
    if (p.error.empty()) {
      params.Null();
    } else {
      params.Bytes(p.error);
    }
    params.Int(*now).Text(p.history_error);
  }
  auto rows = conn.Run(p.snooze    ? kSnooze
                       : p.release ? kRelease
                                   : kSql.c_str(),
                       params,
                       p.snooze    ? "snooze"
                       : p.release ? "release"
                                   : "nack");
  if (!rows.ok()) return rows.status();
  if (p.snooze) {
    *p.snoozed = rows->affected() > 0;
    if (!*p.snoozed) return Status::Ok();
  }
  if (rows->affected() == 0) return Refused(conn, p.queue_id, p.receipt);
  conn.notify = true;
  conn.MadeReady(p.queue_id, *now + p.delay.count());
  ++conn.churned;
  if (p.snooze) return Status::Ok();
  if (p.release) return AddCounters(conn, p.queue_id, {.claims = -1});
  return AddCounters(conn, p.queue_id, {.nacks = 1});
}

Status PostgresEngine::Bury(Conn& c, const core::BuryParams& p) {
  PgConn& conn = Native(c);
  auto now = CheckedNow(conn, p.queue_id);
  if (!now.ok()) return now.status();
  static const std::string kDeleted = std::string(R"sql(
    DELETE FROM sqlq_messages
    WHERE id = $1 AND queue_id + 0 = $2 AND token = $3 AND attempts = $4
    RETURNING )sql") + kDeadColumns;
  static const std::string kToDead = InsertDead("$5", "$6", "$7::text");
  static const std::string kSql = FromDeleted(kDeleted, kToDead, false);
  // With a dedup window: the same, returning the message's id and key.
  static const std::string kKeyedSql = FromDeleted(kDeleted, kToDead, true);
  const bool keyed = p.unique_for.count() > 0;
  Params params = Fence(p.queue_id, p.receipt);
  params.Int(*now).Bytes(p.error).Text(p.history_error);
  auto rows =
      conn.Run(keyed ? kKeyedSql.c_str() : kSql.c_str(), params, "nack");
  if (!rows.ok()) return rows.status();
  if ((keyed ? rows->size() : rows->affected()) == 0) {
    return Refused(conn, p.queue_id, p.receipt);
  }
  if (keyed) {
    Status s = HoldKeys(conn, p.queue_id, KeysOf(*rows), p.unique_for);
    if (!s.ok()) return s;
  }
  ++conn.churned;
  return AddCounters(conn, p.queue_id, core::BuryCounters(p));
}

Result<std::int64_t> PostgresEngine::Cancel(Conn& c,
                                            const core::CancelParams& p) {
  PgConn& conn = Native(c);
  auto now = CheckedNow(conn, p.queue_id);
  if (!now.ok()) return now.status();
  if (p.ids.empty()) return 0;
  static const std::string kDeleted = std::string(R"sql(
    DELETE FROM sqlq_messages WHERE id = ANY($1::bigint[]) AND queue_id + 0 = $2
    RETURNING )sql") + kDeadColumns;
  static const std::string kToDead = InsertDead("$3", "$4", "$5::text");
  static const std::string kSql = FromDeleted(kDeleted, kToDead, false);
  // With a dedup window: the same, returning the messages' ids and keys.
  static const std::string kKeyedSql = FromDeleted(kDeleted, kToDead, true);
  const bool keyed = p.unique_for.count() > 0;
  const std::vector<std::int64_t> ids(p.ids.begin(), p.ids.end());
  auto rows = conn.Run(keyed ? kKeyedSql.c_str() : kSql.c_str(),
                       Params()
                           .IntArray(ids)
                           .Int(p.queue_id)
                           .Int(*now)
                           .Bytes(p.error)
                           .Text(p.error),
                       "cancel");
  if (!rows.ok()) return rows.status();
  const std::int64_t moved =
      keyed ? static_cast<std::int64_t>(rows->size()) : rows->affected();
  if (moved == 0) return 0;
  if (keyed) {
    Status s = HoldKeys(conn, p.queue_id, KeysOf(*rows), p.unique_for);
    if (!s.ok()) return s;
  }
  // The next message of an ordered group may be claimable now.
  Dialect::AfterSteer(conn, p.queue_id);
  conn.churned += moved;
  Status s = AddCounters(conn, p.queue_id, {.dead_lettered = moved});
  if (!s.ok()) return s;
  return moved;
}

Result<Timestamp> PostgresEngine::Extend(Conn& c,
                                         const core::ExtendParams& op) {
  const auto& [queue_id, receipt, lease] = op;
  PgConn& conn = Native(c);
  auto now = CheckedNow(conn, queue_id);
  if (!now.ok()) return now.status();
  const std::int64_t until = *now + lease.count();
  static constexpr const char* kSql = R"sql(
    UPDATE sqlq_messages SET ready_us = $5
    WHERE id = $1 AND queue_id + 0 = $2 AND token = $3 AND attempts = $4)sql";
  Params params = Fence(queue_id, receipt);
  params.Int(until);
  auto rows = conn.Run(kSql, params, "extend");
  if (!rows.ok()) return rows.status();
  if (rows->affected() == 0) return Refused(conn, queue_id, receipt);
  ++conn.churned;
  return FromUs(until);
}

}  // namespace sqlq::engines::postgres
