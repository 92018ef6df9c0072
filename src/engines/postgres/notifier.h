// Notifier: cross-process wake-ups over LISTEN/NOTIFY, coalesced.
//
// NOTIFY inside a send's transaction would serialise every committing
// transaction of the cluster on PostgreSQL's global notify queue lock. So no
// send transaction notifies: after a commit that made messages claimable the
// engine calls Poke(), which only sets a flag and wakes this thread; the
// thread then sends one NOTIFY on its own connection (autocommit), at most
// once per `min_interval`, however many commits poked it meanwhile. The
// same connection LISTENs; a notification from another process calls
// `changed`. The payload names the sending Notifier, so a process ignores
// its own notifications (its waiters were woken in-process already).
//
// A lost connection is re-established with capped exponential backoff; on
// reconnecting `changed` is called once, as notifications may have been
// missed. Meanwhile waiting claims still poll once a second (core), so
// nothing waits forever. docs/engines/postgres.md.

#ifndef SQLQ_ENGINES_POSTGRES_NOTIFIER_H_
#define SQLQ_ENGINES_POSTGRES_NOTIFIER_H_

#include <libpq-fe.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "engines/postgres/leader_watch.h"

namespace sqlq::engines::postgres {

// A function that starts opening a connection without blocking
// (PQconnectStartParams), or returns null. The notifier finishes it with
// PQconnectPoll, so that stopping never waits for a slow server.
using Connector = std::function<PGconn*()>;
class Notifier {
 public:
  Notifier(Connector connect, std::function<void()> changed,
           std::chrono::microseconds min_interval, ConnWatch watch = {});
  Notifier(const Notifier&) = delete;
  Notifier& operator=(const Notifier&) = delete;
  // Stops the thread; a pending NOTIFY may be dropped.
  ~Notifier();

  // Asks for a NOTIFY soon. Cheap and non-blocking: callable from any thread
  // right after a commit.
  void Poke();

  // For tests: connections (re)established so far.
  int TEST_connects() const { return connects_.load(); }
  // Whether it has listened once: notifications reach it from then on
  // (but for the moments of a reconnect).
  bool Listened() const { return connects_.load() > 0; }

 private:
  void Loop();
  // Completes a connection Connector started; false on failure, timeout
  // or Stop.
  bool Finish(PGconn* conn);
  // Runs until the connection fails or Stop; returns whether to go on.
  bool Serve(PGconn* conn);
  void WakeThread();

  Connector connect_;
  ConnWatch watch_;  // called with the connection once it listens
  std::function<void()> changed_;
  const std::chrono::microseconds min_interval_;
  const std::string self_;  // payload naming this notifier
  std::atomic<bool> pending_{false};
  std::atomic<bool> stop_{false};
  std::atomic<int> connects_{0};
  int wake_fd_ = -1;  // eventfd
  std::thread thread_;
};

}  // namespace sqlq::engines::postgres

#endif  // SQLQ_ENGINES_POSTGRES_NOTIFIER_H_
