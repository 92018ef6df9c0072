// MariaDB/MySQL engine: queues and names, sends, stats, dead letters and the
// archive.

#include <mysqld_error.h>

#include "engines/mysql/mysql_engine_impl.h"
#include "sqlq/text.h"

namespace sqlq::engines::mysql {

namespace {

// Appends ", payload, headers[, group]" as SQL literals: hex, which holds
// nothing but the digits written here (headers as utf8mb4 text), or NULL
// for no headers or no group. `grouped`: the group goes too.
void AppendLiterals(std::string& out, std::string_view payload,
                    std::string_view headers,
                    std::optional<std::string_view> group, bool grouped) {
  out += ", X'";
  AppendHex(out, payload);
  out += '\'';
  if (headers.empty()) {
    out += ", NULL";
  } else {
    out += ", _utf8mb4 X'";
    AppendHex(out, headers);
    out += '\'';
  }
  if (!grouped) return;
  if (group) {
    out += ", X'";
    AppendHex(out, *group);
    out += '\'';
  } else {
    out += ", NULL";
  }
}

// A message with a dedup key, alone, prepared: queue, priority,
// -priority, ready, enqueued, key, payload, headers, group.
const std::string kInsertDedup = R"sql(
  INSERT INTO sqlq_messages
    (queue_id, priority, npriority, ready_us, enqueued_us, dedup, payload,
     headers, grp)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?))sql";

// The INSERT into sqlq_dedup_keys of the keys of those of `messages` that
// have one (at least one must), as literals (hex keys): message k's id is
// id0 + k * step, or with no id0 LAST_INSERT_ID() + k * step (right after
// the INSERT of the messages, whose first id that is).
std::string KeysInsert(std::int64_t queue_id, std::span<const Message> messages,
                       std::optional<std::int64_t> id0, std::int64_t step) {
  std::string sql =
      "INSERT INTO sqlq_dedup_keys (queue_id, dedup, message_id) VALUES ";
  bool first = true;
  for (std::size_t k = 0; k < messages.size(); ++k) {
    if (messages[k].dedup_key.empty()) continue;
    sql += fmt::format("{}({}, X'", first ? "" : ", ", queue_id);
    AppendHex(sql, messages[k].dedup_key);
    const std::int64_t offset = static_cast<std::int64_t>(k) * step;
    sql += id0 ? fmt::format("', {})", *id0 + offset)
               : fmt::format("', LAST_INSERT_ID() + {})", offset);
    first = false;
  }
  return sql;
}

}  // namespace

Status MysqlEngine::DropQueue(Conn& c, std::int64_t queue_id) {
  // Messages, dead letters, archive and counters go by ON DELETE CASCADE.
  static const std::string kSql = "DELETE FROM sqlq_queues WHERE id = ?";
  auto rows = Native(c).Run(kSql, Params().Int(queue_id), "drop queue");
  if (!rows.ok()) return rows.status();
  if (rows->affected() == 0) return core::QueueGone(queue_id);
  return Status::Ok();
}

const std::string& MysqlEngine::InsertSql(std::size_t n, bool grouped,
                                          bool keyed) {
  static std::mutex mu;
  static std::map<std::tuple<std::size_t, bool, bool>, std::string> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& sql = cache[{n, grouped, keyed}];
  if (sql.empty()) {
    sql = fmt::format(
        "INSERT INTO sqlq_messages (queue_id, priority, npriority, ready_us, "
        "enqueued_us, payload, headers{}{}) VALUES ",
        grouped ? ", grp" : "", keyed ? ", dedup" : "");
    const std::string row = fmt::format(
        "(?, ?, ?, ?, ?, ?, ?{}{})", grouped ? ", ?" : "", keyed ? ", ?" : "");
    for (std::size_t i = 0; i < n; ++i) {
      if (i > 0) sql += ", ";
      sql += row;
    }
  }
  return sql;
}

