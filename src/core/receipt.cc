#include "core/receipt.h"

#include <fmt/format.h>
#include <pthread.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace sqlq::core {

std::string FormatReceipt(const Receipt& r) {
  return fmt::format("{}-{}-{:016x}", r.id, r.attempt, r.token);
}

namespace {

template <typename T>
bool ParseNumber(std::string_view text, T& out, int base = 10) {
  if (text.empty()) return false;
  auto [ptr, ec] =
      std::from_chars(text.data(), text.data() + text.size(), out, base);
  return ec == std::errc() && ptr == text.data() + text.size();
}

}  // namespace

Result<Receipt> ParseReceipt(std::string_view text) {
  auto bad = [&] {
    return Status::InvalidArgument(
        fmt::format("malformed receipt '{}': expected ID-ATTEMPT-TOKEN as "
                    "printed by claim",
                    text.substr(0, 80)));
  };
  size_t a = text.find('-');
  if (a == std::string_view::npos) return bad();
  size_t b = text.find('-', a + 1);
  if (b == std::string_view::npos) return bad();
  std::string_view token = text.substr(b + 1);
  Receipt r;
  if (!ParseNumber(text.substr(0, a), r.id) || r.id <= 0) return bad();
  if (!ParseNumber(text.substr(a + 1, b - a - 1), r.attempt) ||
      r.attempt <= 0) {
    return bad();
  }
  if (token.size() != 16 || !ParseNumber(token, r.token, 16) || r.token == 0) {
    return bad();
  }
  return r;
}

namespace {

// Lease tokens are drawn from the kernel's CSPRNG (getrandom(2)), so that a
// receipt's token cannot be predicted from others a client has seen, 32 at
// a time to spare a system call per claim: this thread's batch and how many
// of it are left.
constexpr int kTokenBatch = 32;
thread_local std::uint64_t token_batch[kTokenBatch];
thread_local int tokens_left = 0;

// A forked child goes on with only the thread that called fork(), whose
// batch is its parent's too: dropped there, so that parent and child never
// hand out the same tokens. (A getpid() check on every call would do the
// same at a system call a claim: glibc no longer caches the pid.)
void DropTokensInChild() { tokens_left = 0; }

}  // namespace

std::uint64_t NewLeaseToken() {
  static const bool fork_hooked =
      pthread_atfork(nullptr, nullptr, DropTokensInChild) == 0;
  if (!fork_hooked) {
    // Without the hook (pthread_atfork ran out of memory): the pid check.
    thread_local pid_t drawn_in = 0;
    if (const pid_t pid = getpid(); drawn_in != pid) {
      drawn_in = pid;
      tokens_left = 0;
    }
  }
  for (;;) {
    if (tokens_left == 0) {
      auto* out = reinterpret_cast<unsigned char*>(token_batch);
      std::size_t got = 0;
      while (got < sizeof token_batch) {
        const ssize_t n = getrandom(out + got, sizeof token_batch - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          // Only on a kernel older than 3.17 or under a seccomp filter
          // that forbids the call: there is no safe way on.
          std::fprintf(stderr, "sqlq: getrandom failed: %s\n",
                       std::strerror(errno));
          std::abort();
        }
        got += static_cast<std::size_t>(n);
      }
      tokens_left = kTokenBatch;
    }
    const std::uint64_t t = token_batch[--tokens_left];
    if (t != 0) return t;
  }
}

}  // namespace sqlq::core
