// main() of sqlq-bench; the command line is bench::Main.

#include <exception>
#include <iostream>

#include "bench/bench.h"
#include "wire/printer.h"

int main(int argc, char** argv) {
  // As sqlq's main(): what could still throw is the standard library; end
  // with one line and a documented exit code rather than a signal.
  try {
    return sqlq::bench::Main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "sqlq-bench: internal error: " << e.what() << '\n';
    return sqlq::wire::kExitInternal;
  }
}