Result<std::vector<SendResult>> MysqlEngine::Send(Conn& c,
                                                  const core::SendParams& p) {
  MyConn& conn = Native(c);
  // No separate check of the queue: the first INSERT's foreign key check
  // share-locks the queue's row (as CheckQueue would) until commit, and
  // on a dropped queue fails with 1452, which InnoDB rolls back as a
  // statement before anything of this send was written: a clean failure
  // (engine.h), one round trip fewer.
  const bool checked = conn.known_queues.contains(p.queue_id);
  auto gone = [&](const Status& s) -> Status {
    if (!checked && s.code() == Code::kNotFound)
      return core::QueueGone(p.queue_id);
    return s;
  };
  auto now_r = NowUs(conn);
  if (!now_r.ok()) return now_r.status();
  const std::int64_t now = *now_r;
  // Groups go in a column of their own only when the send has any, so a
  // plain send binds what it always did.
  bool grouped = p.grouped;
  for (const Message& m : p.messages) grouped = grouped || !m.group.empty();
  auto group = [&](Params& params, const Message& m) {
    if (auto g = core::GroupOf(m, p.grouped)) {
      params.Bytes(*g);
    } else {
      params.Null();
    }
  };
  static const std::string kExisting = R"sql(
    SELECT id FROM sqlq_messages WHERE queue_id = ? AND dedup = ?
    LOCK IN SHARE MODE)sql";
  // When a message becomes claimable (SendParams).
  auto ready = [now](const Message& m) {
    return std::max(now + Us(m.delay), core::NotBeforeUs(m));
  };
  auto headers = [](Params& params, const Message& m) {
    std::string text = core::EncodeMessageHeaders(m);
    if (text.empty()) {
      params.Null();
    } else {
      params.Text(text);
    }
  };
  std::vector<SendResult> out;
  out.reserve(p.messages.size());
  std::int64_t stored = 0;
  const std::size_t n = p.messages.size();
  std::size_t i = 0;
  // Runs of messages without dedup keys go in multi-row INSERTs; ids then
  // follow the batch order: AUTO_INCREMENT hands a multi-row INSERT
  // consecutive ids (step auto_increment_increment) under
  // innodb_autoinc_lock_mode 0 and 1; under 2 each row goes alone. Where
  // keys are held apart (dedup_keys_apart_), a run takes messages with keys
  // too, whose keys then go in one INSERT of their own: a key taken (1062,
  // which rolls back that statement alone) deletes the run's messages
  // again, and they go one at a time (`alone_until`).
  const bool keys_in_runs = dedup_keys_apart_ && conn.consecutive_autoinc;
  std::size_t alone_until = 0;
  while (i < n) {
    const Message& first = p.messages[i];
    std::size_t run = 0, bytes = 0;
    const std::size_t cap =
        conn.consecutive_autoinc && i >= alone_until ? kMaxInsertRows : 1;
    while (i + run < n && run < cap &&
           (keys_in_runs || p.messages[i + run].dedup_key.empty()) &&
           (run == 0 ||
            bytes + p.messages[i + run].payload.size() <= kMaxInsertBytes)) {
      bytes += p.messages[i + run].payload.size();
      ++run;
    }
    if (run > 1 || (run == 1 && first.dedup_key.empty())) {
      // The run rounded down to a multiple of 16, or the run itself when
      // shorter: at most 31 statement variants per connection (runs are at
      // most kMaxInsertRows = 256), and a batch of 100 goes in two
      // statements (96 + 4) where powers of two took three (64 + 32 + 4).
      const std::size_t chunk = run < 16 ? run : run - run % 16;
      bool keyed = false;
      for (std::size_t k = 0; k < chunk; ++k) {
        keyed = keyed || !p.messages[i + k].dedup_key.empty();
      }
      Params params;
      for (std::size_t k = 0; k < chunk; ++k) {
        const Message& m = p.messages[i + k];
        params.Int(p.queue_id)
            .Int(m.priority)
            .Int(-static_cast<std::int64_t>(m.priority))
            .Int(ready(m))
            .Int(now)
            .Bytes(m.payload);
        headers(params, m);
        if (grouped) group(params, m);
        if (keyed) {
          if (m.dedup_key.empty()) {
            params.Null();
          } else {
            params.Bytes(m.dedup_key);
          }
        }
      }
      auto rows = conn.Run(InsertSql(chunk, grouped, keyed), params, "send",
                           /*clean_ok=*/stored == 0 && !checked);
      if (!rows.ok()) return gone(rows.status());
      conn.known_queues.insert(p.queue_id);
      const auto id0 = static_cast<std::int64_t>(rows->insert_id());
      auto id_of = [&](std::size_t k) {
        return id0 +
               static_cast<std::int64_t>(k) * conn.auto_increment_increment;
      };
      if (keyed) {
        Status held = StoreKeys(conn, p.queue_id, p.messages.subspan(i, chunk),
                                id0, conn.auto_increment_increment);
        if (held.code() == Code::kAlreadyExists) {
          alone_until = i + chunk;
          continue;
        }
        if (!held.ok()) return held;
      }
      for (std::size_t k = 0; k < chunk; ++k) out.push_back({.id = id_of(k)});
      stored += static_cast<std::int64_t>(chunk);
      i += chunk;
      continue;
    }
    // A dedup key: alone, so that a duplicate (InnoDB rolls back just that
    // statement) is told apart. Its holder may be acked between our insert
    // and the look-up; then insert again.
    const Message& m = first;
    if (dedup_keys_apart_) {
      auto sent = SendKeyed(conn, p.queue_id, m, ready(m), now, p.grouped);
      if (!sent.ok()) return gone(sent.status());
      out.push_back(*sent);
      if (!sent->duplicate) {
        conn.known_queues.insert(p.queue_id);
        ++stored;
      }
      ++i;
      continue;
    }
    for (int attempt = 0;; ++attempt) {
      Params params;
      params.Int(p.queue_id)
          .Int(m.priority)
          .Int(-static_cast<std::int64_t>(m.priority))
          .Int(ready(m))
          .Int(now)
          .Bytes(m.dedup_key)
          .Bytes(m.payload);
      headers(params, m);
      group(params, m);
      auto ins = conn.Run(kInsertDedup, params, "send", /*clean_ok=*/true);
      if (ins.ok()) {
        conn.known_queues.insert(p.queue_id);
        out.push_back({.id = static_cast<std::int64_t>(ins->insert_id())});
        ++stored;
        break;
      }
      if (ins.status().code() != Code::kAlreadyExists) {
        return gone(ins.status());
      }
      auto existing = conn.Run(
          kExisting, Params().Int(p.queue_id).Bytes(m.dedup_key), "send");
      if (!existing.ok()) return existing.status();
      if (existing->size() == 1) {
        out.push_back({.id = existing->Int(0, 0), .duplicate = true});
        break;
      }
      if (attempt == 3) {
        return Status::Busy(
            "send: the dedup key's message kept changing; try again");
      }
    }
    ++i;
  }
  Status held = ApplyHolds(conn, p, out, stored);
  if (!held.ok()) return held;
  if (stored > 0) {
    Status s = AddCounters(conn, p.queue_id, {.sends = stored});
    if (!s.ok()) return s;
  }
  return out;
}

