// Engine tuning given in the store URL's query string, beside the client
// library's own parameters: postgresql://host/db?write_groups=4&sslmode=...
// Each engine lists its tuning parameters in docs/engines/; this reads and
// checks them the same way for every engine.

#ifndef SQLQ_CORE_URL_PARAMS_H_
#define SQLQ_CORE_URL_PARAMS_H_

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "sqlq/status.h"

namespace sqlq::core {

struct UrlTuning {
  // The URL without the parameters taken (what the client library gets).
  std::string rest;
  // Name -> value (as written) of the parameters taken.
  std::map<std::string, std::string, std::less<>> values;

  // The value of `name` as an integer in min..max; `dflt` when absent.
  // kInvalidArgument naming the parameter otherwise.
  Result<std::int64_t> Int(std::string_view name, std::int64_t dflt,
                           std::int64_t min, std::int64_t max) const;
  // The value of `name` as on/off (true/false, 1/0); `dflt` when absent.
  Result<bool> Bool(std::string_view name, bool dflt) const;
};

// Takes the query parameters named in `names` out of `url`; the others stay
// in the order given. A name given twice keeps its last value.
UrlTuning TakeUrlParams(std::string_view url,
                        std::span<const std::string_view> names);

// An integer URL parameter in min..max, or kInvalidArgument naming it.
Result<std::int64_t> ParseUrlInt(std::string_view name, std::string_view value,
                                 std::int64_t min, std::int64_t max);

// An on/off URL parameter (on, off, true, false, 1, 0, any case), or
// kInvalidArgument naming it.
Result<bool> ParseUrlBool(std::string_view name, std::string_view value);

}  // namespace sqlq::core

#endif  // SQLQ_CORE_URL_PARAMS_H_
