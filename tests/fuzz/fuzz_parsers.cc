// The small parsers of outside input: the first byte picks one, the rest is
// its text. Durations (CLI flags, settings, bench options), receipts,
// database URLs (without connecting), token files, the server's config
// file and settings, request targets (percent-decoding), globs of grants,
// and AWS Signature Version 4 Authorization headers.

#include "core/receipt.h"
#include "engines/engines.h"
#include "server/auth.h"
#include "server/config.h"
#include "server/sigv4.h"
#include "server/target.h"
#include "tests/fuzz/fuzz_env.h"
#include "wire/duration.h"

using namespace sqlq;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text = fuzz::Text(data + 1, size - 1);
  switch (data[0] % 8) {
    case 0:
      (void)wire::ParseDuration(text);
      break;
    case 1:
      (void)core::ParseReceipt(text);
      break;
    case 2:
      (void)engines::CheckUrl(text);
      break;
    case 3:
      (void)server::Auth::FromText(std::string(text));
      break;
    case 4: {
      auto values = server::ParseConfigText(text, "fuzz.conf");
      if (values.ok()) (void)server::MakeServerConfig(*values, "sqlite:x.db");
      break;
    }
    case 5:
      try {
        (void)server::ParseTarget(text);
      } catch (const server::HttpError&) {
        // The 400 the server answers.
      }
      break;
    case 6: {
      const auto split = text.find('\n');
      (void)server::GlobMatch(text.substr(0, split),
                              split == std::string_view::npos
                                  ? std::string_view()
                                  : text.substr(split + 1));
      break;
    }
    case 7:
      (void)server::sigv4::ParseAuthorization(text);
      break;
  }
  return 0;
}
