// ChooseLeader on its own, without a server: which server of a failover
// list the watch takes for the leader from one look at every server (its
// timeline when it takes writes, 0 for a standby, nothing when it did not
// answer in time), and the leader's timeline found before.

#include "engines/postgres/leader_watch.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace sqlq::engines::postgres {
namespace {

using Seen = std::vector<std::optional<std::uint32_t>>;
constexpr auto kNone = std::nullopt;

TEST(ChooseLeader, TheOnlyServerOnTheHighestTimelineLeads) {
  EXPECT_EQ(ChooseLeader(Seen{1, 2}, 0), 1u);
  EXPECT_EQ(ChooseLeader(Seen{3, 0, 2}, 0), 0u);
  // A standby and a silent server do not stop the primary from leading.
  EXPECT_EQ(ChooseLeader(Seen{0, kNone, 1}, 0), 2u);
}

TEST(ChooseLeader, NoOneLeadsWhenNoServerTakesWritesOrTwoShareTheTimeline) {
  EXPECT_EQ(ChooseLeader(Seen{0, 0}, 0), std::nullopt);
  EXPECT_EQ(ChooseLeader(Seen{kNone, kNone}, 0), std::nullopt);
  // Two servers built apart, both on their first timeline: libpq's own
  // choice stands.
  EXPECT_EQ(ChooseLeader(Seen{1, 1}, 0), std::nullopt);
}

// The new primary (timeline 2) is slow to answer one look, while the old
// one (timeline 1, still taking writes) answers: the old one must not lead
// again, or the calls on the new one would be cut and sent back to it.
TEST(ChooseLeader, AnOldPrimaryNeverLeadsAgainWhileTheNewOneIsSilent) {
  const auto first = ChooseLeader(Seen{1, 2}, 0);
  ASSERT_EQ(first, 1u);
  EXPECT_EQ(ChooseLeader(Seen{1, kNone}, 2), std::nullopt);
  EXPECT_EQ(ChooseLeader(Seen{1, 0}, 2), std::nullopt);
  // The new primary answers again; or a later failover moves the lead to
  // the old one, on a timeline higher still.
  EXPECT_EQ(ChooseLeader(Seen{1, 2}, 2), 1u);
  EXPECT_EQ(ChooseLeader(Seen{3, 2}, 2), 0u);
}

}  // namespace
}  // namespace sqlq::engines::postgres