Status MysqlEngine::StoreKeys(MyConn& conn, std::int64_t queue_id,
                              std::span<const Message> messages,
                              std::int64_t id0, std::int64_t step) {
  // One statement, which a caller's connection takes too.
  const std::string sql = KeysInsert(queue_id, messages, id0, step);
  std::string ids;
  for (std::size_t k = 0; k < messages.size(); ++k) {
    ids += fmt::format("{}{}", k == 0 ? "" : ", ",
                       id0 + static_cast<std::int64_t>(k) * step);
  }
  std::vector<MyConn::Done> done;
  Status s = conn.ExecSteps(sql, "send (dedup keys)", &done,
                            /*clean_ok=*/true);
  if (s.code() != Code::kAlreadyExists) return s;
  // A key taken, or twice in the run: the run's messages go again. Their
  // keys cleared first, so that the trigger leaves the key rows alone
  // (SendKeyed says why).
  Status undone = conn.ExecSteps(
      "UPDATE sqlq_messages SET dedup = NULL WHERE id IN (" + ids + ")",
      "send (dedup keys)", &done);
  if (undone.ok()) {
    undone =
        conn.ExecSteps("DELETE FROM sqlq_messages WHERE id IN (" + ids + ")",
                       "send (dedup keys)", &done);
  }
  return undone.ok() ? s : undone;
}

