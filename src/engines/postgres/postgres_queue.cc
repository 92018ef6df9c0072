// PostgreSQL engine: queues and names, sends, stats, dead letters and the
// archive.

#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <utility>

#include "engines/postgres/postgres_engine_impl.h"

namespace sqlq::engines::postgres {
namespace {

// The columns of messages to insert, an array each for unnest: priority,
// delay, dedup key, payload, headers, not-before and group, bound in that
// order by AppendTo.
struct MessageArrays {
  std::vector<std::int64_t> priority, delay, not_before;
  std::vector<std::optional<std::string_view>> dedup, payload, headers, grp;
  // The headers' text, which `headers` points into (a deque does not move
  // what it holds as it grows).
  std::deque<std::string> encoded;

  void Add(const Message& m, bool grouped) {
    priority.push_back(m.priority);
    delay.push_back(Us(m.delay));
    dedup.push_back(m.dedup_key.empty()
                        ? std::nullopt
                        : std::optional<std::string_view>(m.dedup_key));
    payload.push_back(std::string_view(m.payload));
    encoded.push_back(core::EncodeMessageHeaders(m));
    headers.push_back(encoded.back().empty()
                          ? std::nullopt
                          : std::optional<std::string_view>(encoded.back()));
    not_before.push_back(core::NotBeforeUs(m));
    grp.push_back(core::GroupOf(m, grouped));
  }
  void AppendTo(Params& params) const {
    params.IntArray(priority)
        .IntArray(delay)
        .BytesArray(dedup)
        .BytesArray(payload)
        .BytesArray(headers)
        .IntArray(not_before)
        .BytesArray(grp);
  }
};

// The statement's parts both sends' INSERTs share: the clock ($2, or the
// database's), and the INSERT of one row per element of MessageArrays's
// arrays (m) into queue q.
constexpr const char* kClockCte = R"sql(
    t AS (SELECT coalesce($2::bigint,
            (extract(epoch FROM now()) * 1000000)::bigint) AS now_us))sql";
constexpr const char* kInsertRows = R"sql(
    INSERT INTO sqlq_messages
      (queue_id, priority, ready_us, enqueued_us, dedup, payload, headers,
       grp)
    SELECT q.id, m.priority::integer,
           greatest(t.now_us + m.delay_us, m.not_before), t.now_us, m.dedup,
           m.payload, convert_from(m.headers, 'UTF8')::jsonb, m.grp)sql";

}  // namespace

Status PostgresEngine::DropQueue(Conn& c, std::int64_t queue_id) {
  // Dead letters, archive and counters go by ON DELETE CASCADE; messages
  // have no foreign key (schema.h, version 3) and are deleted here, after
  // the queue row. Deleting that row waits for the transactions that hold
  // its FOR KEY SHARE lock, which every statement inserting messages takes
  // first; the second DELETE, a new statement in READ COMMITTED, then sees
  // what they inserted. Transactions that come later find no queue row and
  // insert nothing.
  static constexpr const char* kSql = "DELETE FROM sqlq_queues WHERE id = $1";
  static constexpr const char* kMessages =
      "DELETE FROM sqlq_messages WHERE queue_id = $1";
  auto rows = Native(c).Run(kSql, Params().Int(queue_id), "drop queue");
  if (!rows.ok()) return rows.status();
  if (rows->affected() == 0) return core::QueueGone(queue_id);
  auto messages =
      Native(c).Run(kMessages, Params().Int(queue_id), "drop queue's messages");
  if (!messages.ok()) return messages.status();
  // Claims waiting on the queue in other processes look again and end
  // with kNotFound, instead of at their next poll.
  Native(c).notify = true;
  return Status::Ok();
}

