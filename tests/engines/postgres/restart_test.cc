// A PostgreSQL server restarted under load: callers see retryable errors (or
// outcome_unknown for commits cut off), never anything else; the store
// reconnects by itself; no acknowledged send is lost. Runs its own server
// (scripts/pg-test-server.sh), so as not to disturb the shared one.

#include <gtest/gtest.h>
#include <stdio.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "tests/conformance/engine_fixture.h"

namespace sqlq::test {
namespace {

using std::chrono::seconds;
using SteadyClock = std::chrono::steady_clock;

const std::string kScript =
    std::string(SQLQ_SOURCE_DIR) + "/scripts/pg-test-server.sh";

// A throwaway server of this test's own.
class PrivateServer {
 public:
  PrivateServer() {
    FILE* out = popen((kScript + " start").c_str(), "r");
    if (out == nullptr) return;
    char line[4096];
    while (fgets(line, sizeof line, out) != nullptr) {
      std::string l(line);
      auto value = [&](const std::string& key) -> std::string {
        const std::string prefix = "export " + key + "='";
        if (l.rfind(prefix, 0) != 0) return "";
        return l.substr(prefix.size(), l.rfind('\'') - prefix.size());
      };
      if (auto v = value("SQLQ_TEST_PG_DIR"); !v.empty()) dir_ = v;
      if (auto v = value("SQLQ_TEST_PG_URL"); !v.empty()) url_ = v;
    }
    pclose(out);
  }
  ~PrivateServer() {
    if (!dir_.empty()) (void)std::system((kScript + " stop " + dir_).c_str());
  }
  bool ok() const { return !dir_.empty() && !url_.empty(); }
  const std::string& url() const { return url_; }
  bool Restart() {
    return std::system((kScript + " restart " + dir_).c_str()) == 0;
  }

 private:
  std::string dir_, url_;
};

TEST(PostgresRestart, SendsSurviveAServerRestartWithRetryableErrorsOnly) {
  SQLQ_SKIP_UNLESS_AVAILABLE(PostgresFactory());
  PrivateServer server;
  ASSERT_TRUE(server.ok()) << "could not start a private server";
  ASSERT_OK_AND_ASSIGN(auto store, Store::Open(server.url()));
  ASSERT_OK_AND_ASSIGN(WorkQueue q, store->CreateQueue("jobs", {}));

  std::mutex mu;
  std::set<std::int64_t> acknowledged;  // ids of sends that returned OK
  std::vector<Status> errors;
  std::atomic<int> ok_sends{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> senders;
  for (int t = 0; t < 4; ++t) {
    senders.emplace_back([&, t] {
      for (int i = 0; !stop; ++i) {
        auto r =
            q.Send({.payload = std::to_string(t) + ":" + std::to_string(i)});
        std::lock_guard<std::mutex> lock(mu);
        if (r.ok()) {
          acknowledged.insert(r->id);
          ++ok_sends;
        } else {
          errors.push_back(r.status());
          // A caller would back off before trying again.
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
    });
  }
  auto wait_for_sends = [&](int n) {
    const int target = ok_sends + n;
    const auto deadline = SteadyClock::now() + seconds(30);
    while (ok_sends < target && SteadyClock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return ok_sends >= target;
  };
  EXPECT_TRUE(wait_for_sends(50));
  EXPECT_TRUE(server.Restart());
  EXPECT_TRUE(wait_for_sends(50)) << "sends did not resume after the restart";
  stop = true;
  for (auto& t : senders) t.join();

  std::string codes;
  for (const Status& s : errors) codes += std::string(CodeName(s.code())) + " ";
  RecordProperty("send_errors", codes);
  for (const Status& s : errors) {
    EXPECT_TRUE(s.retryable() || s.code() == Code::kOutcomeUnknown)
        << s.ToString();
  }
  // Every acknowledged send is stored (a send whose outcome was unknown may
  // be stored too).
  std::set<std::int64_t> stored;
  for (;;) {
    ASSERT_OK_AND_ASSIGN(auto got, q.Claim({.max = 1000}));
    if (got.empty()) break;
    for (auto& m : got) stored.insert(m.id);
  }
  for (std::int64_t id : acknowledged) {
    EXPECT_TRUE(stored.contains(id)) << "acknowledged send " << id << " lost";
  }
  store.reset();
}

}  // namespace
}  // namespace sqlq::test