Result<SendResult> MysqlEngine::SendKeyed(MyConn& conn, std::int64_t queue_id,
                                          const Message& m,
                                          std::int64_t ready_us,
                                          std::int64_t now, bool grouped) {
  // The message, then its key, whose primary key refuses a second holder
  // (1062, that statement rolled back). One packet of literals (as
  // PacketSend's) where the message is small enough and the connection is
  // the store's, else prepared statements. The SQL-level API's send does
  // the same (sql_api.h, kSendOneKeys25).
  static const std::string kKey = R"sql(
    INSERT INTO sqlq_dedup_keys (queue_id, dedup, message_id)
    VALUES (?, ?, ?))sql";
  // A key held: its message, still in the queue with that key (locked: its
  // ack waits for this transaction), or gone (a delete the trigger did not
  // see).
  static const std::string kHolder = R"sql(
    SELECT k.message_id, m.id FROM sqlq_dedup_keys k
    LEFT JOIN sqlq_messages m ON m.id = k.message_id
      AND m.queue_id = k.queue_id AND m.dedup = k.dedup
    WHERE k.queue_id = ? AND k.dedup = ?
    LOCK IN SHARE MODE)sql";
  // Only from the holder seen: of two senders taking one key over, the
  // second takes nothing and finds the first's message.
  static const std::string kTakeOver = R"sql(
    UPDATE sqlq_dedup_keys SET message_id = ?
    WHERE queue_id = ? AND dedup = ? AND message_id = ?)sql";
  // This send's message deleted again, its key cleared first so that the
  // trigger leaves the holder's key row alone: this send holds a share
  // lock on it, as another duplicate may, and neither could take it for
  // writing.
  static const std::string kClear =
      "UPDATE sqlq_messages SET dedup = NULL WHERE id = ?";
  static const std::string kDelete = "DELETE FROM sqlq_messages WHERE id = ?";
  auto unsend = [&](std::int64_t id) -> Status {
    auto cleared = conn.Run(kClear, Params().Int(id), "send (dedup key)");
    if (!cleared.ok()) return cleared.status();
    auto deleted = conn.Run(kDelete, Params().Int(id), "send (dedup key)");
    return deleted.ok() ? Status::Ok() : deleted.status();
  };
  const std::string headers = core::EncodeMessageHeaders(m);
  const std::optional<std::string_view> group = core::GroupOf(m, grouped);
  const std::size_t bytes = m.payload.size() + headers.size() +
                            (group ? group->size() : 0) + m.dedup_key.size();
  std::int64_t id = 0;
  Status keyed;  // the key's insert
  // A caller's connection (JoinTx) may not take several statements.
  if (bytes <= kPacketSendBytes && conn.owned()) {
    const core::SendParams one{.queue_id = queue_id,
                               .messages = std::span<const Message>(&m, 1),
                               .grouped = grouped};
    const PacketSend packet{.headers = {headers},
                            .bytes = bytes,
                            .grouped = grouped || !m.group.empty(),
                            .keyed = true};
    const std::string sql =
        packet.Insert(one, now) + "; " + packet.Keys(one, /*step=*/1);
    std::vector<MyConn::Done> done;
    keyed = conn.ExecSteps(sql, "send", &done, /*clean_ok=*/true);
    if (done.empty()) return keyed;  // the message's insert failed
    id = static_cast<std::int64_t>(done[0].insert_id);
  } else {
    Params params;
    params.Int(queue_id)
        .Int(m.priority)
        .Int(-static_cast<std::int64_t>(m.priority))
        .Int(ready_us)
        .Int(now)
        .Bytes(m.dedup_key)
        .Bytes(m.payload);
    if (headers.empty()) {
      params.Null();
    } else {
      params.Text(headers);
    }
    if (group) {
      params.Bytes(*group);
    } else {
      params.Null();
    }
    auto ins = conn.Run(kInsertDedup, params, "send", /*clean_ok=*/true);
    if (!ins.ok()) return ins.status();
    id = static_cast<std::int64_t>(ins->insert_id());
    keyed = conn.Run(kKey, Params().Int(queue_id).Bytes(m.dedup_key).Int(id),
                     "send (dedup key)", /*clean_ok=*/true)
                .status();
  }
  for (int attempt = 0;; ++attempt) {
    if (keyed.ok()) return SendResult{.id = id};
    if (keyed.code() != Code::kAlreadyExists) return keyed;
    if (attempt == 3) {
      Status unsent = unsend(id);
      if (!unsent.ok()) return unsent;
      return Status::Busy(
          "send: the dedup key's message kept changing; try again");
    }
    auto holder = conn.Run(kHolder, Params().Int(queue_id).Bytes(m.dedup_key),
                           "send (dedup key)");
    if (!holder.ok()) return holder.status();
    if (holder->size() == 1 && !holder->IsNull(0, 1)) {
      Status unsent = unsend(id);
      if (!unsent.ok()) return unsent;
      return SendResult{.id = holder->Int(0, 1), .duplicate = true};
    }
    if (holder->size() == 1) {
      auto taken = conn.Run(kTakeOver,
                            Params()
                                .Int(id)
                                .Int(queue_id)
                                .Bytes(m.dedup_key)
                                .Int(holder->Int(0, 0)),
                            "send (dedup key)");
      if (!taken.ok()) return taken.status();
      if (taken->affected() == 1) return SendResult{.id = id};
    }
    // The key was freed (or taken) meanwhile: insert it again.
    keyed = conn.Run(kKey, Params().Int(queue_id).Bytes(m.dedup_key).Int(id),
                     "send (dedup key)", /*clean_ok=*/true)
                .status();
  }
}

