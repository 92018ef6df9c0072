// sqlq_wake_probe: how fast a waiting claim on MariaDB/MySQL learns of a
// send from another process, and what waiting costs the server, for the two
// designs of issue 4 (docs/engines/mysql.md, "Wake-ups"):
//
//  poll     what sqlq does: the engine polls sqlq_counters with a capped
//           backoff (2 ms doubling to 50 ms) while a claim waits. Measured
//           through the library: one store waits, another sends.
//  get_lock a hand-off over GET_LOCK: a "doorbell" connection holds a named
//           lock; the waiter blocks in GET_LOCK(name, 1); after a send the
//           doorbell releases the lock, the waiter gets it, lets it go and
//           claims. A prototype only, to compare with.
//
// Latency: from the start of the send to the waiting claim returning the
// message. Idle cost: statements the server executes per second (its global
// Questions counter) while one claim waits and nothing is sent, so run it
// on a server nothing else uses.
//
//   sqlq_wake_probe mysql://root:pw@127.0.0.1:3306/db [rounds]

#include <mysql.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "sqlq/queue.h"
#include "sqlq/store.h"

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Parts {
  std::string user, password, host = "127.0.0.1", db;
  unsigned int port = 3306;
};

Parts Parse(const std::string& url) {
  Parts p;
  std::string rest = url.substr(url.find("://") + 3);
  rest = rest.substr(0, rest.find('?'));
  p.db = rest.substr(rest.find('/') + 1);
  rest = rest.substr(0, rest.find('/'));
  if (auto at = rest.rfind('@'); at != std::string::npos) {
    std::string ui = rest.substr(0, at);
    rest = rest.substr(at + 1);
    p.user = ui.substr(0, ui.find(':'));
    if (ui.find(':') != std::string::npos) {
      p.password = ui.substr(ui.find(':') + 1);
    }
  }
  if (auto c = rest.rfind(':'); c != std::string::npos) {
    p.port = static_cast<unsigned int>(std::stoul(rest.substr(c + 1)));
    rest = rest.substr(0, c);
  }
  if (!rest.empty()) p.host = rest;
  return p;
}

MYSQL* Connect(const Parts& p) {
  MYSQL* m = mysql_init(nullptr);
  if (mysql_real_connect(m, p.host.c_str(), p.user.c_str(), p.password.c_str(),
                         p.db.c_str(), p.port, nullptr, 0) == nullptr) {
    std::fprintf(stderr, "connect: %s\n", mysql_error(m));
    std::exit(1);
  }
  return m;
}

long long Scalar(MYSQL* m, const std::string& sql, int col = 0) {
  if (mysql_query(m, sql.c_str()) != 0) {
    std::fprintf(stderr, "%s: %s\n", sql.c_str(), mysql_error(m));
    std::exit(1);
  }
  MYSQL_RES* res = mysql_store_result(m);
  long long v = -1;
  if (res != nullptr) {
    MYSQL_ROW row = mysql_fetch_row(res);
    if (row != nullptr && row[col] != nullptr) v = std::atoll(row[col]);
    mysql_free_result(res);
  }
  return v;
}

long long Questions(MYSQL* m) {
  return Scalar(m, "SHOW GLOBAL STATUS LIKE 'Questions'", 1);
}

void Report(const char* design, std::vector<double> ms, double idle_qps) {
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) {
    return ms[std::min(ms.size() - 1, static_cast<std::size_t>(q * ms.size()))];
  };
  std::printf(
      "%-8s wake p50 %.2f ms  p90 %.2f ms  max %.2f ms  (%zu rounds)  "
      "idle %.1f statements/s\n",
      design, at(0.5), at(0.9), ms.back(), ms.size(), idle_qps);
}

