// A libsqlq user: opens the SQLite database named by argv[1], sends a
// message to a queue, claims it back, checks it is the same, acks it, and
// checks the queue is then empty. Prints "ok" and exits 0, or says what
// went wrong and exits 1. Built by scripts/package-test.sh against an
// installed sqlq, once with find_package(sqlq) and once with pkg-config.

#include <cstdio>
#include <string>

#include "sqlq/store.h"

namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "consumer: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return Fail("usage: consumer DB_URL");
  auto store = sqlq::Store::Open(argv[1]);
  if (!store.ok()) return Fail("open: " + store.status().ToString());
  auto queue = (*store)->CreateQueue("consumer", {});
  if (!queue.ok()) return Fail("create: " + queue.status().ToString());
  const std::string payload = "hello from an installed libsqlq";
  auto sent = queue->Send({.payload = payload});
  if (!sent.ok()) return Fail("send: " + sent.status().ToString());
  auto claimed = queue->Claim({.max = 10});
  if (!claimed.ok()) return Fail("claim: " + claimed.status().ToString());
  if (claimed->size() != 1) {
    return Fail("claimed " + std::to_string(claimed->size()) +
                " messages, expected 1");
  }
  const auto& m = claimed->front();
  if (m.id != sent->id || m.payload != payload) {
    return Fail("claimed message " + std::to_string(m.id) + " '" + m.payload +
                "', expected " + std::to_string(sent->id) + " '" + payload +
                "'");
  }
  if (auto st = queue->Ack(m.receipt); !st.ok()) {
    return Fail("ack: " + st.ToString());
  }
  auto again = queue->Claim({.max = 10});
  if (!again.ok()) return Fail("claim: " + again.status().ToString());
  if (!again->empty()) return Fail("the queue is not empty after the ack");
  std::printf("ok: sent, claimed and acked message %lld\n",
              static_cast<long long>(m.id));
  return 0;
}
