// Which server of a failover list leads, asked of each server in turn, and
// the connections to the others closed when it changes.
//
// libpq's target_session_attrs=read-write picks the first server of the
// list that takes writes, and a connection once made stays on its server.
// Two failovers leave sqlq waiting on the old primary although a new one
// leads:
//   - the old primary is frozen (its processes stopped, its storage hung,
//     its VM paused): the connections stay open, the kernel still answers
//     for them, and a call on one waits until the server runs again;
//   - the old primary still runs and takes connections, but the cluster
//     manager that should demote it is frozen itself (Patroni stopped): it
//     accepts writes whose commits wait for a synchronous standby that now
//     follows the new leader.
// The watch asks every server of the list, once a period, whether it takes
// writes and on which timeline. The server that takes writes on the
// highest timeline leads: a promotion starts a new timeline, so an old
// primary, even one that still takes writes, is on a lower one. When one
// server leads alone, every registered connection to another is shut down
// (the call on it ends at once: unavailable, or outcome_unknown for a
// commit), and new connections try the leader first.
// A server leads only when every other one is known to be on a lower
// timeline or a standby, from this look or from its last answer: one that
// has not answered yet (a loaded machine, a slow login) may take writes on
// the same timeline, and two such servers are no failover. A server that
// has never answered counts as dark once the watch has run for 10 s.
// A leader once found is never replaced by a server on a lower timeline: a
// look in which the new primary is slow to answer (a loaded machine, a
// restart) and the old one answers must not hand the lead back to the old
// one. A probe still connecting or waiting for its answer at the end of a
// look goes on in the next one (for up to 10 s), so that a server that
// takes longer than one period to answer is still heard.
#ifndef SQLQ_ENGINES_POSTGRES_LEADER_WATCH_H_
#define SQLQ_ENGINES_POSTGRES_LEADER_WATCH_H_

#include <libpq-fe.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/periodic_thread.h"

namespace sqlq::engines::postgres {

// The application_name of the watch's sessions, as pg_stat_activity shows
// them (docs/engines/postgres.md).
inline constexpr const char* kLeaderWatchName = "sqlq leader watch";

// Registers a connection that a store opens on its own (the LISTEN
// connection, the vacuums' and folds') with the store's watch, so that it
// is shut down too when another server leads; returns what unregisters it
// (called before the connection closes). Empty without a watch.
using ConnWatch = std::function<std::function<void()>(PGconn*)>;

// The index of the server in `seen` that leads: the only one that takes
// writes on the highest timeline seen, if that timeline is not lower than
// `floor` (the timeline of the last leader found) and every other server is
// known to be on a lower one. `seen`: per server, its timeline in this look
// (0: a standby; nullopt: no answer); `earlier`: per server, its last
// answer before this look (0 too for a server silent since the watch
// began, once it counts as dark; nullopt: not known yet).
std::optional<std::size_t> ChooseLeader(
    const std::vector<std::optional<std::uint32_t>>& seen,
    const std::vector<std::optional<std::uint32_t>>& earlier,
    std::uint32_t floor);

class LeaderWatch {
 public:
  struct Host {
    std::string host;
    std::string port;
    bool operator==(const Host&) const = default;
  };
  // `start(host)` begins a connection to that one server
  // (PQconnectStartParams); `every`: the period.
  LeaderWatch(std::vector<Host> hosts,
              std::function<PGconn*(const Host&)> start,
              std::chrono::milliseconds every);
  ~LeaderWatch();
  LeaderWatch(const LeaderWatch&) = delete;
  LeaderWatch& operator=(const LeaderWatch&) = delete;

  // Registers an open connection: its server (PQhost, PQport) and a
  // duplicate of its socket, which Unregister closes. Returns its id.
  std::uint64_t Register(PGconn* conn);
  void Unregister(std::uint64_t id);
  // The server that leads alone, when the last look found one.
  std::optional<Host> leader() const;

 private:
  struct Conn {
    Host host;
    int fd = -1;
  };
  // A probe's state between looks.
  enum class State { kIdle, kConnecting, kQuerying };
  struct Probe {
    PGconn* conn = nullptr;
    State state = State::kIdle;
    PostgresPollingStatusType want = PGRES_POLLING_WRITING;
    std::chrono::steady_clock::time_point since;  // connecting or querying
  };
  // One look at every server: whether it takes writes, and its timeline
  // (0: a standby; nullopt: no answer within the period).
  std::vector<std::optional<std::uint32_t>> Look();
  void Decide(const std::vector<std::optional<std::uint32_t>>& seen);

  const std::vector<Host> hosts_;
  const std::function<PGconn*(const Host&)> start_;
  const std::chrono::milliseconds every_;
  // The watch thread's own: the probes, each server's last answer, the
  // leader's timeline, and when the watch began.
  std::vector<Probe> probes_;
  std::vector<std::optional<std::uint32_t>> answered_;
  std::uint32_t leader_timeline_ = 0;
  const std::chrono::steady_clock::time_point began_ =
      std::chrono::steady_clock::now();
  mutable std::mutex mu_;  // guards what follows
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, Conn> conns_;
  std::optional<Host> leader_;
  std::unique_ptr<core::PeriodicThread> thread_;  // last: it uses the rest
};

}  // namespace sqlq::engines::postgres

#endif  // SQLQ_ENGINES_POSTGRES_LEADER_WATCH_H_
