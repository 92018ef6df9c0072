// SqlEngine (sql_engine.h): topics and their subscriptions (core/topic.cc
// decides what a publish sends; each subscriber's messages go through the
// engine's own Send). Included only where an engine instantiates
// SqlEngine<D>.
//
// A topic is a row of sqlq_queues of kind 'topic', so that its name is in
// the one namespace of queues, rings and rotations; a subscription is a row
// of sqlq_subscriptions (topic_id, queue_id, header_filter, subscribed_us),
// which goes with its topic or its queue: by ON DELETE CASCADE on the
// server engines, by DropTopic and DropSubscriptionsOf on SQLite.
//
// Locking: a subscribe, an unsubscribe and a publish take the share lock on
// the topic's row first (CheckKind), and a subscribe the queue's next, so
// that a drop of either waits for them; a publish then takes each
// subscriber's lock in its Send.

#ifndef SQLQ_ENGINES_SHARED_SQL_TOPICS_H_
#define SQLQ_ENGINES_SHARED_SQL_TOPICS_H_

#include <algorithm>
#include <string>
#include <type_traits>

#include "core/errors.h"
#include "core/rows.h"
#include "engines/shared/sql_engine.h"

namespace sqlq::engines::shared {

template <class D>
Result<std::int64_t> SqlEngine<D>::CreateTopic(core::Conn& c,
                                               std::string_view name) {
  return InsertKind(Native(c), name, "topic", 0, 0, 0);
}

template <class D>
Result<std::int64_t> SqlEngine<D>::GetTopic(core::Conn& c,
                                            std::string_view name) {
  auto rows = FindKind(Native(c), name, "topic");
  if (!rows.ok()) return rows.status();
  return rows->Int(0, 0);
}

template <class D>
Result<std::vector<core::TopicRecord>> SqlEngine<D>::ListTopics(core::Conn& c) {
  static const std::string kSql = D::Statement(R"sql(
    SELECT q.id, q.name, q.created_us,
      (SELECT COUNT(*) FROM sqlq_subscriptions s WHERE s.topic_id = q.id)
    FROM sqlq_queues q WHERE q.kind = 'topic' ORDER BY q.name)sql");
  auto rows = Native(c).Run(kSql, Params(), "list topics");
  if (!rows.ok()) return rows.status();
  return core::DecodeAll(*rows, [](const auto& r) {
    return core::TopicRecord{.id = r.Int(0),
                             .name = r.Bytes(1),
                             .created_us = r.Int(2),
                             .subscriptions = r.Int(3)};
  });
}

template <class D>
Status SqlEngine<D>::DropTopic(core::Conn& c, std::int64_t topic_id) {
  // Its subscriptions go with the topic's row.
  static const std::string kSubs =
      D::Statement("DELETE FROM sqlq_subscriptions WHERE topic_id = ?");
  static const std::string kSql =
      D::Statement("DELETE FROM sqlq_queues WHERE id = ? AND kind = 'topic'");
  return DropKindRow(Native(c), topic_id, kSql, {&kSubs}, "drop topic");
}

template <class D>
Result<bool> SqlEngine<D>::Subscribe(core::Conn& c,
                                     const core::SubscribeParams& p) {
  DConn& conn = Native(c);
  Status s = CheckKind(conn, p.topic_id, "topic");
  if (s.ok()) s = CheckQueue(conn, p.queue_id);
  if (!s.ok()) return s;
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  static const std::string kFind =
      D::Statement(std::string("SELECT 1 FROM sqlq_subscriptions "
                               "WHERE topic_id = ? AND queue_id = ?") +
                   D::kForUpdate);
  auto found = conn.Run(kFind, Params().Int(p.topic_id).Int(p.queue_id),
                        "look up subscription");
  if (!found.ok()) return found.status();
  if (found->size() > 0) {
    static const std::string kUpdate = D::Statement(R"sql(
      UPDATE sqlq_subscriptions SET header_filter = ?
      WHERE topic_id = ? AND queue_id = ?)sql");
    auto rows = conn.Run(
        kUpdate, Params().TextOrNull(p.filter).Int(p.topic_id).Int(p.queue_id),
        "change subscription");
    if (!rows.ok()) return rows.status();
    return false;
  }
  static const std::string kInsert = D::Statement(R"sql(
    INSERT INTO sqlq_subscriptions (topic_id, queue_id, header_filter,
      subscribed_us)
    VALUES (?, ?, ?, ?))sql");
  auto rows = conn.Run(
      kInsert,
      Params().Int(p.topic_id).Int(p.queue_id).TextOrNull(p.filter).Int(*now),
      "subscribe");
  if (!rows.ok()) return rows.status();
  return true;
}

template <class D>
Result<bool> SqlEngine<D>::Unsubscribe(core::Conn& c, std::int64_t topic_id,
                                       std::int64_t queue_id) {
  DConn& conn = Native(c);
  Status s = CheckKind(conn, topic_id, "topic");
  if (!s.ok()) return s;
  static const std::string kSql = D::Statement(
      "DELETE FROM sqlq_subscriptions WHERE topic_id = ? AND queue_id = ?");
  auto rows =
      conn.Run(kSql, Params().Int(topic_id).Int(queue_id), "unsubscribe");
  if (!rows.ok()) return rows.status();
  return rows->affected() > 0;
}

template <class D>
Result<std::vector<core::SubscriberRecord>> SqlEngine<D>::ListSubscribers(
    core::Conn& c, std::int64_t topic_id) {
  DConn& conn = Native(c);
  Status s = CheckKind(conn, topic_id, "topic");
  if (!s.ok()) return s;
  static const std::string kSql = D::Statement(
      std::string("SELECT header_filter, subscribed_us, ") +
      core::kQueueColumns +
      " FROM sqlq_subscriptions "
      "JOIN sqlq_queues ON sqlq_queues.id = sqlq_subscriptions.queue_id "
      "WHERE sqlq_subscriptions.topic_id = ? ORDER BY name");
  auto rows = conn.Run(kSql, Params().Int(topic_id), "list subscriptions");
  if (!rows.ok()) return rows.status();
  return core::DecodeAll(*rows, [](const auto& r) {
    return core::SubscriberRecord{
        .queue = core::DecodeQueue(
            core::ShiftedRow<std::decay_t<decltype(r)>>{r, 2}),
        .filter = r.IsNull(0) ? std::string() : r.Bytes(0),
        .subscribed_us = r.Int(1)};
  });
}

template <class D>
Result<std::vector<core::SubscriberRecord>> SqlEngine<D>::LockSubscribers(
    core::Conn& c, std::string_view name) {
  DConn& conn = Native(c);
  // The topic's row, joined to its subscriptions and their queues: a topic
  // without any gives one row of NULLs after its id. D::kLockTopic locks
  // the topic's row as CheckKind would.
  static const std::string kSql =
      D::Statement("SELECT t.id, s.header_filter, s.subscribed_us, " +
                   core::QualifiedColumns("q", core::kQueueColumns) +
                   " FROM sqlq_queues t"
                   " LEFT JOIN sqlq_subscriptions s ON s.topic_id = t.id"
                   " LEFT JOIN sqlq_queues q ON q.id = s.queue_id"
                   " WHERE t.name = ? AND t.kind = 'topic'" +
                   D::kLockTopic);
  auto rows = conn.Run(kSql, Params().Text(name), "look up topic");
  if (!rows.ok()) return rows.status();
  if (rows->size() == 0) return Missing(conn, name, "topic");
  if (!conn.read_only) conn.known_queues.insert(rows->Int(0, 0));
  std::vector<core::SubscriberRecord> out;
  out.reserve(static_cast<std::size_t>(rows->size()));
  for (int i = 0; i < rows->size(); ++i) {
    if (rows->IsNull(i, 2)) continue;  // no subscription
    const core::RowAt<Rows> r{*rows, i};
    out.push_back(
        {.queue = core::DecodeQueue(core::ShiftedRow<core::RowAt<Rows>>{r, 3}),
         .filter = r.IsNull(1) ? std::string() : r.Bytes(1),
         .subscribed_us = r.Int(2)});
  }
  // By name, sorted here: an ORDER BY made MariaDB sort the joined rows
  // in a temporary table, four times the statement's time.
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.queue.info.name < b.queue.info.name;
  });
  return out;
}

template <class D>
Status SqlEngine<D>::DropSubscriptionsOf(core::Conn& c, std::int64_t queue_id) {
  if constexpr (D::kCascades) {
    (void)c;
    (void)queue_id;
    return Status::Ok();
  } else {
    static const std::string kSql =
        D::Statement("DELETE FROM sqlq_subscriptions WHERE queue_id = ?");
    auto rows = Native(c).Run(kSql, Params().Int(queue_id), "drop queue");
    return rows.ok() ? Status::Ok() : rows.status();
  }
}

}  // namespace sqlq::engines::shared

#endif  // SQLQ_ENGINES_SHARED_SQL_TOPICS_H_
