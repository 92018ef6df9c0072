// The round of a claim of a queue with groups (ClaimParams::groups),
// written once for every engine: which groups come next, which of their
// candidates a claim takes, when it stops, what it counts. The engines
// supply the statements: the groups after a key with their candidates,
// the lock of candidates, and how candidates are leased or dead-lettered.
//
// The walk goes in batches, so that a claim of N messages costs a few
// statements, not a few per group: one look at the next groups, one lock
// of the candidates it takes, one lease.

#ifndef SQLQ_CORE_GROUP_WALK_H_
#define SQLQ_CORE_GROUP_WALK_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/engine.h"

namespace sqlq::core {

// A group as a claim's look finds it: its key and its candidate's id, 0
// when it has none now (kOrdered: its head, when ready; kFair: its first
// ready message, of its window when the queue has a group limit).
struct GroupLook {
  std::string group;
  std::int64_t candidate = 0;
};

// Walks the groups for claim `p`, adding to `out`. C is the engine's
// candidate, with `id`, `attempts`, `token` and `payload`. The engine
// supplies
//   look(after, n, want) -> Result<vector<GroupLook>>: up to n groups
//     after `after` in key order (from the first when unset), fewer only
//     when the groups end or once `want` of them have candidates (an
//     engine that looks at each group with statements of its own stops
//     there);
//   lock(ids) -> Result<vector<C>>: those candidates that are still ready,
//     locked where the engine locks, in any order; a candidate another
//     claim holds is left out;
//   again(group) -> Result<optional<C>>: the group's candidate now, locked
//     (after its last one went to the dead letters);
//   bury(C&) -> Status: moves a candidate out of attempts to the dead
//     letters;
//   lease(vector<C>&) -> Status: leases them and appends them to
//     out.messages, in their order.
//
// The claim goes round the groups from after p.after_group, wrapping past
// the last, and takes one candidate per group it passes; it stops when it
// has p.max (or p.max_bytes), when it comes back to a group without having
// taken anything since (a round found nothing more), or after
// kMaxIdleGroups groups in a row gave nothing.
template <class C, class Look, class Lock, class Again, class Bury, class Lease>
Status WalkGroups(const ClaimParams& p, ClaimOutcome& out, Look look, Lock lock,
                  Again again, Bury bury, Lease lease) {
  std::optional<std::string> cursor = p.after_group;
  bool from_first = false;  // the last look reached the last group
  std::size_t bytes = 0;
  // The groups looked at since the last lease or dead letter.
  std::set<std::string> idle;
  // Groups to look at: the claim's want and a few more for candidates
  // that are not ready or that others hold, twice as many after a look
  // that gave nothing.
  int span = 0;
  bool full = false;
  while (!full && static_cast<int>(out.messages.size()) < p.max) {
    const int want = p.max - static_cast<int>(out.messages.size());
    span = span == 0 ? want + 8 : std::min(2 * span, kMaxIdleGroups + 1);
    auto looks = look(from_first ? std::nullopt : cursor, span, want);
    if (!looks.ok()) return looks.status();
    if (looks->empty()) {
      if (from_first || !cursor) break;  // no groups
      from_first = true;
      continue;
    }
    // This round's groups: up to `want` candidates, and not past a group
    // seen since the last lease.
    std::size_t end = 0;
    bool round_over = false;
    std::vector<std::int64_t> ids;
    for (; end < looks->size(); ++end) {
      const GroupLook& g = (*looks)[end];
      if (idle.count(g.group) != 0) {
        round_over = true;
        break;
      }
      if (g.candidate == 0) continue;
      ids.push_back(g.candidate);
      if (static_cast<int>(ids.size()) == want) {
        ++end;
        break;
      }
    }
    // The groups ended before the look had what it asked for: the next
    // look starts from the first.
    from_first = end == looks->size() &&
                 static_cast<int>(looks->size()) < span &&
                 static_cast<int>(ids.size()) < want;
    std::unordered_map<std::int64_t, std::size_t> locked_at;
    std::vector<C> locked;
    if (!ids.empty()) {
      auto l = lock(ids);
      if (!l.ok()) return l.status();
      locked = std::move(*l);
      for (std::size_t i = 0; i < locked.size(); ++i) {
        locked_at[locked[i].id] = i;
      }
    }
    std::vector<C> taken;
    bool took = false;
    for (std::size_t i = 0; i < end && !full; ++i) {
      const GroupLook& g = (*looks)[i];
      cursor = g.group;
      out.last_group = g.group;
      idle.insert(g.group);
      if (g.candidate == 0) continue;
      auto at = locked_at.find(g.candidate);
      if (at == locked_at.end()) continue;  // held by another claim
      std::optional<C> m(std::move(locked[at->second]));
      // Out of attempts: a dead letter, and the group's next candidate
      // looked at in its place.
      while (m && m->attempts >= p.max_attempts) {
        if (m->token != 0) ++out.expirations;
        Status s = bury(*m);
        if (!s.ok()) return s;
        ++out.dead_lettered;
        idle.clear();
        took = true;
        auto next = again(g.group);
        if (!next.ok()) return next.status();
        m = std::move(*next);
      }
      if (!m) continue;
      if (p.max_bytes != 0 && (!out.messages.empty() || !taken.empty()) &&
          bytes + m->payload.size() > p.max_bytes) {
        full = true;
        break;
      }
      if (m->token != 0) ++out.expirations;
      bytes += m->payload.size();
      taken.push_back(std::move(*m));
      idle.clear();
      took = true;
    }
    if (!taken.empty()) {
      Status s = lease(taken);
      if (!s.ok()) return s;
    }
    if (took) span = 0;
    if (round_over && !took) break;
    if (static_cast<int>(idle.size()) > kMaxIdleGroups) break;
  }
  return Status::Ok();
}

}  // namespace sqlq::core

#endif  // SQLQ_CORE_GROUP_WALK_H_
