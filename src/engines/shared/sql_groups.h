// SqlEngine (sql_engine.h): the claims of queues with groups
// (ClaimParams::groups), the same on PostgreSQL and MariaDB. Included only
// where an engine instantiates SqlEngine<D>.
//
// A claim goes round the queue's groups in key order from where this
// handle's last claim stopped (core/group_walk.h), in batches: a look at
// the next groups with one candidate each (kOrdered the group's first
// message, kFair its first ready one), the lock of the candidates it takes
// (FOR UPDATE SKIP LOCKED), their lease. Only candidates are locked, so
// claims never wait for each other: a candidate another claim holds is
// passed over with its group. The look walks the group index
// (queue_id, grp, id), one seek per group: in one statement on PostgreSQL
// (Dialect::GroupLookSql), one per group on MariaDB.
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
#include <utility>
#include <vector>

#include "core/columns.h"
#include "core/errors.h"
#include "core/group_walk.h"
#include "core/rows.h"
#include "core/validate.h"
#include "engines/shared/sql_engine.h"

namespace sqlq::engines::shared {

// The statements of the walk, with ? placeholders (tests EXPLAIN them):
// the group after a key, the first group, a group's head, and a fair
// group's first ready message; the candidates found are then locked by
// id. The first two return the group's head too (its lowest id, and when
// it is ready), which an ordered claim takes instead of reading it again.
// PostgreSQL's look (Dialect::GroupLookSql) walks with the same seeks.
inline constexpr const char* kGroupAfterSql = R"sql(
  SELECT grp, id, ready_us FROM sqlq_messages WHERE queue_id = ? AND grp > ?
  ORDER BY grp, id LIMIT 1)sql";
inline constexpr const char* kGroupFirstSql = R"sql(
  SELECT grp, id, ready_us FROM sqlq_messages
  WHERE queue_id = ? AND grp IS NOT NULL ORDER BY grp, id LIMIT 1)sql";
inline constexpr const char* kGroupHeadSql = R"sql(
  SELECT id, ready_us FROM sqlq_messages WHERE queue_id = ? AND grp = ?
  ORDER BY id LIMIT 1)sql";
inline constexpr const char* kGroupReadySql = R"sql(
  SELECT id, ready_us FROM sqlq_messages
  WHERE queue_id = ? AND grp = ? AND ready_us <= ? ORDER BY id LIMIT 1)sql";