bool MysqlEngine::RoutineGone(MyConn& c, const Status& failed,
                              std::atomic<bool>& routine) {
  if (c.healthy() && !c.lost_at_begin) {
    (void)c.Exec("ROLLBACK", "rollback");
  }
  // The user may not run it (the procedure was made by another), or it
  // was dropped since the store opened.
  const unsigned int err = c.last_errno();
  if ((failed.code() != Code::kPermissionDenied &&
       err != ER_PROCACCESS_DENIED_ERROR && err != ER_SP_DOES_NOT_EXIST) ||
      !c.healthy()) {
    return false;
  }
  routine = false;
  c.tx_error.reset();
  return true;
}

std::optional<MysqlEngine::PacketSend> MysqlEngine::PacketSendOf(
    const core::SendParams& p, bool keys_ok) const {
  PacketSend out;
  bool keyed = false;
  out.grouped = p.grouped;
  out.headers.reserve(p.messages.size());
  for (const Message& m : p.messages) {
    out.headers.push_back(core::EncodeMessageHeaders(m));
    // A key goes twice: in the message's row and in its key's.
    out.bytes += m.payload.size() + out.headers.back().size() + m.group.size() +
                 2 * m.dedup_key.size();
    keyed = keyed || !m.dedup_key.empty();
    out.grouped = out.grouped || !m.group.empty();
  }
  // Keys only where they are held apart and no dedup window asks for a
  // look at the holds.
  if (keyed && !(keys_ok && dedup_keys_apart_ && p.unique_for.count() == 0)) {
    return std::nullopt;
  }
  if (clock_ || p.messages.empty() || out.bytes > kPacketSendBytes) {
    return std::nullopt;
  }
  out.keyed = keyed;
  return out;
}

std::string MysqlEngine::PacketSend::Insert(
    const core::SendParams& p, std::optional<std::int64_t> now) const {
  // Integers formatted here and hex literals; the clock is `now`, or
  // @sqlq_now, read once for them all as Send reads it at BEGIN.
  const std::string clock = now ? std::to_string(*now) : "@sqlq_now";
  std::string sql = fmt::format(
      "INSERT INTO sqlq_messages (queue_id, priority, npriority, ready_us, "
      "enqueued_us, payload, headers{}{}) VALUES ",
      grouped ? ", grp" : "", keyed ? ", dedup" : "");
  sql.reserve(sql.size() + 2 * bytes + 96 * p.messages.size());
  for (std::size_t i = 0; i < p.messages.size(); ++i) {
    const Message& m = p.messages[i];
    const std::int64_t delay = Us(m.delay), not_before = core::NotBeforeUs(m);
    sql += fmt::format("{}({}, {}, {}, ", i == 0 ? "" : ", ", p.queue_id,
                       m.priority, -static_cast<std::int64_t>(m.priority));
    if (delay == 0 && not_before == 0) {
      sql += clock;
    } else {
      sql += fmt::format("GREATEST({} + {}, {})", clock, delay, not_before);
    }
    sql += ", " + clock;
    AppendLiterals(sql, m.payload, headers[i], core::GroupOf(m, p.grouped),
                   grouped);
    if (keyed && m.dedup_key.empty()) {
      sql += ", NULL";
    } else if (keyed) {
      sql += ", X'";
      AppendHex(sql, m.dedup_key);
      sql += '\'';
    }
    sql += ')';
  }
  return sql;
}

std::string MysqlEngine::PacketSend::Keys(const core::SendParams& p,
                                          std::int64_t step) const {
  return KeysInsert(p.queue_id, p.messages, std::nullopt, step);
}

