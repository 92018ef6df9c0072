#include "wire/printer.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>

#include "wire/json.h"

namespace sqlq::wire {

int ExitCode(Code code) {
  switch (code) {
    case Code::kOk:
      return 0;
    case Code::kInvalidArgument:
      return 2;
    case Code::kNotFound:
      return 3;
    case Code::kAlreadyExists:
      return 4;
    case Code::kFailedPrecondition:
      return 5;
    case Code::kTooLarge:
      return 6;
    case Code::kPermissionDenied:
      return 7;
    case Code::kBusy:
    case Code::kUnavailable:
    case Code::kTimeout:
      return 8;
    case Code::kOutcomeUnknown:
      return 9;
    case Code::kCorruption:
      return 10;
    case Code::kInternal:
      return 1;
  }
  return 1;
}

namespace {

// Text that is not UTF-8 (an error message cut mid-character, a worker name)
// is printed with U+FFFD in its place rather than aborting the program.
std::string Dump(const nlohmann::ordered_json& v) {
  return v.dump(-1, ' ', false,
                nlohmann::ordered_json::error_handler_t::replace);
}

std::string Cell(const nlohmann::ordered_json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) {
    // Keep one row per line: show control characters escaped.
    std::string s = v.get<std::string>();
    bool plain = std::none_of(s.begin(), s.end(), [](char c) {
      return static_cast<unsigned char>(c) < 0x20;
    });
    return plain ? s : Dump(v);
  }
  return Dump(v);
}

}  // namespace

void Printer::Row(const nlohmann::ordered_json& obj) {
  if (json_) {
    std::cout << obj.dump(-1, ' ', false,
                          nlohmann::ordered_json::error_handler_t::replace)
              << '\n';
  } else {
    rows_.push_back(obj);
  }
}

void Printer::Say(const nlohmann::ordered_json& obj,
                  std::string_view sentence) {
  if (json_) {
    Row(obj);
  } else {
    std::cout << sentence << '\n';
  }
}

void Printer::Record(const nlohmann::ordered_json& obj,
                     const std::vector<Field>& fields) {
  if (json_) {
    Row(obj);
    return;
  }
  std::size_t width = 0;
  for (const auto& [label, value] : fields) {
    width = std::max(width, label.size());
  }
  for (const auto& [label, value] : fields) {
    std::cout << fmt::format("{:<{}}  {}\n", label, width, Cell(value));
  }
  std::cout.flush();
}

void Printer::Flush() {
  if (json_ || rows_.empty()) {
    std::cout.flush();
    rows_.clear();
    return;
  }
  std::vector<std::string> cols = columns_;
  if (cols.empty()) {
    for (auto& [k, v] : rows_.front().items()) cols.push_back(k);
  }
  std::vector<size_t> width(cols.size());
  std::vector<std::vector<std::string>> cells;
  for (size_t c = 0; c < cols.size(); ++c) width[c] = cols[c].size();
  for (const auto& row : rows_) {
    std::vector<std::string> line;
    for (size_t c = 0; c < cols.size(); ++c) {
      std::string key = cols[c];
      // A payload column shows whichever of the two payload keys is set.
      if (key == "payload" && !row.contains("payload") &&
          row.contains("payload_base64")) {
        line.push_back("base64:" + row["payload_base64"].get<std::string>());
      } else {
        line.push_back(row.contains(key) ? Cell(row[key]) : "-");
      }
      width[c] = std::max(width[c], line.back().size());
    }
    cells.push_back(std::move(line));
  }
  auto print = [&](const std::vector<std::string>& line) {
    std::string out;
    for (size_t c = 0; c < line.size(); ++c) {
      if (c + 1 == line.size()) {
        out += line[c];
      } else {
        out += fmt::format("{:<{}}  ", line[c], width[c]);
      }
    }
    std::cout << out << '\n';
  };
  std::vector<std::string> header;
  for (auto& c : cols) {
    std::string h = c;
    std::transform(h.begin(), h.end(), h.begin(), ::toupper);
    header.push_back(h);
  }
  print(header);
  for (auto& line : cells) print(line);
  std::cout.flush();
  rows_.clear();
}

int Printer::Fail(const Status& status) {
  Flush();
  if (json_) {
    nlohmann::ordered_json err = {{"error", ErrorJson(status)}};
    std::cerr << err.dump(-1, ' ', false,
                          nlohmann::ordered_json::error_handler_t::replace)
              << '\n';
  } else {
    std::cerr << "sqlq: " << status.message() << '\n';
  }
  return ExitCode(status.code());
}

}  // namespace sqlq::wire
