// The sqlq program's command line, apart from its main(): the program and
// the command-line fuzz target (tests/fuzz/fuzz_cli.cc) run the same code.

#ifndef SQLQ_CLI_CLI_H_
#define SQLQ_CLI_CLI_H_

namespace sqlq::cli {

// Parses the arguments, runs the command they name and returns the exit
// code (docs/cli.md). Output goes to std::cout and std::cerr. May be called
// again in the same process.
int Main(int argc, char** argv);

}  // namespace sqlq::cli

#endif  // SQLQ_CLI_CLI_H_
