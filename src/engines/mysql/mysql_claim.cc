// MariaDB/MySQL engine: claims, acks, nacks and extends (the lease of a
// message).

#include <functional>

#include "engines/mysql/mysql_engine_impl.h"

namespace sqlq::engines::mysql {

Result<core::ClaimOutcome> MysqlEngine::Claim(Conn& c,
                                              const core::ClaimParams& p) {
  MyConn& conn = Native(c);
  if (p.groups != GroupMode::kNone) return ClaimGroups(conn, p);
  // No share lock on the queue: an empty claim stays a transaction
  // without writes or locks (idle consumers cost next to nothing). The
  // queue is looked up only when no candidate shows it exists.
  auto now_r = NowUs(conn);
  if (!now_r.ok()) return now_r.status();
  const std::int64_t now = *now_r;
  const std::int64_t until = now + p.lease.count();
  static const std::string kFirst = R"sql(
    SELECT id, npriority, ready_us
    FROM sqlq_messages FORCE INDEX (sqlq_messages_claim)
    WHERE queue_id = ? AND ready_us <= ?
    ORDER BY npriority, ready_us, id LIMIT ?)sql";
  static const std::string kNext = R"sql(
    SELECT id, npriority, ready_us
    FROM sqlq_messages FORCE INDEX (sqlq_messages_claim)
    WHERE queue_id = ? AND ready_us <= ?
      AND (npriority > ? OR (npriority = ? AND
           (ready_us > ? OR (ready_us = ? AND id > ?))))
    ORDER BY npriority, ready_us, id LIMIT ?)sql";
  core::ClaimOutcome out;
  bool first = true;
  std::int64_t last_np = 0, last_ready = 0, last_id = 0;
  std::size_t bytes = 0;  // payload bytes leased, against p.max_bytes
  bool full = false;
  for (;;) {
    const int want = p.max - static_cast<int>(out.messages.size());
    if (want <= 0) break;
    // After a round that lost rows to other consumers, look further.
    const int limit = first ? want : 2 * want + 8;
    Result<Rows> cands =
        first ? conn.Run(kFirst, Params().Int(p.queue_id).Int(now).Int(limit),
                         "claim")
              : conn.Run(kNext,
                         Params()
                             .Int(p.queue_id)
                             .Int(now)
                             .Int(last_np)
                             .Int(last_np)
                             .Int(last_ready)
                             .Int(last_ready)
                             .Int(last_id)
                             .Int(limit),
                         "claim");
    if (!cands.ok()) return cands.status();
    if (cands->size() == 0) {
      if (first) {
        Status checked = CheckQueue(conn, p.queue_id, /*lock=*/false);
        if (!checked.ok()) return checked;
      }
      break;
    }
    first = false;
    std::vector<std::int64_t> ids;
    ids.reserve(cands->size());
    for (int i = 0; i < cands->size(); ++i) ids.push_back(cands->Int(i, 0));
    const int last = cands->size() - 1;
    last_id = cands->Int(last, 0);
    last_np = cands->Int(last, 1);
    last_ready = cands->Int(last, 2);
    const std::size_t b = Bucket(ids.size());
    // By primary key (forced: the optimizer likes the claim index for
    // queue_id = ?), and without ORDER BY (rows are sorted below): under
    // READ COMMITTED InnoDB then releases at once the lock of a candidate
    // that fails the WHERE (a message another consumer leased since our
    // plain read). Through a secondary index it keeps that lock until we
    // commit, which held up the ack of the leased message
    // (OpenClaimTransactionHoldsUpNoAckOfALeasedMessage).
    const std::string lock_sql = fmt::format(
        "SELECT id, priority, npriority, ready_us, token, attempts, "
        "enqueued_us, payload, headers, grp FROM sqlq_messages FORCE INDEX "
        "(PRIMARY) "
        "WHERE id IN ({}) AND queue_id = ? AND "
        "ready_us <= ? FOR UPDATE SKIP LOCKED",
        Marks(b));
    Params lp;
    AddIds(lp, ids);
    lp.Int(p.queue_id).Int(now);
    auto locked = conn.Run(lock_sql, lp, "claim");
    if (!locked.ok()) return locked.status();
    std::vector<int> order(static_cast<std::size_t>(locked->size()));
    for (int i = 0; i < locked->size(); ++i) order[i] = i;
    const Rows& l = *locked;
    std::sort(order.begin(), order.end(), [&l](int x, int y) {
      if (l.Int(x, 2) != l.Int(y, 2)) return l.Int(x, 2) < l.Int(y, 2);
      if (l.Int(x, 3) != l.Int(y, 3)) return l.Int(x, 3) < l.Int(y, 3);
      return l.Int(x, 0) < l.Int(y, 0);
    });
    std::vector<std::int64_t> lease_ids, dead_ids;
    bool expired = false;  // whether a lease to take ran out before
    for (int i : order) {
      if (static_cast<int>(lease_ids.size()) == want) break;
      const bool dies = l.Int(i, 5) >= p.max_attempts;
      const std::size_t size = l.BytesSize(i, 7);
      if (!dies && p.max_bytes != 0 && !out.messages.empty() &&
          bytes + size > p.max_bytes) {
        // ClaimParams::max_bytes: left as it is, for the next claim.
        full = true;
        break;
      }
      if (l.Int(i, 4) != 0) ++out.expirations;
      if (dies) {
        dead_ids.push_back(l.Int(i, 0));
        continue;
      }
      bytes += size;
      expired = expired || l.Int(i, 4) != 0;
      lease_ids.push_back(l.Int(i, 0));
      ClaimedMessage m;
      m.id = l.Int(i, 0);
      m.priority = static_cast<std::int32_t>(l.Int(i, 1));
      m.attempt = static_cast<int>(l.Int(i, 5)) + 1;
      m.enqueued_at = FromUs(l.Int(i, 6));
      m.payload = l.Bytes(i, 7);
      m.lease_expires_at = FromUs(until);
      if (!l.IsNull(i, 8)) m.headers = core::DecodeJob(l.Bytes(i, 8), m);
      if (!l.IsNull(i, 9)) m.group = l.Bytes(i, 9);
      out.messages.push_back(std::move(m));
    }
    if (!dead_ids.empty()) {
      Status s = BuryExhausted(conn, dead_ids, now, p);
      if (!s.ok()) return s;
      out.dead_lettered += static_cast<std::int64_t>(dead_ids.size());
    }
    if (!lease_ids.empty()) {
      // A lease that ran out is a failed attempt in the history. First in
      // SET: MariaDB assigns left to right, and the later assignments
      // change the token, attempts and ready_us it reads.
      const std::string sql = fmt::format(
          "UPDATE sqlq_messages SET {}token = ?, attempts = attempts + 1, "
          "ready_us = ?, worker = ? WHERE id IN ({})",
          expired ? "errors = CASE WHEN token = 0 THEN errors ELSE " +
                        AppendError("ready_us", "'lease expired'") + " END, "
                  : std::string(),
          Marks(Bucket(lease_ids.size())));
      Params up;
      up.Int(TokenBits(p.token)).Int(until).BytesOrNull(p.worker);
      AddIds(up, lease_ids);
      auto rows = conn.Run(sql, up, "claim");
      if (!rows.ok()) return rows.status();
    }
    // The queue has no more claimable messages past these candidates.
    if (full || cands->size() < limit) break;
  }
  const std::int64_t claimed = static_cast<std::int64_t>(out.messages.size());
  if (claimed + out.expirations + out.dead_lettered == 0) return out;
  Status s = AddCounters(conn, p.queue_id, out.Counters());
  if (!s.ok()) return s;
  return out;
}

