// The body of a native API request: JSON parsed within bounds, then read
// field by field, each with its type checked, refusing fields the endpoint
// does not know. Every refusal is the 400 HttpError a client reads
// (docs/http-api.md, "Errors").

#ifndef SQLQ_SERVER_BODY_H_
#define SQLQ_SERVER_BODY_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include "server/reply.h"
#include "sqlq/queue.h"
#include "wire/json_parse.h"

namespace sqlq::server {

// What a request body may make the parser build. A document costs about 50
// bytes per value, so 16 MiB of "[[[[" or "[0,0,0" would take many times
// its size. The API's bodies need a depth of 3 and a value per field of
// each message of a batch; their widest object is a message's headers (at
// most kMaxHeaders keys). docs/http-api.md ("Errors") states these bounds.
inline constexpr wire::JsonBounds kBodyBounds{
    .max_depth = 16, .max_values = 100000, .max_keys = 1000};

// Parses a JSON request body into a document, in time linear in its size
// (wire::ParseJson), or throws the 400 HttpError: invalid JSON, nesting
// deeper than 16 levels, more than 100,000 values, an object of more than
// 1,000 keys, duplicate keys.
Json ParseBody(const std::string& text);

// A JSON request body: an object whose fields are all known, each read with
// its type checked. An empty body is an empty object.
class Body {
 public:
  Body(const std::string& text, std::initializer_list<const char*> allowed);
  // A part of another body (one message of a batch), read in place: a copy
  // per message was a tenth of a batched send's server time. `what` names
  // it in errors ("messages[3]").
  Body(const Json& obj, std::initializer_list<const char*> allowed,
       const std::string& what);
  Body(const Body&) = delete;

  bool Has(const char* key) const { return doc_.contains(key); }

  std::optional<std::int64_t> Int(const char* key, std::int64_t min,
                                  std::int64_t max) const;
  // Milliseconds, from 0 to `max`.
  std::optional<Duration> Millis(const char* key, std::int64_t max) const;
  std::optional<bool> Bool(const char* key) const;
  std::optional<std::string> String(const char* key) const;
  // The value of `key` as given, any JSON type; nullptr when absent.
  const Json* Value(const char* key) const {
    return Has(key) ? &doc_[key] : nullptr;
  }
  const Json* Object(const char* key) const;
  const Json* Array(const char* key) const;
  // Throws the 400 wrong_type error: `key` must be `type`.
  [[noreturn]] void Wrong(const char* key, const char* type) const;
  // What errors about this body start with: "" for a whole body,
  // "messages[3]: " for a part.
  const std::string& prefix() const { return prefix_; }

 private:
  void Init(const Json& doc, std::initializer_list<const char*> allowed,
            const std::string& what);
  Json owned_;
  const Json& doc_;
  std::string prefix_;
};

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_BODY_H_
