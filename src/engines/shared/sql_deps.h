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
#include <set>

#include "core/errors.h"
#include "engines/shared/sql_engine.h"

namespace sqlq::engines::shared {

namespace deps_sql {

// One less to wait for; ready now at the last one. ready_us is set first:
// MariaDB assigns left to right with the new values, the others with the
// old ones, and both read waits before it changes here.
// kReleaseSome: the same for a list of ids, which the caller completes
// ("?, ?) AND waits > 0").
inline constexpr const char* kReleaseSome =
    "UPDATE sqlq_messages SET ready_us = CASE WHEN waits = 1 THEN ? ELSE "
    "ready_us END, waits = waits - 1 WHERE id IN (";
inline constexpr const char* kReleaseOne =
    "UPDATE sqlq_messages SET ready_us = CASE WHEN waits = 1 THEN ? ELSE "
    "ready_us END, waits = waits - 1 WHERE id = ? AND waits > 0";

}  // namespace deps_sql

template <class D>
Status SqlEngine<D>::FlagDependents(core::Conn& c,
                                    std::span<const std::int64_t> parents,
                                    std::span<const std::int64_t> queues) {
  DConn& conn = Native(c);
  static const std::string kWhere = D::Statement(
      "SELECT queue_id FROM sqlq_messages WHERE id = ? UNION ALL "
      "SELECT queue_id FROM sqlq_dead WHERE id = ?");
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
  for (std::int64_t id : parents) {
    auto rows = conn.Run(kWhere, Params().Int(id).Int(id), "find message");
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
Result<core::LinkOutcome> SqlEngine<D>::LinkDependencies(
    core::Conn& c, const core::LinkParams& p) {
  DConn& conn = Native(c);
  // The parent's row locked: an ack of it waits for this transaction, or
  // this read waits for the ack's and then finds the row gone.
  static const std::string kLive = D::Statement(
      std::string("SELECT queue_id FROM sqlq_messages WHERE id = ?") +
      D::kForUpdate);
  static const std::string kDead =
      D::Statement("SELECT queue_id FROM sqlq_dead WHERE id = ?");
  static const std::string kLink = D::Statement(
      "INSERT INTO sqlq_deps (parent_id, child_id, parent_queue_id, "
      "child_queue_id, on_dead, parked) VALUES (?, ?, ?, ?, ?, ?)");
  static const std::string kWait =
      D::Statement("UPDATE sqlq_messages SET ready_us = " SQLQ_WAITING_US
                   ", waits = ? WHERE id = ?");
  std::vector<std::int64_t> parents(p.parents.begin(), p.parents.end());
  std::sort(parents.begin(), parents.end());
  parents.erase(std::unique(parents.begin(), parents.end()), parents.end());
  // Where each parent is: live (its queue), dead (its queue), or neither.
  struct Found {
    std::int64_t id = 0;
    std::int64_t queue_id = 0;
    bool dead = false;
  };
  std::vector<Found> waited;
  core::LinkOutcome out;
  for (std::int64_t id : parents) {
    auto live = conn.Run(kLive, Params().Int(id), "lock dependency");
    if (!live.ok()) return live.status();
    if (live->size() > 0) {
      waited.push_back({id, live->Int(0, 0), false});
      continue;
    }
    auto dead = conn.Run(kDead, Params().Int(id), "find dependency");
    if (!dead.ok()) return dead.status();
    if (dead->size() == 0) continue;  // completed (or deleted): done
    if (p.on_dead == core::OnDead::kCancel) {
      if (!out.dead_parent) out.dead_parent = id;
    } else if (p.on_dead == core::OnDead::kWait) {
      waited.push_back({id, dead->Int(0, 0), true});
    }
  }
  if (out.dead_parent || waited.empty()) return out;
  for (const Found& f : waited) {
    auto rows = conn.Run(kLink,
                         Params()
                             .Int(f.id)
                             .Int(p.child_id)
                             .Int(f.queue_id)
                             .Int(p.child_queue_id)
                             .Int(static_cast<int>(p.on_dead))
                             .Int(f.dead ? 1 : 0),
                         "link dependency");
    if (!rows.ok()) return rows.status();
  }
  out.waits = static_cast<int>(waited.size());
  auto rows = conn.Run(kWait, Params().Int(out.waits).Int(p.child_id), "wait");
  if (!rows.ok()) return rows.status();
  return out;
}

template <class D>
Result<std::vector<std::int64_t>> SqlEngine<D>::ReleaseDependents(
    core::Conn& c, std::int64_t queue_id,
    std::span<const std::int64_t> parents) {
  DConn& conn = Native(c);
  std::vector<std::int64_t> released;
  if (parents.empty()) return released;
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
  if (!conn.dependent_queues.contains(queue_id)) return released;
  auto now = NowUs(conn);
  if (!now.ok()) return now.status();
  static const std::string kChildren = D::Statement(
      "SELECT child_id, child_queue_id FROM sqlq_deps WHERE parent_id = ?");
  static const std::string kReleaseOne = D::Statement(deps_sql::kReleaseOne);
  static const std::string kUnlink =
      D::Statement("DELETE FROM sqlq_deps WHERE parent_id = ?");
  for (std::int64_t id : parents) {
    auto children = conn.Run(kChildren, Params().Int(id), "find dependents");
    if (!children.ok()) return children.status();
    const int n = children->size();
    if (n == 0) continue;
    // The children by primary key. An IN (subquery) over sqlq_deps can
    // make MariaDB walk the whole of sqlq_messages instead.
    auto release = [&]() -> Result<Rows> {
      if (n == 1) {
        return conn.Run(kReleaseOne,
                        Params().Int(*now).Int(children->Int(0, 0)),
                        "release dependent");
      }
      std::string sql = deps_sql::kReleaseSome;
      Params p;
      p.Int(*now);
      for (int i = 0; i < n; ++i) {
        sql += i == 0 ? "?" : ", ?";
        p.Int(children->Int(i, 0));
      }
      sql += ") AND waits > 0";
      return conn.RunOnce(D::Statement(sql), p, "release dependents");
    };
    auto rows = release();
    if (!rows.ok()) return rows.status();
    auto gone = conn.Run(kUnlink, Params().Int(id), "unlink dependents");
    if (!gone.ok()) return gone.status();
    for (int i = 0; i < n; ++i) {
      const std::int64_t q = children->Int(i, 1);
      if (std::find(released.begin(), released.end(), q) == released.end()) {
        released.push_back(q);
        D::AfterSteer(conn, q);
      }
    }
  }
  return released;
}

template <class D>
Result<std::vector<core::EndedDependency>> SqlEngine<D>::EndedDependencies(
    core::Conn& c, std::int64_t queue_id) {
  DConn& conn = Native(c);
  static const std::string kSql = D::Statement(
      "SELECT d.parent_id, d.child_id, d.child_queue_id, d.on_dead, "
      "CASE WHEN EXISTS (SELECT 1 FROM sqlq_dead x WHERE x.id = d.parent_id) "
      "THEN 1 ELSE 0 END FROM sqlq_deps d WHERE d.parent_queue_id = ? AND "
      "d.parked = 0 AND NOT EXISTS (SELECT 1 FROM sqlq_messages m WHERE m.id "
      "= d.parent_id) ORDER BY d.parent_id, d.child_id LIMIT 1000");
  auto rows = conn.Run(kSql, Params().Int(queue_id), "find ended dependencies");
  if (!rows.ok()) return rows.status();
  std::vector<core::EndedDependency> out;
  out.reserve(rows->size());
  for (int i = 0; i < rows->size(); ++i) {
    out.push_back({.parent_id = rows->Int(i, 0),
                   .child_id = rows->Int(i, 1),
                   .child_queue_id = rows->Int(i, 2),
                   .on_dead = static_cast<core::OnDead>(rows->Int(i, 3)),
                   .dead = rows->Int(i, 4) != 0});
  }
  return out;
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
  if (d.on_dead == core::OnDead::kRun) {
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
Status SqlEngine<D>::DropDependencies(core::Conn& c, std::int64_t queue_id) {
  DConn& conn = Native(c);
  static const std::string kSql =
      D::Statement("DELETE FROM sqlq_deps WHERE child_queue_id = ?");
  auto rows = conn.Run(kSql, Params().Int(queue_id), "drop dependencies");
  return rows.ok() ? Status::Ok() : rows.status();
}

}  // namespace sqlq::engines::shared

#endif  // SQLQ_ENGINES_SHARED_SQL_DEPS_H_