namespace {

// Appends "CALL `routine`(queue, counter slot, max, lease, token, worker"
// for a claim procedure: integers formatted here, the worker's name in
// hex.
void AppendClaimCall(std::string& out, const char* routine, const MyConn& c,
                     const core::ClaimParams& p) {
  out +=
      fmt::format("CALL {}({}, {}, {}, {}, {}, ", routine, p.queue_id,
                  c.counter_slot, p.max, p.lease.count(), TokenBits(p.token));
  if (p.worker.empty()) {
    out += "NULL";
  } else {
    out += "X'";
    AppendHex(out, p.worker);
    out += '\'';
  }
}

}  // namespace

std::optional<Status> MysqlEngine::HandedBack(std::int64_t answer,
                                              std::int64_t queue_id) {
  switch (answer) {
    case 0:
      return std::nullopt;
    case 2:
      return core::QueueGone(queue_id);
    case 3:
      NoteAcksReleaseDependents(queue_id);
      return Status::Ok();
    default:  // nothing done: the general way
      return Status::Ok();
  }
}

bool MysqlEngine::ClaimCallTakes(const core::ClaimParams& p,
                                 const core::AckManyParams& acks) {
  const auto receipts = static_cast<std::int64_t>(acks.receipts.size());
  if (!claims_routine_ || clock_ || p.max > kCallClaimMax ||
      receipts > kCallClaimMax || (p.max == 0 && receipts == 0) ||
      p.groups != GroupMode::kNone || (p.max > 1 && p.max_bytes != 0) ||
      p.unique_for.count() > 0 || acks.archive || acks.unique_for.count() > 0 ||
      acks.queue_id != p.queue_id) {
    return false;
  }
  return receipts == 0 || !AcksReleaseDependents(p.queue_id);
}

