// Joined: SQL texts put together at compile time, for engines whose
// migrations reuse parts of an earlier step's text unchanged (a released
// migration is never edited, so a later step builds on its pieces).

#ifndef SQLQ_ENGINES_SHARED_JOINED_TEXT_H_
#define SQLQ_ENGINES_SHARED_JOINED_TEXT_H_

#include <array>
#include <cstddef>
#include <initializer_list>

namespace sqlq::engines::shared {

// The texts one after another, with one NUL at the end: `.data()` is a
// C string that lives as long as the array.
template <std::size_t... N>
constexpr std::array<char, (N + ...) - sizeof...(N) + 1> Joined(
    const char (&... texts)[N]) {
  std::array<char, (N + ...) - sizeof...(N) + 1> out{};
  std::size_t n = 0;
  for (const char* t : {static_cast<const char*>(texts)...}) {
    while (*t != '\0') out[n++] = *t++;
  }
  return out;
}

}  // namespace sqlq::engines::shared

#endif  // SQLQ_ENGINES_SHARED_JOINED_TEXT_H_
