// The sqlq program the black-box tests run: the one this build made, or the
// one $SQLQ_TEST_BIN names (scripts/test.sh runs the server and CLI tests
// again against a sanitized build of the program that way, and sets
// SQLQ_TEST_BIN_SANITIZED=1 with it).

#ifndef SQLQ_TESTS_SUPPORT_SQLQ_BIN_H_
#define SQLQ_TESTS_SUPPORT_SQLQ_BIN_H_

#include <stdlib.h>

#include <string>

namespace sqlq::test {

inline const char* SqlqBin() {
  const char* e = std::getenv("SQLQ_TEST_BIN");
  return e != nullptr && *e != '\0' ? e : SQLQ_BUILT_BIN;
}

// Whether the program runs under a sanitizer: its memory then holds the
// sanitizer's own (ASan's quarantine, TSan's shadow).
inline bool SqlqBinSanitized() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#else
  const char* e = std::getenv("SQLQ_TEST_BIN_SANITIZED");
  return e != nullptr && std::string(e) == "1";
#endif
}

}  // namespace sqlq::test

#define SQLQ_BIN (::sqlq::test::SqlqBin())

#endif  // SQLQ_TESTS_SUPPORT_SQLQ_BIN_H_
