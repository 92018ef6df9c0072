#include "cli/bench_program.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string_view>

#include "sqlq/status.h"
#include "wire/printer.h"

namespace sqlq::cli {

std::optional<std::vector<std::string>> BenchArgs(int argc, char** argv) {
  // The global options may stand before the command; its word is the
  // first argument that is neither one of them nor the value of --db.
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--json" || a.starts_with("--db=")) continue;
    if (a == "--db") {
      ++i;
      continue;
    }
    if (a != "bench") return std::nullopt;
    std::vector<std::string> args(argv + 1, argv + argc);
    args.erase(args.begin() + (i - 1));
    return args;
  }
  return std::nullopt;
}

int RunBenchProgram(const std::vector<std::string>& args, bool json) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string program =
      ((ec ? std::filesystem::path(".") : self.parent_path()) / "sqlq-bench")
          .string();
  std::vector<std::string> words = args;
  words.insert(words.begin(), program);
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  std::cout.flush();
  ::execv(program.c_str(), argv.data());
  const int err = errno;
  wire::Printer out(json || std::find(args.begin(), args.end(), "--json") !=
                                args.end());
  if (err == ENOENT) {
    return out.Fail(Status::NotFound(fmt::format(
        "bench: the benchmark is the program sqlq-bench, installed beside "
        "sqlq, and {} is missing (build the target sqlq-bench, or install "
        "it there)",
        program)));
  }
  const std::string why =
      fmt::format("bench: cannot run {}: {}", program, std::strerror(err));
  return out.Fail(err == EACCES ? Status::PermissionDenied(why)
                                : Status::Internal(why));
}

}  // namespace sqlq::cli