Result<std::vector<SendResult>> PostgresEngine::Send(
    Conn& c, const core::SendParams& p) {
  PgConn& conn = Native(c);
  // The clock: the store's own, or the one this transaction read already;
  // else the insert reads the database's itself (now(), the transaction's
  // start, as NowUs would) and returns it, which saves a round trip.
  std::optional<std::int64_t> now =
      clock_ ? std::optional<std::int64_t>(Us(clock_->Now())) : conn.tx_now_us;
  // The insert itself takes the queue row's FOR KEY SHARE lock (CheckQueue
  // says why), in its first CTE, saving a round trip: a queue that is gone
  // inserts nothing, which is then told apart from a held dedup key by
  // CheckQueue, so a send to a dropped queue stays a clean failure.
  static constexpr const char* kInsert = R"sql(
    WITH q AS (SELECT id FROM sqlq_queues WHERE id = $1 FOR KEY SHARE),
    t AS (SELECT coalesce($4::bigint,
            (extract(epoch FROM now()) * 1000000)::bigint) AS now_us)
    INSERT INTO sqlq_messages
      (queue_id, priority, ready_us, enqueued_us, dedup, payload, headers,
       grp)
    SELECT q.id, $2::integer, greatest(t.now_us + $3::bigint, $8::bigint),
           t.now_us, $5::bytea, $6::bytea, $7::jsonb, $9::bytea
    FROM q, t
    ON CONFLICT (queue_id, dedup) WHERE dedup IS NOT NULL DO NOTHING
    RETURNING id, enqueued_us)sql";
  static constexpr const char* kExisting = R"sql(
    SELECT id FROM sqlq_messages WHERE queue_id = $1 AND dedup = $2)sql";
  auto params_of = [&](const Message& m) {
    Params params;
    params.Int(p.queue_id).Int(m.priority).Int(Us(m.delay));
    if (now) {
      params.Int(*now);
    } else {
      params.Null();
    }
    if (m.dedup_key.empty()) {
      params.Null();
    } else {
      params.Bytes(m.dedup_key);
    }
    params.Bytes(m.payload)
        .TextOrNull(core::EncodeMessageHeaders(m))
        .Int(core::NotBeforeUs(m));
    if (auto g = core::GroupOf(m, p.grouped)) {
      params.Bytes(*g);
    } else {
      params.Null();
    }
    return params;
  };
  auto learn_now = [&](const Rows& rows, int col) {
    if (now || rows.size() == 0) return;
    now = rows.Int(0, col);
    conn.tx_now_us = now;
  };
  std::vector<SendResult> out(p.messages.size());
  std::int64_t stored = 0;
  // Messages whose dedup key a message already in the queue holds.
  std::vector<std::size_t> held;
  if (p.messages.size() == 1) {
    auto inserted = conn.Run(kInsert, params_of(p.messages[0]), "send");
    if (!inserted.ok()) return inserted.status();
    learn_now(*inserted, 1);
    if (inserted->size() == 1) {
      out[0] = {.id = inserted->Int(0, 0)};
      ++stored;
      conn.known_queues.insert(p.queue_id);
    } else {
      Status checked = CheckQueue(conn, p.queue_id);
      if (!checked.ok()) return checked;
      held.push_back(0);
    }
  } else {
    auto n = InsertBatch(conn, p, now, out, held);
    if (!n.ok()) return n.status();
    stored += *n;
  }
  if (!held.empty() && !now) {
    auto n = NowUs(conn);
    if (!n.ok()) return n.status();
    now = *n;
  }
  for (std::size_t i : held) {
    const Message& m = p.messages[i];
    // The dedup key is held by a message in the queue. Its holder may be
    // acked between our insert and this look-up; then insert again.
    for (int attempt = 0;; ++attempt) {
      auto existing =
          conn.Run(kExisting, Params().Int(p.queue_id).Bytes(m.dedup_key),
                   "send (dedup)");
      if (!existing.ok()) return existing.status();
      if (existing->size() == 1) {
        out[i] = {.id = existing->Int(0, 0), .duplicate = true};
        break;
      }
      if (attempt == 3) {
        return Status::Busy(
            "send: the dedup key's message kept changing; try again");
      }
      auto again = conn.Run(kInsert, params_of(m), "send");
      if (!again.ok()) return again.status();
      if (again->size() == 1) {
        out[i] = {.id = again->Int(0, 0)};
        ++stored;
        break;
      }
    }
  }
  Status held_keys = ApplyHolds(conn, p, out, stored);
  if (!held_keys.ok()) return held_keys;
  if (stored > 0) {
    conn.notify = true;
    Duration least = p.messages[0].delay;
    for (const Message& m : p.messages) least = std::min(least, m.delay);
    conn.MadeReady(p.queue_id, *now + Us(least));
    Status s = AddCounters(conn, p.queue_id, {.sends = stored});
    if (!s.ok()) return s;
  }
  return out;
}

