// Concurrency on one SQLite file: many threads of one Store, and many
// processes each with its own Store, as workers on one machine would run.
// What a user relies on: every message is delivered exactly once while no
// lease expires, contention never surfaces as an error (SQLITE_BUSY), a
// consumer killed mid-lease loses nothing, and a waiting claim is woken by
// another process's send within milliseconds.
//
// Children are fork()ed while the parent holds no Store (so no threads),
// open their own Store, report through pipes and end with _exit(): they
// never return into the test framework. Every wait is on an event (a pipe,
// a process exit, a claim with a wait), never a sleep.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"
#include "sqlq/worker.h"

namespace sqlq::multiprocess_test {
namespace {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr auto kChildTimeout = std::chrono::seconds(120);

std::int64_t Us(Timestamp t) { return t.time_since_epoch().count(); }
std::int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/sqlq-mp-XXXXXX";
    if (mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  std::string url() const { return "sqlite:" + path_ + "/q.db"; }
  bool ok() const { return !path_.empty(); }

 private:
  std::string path_;
};

// A pipe whose ends close when it goes (or when closed explicitly, as the
// side that does not use an end must do after fork).
class Pipe {
 public:
  Pipe() {
    int fds[2];
    if (pipe(fds) == 0) {
      r_ = fds[0];
      w_ = fds[1];
    }
  }
  Pipe(const Pipe&) = delete;
  ~Pipe() {
    CloseRead();
    CloseWrite();
  }
  int r() const { return r_; }
  int w() const { return w_; }
  void CloseRead() {
    if (r_ >= 0) close(r_);
    r_ = -1;
  }
  void CloseWrite() {
    if (w_ >= 0) close(w_);
    w_ = -1;
  }

 private:
  int r_ = -1, w_ = -1;
};

bool WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Reads one byte; false on EOF or error.
bool ReadByte(int fd, char* c) {
  for (;;) {
    ssize_t n = read(fd, c, 1);
    if (n < 0 && errno == EINTR) continue;
    return n == 1;
  }
}

// Reads lines from a child's pipe, failing (nullopt) on EOF or at the
// deadline, so that a stuck child fails the test instead of hanging it.
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  std::optional<std::string> Next(SteadyClock::time_point deadline) {
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<milliseconds>(deadline -
                                                           SteadyClock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p = {fd_, POLLIN, 0};
      int rc = poll(&p, 1, static_cast<int>(left.count()));
      if (rc < 0 && errno == EINTR) continue;
      if (rc <= 0) return std::nullopt;
      char chunk[4096];
      ssize_t n = read(fd_, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::nullopt;
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

 private:
  int fd_;
  std::string buf_;
};

// Reads every fd to EOF at once (so that no child blocks on a full pipe
// while we read another); stops at the deadline.
std::vector<std::string> ReadAllToEof(const std::vector<int>& fds,
                                      SteadyClock::time_point deadline) {
  std::vector<std::string> out(fds.size());
  std::vector<bool> open(fds.size(), true);
  for (;;) {
    std::vector<pollfd> p;
    std::vector<size_t> which;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (open[i]) {
        p.push_back({fds[i], POLLIN, 0});
        which.push_back(i);
      }
    }
    if (p.empty()) return out;
    auto left =
        std::chrono::duration_cast<milliseconds>(deadline - SteadyClock::now());
    if (left.count() <= 0) return out;
    int rc = poll(p.data(), p.size(), static_cast<int>(left.count()));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return out;
    for (size_t k = 0; k < p.size(); ++k) {
      if (p[k].revents == 0) continue;
      char chunk[65536];
      ssize_t n = read(p[k].fd, chunk, sizeof chunk);
      if (n > 0) {
        out[which[k]].append(chunk, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        open[which[k]] = false;
      }
    }
  }
}

// Runs `body` in a forked child and ends the child with its return value.
// The child never returns into the test framework.
template <typename Fn>
pid_t ForkChild(Fn body) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    int rc = 1;
    try {
      rc = body();
    } catch (...) {
      rc = 99;
    }
    _exit(rc);
  }
  return pid;
}

// "exit N" or "signal N": how a child ended.
std::string WaitChild(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return "waitpid failed";
  }
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "unknown";
}

// The lines of a child's report that start with `prefix ` (prefix removed).
std::vector<std::string> LinesWith(const std::string& report,
                                   const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(report);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix + " ", 0) == 0) {
      out.push_back(line.substr(prefix.size() + 1));
    }
  }
  return out;
}

