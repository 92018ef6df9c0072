// SqlEngine (sql_engine.h): dependencies between messages, the same on
// every engine (core::DependencyOps; the rules are core/dependencies.cc's).
// Included only where an engine instantiates SqlEngine<D>.
//
// A waiting message is an ordinary row of sqlq_messages whose ready_us is
// kWaitingUs, past any claim's horizon, and whose waits counts the
// messages it still waits for; sqlq_deps has a row per message it waits
// for. Releasing one is an update of that row by primary key: waits goes
// down by one, and the one that brings it to zero sets ready_us to now.
// The update reads the row as it is now (it waits for the row lock), so
// two parents acked at once in two transactions release their child once,
// whichever commits last. The cost of an ack is the parent's edges: the
// table is read by its primary key (parent_id first).

#ifndef SQLQ_ENGINES_SHARED_SQL_DEPS_H_
#define SQLQ_ENGINES_SHARED_SQL_DEPS_H_

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/columns.h"
#include "core/errors.h"
#include "engines/shared/sql_engine.h"

namespace sqlq::engines::shared {

namespace deps_sql {

// One less to wait for; ready now at the last one. ready_us is set first:
// MariaDB assigns left to right with the new values, the others with the
// old ones, and both read waits before it changes here.
// kReleaseSome: the same for a list of ids that each lose `n` parents at
// once (an ack of several), which the caller completes ("?, ?) AND waits
// >= n"); its parameters: n, now, n, ids..., n.
inline constexpr const char* kReleaseSome =
    "UPDATE sqlq_messages SET ready_us = CASE WHEN waits = ? THEN ? ELSE "
    "ready_us END, waits = waits - ? WHERE id IN (";
inline constexpr const char* kReleaseOne =
    "UPDATE sqlq_messages SET ready_us = CASE WHEN waits = 1 THEN ? ELSE "
    "ready_us END, waits = waits - 1 WHERE id = ? AND waits > 0";

// How the parent of sqlq_deps row d ended, for one that is no longer in
// its queue: 0 deleted (or acked), 1 dead, 2 dead by a cancel (its last
// error "cancelled", or beginning "cancelled:", as every cancel writes it).
inline constexpr const char* kParentEnd =
    "CASE WHEN EXISTS (SELECT 1 FROM sqlq_dead x WHERE x.id = d.parent_id "
    "AND (x.last_error = 'cancelled' OR x.last_error LIKE 'cancelled:%')) "
    "THEN 2 WHEN EXISTS (SELECT 1 FROM sqlq_dead x WHERE x.id = d.parent_id) "
    "THEN 1 ELSE 0 END";

// Rows of parent_id, child_id, child_queue_id, on_dead, kParentEnd.
template <class Rows>
std::vector<core::EndedDependency> Ended(const Rows& rows) {
  std::vector<core::EndedDependency> out;
  out.reserve(rows.size());
  for (int i = 0; i < rows.size(); ++i) {
    const std::int64_t end = rows.Int(i, 4);
    out.push_back({.parent_id = rows.Int(i, 0),
                   .child_id = rows.Int(i, 1),
                   .child_queue_id = rows.Int(i, 2),
                   .on_dead = static_cast<core::OnDead>(rows.Int(i, 3)),
                   .dead = end != 0,
                   .cancelled = end == 2});
  }
  return out;
}

// Statements over lists of ids are written with one placeholder per id,
// in pieces of at most this many ids (or rows of links), far below every
// engine's limit on placeholders.
inline constexpr std::size_t kPiece = 500;

// "?, ?, ..., ?" for n placeholders.
inline std::string Marks(std::size_t n, const char* one = "?") {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) out += ", ";
    out += one;
  }
  return out;
}

