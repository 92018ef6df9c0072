// Text helpers shared by every front end: whether bytes are UTF-8, whether
// a payload travels as text or as base64 in a separate field (in the CLI and
// over HTTP), standard base64 (RFC 4648, with padding) and hex.

#ifndef SQLQ_TEXT_H_
#define SQLQ_TEXT_H_

#include <string>
#include <string_view>

#include "sqlq/status.h"

namespace sqlq {

// Well-formed UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF.
bool IsUtf8(std::string_view bytes);
// Whether a payload goes out as text ("payload") rather than base64
// ("payload_base64") in JSON: when it is UTF-8 and its JSON string is at
// most kPayloadTextSlack bytes longer than its base64 would be. Control
// characters take six bytes each in a JSON string (\u0001), so a payload
// of them goes out as base64, and no payload grows by more than a third
// (plus the slack) on the wire.
inline constexpr std::size_t kPayloadTextSlack = 64;
bool PayloadIsText(std::string_view bytes);
std::string Base64Encode(std::string_view bytes);
// kInvalidArgument when `text` is not padded standard base64.
Result<std::string> Base64Decode(std::string_view text);
// Appends `bytes` as lowercase hex digits, two a byte.
void AppendHex(std::string& out, std::string_view bytes);

}  // namespace sqlq

#endif  // SQLQ_TEXT_H_