// In a child: reports a failed call and returns the child's exit code.
int ChildFail(int fd, std::string_view what, const Status& s) {
  WriteAll(fd, "error " + std::string(what) + ": " + s.ToString() + "\n");
  return 1;
}

// Claims (up to a random 1..10 at a time) and acks until a claim finds
// nothing; every id claimed goes to `ids`. Any failed call ends it.
Status DrainQueue(WorkQueue& q, std::mt19937& rng,
                  std::vector<std::int64_t>& ids) {
  std::uniform_int_distribution<int> max(1, 10);
  for (;;) {
    auto c = q.Claim({.max = max(rng)});
    if (!c.ok()) return c.status().WithContext("claim");
    if (c->empty()) return Status::Ok();
    std::vector<std::string> receipts;
    for (const ClaimedMessage& m : *c) {
      ids.push_back(m.id);
      receipts.push_back(m.receipt);
    }
    auto acked = q.AckBatch(receipts);
    if (!acked.ok()) return acked.status().WithContext("ack");
    for (const Status& s : *acked) {
      if (!s.ok()) return s.WithContext("ack");
    }
  }
}

// Creates queue "jobs" with `options` and sends `n` messages ("m0"...);
// returns their ids. The Store is closed again before returning, so that
// the caller may fork without threads.
std::vector<std::int64_t> Prepare(const std::string& url, int n,
                                  const QueueOptions& options) {
  std::vector<std::int64_t> ids;
  auto store = Store::Open(url);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return ids;
  auto q = (*store)->CreateQueue("jobs", options);
  EXPECT_TRUE(q.ok()) << q.status().ToString();
  if (!q.ok()) return ids;
  for (int start = 0; start < n; start += 1000) {
    std::vector<Message> batch;
    for (int i = start; i < std::min(n, start + 1000); ++i) {
      batch.push_back({.payload = "m" + std::to_string(i)});
    }
    auto r = q->SendBatch(batch);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return ids;
    for (const SendResult& s : *r) ids.push_back(s.id);
  }
  return ids;
}

Result<QueueStats> StatsOf(const std::string& url) {
  auto store = Store::Open(url, {.create_if_missing = false});
  if (!store.ok()) return store.status();
  auto q = (*store)->Queue("jobs");
  if (!q.ok()) return q.status();
  return q->Stats();
}

// Each of `expected` exactly once in `got`; describes the first mismatch.
::testing::AssertionResult ExactlyOnce(std::vector<std::int64_t> got,
                                       std::vector<std::int64_t> expected) {
  std::map<std::int64_t, int> seen;
  for (auto id : got) ++seen[id];
  for (auto& [id, n] : seen) {
    if (n > 1) {
      return ::testing::AssertionFailure()
             << "message " << id << " delivered " << n << " times";
    }
  }
  std::sort(got.begin(), got.end());
  std::sort(expected.begin(), expected.end());
  std::vector<std::int64_t> missing, extra;
  std::set_difference(expected.begin(), expected.end(), got.begin(), got.end(),
                      std::back_inserter(missing));
  std::set_difference(got.begin(), got.end(), expected.begin(), expected.end(),
                      std::back_inserter(extra));
  if (!missing.empty() || !extra.empty()) {
    return ::testing::AssertionFailure()
           << missing.size() << " messages never delivered (first "
           << (missing.empty() ? 0 : missing[0]) << "), " << extra.size()
           << " unknown ids delivered";
  }
  return ::testing::AssertionSuccess();
}

// True once thread `tid` of this process sleeps in futex(2), which for a
// thread inside a waiting Claim means: it looked, found nothing, and now
// waits to be woken. False at the deadline.
bool WaitUntilBlockedInFutex(pid_t tid, SteadyClock::time_point deadline) {
  const std::string path =
      "/proc/self/task/" + std::to_string(tid) + "/syscall";
  while (SteadyClock::now() < deadline) {
    std::ifstream in(path);
    std::string s((std::istreambuf_iterator<char>(in)),
                  std::istreambuf_iterator<char>());
    if (s.rfind(std::to_string(SYS_futex) + " ", 0) == 0) return true;
    std::this_thread::yield();
  }
  return false;
}

// ---------------------------------------------------------------------------