// Runs head + one placeholder per id + tail over `ids`, in pieces of at
// most kPiece ids in order, handing each piece's rows to took(rows) (a
// Status); stops at the first error.
template <class D, class Took>
Status InPieces(typename D::Conn& conn, std::span<const std::int64_t> ids,
                const std::string& head, const std::string& tail,
                const char* what, Took&& took) {
  for (std::size_t at = 0; at < ids.size(); at += kPiece) {
    const std::size_t n = std::min(kPiece, ids.size() - at);
    typename D::Params p;
    for (std::size_t i = 0; i < n; ++i) p.Int(ids[at + i]);
    auto rows = conn.RunOnce(D::Statement(head + Marks(n) + tail), p, what);
    if (!rows.ok()) return rows.status();
    Status s = took(*rows);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace deps_sql

template <class D>
Status SqlEngine<D>::FlagDependents(core::Conn& c,
                                    std::span<const std::int64_t> parents,
                                    std::span<const std::int64_t> queues) {
  DConn& conn = Native(c);
  static const std::string kFlag =
      D::Statement("SELECT dependents FROM sqlq_queues WHERE id = ?");
  // FOR UPDATE conflicts with the share lock of every ack in flight on the
  // queue: the flag's write waits for them to end.
  static const std::string kLock = D::Statement(
      std::string("SELECT dependents FROM sqlq_queues WHERE id = ?") +
      D::kForUpdate);
  static const std::string kSet =
      D::Statement("UPDATE sqlq_queues SET dependents = 1 WHERE id = ?");
  std::set<std::int64_t> all(queues.begin(), queues.end());
  // The parents' queues, live or dead, for the whole list at once.
  for (std::size_t at = 0; at < parents.size(); at += deps_sql::kPiece) {
    const std::size_t n = std::min(deps_sql::kPiece, parents.size() - at);
    Params p;
    for (int pass = 0; pass < 2; ++pass) {
      for (std::size_t i = 0; i < n; ++i) p.Int(parents[at + i]);
    }
    const std::string marks = deps_sql::Marks(n);
    auto rows = conn.RunOnce(
        D::Statement("SELECT DISTINCT queue_id FROM sqlq_messages WHERE id IN "
                     "(" +
                     marks +
                     ") UNION SELECT DISTINCT queue_id FROM sqlq_dead WHERE "
                     "id IN (" +
                     marks + ")"),
        p, "find messages");
    if (!rows.ok()) return rows.status();
    for (int i = 0; i < rows->size(); ++i) all.insert(rows->Int(i, 0));
  }
  for (std::int64_t q : all) {
    auto flag = conn.Run(kFlag, Params().Int(q), "read dependents flag");
    if (!flag.ok()) return flag.status();
    if (flag->size() == 0 || flag->Int(0, 0) != 0) continue;
    auto locked = conn.Run(kLock, Params().Int(q), "lock queue");
    if (!locked.ok()) return locked.status();
    if (locked->size() == 0 || locked->Int(0, 0) != 0) continue;
    auto set = conn.Run(kSet, Params().Int(q), "flag queue");
    if (!set.ok()) return set.status();
  }
  return Status::Ok();
}

template <class D>
Result<std::vector<core::ParentState>> SqlEngine<D>::LockParents(
    core::Conn& c, std::span<const std::int64_t> ids) {
  DConn& conn = Native(c);
  std::vector<std::int64_t> sorted(ids.begin(), ids.end());
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  std::vector<core::ParentState> out;
  std::vector<std::int64_t> missing;
  // The live ones, locked in id order (two sends lock in the same order).
  for (std::size_t at = 0; at < sorted.size(); at += deps_sql::kPiece) {
    const std::size_t n = std::min(deps_sql::kPiece, sorted.size() - at);
    Params p;
    for (std::size_t i = 0; i < n; ++i) p.Int(sorted[at + i]);
    auto rows = conn.RunOnce(
        D::Statement("SELECT id, queue_id FROM sqlq_messages WHERE id IN (" +
                     deps_sql::Marks(n) + ") ORDER BY id" + D::kForUpdate),
        p, "lock dependencies");
    if (!rows.ok()) return rows.status();
    std::size_t k = at;
    for (int r = 0; r < rows->size(); ++r) {
      const std::int64_t id = rows->Int(r, 0);
      for (; k < at + n && sorted[k] < id; ++k) missing.push_back(sorted[k]);
      if (k < at + n && sorted[k] == id) ++k;
      out.push_back({.id = id, .queue_id = rows->Int(r, 1)});
    }
    for (; k < at + n; ++k) missing.push_back(sorted[k]);
  }
  Status s = deps_sql::InPieces<D>(
      conn, missing, "SELECT id, queue_id FROM sqlq_dead WHERE id IN (", ")",
      "find dependencies", [&](const Rows& rows) {
        for (int r = 0; r < rows.size(); ++r) {
          out.push_back(
              {.id = rows.Int(r, 0), .queue_id = rows.Int(r, 1), .dead = true});
        }
        return Status::Ok();
      });
  if (!s.ok()) return s;
  std::sort(out.begin(), out.end(),
            [](const core::ParentState& a, const core::ParentState& b) {
              return a.id < b.id;
            });
  return out;
}

template <class D>
Result<std::map<std::int64_t, std::string>> SqlEngine<D>::QueueNames(
    core::Conn& c, std::span<const std::int64_t> ids) {
  std::map<std::int64_t, std::string> out;
  Status s = deps_sql::InPieces<D>(
      Native(c), ids, "SELECT id, name FROM sqlq_queues WHERE id IN (", ")",
      "look up queues", [&](const Rows& rows) {
        for (int r = 0; r < rows.size(); ++r) {
          out[rows.Int(r, 0)] = rows.Bytes(r, 1);
        }
        return Status::Ok();
      });
  if (!s.ok()) return s;
  return out;
}

template <class D>
Result<std::vector<core::DeadDependent>> SqlEngine<D>::TakeDeadDependents(
    core::Conn& c, std::int64_t queue_id, std::span<const std::int64_t> ids,
    bool unlink) {
  DConn& conn = Native(c);
  // The key as EncodeHeaders writes it (a JSON object's key, quoted); an
  // application's header cannot begin with "sqlq:", and one whose value
  // holds the text has its quotes escaped. The queue id is a number.
  const std::string head =
      std::string("SELECT id, ") + D::kMessageStyle.headers_column +
      " FROM sqlq_dead WHERE queue_id = " + std::to_string(queue_id) + " AND " +
      D::kMessageStyle.headers_column + " LIKE '%\"" +
      std::string(core::kParentsHeader) + "\"%'";
  std::vector<core::DeadDependent> out;
  auto took = [&](const Rows& rows) {
    for (int r = 0; r < rows.size(); ++r) {
      out.push_back({.id = rows.Int(r, 0), .headers = rows.Bytes(r, 1)});
    }
    return Status::Ok();
  };
  Status s = Status::Ok();
  if (ids.empty()) {
    Params none;
    auto rows =
        conn.RunOnce(D::Statement(head + " ORDER BY id" + D::kForUpdate), none,
                     "find dependents");
    if (!rows.ok()) return rows.status();
    s = took(*rows);
  } else {
    s = deps_sql::InPieces<D>(conn, ids, head + " AND id IN (",
                              ") ORDER BY id" + std::string(D::kForUpdate),
                              "find dependents", took);
  }
  if (!s.ok()) return s;
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.id < b.id; });
  if (!unlink || out.empty()) return out;
  std::vector<std::int64_t> found;
  for (const core::DeadDependent& d : out) found.push_back(d.id);
  s = deps_sql::InPieces<D>(
      conn, found, "DELETE FROM sqlq_deps WHERE child_id IN (", ")",
      "unlink dependents", [](const Rows&) { return Status::Ok(); });
  if (!s.ok()) return s;
  return out;
}

