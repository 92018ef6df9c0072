// From the bytes of an HTTP/1.1 request to the API's Request, the way
// `sqlq serve` reads every request: a Beast parser with the server's limits,
// the head checked by the policy (http_policy.h) before the body is read,
// then the Request the API handles. The server's connections and the fuzz
// target of requests (tests/fuzz) both go through these functions, so that
// what is fuzzed is what the server runs.

#ifndef SQLQ_SERVER_HTTP_REQUEST_H_
#define SQLQ_SERVER_HTTP_REQUEST_H_

#include <boost/beast/http.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/config.h"
#include "server/http_policy.h"
#include "server/reply.h"
#include "server/request.h"

namespace sqlq::server {

using RequestParser =
    boost::beast::http::request_parser<boost::beast::http::string_body>;

// Whether a request is meant for the SQS endpoint (sqs.h) rather than the
// native API (api.h): outside /v1, one with an AWS signature, an
// X-Amz-Target, a form body or an Action parameter in its query. The
// transport hands the request to that front door.
bool WantsSqs(std::string_view method, std::string_view target,
              std::string_view content_type, std::string_view authorization,
              bool has_amz_target);

// A parser for one request, with the server's header and body limits.
void ConfigureParser(RequestParser& parser, const Limits& limits);

// What the policy and the API need of a request whose head the parser has
// read. Views into the parser's message: valid while it is.
struct ParsedHead {
  RequestHead head;
  bool sqs = false;  // for the SQS endpoint (WantsSqs)
};
ParsedHead ReadHead(const RequestParser& parser);

// The Request of a whole message; `peer` is the client's IP address. Moves
// the body out of the message.
Request MakeRequest(RequestParser& parser, bool sqs, std::string peer);

// Whether a read error means the client sent something malformed (an
// error reply is due) and which: 413 body_too_large, 431
// headers_too_large, 400 bad_request; nullopt for errors that only close
// the connection.
std::optional<Reply> ReplyToReadError(const boost::beast::error_code& ec,
                                      const Limits& limits);

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_HTTP_REQUEST_H_
