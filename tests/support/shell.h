// Runs a command line through the shell, as a user would type it, and
// keeps what it printed (stdout and stderr) and its exit code.

#ifndef SQLQ_TESTS_SUPPORT_SHELL_H_
#define SQLQ_TESTS_SUPPORT_SHELL_H_

#include <stdio.h>
#include <sys/wait.h>

#include <string>

namespace sqlq::test {

struct Ran {
  int exit = -1;    // -1: it could not run, or a signal ended it
  std::string out;  // stdout and stderr
};

inline Ran Shell(const std::string& command) {
  Ran r;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.exit = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace sqlq::test

#endif  // SQLQ_TESTS_SUPPORT_SHELL_H_
