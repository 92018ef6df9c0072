#include "engines/postgres/leader_watch.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

namespace sqlq::engines::postgres {

namespace {

// Whether the server takes writes, and on which timeline: the first eight
// hex digits of the name of the WAL file being written. A standby answers
// an empty text.
constexpr const char* kLook =
    "SELECT CASE WHEN pg_is_in_recovery() THEN '' "
    "ELSE substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END";

// How long a probe may stay connecting or unanswered, across looks, before
// it is dropped and connected afresh: as long as the connections' own
// tcp_user_timeout, past which the kernel gives up on a silent server. A
// server never heard from since the watch began counts as dark after as
// long.
constexpr std::chrono::seconds kProbeGiveUp{10};

std::string PortOr5432(const char* port) {
  return port != nullptr && *port != '\0' ? port : "5432";
}

}  // namespace

LeaderWatch::LeaderWatch(std::vector<Host> hosts,
                         std::function<PGconn*(const Host&)> start,
                         std::chrono::milliseconds every)
    : hosts_(std::move(hosts)),
      start_(std::move(start)),
      every_(every),
      probes_(hosts_.size()),
      answered_(hosts_.size()),
      // The first look one period after the store opened: a short-lived
      // store (a command of the sqlq program) opens no connection for it.
      thread_(std::make_unique<core::PeriodicThread>(
          [this, first = true]() mutable {
            if (first) {
              first = false;
              return std::chrono::steady_clock::duration(every_);
            }
            const auto started = std::chrono::steady_clock::now();
            Decide(Look());
            return every_ - (std::chrono::steady_clock::now() - started);
          })) {}

LeaderWatch::~LeaderWatch() {
  thread_.reset();
  for (Probe& p : probes_) {
    if (p.conn != nullptr) PQfinish(p.conn);
  }
  for (auto& [id, c] : conns_) {
    if (c.fd >= 0) ::close(c.fd);
  }
}

std::uint64_t LeaderWatch::Register(PGconn* conn) {
  const int fd = PQsocket(conn);
  if (fd < 0) return 0;
  const int dup = ::dup(fd);
  if (dup < 0) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  const std::uint64_t id = next_id_++;
  const char* host = PQhost(conn);
  conns_[id] = Conn{.host = {.host = host != nullptr ? host : "",
                             .port = PortOr5432(PQport(conn))},
                    .fd = dup};
  return id;
}

void LeaderWatch::Unregister(std::uint64_t id) {
  if (id == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  if (it->second.fd >= 0) ::close(it->second.fd);
  conns_.erase(it);
}

std::optional<LeaderWatch::Host> LeaderWatch::leader() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leader_;
}

std::optional<std::size_t> ChooseLeader(
    const std::vector<std::optional<std::uint32_t>>& seen,
    const std::vector<std::optional<std::uint32_t>>& earlier,
    std::uint32_t floor) {
  std::uint32_t top = 0;
  for (const auto& s : seen) {
    if (s) top = std::max(top, *s);
  }
  // No server takes writes now, or only old primaries answered.
  if (top == 0 || top < floor) return std::nullopt;
  std::optional<std::size_t> lead;
  for (std::size_t i = 0; i < seen.size(); ++i) {
    if (seen[i] == top) {
      if (lead) return std::nullopt;  // two claim the same timeline: wait
      lead = i;
      continue;
    }
    // Silent now: its last answer stands for it. One never heard may take
    // writes on this timeline too: wait for it.
    const auto known = seen[i] ? seen[i] : earlier[i];
    if (!known || *known >= top) return std::nullopt;
  }
  return lead;
}

std::vector<std::optional<std::uint32_t>> LeaderWatch::Look() {
  using Clock = std::chrono::steady_clock;
  const auto now = Clock::now();
  const auto deadline = now + every_;
  const std::size_t n = hosts_.size();
  std::vector<std::optional<std::uint32_t>> seen(n);
  auto drop = [&](Probe& p) {
    if (p.conn != nullptr) PQfinish(p.conn);
    p = Probe{};
  };
  auto send = [&](Probe& p) {
    if (PQsendQuery(p.conn, kLook) == 1) {
      p.state = State::kQuerying;
      p.since = Clock::now();
    } else {
      drop(p);
    }
  };
  for (std::size_t i = 0; i < n; ++i) {
    Probe& p = probes_[i];
    // A probe left connecting or unanswered by the last look goes on,
    // unless it has waited too long: a frozen server holds it for ever.
    if (p.state != State::kIdle && now - p.since > kProbeGiveUp) drop(p);
    if (p.state != State::kIdle) continue;
    if (p.conn != nullptr && PQstatus(p.conn) == CONNECTION_OK) {
      send(p);
      continue;
    }
    drop(p);
    p.conn = start_(hosts_[i]);
    if (p.conn == nullptr || PQstatus(p.conn) == CONNECTION_BAD) {
      drop(p);
      continue;
    }
    p.state = State::kConnecting;
    p.want = PGRES_POLLING_WRITING;
    p.since = now;
  }
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::size_t> of;
    for (std::size_t i = 0; i < n; ++i) {
      const Probe& p = probes_[i];
      if (p.state == State::kIdle) continue;
      const bool writing =
          p.state == State::kConnecting && p.want == PGRES_POLLING_WRITING;
      fds.push_back({.fd = PQsocket(p.conn),
                     .events = static_cast<short>(writing ? POLLOUT : POLLIN),
                     .revents = 0});
      of.push_back(i);
    }
    if (fds.empty()) break;
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    if (::poll(fds.data(), fds.size(), static_cast<int>(left.count())) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      Probe& p = probes_[of[k]];
      if (p.state == State::kConnecting) {
        p.want = PQconnectPoll(p.conn);
        if (p.want == PGRES_POLLING_OK) {
          send(p);
        } else if (p.want == PGRES_POLLING_FAILED) {
          drop(p);
        }
        continue;
      }
      if (PQconsumeInput(p.conn) == 0) {
        drop(p);
        continue;
      }
      if (PQisBusy(p.conn) == 1) continue;
      std::optional<std::uint32_t> answer;
      while (PGresult* r = PQgetResult(p.conn)) {
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
          const std::string_view tl(PQgetvalue(r, 0, 0));
          answer = tl.empty() ? 0u
                              : static_cast<std::uint32_t>(std::strtoul(
                                    std::string(tl).c_str(), nullptr, 16));
        }
        PQclear(r);
      }
      seen[of[k]] = answer;
      p.state = State::kIdle;
    }
  }
  return seen;
}

