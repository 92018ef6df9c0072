// `sqlq bench --server` against a real `sqlq serve` (and a real beanstalkd
// when it is installed), with tiny message counts: the output parses, every
// workload reports, and the counts add up. Figures are not judged here; they
// belong in docs/benchmarks.md.

#include <atomic>
#include <fstream>
#include <map>
#include <thread>

#include "tests/server/server_fixture.h"
#include "tests/support/shell.h"

namespace sqlq::server_test {
namespace {

struct BenchRun {
  int exit_code = -1;
  std::vector<Json> rows;  // one per output line
  std::string out;
};

BenchRun RunBench(const std::vector<std::string>& args) {
  std::string cmd = std::string(SQLQ_BIN) + " bench --json";
  for (const auto& a : args) cmd += " '" + a + "'";
  test::Ran ran = test::Shell(cmd);
  BenchRun r{.exit_code = ran.exit, .rows = {}, .out = std::move(ran.out)};
  std::stringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line)) {
    auto j = Json::parse(line, nullptr, false);
    if (!j.is_discarded()) r.rows.push_back(std::move(j));
  }
  return r;
}

// The descriptors a process holds open.
long OpenFdsOf(pid_t pid) {
  std::error_code ec;
  long n = 0;
  for (fs::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", ec),
       end;
       !ec && it != end; it.increment(ec)) {
    ++n;
  }
  return n;
}

bool HaveBeanstalkd() {
  return std::system("command -v beanstalkd >/dev/null 2>&1") == 0;
}

class ServerBench : public ServerTest {};

TEST_F(ServerBench, EveryWorkloadReportsAndCountsAddUp) {
  StartServer();
  const bool beanstalkd = HaveBeanstalkd();
  std::vector<std::string> args = {"--server",
                                   "http://127.0.0.1:" + std::to_string(port()),
                                   "--server-pid",
                                   std::to_string(server_->pid()),
                                   "--runs",
                                   "2",
                                   "--messages",
                                   "1000",
                                   "--batch",
                                   "100",
                                   "--connections",
                                   "3",
                                   "--duration",
                                   "1s",
                                   "--wake-samples",
                                   "10",
                                   "--consumers",
                                   "2",
                                   "--producers",
                                   "2",
                                   "--idle-connections",
                                   "200",
                                   "--sqs"};
  if (beanstalkd) args.push_back("--beanstalkd");
  BenchRun r = RunBench(args);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_FALSE(r.rows.empty()) << r.out;
  EXPECT_EQ(r.rows[0]["bench"], "environment");
  EXPECT_GT(r.rows[0]["fsync_per_s"].get<long>(), 0);

  std::map<std::string, Json> rows;  // "system workload" -> row
  for (const Json& row : r.rows) {
    if (row["bench"] == "environment") continue;
    rows[row["system"].get<std::string>() + " " +
         row["workload"].get<std::string>()] = row;
  }
  // "sqs": the same work through the server's SQS endpoint.
  std::vector<std::string> systems = {"sqlq", "sqs"};
  if (beanstalkd) systems.push_back("beanstalkd");
  for (const auto& sys : systems) {
    SCOPED_TRACE(sys);
    ASSERT_TRUE(rows.count(sys + " http-send-batch")) << r.out;
    const Json& sb = rows[sys + " http-send-batch"];
    EXPECT_EQ(sb["runs"], 2);
    EXPECT_GT(sb["msgs_per_s"].get<long>(), 0);
    // Every message sent in the last run is in the queue afterwards.
    EXPECT_EQ(sb["sent"], 1000);
    EXPECT_EQ(sb["left"], 1000);

    ASSERT_TRUE(rows.count(sys + " http-mixed")) << r.out;
    const Json& mx = rows[sys + " http-mixed"];
    EXPECT_GT(mx["acked"].get<long>(), 0);
    EXPECT_EQ(mx["sent"].get<long>(),
              mx["acked"].get<long>() + mx["left"].get<long>());
    EXPECT_LE(mx["p50_us"].get<long>(), mx["p99_us"].get<long>());

    ASSERT_TRUE(rows.count(sys + " http-workers")) << r.out;
    const Json& wo = rows[sys + " http-workers"];
    EXPECT_GT(wo["acked"].get<long>(), 0);
    EXPECT_EQ(wo["sent"].get<long>(),
              wo["acked"].get<long>() + wo["left"].get<long>());
    EXPECT_LE(wo["p50_us"].get<long>(), wo["p99_us"].get<long>());
    if (sys != "beanstalkd") {
      // The server's CPU time per request, read from /proc by its pid: a
      // worker's request costs the server some, and far less than a second.
      ASSERT_TRUE(wo.contains("cpu_us_per_req")) << r.out;
      EXPECT_GT(wo["cpu_us_per_req"].get<double>(), 0);
      EXPECT_LT(wo["cpu_us_per_req"].get<double>(), 1e6);
    }

    ASSERT_TRUE(rows.count(sys + " http-wake")) << r.out;
    const Json& wk = rows[sys + " http-wake"];
    // Each of the 10 sends woke a waiting claim; none was left behind.
    EXPECT_EQ(wk["sent"], 10);
    EXPECT_EQ(wk["acked"], 10);
    EXPECT_EQ(wk["left"], 0);
    EXPECT_GT(wk["p50_us"].get<long>(), 0);
    EXPECT_LE(wk["p50_us"].get<long>(), wk["p99_us"].get<long>());

    // Idle connections cost the same whatever they would speak: not run
    // again for the SQS endpoint.
    if (sys == "sqs") {
      EXPECT_FALSE(rows.count(sys + " http-idle")) << r.out;
      continue;
    }
    ASSERT_TRUE(rows.count(sys + " http-idle")) << r.out;
    const Json& idle = rows[sys + " http-idle"];
    EXPECT_EQ(idle["connections"], 200);
    EXPECT_EQ(idle["served_while_held"], true);
    EXPECT_GT(idle["rss_after_kib"].get<long>(), 0);
  }
  if (beanstalkd) {
    EXPECT_TRUE(rows["sqlq http-send-batch"].contains("vs_beanstalkd"));
  }
  EXPECT_GT(rows["sqs http-send-batch"]["vs_native"].get<double>(), 0);
  // The bench dropped its queues again.
  Client c(port());
  auto list = c.Get("/v1/queues");
  ASSERT_EQ(list.status, 200);
  EXPECT_TRUE(list.json["queues"].empty()) << list.body;
}