Result<std::vector<core::MessageOps::SentTo>> PostgresEngine::SendEach(
    Conn& c, std::span<const core::SendParams> sends) {
  // The plain case in one statement: messages without dedup keys, queues
  // without dedup windows, each queue once, within a statement's size.
  std::size_t bytes = 0;
  std::unordered_set<std::int64_t> queues;
  bool plain = sends.size() > 1;
  for (const core::SendParams& p : sends) {
    plain =
        plain && p.unique_for.count() == 0 && queues.insert(p.queue_id).second;
    for (const Message& m : p.messages) {
      plain = plain && m.dedup_key.empty();
      bytes += m.payload.size();
    }
  }
  if (!plain || bytes > kStatementBytes) {
    return MessageOps::SendEach(c, sends);
  }
  PgConn& conn = Native(c);
  std::optional<std::int64_t> now =
      clock_ ? std::optional<std::int64_t>(Us(clock_->Now())) : conn.tx_now_us;
  // Each queue's row is share-locked as Send's insert does (CheckQueue says
  // why), in id order; the messages of a queue that is gone are not
  // inserted. Rows come out in message order, so each queue's ids, in
  // order, are its messages'.
  static const std::string kInsertEach = std::string(R"sql(
    WITH q AS (SELECT id FROM sqlq_queues WHERE id = ANY($1::bigint[])
               ORDER BY id FOR KEY SHARE),)sql") +
                                         kClockCte + kInsertRows + R"sql(
    FROM unnest($3::bigint[], $4::bigint[], $5::bigint[], $6::bytea[],
                $7::bytea[], $8::bytea[], $9::bigint[], $10::bytea[])
      WITH ORDINALITY AS m(queue_id, priority, delay_us, dedup, payload,
                           headers, not_before, grp, ord)
      JOIN q ON q.id = m.queue_id, t
    ORDER BY m.ord
    RETURNING id, queue_id, enqueued_us)sql";
  std::vector<std::int64_t> ids, queue_of;
  MessageArrays arrays;
  for (const core::SendParams& p : sends) {
    ids.push_back(p.queue_id);
    for (const Message& m : p.messages) {
      queue_of.push_back(p.queue_id);
      arrays.Add(m, p.grouped);
    }
  }
  Params params;
  params.IntArray(ids);
  if (now) {
    params.Int(*now);
  } else {
    params.Null();
  }
  params.IntArray(queue_of);
  arrays.AppendTo(params);
  auto rows = conn.Run(kInsertEach, params, "send");
  if (!rows.ok()) return rows.status();
  if (!now && rows->size() > 0) {
    now = rows->Int(0, 2);
    conn.tx_now_us = now;
  }
  std::unordered_map<std::int64_t, std::vector<std::int64_t>> stored;
  for (int r = 0; r < rows->size(); ++r) {
    stored[rows->Int(r, 1)].push_back(rows->Int(r, 0));
  }
  std::vector<SentTo> out;
  out.reserve(sends.size());
  for (const core::SendParams& p : sends) {
    auto it = stored.find(p.queue_id);
    if (it == stored.end()) {
      // Nothing stored: the queue is gone (or was sent nothing).
      if (p.messages.empty()) {
        out.emplace_back(std::vector<SendResult>());
      } else {
        out.emplace_back();
      }
      continue;
    }
    std::vector<std::int64_t>& got = it->second;
    if (got.size() != p.messages.size()) {
      return Status::Internal(
          fmt::format("send: queue {} stored {} of {} messages", p.queue_id,
                      got.size(), p.messages.size()));
    }
    std::sort(got.begin(), got.end());
    std::vector<SendResult> sent;
    sent.reserve(got.size());
    for (std::int64_t id : got) sent.push_back({.id = id});
    conn.known_queues.insert(p.queue_id);
    Duration least = p.messages[0].delay;
    for (const Message& m : p.messages) least = std::min(least, m.delay);
    conn.MadeReady(p.queue_id, *now + Us(least));
    Status s =
        AddCounters(conn, p.queue_id,
                    {.sends = static_cast<std::int64_t>(p.messages.size())});
    if (!s.ok()) return s;
    out.emplace_back(std::move(sent));
  }
  if (rows->size() > 0) conn.notify = true;
  return out;
}

