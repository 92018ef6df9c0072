// main() of the sqlq program; the command line is cli::Main.

#include <exception>
#include <iostream>

#include "cli/cli.h"
#include "wire/printer.h"

int main(int argc, char** argv) {
  // The library reports through Status; what could still throw here is the
  // standard library (allocation, a thread that cannot start). End with one
  // line and a documented exit code rather than a signal.
  try {
    return sqlq::cli::Main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "sqlq: internal error: " << e.what() << '\n';
    return sqlq::wire::kExitInternal;
  }
}