// A fair group with a group limit: the first ready message of its window,
// its ? oldest messages.
inline constexpr const char* kGroupWindowSql = R"sql(
  SELECT id, ready_us FROM (
    SELECT id, ready_us FROM sqlq_messages WHERE queue_id = ? AND grp = ?
    ORDER BY id LIMIT ?) w
  WHERE ready_us <= ? ORDER BY id LIMIT 1)sql";

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
Result<core::ClaimOutcome> SqlEngine<D>::ClaimGroups(
    DConn& conn, const core::ClaimParams& p) {
  auto now_r = NowUs(conn);
  if (!now_r.ok()) return now_r.status();
  const std::int64_t now = *now_r;
  const std::int64_t until = now + p.lease.count();
  const bool ordered = p.groups == GroupMode::kOrdered;
  const bool window = !ordered && p.group_limit > 0;
  static const std::string kAfter = D::Statement(kGroupAfterSql);
  static const std::string kFirst = D::Statement(kGroupFirstSql);
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

  // The group of each candidate looked at.
  std::unordered_map<std::int64_t, std::string> group_of;
  // A fair group's candidate, or an ordered group's head: its id and when
  // it is ready; none when the group has none.
  auto find = [&](const std::string& group)
      -> Result<std::optional<std::pair<std::int64_t, std::int64_t>>> {
    auto found =
        ordered ? conn.Run(kHead, Params().Int(p.queue_id).Bytes(group),
                           "claim (groups)")
        : window
            ? conn.Run(kWindow,
                       Params()
                           .Int(p.queue_id)
                           .Bytes(group)
                           .Int(p.group_limit)
                           .Int(now),
                       "claim (groups)")
            : conn.Run(kReady, Params().Int(p.queue_id).Bytes(group).Int(now),
                       "claim (groups)");
    if (!found.ok()) return found.status();
    if (found->size() == 0) {
      return std::optional<std::pair<std::int64_t, std::int64_t>>();
    }
    return std::optional<std::pair<std::int64_t, std::int64_t>>(
        std::in_place, found->Int(0, 0), found->Int(0, 1));
  };
  auto look = [&](std::optional<std::string> after, int n,
                  int want) -> Result<std::vector<core::GroupLook>> {
    std::vector<core::GroupLook> looks;
    int found = 0;
    if constexpr (D::kGroupLookInOneStatement) {
      Params params;
      params.Int(p.queue_id)
          .Bytes(after ? *after : std::string())
          .Int(n)
          .Int(now);
      if (window) params.Int(p.group_limit);
      auto rows = conn.Run(D::GroupLookSql(!after, ordered, window), params,
                           "claim (groups)");
      if (!rows.ok()) return rows.status();
      for (int i = 0; i < rows->size(); ++i) {
        looks.push_back(
            {.group = rows->Bytes(i, 0), .candidate = rows->Int(i, 1)});
      }
      // Key order: std::string compares bytes as unsigned, as bytea does.
      std::sort(looks.begin(), looks.end(),
                [](const core::GroupLook& a, const core::GroupLook& b) {
                  return a.group < b.group;
                });
    } else {
      while (static_cast<int>(looks.size()) < n && found < want) {
        auto rows =
            after
                ? conn.Run(kAfter, Params().Int(p.queue_id).Bytes(*after),
                           "claim (groups)")
                : conn.Run(kFirst, Params().Int(p.queue_id), "claim (groups)");
        if (!rows.ok()) return rows.status();
        if (rows->size() == 0) break;
        core::GroupLook g{.group = rows->Bytes(0, 0)};
        if (ordered) {
          if (rows->Int(0, 2) <= now) g.candidate = rows->Int(0, 1);
        } else {
          auto c = find(g.group);
          if (!c.ok()) return c.status();
          if (*c) g.candidate = (*c)->first;
        }
        after = g.group;
        if (g.candidate != 0) ++found;
        looks.push_back(std::move(g));
      }
    }
    for (const core::GroupLook& g : looks) {
      if (g.candidate != 0) group_of[g.candidate] = g.group;
    }
    return looks;
  };
  // A candidate as the walk takes it.
  struct Candidate {
    std::int64_t id = 0, attempts = 0, token = 0;
    ClaimedMessage m;  // but its payload
    std::string payload;
  };
  // Locks those of `ids` that are still ready, passing over those another
  // claim holds.
  auto lock = [&](const std::vector<std::int64_t>& ids)
      -> Result<std::vector<Candidate>> {
    Params params;
    D::AddIds(params, ids);
    params.Int(now);
    auto rows = conn.Run(kLock.For(ids.size()), params, "claim (groups)");
    if (!rows.ok()) return rows.status();
    std::vector<Candidate> locked;
    for (int i = 0; i < rows->size(); ++i) {
      Candidate& c = locked.emplace_back();
      c.id = c.m.id = rows->Int(i, 0);
      c.m.priority = static_cast<std::int32_t>(rows->Int(i, 1));
      c.token = rows->Int(i, 3);
      c.attempts = rows->Int(i, 4);
      c.m.attempt = static_cast<int>(c.attempts) + 1;
      c.m.enqueued_at = core::FromUs(rows->Int(i, 5));
      c.payload = rows->Bytes(i, 6);
      c.m.lease_expires_at = core::FromUs(until);
      if (!rows->IsNull(i, 7)) {
        c.m.headers = core::DecodeHeaders(rows->Bytes(i, 7));
      }
      c.m.group = group_of[c.id];
    }
    return locked;
  };
  // The group's candidate now, locked: after a dead letter.
  auto again =
      [&](const std::string& group) -> Result<std::optional<Candidate>> {
    auto c = find(group);
    if (!c.ok()) return c.status();
    if (!*c || (*c)->second > now) return std::optional<Candidate>();
    group_of[(*c)->first] = group;
    auto locked = lock({(*c)->first});
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