Result<std::int64_t> PostgresEngine::MoveDeadLetters(
    PgConn& conn, const core::RedriveParams& op, std::int64_t to,
    std::int64_t now) {
  const auto& [queue_id, ids, to_queue_id] = op;
  // A redriven message is ready now with fresh attempts, in queue $3; it
  // keeps its id (never reused, see schema.h) but not a dedup key.
  static constexpr const char* kAll = R"sql(
    WITH d AS (
      DELETE FROM sqlq_dead WHERE queue_id = $1
      RETURNING id, priority, enqueued_us, last_error, payload, headers,
                errors, grp)
    INSERT INTO sqlq_messages (id, queue_id, priority, ready_us, attempts,
      enqueued_us, last_error, payload, headers, errors, grp)
    SELECT id, $3, priority, $2, 0, enqueued_us, last_error, payload,
           headers, errors, grp
    FROM d)sql";
  static constexpr const char* kSome = R"sql(
    WITH d AS (
      DELETE FROM sqlq_dead WHERE queue_id = $1 AND id = ANY($4::bigint[])
      RETURNING id, priority, enqueued_us, last_error, payload, headers,
                errors, grp)
    INSERT INTO sqlq_messages (id, queue_id, priority, ready_us, attempts,
      enqueued_us, last_error, payload, headers, errors, grp)
    SELECT id, $3, priority, $2, 0, enqueued_us, last_error, payload,
           headers, errors, grp
    FROM d)sql";
  Params params;
  params.Int(queue_id).Int(now).Int(to);
  if (!ids.empty()) {
    std::string array = "{";
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (i > 0) array += ',';
      array += std::to_string(ids[i]);
    }
    array += '}';
    params.Text(array);
  }
  auto rows = conn.Run(ids.empty() ? kAll : kSome, params, "redrive");
  if (!rows.ok()) return rows.status();
  if (rows->affected() > 0) {
    conn.notify = true;
    conn.MadeReady(to, now);
  }
  return rows->affected();
}

bool PostgresEngine::OneStatementSend(const core::SendParams& p) const {
  if (clock_ || p.grouped) return false;
  std::size_t bytes = 0;
  for (const Message& m : p.messages) {
    // Keys and groups take the general path (Send).
    if (!m.dedup_key.empty() || !m.group.empty()) return false;
    bytes += m.payload.size();
  }
  return bytes <= kStatementBytes;
}

