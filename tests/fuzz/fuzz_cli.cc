// Command lines as a user or a script types them: the input is the
// arguments, separated by NUL bytes, run through the sqlq program's own
// code (cli::Main: CLI11's parsing, sqlq's checks and the command) over an
// SQLite store in a directory of the target's own. Left out are commands
// that run until stopped (serve, bench, claim --wait) and arguments with a
// '/' (a database server to connect to, or a file outside the directory).

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

#include "cli/cli.h"
#include "tests/fuzz/fuzz_env.h"

using namespace sqlq;

namespace {

// Discards what the commands print.
class NullBuf final : public std::streambuf {
 protected:
  int overflow(int c) override { return traits_type::not_eof(c); }
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
};

struct Setup {
  Setup() {
    dir = fuzz::ScratchDir("sqlq-fuzz-cli-");
    home = ::open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (home < 0) std::abort();
    ::setenv("SQLQ_DB", "sqlite:fuzz.db", 1);
    // "send q -" reads stdin: empty here.
    if (std::freopen("/dev/null", "r", stdin) == nullptr) std::abort();
    out = std::cout.rdbuf(&sink);
    err = std::cerr.rdbuf(&sink);
  }
  ~Setup() {
    std::cout.rdbuf(out);
    std::cerr.rdbuf(err);
    ::close(home);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string dir;
  // The directory the fuzzer started in, where its corpus paths lead: a
  // command runs in `dir`, and the fuzzer reads its files back here.
  int home = -1;
  NullBuf sink;
  std::streambuf* out = nullptr;
  std::streambuf* err = nullptr;
};

bool LeftOut(std::string_view arg) {
  return arg == "serve" || arg == "bench" || arg.starts_with("--wait") ||
         arg.find('/') != std::string_view::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  static Setup setup;
  std::vector<std::string> args = {"sqlq"};
  std::string_view in(reinterpret_cast<const char*>(data), size);
  while (!in.empty() && args.size() <= 32) {
    const auto end = in.find('\0');
    args.emplace_back(in.substr(0, end));
    if (LeftOut(args.back())) return 0;
    in.remove_prefix(end == std::string_view::npos ? in.size() : end + 1);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (::chdir(setup.dir.c_str()) != 0) std::abort();
  (void)sqlq::cli::Main(static_cast<int>(args.size()), argv.data());
  if (::fchdir(setup.home) != 0) std::abort();
  return 0;
}
