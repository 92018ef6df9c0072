// Replication safety (issue 4, item 2): a replica that replays sqlq's
// statements reaches the same rows as the primary. Each test starts its own
// primary (binlog_format STATEMENT or MIXED) and replica with
// scripts/mariadb-test-server.sh, runs concurrent producers and consumers
// through sqlq — claims, acks, retries, lease expirations, dead letters,
// delays, deduplication, ring evictions, rotation turns — until a fixed
// number of messages is finished, waits until the replica has applied
// everything the primary logged (MASTER_GTID_WAIT: an event, not a sleep),
// and compares every table of the sqlq database on both: row counts and
// CHECKSUM TABLE. The primary's error log must hold no "Unsafe statement"
// warning, and under MIXED no statement may have been logged as rows (which
// MariaDB does with the statements it thinks unsafe). docs/engines/mysql.md
// says which statements MariaDB calls unsafe and what sqlq does about it.

#include <gtest/gtest.h>
#include <stdio.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sqlq/queue.h"
#include "sqlq/ring.h"
#include "sqlq/rotation.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "tests/conformance/engine_fixture.h"
#include "tests/engines/mysql/mariadb_servers.h"

namespace sqlq::test {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

// Row count and checksum of every base table of database `sqlq`.
struct TableState {
  std::string rows;
  std::string checksum;
  bool operator==(const TableState&) const = default;
};

std::map<std::string, TableState> Snapshot(RawConnection& conn) {
  std::map<std::string, TableState> tables;
  auto names = conn.Query(
      "SELECT table_name FROM information_schema.tables WHERE table_schema = "
      "'sqlq' AND table_type = 'BASE TABLE' ORDER BY table_name");
  EXPECT_TRUE(names.has_value()) << conn.error();
  if (!names) return tables;
  for (const auto& row : *names) {
    // Names come from the server's catalogue, not from input.
    const std::string quoted = "`" + row[0] + "`";
    TableState state;
    state.rows = conn.Value("SELECT COUNT(*) FROM " + quoted);
    auto sum = conn.Query("CHECKSUM TABLE " + quoted + " EXTENDED");
    EXPECT_TRUE(sum.has_value()) << conn.error();
    if (sum && !sum->empty()) state.checksum = sum->front().at(1);
    tables[row[0]] = state;
  }
  return tables;
}

// What differs between the two snapshots, one line per table; empty when
// they are identical.
std::string Differences(const std::map<std::string, TableState>& primary,
                        const std::map<std::string, TableState>& replica) {
  std::string out;
  for (const auto& [name, p] : primary) {
    auto it = replica.find(name);
    if (it == replica.end()) {
      out += name + ": missing on the replica\n";
    } else if (!(it->second == p)) {
      out += name + ": primary " + p.rows + " rows, checksum " + p.checksum +
             "; replica " + it->second.rows + " rows, checksum " +
             it->second.checksum + "\n";
    }
  }
  for (const auto& [name, r] : replica) {
    if (!primary.contains(name)) out += name + ": only on the replica\n";
  }
  return out;
}

// Waits until the replica has applied everything the primary has logged so
// far; fails with the replica's error when replication stopped.
void WaitForReplica(RawConnection& primary, RawConnection& replica) {
  const std::string pos = primary.Value("SELECT @@gtid_binlog_pos");
  ASSERT_FALSE(pos.empty()) << primary.error();
  // Returns 0 once applied, -1 after the timeout (seconds).
  const std::string waited =
      replica.Value("SELECT MASTER_GTID_WAIT('" + pos + "', 120)");
  auto status = replica.FirstRow("SHOW SLAVE STATUS");
  ASSERT_EQ(waited, "0") << "replica did not reach " << pos
                         << "; Slave_SQL_Running="
                         << status["Slave_SQL_Running"]
                         << " Last_SQL_Error=" << status["Last_SQL_Error"]
                         << " Last_IO_Error=" << status["Last_IO_Error"];
}

// Lines of the server's error log that report an unsafe statement.
std::string UnsafeWarnings(const MariadbServer& server) {
  std::string log = server.log(), found;
  std::size_t pos = 0;
  while ((pos = log.find("nsafe statement", pos)) != std::string::npos) {
    std::size_t start = log.rfind('\n', pos);
    std::size_t end = log.find('\n', pos);
    found += log.substr(start == std::string::npos ? 0 : start + 1,
                        end - (start == std::string::npos ? 0 : start + 1)) +
             "\n";
    pos = end == std::string::npos ? log.size() : end;
  }
  return found;
}

// Row events in the primary's binlog: under MIXED, MariaDB logs a statement
// it considers unsafe as rows instead. Returns -1 if the binlog could not be
// read.
long RowEvents(const MariadbServer& server) {
  const std::string cmd = "mariadb-binlog --no-defaults " + server.dir +
                          "/data/binlog.[0-9]* 2>/dev/null";
  FILE* out = popen(cmd.c_str(), "r");
  if (out == nullptr) return -1;
  long n = 0;
  char line[8192];
  while (fgets(line, sizeof line, out) != nullptr) {
    std::string l(line);
    if (l.find("Write_rows") != std::string::npos ||
        l.find("Update_rows") != std::string::npos ||
        l.find("Delete_rows") != std::string::npos) {
      ++n;
    }
  }
  return pclose(out) == 0 ? n : -1;
}

struct Load {
  int messages;
  int producers;
  int consumers;
};

// What the load did, from the consumers' side.
struct LoadCounts {
  std::atomic<long> acked{0}, nacked{0}, abandoned{0}, stale{0}, pushes{0},
      turns{0};
};

// Producers send `load.messages` messages (batches and single sends, some
// delayed, prioritised or deduplicated) and push to a ring; consumers claim,
// ack most, nack every 10th on its first attempt, abandon every 10th (its
// lease is cut to 1 ms with Extend and runs out; after max_attempts it
// becomes a dead letter) and turn a rotation, until every message is acked
// or dead. The queue's lease is long enough that on a starved machine other
// leases rarely run out before their ack, and short enough that one that
// does (or one a failed call left behind) comes back soon.
void RunLoad(Store& store, const Load& load, LoadCounts& counts) {
  ASSERT_OK_AND_ASSIGN(
      WorkQueue q, store.CreateQueue("jobs", {.max_attempts = 3,
                                              .lease = std::chrono::seconds(5),
                                              .backoff_base = milliseconds(1),
                                              .backoff_max = milliseconds(5)}));
  ASSERT_OK_AND_ASSIGN(Ring ring, store.CreateRing("recent", {.capacity = 3}));
  ASSERT_OK_AND_ASSIGN(Rotation rot, store.CreateRotation("relays", {}));
  for (int i = 0; i < 12; ++i) {
    ASSERT_OK(rot.Add("relay-" + std::to_string(i)));
  }

  std::atomic<int> next{0};
  std::atomic<int> producers_left{load.producers};
  std::mutex mu;
  std::vector<std::string> failures;
  auto fail = [&](const std::string& what, const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    failures.push_back(what + ": " + s.ToString());
  };
  std::vector<std::thread> threads;
  for (int p = 0; p < load.producers; ++p) {
    threads.emplace_back([&, p] {
      for (;;) {
        const int first = next.fetch_add(5);
        if (first >= load.messages) break;
        const int n = std::min(5, load.messages - first);
        std::vector<Message> batch;
        for (int i = first; i < first + n; ++i) {
          Message m{.payload = std::to_string(i),
                    .priority = static_cast<std::int32_t>(i % 3)};
          if (i % 10 == 2) m.delay = milliseconds(20);
          if (i % 10 == 3) m.dedup_key = "key-" + std::to_string(i);
          batch.push_back(std::move(m));
        }
        if (first % 2 == 0) {
          auto r = q.SendBatch(batch);
          if (!r.ok()) fail("send batch", r.status());
        } else {
          for (const Message& m : batch) {
            auto r = q.Send(m);
            if (!r.ok()) fail("send", r.status());
          }
        }
        // The same key again while the first is queued: stores nothing.
        if (first % 10 == 0) {
          auto r = q.Send({.payload = "dup",
                           .dedup_key = "key-" + std::to_string(first + 3)});
          if (!r.ok()) fail("send duplicate", r.status());
        }
        auto pushed = ring.Push("group-" + std::to_string((first + p) % 7),
                                std::to_string(first));
        if (pushed.ok()) {
          ++counts.pushes;
        } else {
          fail("push", pushed.status());
        }
      }
      --producers_left;
    });
  }
  std::atomic<bool> finished{false};
  for (int c = 0; c < load.consumers; ++c) {
    // Half the consumers claim one message at a time, the other half ten:
    // both kinds of claim and ack the engine has.
    const int max = c % 2 == 0 ? 10 : 1;
    threads.emplace_back([&, max] {
      // Well inside the CTest timeout, so that a stuck run reports its
      // failures.
      const auto deadline =
          SteadyClock::now() +
          std::chrono::minutes(load.messages <= 5000 ? 3 : 20);
      while (!finished && SteadyClock::now() < deadline) {
        auto got = q.Claim({.max = max, .wait = milliseconds(50)});
        if (!got.ok()) {
          fail("claim", got.status());
          return;
        }
        if (got->empty()) {
          if (producers_left > 0) continue;
          auto stats = q.Stats();
          if (!stats.ok()) {
            fail("stats", stats.status());
            return;
          }
          if (stats->ready + stats->delayed + stats->leased == 0) {
            finished = true;
          }
          continue;
        }
        std::vector<std::string> acks;
        for (auto& m : *got) {
          const int i = m.payload == "dup" ? -1 : std::stoi(m.payload);
          if (i % 10 == 1) {
            auto r = q.Extend(m.receipt, milliseconds(1));
            if (r.ok()) {
              ++counts.abandoned;
            } else {
              fail("extend", r.status());
            }
          } else if (i % 10 == 0 && m.attempt == 1) {
            auto r = q.Nack(m.receipt,
                            {.delay = milliseconds(0), .error = "try again"});
            if (r.ok()) {
              ++counts.nacked;
            } else if (r.status().code() == Code::kFailedPrecondition) {
              ++counts.stale;  // the lease ran out first on a slow machine
            } else {
              fail("nack", r.status());
            }
          } else {
            acks.push_back(m.receipt);
          }
        }
        if (!acks.empty()) {
          auto r = q.AckBatch(acks);
          if (!r.ok()) {
            fail("ack", r.status());
          } else {
            for (const Status& s : *r) {
              if (s.ok()) {
                ++counts.acked;
              } else if (s.code() == Code::kFailedPrecondition ||
                         s.code() == Code::kNotFound) {
                ++counts.stale;
              } else {
                fail("ack", s);
              }
            }
          }
        }
        auto turned = rot.Next(2);
        if (turned.ok()) {
          counts.turns += static_cast<long>(turned->size());
        } else {
          fail("rotation next", turned.status());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(finished) << "the queue did not empty in time";
  for (const std::string& f : failures) ADD_FAILURE() << f;
  ASSERT_OK_AND_ASSIGN(QueueStats stats, q.Stats());
  // The load did what it is meant to exercise.
  EXPECT_GT(stats.acks, 0);
  EXPECT_GT(stats.nacks, 0);
  EXPECT_GT(stats.expirations, 0);
  EXPECT_GT(stats.dead_lettered, 0);
  EXPECT_GT(counts.pushes, 7 * 3) << "the ring never evicted";
  EXPECT_GT(counts.turns, 12);
}

class MariadbReplication : public ::testing::TestWithParam<std::string> {};

// `tuning`: URL parameters of the engine (docs/engines/mysql.md).
void ReplicaMatchesPrimary(const std::string& format, const Load& load,
                           const std::string& tuning = "") {
  MariadbServers servers("start-replicated " + format);
  ASSERT_TRUE(servers.ok()) << "could not start a primary and a replica";
  {
    ASSERT_OK_AND_ASSIGN(auto store,
                         Store::Open(servers.primary().url +
                                     (tuning.empty() ? "" : "?" + tuning)));
    LoadCounts counts;
    RunLoad(*store, load, counts);
    if (::testing::Test::HasFatalFailure()) return;
    ::testing::Test::RecordProperty("acked", std::to_string(counts.acked));
    ::testing::Test::RecordProperty("abandoned",
                                    std::to_string(counts.abandoned));
  }
  RawConnection primary(servers.primary());
  RawConnection replica(servers.replica());
  ASSERT_EQ(primary.error(), "");
  ASSERT_EQ(replica.error(), "");
  WaitForReplica(primary, replica);
  auto on_primary = Snapshot(primary);
  auto on_replica = Snapshot(replica);
  long rows = 0;
  for (const auto& [name, state] : on_primary) rows += std::stol(state.rows);
  EXPECT_GT(rows, 0) << "nothing to compare: the sqlq tables are empty";
  EXPECT_EQ(Differences(on_primary, on_replica), "");
  EXPECT_EQ(UnsafeWarnings(servers.primary()), "");
  // Under MIXED a statement MariaDB thinks unsafe (or any change made at
  // READ COMMITTED) goes to the binlog as rows; sqlq's statements are safe
  // and run at REPEATABLE READ, so none does.
  const long row_events = RowEvents(servers.primary());
  ::testing::Test::RecordProperty("row_events", std::to_string(row_events));
  EXPECT_EQ(row_events, 0) << "statements logged as rows (mariadb-binlog -v "
                           << servers.primary().dir << "/data/binlog.*)";
}

TEST_P(MariadbReplication, ReplicaMatchesPrimaryAfterConcurrentLoad) {
  SQLQ_SKIP_UNLESS_MARIADB();
  ReplicaMatchesPrimary(GetParam(),
                        {.messages = 1000, .producers = 3, .consumers = 3});
}

// Four group commits in flight at once (one is the default): a process's
// own transactions then deadlock with each other, and every one that loses
// runs again, nothing lost or hung (this load once hung in the client,
// docs/engines/mysql.md).
TEST_P(MariadbReplication, ReplicaMatchesPrimaryWithFourWriteGroups) {
  SQLQ_SKIP_UNLESS_MARIADB();
  ReplicaMatchesPrimary(GetParam(),
                        {.messages = 1000, .producers = 4, .consumers = 4},
                        "write_groups=4");
}

// The same, longer and with more threads: SQLQ_SLOW=1 scripts/test.sh.
TEST_P(MariadbReplication, SlowReplicaMatchesPrimaryAfterLongLoad) {
  SQLQ_SKIP_UNLESS_MARIADB();
  ReplicaMatchesPrimary(GetParam(),
                        {.messages = 30000, .producers = 6, .consumers = 8});
}

INSTANTIATE_TEST_SUITE_P(Formats, MariadbReplication,
                         ::testing::Values("STATEMENT", "MIXED"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return p.param;
                         });

// The checks above cannot pass by not looking: a replica changed behind the
// primary's back is reported, both by row count and by content, and an
// unsafe statement on the primary shows in its log.
TEST(MariadbReplicationCheck, ChecksSeeADivergedReplicaAndAnUnsafeStatement) {
  SQLQ_SKIP_UNLESS_MARIADB();
  MariadbServers servers("start-replicated STATEMENT");
  ASSERT_TRUE(servers.ok()) << "could not start a primary and a replica";
  {
    ASSERT_OK_AND_ASSIGN(auto store, Store::Open(servers.primary().url));
    ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));
    for (int i = 0; i < 20; ++i) ASSERT_OK(q.Send({.payload = "m"}));
  }
  RawConnection primary(servers.primary());
  RawConnection replica(servers.replica());
  ASSERT_EQ(primary.error(), "");
  ASSERT_EQ(replica.error(), "");
  ASSERT_TRUE(primary.Query("CREATE TABLE probe (id INT PRIMARY KEY, v INT)"))
      << primary.error();
  ASSERT_TRUE(primary.Query("INSERT INTO probe VALUES (1, 10), (2, 20)"))
      << primary.error();
  WaitForReplica(primary, replica);
  ASSERT_EQ(Differences(Snapshot(primary), Snapshot(replica)), "");

  // Same row count, different content.
  ASSERT_TRUE(replica.Query("UPDATE probe SET v = 11 WHERE id = 1"))
      << replica.error();
  std::string diff = Differences(Snapshot(primary), Snapshot(replica));
  EXPECT_NE(diff.find("probe"), std::string::npos) << diff;

  // A message row missing on the replica.
  auto tables = Snapshot(primary);
  std::string fullest;
  for (const auto& [name, state] : tables) {
    if (name != "probe" &&
        (fullest.empty() ||
         std::stol(state.rows) > std::stol(tables[fullest].rows))) {
      fullest = name;
    }
  }
  ASSERT_FALSE(fullest.empty());
  ASSERT_GE(std::stol(tables[fullest].rows), 20);
  ASSERT_TRUE(replica.Query("DELETE FROM `" + fullest + "` LIMIT 1"))
      << replica.error();
  diff = Differences(Snapshot(primary), Snapshot(replica));
  EXPECT_NE(diff.find(fullest), std::string::npos) << diff;

  EXPECT_EQ(UnsafeWarnings(servers.primary()), "");
  ASSERT_TRUE(primary.Query("DELETE FROM probe ORDER BY id LIMIT 1"))
      << primary.error();
  EXPECT_NE(UnsafeWarnings(servers.primary()), "");
}

}  // namespace
}  // namespace sqlq::test
