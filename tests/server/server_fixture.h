// Starts the real `sqlq serve` (SQLQ_BIN) on port 0 with a --port-file, and
// talks to it over real HTTP on loopback: a Beast client (server_fixture.cc)
// for well-formed requests, raw sockets for what no client library would
// send.
//
// Not thread-safe, except Client objects, one per thread.

#ifndef SQLQ_TESTS_SERVER_SERVER_FIXTURE_H_
#define SQLQ_TESTS_SERVER_SERVER_FIXTURE_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/sqlq_bin.h"

namespace sqlq::server_test {

using Json = nlohmann::json;
using SteadyClock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// Polls `cond` until it holds or `timeout` passes; returns whether it held.
// A wait with a generous deadline, not a fixed sleep.
inline bool WaitFor(
    const std::function<bool()>& cond,
    std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  auto deadline = SteadyClock::now() + timeout;
  while (SteadyClock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

struct Response {
  int status = 0;
  std::string body;
  Json json;  // parsed body, or null
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
  std::map<std::string, std::string> headers;  // lower-case names
  std::string error_code() const {
    if (json.is_object() && json.contains("error")) {
      return json["error"].value("code", "");
    }
    return "";
  }
};

inline std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(c));
  return s;
}

// One keep-alive connection. Its HTTP code (Boost.Beast) lives in
// server_fixture.cc, so that the tests including this header compile without
// Beast's headers.
class Client {
 public:
  explicit Client(int port, std::string token = "");
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  void set_token(std::string t) { token_ = std::move(t); }

  // Sends one request on the connection (reconnecting once if the server
  // closed it while idle); status -1 with the reason in `body` if it failed.
  Response Call(const std::string& method, const std::string& target,
                const std::string& body = "",
                std::chrono::seconds timeout = std::chrono::seconds(30));
  Response Get(const std::string& t) { return Call("GET", t); }
  Response Post(const std::string& t, const Json& body) {
    return Call("POST", t, body.dump());
  }
  Response Delete(const std::string& t) { return Call("DELETE", t); }

 private:
  struct Connection;
  int port_;
  std::string token_;
  std::unique_ptr<Connection> conn_;
};

// A raw TCP connection for hand-written requests.
class RawConn {
 public:
  // `source`: the local address to connect from (any of 127.0.0.0/8 reaches
  // a server on 127.0.0.1), so that a test can be two clients.
  explicit RawConn(int port, const char* source = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (source != nullptr) {
      sockaddr_in from{};
      from.sin_family = AF_INET;
      ::inet_pton(AF_INET, source, &from.sin_addr);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0) {
        ::close(fd_);
        fd_ = -1;
        return;
      }
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  RawConn(const RawConn&) = delete;
  ~RawConn() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  bool Write(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }
  // Reads until the peer closes, or one whole response (by Content-Length)
  // arrived, or `timeout`. Returns what came.
  std::string ReadResponse(
      std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    auto deadline = SteadyClock::now() + timeout;
    while (true) {
      if (auto len = WholeResponseLength()) {
        std::string out = buf_.substr(0, *len);
        buf_.erase(0, *len);
        return out;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - SteadyClock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char tmp[65536];
      ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      buf_.append(tmp, static_cast<std::size_t>(n));
    }
    std::string out = std::move(buf_);
    buf_.clear();
    return out;
  }
  // Whether the server closed the connection within `timeout`.
  bool ClosedWithin(std::chrono::milliseconds timeout) {
    auto deadline = SteadyClock::now() + timeout;
    while (!closed_ && SteadyClock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - SteadyClock::now());
      if (::poll(&p, 1, static_cast<int>(std::max<long>(left.count(), 1))) <=
          0) {
        continue;
      }
      char tmp[4096];
      ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
      if (n <= 0)
        closed_ = true;
      else
        buf_.append(tmp, static_cast<std::size_t>(n));
    }
    return closed_;
  }
  const std::string& buffered() const { return buf_; }

 private:
  std::optional<std::size_t> WholeResponseLength() const {
    auto end = buf_.find("\r\n\r\n");
    if (end == std::string::npos) return std::nullopt;
    std::string head = Lower(buf_.substr(0, end));
    auto cl = head.find("content-length:");
    std::size_t len = 0;
    if (cl != std::string::npos) len = std::stoul(head.substr(cl + 15));
    if (buf_.size() < end + 4 + len) return std::nullopt;
    return end + 4 + len;
  }
  int fd_ = -1;
  std::string buf_;
  bool closed_ = false;
};

inline int StatusOf(const std::string& raw) {
  if (raw.rfind("HTTP/1.1 ", 0) != 0) return -1;
  return std::stoi(raw.substr(9, 3));
}
inline Json BodyOf(const std::string& raw) {
  auto end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return nullptr;
  auto j = Json::parse(raw.substr(end + 4), nullptr, false);
  return j.is_discarded() ? Json(nullptr) : j;
}

// The real server process.
class ServerProcess {
 public:
  // `dir` holds the database, port file and log.
  ServerProcess(fs::path dir, std::vector<std::string> extra_args = {},
                std::string db_url = "")
      : dir_(std::move(dir)), args_(std::move(extra_args)) {
    db_url_ = db_url.empty() ? "sqlite:" + (dir_ / "q.db").string() : db_url;
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      ::waitpid(pid_, &st, 0);
    }
  }

