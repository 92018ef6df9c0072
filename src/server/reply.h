// What a handler answers: an HTTP status and a JSON (or text) body, and the
// one shape of every error reply: {"error":{"code":"...","message":"..."}}.
// The codes are the contract of docs/http-api.md; add, never rename.

#ifndef SQLQ_SERVER_REPLY_H_
#define SQLQ_SERVER_REPLY_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sqlq/status.h"

namespace sqlq::server {

using Json = nlohmann::ordered_json;

struct Reply {
  unsigned status = 200;
  // The body: `json` unless `text` is set (metrics).
  Json json = Json::object();
  std::string text;
  std::string content_type = "application/json";
  // Further response headers (CORS, security headers of pages).
  std::vector<std::pair<std::string, std::string>> headers;
  // For metrics and logs: the route template ("POST /v1/queues/{name}/claim").
  std::string route = "unmatched";

  std::string Body() const;
};

Reply JsonReply(unsigned status, Json body);
Reply ErrorReply(unsigned status, std::string_view code,
                 std::string_view message);
// A library failure: its code name ("not_found") and the HTTP status the
// table in docs/http-api.md gives it.
Reply StatusReply(const Status& status);
unsigned HttpStatusFor(Code code);

// Thrown inside request handling to answer at once with an error reply;
// caught by the API's dispatcher and never escapes it.
struct HttpError {
  unsigned status;
  std::string code;
  std::string message;
  // Further response headers (Retry-After).
  std::vector<std::pair<std::string, std::string>> headers = {};
};

// Throws the HttpError of this status, code and message.
[[noreturn]] void Throw(unsigned status, std::string code, std::string message);

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_REPLY_H_
