// sqlq-bench: throughput and latency workloads over libsqlq's public API
// (and, with --server, over a running sqlq serve's HTTP API), with the
// machine's fsync rate measured beside them. docs/benchmarks.md records the
// figures and the exact commands. `sqlq bench ...` runs this program.

#ifndef SQLQ_BENCH_BENCH_H_
#define SQLQ_BENCH_BENCH_H_

#include <string>

namespace sqlq::bench {

// Parses the command line (`sqlq-bench --help`), runs the workloads it
// names and returns the exit code (docs/cli.md's codes).
int Main(int argc, char** argv);

// Synchronous 4 KiB write + fdatasync() calls per second in `dir`, over
// about `seconds`: the ceiling on durable commits per second.
double MeasureFsyncRate(const std::string& dir, double seconds);

}  // namespace sqlq::bench

#endif  // SQLQ_BENCH_BENCH_H_
