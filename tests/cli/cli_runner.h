// Runs the real sqlq program for the CLI contract tests: fork + execve with
// pipes, no shell, so that arguments with spaces or odd bytes arrive
// untouched. Captures stdout, stderr and the exit code; feeds stdin bytes.
//
// Not thread-safe: one test thread drives its children.

#ifndef SQLQ_TESTS_CLI_CLI_RUNNER_H_
#define SQLQ_TESTS_CLI_CLI_RUNNER_H_

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/sqlq_bin.h"

extern char** environ;

namespace sqlq::cli_test {

struct RunOptions {
  // Bytes written to the program's stdin, which is then closed. The
  // program's stdin is an empty pipe when this is empty.
  std::string stdin_bytes;
  // Value of SQLQ_DB for the program; nullopt removes SQLQ_DB from the
  // environment it inherits.
  std::optional<std::string> sqlq_db;
  // The program's working directory (so the default sqlq.db lands there).
  std::string cwd;
  // Run as this user and group (setresgid/setresuid before exec), e.g. to
  // meet a read-only file as a user chmod applies to. Requires root.
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  // The program is killed (and timed_out set) when it runs longer.
  std::chrono::milliseconds timeout{60000};
};

struct RunResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  bool timed_out = false;
  std::string out;
  std::string err;
  std::chrono::steady_clock::duration elapsed{};
};

// The argv and envp of an execve, built before fork (after it only
// async-signal-safe calls are allowed): `binary` with `args`, and this
// process's environment without SQLQ_DB, plus SQLQ_DB=`sqlq_db` when given.
class ExecArgs {
 public:
  ExecArgs(const std::string& binary, const std::vector<std::string>& args,
           const std::optional<std::string>& sqlq_db) {
    argv_s_.push_back(binary);
    argv_s_.insert(argv_s_.end(), args.begin(), args.end());
    for (auto& a : argv_s_) argv_.push_back(a.data());
    argv_.push_back(nullptr);
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "SQLQ_DB=", 8) != 0) env_s_.emplace_back(*e);
    }
    if (sqlq_db) env_s_.push_back("SQLQ_DB=" + *sqlq_db);
    for (auto& e : env_s_) envp_.push_back(e.data());
    envp_.push_back(nullptr);
  }
  ExecArgs(const ExecArgs&) = delete;
  ExecArgs& operator=(const ExecArgs&) = delete;
  char* const* argv() const { return argv_.data(); }
  char* const* envp() const { return envp_.data(); }

 private:
  std::vector<std::string> argv_s_, env_s_;
  std::vector<char*> argv_, envp_;
};

// A started program; Finish() collects it.
class Child {
 public:
  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  Child(Child&& o) noexcept { *this = std::move(o); }
  Child& operator=(Child&& o) noexcept {
    std::swap(pid_, o.pid_);
    std::swap(in_, o.in_);
    std::swap(out_, o.out_);
    std::swap(err_, o.err_);
    std::swap(stdin_bytes_, o.stdin_bytes_);
    std::swap(timeout_, o.timeout_);
    std::swap(started_, o.started_);
    return *this;
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      (void)Finish();
    }
  }

  // Starts `binary` with `args` (argv[1..]). On failure to start, pid() is
  // -1 and Finish() reports exit code 127.
  static Child Start(const std::string& binary,
                     const std::vector<std::string>& args,
                     const RunOptions& options) {
    Child c;
    c.stdin_bytes_ = options.stdin_bytes;
    c.timeout_ = options.timeout;
    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 ||
        pipe2(err, O_CLOEXEC) != 0) {
      return c;
    }
    // Everything the child needs is built before fork: after fork only
    // async-signal-safe calls are allowed.
    const ExecArgs exec(binary, args, options.sqlq_db);
    const char* cwd = options.cwd.empty() ? nullptr : options.cwd.c_str();

    c.started_ = std::chrono::steady_clock::now();
    pid_t pid = fork();
    if (pid == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      dup2(err[1], 2);
      if (cwd != nullptr && chdir(cwd) != 0) _exit(126);
      if (options.gid) {
        if (setgroups(0, nullptr) != 0) _exit(126);
        if (setresgid(*options.gid, *options.gid, *options.gid) != 0) {
          _exit(126);
        }
      }
      if (options.uid &&
          setresuid(*options.uid, *options.uid, *options.uid) != 0) {
        _exit(126);
      }
      execve(exec.argv()[0], exec.argv(), exec.envp());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    close(err[1]);
    c.pid_ = pid;
    c.in_ = in[1];
    c.out_ = out[0];
    c.err_ = err[0];
    if (pid < 0) {
      c.CloseAll();
      c.pid_ = -1;
    }
    // Writing to a program that exited early must not kill the test.
    signal(SIGPIPE, SIG_IGN);
    fcntl(c.in_, F_SETFL, O_NONBLOCK);
    return c;
  }

  pid_t pid() const { return pid_; }

  // Feeds stdin, reads stdout and stderr until both close, and reaps the
  // program (killing it past the timeout).
  RunResult Finish() {
    RunResult r;
    if (pid_ <= 0) {
      r.exit_code = 127;
      return r;
    }
    const auto deadline = started_ + timeout_;
    size_t written = 0;
    if (stdin_bytes_.empty()) CloseFd(in_);
    char buf[65536];
    while (out_ >= 0 || err_ >= 0) {
      pollfd fds[3];
      int n = 0;
      int idx_in = -1, idx_out = -1, idx_err = -1;
      if (in_ >= 0) {
        idx_in = n;
        fds[n++] = {in_, POLLOUT, 0};
      }
      if (out_ >= 0) {
        idx_out = n;
        fds[n++] = {out_, POLLIN, 0};
      }
      if (err_ >= 0) {
        idx_err = n;
        fds[n++] = {err_, POLLIN, 0};
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        kill(pid_, SIGKILL);
        r.timed_out = true;
        break;
      }
      int rc = poll(fds, n, static_cast<int>(left.count()));
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0) break;
      if (idx_in >= 0 && fds[idx_in].revents != 0) {
        ssize_t w = write(in_, stdin_bytes_.data() + written,
                          stdin_bytes_.size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN && errno != EINTR) {
          CloseFd(in_);  // the program stopped reading
        } else if (written == stdin_bytes_.size()) {
          CloseFd(in_);
        }
      }
      for (auto [idx, fd, into] : {std::tuple{idx_out, &out_, &r.out},
                                   std::tuple{idx_err, &err_, &r.err}}) {
        if (idx < 0 || fds[idx].revents == 0) continue;
        ssize_t got = read(*fd, buf, sizeof buf);
        if (got > 0) {
          into->append(buf, static_cast<size_t>(got));
        } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
          CloseFd(*fd);
        }
      }
    }
    CloseAll();
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    r.elapsed = std::chrono::steady_clock::now() - started_;
    pid_ = -1;
    if (WIFEXITED(status)) {
      r.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      r.signal = WTERMSIG(status);
    }
    return r;
  }

 private:
  static void CloseFd(int& fd) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
  void CloseAll() {
    CloseFd(in_);
    CloseFd(out_);
    CloseFd(err_);
  }

  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;
  std::string stdin_bytes_;
  std::chrono::milliseconds timeout_{60000};
  std::chrono::steady_clock::time_point started_;
};

inline RunResult Run(const std::string& binary,
                     const std::vector<std::string>& args,
                     const RunOptions& options = {}) {
  return Child::Start(binary, args, options).Finish();
}

}  // namespace sqlq::cli_test

#endif  // SQLQ_TESTS_CLI_CLI_RUNNER_H_