// With a token file, the SQS side signs its requests (AWS Signature
// Version 4) with --sqs-key, as an SDK does; the server checks them, so a
// wrong secret is refused.
TEST_F(ServerBench, SqsRequestsAreSignedWithTheAccessKey) {
  std::ofstream(dir_ / "tokens.txt")
      << "bench-token-0001 admin,send,claim:*\n"
         "aws-key AKIABENCH0001 benchsecret0123456789 admin,send,claim:*\n";
  StartServer({"--tokens", (dir_ / "tokens.txt").string()});
  std::vector<std::string> args = {"--server",
                                   "http://127.0.0.1:" + std::to_string(port()),
                                   "--token",
                                   "bench-token-0001",
                                   "--sqs",
                                   "--sqs-key",
                                   "AKIABENCH0001:benchsecret0123456789",
                                   "--workload",
                                   "http-send-batch",
                                   "--workload",
                                   "http-mixed",
                                   "--runs",
                                   "1",
                                   "--messages",
                                   "200",
                                   "--batch",
                                   "10",
                                   "--claim-max",
                                   "10",
                                   "--duration",
                                   "1s"};
  BenchRun r = RunBench(args);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::map<std::string, Json> rows;
  for (const Json& row : r.rows) {
    if (row.contains("system")) {
      rows[row["system"].get<std::string>() + " " +
           row["workload"].get<std::string>()] = row;
    }
  }
  ASSERT_TRUE(rows.count("sqs http-send-batch")) << r.out;
  EXPECT_EQ(rows["sqs http-send-batch"]["left"], 200);
  ASSERT_TRUE(rows.count("sqs http-mixed")) << r.out;
  EXPECT_GT(rows["sqs http-mixed"]["acked"].get<long>(), 0);

  args[6] = "AKIABENCH0001:notthesecret0123456";
  BenchRun bad = RunBench(args);
  EXPECT_NE(bad.exit_code, 0) << bad.out;
  EXPECT_NE(bad.out.find("SignatureDoesNotMatch"), std::string::npos)
      << bad.out;
}

