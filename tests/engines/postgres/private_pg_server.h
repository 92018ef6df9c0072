// A throwaway PostgreSQL server of one test's own (scripts/pg-test-server.sh),
// for tests that restart or halt it and so must not touch the shared one.
// Needs SQLQ_SOURCE_DIR (the checkout) defined by the build.

#ifndef SQLQ_TESTS_ENGINES_POSTGRES_PRIVATE_PG_SERVER_H_
#define SQLQ_TESTS_ENGINES_POSTGRES_PRIVATE_PG_SERVER_H_

#include <cstdlib>
#include <fstream>
#include <string>

#include "tests/support/script_vars.h"

namespace sqlq::test {

class PrivatePgServer {
 public:
  PrivatePgServer() {
    auto vars = ScriptVars(Script() + " start");
    dir_ = vars["SQLQ_TEST_PG_DIR"];
    url_ = vars["SQLQ_TEST_PG_URL"];
  }
  PrivatePgServer(const PrivatePgServer&) = delete;
  PrivatePgServer& operator=(const PrivatePgServer&) = delete;
  ~PrivatePgServer() {
    if (!dir_.empty()) (void)Run("stop");
  }

  bool ok() const { return !dir_.empty() && !url_.empty(); }
  const std::string& url() const { return url_; }
  unsigned port() const {
    return static_cast<unsigned>(std::stoul(Read("port")));
  }
  // The superuser's password (the URL's).
  std::string password() const { return Read("pwfile"); }
  // `mode`: "fast" (clean shutdown, connections cut) or "immediate" (the
  // server killed; crash recovery on start).
  bool Restart(const std::string& mode = "fast") {
    return Run("restart", " " + mode);
  }
  // Stopped with its data kept, then started again on the same port.
  bool Halt() { return Run("halt"); }
  bool Resume() { return Run("resume"); }
  // Restarted as a standby and promoted: it writes on the next timeline,
  // as the standby a failover promotes does.
  bool NewTimeline() { return Run("new-timeline"); }

 private:
  static std::string Script() {
    return std::string(SQLQ_SOURCE_DIR) + "/scripts/pg-test-server.sh";
  }
  bool Run(const std::string& verb, const std::string& extra = "") {
    return std::system((Script() + " " + verb + " " + dir_ + extra).c_str()) ==
           0;
  }

  std::string Read(const std::string& name) const {
    std::ifstream in(dir_ + "/" + name);
    std::string line;
    std::getline(in, line);
    return line;
  }

  std::string dir_, url_;
};

}  // namespace sqlq::test

#endif  // SQLQ_TESTS_ENGINES_POSTGRES_PRIVATE_PG_SERVER_H_
