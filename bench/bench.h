// `sqlq bench`: throughput and latency workloads over the public API, with
// the machine's fsync rate measured beside them. docs/benchmarks.md records
// the figures and the exact commands.

#ifndef SQLQ_BENCH_BENCH_H_
#define SQLQ_BENCH_BENCH_H_

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace sqlq::bench {

// Registers the "bench" subcommand. `db` and `json` read the global options
// once parsing is done; `exit_code` receives the command's exit code.
void AddBenchCommand(CLI::App& app, std::function<std::string()> db,
                     std::function<bool()> json, int& exit_code);

// Synchronous 4 KiB write + fdatasync() calls per second in `dir`, over
// about `seconds`: the ceiling on durable commits per second.
double MeasureFsyncRate(const std::string& dir, double seconds);

}  // namespace sqlq::bench

#endif  // SQLQ_BENCH_BENCH_H_
