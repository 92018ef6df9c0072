// SqlEngine (sql_engine.h): the claims of queues with groups
// (ClaimParams::groups), the same on PostgreSQL and MariaDB. Included only
// where an engine instantiates SqlEngine<D>.
//
// A claim goes round the queue's groups in key order from where this
// handle's last claim stopped, one seek of the group index
// (queue_id, grp, id) per group, and looks at one candidate per group:
// kOrdered the group's first message, kFair its first ready one. Only
// candidates are locked (FOR UPDATE SKIP LOCKED), so claims never wait for
// each other: a candidate another claim holds is passed over with its
// group.
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

#include <string>
#include <tuple>
#include <utility>

#include "core/columns.h"
#include "core/errors.h"
#include "core/group_walk.h"
#include "core/rows.h"
#include "engines/shared/sql_engine.h"

namespace sqlq::engines::shared {

// The statements of the walk, with ? placeholders (tests EXPLAIN them):
// the group after a key, the first group, a group's head, and a fair
// group's first ready message; each candidate found is then locked by id.
// The first two return the group's head too (its lowest id, and when it is
// ready), which an ordered claim takes instead of reading it again.
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

template <class D>
Result<core::ClaimOutcome> SqlEngine<D>::ClaimGroups(
    DConn& conn, const core::ClaimParams& p) {
  auto now_r = NowUs(conn);
  if (!now_r.ok()) return now_r.status();
  const std::int64_t now = *now_r;
  const std::int64_t until = now + p.lease.count();
  const bool ordered = p.groups == GroupMode::kOrdered;
  static const std::string kAfter = D::Statement(kGroupAfterSql);
  static const std::string kFirst = D::Statement(kGroupFirstSql);
  static const std::string kHead = D::Statement(kGroupHeadSql);
  static const std::string kColumns =
      std::string(
          "SELECT id, priority, ready_us, token, attempts, "
          "enqueued_us, payload, ") +
      D::kMessageStyle.headers_column + " FROM sqlq_messages ";
  static const std::string kLock = D::Statement(
      kColumns + "WHERE id = ? AND ready_us <= ? FOR UPDATE SKIP LOCKED");
  static const std::string kReady = D::Statement(kGroupReadySql);
  static const std::string kWindow = D::Statement(kGroupWindowSql);
  static const std::string kLease = D::Statement(D::kLeaseOne);

  // The head the last next_group read with its group: id, ready_us.
  std::optional<std::pair<std::int64_t, std::int64_t>> head_seen;
  auto next_group = [&](const std::optional<std::string>& from)
      -> Result<std::optional<std::string>> {
    head_seen.reset();
    auto rows =
        from ? conn.Run(kAfter, Params().Int(p.queue_id).Bytes(*from),
                        "claim (groups)")
             : conn.Run(kFirst, Params().Int(p.queue_id), "claim (groups)");
    if (!rows.ok()) return rows.status();
    if (rows->size() == 0 && from) {
      rows = conn.Run(kFirst, Params().Int(p.queue_id), "claim (groups)");
      if (!rows.ok()) return rows.status();
    }
    if (rows->size() == 0) return std::optional<std::string>();
    head_seen.emplace(rows->Int(0, 1), rows->Int(0, 2));
    return std::optional<std::string>(rows->Bytes(0, 0));
  };
  // The group's candidate read plainly (ordered: its head, skipped unless
  // ready; fair: its first ready message), then locked by id on condition
  // that it is still ready.
  auto lock = [&](const std::string& group) -> Result<std::optional<Rows>> {
    std::int64_t id = 0, ready_us = 0;
    if (ordered && head_seen) {
      std::tie(id, ready_us) = *head_seen;
      head_seen.reset();  // a second look (after a dead letter) reads again
    } else {
      auto found =
          ordered ? conn.Run(kHead, Params().Int(p.queue_id).Bytes(group),
                             "claim (groups)")
          : p.group_limit > 0
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
      if (found->size() == 0) return std::optional<Rows>();
      id = found->Int(0, 0);
      ready_us = found->Int(0, 1);
    }
    if (ready_us > now) return std::optional<Rows>();
    auto rows = conn.Run(kLock, Params().Int(id).Int(now), "claim (groups)");
    if (!rows.ok()) return rows.status();
    return std::optional<Rows>(std::move(*rows));
  };
  core::ClaimOutcome out;
  // A locked candidate, as core::WalkGroups takes it.
  struct Candidate {
    ClaimedMessage m;  // but its payload
    std::int64_t attempts = 0, token = 0;
    std::string payload;
  };
  auto candidate =
      [&](const std::string& group) -> Result<std::optional<Candidate>> {
    auto rows = lock(group);
    if (!rows.ok()) return rows.status();
    if (!rows->has_value()) return std::optional<Candidate>();
    const Rows& r = **rows;
    if (r.size() == 0 || r.Int(0, 2) > now) return std::optional<Candidate>();
    std::optional<Candidate> c(std::in_place);
    c->m.id = r.Int(0, 0);
    c->m.priority = static_cast<std::int32_t>(r.Int(0, 1));
    c->token = r.Int(0, 3);
    c->attempts = r.Int(0, 4);
    c->m.attempt = static_cast<int>(c->attempts) + 1;
    c->m.enqueued_at = core::FromUs(r.Int(0, 5));
    c->payload = r.Bytes(0, 6);
    c->m.lease_expires_at = core::FromUs(until);
    if (!r.IsNull(0, 7)) c->m.headers = core::DecodeHeaders(r.Bytes(0, 7));
    c->m.group = group;
    return c;
  };
  auto lease = [&](Candidate& c) -> Status {
    Params params;
    params.Int(core::TokenBits(p.token)).Int(until);
    if (p.worker.empty()) {
      params.Null();
    } else {
      params.Bytes(p.worker);
    }
    params.Int(c.m.id);
    auto leased = conn.Run(kLease, params, "claim (groups)");
    if (!leased.ok()) return leased.status();
    c.m.payload = std::move(c.payload);
    out.messages.push_back(std::move(c.m));
    return Status::Ok();
  };

  Status walked = core::WalkGroups(
      p, out, next_group, candidate,
      [&](const Candidate& c) { return BuryExhausted(conn, {c.m.id}, now, p); },
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
