#include "server/http_request.h"

#include <fmt/format.h>

namespace sqlq::server {

namespace http = boost::beast::http;

bool WantsSqs(std::string_view method, std::string_view target,
              std::string_view content_type, std::string_view authorization,
              bool has_amz_target) {
  if (target.starts_with("/v1/") || target == "/v1" ||
      target.starts_with("/v1?")) {
    return false;
  }
  if (has_amz_target || authorization.starts_with("AWS4-")) return true;
  if (method == "POST" &&
      content_type.starts_with("application/x-www-form-urlencoded")) {
    return true;
  }
  const std::size_t q = target.find('?');
  return q != std::string_view::npos &&
         (target.substr(q + 1).starts_with("Action=") ||
          target.find("&Action=", q) != std::string_view::npos);
}

void ConfigureParser(RequestParser& parser, const Limits& limits) {
  parser.header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
  parser.body_limit(limits.max_body_bytes);
}

ParsedHead ReadHead(const RequestParser& parser) {
  const auto& req = parser.get();
  ParsedHead p;
  p.sqs = WantsSqs(
      req.method_string(), req.target(), req[http::field::content_type],
      req[http::field::authorization], req.find("X-Amz-Target") != req.end());
  const auto length = parser.content_length();
  p.head = RequestHead{
      .method = req.method_string(),
      .has_host = req.find(http::field::host) != req.end(),
      .host = req[http::field::host],
      .origin = req[http::field::origin],
      .content_type = req[http::field::content_type],
      .transfer_encoding = req[http::field::transfer_encoding],
      .sec_fetch_site = req["Sec-Fetch-Site"],
      .sec_fetch_mode = req["Sec-Fetch-Mode"],
      .cors_request_method = req[http::field::access_control_request_method],
      .has_body = parser.chunked() || (length && *length > 0),
      .sqs = p.sqs,
      .aws_signed =
          req[http::field::authorization].starts_with("AWS4-HMAC-SHA256 ")};
  return p;
}

Request MakeRequest(RequestParser& parser, bool sqs, std::string peer) {
  auto& msg = parser.get();
  Request req{.method = std::string(msg.method_string()),
              .target = std::string(msg.target()),
              .authorization = std::string(msg[http::field::authorization]),
              .body = std::move(msg.body()),
              .peer = std::move(peer)};
  req.sqs = sqs;
  if (req.sqs) {
    for (const auto& field : msg) {
      req.headers.emplace_back(std::string(field.name_string()),
                               std::string(field.value()));
    }
  }
  return req;
}

std::optional<Reply> ReplyToReadError(const boost::beast::error_code& ec,
                                      const Limits& limits) {
  if (ec == http::error::body_limit) {
    return ErrorReply(413, "body_too_large",
                      fmt::format("the request body exceeds the server's "
                                  "limit of {} bytes",
                                  limits.max_body_bytes));
  }
  if (ec == http::error::header_limit) {
    return ErrorReply(431, "headers_too_large",
                      fmt::format("the request headers exceed the server's "
                                  "limit of {} bytes",
                                  limits.max_header_bytes));
  }
  if (ec.category() ==
      http::make_error_code(http::error::bad_method).category()) {
    return ErrorReply(400, "bad_request",
                      fmt::format("malformed HTTP request: {}", ec.message()));
  }
  return std::nullopt;
}

}  // namespace sqlq::server