Result<std::optional<core::Engine::ClaimCommitted>> MysqlEngine::ClaimCall(
    MyConn& c, const core::ClaimParams& p, const core::AckManyParams& acks,
    const std::string& prefix, std::size_t before, SendsFirst* sends) {
  using Out = std::optional<ClaimCommitted>;
  c.read_only = false;
  // Integers formatted here, the worker's name in hex, the receipts as a
  // JSON array of integers: nothing a caller wrote is read as SQL.
  std::string call = prefix;
  AppendClaimCall(call, "sqlq__claims_committed", c, p);
  call += fmt::format(", {}, '[", p.max_attempts);
  for (std::size_t i = 0; i < acks.receipts.size(); ++i) {
    const core::Receipt& r = acks.receipts[i];
    call += fmt::format("{}[{},{},{}]", i == 0 ? "" : ",", r.id,
                        TokenBits(r.token), r.attempt);
  }
  call += fmt::format("]', {})", sends != nullptr ? 1 : 0);
  c.tx_open = true;
  // Its answers: the statements before it, its rows, then the CALL's own,
  // which commits.
  auto done =
      c.ExecCommit(call, before + 2, before + 1, p.max == 0 ? "ack" : "claim");
  if (!done.ok()) {
    c.bumps = 0;
    if (RoutineGone(c, done.status(), claims_routine_)) return Out();
    // A send's queue gone fails its INSERT (a foreign key) and stores
    // nothing: the general way says which.
    if (sends != nullptr && done.status().code() == Code::kNotFound) {
      return Out();
    }
    return done.status();
  }
  const Rows& rows = (*done)[before].rows;
  if (rows.size() < 1) {
    return Status::Internal("claim: the procedure gave no answer");
  }
  if (sends != nullptr) {
    // Committed, whatever the claim's answer.
    own_bumps_ += c.bumps;
    c.bumps = 0;
    const auto id0 = static_cast<std::int64_t>((*done)[before - 2].insert_id);
    std::vector<SendResult> ids;
    for (std::size_t k = 0; k < sends->to.messages.size(); ++k) {
      ids.push_back({.id = id0 + static_cast<std::int64_t>(k) *
                                     c.auto_increment_increment});
    }
    sends->sent = std::move(ids);
  }
  if (auto back = HandedBack(rows.Int(0, 0), p.queue_id)) {
    if (!back->ok()) return *back;
    return Out();
  }
  ClaimCommitted committed;
  const std::int64_t acked = rows.Int(0, 2), claimed = rows.Int(0, 3);
  if (acked != static_cast<std::int64_t>(acks.receipts.size()) ||
      (claimed > 0 && rows.size() != claimed)) {
    return Status::Internal("claim: the procedure's answer does not add up");
  }
  committed.acks.assign(acks.receipts.size(), Status::Ok());
  const Timestamp until = FromUs(rows.Int(0, 1) + p.lease.count());
  for (int i = 0; i < static_cast<int>(claimed); ++i) {
    ClaimedMessage m;
    m.id = rows.Int(i, 4);
    m.priority = static_cast<std::int32_t>(rows.Int(i, 5));
    m.attempt = static_cast<int>(rows.Int(i, 6));
    m.enqueued_at = FromUs(rows.Int(i, 7));
    m.payload = rows.Bytes(i, 8);
    m.lease_expires_at = until;
    if (!rows.IsNull(i, 9)) m.headers = core::DecodeJob(rows.Bytes(i, 9), m);
    if (!rows.IsNull(i, 10)) m.group = rows.Bytes(i, 10);
    committed.outcome.messages.push_back(std::move(m));
  }
  own_bumps_ += WakeBumps({.acks = acked});  // the procedure's count
  return Out(std::move(committed));
}

