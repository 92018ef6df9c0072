// An idle waiting claim must not poll the database in a loop: with nothing
// happening it looks again only on the once-a-second safety poll
// (docs/semantics.md, "Waiting").

#include <gtest/gtest.h>

#include <chrono>

#include "sqlq/store.h"
#include "tests/conformance/engine_fixture.h"

namespace sqlq::test {
namespace {

TEST(SqliteIdleWaiter, RunsAtMostAboutOneClaimPerSecond) {
  TempDir dir;
  auto store = Store::Open("sqlite:" + (dir.path() / "q.db").string());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto q = (*store)->CreateQueue("idle", {});
  ASSERT_TRUE(q.ok()) << q.status().ToString();

  const std::size_t before = (*store)->TEST_write_operations();
  const auto start = std::chrono::steady_clock::now();
  auto got = q->Claim({.wait = std::chrono::seconds(3)});
  const auto waited = std::chrono::steady_clock::now() - start;
  const std::size_t claims = (*store)->TEST_write_operations() - before;

  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(got->empty());
  EXPECT_GE(waited, std::chrono::seconds(3));
  // The first look, then one per second of waiting (3), and one spare for
  // the poll that lands on the deadline. A busy loop would make thousands.
  EXPECT_LE(claims, 5u) << "an idle waiter ran " << claims
                        << " claims in 3 seconds";
}

}  // namespace
}  // namespace sqlq::test
