// PooledSqlEngine (pooled_sql_engine.h): the claims of queues with groups
// (ClaimParams::groups), the same on PostgreSQL and MariaDB. Included only
// where an engine instantiates PooledSqlEngine<D>.
//
// A claim goes round the queue's groups in key order from where this
// handle's last claim stopped (core/group_walk.h), in batches: a look at
// the next groups with their candidates (kOrdered the group's first
// message, kFair its first ready ones), the lock of the candidates it takes
// (FOR UPDATE SKIP LOCKED), their lease. Only candidates are locked, so
// claims never wait for each other: a candidate another claim holds is
// passed over with its group. The look walks the group index
// (queue_id, grp, id), one seek per group, in one statement: a recursive
// walk on PostgreSQL (Dialect::GroupLookSql), a loose index scan on
// MariaDB (kGroupListSql), which then reads a fair group's candidates with
// a statement per group.
//
// Fair groups with a group limit K: the candidate is the first ready
// message among the group's K oldest (its window). Leased messages stay in
// the window until they leave the queue, and the window only moves on when
// its oldest leave, so no more than K of a group are ever leased; the
// lock by id (below) keeps two claims from leasing the same one.
//
// Ordered groups: the head (the group's lowest id) is found by a plain
// read; a head that is not ready (leased, or waiting for its retry) skips
// the group at once, without a lock, so that claims do not hold up the
// acks of leased heads. A ready head is locked by its id, again on
// condition that it is ready. A lock on the head itself (not "the first
// row of the group that is not locked") is what keeps two claims from
// leasing two messages of one group: a claim that finds the head locked
// skips the group, and one that locks it after another leased it reads the
// leased row (a locking read sees the latest version), which fails the
// condition. A head deleted meanwhile (acked) is not found by id: the group
// waits for the next claim.

#ifndef SQLQ_ENGINES_SHARED_SQL_GROUPS_H_
#define SQLQ_ENGINES_SHARED_SQL_GROUPS_H_

#include <algorithm>
#include <array>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/columns.h"
#include "core/errors.h"
#include "core/group_walk.h"
#include "core/rows.h"
#include "core/validate.h"
#include "engines/shared/pooled_sql_engine.h"

namespace sqlq::engines::shared {

// The statements of the walk, with ? placeholders (tests EXPLAIN them):
// the next groups, a group's head, and a fair group's first ready
// messages; the candidates found are then locked by id.
//
// The next groups (MariaDB; PostgreSQL's look, Dialect::GroupLookSql,
// walks with the same seeks): up to ? groups after a key, each with its
// head (its lowest id), in key order, or, when no group is after the key,
// up to ? groups from the first; column 2 says which. Grouped by the
// index's columns, each part is a loose index scan, one seek per group
// ("Using index for group-by"); the NOT EXISTS is read once.
inline constexpr const char* kGroupListSql = R"sql(
  (SELECT grp, MIN(id), 0 FROM sqlq_messages
   WHERE queue_id = ? AND grp > ?
   GROUP BY queue_id, grp ORDER BY queue_id, grp LIMIT ?)
  UNION ALL
  (SELECT grp, MIN(id), 1 FROM sqlq_messages
   WHERE queue_id = ? AND grp IS NOT NULL AND NOT EXISTS (
     SELECT 1 FROM sqlq_messages WHERE queue_id = ? AND grp > ?)
   GROUP BY queue_id, grp ORDER BY queue_id, grp LIMIT ?))sql";
// The same from the first group.
inline constexpr const char* kGroupListFirstSql = R"sql(
  SELECT grp, MIN(id), 1 FROM sqlq_messages
  WHERE queue_id = ? AND grp IS NOT NULL
  GROUP BY queue_id, grp ORDER BY queue_id, grp LIMIT ?)sql";
inline constexpr const char* kGroupHeadSql = R"sql(
  SELECT id, ready_us FROM sqlq_messages WHERE queue_id = ? AND grp = ?
  ORDER BY id LIMIT 1)sql";
inline constexpr const char* kGroupReadySql = R"sql(
  SELECT id, ready_us FROM sqlq_messages
  WHERE queue_id = ? AND grp = ? AND ready_us <= ? ORDER BY id LIMIT ?)sql";