TEST(SqliteMultiProcess, EightThreadsClaimEveryMessageExactlyOnce) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::vector<std::int64_t> sent =
      Prepare(dir.url(), 4000, {.lease = hours(1)});
  ASSERT_EQ(sent.size(), 4000u);

  auto store = Store::Open(dir.url());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto q = (*store)->Queue("jobs");
  ASSERT_TRUE(q.ok()) << q.status().ToString();

  constexpr int kThreads = 8;
  std::latch start(kThreads);
  std::vector<std::vector<std::int64_t>> got(kThreads);
  std::vector<Status> failed(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1000 + t);
      WorkQueue mine = *q;
      start.arrive_and_wait();
      failed[t] = DrainQueue(mine, rng, got[t]);
    });
  }
  for (auto& th : threads) th.join();

  std::vector<std::int64_t> all;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(failed[t].ok())
        << "thread " << t << ": " << failed[t].ToString();
    EXPECT_FALSE(got[t].empty()) << "thread " << t << " got nothing";
    all.insert(all.end(), got[t].begin(), got[t].end());
  }
  EXPECT_TRUE(ExactlyOnce(all, sent));
  auto stats = q->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->ready, 0);
  EXPECT_EQ(stats->leased, 0);
  EXPECT_EQ(stats->claims, 4000);
  EXPECT_EQ(stats->acks, 4000);
  EXPECT_EQ(stats->expirations, 0);
}

TEST(SqliteMultiProcess, FourProcessesClaimEveryMessageExactlyOnce) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::vector<std::int64_t> sent =
      Prepare(dir.url(), 4000, {.lease = hours(1)});
  ASSERT_EQ(sent.size(), 4000u);

  constexpr int kChildren = 4;
  Pipe go;
  std::vector<std::unique_ptr<Pipe>> reports;
  std::vector<pid_t> pids;
  for (int i = 0; i < kChildren; ++i) {
    reports.push_back(std::make_unique<Pipe>());
    Pipe& report = *reports.back();
    pids.push_back(ForkChild([&, i]() -> int {
      go.CloseWrite();
      report.CloseRead();
      const int out = report.w();
      char c;
      if (!ReadByte(go.r(), &c)) return 2;  // all start together
      auto store = Store::Open(dir.url(), {.create_if_missing = false});
      if (!store.ok()) return ChildFail(out, "open", store.status());
      auto q = (*store)->Queue("jobs");
      if (!q.ok()) return ChildFail(out, "queue", q.status());
      std::mt19937 rng(2000 + i);
      std::vector<std::int64_t> ids;
      Status s = DrainQueue(*q, rng, ids);
      std::string text;
      for (auto id : ids) text += "id " + std::to_string(id) + "\n";
      WriteAll(out, text);
      if (!s.ok()) return ChildFail(out, "drain", s);
      WriteAll(out, "done\n");
      return 0;
    }));
    ASSERT_GT(pids.back(), 0);
    report.CloseWrite();
  }
  go.CloseRead();
  ASSERT_TRUE(WriteAll(go.w(), std::string(kChildren, 'g')));

  std::vector<int> fds;
  for (auto& p : reports) fds.push_back(p->r());
  auto out = ReadAllToEof(fds, SteadyClock::now() + kChildTimeout);
  std::vector<std::int64_t> all;
  for (int i = 0; i < kChildren; ++i) {
    EXPECT_EQ(WaitChild(pids[i]), "exit 0") << "child " << i << ":\n" << out[i];
    EXPECT_EQ(LinesWith(out[i], "error"), std::vector<std::string>{});
    EXPECT_NE(out[i].find("done\n"), std::string::npos) << out[i];
    auto ids = LinesWith(out[i], "id");
    EXPECT_FALSE(ids.empty()) << "child " << i << " got nothing";
    for (const auto& id : ids) all.push_back(std::stoll(id));
  }
  EXPECT_TRUE(ExactlyOnce(all, sent));
  auto stats = StatsOf(dir.url());
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->ready, 0);
  EXPECT_EQ(stats->leased, 0);
  EXPECT_EQ(stats->claims, 4000);
  EXPECT_EQ(stats->acks, 4000);
}

