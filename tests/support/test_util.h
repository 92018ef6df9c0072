// What every sqlq test uses, engine or not: readable failures for codes
// and statuses, ASSERT_OK and friends, a manual clock and a temporary
// directory. Needs no database client header, so core's unit tests build
// with it alone.

#ifndef SQLQ_TESTS_SUPPORT_TEST_UTIL_H_
#define SQLQ_TESTS_SUPPORT_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <utility>

#include "sqlq/queue.h"
#include "sqlq/status.h"
#include "sqlq/store.h"

namespace sqlq {

// So that failed EXPECT_EQ on codes print "not_found", not a byte dump.
inline void PrintTo(Code code, std::ostream* os) { *os << CodeName(code); }
inline void PrintTo(const Status& s, std::ostream* os) { *os << s.ToString(); }

namespace test {

inline const Status& StatusOf(const Status& s) { return s; }
template <typename T>
const Status& StatusOf(const Result<T>& r) {
  return r.status();
}

// Microseconds since the epoch: comparable and printable in assertions.
inline std::int64_t Us(Timestamp t) { return t.time_since_epoch().count(); }

// A store on `url`, or null after failing the test.
inline std::unique_ptr<Store> OpenOrFail(const std::string& url,
                                         const StoreOptions& options = {}) {
  auto s = Store::Open(url, options);
  if (!s.ok()) {
    ADD_FAILURE() << "open: " << s.status().ToString();
    return nullptr;
  }
  return std::move(*s);
}

// Milliseconds of the steady clock since `t0`.
inline std::int64_t MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now() - t0)
      .count();
}

// A Clock that moves only when told to. Thread-safe.
class ManualClock : public Clock {
 public:
  // 2024-01-01T00:00:00Z: any fixed instant will do.
  static constexpr Timestamp kStart =
      Timestamp(std::chrono::seconds(1704067200));

  explicit ManualClock(Timestamp start = kStart) : now_us_(Us(start)) {}

  Timestamp Now() override {
    ++reads_;
    return Timestamp(std::chrono::microseconds(now_us_.load()));
  }
  void Advance(std::chrono::microseconds d) { now_us_ += d.count(); }
  // How often the store asked the time: a look of a waiting claim asks once.
  std::int64_t reads() const { return reads_.load(); }

 private:
  std::atomic<std::int64_t> now_us_;
  std::atomic<std::int64_t> reads_ = 0;
};

// A fresh directory under /tmp, removed with its contents when destroyed.
class TempDir {
 public:
  TempDir() {
    std::string templ = "/tmp/sqlq-test-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp failed";
    }
    path_ = templ;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace test
}  // namespace sqlq

#define SQLQ_TEST_CONCAT_INNER(a, b) a##b
#define SQLQ_TEST_CONCAT(a, b) SQLQ_TEST_CONCAT_INNER(a, b)

// ASSERT_OK(status_or_result): fails the test, printing the status.
// The status is copied out while the expression's temporaries live:
// `r.status()` of a temporary result is a reference into it, which a
// reference kept past the full expression would outlive.
#define ASSERT_OK(expr)                                               \
  do {                                                                \
    const ::sqlq::Status sqlq_test_s_ = ::sqlq::test::StatusOf(expr); \
    ASSERT_TRUE(sqlq_test_s_.ok())                                    \
        << #expr << ": " << sqlq_test_s_.ToString();                  \
  } while (0)

#define EXPECT_OK(expr)                                               \
  do {                                                                \
    const ::sqlq::Status sqlq_test_s_ = ::sqlq::test::StatusOf(expr); \
    EXPECT_TRUE(sqlq_test_s_.ok())                                    \
        << #expr << ": " << sqlq_test_s_.ToString();                  \
  } while (0)

// EXPECT_CODE(status_or_result, sqlq::Code::kNotFound)
#define EXPECT_CODE(expr, expected_code)                              \
  do {                                                                \
    const ::sqlq::Status sqlq_test_s_ = ::sqlq::test::StatusOf(expr); \
    EXPECT_EQ(sqlq_test_s_.code(), expected_code)                     \
        << #expr << ": " << sqlq_test_s_.ToString();                  \
  } while (0)

// ASSERT_OK_AND_ASSIGN(auto x, result_expr): declares (or assigns) lhs from
// the value of an OK result; fails the test otherwise.
#define ASSERT_OK_AND_ASSIGN(lhs, expr)                                     \
  SQLQ_TEST_ASSIGN_IMPL(SQLQ_TEST_CONCAT(sqlq_test_result_, __LINE__), lhs, \
                        expr)
#define SQLQ_TEST_ASSIGN_IMPL(tmp, lhs, expr)                        \
  auto tmp = (expr);                                                 \
  ASSERT_TRUE(tmp.ok()) << #expr << ": " << tmp.status().ToString(); \
  lhs = std::move(tmp).value()

#endif  // SQLQ_TESTS_SUPPORT_TEST_UTIL_H_
