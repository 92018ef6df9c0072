// sqlq-bench: throughput and latency workloads over libsqlq's public API
// (and, with --server, over a running sqlq serve's HTTP API), with the
// machine's fsync rate measured beside them. docs/benchmarks.md records the
// figures and the exact commands. `sqlq bench ...` runs this program.

#ifndef SQLQ_BENCH_BENCH_H_
#define SQLQ_BENCH_BENCH_H_

namespace sqlq::bench {

// Parses the command line (`sqlq-bench --help`), runs the workloads it
// names and returns the exit code (docs/cli.md's codes).
int Main(int argc, char** argv);

}  // namespace sqlq::bench

#endif  // SQLQ_BENCH_BENCH_H_