void Die(const sqlq::Status& s) {
  std::fprintf(stderr, "%s\n", s.ToString().c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s mysql://user:pw@host:port/db [rounds]\n",
                 argv[0]);
    return 2;
  }
  const std::string url = argv[1];
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 30;
  const Parts parts = Parse(url);
  auto a = sqlq::Store::Open(url);
  auto b = sqlq::Store::Open(url);
  if (!a.ok()) Die(a.status());
  if (!b.ok()) Die(b.status());
  const std::string name = "wake_probe_" + std::to_string(::getpid());
  auto qa = (*a)->CreateQueue(name, {});
  if (!qa.ok()) Die(qa.status());
  auto qb = (*b)->Queue(name);
  if (!qb.ok()) Die(qb.status());
  MYSQL* admin = Connect(parts);

  // --- poll (sqlq) ---------------------------------------------------------
  std::vector<double> poll_ms;
  for (int i = 0; i < rounds; ++i) {
    auto claim = std::async(std::launch::async, [&] {
      return qa->Claim({.wait = std::chrono::seconds(10)});
    });
    // Let the claim fall asleep and the poller back off to its cap.
    std::this_thread::sleep_for(milliseconds(300));
    const auto t0 = Clock::now();
    if (auto s = qb->Send({.payload = "wake"}); !s.ok()) Die(s.status());
    auto got = claim.get();
    if (!got.ok() || got->size() != 1) Die(got.status());
    poll_ms.push_back(
        std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (auto s = qa->Ack((*got)[0].receipt); !s.ok()) Die(s);
  }
  double poll_idle;
  {
    auto claim = std::async(std::launch::async, [&] {
      return qa->Claim({.wait = std::chrono::seconds(6)});
    });
    std::this_thread::sleep_for(milliseconds(500));
    const long long q0 = Questions(admin);
    std::this_thread::sleep_for(milliseconds(5000));
    const long long q1 = Questions(admin);
    (void)claim.get();
    poll_idle = static_cast<double>(q1 - q0 - 1) / 5.0;
  }
  Report("poll", poll_ms, poll_idle);

  // --- get_lock (prototype) -------------------------------------------------
  const std::string lock = "'sqlq_probe_" + std::to_string(::getpid()) + "'";
  MYSQL* doorbell = Connect(parts);
  MYSQL* waiter = Connect(parts);
  if (Scalar(doorbell, "SELECT GET_LOCK(" + lock + ", 10)") != 1) return 1;
  std::vector<double> lock_ms;
  std::atomic<bool> stop{false};
  for (int i = 0; i < rounds + 1; ++i) {
    const bool idle_round = i == rounds;
    auto claim = std::async(std::launch::async, [&]() -> bool {
      while (!stop) {
        if (Scalar(waiter, "SELECT GET_LOCK(" + lock + ", 1)") == 1) {
          Scalar(waiter, "SELECT RELEASE_LOCK(" + lock + ")");
          auto got = qa->Claim({});
          if (got.ok() && got->size() == 1) {
            (void)qa->Ack((*got)[0].receipt);
            return true;
          }
        }
      }
      return false;
    });
    if (idle_round) {
      std::this_thread::sleep_for(milliseconds(500));
      const long long q0 = Questions(admin);
      std::this_thread::sleep_for(milliseconds(5000));
      const long long q1 = Questions(admin);
      stop = true;
      (void)claim.get();
      Report("get_lock", lock_ms, static_cast<double>(q1 - q0 - 1) / 5.0);
      break;
    }
    std::this_thread::sleep_for(milliseconds(300));
    const auto t0 = Clock::now();
    if (auto s = qb->Send({.payload = "wake"}); !s.ok()) Die(s.status());
    Scalar(doorbell, "SELECT RELEASE_LOCK(" + lock + ")");
    if (!claim.get()) return 1;
    lock_ms.push_back(
        std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (Scalar(doorbell, "SELECT GET_LOCK(" + lock + ", 10)") != 1) return 1;
  }
  (void)(*a)->DropQueue(name);
  mysql_close(waiter);
  mysql_close(doorbell);
  mysql_close(admin);
  return 0;
}
