// Runs the real sqlq program on a pseudo-terminal (forkpty), as a person at
// a terminal runs it: stdin, stdout and stderr are the terminal, so that
// isatty(0) holds and what it asks can be answered. The output is what the
// terminal shows: stdout and stderr interleaved, the answers echoed, lines
// ending "\r\n".
//
// Not thread-safe: one test thread drives its children.

#ifndef SQLQ_TESTS_CLI_CLI_PTY_H_
#define SQLQ_TESTS_CLI_CLI_PTY_H_

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tests/cli/cli_runner.h"

namespace sqlq::cli_test {

class PtyChild {
 public:
  PtyChild(const PtyChild&) = delete;
  PtyChild& operator=(const PtyChild&) = delete;
  ~PtyChild() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      (void)Finish();
    }
  }

  // Starts `binary` with `args` on a new terminal, in `cwd`, without
  // SQLQ_DB in its environment.
  PtyChild(const std::string& binary, const std::vector<std::string>& args,
           const std::string& cwd) {
    const ExecArgs exec(binary, args, std::nullopt);
    pid_ = forkpty(&master_, nullptr, nullptr, nullptr);
    if (pid_ == 0) {
      if (chdir(cwd.c_str()) != 0) _exit(126);
      execve(exec.argv()[0], exec.argv(), exec.envp());
      _exit(127);
    }
  }

  bool started() const { return pid_ > 0; }
  const std::string& output() const { return output_; }

  // Reads what the terminal shows until it holds `text` (true), the
  // program closes it, or `timeout` passes (false).
  bool WaitFor(std::string_view text, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (output_.find(text) == std::string::npos) {
      if (!ReadSome(deadline)) return false;
    }
    return true;
  }

  // Types `bytes` at the terminal.
  void Type(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t w = write(master_, bytes.data(), bytes.size());
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return;
      bytes.remove_prefix(static_cast<std::size_t>(w));
    }
  }

  // Reads until the program closes the terminal, then reaps it (killing
  // it past `timeout`): its exit code and everything the terminal showed
  // (in `out`).
  RunResult Finish(
      std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    RunResult r;
    if (pid_ <= 0) {
      r.exit_code = 127;
      return r;
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (ReadSome(deadline)) {
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid_, SIGKILL);
      r.timed_out = true;
    }
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    if (master_ >= 0) close(master_);
    master_ = -1;
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
    r.out = output_;
    return r;
  }

 private:
  // Reads once; false when the terminal is closed (EIO once the program's
  // side is gone) or the deadline passed.
  bool ReadSome(std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || master_ < 0) return false;
      pollfd p{master_, POLLIN, 0};
      int rc = poll(&p, 1, static_cast<int>(left.count()));
      if (rc < 0 && errno == EINTR) continue;
      if (rc <= 0) return false;
      char buf[4096];
      ssize_t got = read(master_, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      output_.append(buf, static_cast<std::size_t>(got));
      return true;
    }
  }

  pid_t pid_ = -1;
  int master_ = -1;
  std::string output_;
};

}  // namespace sqlq::cli_test

#endif  // SQLQ_TESTS_CLI_CLI_PTY_H_