Result<std::vector<SendResult>> MysqlEngine::SendAndCommit(
    const core::SendParams& to, const MessagesFn& messages) {
  core::SendParams p = to;
  p.messages = messages();
  const std::optional<PacketSend> packet = PacketSendOf(p, /*keys_ok=*/true);
  if (!packet) return core::Engine::SendAndCommit(to, messages);
  // A key taken (or twice in the send): the packet was rolled back, and the
  // send goes the way of any write, which tells the duplicates.
  bool taken = false;
  const std::vector<std::string>& headers = packet->headers;
  // The INSERT, written when the packet is first sent.
  std::string insert;
  const auto n = static_cast<std::int64_t>(p.messages.size());
  std::vector<SendResult> out;
  Status s = pool_.RunWrite([&](MyConn& c) -> Status {
    // Ids are read off the INSERT's first one only when a multi-row INSERT
    // gets consecutive ones (innodb_autoinc_lock_mode 0 or 1).
    if (n > 1 && !c.consecutive_autoinc) {
      return WriteOn(c, [&](Conn& conn) -> Status {
        auto r = Send(conn, p);
        if (!r.ok()) return r.status();
        out = std::move(*r);
        return Status::Ok();
      });
    }
    c.read_only = false;
    // One message, where the schema has the send's procedure: one CALL,
    // the whole transaction inside it. Not on Galera, whose wait for the
    // cluster's earlier writes goes with a BEGIN sent by the client.
    if (n == 1 && send_routine_ && !c.wsrep && !packet->keyed) {
      const Message& m = p.messages[0];
      std::string call = fmt::format(
          "CALL sqlq__send_committed({}, {}, {}, {}, {}", p.queue_id,
          c.counter_slot, m.priority, Us(m.delay), core::NotBeforeUs(m));
      AppendLiterals(call, m.payload, headers[0], core::GroupOf(m, p.grouped),
                     /*grouped=*/true);
      call += ')';
      c.tx_open = true;
      // Its answers: the id, then the CALL's own.
      auto done = c.ExecCommit(call, 2, 0, "send");
      if (done.ok()) {
        if (!(*done)[0].value) {
          return Status::Internal("send: the procedure returned no id");
        }
        own_bumps_ += WakeBumps({.sends = 1});  // the procedure's count
        out = {{.id = *(*done)[0].value}};
        return Status::Ok();
      }
      // Missing, or not ours to run: the packet below, from now on.
      if (!RoutineGone(c, done.status(), send_routine_)) {
        if (done.status().code() == Code::kNotFound) {
          return core::QueueGone(p.queue_id);
        }
        return done.status();
      }
    }
    const char* begin = BeginSql(c);
    const std::size_t begins = c.wsrep ? 3 : 1;
    c.pending_counters[p.queue_id] += QueueCounters{.sends = n};
    std::string sql = fmt::format("{}; {}", begin, kSetNow);
    if (insert.empty()) insert = packet->Insert(p);
    sql += insert;
    sql += "; ";
    if (packet->keyed) {
      sql += packet->Keys(p, c.auto_increment_increment);
      sql += "; ";
    }
    sql += TakeCounters(c);
    sql += "COMMIT";
    c.tx_open = true;
    const std::size_t statements = begins + (packet->keyed ? 5 : 4);
    auto done = c.ExecCommit(sql, statements, statements - 1, "send");
    if (!done.ok()) {
      c.bumps = 0;
      if (c.healthy() && !c.lost_at_begin) {
        (void)c.Exec("ROLLBACK", "rollback");
      }
      if (packet->keyed && done.status().code() == Code::kAlreadyExists) {
        taken = true;
        return Status::Ok();
      }
      // The queue's row is gone: its foreign key failed, which stores
      // nothing.
      if (done.status().code() == Code::kNotFound) {
        return core::QueueGone(p.queue_id);
      }
      return done.status();
    }
    own_bumps_ += c.bumps;
    c.bumps = 0;
    const auto id0 = static_cast<std::int64_t>((*done)[begins + 1].insert_id);
    out.clear();
    for (std::int64_t k = 0; k < n; ++k) {
      out.push_back({.id = id0 + k * c.auto_increment_increment});
    }
    return Status::Ok();
  });
  if (!s.ok()) return s;
  if (taken) return core::Engine::SendAndCommit(to, messages);
  return out;
}