// Two processes send one message per commit while two others claim and
// ack: every call returns ok (contention never shows as kBusy), and each
// message arrives exactly once.
TEST(SqliteMultiProcess, ProducerAndConsumerProcessesNeverSeeBusy) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(Prepare(dir.url(), 0, {.lease = hours(1)}).empty());
  ASSERT_FALSE(::testing::Test::HasFailure());

  constexpr int kProducers = 2, kConsumers = 2, kPerProducer = 600;
  Pipe go, stop;
  std::vector<std::unique_ptr<Pipe>> reports;
  std::vector<pid_t> producers, consumers;
  auto child_setup = [&](Pipe& report) {
    go.CloseWrite();
    stop.CloseWrite();
    report.CloseRead();
  };
  for (int p = 0; p < kProducers; ++p) {
    reports.push_back(std::make_unique<Pipe>());
    Pipe& report = *reports.back();
    producers.push_back(ForkChild([&, p]() -> int {
      child_setup(report);
      const int out = report.w();
      char c;
      if (!ReadByte(go.r(), &c)) return 2;
      auto store = Store::Open(dir.url(), {.create_if_missing = false});
      if (!store.ok()) return ChildFail(out, "open", store.status());
      auto q = (*store)->Queue("jobs");
      if (!q.ok()) return ChildFail(out, "queue", q.status());
      for (int i = 0; i < kPerProducer; ++i) {
        auto r = q->Send(
            {.payload = "p" + std::to_string(p) + "-" + std::to_string(i)});
        if (!r.ok()) return ChildFail(out, "send", r.status());
      }
      WriteAll(out, "done\n");
      return 0;
    }));
    ASSERT_GT(producers.back(), 0);
    report.CloseWrite();
  }
  for (int k = 0; k < kConsumers; ++k) {
    reports.push_back(std::make_unique<Pipe>());
    Pipe& report = *reports.back();
    consumers.push_back(ForkChild([&, k]() -> int {
      child_setup(report);
      const int out = report.w();
      char c;
      if (!ReadByte(go.r(), &c)) return 2;
      auto store = Store::Open(dir.url(), {.create_if_missing = false});
      if (!store.ok()) return ChildFail(out, "open", store.status());
      auto q = (*store)->Queue("jobs");
      if (!q.ok()) return ChildFail(out, "queue", q.status());
      std::mt19937 rng(3000 + k);
      std::uniform_int_distribution<int> max(1, 10);
      std::string text;
      // Until the parent says every producer is done (all sends
      // committed), keep claiming with a short wait; after that, a claim
      // that finds nothing means the queue is drained.
      bool stopping = false;
      for (;;) {
        if (!stopping) {
          pollfd p = {stop.r(), POLLIN, 0};
          stopping = poll(&p, 1, 0) == 1;
        }
        auto got =
            q->Claim({.max = max(rng),
                      .wait = stopping ? milliseconds(0) : milliseconds(200)});
        if (!got.ok()) return ChildFail(out, "claim", got.status());
        if (got->empty()) {
          if (stopping) break;
          continue;
        }
        std::vector<std::string> receipts;
        for (const ClaimedMessage& m : *got) {
          text += "payload " + m.payload + "\n";
          receipts.push_back(m.receipt);
        }
        auto acked = q->AckBatch(receipts);
        if (!acked.ok()) return ChildFail(out, "ack", acked.status());
        for (const Status& s : *acked) {
          if (!s.ok()) return ChildFail(out, "ack", s);
        }
      }
      WriteAll(out, text + "done\n");
      return 0;
    }));
    ASSERT_GT(consumers.back(), 0);
    report.CloseWrite();
  }
  go.CloseRead();
  stop.CloseRead();
  ASSERT_TRUE(WriteAll(go.w(), std::string(kProducers + kConsumers, 'g')));

  const auto deadline = SteadyClock::now() + kChildTimeout;
  std::vector<int> producer_fds, consumer_fds;
  for (int i = 0; i < kProducers; ++i) producer_fds.push_back(reports[i]->r());
  for (int i = 0; i < kConsumers; ++i) {
    consumer_fds.push_back(reports[kProducers + i]->r());
  }
  // Producers first: once both have exited, every send is committed.
  auto produced = ReadAllToEof(producer_fds, deadline);
  for (int p = 0; p < kProducers; ++p) {
    EXPECT_EQ(WaitChild(producers[p]), "exit 0") << "producer " << p << ":\n"
                                                 << produced[p];
    EXPECT_EQ(produced[p], "done\n");
  }
  ASSERT_TRUE(WriteAll(stop.w(), std::string(kConsumers, 's')));
  auto consumed = ReadAllToEof(consumer_fds, deadline);
  std::multiset<std::string> payloads;
  for (int k = 0; k < kConsumers; ++k) {
    EXPECT_EQ(WaitChild(consumers[k]), "exit 0") << "consumer " << k << ":\n"
                                                 << consumed[k];
    EXPECT_EQ(LinesWith(consumed[k], "error"), std::vector<std::string>{});
    for (auto& p : LinesWith(consumed[k], "payload")) payloads.insert(p);
  }
  std::multiset<std::string> expected;
  for (int p = 0; p < kProducers; ++p) {
    for (int i = 0; i < kPerProducer; ++i) {
      expected.insert("p" + std::to_string(p) + "-" + std::to_string(i));
    }
  }
  EXPECT_EQ(payloads.size(), expected.size());
  EXPECT_TRUE(payloads == expected) << "some message was lost or duplicated";
  auto stats = StatsOf(dir.url());
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->sends, kProducers * kPerProducer);
  EXPECT_EQ(stats->acks, kProducers * kPerProducer);
  EXPECT_EQ(stats->ready, 0);
  EXPECT_EQ(stats->leased, 0);
}