void PostgresEngine::StageSend(PgConn& conn, const core::SendParams& p,
                               std::vector<SendResult>& out,
                               std::optional<Status>& failed) {
  static constexpr const char* kSendCounted = R"sql(
    WITH q AS (SELECT id FROM sqlq_queues WHERE id = $1 FOR KEY SHARE),
    t AS (SELECT (extract(epoch FROM now()) * 1000000)::bigint AS now_us),
    ins AS (
      INSERT INTO sqlq_messages
        (queue_id, priority, ready_us, enqueued_us, payload, headers)
      SELECT q.id, m.priority::integer,
             greatest(t.now_us + m.delay_us, m.not_before), t.now_us,
             m.payload, convert_from(m.headers, 'UTF8')::jsonb
      FROM q, t, unnest($2::bigint[], $3::bigint[], $4::bytea[],
                        $5::bytea[], $6::bigint[])
        WITH ORDINALITY AS m(priority, delay_us, payload, headers, not_before,
                             ord)
      ORDER BY m.ord
      RETURNING id, enqueued_us),
    k AS (
      INSERT INTO sqlq_counter_deltas (queue_id, sends)
      SELECT $1, count(*) FROM ins HAVING count(*) > 0)
    SELECT id, enqueued_us FROM ins)sql";
  std::vector<std::int64_t> priority, delay, not_before;
  std::vector<std::optional<std::string_view>> payload, headers;
  std::vector<std::string> encoded;
  encoded.reserve(p.messages.size());
  Duration least = p.messages[0].delay;
  for (const Message& m : p.messages) {
    priority.push_back(m.priority);
    delay.push_back(Us(m.delay));
    payload.push_back(std::string_view(m.payload));
    not_before.push_back(core::NotBeforeUs(m));
    encoded.push_back(core::EncodeMessageHeaders(m));
    headers.push_back(encoded.back().empty()
                          ? std::nullopt
                          : std::optional<std::string_view>(encoded.back()));
    least = std::min(least, m.delay);
  }
  Params params;
  params.Int(p.queue_id)
      .IntArray(priority)
      .IntArray(delay)
      .BytesArray(payload)
      .BytesArray(headers)
      .IntArray(not_before);
  const std::int64_t queue_id = p.queue_id;
  const std::size_t n = p.messages.size();
  conn.StageForCommit(
      kSendCounted, std::move(params), "send",
      [&conn, &out, &failed, queue_id, n, least](const Rows& rows) {
        if (rows.size() == 0) {
          // The queue was gone: nothing was inserted or counted.
          failed = core::QueueGone(queue_id);
          return;
        }
        if (static_cast<std::size_t>(rows.size()) != n) {
          failed = Status::Internal("send: fewer rows stored than sent");
          return;
        }
        // Ids follow the batch order (ORDER BY m.ord).
        std::vector<std::int64_t> ids;
        for (int r = 0; r < rows.size(); ++r) ids.push_back(rows.Int(r, 0));
        std::sort(ids.begin(), ids.end());
        out.clear();
        for (std::int64_t id : ids) out.push_back({.id = id});
        conn.notify = true;
        ++conn.counted;
        conn.MadeReady(queue_id, rows.Int(0, 1) + Us(least));
      });
}

Result<std::vector<SendResult>> PostgresEngine::SendAndCommit(
    const core::SendParams& to, const MessagesFn& messages) {
  core::SendParams p = to;
  p.messages = messages();
  if (!OneStatementSend(p)) return core::Engine::SendAndCommit(to, messages);
  std::vector<SendResult> out;
  std::optional<Status> failed;
  Status s = Write([&](Conn& c) -> Status {
    StageSend(Native(c), p, out, failed);
    return Status::Ok();
  });
  if (!s.ok()) return s;
  if (failed) return *failed;
  return out;
}

