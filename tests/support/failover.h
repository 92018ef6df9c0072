// What the tests of a failing-over database server share (docs/deploying.md).
//
// A server that goes dark, for tests of what a caller sees then: every
// packet sent to a loopback port is dropped (an nftables table of the
// test's own, removed again when this goes), as when the server's host is
// powered off or cut off by a network partition. The server is not told:
// nothing answers, not even a reset.
//
// Needs root and nft (Debian's nftables, which scripts/install-deps.sh
// installs); available() says whether this machine can.

#ifndef SQLQ_TESTS_SUPPORT_FAILOVER_H_
#define SQLQ_TESTS_SUPPORT_FAILOVER_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <optional>
#include <string>
#include <thread>

#include "sqlq/status.h"

namespace sqlq::test {

class Blackhole {
 public:
  static bool available() {
    return geteuid() == 0 &&
           std::system("nft list tables >/dev/null 2>&1") == 0;
  }

  // Drops every packet sent to `port` on loopback from now on.
  explicit Blackhole(unsigned port)
      : table_("sqlq_test_blackhole_" + std::to_string(port)) {
    const std::string rules =
        "table inet " + table_ +
        " { chain out { type filter hook output priority 0; policy accept; "
        "tcp dport " +
        std::to_string(port) + " drop; }; }";
    ok_ = std::system(("nft -f - <<'END'\n" + rules + "\nEND\n").c_str()) == 0;
  }
  Blackhole(const Blackhole&) = delete;
  Blackhole& operator=(const Blackhole&) = delete;
  ~Blackhole() { Lift(); }

  bool ok() const { return ok_; }
  // Packets flow again; the connections the kernel has not given up on
  // recover.
  void Lift() {
    if (!ok_) return;
    (void)std::system(("nft delete table inet " + table_).c_str());
    ok_ = false;
  }

 private:
  std::string table_;
  bool ok_ = false;
};

// Runs `call` (returning a Status) on a thread of its own while `dark` is
// in place: its status, or nullopt when it had not ended after `bound`.
// The blackhole is lifted before this returns, so that a hung call ends
// and the test can.
template <class Call>
std::optional<Status> EndsWithin(Blackhole& dark, std::chrono::seconds bound,
                                 Call call) {
  auto running = std::async(std::launch::async, call);
  const bool ended = running.wait_for(bound) == std::future_status::ready;
  dark.Lift();
  Status s = running.get();
  if (!ended) return std::nullopt;
  return s;
}

// What a call to a server that went dark may answer: try again
// (`unavailable`), or its commit's outcome is unknown; never success,
// never another error.
inline void ExpectDarkServerAnswer(const Status& s) {
  EXPECT_TRUE(s.code() == Code::kUnavailable ||
              s.code() == Code::kOutcomeUnknown)
      << s.ToString();
}

// Waits until `read()` (a server's counter of connections or sessions, the
// start of a session's last query) differs from `before`, for at most 30 s:
// the event that a client has come to that server, or asked it again.
// False when it did not.
template <class T, class Read>
bool ChangesFrom(T before, Read read) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (read() == before) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// A write refused by a server that takes no writes now (a replica, a
// primary demoted by a failover): retryable `unavailable` that says so,
// never `permission_denied`.
inline void ExpectRefusedAsReadOnly(const Status& s) {
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_TRUE(s.retryable()) << s.ToString();
  EXPECT_NE(s.message().find("read-only"), std::string::npos) << s.ToString();
}

}  // namespace sqlq::test

#endif  // SQLQ_TESTS_SUPPORT_FAILOVER_H_
