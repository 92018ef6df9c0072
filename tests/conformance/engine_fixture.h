// What the conformance suite runs against: one factory per engine that makes
// a fresh, empty database for every test, a manual clock to move leases and
// delays without sleeping, and assertion helpers for Status and Result.
//
// Adding an engine: write a TestDatabase subclass that creates a fresh
// database (and drops it in its destructor), a factory function for it, and
// one INSTANTIATE_TEST_SUITE_P line in work_queue_conformance_test.cc.

#ifndef SQLQ_TESTS_CONFORMANCE_ENGINE_FIXTURE_H_
#define SQLQ_TESTS_CONFORMANCE_ENGINE_FIXTURE_H_

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
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

// A Clock that moves only when told to. Thread-safe.
class ManualClock : public Clock {
 public:
  // 2024-01-01T00:00:00Z: any fixed instant will do.
  static constexpr Timestamp kStart =
      Timestamp(std::chrono::seconds(1704067200));

  explicit ManualClock(Timestamp start = kStart) : now_us_(Us(start)) {}

  Timestamp Now() override {
    return Timestamp(std::chrono::microseconds(now_us_.load()));
  }
  void Advance(std::chrono::microseconds d) { now_us_ += d.count(); }

 private:
  std::atomic<std::int64_t> now_us_;
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

// One fresh, empty database; dropped when the object goes.
class TestDatabase {
 public:
  virtual ~TestDatabase() = default;
  virtual const std::string& url() const = 0;
};

class SqliteDatabase : public TestDatabase {
 public:
  SqliteDatabase()
      : path_((dir_.path() / "sqlq.db").string()), url_("sqlite:" + path_) {}
  const std::string& url() const override { return url_; }
  const std::string& path() const { return path_; }
  const TempDir& dir() const { return dir_; }

 private:
  TempDir dir_;
  std::string path_;
  std::string url_;
};

// An engine under test: its name (a valid gtest name) and how to make a
// fresh database for it.
struct EngineFactory {
  std::string name;
  std::function<std::unique_ptr<TestDatabase>()> make;
};

inline void PrintTo(const EngineFactory& f, std::ostream* os) { *os << f.name; }

inline EngineFactory SqliteFactory() {
  return {"Sqlite", [] { return std::make_unique<SqliteDatabase>(); }};
}

inline std::string EngineName(
    const ::testing::TestParamInfo<EngineFactory>& info) {
  return info.param.name;
}

// A fresh database per test, a ManualClock, and a store opened on both.
class EngineTest : public ::testing::TestWithParam<EngineFactory> {
 protected:
  void SetUp() override {
    db_ = GetParam().make();
    clock_ = std::make_shared<ManualClock>();
    auto store = Store::Open(db_->url(), StoreOptions{.clock = clock_});
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
  }

  void TearDown() override { store_.reset(); }

  std::unique_ptr<TestDatabase> db_;
  std::shared_ptr<ManualClock> clock_;
  std::unique_ptr<Store> store_;
};

}  // namespace test
}  // namespace sqlq

#define SQLQ_TEST_CONCAT_INNER(a, b) a##b
#define SQLQ_TEST_CONCAT(a, b) SQLQ_TEST_CONCAT_INNER(a, b)

// ASSERT_OK(status_or_result): fails the test, printing the status.
#define ASSERT_OK(expr)                                                      \
  do {                                                                       \
    const auto& sqlq_test_r_ = (expr);                                       \
    ASSERT_TRUE(::sqlq::test::StatusOf(sqlq_test_r_).ok())                   \
        << #expr << ": " << ::sqlq::test::StatusOf(sqlq_test_r_).ToString(); \
  } while (0)

#define EXPECT_OK(expr)                                                      \
  do {                                                                       \
    const auto& sqlq_test_r_ = (expr);                                       \
    EXPECT_TRUE(::sqlq::test::StatusOf(sqlq_test_r_).ok())                   \
        << #expr << ": " << ::sqlq::test::StatusOf(sqlq_test_r_).ToString(); \
  } while (0)

// EXPECT_CODE(status_or_result, sqlq::Code::kNotFound)
#define EXPECT_CODE(expr, expected_code)                                     \
  do {                                                                       \
    const auto& sqlq_test_r_ = (expr);                                       \
    EXPECT_EQ(::sqlq::test::StatusOf(sqlq_test_r_).code(), expected_code)    \
        << #expr << ": " << ::sqlq::test::StatusOf(sqlq_test_r_).ToString(); \
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

#endif  // SQLQ_TESTS_CONFORMANCE_ENGINE_FIXTURE_H_