template <class D>
Status SqlEngine<D>::WriteLinks(core::Conn& c,
                                std::span<const core::DependencyLink> links,
                                std::span<const core::ChildWaits> children) {
  DConn& conn = Native(c);
  for (std::size_t at = 0; at < links.size(); at += deps_sql::kPiece) {
    const std::size_t n = std::min(deps_sql::kPiece, links.size() - at);
    Params p;
    for (std::size_t i = 0; i < n; ++i) {
      const core::DependencyLink& l = links[at + i];
      p.Int(l.parent_id)
          .Int(l.child_id)
          .Int(l.parent_queue_id)
          .Int(l.child_queue_id)
          .Int(static_cast<int>(l.on_dead))
          .Int(l.parked ? 1 : 0);
    }
    auto rows = conn.RunOnce(
        D::Statement("INSERT INTO sqlq_deps (parent_id, child_id, "
                     "parent_queue_id, child_queue_id, on_dead, parked) "
                     "VALUES " +
                     deps_sql::Marks(n, "(?, ?, ?, ?, ?, ?)")),
        p, "link dependencies");
    if (!rows.ok()) return rows.status();
  }
  // One update per count of parents (a graph's jobs mostly share one).
  std::map<int, std::vector<std::int64_t>> by_waits;
  for (const core::ChildWaits& w : children) {
    by_waits[w.waits].push_back(w.child_id);
  }
  for (const auto& [waits, ids] : by_waits) {
    for (std::size_t at = 0; at < ids.size(); at += deps_sql::kPiece) {
      const std::size_t n = std::min(deps_sql::kPiece, ids.size() - at);
      Params p;
      p.Int(waits);
      for (std::size_t i = 0; i < n; ++i) p.Int(ids[at + i]);
      auto rows = conn.RunOnce(
          D::Statement("UPDATE sqlq_messages SET ready_us = " SQLQ_WAITING_US
                       ", waits = ? WHERE id IN (" +
                       deps_sql::Marks(n) + ")"),
          p, "wait");
      if (!rows.ok()) return rows.status();
    }
  }
  return Status::Ok();
}

