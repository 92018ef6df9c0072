// `sqlq bench ...`: the benchmark is a program of its own, sqlq-bench
// (bench/, docs/benchmarks.md), installed beside sqlq. The sqlq program
// carries none of it; this runs sqlq-bench in its place.

#ifndef SQLQ_CLI_BENCH_PROGRAM_H_
#define SQLQ_CLI_BENCH_PROGRAM_H_

#include <optional>
#include <string>
#include <vector>

namespace sqlq::cli {

// The arguments for sqlq-bench when `argv` is a bench command line
// (`sqlq [--db URL] [--json] bench ARGS...`): every argument but the word
// "bench", in order (sqlq-bench takes --db and --json too). None for any
// other command.
std::optional<std::vector<std::string>> BenchArgs(int argc, char** argv);

// Replaces this process with sqlq-bench (the file of that name in the
// directory of the running sqlq) and `args`. Returns only when it could
// not: prints why (in JSON with `json` or a --json among `args`) and
// returns the exit code, 3 when sqlq-bench is not there.
int RunBenchProgram(const std::vector<std::string>& args, bool json);

}  // namespace sqlq::cli

#endif  // SQLQ_CLI_BENCH_PROGRAM_H_
