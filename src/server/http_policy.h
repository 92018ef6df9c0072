// Which requests the server reads at all, decided from the request head
// before any handler runs (docs/server.md, "Browsers, hosts and origins").
//
// - Host: required, and must name this server: an IP address, `localhost`
//   or a `*.localhost` name, or a name of --allowed-hosts. This stops DNS
//   rebinding, where a web page whose own name now resolves to 127.0.0.1
//   reads and writes the queues of a server on the developer's machine.
// - Origin: a browser's request from a page of another origin is refused,
//   unless that origin is in --cors-origins (then CORS headers allow it).
//   The dashboard's own requests are same-origin and pass.
// - Content-Type: a request that carries a body must declare it
//   `application/json`, so that an HTML form or a "simple" cross-origin
//   fetch (text/plain, form-encoded) can never be read as an API call.
//   The SQS endpoint's bodies (form-encoded, or application/x-amz-json-1.0)
//   pass only from clients that are not browsers: signed with an AWS
//   signature, or without the Origin and Sec-Fetch-Site headers every
//   browser sends.
// - Bodies on GET, HEAD and DELETE are refused; so are transfer codings
//   other than a lone `chunked`, which the server does not decode.
//
// Pure functions of their inputs: thread-safe.

#ifndef SQLQ_SERVER_HTTP_POLICY_H_
#define SQLQ_SERVER_HTTP_POLICY_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/reply.h"
#include "sqlq/status.h"

namespace sqlq::server {

struct HttpPolicy {
  // Host names (no port) accepted besides IP addresses and localhost; "*"
  // accepts any name.
  std::vector<std::string> allowed_hosts;
  // Origins ("https://app.example.com") whose pages may call the API.
  std::vector<std::string> cors_origins;

  // Parses a comma-separated list of --allowed-hosts or --cors-origins
  // into `out`. Errors: kInvalidArgument naming the bad entry.
  static Status ParseHosts(std::string_view text,
                           std::vector<std::string>& out);
  static Status ParseOrigins(std::string_view text,
                             std::vector<std::string>& out);
};

// The parts of a request head the policy reads; empty when absent.
struct RequestHead {
  std::string_view method;
  bool has_host = false;
  std::string_view host;
  std::string_view origin;
  std::string_view content_type;
  std::string_view transfer_encoding;
  std::string_view sec_fetch_site;
  std::string_view sec_fetch_mode;
  std::string_view cors_request_method;  // Access-Control-Request-Method
  bool has_body = false;                 // Content-Length > 0, or chunked
  // For the SQS endpoint: WantsSqs (http_request.h), and it carries an
  // AWS Signature Version 4 Authorization header.
  bool sqs = false;
  bool aws_signed = false;
};

// The reply to give instead of handling the request, or nullopt to go on.
// A CORS preflight (OPTIONS) from an allowed origin is answered here with
// 204 and its own headers; AddCorsHeaders adds the rest when it is sent.
std::optional<Reply> CheckRequest(const RequestHead& head,
                                  const HttpPolicy& policy);

// The headers every reply to `head` carries for CORS: for a request from an
// allowed cross-origin page, Access-Control-Allow-Origin and Vary.
void AddCorsHeaders(const RequestHead& head, const HttpPolicy& policy,
                    Reply& reply);

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_HTTP_POLICY_H_