TEST_F(ServerBench, RefusesAServerUrlOffLoopback) {
  BenchRun r = RunBench({"--server", "http://example.com:80"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("loopback"), std::string::npos) << r.out;
}

// http-attack: the client's round trips all come back (sent = acked, none
// left) with every attacker running, the server's descriptors and memory
// are reported, and the server still serves afterwards. An unknown attack
// is refused.
TEST_F(ServerBench, AttackReportsBothPhasesAndTheServerGoesOn) {
  StartServer();
  const std::string url = "http://127.0.0.1:" + std::to_string(port());
  BenchRun r = RunBench({"--server", url, "--server-pid",
                         std::to_string(server_->pid()), "--workload",
                         "http-attack", "--runs", "1", "--wake-samples", "20"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_EQ(r.rows.size(), 2u) << r.out;
  const Json& row = r.rows[1];
  EXPECT_EQ(row["workload"], "http-attack");
  EXPECT_EQ(row["sent"], 200);  // 100 round trips in each phase
  EXPECT_EQ(row["acked"], 200);
  EXPECT_EQ(row["left"], 0);
  for (const char* k :
       {"unattacked_p50_us", "unattacked_p99_us", "p50_us", "p99_us",
        "p99_ratio", "attacker_connections", "fds_before", "fds_peak",
        "rss_before_kib", "rss_after_kib"}) {
    EXPECT_TRUE(row.contains(k)) << k << " " << row.dump();
  }
  // The slowloris connections were open at once.
  EXPECT_GT(row["fds_peak"].get<long>(), row["fds_before"].get<long>() + 100);
  EXPECT_GT(row["attacker_connections"].get<long>(), 300);
  Client c(port());
  EXPECT_EQ(c.Get("/healthz").status, 200);
  BenchRun bad = RunBench(
      {"--server", url, "--workload", "http-attack", "--attack", "teardrop"});
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("unknown attack 'teardrop'"), std::string::npos)
      << bad.out;
}

// The control run (--attack-server): the attackers go to a second server,
// whose descriptors show them, while the measured server sees only the
// client's round trips. The same server twice is refused.
TEST_F(ServerBench, ControlAimsTheAttackersAtAnotherServer) {
  StartServer();
  fs::create_directories(dir_ / "decoy");
  ServerProcess decoy(dir_ / "decoy");
  ASSERT_TRUE(decoy.Start()) << decoy.log();
  const std::string url = "http://127.0.0.1:" + std::to_string(port());
  const std::string decoy_url =
      "http://127.0.0.1:" + std::to_string(decoy.port());
  const long decoy_fds_before = OpenFdsOf(decoy.pid());
  std::atomic<long> decoy_fds_peak{decoy_fds_before};
  std::atomic<bool> done{false};
  std::thread sampler([&] {
    while (!done) {
      decoy_fds_peak = std::max(decoy_fds_peak.load(), OpenFdsOf(decoy.pid()));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  BenchRun r =
      RunBench({"--server", url, "--server-pid", std::to_string(server_->pid()),
                "--workload", "http-attack", "--attack-server", decoy_url,
                "--runs", "1", "--wake-samples", "20"});
  done = true;
  sampler.join();
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_EQ(r.rows.size(), 2u) << r.out;
  EXPECT_EQ(r.rows[0]["attack_server"], decoy_url);
  const Json& row = r.rows[1];
  EXPECT_EQ(row["sent"], 200);
  EXPECT_EQ(row["acked"], 200);
  EXPECT_EQ(row["left"], 0);
  EXPECT_GT(row["attacker_connections"].get<long>(), 300);
  // The 300 slowloris connections were the decoy's, not the measured
  // server's.
  EXPECT_LT(row["fds_peak"].get<long>(), row["fds_before"].get<long>() + 50);
  EXPECT_GT(decoy_fds_peak.load(), decoy_fds_before + 100);
  BenchRun same = RunBench(
      {"--server", url, "--workload", "http-attack", "--attack-server", url});
  EXPECT_EQ(same.exit_code, 2) << same.out;
  EXPECT_NE(same.out.find("a server other than --server"), std::string::npos)
      << same.out;
}

}  // namespace
}  // namespace sqlq::server_test
