// The round of a claim of a queue with groups (ClaimParams::groups),
// written once for every engine: which group comes next, when a claim
// stops, what it counts. The engines supply the statements: the group
// after a key, a group's candidate, and how a candidate is leased or
// dead-lettered.

#ifndef SQLQ_CORE_GROUP_WALK_H_
#define SQLQ_CORE_GROUP_WALK_H_

#include <optional>
#include <set>
#include <string>

#include "core/engine.h"

namespace sqlq::core {

// Walks the groups for claim `p`, adding to `out`.
//   next_group(after) -> Result<optional<string>>: the group after `after`
//     in key order, else the first; none when the queue has no groups;
//   candidate(group) -> Result<optional<C>>: the group's candidate (kOrdered
//     its head if ready, kFair its first ready message), locked where the
//     engine locks; C has `attempts`, `token` and `payload`;
//   bury(C&) -> Status: moves a candidate out of attempts to the dead
//     letters;
//   lease(C&) -> Status: leases it and appends it to out.messages.
template <class NextGroup, class Candidate, class Bury, class Lease>
Status WalkGroups(const ClaimParams& p, ClaimOutcome& out, NextGroup next_group,
                  Candidate candidate, Bury bury, Lease lease) {
  std::optional<std::string> cursor = p.after_group;
  std::size_t bytes = 0;
  // The groups looked at since the last lease or dead letter: one seen
  // again means a round that found nothing, and the claim is over.
  std::set<std::string> idle;
  while (static_cast<int>(out.messages.size()) < p.max) {
    auto group = next_group(cursor);
    if (!group.ok()) return group.status();
    if (!group->has_value()) break;
    if (!idle.insert(**group).second) break;
    if (static_cast<int>(idle.size()) > kMaxIdleGroups) break;
    cursor = **group;
    out.last_group = **group;
    auto m = candidate(**group);
    if (!m.ok()) return m.status();
    // Out of attempts: a dead letter, and the group's next candidate
    // looked at in its place.
    while (m->has_value() && (*m)->attempts >= p.max_attempts) {
      if ((*m)->token != 0) ++out.expirations;
      Status s = bury(**m);
      if (!s.ok()) return s;
      ++out.dead_lettered;
      idle.clear();
      m = candidate(**group);
      if (!m.ok()) return m.status();
    }
    if (!m->has_value()) continue;
    if (p.max_bytes != 0 && !out.messages.empty() &&
        bytes + (*m)->payload.size() > p.max_bytes) {
      break;
    }
    if ((*m)->token != 0) ++out.expirations;
    bytes += (*m)->payload.size();
    Status s = lease(**m);
    if (!s.ok()) return s;
    idle.clear();
  }
  return Status::Ok();
}

}  // namespace sqlq::core

#endif  // SQLQ_CORE_GROUP_WALK_H_
