#include "engines/postgres/notifier.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <random>

namespace sqlq::engines::postgres {

namespace {

constexpr const char* kChannel = "sqlq_changes";

std::string RandomName() {
  std::random_device rd;
  return fmt::format("{:08x}{:08x}", rd(), rd());
}

}  // namespace

Notifier::Notifier(Connector connect, std::function<void()> changed,
                   std::chrono::microseconds min_interval, ConnWatch watch)
    : connect_(std::move(connect)),
      watch_(std::move(watch)),
      changed_(std::move(changed)),
      min_interval_(min_interval),
      self_(RandomName()) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  thread_ = std::thread([this] { Loop(); });
}

Notifier::~Notifier() {
  stop_ = true;
  WakeThread();
  if (thread_.joinable()) thread_.join();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void Notifier::Poke() {
  // Only the first poke of a window costs a syscall.
  if (!pending_.exchange(true)) WakeThread();
}

void Notifier::WakeThread() {
  std::uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

void Notifier::Loop() {
  auto backoff = std::chrono::milliseconds(50);
  while (!stop_) {
    PGconn* conn = connect_();
    bool listening = false;
    if (conn != nullptr && Finish(conn)) {
      PGresult* res = PQexec(conn, "LISTEN sqlq_changes");
      listening = res != nullptr && PQresultStatus(res) == PGRES_COMMAND_OK;
      PQclear(res);
    }
    if (listening) {
      // Notifications sent before LISTEN took effect (at start, or while
      // reconnecting) never reach us: let every waiter look once. A claim
      // that began waiting while the store was opening would otherwise
      // sleep until the safety-net poll. Counted after: a test that saw
      // the count may take every waiting claim's next look as woken by a
      // later event.
      changed_();
      connects_.fetch_add(1);
      backoff = std::chrono::milliseconds(50);
      std::function<void()> unwatch;
      if (watch_) unwatch = watch_(conn);
      Serve(conn);
      if (unwatch) unwatch();
    }
    if (conn != nullptr) PQfinish(conn);
    if (stop_) break;
    // Wait before reconnecting, but wake at once for Stop.
    pollfd p{.fd = wake_fd_, .events = POLLIN, .revents = 0};
    (void)poll(&p, 1, static_cast<int>(backoff.count()));
    std::uint64_t n;
    (void)!read(wake_fd_, &n, sizeof n);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
  }
}

bool Notifier::Finish(PGconn* conn) {
  using Clock = std::chrono::steady_clock;
  // libpq leaves connect_timeout to callers of PQconnectPoll.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  PostgresPollingStatusType st = PGRES_POLLING_WRITING;
  while (st != PGRES_POLLING_OK) {
    if (st == PGRES_POLLING_FAILED || PQstatus(conn) == CONNECTION_BAD ||
        stop_) {
      return false;
    }
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd fds[2] = {
        {.fd = PQsocket(conn),
         .events =
             static_cast<short>(st == PGRES_POLLING_READING ? POLLIN : POLLOUT),
         .revents = 0},
        {.fd = wake_fd_, .events = POLLIN, .revents = 0},
    };
    if (poll(fds, 2, static_cast<int>(left.count())) < 0 && errno != EINTR) {
      return false;
    }
    if (fds[1].revents & POLLIN) {
      // A poke or Stop; pokes wait for the connection.
      std::uint64_t n;
      (void)!read(wake_fd_, &n, sizeof n);
    }
    if (fds[0].revents != 0) st = PQconnectPoll(conn);
  }
  // The wake-up of a Stop may have been read above.
  return !stop_;
}

bool Notifier::Serve(PGconn* conn) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point last_sent{};
  const char* params[2] = {kChannel, self_.c_str()};
  for (;;) {
    // Notifications may have arrived with any result read so far.
    bool foreign = false;
    while (PGnotify* n = PQnotifies(conn)) {
      if (self_ != n->extra) foreign = true;
      PQfreemem(n);
    }
    if (foreign) changed_();

    int timeout_ms = -1;
    if (pending_) {
      auto due = last_sent + min_interval_;
      auto now = Clock::now();
      if (now >= due) {
        pending_ = false;
        PGresult* res = PQexecParams(conn, "SELECT pg_notify($1, $2)", 2,
                                     nullptr, params, nullptr, nullptr, 0);
        const bool ok =
            res != nullptr && PQresultStatus(res) == PGRES_TUPLES_OK;
        PQclear(res);
        if (!ok) {
          pending_ = true;  // send it on the next connection
          return !stop_;
        }
        last_sent = Clock::now();
        continue;
      }
      timeout_ms = static_cast<int>(
          std::chrono::ceil<std::chrono::milliseconds>(due - now).count());
    }
    // Checked before every sleep: whoever read the eventfd last may have
    // taken Stop's wake-up with it.
    if (stop_) return false;
    pollfd fds[2] = {
        {.fd = PQsocket(conn), .events = POLLIN, .revents = 0},
        {.fd = wake_fd_, .events = POLLIN, .revents = 0},
    };
    if (poll(fds, 2, timeout_ms) < 0 && errno != EINTR) return !stop_;
    if (stop_) return false;
    if (fds[1].revents & POLLIN) {
      std::uint64_t n;
      (void)!read(wake_fd_, &n, sizeof n);
    }
    if (fds[0].revents & (POLLIN | POLLERR | POLLHUP)) {
      if (PQconsumeInput(conn) == 0 || PQstatus(conn) != CONNECTION_OK) {
        return !stop_;
      }
    }
  }
}

}  // namespace sqlq::engines::postgres