// A consumer is killed (SIGKILL: no cleanup at all) while it holds leases.
// Its messages come back once the leases run out, on their second attempt,
// and not before.
TEST(SqliteMultiProcess, MessagesOfAKilledConsumerComeBackAfterTheLease) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  constexpr int kN = 5;
  const std::vector<std::int64_t> sent = Prepare(dir.url(), kN, {});
  ASSERT_EQ(sent.size(), static_cast<size_t>(kN));

  Pipe report, never;
  pid_t pid = ForkChild([&]() -> int {
    report.CloseRead();
    never.CloseWrite();
    const int out = report.w();
    auto store = Store::Open(dir.url(), {.create_if_missing = false});
    if (!store.ok()) return ChildFail(out, "open", store.status());
    auto q = (*store)->Queue("jobs");
    if (!q.ok()) return ChildFail(out, "queue", q.status());
    auto c = q->Claim({.max = kN, .lease = seconds(1)});
    if (!c.ok()) return ChildFail(out, "claim", c.status());
    std::string text;
    for (const ClaimedMessage& m : *c) {
      text += "claimed " + std::to_string(m.id) + " " +
              std::to_string(m.attempt) + " " +
              std::to_string(Us(m.lease_expires_at)) + "\n";
    }
    WriteAll(out, text + "holding\n");
    char ch;
    (void)ReadByte(never.r(), &ch);  // blocks until killed
    return 3;
  });
  ASSERT_GT(pid, 0);
  report.CloseWrite();
  never.CloseRead();

  // Wait for the child to say it holds the leases, then kill it.
  LineReader lines(report.r());
  std::map<std::int64_t, std::int64_t> expiry_us;  // id -> lease expiry
  const auto deadline = SteadyClock::now() + kChildTimeout;
  for (;;) {
    auto line = lines.Next(deadline);
    if (!line) {
      kill(pid, SIGKILL);
      WaitChild(pid);
      FAIL() << "the consumer never reported its claim";
    }
    if (*line == "holding") break;
    std::istringstream in(*line);
    std::string word;
    std::int64_t id = 0, expires = 0;
    int attempt = 0;
    in >> word >> id >> attempt >> expires;
    ASSERT_EQ(word, "claimed") << *line;
    EXPECT_EQ(attempt, 1);
    expiry_us[id] = expires;
  }
  ASSERT_EQ(expiry_us.size(), static_cast<size_t>(kN));
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  EXPECT_EQ(WaitChild(pid), "signal " + std::to_string(SIGKILL));

  auto store = Store::Open(dir.url(), {.create_if_missing = false});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto q = (*store)->Queue("jobs");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  // The lease a claim takes tells when it claimed: expiry - lease.
  constexpr auto kLease = seconds(30);
  std::vector<std::int64_t> back;
  while (back.size() < static_cast<size_t>(kN) &&
         SteadyClock::now() < deadline) {
    auto c = q->Claim({.max = kN, .lease = kLease, .wait = seconds(20)});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_FALSE(c->empty()) << "nothing came back within 20s";
    for (const ClaimedMessage& m : *c) {
      back.push_back(m.id);
      EXPECT_EQ(m.attempt, 2) << "message " << m.id;
      auto at = std::find(sent.begin(), sent.end(), m.id);
      ASSERT_NE(at, sent.end()) << m.id;
      EXPECT_EQ(m.payload, "m" + std::to_string(at - sent.begin()));
      ASSERT_TRUE(expiry_us.contains(m.id)) << m.id;
      const std::int64_t claimed_at =
          Us(m.lease_expires_at) -
          std::chrono::duration_cast<std::chrono::microseconds>(kLease).count();
      EXPECT_GE(claimed_at, expiry_us[m.id])
          << "message " << m.id << " was handed out again "
          << (expiry_us[m.id] - claimed_at) << "us before its lease ran out";
    }
  }
  EXPECT_TRUE(ExactlyOnce(back, sent));
  auto stats = q->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->expirations, kN);
  EXPECT_EQ(stats->claims, 2 * kN);
  EXPECT_EQ(stats->leased, kN);
  EXPECT_EQ(stats->ready, 0);
}

