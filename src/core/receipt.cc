#include "core/receipt.h"

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <exception>
#include <random>

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

std::uint64_t NewLeaseToken() {
  // Reseeded in a forked child: parent and child must not draw the same
  // tokens. Seeded from the OS; should that fail, from time and addresses
  // (tokens fence stale receipts; they are not secrets).
  thread_local pid_t seeded_in = 0;
  thread_local std::mt19937_64 gen;
  if (seeded_in != getpid()) {
    seeded_in = getpid();
    std::uint64_t seed[4];
    try {
      std::random_device rd;
      for (auto& x : seed) x = (std::uint64_t{rd()} << 32) ^ rd();
    } catch (const std::exception&) {
      auto now =
          std::chrono::high_resolution_clock::now().time_since_epoch().count();
      seed[0] = static_cast<std::uint64_t>(now);
      seed[1] = static_cast<std::uint64_t>(seeded_in);
      seed[2] = reinterpret_cast<std::uintptr_t>(&seed);
      seed[3] = reinterpret_cast<std::uintptr_t>(&gen);
    }
    std::seed_seq seq(std::begin(seed), std::end(seed));
    gen.seed(seq);
  }
  std::uint64_t t;
  do {
    t = gen();
  } while (t == 0);
  return t;
}

}  // namespace sqlq::core
