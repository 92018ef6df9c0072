// Parsing JSON text into a Json document in time linear in the text, with
// bounds on what a hostile text may make the parser build. Used for request
// bodies (docs/http-api.md, "Errors": json_too_complex) and for JSON that a
// client stored and others read (payloads shown as values).

#ifndef SQLQ_WIRE_JSON_PARSE_H_
#define SQLQ_WIRE_JSON_PARSE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "wire/json.h"

namespace sqlq::wire {

// How much of a JSON text ParseJson builds, so that a hostile text cannot
// make a document many times its size. Unbounded by default.
struct JsonBounds {
  std::size_t max_depth = SIZE_MAX;   // nesting of arrays and objects
  std::size_t max_values = SIZE_MAX;  // values, arrays and objects included
  std::size_t max_keys = SIZE_MAX;    // keys of one object
  // Keeps a repeated key as the text has it (the document then writes it
  // out as it came) instead of refusing it.
  bool keep_duplicates = false;
};
// Why ParseJson refused a text: `code` is malformed_json, json_too_complex
// or duplicate_field (the HTTP API's error codes), `message` says which
// rule, with its number.
struct JsonRefusal {
  std::string code;
  std::string message;
};
// Parses `text` (one JSON value, nothing after it) into `out`, in time
// linear in the text. Json::parse is not: Json's objects find a key by
// walking the keys before it, so it costs the square of an object's keys.
// Refuses invalid JSON, a NUL byte (outside strings), duplicate keys unless
// kept (a document would silently resolve them to the last) and anything
// past `bounds`, at the first event that breaks a rule: a refused text
// builds no more than the bounds allow. `what` names the text in messages ("the
// request body"). Returns nullopt when parsed.
std::optional<JsonRefusal> ParseJson(std::string_view text,
                                     const JsonBounds& bounds,
                                     std::string_view what, Json& out);

}  // namespace sqlq::wire

#endif  // SQLQ_WIRE_JSON_PARSE_H_