Result<std::vector<core::MessageOps::SentTo>> MysqlEngine::SendEach(
    Conn& c, std::span<const core::SendParams> sends) {
  MyConn& conn = Native(c);
  // The plain case: messages without dedup keys, queues without dedup
  // windows, each queue once, ids handed out consecutively (Send says why).
  std::unordered_set<std::int64_t> queues;
  bool plain = sends.size() > 1 && conn.consecutive_autoinc;
  bool grouped = false;
  for (const core::SendParams& p : sends) {
    plain =
        plain && p.unique_for.count() == 0 && queues.insert(p.queue_id).second;
    grouped = grouped || p.grouped;
    for (const Message& m : p.messages) {
      plain = plain && m.dedup_key.empty();
      grouped = grouped || !m.group.empty();
    }
  }
  if (!plain) return MessageOps::SendEach(c, sends);
  auto now_r = NowUs(conn);
  if (!now_r.ok()) return now_r.status();
  const std::int64_t now = *now_r;
  // Every message in order, by its send's place.
  std::vector<std::pair<std::size_t, const Message*>> rows;
  for (std::size_t k = 0; k < sends.size(); ++k) {
    for (const Message& m : sends[k].messages) rows.emplace_back(k, &m);
  }
  // Ids stored by the multi-row INSERTs, per send; `gone`: sends whose
  // queue was dropped meanwhile.
  std::vector<std::vector<std::int64_t>> ids(sends.size());
  std::vector<bool> gone(sends.size());
  // After the INSERT at row `i` found a queue gone (a foreign key failure,
  // which rolls back just that statement): the rest queue by queue, with
  // Send, which tells which queue it was. The send at `i` may have stored
  // its first messages already: its queue's row is then share-locked and
  // the rest of it cannot fail so.
  auto one_by_one = [&](std::size_t i) -> Status {
    std::size_t k = rows[i].first;
    for (; k < sends.size(); ++k) {
      core::SendParams rest = sends[k];
      rest.messages = rest.messages.subspan(ids[k].size());
      auto r = Send(c, rest);
      if (!r.ok() && r.status().code() == Code::kNotFound && ids[k].empty()) {
        gone[k] = true;
        continue;
      }
      if (!r.ok()) {
        return core::IsCleanFailure(r.status())
                   ? Status::Internal("send: " + r.status().ToString())
                   : r.status();
      }
      for (const SendResult& sent : *r) ids[k].push_back(sent.id);
    }
    return Status::Ok();
  };
  std::vector<std::size_t> fast(sends.size());  // stored by the INSERTs
  std::size_t i = 0;
  while (i < rows.size()) {
    // Chunks as Send makes them: at most kMaxInsertRows and
    // kMaxInsertBytes, rounded down to a multiple of 16, so that no new
    // statement is prepared.
    std::size_t run = 0, bytes = 0;
    while (i + run < rows.size() && run < kMaxInsertRows &&
           (run == 0 ||
            bytes + rows[i + run].second->payload.size() <= kMaxInsertBytes)) {
      bytes += rows[i + run].second->payload.size();
      ++run;
    }
    const std::size_t chunk = run < 16 ? run : run - run % 16;
    Params params;
    for (std::size_t k = 0; k < chunk; ++k) {
      const core::SendParams& to = sends[rows[i + k].first];
      const Message& m = *rows[i + k].second;
      params.Int(to.queue_id)
          .Int(m.priority)
          .Int(-static_cast<std::int64_t>(m.priority))
          .Int(std::max(now + Us(m.delay), core::NotBeforeUs(m)))
          .Int(now)
          .Bytes(m.payload);
      std::string text = core::EncodeMessageHeaders(m);
      if (text.empty()) {
        params.Null();
      } else {
        params.Text(text);
      }
      if (grouped) {
        if (auto g = core::GroupOf(m, to.grouped)) {
          params.Bytes(*g);
        } else {
          params.Null();
        }
      }
    }
    auto inserted = conn.Run(InsertSql(chunk, grouped), params, "send",
                             /*clean_ok=*/true);
    if (!inserted.ok()) {
      if (inserted.status().code() != Code::kNotFound) {
        return inserted.status();
      }
      Status s = one_by_one(i);
      if (!s.ok()) return s;
      break;
    }
    const auto id0 = static_cast<std::int64_t>(inserted->insert_id());
    for (std::size_t k = 0; k < chunk; ++k) {
      const std::size_t to = rows[i + k].first;
      ids[to].push_back(id0 + static_cast<std::int64_t>(k) *
                                  conn.auto_increment_increment);
      ++fast[to];
    }
    i += chunk;
  }
  std::vector<SentTo> out;
  out.reserve(sends.size());
  for (std::size_t k = 0; k < sends.size(); ++k) {
    if (gone[k]) {
      out.emplace_back();
      continue;
    }
    if (fast[k] > 0) {
      conn.known_queues.insert(sends[k].queue_id);
      Status s = AddCounters(conn, sends[k].queue_id,
                             {.sends = static_cast<std::int64_t>(fast[k])});
      if (!s.ok()) return s;
    }
    std::vector<SendResult> sent;
    sent.reserve(ids[k].size());
    for (std::int64_t id : ids[k]) sent.push_back({.id = id});
    out.emplace_back(std::move(sent));
  }
  return out;
}

