// `sqlq bench --server URL`: HTTP/1.1 keep-alive load over loopback against
// a running `sqlq serve`, and the same put/reserve/delete work against
// beanstalkd (--beanstalkd) in the same run, so that the two rates sit side
// by side. docs/benchmarks.md describes the workloads and records figures.

#ifndef SQLQ_BENCH_SERVER_BENCH_H_
#define SQLQ_BENCH_SERVER_BENCH_H_

#include <string>
#include <vector>

namespace sqlq::bench {

struct ServerBenchConfig {
  std::string url;     // http://127.0.0.1:PORT of a running sqlq serve
  std::string token;   // bearer token (needs admin, send and claim)
  int server_pid = 0;  // for http-idle's RSS figures; 0: RSS not reported
  std::vector<std::string> workloads;  // empty: all
  int runs = 3;
  long messages = 0;    // http-send-batch total; 0: 200,000 (beanstalkd 20,000)
  int connections = 8;  // http-send-batch concurrent connections
  int producers = 4;    // http-mixed
  int consumers = 4;    // http-mixed; http-wake parked claims
  int batch = 100;      // messages per send request
  int claim_max = 100;  // http-mixed claim size
  long max_backlog = 0;  // http-mixed: 0 means 4 x consumers x claim_max
  std::string duration = "10s";  // http-mixed
  long wake_samples = 200;       // http-wake
  long idle_connections = 10000;
  // http-attack: the attackers to run (slowloris, polls, flood, oversized,
  // chunked, nested); empty: all.
  std::vector<std::string> attacks;
  // http-attack: aim the attackers at this other server instead (a control
  // run: the same load on the machine, none on the measured server).
  std::string attack_url;
  std::size_t payload = 100;
  bool beanstalkd = false;  // also run the beanstalkd workloads
  // Also run them through the server's SQS endpoint (JSON protocol), its
  // requests signed with this access key ("ID:SECRET") when not empty.
  bool sqs = false;
  std::string sqs_key;
  std::string beanstalkd_bin = "beanstalkd";
  bool json = false;
};

// Runs the workloads and prints one row per workload (JSON with --json).
// Returns the process exit code.
int RunServerBench(ServerBenchConfig config);

}  // namespace sqlq::bench

#endif  // SQLQ_BENCH_SERVER_BENCH_H_