Result<std::optional<core::Engine::ClaimCommitted>>
MysqlEngine::ClaimOneAndCommit(const core::ClaimParams& p,
                               const core::AckManyParams& acks) {
  using Out = std::optional<ClaimCommitted>;
  if (!claim_routine_ || clock_ || p.max > 1 || acks.receipts.size() > 1 ||
      (p.max == 0 && acks.receipts.empty()) || p.groups != GroupMode::kNone ||
      p.unique_for.count() > 0 || acks.archive || acks.unique_for.count() > 0) {
    return Out();
  }
  if (!acks.receipts.empty() && AcksReleaseDependents(p.queue_id)) {
    return Out();
  }
  Out out;
  Status s = pool_.RunWrite([&](MyConn& c) -> Status {
    out.reset();
    // Not on Galera (its wait for the cluster goes with a BEGIN we send),
    // nor where the server logs statements: MariaDB marks a procedure with
    // a SKIP LOCKED read unsafe for statement replication (warnings in its
    // error log, or rows under MIXED), where the general way's statements
    // are all safe (docs/engines/mysql.md, "Replication").
    if (c.wsrep || c.statement_log || !claim_routine_) return Status::Ok();
    c.read_only = false;
    // Integers formatted here, the worker's name in hex: nothing a caller
    // wrote is read as SQL.
    std::string call;
    AppendClaimCall(call, "sqlq__claim_committed", c, p);
    if (acks.receipts.empty()) {
      call += fmt::format(", {}, NULL, NULL, NULL)", p.max_attempts);
    } else {
      const core::Receipt& r = acks.receipts[0];
      call += fmt::format(", {}, {}, {}, {})", p.max_attempts, r.id,
                          TokenBits(r.token), r.attempt);
    }
    c.tx_open = true;
    // Its answers: one row, then the CALL's own.
    auto done = c.ExecCommit(call, 2, 0, p.max == 0 ? "ack" : "claim");
    if (!done.ok()) {
      if (RoutineGone(c, done.status(), claim_routine_)) return Status::Ok();
      return done.status();
    }
    const Rows& rows = (*done)[0].rows;
    if (rows.size() != 1) {
      return Status::Internal("claim: the procedure gave no answer");
    }
    if (auto back = HandedBack(rows.Int(0, 0), p.queue_id)) return *back;
    ClaimCommitted committed;
    const std::int64_t acked = rows.Int(0, 2);
    if (!acks.receipts.empty()) committed.acks.push_back(Status::Ok());
    if (rows.Int(0, 3) == 1) {
      ClaimedMessage m;
      m.id = rows.Int(0, 4);
      m.priority = static_cast<std::int32_t>(rows.Int(0, 5));
      m.attempt = static_cast<int>(rows.Int(0, 6));
      m.enqueued_at = FromUs(rows.Int(0, 7));
      m.payload = rows.Bytes(0, 8);
      m.lease_expires_at = FromUs(rows.Int(0, 1) + p.lease.count());
      if (!rows.IsNull(0, 9)) m.headers = core::DecodeJob(rows.Bytes(0, 9), m);
      if (!rows.IsNull(0, 10)) m.group = rows.Bytes(0, 10);
      committed.outcome.messages.push_back(std::move(m));
    }
    own_bumps_ += WakeBumps({.acks = acked});  // the procedure's count
    out = std::move(committed);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

Result<std::optional<core::Engine::ClaimCommitted>> MysqlEngine::ClaimAndCommit(
    const core::ClaimParams& p, const core::AckManyParams& acks,
    std::span<const int> gates) {
  // Every receipt is acked or the claim is handed back: the gates hold.
  (void)gates;
  using Out = std::optional<ClaimCommitted>;
  // One message after one receipt: version 23's procedure, which takes it
  // with fewer statements than the group's (docs/engines/mysql.md).
  if (p.max <= 1 && acks.receipts.size() <= 1 && claim_routine_) {
    return ClaimOneAndCommit(p, acks);
  }
  if (!ClaimCallTakes(p, acks)) return Out();
  Out out;
  Status s = pool_.RunWrite([&](MyConn& c) -> Status {
    out.reset();
    // Not on Galera, nor where the server logs statements (above).
    if (c.wsrep || c.statement_log || !claims_routine_) return Status::Ok();
    auto r = ClaimCall(c, p, acks, "", 0, nullptr);
    if (!r.ok()) return r.status();
    out = std::move(*r);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

Result<std::optional<core::Engine::ClaimCommitted>>
MysqlEngine::SendsAndClaimAndCommit(SendsFirst& sends,
                                    const core::ClaimParams& p,
                                    const core::AckManyParams& acks,
                                    std::span<const int> gates) {
  (void)gates;  // as in ClaimAndCommit
  using Out = std::optional<ClaimCommitted>;
  if (!ClaimCallTakes(p, acks)) return Out();
  const std::optional<PacketSend> packet = PacketSendOf(sends.to);
  if (!packet) return Out();
  // The INSERT, written once a connection can take the packet.
  std::string insert;
  const std::size_t n = sends.to.messages.size();
  Out out;
  Status s = pool_.RunWrite([&](MyConn& c) -> Status {
    out.reset();
    sends.sent.reset();
    // Ids are read off the INSERT's first one (SendAndCommit); not on
    // Galera, nor where the server logs statements (ClaimOneAndCommit).
    if (c.wsrep || c.statement_log || !claims_routine_ ||
        (n > 1 && !c.consecutive_autoinc)) {
      return Status::Ok();
    }
    c.pending_counters[sends.to.queue_id] +=
        QueueCounters{.sends = static_cast<std::int64_t>(n)};
    // BEGIN, the clock, the INSERT and the sends' counters.
    if (insert.empty()) insert = packet->Insert(sends.to);
    std::string prefix = fmt::format("{}; {}", BeginSql(c), kSetNow);
    prefix += insert;
    prefix += "; ";
    prefix += TakeCounters(c);
    auto r = ClaimCall(c, p, acks, prefix, 4, &sends);
    if (!r.ok()) return r.status();
    out = std::move(*r);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return out;
}

namespace {

// Moves the messages `ids`, locked by this transaction, to the dead
// letters: died `now`, their last error the SQL expression `last_error`
// and the history's entry AppendError(at, error), whose parameters (after
// the time of death) `add` binds.
Status MoveIdsToDead(MyConn& conn, const std::vector<std::int64_t>& ids,
                     std::int64_t now, std::string_view last_error,
                     std::string_view at, std::string_view error,
                     const std::function<void(Params&)>& add,
                     const char* what) {
  const std::string marks = Marks(Bucket(ids.size()));
  const std::string ins = fmt::format(
      "INSERT INTO sqlq_dead (id, queue_id, priority, attempts, "
      "enqueued_us, died_us, last_error, payload, headers, grp, errors) "
      "SELECT id, queue_id, priority, attempts, enqueued_us, ?, {}, payload, "
      "headers, grp, {} FROM sqlq_messages WHERE id IN ({})",
      last_error, AppendError(at, error), marks);
  Params ip;
  ip.Int(now);
  add(ip);
  AddIds(ip, ids);
  auto r = conn.Run(ins, ip, what);
  if (!r.ok()) return r.status();
  Params dp;
  AddIds(dp, ids);
  auto d =
      conn.Run(fmt::format("DELETE FROM sqlq_messages WHERE id IN ({})", marks),
               dp, what);
  return d.ok() ? Status::Ok() : d.status();
}

}  // namespace

Status MysqlEngine::BuryExhausted(MyConn& conn,
                                  const std::vector<std::int64_t>& ids,
                                  std::int64_t now,
                                  const core::ClaimParams& p) {
  Status held = HoldLocked(conn, p.queue_id, ids, p.unique_for);
  if (!held.ok()) return held;
  return MoveIdsToDead(
      conn, ids, now,
      "CONCAT('lease expired on attempt ', attempts, ' of ', ?)", "ready_us",
      "'lease expired'", [&](Params& params) { params.Int(p.max_attempts); },
      "claim (dead-letter)");
}

Result<std::optional<Timestamp>> MysqlEngine::NextReadyAt(
    Conn& c, std::int64_t queue_id) {
  static const std::string kSql =
      "SELECT MIN(ready_us) FROM sqlq_messages WHERE queue_id = ?";
  auto rows = Native(c).Run(kSql, Params().Int(queue_id), "next ready");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0 || rows->IsNull(0, 0)) {
    return std::optional<Timestamp>();
  }
  return std::optional<Timestamp>(FromUs(rows->Int(0, 0)));
}

Status MysqlEngine::HoldLocked(MyConn& conn, std::int64_t queue_id,
                               const std::vector<std::int64_t>& ids,
                               core::Micros unique_for) {
  if (unique_for.count() == 0 || ids.empty()) return Status::Ok();
  // A locking read: the rows are this transaction's already, and a
  // snapshot read could predate them.
  const std::string sql = fmt::format(
      "SELECT id, dedup FROM sqlq_messages WHERE id IN ({}) "
      "AND dedup IS NOT NULL FOR UPDATE",
      Marks(Bucket(ids.size())));
  Params p;
  AddIds(p, ids);
  auto rows = conn.Run(sql, p, "hold dedup keys");
  if (!rows.ok()) return rows.status();
  return HoldKeys(conn, queue_id, KeysOf(*rows), unique_for);
}

Result<bool> MysqlEngine::LockLeased(MyConn& conn, std::int64_t queue_id,
                                     const core::Receipt& r) {
  static const std::string kSql = R"sql(
    SELECT id FROM sqlq_messages
    WHERE id = ? AND queue_id = ? AND token = ? AND attempts = ?
    FOR UPDATE)sql";
  auto rows = conn.Run(kSql, Fence(queue_id, r), "check receipt");
  if (!rows.ok()) return rows.status();
  return rows->size() == 1;
}

Status MysqlEngine::Ack(Conn& c, const core::AckParams& p) {
  MyConn& conn = Native(c);
  Status s = CheckQueue(conn, p.queue_id);
  if (!s.ok()) return s;
  static const std::string kDelete = R"sql(
    DELETE FROM sqlq_messages
    WHERE id = ? AND queue_id = ? AND token = ? AND attempts = ?)sql";
  if (!p.archive && p.unique_for.count() == 0) {
    auto rows = conn.Run(kDelete, Fence(p.queue_id, p.receipt), "ack");
    if (!rows.ok()) return rows.status();
    if (rows->affected() == 0) return Refused(conn, p.queue_id, p.receipt);
    return AddCounters(conn, p.queue_id, core::AckCounters(p));
  }
  // Archived or with a dedup window: lock, copy what is kept, delete.
  auto leased = LockLeased(conn, p.queue_id, p.receipt);
  if (!leased.ok()) return leased.status();
  if (!*leased) return Refused(conn, p.queue_id, p.receipt);
  s = HoldLocked(conn, p.queue_id, {p.receipt.id}, p.unique_for);
  if (!s.ok()) return s;
  if (p.archive) {
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    static const std::string kArchive = R"sql(
      INSERT INTO sqlq_archive (id, queue_id, priority, attempts,
        enqueued_us, completed_us, worker, payload, headers, errors)
      SELECT id, queue_id, priority, attempts, enqueued_us, ?, worker,
             payload, headers, errors
      FROM sqlq_messages WHERE id = ?)sql";
    auto ins = conn.Run(kArchive, Params().Int(*now).Int(p.receipt.id), "ack");
    if (!ins.ok()) return ins.status();
  }
  static const std::string kDeleteId = "DELETE FROM sqlq_messages WHERE id = ?";
  auto del = conn.Run(kDeleteId, Params().Int(p.receipt.id), "ack");
  if (!del.ok()) return del.status();
  return AddCounters(conn, p.queue_id, core::AckCounters(p));
}

Result<std::int64_t> MysqlEngine::DeleteReturning(
    MyConn& conn, std::int64_t queue_id,
    std::span<const core::Receipt> receipts, std::size_t at, std::size_t end,
    const std::vector<std::int64_t>& ids, std::vector<Status>& out) {
  const std::size_t b = Bucket(ids.size());
  std::string leases;
  for (std::size_t i = 0; i < b; ++i) {
    leases += i == 0 ? "(?, ?, ?)" : ", (?, ?, ?)";
  }
  // The id list lets the optimizer go by primary key; the row list is
  // the fence. Both padded by repeating the last receipt.
  const std::string sql = fmt::format(
      "DELETE FROM sqlq_messages WHERE id IN ({}) AND queue_id = ? AND "
      "(id, token, attempts) IN ({}) RETURNING id, token, attempts",
      Marks(b), leases);
  Params p;
  AddIds(p, ids);
  p.Int(queue_id);
  for (std::size_t k = 0; k < b; ++k) {
    const core::Receipt& r = receipts[std::min(at + k, end - 1)];
    p.Int(r.id).Int(TokenBits(r.token)).Int(r.attempt);
  }
  auto rows = conn.Run(sql, p, "ack");
  if (!rows.ok()) return rows.status();
  std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> deleted;
  for (int i = 0; i < rows->size(); ++i) {
    deleted[rows->Int(i, 0)] = {rows->Int(i, 1), rows->Int(i, 2)};
  }
  const auto acked = static_cast<std::int64_t>(deleted.size());
  const auto returned = deleted;
  for (std::size_t i = at; i < end; ++i) {
    const core::Receipt& r = receipts[i];
    auto it = deleted.find(r.id);
    if (it != deleted.end() && it->second.first == TokenBits(r.token) &&
        it->second.second == r.attempt) {
      deleted.erase(it);  // a second receipt for it finds it gone
      out[i] = Status::Ok();
      continue;
    }
    // Deleted for another receipt of this batch: what that receipt's
    // check would have said had it come first (as AckMany's portable
    // path does).
    if (auto was = returned.find(r.id); was != returned.end()) {
      out[i] =
          was->second.first == TokenBits(r.token) &&
                  was->second.second == r.attempt
              ? core::NotInQueue(r.id)
              : core::StaleReceipt(r, was->second.first, was->second.second);
      continue;
    }
    Status why = Refused(conn, queue_id, r);
    if (!core::IsCleanFailure(why)) return why;
    out[i] = std::move(why);
  }
  return acked;
}

Result<std::vector<Status>> MysqlEngine::AckMany(
    Conn& c, const core::AckManyParams& op) {
  const auto& [queue_id, receipts, archive, unique_for, flush] = op;
  (void)flush;  // ClaimAndCommit's only
  MyConn& conn = Native(c);
  Status s = CheckQueue(conn, queue_id);
  if (!s.ok()) return s;
  std::vector<Status> out(receipts.size());
  std::int64_t acked = 0;
  constexpr std::size_t kPage = 512;
  for (std::size_t at = 0; at < receipts.size(); at += kPage) {
    const std::size_t end = std::min(receipts.size(), at + kPage);
    std::vector<std::int64_t> ids;
    for (std::size_t i = at; i < end; ++i) ids.push_back(receipts[i].id);
    if (conn.mariadb && !archive && unique_for.count() == 0) {
      auto n = DeleteReturning(conn, queue_id, receipts, at, end, ids, out);
      if (!n.ok()) return n.status();
      acked += *n;
      continue;
    }
    const std::string lock_sql = fmt::format(
        "SELECT id, token, attempts FROM sqlq_messages FORCE INDEX "
        "(PRIMARY) WHERE id IN ({}) AND queue_id = ? FOR UPDATE",
        Marks(Bucket(ids.size())));
    Params lp;
    AddIds(lp, ids);
    lp.Int(queue_id);
    auto rows = conn.Run(lock_sql, lp, "ack");
    if (!rows.ok()) return rows.status();
    std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> found;
    for (int i = 0; i < rows->size(); ++i) {
      found[rows->Int(i, 0)] = {rows->Int(i, 1), rows->Int(i, 2)};
    }
    std::vector<std::int64_t> gone;
    for (std::size_t i = at; i < end; ++i) {
      const core::Receipt& r = receipts[i];
      auto it = found.find(r.id);
      if (it == found.end()) {
        out[i] = core::NotInQueue(r.id);
      } else if (it->second.first != TokenBits(r.token) ||
                 it->second.second != r.attempt) {
        out[i] = core::StaleReceipt(r, it->second.first, it->second.second);
      } else {
        gone.push_back(r.id);
        found.erase(it);  // a second receipt for it finds it gone
        out[i] = Status::Ok();
      }
    }
    if (gone.empty()) continue;
    s = HoldLocked(conn, queue_id, gone, unique_for);
    if (!s.ok()) return s;
    const std::string marks = Marks(Bucket(gone.size()));
    if (archive) {
      auto now = NowUs(conn);
      if (!now.ok()) return now.status();
      const std::string ins = fmt::format(
          "INSERT INTO sqlq_archive (id, queue_id, priority, attempts, "
          "enqueued_us, completed_us, worker, payload, headers, errors) "
          "SELECT id, queue_id, priority, attempts, enqueued_us, ?, worker, "
          "payload, headers, errors FROM sqlq_messages WHERE id IN ({})",
          marks);
      Params ip;
      ip.Int(*now);
      AddIds(ip, gone);
      auto r = conn.Run(ins, ip, "ack");
      if (!r.ok()) return r.status();
    }
    const std::string del =
        fmt::format("DELETE FROM sqlq_messages WHERE id IN ({})", marks);
    Params dp;
    AddIds(dp, gone);
    auto d = conn.Run(del, dp, "ack");
    if (!d.ok()) return d.status();
    acked += static_cast<std::int64_t>(gone.size());
  }
  if (acked > 0) {
    s = AddCounters(conn, queue_id, {.acks = acked});
    if (!s.ok()) return s;
  }
  return out;
}

Status MysqlEngine::Retry(Conn& c, const core::RetryParams& p) {
  MyConn& conn = Native(c);
  auto now = CheckedNow(conn, p.queue_id);
  if (!now.ok()) return now.status();
  static const std::string kSql =
      "UPDATE sqlq_messages SET errors = " + AppendError("?", "?") +
      ", token = 0, ready_us = ?, last_error = ? "
      "WHERE id = ? AND queue_id = ? AND token = ? AND attempts = ?";
  static const std::string kRelease = R"sql(
    UPDATE sqlq_messages SET token = 0, ready_us = ?, attempts = attempts - 1
    WHERE id = ? AND queue_id = ? AND token = ? AND attempts = ?)sql";
  static const std::string kSnooze = R"sql(
    UPDATE sqlq_messages SET token = 0, ready_us = ?,
      attempts = attempts - 1, snoozes = snoozes + 1
    WHERE id = ? AND queue_id = ? AND token = ? AND attempts = ?
      AND snoozes < ?)sql";
  Params params;
  if (p.snooze) {
    params.Int(*now + p.delay.count());
    AppendFence(params, p.queue_id, p.receipt);
    params.Int(kMaxSnoozes);
    auto rows = conn.Run(kSnooze, params, "snooze");
    if (!rows.ok()) return rows.status();
    *p.snoozed = rows->affected() > 0;
    return Status::Ok();
  }
  if (!p.release) params.Int(*now).Text(p.history_error);
  params.Int(*now + p.delay.count());
  if (!p.release) params.BytesOrNull(p.error);
  AppendFence(params, p.queue_id, p.receipt);
  auto rows = conn.Run(p.release ? kRelease : kSql, params,
                       p.release ? "release" : "nack");
  if (!rows.ok()) return rows.status();
  if (rows->affected() == 0) return Refused(conn, p.queue_id, p.receipt);
  if (p.release) return AddCounters(conn, p.queue_id, {.claims = -1});
  return AddCounters(conn, p.queue_id, {.nacks = 1});
}

Status MysqlEngine::Bury(Conn& c, const core::BuryParams& p) {
  MyConn& conn = Native(c);
  auto now = CheckedNow(conn, p.queue_id);
  if (!now.ok()) return now.status();
  auto leased = LockLeased(conn, p.queue_id, p.receipt);
  if (!leased.ok()) return leased.status();
  if (!*leased) return Refused(conn, p.queue_id, p.receipt);
  Status held = HoldLocked(conn, p.queue_id, {p.receipt.id}, p.unique_for);
  if (!held.ok()) return held;
  static const std::string kSql =
      "INSERT INTO sqlq_dead (id, queue_id, priority, attempts, enqueued_us, "
      "died_us, last_error, payload, headers, grp, errors) "
      "SELECT id, queue_id, priority, attempts, enqueued_us, ?, ?, payload, "
      "headers, grp, " +
      AppendError("?", "?") + " FROM sqlq_messages WHERE id = ?";
  auto ins = conn.Run(kSql,
                      Params()
                          .Int(*now)
                          .Bytes(p.error)
                          .Int(*now)
                          .Text(p.history_error)
                          .Int(p.receipt.id),
                      "nack");
  if (!ins.ok()) return ins.status();
  static const std::string kDeleteId = "DELETE FROM sqlq_messages WHERE id = ?";
  auto del = conn.Run(kDeleteId, Params().Int(p.receipt.id), "nack");
  if (!del.ok()) return del.status();
  return AddCounters(conn, p.queue_id, core::BuryCounters(p));
}

Result<std::int64_t> MysqlEngine::Cancel(Conn& c, const core::CancelParams& p) {
  MyConn& conn = Native(c);
  auto now = CheckedNow(conn, p.queue_id);
  if (!now.ok()) return now.status();
  if (p.ids.empty()) return 0;
  // The messages still there, locked: what the statements below move.
  std::vector<std::int64_t> ids(p.ids.begin(), p.ids.end());
  {
    const std::string sql = fmt::format(
        "SELECT id FROM sqlq_messages WHERE id IN ({}) AND queue_id = ? "
        "FOR UPDATE",
        Marks(Bucket(ids.size())));
    Params lp;
    AddIds(lp, ids);
    lp.Int(p.queue_id);
    auto rows = conn.Run(sql, lp, "cancel");
    if (!rows.ok()) return rows.status();
    ids.clear();
    for (int i = 0; i < rows->size(); ++i) ids.push_back(rows->Int(i, 0));
  }
  if (ids.empty()) return 0;
  Status held = HoldLocked(conn, p.queue_id, ids, p.unique_for);
  if (!held.ok()) return held;
  Status s = MoveIdsToDead(
      conn, ids, *now, "?", "?", "?",
      [&](Params& params) { params.Bytes(p.error).Int(*now).Text(p.error); },
      "cancel");
  if (!s.ok()) return s;
  const auto moved = static_cast<std::int64_t>(ids.size());
  s = AddCounters(conn, p.queue_id, {.dead_lettered = moved});
  if (!s.ok()) return s;
  return moved;
}

Result<Timestamp> MysqlEngine::Extend(Conn& c, const core::ExtendParams& op) {
  const auto& [queue_id, receipt, lease] = op;
  MyConn& conn = Native(c);
  auto now = CheckedNow(conn, queue_id);
  if (!now.ok()) return now.status();
  const std::int64_t until = *now + lease.count();
  static const std::string kSql = R"sql(
    UPDATE sqlq_messages SET ready_us = ?
    WHERE id = ? AND queue_id = ? AND token = ? AND attempts = ?)sql";
  Params params;
  params.Int(until);
  AppendFence(params, queue_id, receipt);
  auto rows = conn.Run(kSql, params, "extend");
  if (!rows.ok()) return rows.status();
  if (rows->affected() == 0) return Refused(conn, queue_id, receipt);
  return FromUs(until);
}

}  // namespace sqlq::engines::mysql
