#include "server/dashboard.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include "sqlq/text.h"

namespace sqlq::server {

// src/server/dashboard/index.html, compiled in by cmake/embed_text.cmake.
extern const std::string_view kDashboardPage;

// The page is plain HTML and JavaScript with no build step. Everything the
// API returns is put into it as text (textContent, attribute values), never
// as HTML, so a queue name or a payload cannot inject markup.
std::string_view DashboardHtml() { return kDashboardPage; }

namespace {

// The CSP source for the inline element <tag>...</tag> of the page: the
// base64 SHA-256 of its text, so that only this exact script or style runs.
std::string InlineHash(std::string_view tag) {
  const std::string open = "<" + std::string(tag) + ">";
  const std::string close = "</" + std::string(tag) + ">";
  const auto begin = kDashboardPage.find(open) + open.size();
  const std::string_view text =
      kDashboardPage.substr(begin, kDashboardPage.find(close) - begin);
  unsigned char digest[32];
  unsigned int n = 0;
  EVP_Digest(text.data(), text.size(), digest, &n, EVP_sha256(), nullptr);
  return "'sha256-" +
         Base64Encode(std::string_view(reinterpret_cast<char*>(digest), n)) +
         "'";
}

}  // namespace

const std::vector<std::pair<std::string, std::string>>& DashboardHeaders() {
  static const auto* headers =
      new std::vector<std::pair<std::string, std::string>>{
          // Nothing but the page's own script and style, requests to this
          // server only, and no framing: an injected string could run
          // nothing, and no other site can overlay the page's buttons.
          {"Content-Security-Policy",
           fmt::format("default-src 'none'; script-src {}; style-src {}; "
                       "connect-src 'self'; img-src 'self'; base-uri 'none'; "
                       "form-action 'none'; frame-ancestors 'none'",
                       InlineHash("script"), InlineHash("style"))},
          {"X-Frame-Options", "DENY"},
          {"Referrer-Policy", "no-referrer"},
          {"Cache-Control", "no-store"}};
  return *headers;
}

}  // namespace sqlq::server