template <class D>
Result<core::ReleaseOutcome> SqlEngine<D>::ReleaseDependents(
    core::Conn& c, std::int64_t queue_id,
    std::span<const std::int64_t> parents) {
  DConn& conn = Native(c);
  core::ReleaseOutcome out;
  std::vector<std::int64_t>& released = out.queues;
  if (parents.empty()) return out;
  if (!conn.flags_read.contains(queue_id)) {
    // Locked by a send of this transaction, which read no flag: read it
    // now, under the lock the send holds (a plain read could be older on
    // MariaDB, hence the lock statement).
    static const std::string kLock(D::kLockQueue);
    auto rows = conn.Run(kLock, Params().Int(queue_id), "read dependents flag");
    if (!rows.ok()) return rows.status();
    conn.flags_read.insert(queue_id);
    if (rows->size() > 0 && rows->Int(0, 1) != 0) {
      conn.dependent_queues.insert(queue_id);
    }
  }
  if (!conn.dependent_queues.contains(queue_id)) return out;
  static const std::string kChildren = D::Statement(
      "SELECT child_id, child_queue_id, on_dead FROM sqlq_deps WHERE "
      "parent_id = ?");
  static const std::string kReleaseOne = D::Statement(deps_sql::kReleaseOne);
  static const std::string kUnlink =
      D::Statement("DELETE FROM sqlq_deps WHERE parent_id = ?");
  // Every dependent of every parent, with how many of them it waits for;
  // of those, the callbacks of batches (OnDead::kBatch), one entry per
  // member acked.
  std::map<std::int64_t, std::pair<int, std::int64_t>> children;
  auto add = [&](const Rows& rows) {
    for (int i = 0; i < rows.size(); ++i) {
      auto& [n, q] = children[rows.Int(i, 0)];
      ++n;
      q = rows.Int(i, 1);
      if (rows.Int(i, 2) == static_cast<int>(core::OnDead::kBatch)) {
        out.batches.push_back(rows.Int(i, 0));
      }
    }
  };
  std::vector<std::int64_t> ids(parents.begin(), parents.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  // The parents' links, read and then deleted in pieces: one statement
  // each for a whole ack of many.
  auto each_piece = [&](const char* head, const char* what,
                        const std::function<Status(const Rows&)>& took) {
    return deps_sql::InPieces<D>(conn, ids, head, ")", what, took);
  };
  if (ids.size() == 1) {
    auto rows = conn.Run(kChildren, Params().Int(ids[0]), "find dependents");
    if (!rows.ok()) return rows.status();
    add(*rows);
  } else {
    Status s = each_piece(
        "SELECT child_id, child_queue_id, on_dead FROM sqlq_deps WHERE "
        "parent_id IN (",
        "find dependents", [&](const Rows& rows) {
          add(rows);
          return Status::Ok();
        });
    if (!s.ok()) return s;
  }
  if (children.empty()) return out;
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  // The children by primary key, one update per count of parents lost. An
  // IN (subquery) over sqlq_deps can make MariaDB walk the whole of
  // sqlq_messages instead.
  if (children.size() == 1 && children.begin()->second.first == 1) {
    auto rows =
        conn.Run(kReleaseOne, Params().Int(*now).Int(children.begin()->first),
                 "release dependent");
    if (!rows.ok()) return rows.status();
  } else {
    std::map<int, std::vector<std::int64_t>> by_count;
    for (const auto& [child, nq] : children) {
      by_count[nq.first].push_back(child);
    }
    for (const auto& [count, list] : by_count) {
      for (std::size_t at = 0; at < list.size(); at += deps_sql::kPiece) {
        const std::size_t n = std::min(deps_sql::kPiece, list.size() - at);
        Params p;
        p.Int(count).Int(*now).Int(count);
        for (std::size_t i = 0; i < n; ++i) p.Int(list[at + i]);
        p.Int(count);
        auto rows =
            conn.RunOnce(D::Statement(std::string(deps_sql::kReleaseSome) +
                                      deps_sql::Marks(n) + ") AND waits >= ?"),
                         p, "release dependents");
        if (!rows.ok()) return rows.status();
      }
    }
  }
  if (ids.size() == 1) {
    auto gone = conn.Run(kUnlink, Params().Int(ids[0]), "unlink dependents");
    if (!gone.ok()) return gone.status();
  } else {
    Status s = each_piece("DELETE FROM sqlq_deps WHERE parent_id IN (",
                          "unlink dependents",
                          [](const Rows&) { return Status::Ok(); });
    if (!s.ok()) return s;
  }
  for (const auto& [child, nq] : children) {
    const std::int64_t q = nq.second;
    if (std::find(released.begin(), released.end(), q) == released.end()) {
      released.push_back(q);
      D::AfterSteer(conn, q);
    }
  }
  return out;
}

template <class D>
Result<std::vector<core::EndedDependency>> SqlEngine<D>::EndedDependencies(
    core::Conn& c, std::int64_t queue_id) {
  DConn& conn = Native(c);
  static const std::string kSql = D::Statement(
      std::string("SELECT d.parent_id, d.child_id, d.child_queue_id, "
                  "d.on_dead, ") +
      deps_sql::kParentEnd +
      " FROM sqlq_deps d WHERE d.parent_queue_id = ? AND d.parked = 0 AND "
      "NOT EXISTS (SELECT 1 FROM sqlq_messages m WHERE m.id = d.parent_id) "
      "ORDER BY d.parent_id, d.child_id LIMIT 1000");
  auto rows = conn.Run(kSql, Params().Int(queue_id), "find ended dependencies");
  if (!rows.ok()) return rows.status();
  return deps_sql::Ended(*rows);
}

template <class D>
Result<bool> SqlEngine<D>::SettleDependency(core::Conn& c,
                                            const core::EndedDependency& d) {
  DConn& conn = Native(c);
  static const std::string kUnlink = D::Statement(
      "DELETE FROM sqlq_deps WHERE parent_id = ? AND child_id = ? AND "
      "parked = 0");
  static const std::string kPark = D::Statement(
      "UPDATE sqlq_deps SET parked = 1 WHERE parent_id = ? AND child_id = ? "
      "AND parked = 0");
  static const std::string kReleaseOne = D::Statement(deps_sql::kReleaseOne);
  const bool park = d.on_dead == core::OnDead::kWait;
  auto rows =
      conn.Run(park ? kPark : kUnlink,
               Params().Int(d.parent_id).Int(d.child_id), "settle dependency");
  if (!rows.ok()) return rows.status();
  if (rows->affected() == 0) return false;
  if (d.on_dead == core::OnDead::kRun || d.on_dead == core::OnDead::kBatch) {
    auto now = NowUs(conn);
    if (!now.ok()) return now.status();
    auto released = conn.Run(kReleaseOne, Params().Int(*now).Int(d.child_id),
                             "release dependent");
    if (!released.ok()) return released.status();
    D::AfterSteer(conn, d.child_queue_id);
  }
  return true;
}

template <class D>
Result<std::vector<core::DependencyRecord>> SqlEngine<D>::ListDependencies(
    core::Conn& c, std::int64_t child_id) {
  DConn& conn = Native(c);
  static const std::string kSql = D::Statement(
      "SELECT parent_id, parent_queue_id, parked FROM sqlq_deps WHERE "
      "child_id = ? ORDER BY parent_id");
  auto rows = conn.Run(kSql, Params().Int(child_id), "list dependencies");
  if (!rows.ok()) return rows.status();
  std::vector<core::DependencyRecord> out;
  for (int i = 0; i < rows->size(); ++i) {
    out.push_back({.parent_id = rows->Int(i, 0),
                   .parent_queue_id = rows->Int(i, 1),
                   .parked = rows->Int(i, 2) != 0});
  }
  return out;
}

template <class D>
Result<std::vector<core::LinkRecord>> SqlEngine<D>::ListLinks(
    core::Conn& c, std::int64_t queue_id, std::int64_t id, int limit) {
  DConn& conn = Native(c);
  // The parents by the index sqlq_deps_child (at most kMaxDependencies),
  // then the first `limit` dependents by the primary key.
  static const std::string kParents = D::Statement(
      "SELECT d.parent_id, q.name, d.parked FROM sqlq_deps d JOIN "
      "sqlq_queues q ON q.id = d.parent_queue_id WHERE d.child_id = ? AND "
      "d.child_queue_id = ? ORDER BY d.parent_id");
  static const std::string kDependents = D::Statement(
      "SELECT d.child_id, q.name, d.parked FROM sqlq_deps d JOIN "
      "sqlq_queues q ON q.id = d.child_queue_id WHERE d.parent_id = ? AND "
      "d.parent_queue_id = ? ORDER BY d.child_id LIMIT ?");
  std::vector<core::LinkRecord> out;
  for (const bool dependent : {false, true}) {
    Params p;
    p.Int(id).Int(queue_id);
    if (dependent) p.Int(limit);
    auto rows = conn.Run(dependent ? kDependents : kParents, p, "list links");
    if (!rows.ok()) return rows.status();
    for (int i = 0; i < rows->size(); ++i) {
      out.push_back({.dependent = dependent,
                     .id = rows->Int(i, 0),
                     .queue = rows->Bytes(i, 1),
                     .parked = rows->Int(i, 2) != 0});
    }
  }
  return out;
}

template <class D>
Status SqlEngine<D>::DropDependencies(core::Conn& c, std::int64_t queue_id) {
  DConn& conn = Native(c);
  static const std::string kSql =
      D::Statement("DELETE FROM sqlq_deps WHERE child_queue_id = ?");
  // A batch lives with its callback (sqlq_batches' index on the queue).
  static const std::string kBatches =
      D::Statement("DELETE FROM sqlq_batches WHERE callback_queue_id = ?");
  auto rows = conn.Run(kSql, Params().Int(queue_id), "drop dependencies");
  if (!rows.ok()) return rows.status();
  rows = conn.Run(kBatches, Params().Int(queue_id), "drop batches");
  return rows.ok() ? Status::Ok() : rows.status();
}

template <class D>
Result<std::int64_t> SqlEngine<D>::MoveParents(core::Conn& c, std::int64_t from,
                                               std::int64_t to) {
  DConn& conn = Native(c);
  static const std::string kSql = D::Statement(
      "UPDATE sqlq_deps SET parent_queue_id = ?, parked = 0 WHERE "
      "parent_queue_id = ? AND parked = 1");
  auto rows = conn.Run(kSql, Params().Int(to).Int(from), "move dependencies");
  if (!rows.ok()) return rows.status();
  return static_cast<std::int64_t>(rows->affected());
}

}  // namespace sqlq::engines::shared

#endif  // SQLQ_ENGINES_SHARED_SQL_DEPS_H_