  // Starts the server and waits for its port file. Returns false (with the
  // log in `log()`) when it exits or does not listen within 15 s.
  bool Start() {
    fs::remove(port_file());
    exited_ = false;
    port_ = 0;
    std::vector<std::string> argv = {SQLQ_BIN, "--db",
                                     db_url_,  "serve",
                                     "--port", std::to_string(fixed_port_)};
    // A test may give its own --port-file (then Start() reports a failure).
    if (std::find(args_.begin(), args_.end(), "--port-file") == args_.end()) {
      argv.insert(argv.end(), {"--port-file", port_file().string()});
    }
    argv.insert(argv.end(), args_.begin(), args_.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      int log = ::open(log_file().c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(log, 2);
      ::dup2(log, 1);
      for (auto& [k, v] : env_) ::setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> a;
      for (auto& s : argv) a.push_back(s.data());
      a.push_back(nullptr);
      ::execv(a[0], a.data());
      ::_exit(127);
    }
    bool up = WaitFor(
        [&] {
          if (Exited()) return true;
          std::ifstream f(port_file());
          int p = 0;
          if (f >> p && p > 0) {
            port_ = p;
            return true;
          }
          return false;
        },
        std::chrono::seconds(15));
    return up && port_ > 0 && !exited_;
  }

  // Whether the process has exited (reaps it and records its status).
  bool Exited() {
    if (exited_) return true;
    if (pid_ <= 0) return true;
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      status_ = st;
      pid_ = -1;
    }
    return exited_;
  }
  // Waits up to `timeout` for exit; returns the exit code, or -1 (signal or
  // still running).
  int WaitExit(std::chrono::milliseconds timeout) {
    if (!WaitFor([&] { return Exited(); }, timeout)) return -1;
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
  }
  void Signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  void Kill9() {
    Signal(SIGKILL);
    WaitExit(std::chrono::seconds(10));
  }

  // Later Starts listen on the port this one got (a restart after a kill,
  // at the address clients know).
  void KeepPort() { fixed_port_ = port_; }
  // Later Starts listen on this port (one another server holds, say).
  void UsePort(int port) { fixed_port_ = port; }

  // Environment variables for the server process (set before Start).
  void SetEnv(std::string key, std::string value) {
    env_.emplace_back(std::move(key), std::move(value));
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& db_url() const { return db_url_; }
  fs::path port_file() const { return dir_ / "port"; }
  fs::path log_file() const { return dir_ / "server.log"; }
  std::string log() const {
    std::ifstream f(log_file());
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  // A field of /proc/PID/status ("Threads", "VmRSS"), as a number.
  long ProcStatus(const std::string& field) const {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(f, line)) {
      if (line.rfind(field + ":", 0) == 0) {
        return std::stol(line.substr(field.size() + 1));
      }
    }
    return -1;
  }

 private:
  fs::path dir_;
  std::vector<std::string> args_;
  std::string db_url_;
  std::vector<std::pair<std::string, std::string>> env_;
  pid_t pid_ = -1;
  int port_ = 0;
  int fixed_port_ = 0;
  bool exited_ = false;
  int status_ = 0;
};

// Whether the server runs under a sanitizer (the asan and tsan presets, or a
// sanitized program named by $SQLQ_TEST_BIN): then its memory holds the
// sanitizer's own (ASan's quarantine of freed blocks, TSan's shadow), and
// the tests that bound the server's resident memory check it only without
// one (the dev preset's own program, which every run of scripts/test.sh
// uses first).
inline bool Sanitized() { return test::SqlqBinSanitized(); }

// How often `what` occurs in `text` (log lines, say).
inline std::size_t Occurrences(const std::string& text,
                               const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

// The value of an unlabelled metric of /metrics, or -1.
inline double Metric(Client& c, const std::string& name) {
  auto r = c.Get("/metrics");
  std::istringstream in(r.body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + " ", 0) == 0)
      return std::stod(line.substr(name.size()));
  }
  return -1;
}

// A fresh directory per test, removed afterwards.
class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           (std::string("sqlq-server-") + info->test_suite_name() + "-" +
            info->name() + "-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (HasFailure() && server_) {
      std::cerr << "---- server log ----\n" << server_->log() << "----\n";
    }
    server_.reset();
    fs::remove_all(dir_);
  }
  // Starts a server with `args`; fails the test when it does not come up.
  void StartServer(std::vector<std::string> args = {}) {
    server_.emplace(dir_, std::move(args));
    ASSERT_TRUE(server_->Start()) << server_->log();
  }
  int port() const { return server_->port(); }

  fs::path dir_;
  std::optional<ServerProcess> server_;
};

}  // namespace sqlq::server_test

#endif  // SQLQ_TESTS_SERVER_SERVER_FIXTURE_H_
