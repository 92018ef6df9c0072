#include "server/tls.h"

#include <fmt/format.h>
#include <openssl/err.h>

#include <memory>
#include <string>
#include <vector>

namespace sqlq::server {
namespace {

// The items of a list: OpenSSL separates them by ':', and in a TLS 1.2
// list also by ',' and ' '.
std::vector<std::string> Items(std::string_view list, std::string_view seps) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= list.size()) {
    std::size_t end = list.find_first_of(seps, at);
    if (end == std::string_view::npos) end = list.size();
    if (end > at) out.emplace_back(list.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// OpenSSL ignores the items of a list it does not know as long as one
// item selects something: each item is tried alone, so that a typo is an
// error rather than a suite silently missing.
Status SetTls12(SSL_CTX* ctx, std::string_view list) {
  const std::vector<std::string> items = Items(list, ": ,");
  if (items.empty()) {
    return Status::InvalidArgument(
        "--tls-ciphers is empty: give at least one TLS 1.2 cipher suite");
  }
  for (const std::string& item : items) {
    // Exclusions (!X, -X), moves (+X) and commands (@STRENGTH,
    // @SECLEVEL=N) select nothing of their own.
    if (item[0] == '!' || item[0] == '-' || item[0] == '+' || item[0] == '@') {
      continue;
    }
    if (SSL_CTX_set_cipher_list(ctx, item.c_str()) != 1) {
      ERR_clear_error();
      return Status::InvalidArgument(fmt::format(
          "--tls-ciphers: '{}' names no TLS 1.2 cipher suite OpenSSL knows "
          "(the list is OpenSSL's cipher list, as 'openssl ciphers -v' "
          "reads it: ECDHE-RSA-AES128-GCM-SHA256:...)",
          item));
    }
  }
  if (SSL_CTX_set_cipher_list(ctx, std::string(list).c_str()) != 1) {
    ERR_clear_error();
    return Status::InvalidArgument(fmt::format(
        "--tls-ciphers: '{}' selects no TLS 1.2 cipher suite", list));
  }
  return Status::Ok();
}

Status SetTls13(SSL_CTX* ctx, std::string_view list) {
  const std::vector<std::string> items = Items(list, ":");
  if (items.empty()) {
    return Status::InvalidArgument(
        "--tls-ciphersuites is empty: give at least one TLS 1.3 cipher "
        "suite");
  }
  for (const std::string& item : items) {
    bool known = false;
    if (SSL_CTX_set_ciphersuites(ctx, item.c_str()) == 1) {
      // Known when the context now offers a suite of that name.
      STACK_OF(SSL_CIPHER)* offered = SSL_CTX_get_ciphers(ctx);
      for (int i = 0; i < sk_SSL_CIPHER_num(offered); ++i) {
        known |= item == SSL_CIPHER_get_name(sk_SSL_CIPHER_value(offered, i));
      }
    }
    ERR_clear_error();
    if (!known) {
      return Status::InvalidArgument(fmt::format(
          "--tls-ciphersuites: '{}' is not a TLS 1.3 cipher suite OpenSSL "
          "knows (TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384, "
          "TLS_CHACHA20_POLY1305_SHA256, ...)",
          item));
    }
  }
  if (SSL_CTX_set_ciphersuites(ctx, std::string(list).c_str()) != 1) {
    ERR_clear_error();
    return Status::InvalidArgument(
        fmt::format("--tls-ciphersuites: '{}' is not a list of TLS 1.3 "
                    "cipher suites",
                    list));
  }
  return Status::Ok();
}

}  // namespace

Status SetTlsCiphers(SSL_CTX* ctx, std::string_view tls12,
                     std::string_view tls13) {
  if (Status s = SetTls12(ctx, tls12); !s.ok()) return s;
  return SetTls13(ctx, tls13);
}

Status CheckTlsCiphers(std::string_view tls12, std::string_view tls13) {
  const std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> scratch(
      SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  if (scratch == nullptr) {
    return Status::Internal("OpenSSL could not make a TLS context");
  }
  return SetTlsCiphers(scratch.get(), tls12, tls13);
}

}  // namespace sqlq::server
