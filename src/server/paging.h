// Listings of the native API within the server's reply size limit: the
// dead letters, the archive and a ring group's entries, read page by page.

#ifndef SQLQ_SERVER_PAGING_H_
#define SQLQ_SERVER_PAGING_H_

#include <algorithm>
#include <cstddef>
#include <vector>

#include "server/api_call.h"
#include "sqlq/text.h"

namespace sqlq::server::api {

// Reads a listing (dead letters, archive, a ring group) page by page, so
// that its reply stays within `reply_bytes`: each page asks for as many
// rows as fit in what is left, counting `max_payload` for each (the
// queue's limit; for rings the server's), and what came back is charged at
// its encoded size (at most 4/3 of the payload and the text slack, plus
// `row_bytes` for the other fields). `next(o, row)` moves the options'
// cursor past a row. Sets `limited` when it stopped before `o.limit` rows
// for lack of room; the client goes on from the last row.
template <typename Row, typename Options, typename Fetch, typename Next>
std::vector<Row> ListWithin(std::size_t reply_bytes, std::size_t max_payload,
                            std::size_t row_bytes, Options o, Fetch fetch,
                            Next next, bool& limited) {
  std::vector<Row> rows;
  const auto encoded = [&](std::size_t n) {
    return (n + 2) / 3 * 4 + kPayloadTextSlack + row_bytes;
  };
  std::size_t left = reply_bytes > 64 ? reply_bytes - 64 : 0;
  const std::size_t limit = static_cast<std::size_t>(o.limit);
  while (rows.size() < limit) {
    std::size_t page =
        std::min(limit - rows.size(), left / encoded(max_payload));
    if (page == 0) {
      if (!rows.empty()) {
        limited = true;
        break;
      }
      page = 1;  // one row always, however large
    }
    o.limit = static_cast<int>(page);
    std::vector<Row> got = Take(fetch(o));
    for (Row& r : got) {
      left -= std::min(left, encoded(r.payload.size()));
      next(o, r);
      rows.push_back(std::move(r));
    }
    if (got.size() < page) break;  // the end
  }
  return rows;
}

// A listing's reply: {key: rows}, with "limited":true when ListWithin
// stopped it at the reply size limit.
inline Json Listing(const char* key, Json rows, bool limited) {
  Json body = {{key, std::move(rows)}};
  if (limited) body["limited"] = true;
  return body;
}

}  // namespace sqlq::server::api

#endif  // SQLQ_SERVER_PAGING_H_