Result<std::optional<std::vector<core::Published>>>
PostgresEngine::PublishAndCommit(std::string_view topic,
                                 std::span<const Message> messages) {
  using Out = std::optional<std::vector<core::Published>>;
  std::size_t bytes = 0;
  for (const Message& m : messages) {
    bytes += m.payload.size();
    if (!m.dedup_key.empty() || !m.group.empty() || !m.depends_on.empty() ||
        !m.depends_on_batch.empty()) {
      return Out();
    }
  }
  if (clock_ || bytes > kStatementBytes) return Out();
  // Rows: (0, topics found, pairs for the general way) once; (1, queue,
  // message's place from 1, queue's name) for each delivery; (2, queue,
  // id, enqueued_us) for each row stored, in the order of the deliveries.
  static constexpr const char* kPublish = R"sql(
    WITH tp AS (SELECT id FROM sqlq_queues
                WHERE name = $1 AND kind = 'topic' FOR KEY SHARE),
    s AS (SELECT q.id, q.name, q.max_payload, q.unique_for_us, q.group_mode,
                 coalesce(nullif(sub.header_filter, '')::jsonb,
                          '{}'::jsonb) AS filter
          FROM tp JOIN sqlq_subscriptions sub ON sub.topic_id = tp.id
            JOIN sqlq_queues q ON q.id = sub.queue_id
          FOR KEY SHARE OF q),
    t AS (SELECT (extract(epoch FROM now()) * 1000000)::bigint AS now_us),
    m AS (SELECT * FROM unnest($2::bigint[], $3::bigint[], $4::bytea[],
                               $5::bytea[], $6::bigint[])
            WITH ORDINALITY AS m(priority, delay_us, payload, headers,
                                 not_before, ord)),
    d AS (SELECT s.id AS queue_id, s.name, s.max_payload, s.unique_for_us,
                 s.group_mode, m.*
          FROM s JOIN m ON coalesce(convert_from(m.headers, 'UTF8')::jsonb,
                                    '{}'::jsonb) @> s.filter),
    chk AS (SELECT (SELECT count(*) FROM tp) AS topics,
                   count(*) FILTER (WHERE octet_length(d.payload) >
                                      d.max_payload OR d.unique_for_us > 0
                                    OR d.group_mode <> 0) AS general
            FROM d),
    ins AS (
      INSERT INTO sqlq_messages
        (queue_id, priority, ready_us, enqueued_us, payload, headers)
      SELECT d.queue_id, d.priority::integer,
             greatest(t.now_us + d.delay_us, d.not_before), t.now_us,
             d.payload, convert_from(d.headers, 'UTF8')::jsonb
      FROM d, t, chk WHERE chk.topics = 1 AND chk.general = 0
      ORDER BY d.name, d.ord
      RETURNING id, queue_id, enqueued_us),
    k AS (
      INSERT INTO sqlq_counter_deltas (queue_id, sends)
      SELECT queue_id, count(*) FROM ins GROUP BY queue_id)
    SELECT 0, topics, general, NULL::text FROM chk
    UNION ALL SELECT 1, queue_id, ord, name FROM d
    UNION ALL SELECT 2, queue_id, id, enqueued_us::text FROM ins)sql";
  MessageArrays arrays;
  for (const Message& m : messages) arrays.Add(m, false);
  Out out;
  std::optional<Status> failed;
  Status s = Write([&](Conn& c) -> Status {
    PgConn& conn = Native(c);
    Params params;
    params.Text(topic)
        .IntArray(arrays.priority)
        .IntArray(arrays.delay)
        .BytesArray(arrays.payload)
        .BytesArray(arrays.headers)
        .IntArray(arrays.not_before);
    conn.StageForCommit(
        kPublish, std::move(params), "publish", [&](const Rows& rows) {
          out.reset();
          struct Queue {
            std::string name;
            std::vector<std::int64_t> places, ids;
            std::int64_t now_us = 0;
          };
          std::map<std::int64_t, Queue> queues;
          bool fast = false;
          for (int r = 0; r < rows.size(); ++r) {
            const std::int64_t kind = rows.Int(r, 0);
            if (kind == 0) {
              fast = rows.Int(r, 1) == 1 && rows.Int(r, 2) == 0;
            } else if (kind == 1) {
              Queue& q = queues[rows.Int(r, 1)];
              q.name = rows.Bytes(r, 3);
              q.places.push_back(rows.Int(r, 2) - 1);
            } else {
              Queue& q = queues[rows.Int(r, 1)];
              q.ids.push_back(rows.Int(r, 2));
              q.now_us = std::stoll(rows.Bytes(r, 3));
            }
          }
          if (!fast) return;  // nothing stored: the general way
          std::vector<std::pair<std::string, std::int64_t>> order;
          for (auto& [id, q] : queues) {
            if (q.ids.size() != q.places.size()) {
              failed = Status::Internal(
                  "publish: fewer rows stored than "
                  "matched");
              return;
            }
            std::sort(q.places.begin(), q.places.end());
            std::sort(q.ids.begin(), q.ids.end());
            order.emplace_back(q.name, id);
          }
          std::sort(order.begin(), order.end());
          std::vector<core::Published> got;
          for (const auto& [name, id] : order) {
            const Queue& q = queues[id];
            Duration least = Duration::max();
            for (std::size_t i = 0; i < q.ids.size(); ++i) {
              const std::size_t at = static_cast<std::size_t>(q.places[i]);
              got.push_back({.delivery = {.queue = q.name,
                                          .message = at,
                                          .sent = {.id = q.ids[i]}},
                             .queue_id = id});
              least = std::min(least, messages[at].delay);
            }
            conn.MadeReady(id, q.now_us + Us(least));
            ++conn.counted;
          }
          if (!got.empty()) conn.notify = true;
          out = std::move(got);
        });
    return Status::Ok();
  });
  if (!s.ok()) return s;
  if (failed) return *failed;
  return out;
}