void LeaderWatch::Decide(
    const std::vector<std::optional<std::uint32_t>>& seen) {
  // A server silent since the watch began, for as long as a probe waits for
  // one, is dark: it does not hold the others back.
  const bool long_begun =
      std::chrono::steady_clock::now() - began_ > kProbeGiveUp;
  std::vector<std::optional<std::uint32_t>> earlier = answered_;
  for (auto& e : earlier) {
    if (!e && long_begun) e = 0;
  }
  for (std::size_t i = 0; i < seen.size(); ++i) {
    if (seen[i]) answered_[i] = seen[i];
  }
  const auto lead = ChooseLeader(seen, earlier, leader_timeline_);
  if (!lead) return;
  leader_timeline_ = *seen[*lead];
  const Host& l = hosts_[*lead];
  std::lock_guard<std::mutex> lock(mu_);
  leader_ = l;
  for (auto& [id, c] : conns_) {
    if (c.host == l || c.fd < 0) continue;
    // Both descriptors name one socket: shutting it down through ours ends
    // the call waiting on the connection's at once. Ours is a duplicate,
    // so it never names another connection's socket.
    ::shutdown(c.fd, SHUT_RDWR);
    ::close(c.fd);
    c.fd = -1;
  }
}

}  // namespace sqlq::engines::postgres
