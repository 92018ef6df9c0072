// ASCII case folding for protocol text: header names and values, origins,
// hex ids. Only A-Z change, whatever the process's locale.
#pragma once

#include <string>
#include <string_view>

namespace sqlq::server {

inline std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace sqlq::server
