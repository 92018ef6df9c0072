// ChooseLeader on its own, without a server: which server of a failover
// list the watch takes for the leader from one look at every server (its
// timeline when it takes writes, 0 for a standby, nothing when it did not
// answer in time), each server's last answer before that look, and the
// leader's timeline found before.

#include "engines/postgres/leader_watch.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace sqlq::engines::postgres {
namespace {

using Seen = std::vector<std::optional<std::uint32_t>>;
constexpr auto kNone = std::nullopt;

TEST(ChooseLeader, TheOnlyServerOnTheHighestTimelineLeads) {
  EXPECT_EQ(ChooseLeader(Seen{1, 2}, Seen{kNone, kNone}, 0), 1u);
  EXPECT_EQ(ChooseLeader(Seen{3, 0, 2}, Seen{kNone, kNone, kNone}, 0), 0u);
  // A standby and a silent server known to be a standby do not stop the
  // primary from leading; nor does a frozen old primary, known to be on
  // an older timeline, or a server counted dark (0).
  EXPECT_EQ(ChooseLeader(Seen{0, kNone, 1}, Seen{kNone, 0, kNone}, 0), 2u);
  EXPECT_EQ(ChooseLeader(Seen{kNone, 2}, Seen{1, 1}, 0), 1u);
}

TEST(ChooseLeader, NoOneLeadsWhenNoServerTakesWritesOrTwoShareTheTimeline) {
  EXPECT_EQ(ChooseLeader(Seen{0, 0}, Seen{kNone, kNone}, 0), std::nullopt);
  EXPECT_EQ(ChooseLeader(Seen{kNone, kNone}, Seen{1, 0}, 0), std::nullopt);
  // Two servers built apart, both on their first timeline: libpq's own
  // choice stands.
  EXPECT_EQ(ChooseLeader(Seen{1, 1}, Seen{kNone, kNone}, 0), std::nullopt);
}

// The same two servers, the first slow to answer a look (a loaded machine,
// a slow login): the second must not lead, or the calls on the first would
// be cut and sent to it. Whether the first was never heard or last said
// it takes writes on the same timeline.
TEST(ChooseLeader, AServerNotHeardYetMayShareTheTimeline) {
  EXPECT_EQ(ChooseLeader(Seen{kNone, 1}, Seen{kNone, kNone}, 0), std::nullopt);
  EXPECT_EQ(ChooseLeader(Seen{kNone, 1}, Seen{1, 1}, 0), std::nullopt);
  // A restart of the second as a standby, then its promotion.
  EXPECT_EQ(ChooseLeader(Seen{1, kNone}, Seen{1, 1}, 0), std::nullopt);
  EXPECT_EQ(ChooseLeader(Seen{1, 0}, Seen{1, kNone}, 0), 0u);
  EXPECT_EQ(ChooseLeader(Seen{1, 2}, Seen{1, 0}, 1), 1u);
}

// The new primary (timeline 2) is slow to answer one look, while the old
// one (timeline 1, still taking writes) answers: the old one must not lead
// again, or the calls on the new one would be cut and sent back to it.
TEST(ChooseLeader, AnOldPrimaryNeverLeadsAgainWhileTheNewOneIsSilent) {
  const auto first = ChooseLeader(Seen{1, 2}, Seen{1, 1}, 0);
  ASSERT_EQ(first, 1u);
  EXPECT_EQ(ChooseLeader(Seen{1, kNone}, Seen{1, 2}, 2), std::nullopt);
  // Even when the new primary's last answer is not known to say so: the
  // leader's timeline holds the old one back.
  EXPECT_EQ(ChooseLeader(Seen{1, 0}, Seen{1, 2}, 2), std::nullopt);
  EXPECT_EQ(ChooseLeader(Seen{1, kNone}, Seen{1, 0}, 2), std::nullopt);
  // The new primary answers again; or a later failover moves the lead to
  // the old one, on a timeline higher still.
  EXPECT_EQ(ChooseLeader(Seen{1, 2}, Seen{1, kNone}, 2), 1u);
  EXPECT_EQ(ChooseLeader(Seen{3, 2}, Seen{1, 2}, 2), 0u);
}

}  // namespace
}  // namespace sqlq::engines::postgres
