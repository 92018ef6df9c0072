#include "server/http_policy.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <algorithm>

#include "server/ascii.h"

namespace sqlq::server {

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

bool IsIpLiteral(const std::string& host) {
  unsigned char buf[16];
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    return inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), buf) ==
           1;
  }
  return inet_pton(AF_INET, host.c_str(), buf) == 1;
}

// The host part of a Host header value ("Example.COM:8080" -> "example.com",
// "[::1]:80" -> "[::1]"), lower case, without a trailing dot.
std::string HostName(std::string_view value) {
  value = Trim(value);
  std::string_view name = value;
  if (!value.empty() && value.front() == '[') {
    auto close = value.find(']');
    name = close == std::string_view::npos ? value : value.substr(0, close + 1);
  } else if (auto colon = value.rfind(':'); colon != std::string_view::npos) {
    name = value.substr(0, colon);
  }
  std::string out = AsciiLower(name);
  if (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

bool HostAllowed(const std::string& name, const HttpPolicy& policy) {
  if (name.empty()) return false;
  if (IsIpLiteral(name)) return true;
  if (name == "localhost" ||
      (name.size() > 10 && name.ends_with(".localhost"))) {
    return true;
  }
  for (const std::string& h : policy.allowed_hosts) {
    if (h == "*" || h == name) return true;
  }
  return false;
}

bool OriginListed(std::string_view origin, const HttpPolicy& policy) {
  const std::string o = AsciiLower(origin);
  return std::find(policy.cors_origins.begin(), policy.cors_origins.end(), o) !=
         policy.cors_origins.end();
}

// Whether `origin` is the server's own, as reached through `host`: the
// dashboard's page, or any page the server serves.
bool SameOrigin(std::string_view origin, std::string_view host) {
  const std::string o = AsciiLower(origin);
  const std::string h = AsciiLower(Trim(host));
  return o == "http://" + h || o == "https://" + h;
}

bool Refusable(std::string_view method) {
  return method == "GET" || method == "HEAD" || method == "DELETE" ||
         method == "OPTIONS";
}

Status ParseList(std::string_view text, std::vector<std::string>& out,
                 bool origins) {
  out.clear();
  while (!text.empty()) {
    auto comma = text.find(',');
    std::string item = AsciiLower(Trim(text.substr(0, comma)));
    text = comma == std::string_view::npos ? "" : text.substr(comma + 1);
    if (item.empty()) continue;
    if (origins) {
      const bool scheme =
          item.starts_with("http://") || item.starts_with("https://");
      const auto rest = item.substr(item.find("//") + 2);
      if (!scheme || rest.empty() || rest.find('/') != std::string::npos) {
        return Status::InvalidArgument(fmt::format(
            "--cors-origins: '{}' is not an origin such as "
            "https://app.example.com (scheme, host and optional port, no "
            "path)",
            item));
      }
    } else if (item != "*" && item.find_first_of(":/ @") != std::string::npos) {
      return Status::InvalidArgument(fmt::format(
          "--allowed-hosts: '{}' is not a host name (give names without "
          "scheme or port, or *)",
          item));
    }
    if (!origins && item.back() == '.') item.pop_back();
    out.push_back(std::move(item));
  }
  return Status::Ok();
}

}  // namespace

Status HttpPolicy::ParseHosts(std::string_view text,
                              std::vector<std::string>& out) {
  return ParseList(text, out, false);
}

Status HttpPolicy::ParseOrigins(std::string_view text,
                                std::vector<std::string>& out) {
  return ParseList(text, out, true);
}

std::optional<Reply> CheckRequest(const RequestHead& head,
                                  const HttpPolicy& policy) {
  // Framing first: a body we cannot decode is never read.
  if (!head.transfer_encoding.empty() &&
      AsciiLower(Trim(head.transfer_encoding)) != "chunked") {
    return ErrorReply(501, "unsupported_transfer_encoding",
                      fmt::format("Transfer-Encoding '{}' is not supported; "
                                  "send the body as is or chunked",
                                  head.transfer_encoding.substr(0, 100)));
  }
  if (!head.has_host) {
    return ErrorReply(400, "missing_host",
                      "the request has no Host header (HTTP/1.1 requires "
                      "one)");
  }
  if (const std::string name = HostName(head.host);
      !HostAllowed(name, policy)) {
    return ErrorReply(
        403, "host_not_allowed",
        fmt::format("Host '{}' is not a name of this server; add it to "
                    "--allowed-hosts if clients reach the server by that "
                    "name",
                    name.substr(0, 100)));
  }
  const bool cross_origin =
      !head.origin.empty() && !SameOrigin(head.origin, head.host);
  if (cross_origin && !OriginListed(head.origin, policy)) {
    return ErrorReply(
        403, "origin_not_allowed",
        fmt::format("requests from pages of {} are not allowed; add the "
                    "origin to --cors-origins to allow them",
                    head.origin.substr(0, 100)));
  }
  if (head.origin.empty() && head.sec_fetch_mode != "navigate" &&
      (head.sec_fetch_site == "cross-site" ||
       head.sec_fetch_site == "same-site")) {
    // A browser's no-cors request (an image, a script tag) from another
    // site: it sends no Origin, but says where it comes from.
    return ErrorReply(403, "origin_not_allowed",
                      "requests from pages of other sites are not allowed");
  }
  if (head.method == "OPTIONS" && cross_origin &&
      !head.cors_request_method.empty()) {
    Reply r;
    r.status = 204;
    r.content_type.clear();
    r.headers = {
        {"Access-Control-Allow-Methods", "GET, POST, DELETE"},
        {"Access-Control-Allow-Headers", "Authorization, Content-Type"},
        {"Access-Control-Max-Age", "600"}};
    // Allow-Origin and Vary are added to this reply as to every other
    // (AddCorsHeaders, when it is sent).
    return r;
  }
  if (head.has_body) {
    if (Refusable(head.method)) {
      return ErrorReply(400, "body_not_allowed",
                        fmt::format("{} requests take no body", head.method));
    }
    std::string_view type = head.content_type;
    type = Trim(type.substr(0, type.find(';')));
    const std::string lower = AsciiLower(type);
    const bool sqs = lower == "application/x-www-form-urlencoded" ||
                     lower == "application/x-amz-json-1.0";
    const bool browser = !head.origin.empty() || !head.sec_fetch_site.empty();
    if (lower != "application/json" &&
        !(sqs && head.sqs && (head.aws_signed || !browser))) {
      return ErrorReply(
          415, "unsupported_media_type",
          fmt::format("a request body must be sent with 'Content-Type: "
                      "application/json', not '{}'",
                      head.content_type.substr(0, 100)));
    }
  }
  return std::nullopt;
}

void AddCorsHeaders(const RequestHead& head, const HttpPolicy& policy,
                    Reply& reply) {
  if (policy.cors_origins.empty()) return;
  reply.headers.emplace_back("Vary", "Origin");
  if (head.origin.empty() || SameOrigin(head.origin, head.host) ||
      !OriginListed(head.origin, policy)) {
    return;
  }
  reply.headers.emplace_back("Access-Control-Allow-Origin",
                             std::string(head.origin));
}

}  // namespace sqlq::server