// A Worker's ack is deferred to its next claim (or Flush): a consumer
// killed after Done and before that loses the ack, and the message comes
// back after its lease, once, and is acked once.
TEST(SqliteMultiProcess, DeferredAckLostToAKillIsRedeliveredAfterTheLease) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::vector<std::int64_t> sent = Prepare(dir.url(), 1, {});
  ASSERT_EQ(sent.size(), 1u);

  Pipe report, never;
  pid_t pid = ForkChild([&]() -> int {
    report.CloseRead();
    never.CloseWrite();
    const int out = report.w();
    auto store = Store::Open(dir.url(), {.create_if_missing = false});
    if (!store.ok()) return ChildFail(out, "open", store.status());
    auto q = (*store)->Queue("jobs");
    if (!q.ok()) return ChildFail(out, "queue", q.status());
    Worker w(*q, {.prefetch = 1, .lease = seconds(1)});
    auto m = w.Next();
    if (!m.ok()) return ChildFail(out, "next", m.status());
    if (!m->has_value()) return ChildFail(out, "next", Status::Ok());
    Status done = w.Done(**m);
    if (!done.ok()) return ChildFail(out, "done", done);
    WriteAll(out, "done " + std::to_string((*m)->id) + " " +
                      std::to_string(Us((*m)->lease_expires_at)) + "\n");
    char ch;
    (void)ReadByte(never.r(), &ch);  // blocks until killed
    return 3;
  });
  ASSERT_GT(pid, 0);
  report.CloseWrite();
  never.CloseRead();
  LineReader lines(report.r());
  const auto deadline = SteadyClock::now() + kChildTimeout;
  auto line = lines.Next(deadline);
  if (!line) {
    kill(pid, SIGKILL);
    WaitChild(pid);
    FAIL() << "the worker never reported";
  }
  std::istringstream in(*line);
  std::string word;
  std::int64_t id = 0, expires = 0;
  in >> word >> id >> expires;
  ASSERT_EQ(word, "done") << *line;
  ASSERT_EQ(id, sent[0]);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  EXPECT_EQ(WaitChild(pid), "signal " + std::to_string(SIGKILL));

  auto store = Store::Open(dir.url(), {.create_if_missing = false});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto q = (*store)->Queue("jobs");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  auto stats = q->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->acks, 0) << "the deferred ack was never committed";
  constexpr auto kLease = seconds(30);
  auto c = q->Claim({.lease = kLease, .wait = seconds(20)});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->size(), 1u) << "nothing came back within 20s";
  EXPECT_EQ((*c)[0].id, id);
  EXPECT_EQ((*c)[0].attempt, 2);
  const std::int64_t claimed_at =
      Us((*c)[0].lease_expires_at) -
      std::chrono::duration_cast<std::chrono::microseconds>(kLease).count();
  EXPECT_GE(claimed_at, expires) << "handed out again before its lease ran out";
  ASSERT_TRUE(q->Ack((*c)[0].receipt).ok());
  stats = q->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->acks, 1);
  EXPECT_EQ(stats->expirations, 1);
  EXPECT_EQ(stats->ready + stats->leased + stats->delayed, 0);
}