Result<std::int64_t> PostgresEngine::InsertBatch(
    PgConn& conn, const core::SendParams& p, std::optional<std::int64_t>& now,
    std::vector<SendResult>& out, std::vector<std::size_t>& held) {
  static const std::string kInsertMany = std::string(R"sql(
    WITH q AS (SELECT id FROM sqlq_queues WHERE id = $1 FOR KEY SHARE),)sql") +
                                         kClockCte + kInsertRows + R"sql(
    FROM q, t,
      unnest($3::bigint[], $4::bigint[], $5::bytea[], $6::bytea[],
             $7::bytea[], $8::bigint[], $9::bytea[])
      WITH ORDINALITY AS m(priority, delay_us, dedup, payload, headers,
                           not_before, grp, ord)
    ORDER BY m.ord
    ON CONFLICT (queue_id, dedup) WHERE dedup IS NOT NULL DO NOTHING
    RETURNING id, dedup, enqueued_us)sql";
  constexpr std::size_t kChunkBytes = kStatementBytes;
  std::int64_t stored = 0;
  // Dedup key -> index of its first message in the batch.
  std::unordered_map<std::string_view, std::size_t> first;
  std::size_t begin = 0;
  while (begin < p.messages.size()) {
    std::size_t end = begin, bytes = 0;
    while (end < p.messages.size() &&
           (end == begin ||
            bytes + p.messages[end].payload.size() <= kChunkBytes)) {
      bytes +=
          p.messages[end].payload.size() + p.messages[end].dedup_key.size();
      ++end;
    }
    MessageArrays arrays;
    for (std::size_t i = begin; i < end; ++i) {
      arrays.Add(p.messages[i], p.grouped);
    }
    Params params;
    params.Int(p.queue_id);
    if (now) {
      params.Int(*now);
    } else {
      params.Null();
    }
    arrays.AppendTo(params);
    auto rows = conn.Run(kInsertMany, params, "send");
    if (!rows.ok()) return rows.status();
    if (!now && rows->size() > 0) {
      now = rows->Int(0, 2);
      conn.tx_now_us = now;
    }
    if (rows->size() == 0) {
      // Every key held, or the queue gone.
      Status checked = CheckQueue(conn, p.queue_id);
      if (!checked.ok()) return checked;
    } else {
      conn.known_queues.insert(p.queue_id);
    }
    // Rows without a dedup key are all stored, in batch order: sorted by
    // id they match those messages one to one. Rows with a key are found
    // by it.
    std::vector<std::int64_t> plain;
    std::unordered_map<std::string, std::int64_t> keyed;
    for (int r = 0; r < rows->size(); ++r) {
      if (rows->IsNull(r, 1)) {
        plain.push_back(rows->Int(r, 0));
      } else {
        keyed.emplace(rows->Bytes(r, 1), rows->Int(r, 0));
      }
    }
    std::sort(plain.begin(), plain.end());
    stored += rows->size();
    std::size_t next_plain = 0;
    for (std::size_t i = begin; i < end; ++i) {
      const Message& m = p.messages[i];
      if (m.dedup_key.empty()) {
        if (next_plain == plain.size()) {
          return Status::Internal("send: fewer rows stored than sent");
        }
        out[i] = {.id = plain[next_plain++]};
        continue;
      }
      if (auto k = keyed.find(m.dedup_key); k != keyed.end()) {
        out[i] = {.id = k->second};
        keyed.erase(k);
        first.emplace(m.dedup_key, i);
      } else if (auto f = first.find(m.dedup_key); f != first.end()) {
        // A repeat within the batch: a duplicate of the first, once the
        // first is resolved (it may be held by an older message).
        held.push_back(i);
      } else {
        first.emplace(m.dedup_key, i);
        held.push_back(i);
      }
    }
    begin = end;
  }
  return stored;
}

}  // namespace sqlq::engines::postgres
