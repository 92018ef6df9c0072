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
      probes_(hosts_.size(), nullptr),
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
  for (PGconn* p : probes_) {
    if (p != nullptr) PQfinish(p);
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

std::vector<std::optional<std::uint32_t>> LeaderWatch::Look() {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + every_;
  const std::size_t n = hosts_.size();
  std::vector<std::optional<std::uint32_t>> seen(n);
  // Per server: connecting (PQconnectPoll), then the query sent, then
  // answered. A server that answers nothing by the deadline is dropped and
  // connected again next time.
  enum class State { kConnecting, kQuerying, kDone };
  std::vector<State> state(n, State::kDone);
  std::vector<PostgresPollingStatusType> want(n, PGRES_POLLING_WRITING);
  auto send = [&](std::size_t i) {
    if (PQsendQuery(probes_[i], kLook) == 1) {
      state[i] = State::kQuerying;
    } else {
      PQfinish(probes_[i]);
      probes_[i] = nullptr;
      state[i] = State::kDone;
    }
  };
  for (std::size_t i = 0; i < n; ++i) {
    if (probes_[i] != nullptr && PQstatus(probes_[i]) == CONNECTION_OK) {
      send(i);
      continue;
    }
    if (probes_[i] != nullptr) PQfinish(probes_[i]);
    probes_[i] = start_(hosts_[i]);
    if (probes_[i] == nullptr || PQstatus(probes_[i]) == CONNECTION_BAD) {
      if (probes_[i] != nullptr) PQfinish(probes_[i]);
      probes_[i] = nullptr;
      continue;
    }
    state[i] = State::kConnecting;
  }
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::size_t> of;
    for (std::size_t i = 0; i < n; ++i) {
      if (state[i] == State::kDone) continue;
      const bool writing =
          state[i] == State::kConnecting && want[i] == PGRES_POLLING_WRITING;
      fds.push_back({.fd = PQsocket(probes_[i]),
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
      const std::size_t i = of[k];
      PGconn* p = probes_[i];
      if (state[i] == State::kConnecting) {
        want[i] = PQconnectPoll(p);
        if (want[i] == PGRES_POLLING_OK) {
          send(i);
        } else if (want[i] == PGRES_POLLING_FAILED) {
          state[i] = State::kDone;
        }
        continue;
      }
      if (PQconsumeInput(p) == 0) {
        state[i] = State::kDone;
        continue;
      }
      if (PQisBusy(p) == 1) continue;
      std::optional<std::uint32_t> answer;
      while (PGresult* r = PQgetResult(p)) {
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
          const std::string_view tl(PQgetvalue(r, 0, 0));
          answer = tl.empty() ? 0u
                              : static_cast<std::uint32_t>(std::strtoul(
                                    std::string(tl).c_str(), nullptr, 16));
        }
        PQclear(r);
      }
      seen[i] = answer;
      state[i] = State::kDone;
    }
  }
  // Whatever did not answer in time is connected afresh next time: a
  // frozen server's connection would hold its unanswered query.
  for (std::size_t i = 0; i < n; ++i) {
    if (!seen[i] && probes_[i] != nullptr) {
      PQfinish(probes_[i]);
      probes_[i] = nullptr;
    }
  }
  return seen;
}

void LeaderWatch::Decide(
    const std::vector<std::optional<std::uint32_t>>& seen) {
  std::uint32_t top = 0;
  for (const auto& s : seen) {
    if (s) top = std::max(top, *s);
  }
  if (top == 0) return;  // no server takes writes now
  std::optional<std::size_t> lead;
  for (std::size_t i = 0; i < seen.size(); ++i) {
    if (seen[i] != top) continue;
    if (lead) return;  // two servers claim the same timeline: wait
    lead = i;
  }
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
