// The small parsers of outside input: the first byte picks one, the rest is
// its text. Durations (CLI flags, settings, bench options), receipts,
// database URLs (without connecting), token files, the server's config
// file and settings, request targets (percent-decoding), globs of grants,
// AWS Signature Version 4 Authorization headers, and send bodies: the
// fast reader of plain sends (server/plain_send.h) must read only bodies
// that the general reader reads as the same messages.

#include "core/receipt.h"
#include "engines/engines.h"
#include "server/api_call.h"
#include "server/auth.h"
#include "server/config.h"
#include "server/plain_send.h"
#include "server/sigv4.h"
#include "server/target.h"
#include "tests/fuzz/fuzz_env.h"
#include "wire/duration.h"

using namespace sqlq;

namespace {

// The plain reader's messages of `body` against the general reader's:
// stops the fuzzer (a crash it reports) on any difference.
void SameAsTheGeneralReader(const std::string& body) {
  server::Limits limits;
  limits.max_batch = 50;
  limits.max_payload_bytes = 1000;
  auto plain = server::ReadPlainSend(body, 50, 1000);
  if (!plain) return;
  std::vector<Message> general;
  try {
    general = server::api::ReadSendDocument(body, limits);
  } catch (const server::HttpError&) {
    __builtin_trap();  // read by one, refused by the other
  }
  if (general.size() != plain->size()) __builtin_trap();
  for (std::size_t i = 0; i < general.size(); ++i) {
    const Message& g = general[i];
    // The plain reader sets the payload alone: the general one must have
    // read nothing else either.
    if (g.payload != (*plain)[i].payload || !g.headers.empty() ||
        g.priority != 0 || g.delay.count() != 0 || g.run_at ||
        !g.dedup_key.empty() || !g.group.empty() || !g.kind.empty() ||
        g.timeout || g.expire_after || g.max_attempts || g.backoff_base ||
        g.backoff_max || !g.depends_on.empty() || !g.depends_on_batch.empty()) {
      __builtin_trap();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text = fuzz::Text(data + 1, size - 1);
  switch (data[0] % 9) {
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
    case 8:
      SameAsTheGeneralReader(std::string(text));
      break;
  }
  return 0;
}
