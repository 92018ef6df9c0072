// Receipts: the text form a claim hands out, and what ack/nack/extend accept.

#include "core/receipt.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <limits>
#include <set>
#include <string>

#include "tests/support/test_util.h"

namespace sqlq::core {
namespace {

TEST(Receipt, FormatIsIdAttemptAndSixteenHexDigits) {
  EXPECT_EQ(FormatReceipt({.id = 42, .attempt = 3, .token = 0xabc}),
            "42-3-0000000000000abc");
  EXPECT_EQ(FormatReceipt({.id = 1, .attempt = 1, .token = ~0ull}),
            "1-1-ffffffffffffffff");
}

TEST(Receipt, ParseReadsBackWhatFormatWrote) {
  const Receipt cases[] = {
      {.id = 1, .attempt = 1, .token = 1},
      {.id = 5000000001, .attempt = 7, .token = 0x8000000000000000ull},
      {.id = std::numeric_limits<std::int64_t>::max(),
       .attempt = 1000000,
       .token = ~0ull},
  };
  for (const Receipt& r : cases) {
    const std::string text = FormatReceipt(r);
    SCOPED_TRACE(text);
    ASSERT_OK_AND_ASSIGN(Receipt back, ParseReceipt(text));
    EXPECT_EQ(back.id, r.id);
    EXPECT_EQ(back.attempt, r.attempt);
    EXPECT_EQ(back.token, r.token);
  }
}

TEST(Receipt, MalformedTextIsInvalidArgument) {
  const char* bad[] = {
      "",
      "abc",
      "1-1-zz",
      "0-1-0000000000000001",                     // id 0
      "-1-1-0000000000000001",                    // negative id
      "1-0-0000000000000001",                     // attempt 0
      "1--1-0000000000000001",                    // negative attempt
      "1-1-0000000000000000",                     // token 0 is never handed out
      "1-1-000000000000001",                      // 15 digits
      "1-1-00000000000000001",                    // 17 digits
      "1-1-0000000000000001x",                    // trailing garbage
      " 1-1-0000000000000001",                    // leading space
      "+1-1-0000000000000001",                    // sign
      "1-1",                                      // no token
      "1-1-",                                     // empty token
      "-1-0000000000000001",                      // empty id
      "1--0000000000000001",                      // empty attempt
      "1-1-000000000000-001",                     // dash inside the token
      "99999999999999999999-1-0000000000000001",  // id overflows int64
      "1-99999999999-0000000000000001",           // attempt overflows int
  };
  for (const char* text : bad) {
    SCOPED_TRACE(std::string("'") + text + "'");
    auto r = ParseReceipt(text);
    EXPECT_CODE(r, Code::kInvalidArgument);
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("receipt"), std::string::npos)
          << r.status().ToString();
    }
  }
}

TEST(Receipt, LeaseTokensAreNonZeroAndDoNotRepeat) {
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 10000; ++i) {
    std::uint64_t t = NewLeaseToken();
    EXPECT_NE(t, 0u);
    seen.insert(t);
  }
  EXPECT_EQ(seen.size(), 10000u);
}

// Tokens are drawn in batches; a forked child must not hand out the rest of
// its parent's batch, or a claim in each would lease with the same token.
TEST(Receipt, AForkedChildDoesNotHandOutItsParentsTokens) {
  NewLeaseToken();  // this thread now holds a batch, most of it left
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  constexpr int kTokens = 4;
  if (pid == 0) {
    std::uint64_t drawn[kTokens];
    for (auto& t : drawn) t = NewLeaseToken();
    const bool sent = write(fds[1], drawn, sizeof drawn) == sizeof drawn;
    _exit(sent ? 0 : 1);
  }
  close(fds[1]);
  std::set<std::uint64_t> parent;
  for (int i = 0; i < kTokens; ++i) parent.insert(NewLeaseToken());
  std::uint64_t child[kTokens];
  std::size_t got = 0;
  while (got < sizeof child) {
    const ssize_t n =
        read(fds[0], reinterpret_cast<char*>(child) + got, sizeof child - got);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_EQ(got, sizeof child);
  for (std::uint64_t t : child) {
    EXPECT_EQ(parent.count(t), 0u)
        << "the child handed out the parent's " << std::hex << t;
  }
}

}  // namespace
}  // namespace sqlq::core
