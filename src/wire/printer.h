// How the sqlq program (its commands and `sqlq bench`) prints: one JSON
// object per line (--json) for scripts, or readable tables for people;
// errors as one line on stderr; and the table that maps sqlq codes to exit
// codes (docs/cli.md). The objects themselves come from wire/json.h.

#ifndef SQLQ_WIRE_PRINTER_H_
#define SQLQ_WIRE_PRINTER_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sqlq/status.h"

namespace sqlq::wire {

// Exit codes; stable, documented in docs/cli.md.
inline constexpr int kExitOk = 0;
inline constexpr int kExitInternal = 1;
inline constexpr int kExitUsage = 2;
int ExitCode(Code code);

class Printer {
 public:
  explicit Printer(bool json) : json_(json) {}
  bool json() const { return json_; }
  void set_json(bool json) { json_ = json; }

  // Prints `obj` as one line of JSON (json mode) or adds it as a row of the
  // table printed by Flush(), with `columns` naming which keys to show.
  void Row(const nlohmann::ordered_json& obj);
  void Columns(std::vector<std::string> columns) {
    columns_ = std::move(columns);
  }
  // A sentence for people; in json mode `obj` is printed instead.
  void Say(const nlohmann::ordered_json& obj, std::string_view sentence);
  // One thing in detail, for people: a line per field, its label and then
  // its value, the values lined up (shown as table cells show them: "-"
  // for null, control characters escaped). In json mode `obj` is printed
  // instead.
  using Field = std::pair<std::string, nlohmann::ordered_json>;
  void Record(const nlohmann::ordered_json& obj,
              const std::vector<Field>& fields);
  void Flush();
  // Prints the error (one line on stderr; JSON on stderr in json mode) and
  // returns its exit code.
  int Fail(const Status& status);

 private:
  bool json_;
  std::vector<std::string> columns_;
  std::vector<nlohmann::ordered_json> rows_;
};

}  // namespace sqlq::wire

#endif  // SQLQ_WIRE_PRINTER_H_
