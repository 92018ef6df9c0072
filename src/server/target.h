// The request target of an HTTP request: the path split into
// percent-decoded segments, and the query string's parameters.

#ifndef SQLQ_SERVER_TARGET_H_
#define SQLQ_SERVER_TARGET_H_

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sqlq::server {

struct Target {
  std::vector<std::string> segments;
  std::map<std::string, std::string> query;
};

// Bytes as lower-case hex digits (digests, random ids, tokens).
std::string HexOf(const unsigned char* p, std::size_t n);
// The value of a hex digit (either case), or -1.
int HexDigit(char c);

// Decodes %XX escapes; with `plus_is_space` (a query string, form
// encoding) '+' stands for ' ', in a path segment it is itself. Throws the
// 400 HttpError (bad_request) for a '%' not followed by two hex digits.
std::string PercentDecode(std::string_view in, bool plus_is_space = false);

// The NAME=VALUE pairs of a query string or form body, still encoded, in
// their order; empty pairs are skipped, and a pair without '=' has an
// empty value.
std::vector<std::pair<std::string_view, std::string_view>> SplitPairs(
    std::string_view text);

// How many pairs SplitPairs would find in `text`, counting no further than
// `stop`: a cheap check of their number before any is split or decoded.
std::size_t CountPairs(std::string_view text, std::size_t stop);

// Adds the pairs of `text`, decoded as a form ('+' is a space), to `out`;
// a name given again keeps its last value. Throws as PercentDecode does.
void AddDecodedPairs(std::string_view text,
                     std::map<std::string, std::string>& out);

// "/v1/queues/a%20b?limit=10&x" -> {"v1","queues","a b"}, {limit: "10",
// x: ""}. Empty path segments are kept ("/v1//x" has three); a repeated
// query key keeps its last value. Throws the 400 HttpError (bad_request)
// for a target that is not an absolute path or has a bad escape.
Target ParseTarget(std::string_view target);

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_TARGET_H_