Result<std::int64_t> MysqlEngine::MoveDeadLetters(MyConn& conn,
                                                  const core::RedriveParams& op,
                                                  std::int64_t to,
                                                  std::int64_t now) {
  const auto& [queue_id, ids, to_queue_id] = op;
  // Pages of dead letters are locked and read (in id order), inserted
  // back with explicit values and deleted by id. Not INSERT ... SELECT:
  // MariaDB counts a write to a table with an AUTO_INCREMENT column after
  // a select from another table as unsafe for statement-based
  // replication, even with explicit ids.
  constexpr std::size_t kPage = 256;
  static const std::string kAllPage = R"sql(
    SELECT id, priority, enqueued_us, last_error, payload, headers, errors,
           grp
    FROM sqlq_dead
    WHERE queue_id = ? AND id > ? ORDER BY id LIMIT 256 FOR UPDATE)sql";
  // A redriven message is ready now with fresh attempts, in queue `to`; it
  // keeps its id (never reused, see schema.h) but not a dedup key.
  static const std::string kInsert = R"sql(
    INSERT INTO sqlq_messages (id, queue_id, priority, npriority, ready_us,
      attempts, enqueued_us, last_error, payload, headers, errors, grp)
    VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?))sql";
  std::int64_t moved = 0;
  auto move = [&](const Rows& rows) -> Status {
    std::vector<std::int64_t> page;
    for (int i = 0; i < rows.size(); ++i) {
      const std::int64_t priority = rows.Int(i, 1);
      const std::string error = rows.Bytes(i, 3);
      const std::string payload = rows.Bytes(i, 4);
      // Bytes keeps a view: the group is kept here until the insert ran.
      const std::string group = rows.IsNull(i, 7) ? "" : rows.Bytes(i, 7);
      Params p;
      p.Int(rows.Int(i, 0))
          .Int(to)
          .Int(priority)
          .Int(-priority)
          .Int(now)
          .Int(rows.Int(i, 2));
      if (rows.IsNull(i, 3)) {
        p.Null();
      } else {
        p.Bytes(error);
      }
      p.Bytes(payload);
      for (int col : {5, 6}) {
        if (rows.IsNull(i, col)) {
          p.Null();
        } else {
          p.Text(rows.Bytes(i, col));
        }
      }
      if (rows.IsNull(i, 7)) {
        p.Null();
      } else {
        p.Bytes(group);
      }
      auto ins = conn.Run(kInsert, p, "redrive");
      if (!ins.ok()) return ins.status();
      page.push_back(rows.Int(i, 0));
    }
    if (page.empty()) return Status::Ok();
    const std::string del = fmt::format(
        "DELETE FROM sqlq_dead WHERE id IN ({})", Marks(Bucket(page.size())));
    Params dp;
    AddIds(dp, page);
    auto d = conn.Run(del, dp, "redrive");
    if (!d.ok()) return d.status();
    moved += static_cast<std::int64_t>(page.size());
    return Status::Ok();
  };
  if (ids.empty()) {
    std::int64_t after = 0;
    for (;;) {
      auto rows =
          conn.Run(kAllPage, Params().Int(queue_id).Int(after), "redrive");
      if (!rows.ok()) return rows.status();
      if (rows->size() == 0) break;
      after = rows->Int(rows->size() - 1, 0);
      Status s = move(*rows);
      if (!s.ok()) return s;
      if (static_cast<std::size_t>(rows->size()) < kPage) break;
    }
    return moved;
  }
  for (std::size_t at = 0; at < ids.size(); at += kPage) {
    std::vector<std::int64_t> some(
        ids.begin() + static_cast<std::ptrdiff_t>(at),
        ids.begin() +
            static_cast<std::ptrdiff_t>(std::min(ids.size(), at + kPage)));
    const std::string sql = fmt::format(
        "SELECT id, priority, enqueued_us, last_error, payload, headers, "
        "errors, grp FROM sqlq_dead WHERE queue_id = ? AND id IN ({}) ORDER "
        "BY id FOR UPDATE",
        Marks(Bucket(some.size())));
    Params p;
    p.Int(queue_id);
    AddIds(p, some);
    auto rows = conn.Run(sql, p, "redrive");
    if (!rows.ok()) return rows.status();
    Status s = move(*rows);
    if (!s.ok()) return s;
  }
  return moved;
}

}  // namespace sqlq::engines::mysql
