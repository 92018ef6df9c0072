// What the EXPLAIN tests of the listing (PostgreSQL, MariaDB) share: the
// page they explain, and the engine's statement with its values written
// in.

#ifndef SQLQ_TESTS_SUPPORT_LISTING_SQL_H_
#define SQLQ_TESTS_SUPPORT_LISTING_SQL_H_

#include <cstdint>
#include <string>
#include <utility>

#include "core/engine.h"
#include "engines/shared/message_sql.h"

namespace sqlq::test {

// A page of 100 of queue `queue_id` past id 10, filtered by a header,
// reading up to 10,000 rows, as WorkQueue::ListMessages asks for one.
struct ListingPage {
  MessageFilter filter{
      .header = std::pair<std::string, std::string>("tenant", "acme")};
  core::FindMessagesParams params;
  explicit ListingPage(std::int64_t queue_id)
      : params{.queue_id = queue_id,
               .filter = &filter,
               .after_id = 10,
               .limit = 100,
               .scan = 10000} {}
  ListingPage(const ListingPage&) = delete;
};

// `b`'s text with each placeholder replaced by its value, as a literal:
// PostgreSQL's numbered $n, or MariaDB's ? in order.
inline std::string WithValues(const engines::shared::BuiltSql& b,
                              bool numbered) {
  auto literal = [](const engines::shared::SqlArg& a) {
    return a.kind == engines::shared::SqlArg::kInt ? std::to_string(a.i)
                                                   : "'" + a.s + "'";
  };
  std::string sql = b.sql;
  if (numbered) {
    // From the last, so that $1 is not found inside $10.
    for (int n = static_cast<int>(b.args.size()); n >= 1; --n) {
      const std::string v = literal(b.args[static_cast<std::size_t>(n - 1)]);
      const std::string ph = "$" + std::to_string(n);
      for (auto at = sql.find(ph); at != std::string::npos;
           at = sql.find(ph, at + v.size())) {
        sql.replace(at, ph.size(), v);
      }
    }
    return sql;
  }
  std::size_t at = 0;
  for (const auto& a : b.args) {
    at = sql.find('?', at);
    const std::string v = literal(a);
    sql.replace(at, 1, v);
    at += v.size();
  }
  return sql;
}

}  // namespace sqlq::test

#endif  // SQLQ_TESTS_SUPPORT_LISTING_SQL_H_
