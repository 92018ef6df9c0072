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

// A group as a claim's look finds it: its key and its candidates, in id
// order, none when it has none now (kOrdered: its head, when ready; kFair:
// its first ready messages, of its window when the queue has a group
// limit).
struct GroupLook {
  std::string group;
  std::vector<std::int64_t> candidates;
};

// A look's groups, in key order. `whole`: the look went from the first
// group to the last, so it holds every group, and each fair group has up
// to PerGroup(want, groups.size()) candidates (one otherwise).
struct GroupLooks {
  std::vector<GroupLook> groups;
  bool whole = false;
};

// How many candidates a whole look of `groups` groups reads of each fair
// group, for a claim that wants `want`: enough for the claim when every
// group has that many.
inline int PerGroup(int want, std::size_t groups) {
  const auto g = static_cast<int>(std::max<std::size_t>(groups, 1));
  return std::max(1, (want + g - 1) / g);
}

// The walk's lock for an engine whose look read its candidates whole and
// locked them already (or needs no lock): takes those of `ids` still in
// `seen` out of it, in the order of `ids`.
template <class C>
std::vector<C> TakeSeen(std::unordered_map<std::int64_t, C>& seen,
                        const std::vector<std::int64_t>& ids) {
  std::vector<C> taken;
  for (std::int64_t id : ids) {
    auto it = seen.find(id);
    if (it == seen.end()) continue;
    taken.push_back(std::move(it->second));
    seen.erase(it);
  }
  return taken;
}

// Walks the groups for claim `p`, adding to `out`. C is the engine's
// candidate, with `id`, `attempts`, `token` and `payload`. The engine
// supplies
//   look(after, n, want) -> Result<GroupLooks>: up to n groups after
//     `after` in key order, from the first when it is unset or no group is
//     after it; fewer only when the groups end or once `want` of them have
//     candidates (an engine that looks at each group with statements of
//     its own stops there);
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
// taken anything since (a round found nothing more), when a whole look
// took every candidate its groups had, or after kMaxIdleGroups groups in a
// row gave nothing. A whole look serves several rounds at once: first
// candidates in key order, then second ones, and so on, so that a claim of
// ten from a queue of one group costs one look, not ten.
template <class C, class Look, class Lock, class Again, class Bury, class Lease>
Status WalkGroups(const ClaimParams& p, ClaimOutcome& out, Look look, Lock lock,
                  Again again, Bury bury, Lease lease) {
  std::optional<std::string> cursor = p.after_group;
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
    auto looked = look(cursor, span, want);
    if (!looked.ok()) return looked.status();
    const std::vector<GroupLook>& groups = looked->groups;
    if (groups.empty()) break;  // no groups
    // The groups this round passes, each with its candidate (0 for none):
    // up to `want` candidates, and not past a group seen since the last
    // lease. `last`: the group has no later candidate in this look.
    struct Pick {
      std::size_t group;
      std::int64_t id;
      bool last;
    };
    std::vector<Pick> picks;
    std::vector<std::int64_t> ids;
    bool round_over = false;
    for (std::size_t i = 0; i < groups.size(); ++i) {
      const GroupLook& g = groups[i];
      if (idle.count(g.group) != 0) {
        round_over = true;
        break;
      }
      const std::int64_t id = g.candidates.empty() ? 0 : g.candidates[0];
      picks.push_back({i, id, g.candidates.size() <= 1});
      if (id == 0) continue;
      ids.push_back(id);
      if (static_cast<int>(ids.size()) == want) break;
    }
    // A whole look: the next rounds, its groups' later candidates.
    const bool every = looked->whole && !round_over &&
                       picks.size() == groups.size() &&
                       static_cast<int>(ids.size()) < want;
    for (std::size_t rank = 1; every && static_cast<int>(ids.size()) < want;
         ++rank) {
      const std::size_t before = ids.size();
      for (std::size_t i = 0; i < groups.size(); ++i) {
        const std::vector<std::int64_t>& c = groups[i].candidates;
        if (c.size() <= rank) continue;
        picks.push_back({i, c[rank], c.size() == rank + 1});
        ids.push_back(c[rank]);
        if (static_cast<int>(ids.size()) == want) break;
      }
      if (ids.size() == before) break;
    }
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
    // Every candidate the look found was taken.
    bool took_all = true;
    for (const Pick& pick : picks) {
      if (full) break;
      const std::string& group = groups[pick.group].group;
      cursor = group;
      out.last_group = group;
      idle.insert(group);
      if (pick.id == 0) continue;
      auto at = locked_at.find(pick.id);
      if (at == locked_at.end()) {  // held by another claim
        took_all = false;
        continue;
      }
      std::optional<C> m(std::move(locked[at->second]));
      // Out of attempts: a dead letter, and the group's next candidate
      // looked at in its place, unless it is among this look's.
      while (m && m->attempts >= p.max_attempts) {
        if (m->token != 0) ++out.expirations;
        Status s = bury(*m);
        if (!s.ok()) return s;
        ++out.dead_lettered;
        idle.clear();
        took = true;
        took_all = false;
        m.reset();
        if (!pick.last) break;
        // Those taken are leased first, so that the group's next
        // candidate is not one of them.
        if (!taken.empty()) {
          s = lease(taken);
          if (!s.ok()) return s;
          taken.clear();
        }
        auto next = again(group);
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
    // A whole look whose groups had fewer candidates than it read of each,
    // all taken: nothing is left to find now.
    if (looked->whole && !round_over && took_all) {
      const int per = PerGroup(want, groups.size());
      bool short_everywhere = true;
      for (const GroupLook& g : groups) {
        if (static_cast<int>(g.candidates.size()) >= per) {
          short_everywhere = false;
          break;
        }
      }
      if (short_everywhere) break;
    }
    if (static_cast<int>(idle.size()) > kMaxIdleGroups) break;
  }
  return Status::Ok();
}

}  // namespace sqlq::core

#endif  // SQLQ_CORE_GROUP_WALK_H_