// A claim waiting in this process is woken by a send from another process
// (through the file watcher, not the 1s fallback poll). Several rounds; the
// child keeps its Store open throughout, as a producer would, so that no
// checkpoint-on-close hides a missed wake-up.
TEST(SqliteMultiProcess, WaitingClaimIsWokenBySendFromAnotherProcess) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  Prepare(dir.url(), 0, {});
  ASSERT_FALSE(::testing::Test::HasFailure());

  constexpr int kRounds = 10;
  Pipe go, report;
  pid_t pid = ForkChild([&]() -> int {
    go.CloseWrite();
    report.CloseRead();
    const int out = report.w();
    auto store = Store::Open(dir.url(), {.create_if_missing = false});
    if (!store.ok()) return ChildFail(out, "open", store.status());
    auto q = (*store)->Queue("jobs");
    if (!q.ok()) return ChildFail(out, "queue", q.status());
    WriteAll(out, "open\n");
    char c;
    while (ReadByte(go.r(), &c) && c == 's') {
      auto r = q->Send({.payload = "wake"});
      const std::int64_t sent_at = NowUs();
      if (!r.ok()) return ChildFail(out, "send", r.status());
      WriteAll(out, "sent " + std::to_string(r->id) + " " +
                        std::to_string(sent_at) + "\n");
    }
    return 0;
  });
  ASSERT_GT(pid, 0);
  go.CloseRead();
  report.CloseWrite();
  LineReader lines(report.r());
  const auto deadline = SteadyClock::now() + kChildTimeout;
  auto first = lines.Next(deadline);
  ASSERT_EQ(first, std::optional<std::string>("open"));

  auto store = Store::Open(dir.url(), {.create_if_missing = false});
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  auto q = (*store)->Queue("jobs");
  ASSERT_TRUE(q.ok()) << q.status().ToString();

  std::vector<std::int64_t> latencies_us;
  for (int round = 0; round < kRounds; ++round) {
    std::atomic<pid_t> tid{0};
    std::optional<Result<std::vector<ClaimedMessage>>> got;
    std::int64_t woke_at = 0;
    std::thread claimer([&] {
      tid = static_cast<pid_t>(syscall(SYS_gettid));
      got.emplace(q->Claim({.wait = seconds(30)}));
      woke_at = NowUs();
    });
    while (tid == 0) std::this_thread::yield();
    // Only once the claim sleeps does the other process send.
    bool asleep = WaitUntilBlockedInFutex(tid, deadline);
    EXPECT_TRUE(asleep) << "round " << round << ": the claim never slept";
    const bool asked = WriteAll(go.w(), "s");
    auto line = asked ? lines.Next(deadline) : std::nullopt;
    claimer.join();
    ASSERT_TRUE(asked) << "the producer is gone";
    ASSERT_TRUE(line.has_value()) << "the producer did not report its send";
    std::istringstream in(*line);
    std::string word;
    std::int64_t id = 0, sent_at = 0;
    in >> word >> id >> sent_at;
    ASSERT_EQ(word, "sent") << *line;
    ASSERT_TRUE(got->ok()) << got->status().ToString();
    ASSERT_EQ((*got)->size(), 1u) << "round " << round;
    EXPECT_EQ((**got)[0].id, id);
    latencies_us.push_back(woke_at - sent_at);
    // A claim that returns before the send's commit returned is fine
    // (the commit is visible a moment before Send returns).
    EXPECT_LT(woke_at - sent_at, 1'000'000)
        << "round " << round << ": woken " << (woke_at - sent_at)
        << "us after the send: the fallback poll, not the file watcher";
    auto acked = q->Ack((**got)[0].receipt);
    EXPECT_TRUE(acked.ok()) << acked.ToString();
  }
  go.CloseWrite();
  EXPECT_EQ(WaitChild(pid), "exit 0");

  std::sort(latencies_us.begin(), latencies_us.end());
  std::string all;
  for (auto l : latencies_us) all += std::to_string(l) + " ";
  std::printf(
      "cross-process wake-up latency over %zu rounds (us, sorted): %s\n"
      "median %lld us, max %lld us\n",
      latencies_us.size(), all.c_str(),
      static_cast<long long>(latencies_us[latencies_us.size() / 2]),
      static_cast<long long>(latencies_us.back()));
  ::testing::Test::RecordProperty("wake_latency_max_us",
                                  static_cast<int>(latencies_us.back()));
}

}  // namespace
}  // namespace sqlq::multiprocess_test