// A fair group with a group limit: the first ready messages of its window,
// its ? oldest messages.
inline constexpr const char* kGroupWindowSql = R"sql(
  SELECT id, ready_us FROM (
    SELECT id, ready_us FROM sqlq_messages WHERE queue_id = ? AND grp = ?
    ORDER BY id LIMIT ?) w
  WHERE ready_us <= ? ORDER BY id LIMIT ?)sql";

// A statement with a list of ids in it (D::IdsIn), built once for each
// power of two up to a claim's most (lists are padded to one) and kept, as
// PostgreSQL's prepared statements need.
template <class D>
class IdListStatement {
 public:
  IdListStatement(const std::string& head, const std::string& tail) {
    for (std::size_t k = 0; k < sql_.size(); ++k) {
      sql_[k] = D::Statement(head + D::IdsIn(std::size_t{1} << k) + tail);
    }
  }
  // For a list of `n` ids, 1 <= n <= core::kMaxClaim.
  const std::string& For(std::size_t n) const {
    std::size_t k = 0;
    while ((std::size_t{1} << k) < n) ++k;
    return sql_.at(k);
  }

 private:
  static_assert(core::kMaxClaim <= 1024);
  std::array<std::string, 11> sql_;
};

template <class D>
Result<core::ClaimOutcome> PooledSqlEngine<D>::ClaimGroups(
    DConn& conn, const core::ClaimParams& p) {
  auto now_r = NowUs(conn);
  if (!now_r.ok()) return now_r.status();
  const std::int64_t now = *now_r;
  const std::int64_t until = now + p.lease.count();
  const bool ordered = p.groups == GroupMode::kOrdered;
  const bool window = !ordered && p.group_limit > 0;
  static const std::string kList = D::Statement(kGroupListSql);
  static const std::string kListFirst = D::Statement(kGroupListFirstSql);
  static const std::string kHead = D::Statement(kGroupHeadSql);
  static const std::string kColumns =
      std::string(
          "SELECT id, priority, ready_us, token, attempts, "
          "enqueued_us, payload, ") +
      D::kMessageStyle.headers_column + " FROM sqlq_messages ";
  static const std::string kReady = D::Statement(kGroupReadySql);
  static const std::string kWindow = D::Statement(kGroupWindowSql);
  static const IdListStatement<D> kLock(
      kColumns + "WHERE id ", " AND ready_us <= ? FOR UPDATE SKIP LOCKED");
  static const IdListStatement<D> kLease(D::kLeaseSet, "");
  static const IdListStatement<D> kReadyHeads(
      "SELECT id FROM sqlq_messages WHERE id ", " AND ready_us <= ?");

  // The group of each candidate looked at.
  std::unordered_map<std::int64_t, std::string> group_of;
  // A candidate as the walk takes it.
  struct Candidate {
    std::int64_t id = 0, attempts = 0, token = 0;
    ClaimedMessage m;  // but its payload
    std::string payload;
  };
  // A look that locks its candidates (D::kGroupLookLocks, fair without a
  // window) reads them whole: the walk's lock takes them from here.
  const bool look_locks = D::kGroupLookLocks && !ordered && !window;
  std::unordered_map<std::int64_t, Candidate> seen;
  // A candidate from row i of `rows`, its columns those of kColumns from
  // column `at` on.
  auto read = [&](const Rows& rows, int i, int at) {
    Candidate c;
    c.id = c.m.id = rows.Int(i, at);
    c.m.priority = static_cast<std::int32_t>(rows.Int(i, at + 1));
    c.token = rows.Int(i, at + 3);
    c.attempts = rows.Int(i, at + 4);
    c.m.attempt = static_cast<int>(c.attempts) + 1;
    c.m.enqueued_at = core::FromUs(rows.Int(i, at + 5));
    c.payload = rows.Bytes(i, at + 6);
    c.m.lease_expires_at = core::FromUs(until);
    if (!rows.IsNull(i, at + 7)) {
      c.m.headers = core::DecodeJob(rows.Bytes(i, at + 7), c.m);
    }
    c.m.group = group_of[c.id];
    return c;
  };
  // A fair group's first `limit` candidates, or an ordered group's head:
  // their ids and when they are ready.
  auto find = [&](const std::string& group, int limit)
      -> Result<std::vector<std::pair<std::int64_t, std::int64_t>>> {
    auto found =
        ordered ? conn.Run(kHead, Params().Int(p.queue_id).Bytes(group),
                           "claim (groups)")
        : window
            ? conn.Run(kWindow,
                       Params()
                           .Int(p.queue_id)
                           .Bytes(group)
                           .Int(p.group_limit)
                           .Int(now)
                           .Int(limit),
                       "claim (groups)")
            : conn.Run(
                  kReady,
                  Params().Int(p.queue_id).Bytes(group).Int(now).Int(limit),
                  "claim (groups)");
    if (!found.ok()) return found.status();
    std::vector<std::pair<std::int64_t, std::int64_t>> ids;
    for (int i = 0; i < found->size(); ++i) {
      ids.emplace_back(found->Int(i, 0), found->Int(i, 1));
    }
    return ids;
  };
  auto look = [&](std::optional<std::string> after, int n,
                  int want) -> Result<core::GroupLooks> {
    core::GroupLooks looks;
    std::vector<core::GroupLook>& groups = looks.groups;
    if constexpr (D::kGroupLookInOneStatement) {
      // Bytes keeps a view: of `after`, or of a string that outlives the
      // statement (a temporary one would die before it runs).
      static const std::string kFromTheStart;
      Params params;
      params.Int(p.queue_id)
          .Bytes(after ? *after : kFromTheStart)
          .Int(n)
          .Int(now);
      if (!ordered) params.Int(want);
      if (window) params.Int(p.group_limit);
      auto rows = conn.Run(D::GroupLookSql(!after, ordered, window), params,
                           "claim (groups)");
      if (!rows.ok()) return rows.status();
      // One row per candidate (one with id 0 for a group without); column
      // 2 says the walk began at the first group.
      struct Row {
        std::string group;
        std::int64_t id;
      };
      std::vector<Row> found;
      bool from_first = !after;
      for (int i = 0; i < rows->size(); ++i) {
        found.push_back({rows->Bytes(i, 0), rows->Int(i, 1)});
        from_first = rows->Int(i, 2) != 0;
        if (look_locks && found.back().id != 0) {
          Candidate c = read(*rows, i, 3);
          c.m.group = found.back().group;
          seen.insert_or_assign(c.id, std::move(c));
        }
      }
      // Key order, then id order: std::string compares bytes as unsigned,
      // as bytea does.
      std::sort(found.begin(), found.end(), [](const Row& a, const Row& b) {
        return a.group != b.group ? a.group < b.group : a.id < b.id;
      });
      for (Row& r : found) {
        if (groups.empty() || groups.back().group != r.group) {
          groups.push_back({.group = std::move(r.group)});
        }
        if (r.id != 0) groups.back().candidates.push_back(r.id);
      }
      looks.whole = from_first && static_cast<int>(groups.size()) < n;
    } else {
      // The next groups and their heads, in one statement.
      auto rows = after ? conn.Run(kList,
                                   Params()
                                       .Int(p.queue_id)
                                       .Bytes(*after)
                                       .Int(n)
                                       .Int(p.queue_id)
                                       .Int(p.queue_id)
                                       .Bytes(*after)
                                       .Int(n),
                                   "claim (groups)")
                        : conn.Run(kListFirst, Params().Int(p.queue_id).Int(n),
                                   "claim (groups)");
      if (!rows.ok()) return rows.status();
      std::vector<std::int64_t> heads;
      bool from_first = !after;
      for (int i = 0; i < rows->size(); ++i) {
        groups.push_back({.group = rows->Bytes(i, 0)});
        heads.push_back(rows->Int(i, 1));
        from_first = rows->Int(i, 2) != 0;
      }
      looks.whole = from_first && static_cast<int>(groups.size()) < n;
      if (ordered && !heads.empty()) {
        // An ordered group's candidate is its head, when it is ready: read
        // by id, without a lock, so that a leased head is passed over
        // without holding up its ack.
        Params params;
        D::AddIds(params, heads);
        params.Int(now);
        auto ready =
            conn.Run(kReadyHeads.For(heads.size()), params, "claim (groups)");
        if (!ready.ok()) return ready.status();
        std::unordered_set<std::int64_t> is_ready;
        for (int i = 0; i < ready->size(); ++i) {
          is_ready.insert(ready->Int(i, 0));
        }
        for (std::size_t i = 0; i < groups.size(); ++i) {
          if (is_ready.contains(heads[i])) {
            groups[i].candidates.push_back(heads[i]);
          }
        }
      } else if (!ordered) {
        // A fair group's first ready messages, group by group until `want`
        // groups have one: several of each when the look holds every
        // group, for the walk's later rounds.
        const int per = looks.whole ? core::PerGroup(want, groups.size()) : 1;
        int found = 0;
        std::size_t i = 0;
        for (; i < groups.size() && found < want; ++i) {
          auto c = find(groups[i].group, per);
          if (!c.ok()) return c.status();
          for (const auto& [id, ready] : *c) {
            groups[i].candidates.push_back(id);
          }
          if (!c->empty()) ++found;
        }
        if (i < groups.size()) {  // the others are not looked at
          groups.resize(i);
          looks.whole = false;
        }
      }
    }
    for (const core::GroupLook& g : groups) {
      for (std::int64_t id : g.candidates) group_of[id] = g.group;
    }
    return looks;
  };
  // Locks those of `ids` that are still ready, passing over those another
  // claim holds.
  auto lock_now = [&](const std::vector<std::int64_t>& ids)
      -> Result<std::vector<Candidate>> {
    Params params;
    D::AddIds(params, ids);
    params.Int(now);
    auto rows = conn.Run(kLock.For(ids.size()), params, "claim (groups)");
    if (!rows.ok()) return rows.status();
    std::vector<Candidate> locked;
    for (int i = 0; i < rows->size(); ++i) locked.push_back(read(*rows, i, 0));
    return locked;
  };
  // The walk's lock: those the look locked already, or a statement.
  auto lock = [&](const std::vector<std::int64_t>& ids)
      -> Result<std::vector<Candidate>> {
    if (!look_locks) return lock_now(ids);
    return Result<std::vector<Candidate>>(core::TakeSeen(seen, ids));
  };
  // The group's candidate now, locked: after a dead letter.
  auto again =
      [&](const std::string& group) -> Result<std::optional<Candidate>> {
    auto c = find(group, 1);
    if (!c.ok()) return c.status();
    if (c->empty() || c->front().second > now) {
      return std::optional<Candidate>();
    }
    group_of[c->front().first] = group;
    auto locked = lock_now({c->front().first});
    if (!locked.ok()) return locked.status();
    if (locked->empty()) return std::optional<Candidate>();
    return std::optional<Candidate>(std::move(locked->front()));
  };
  core::ClaimOutcome out;
  auto lease = [&](std::vector<Candidate>& taken) -> Status {
    std::vector<std::int64_t> ids;
    for (const Candidate& c : taken) ids.push_back(c.id);
    Params params;
    params.Int(core::TokenBits(p.token)).Int(until);
    if (p.worker.empty()) {
      params.Null();
    } else {
      params.Bytes(p.worker);
    }
    D::AddIds(params, ids);
    auto leased = conn.Run(kLease.For(ids.size()), params, "claim (groups)");
    if (!leased.ok()) return leased.status();
    for (Candidate& c : taken) {
      c.m.payload = std::move(c.payload);
      out.messages.push_back(std::move(c.m));
    }
    return Status::Ok();
  };

  Status walked = core::WalkGroups<Candidate>(
      p, out, look, lock, again,
      [&](const Candidate& c) { return BuryExhausted(conn, {c.id}, now, p); },
      lease);
  if (!walked.ok()) return walked;
  if (out.messages.size() + out.expirations + out.dead_lettered == 0) {
    Status checked = CheckQueue(conn, p.queue_id, /*lock=*/false);
    if (!checked.ok()) return checked;
    return out;
  }
  Status s = AddCounters(conn, p.queue_id, out.Counters());
  if (!s.ok()) return s;
  return out;
}

}  // namespace sqlq::engines::shared

#endif  // SQLQ_ENGINES_SHARED_SQL_GROUPS_H_
