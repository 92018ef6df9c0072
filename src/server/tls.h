// The cipher suites `sqlq serve` offers over HTTPS (docs/server.md,
// "HTTPS"): the defaults, and the check and use of --tls-ciphers (TLS 1.2)
// and --tls-ciphersuites (TLS 1.3).

#ifndef SQLQ_SERVER_TLS_H_
#define SQLQ_SERVER_TLS_H_

#include <openssl/ssl.h>

#include <string_view>

#include "sqlq/status.h"

namespace sqlq::server {

// TLS 1.2: only ephemeral elliptic-curve key exchange (forward secrecy: a
// stolen key does not open recorded sessions) with authenticated
// encryption (GCM, ChaCha20-Poly1305). Static RSA key exchange and CBC
// with SHA-1 are left out.
inline constexpr std::string_view kDefaultTls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";
// TLS 1.3: every suite of the standard but the CCM ones, OpenSSL's default.
inline constexpr std::string_view kDefaultTls13Ciphersuites =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
    "TLS_CHACHA20_POLY1305_SHA256";

// Makes `ctx` offer `tls12` (an OpenSSL cipher list: names, aliases such
// as ECDHE+AESGCM, exclusions such as !SHA1) in TLS 1.2 and `tls13` (TLS
// 1.3 suite names, ':'-separated) in TLS 1.3.
// Errors: kInvalidArgument naming the flag and the item at fault, when a
// list is empty, an item names no suite OpenSSL knows, or the TLS 1.2
// list selects none; `ctx` is then unchanged or partly set.
Status SetTlsCiphers(SSL_CTX* ctx, std::string_view tls12,
                     std::string_view tls13);

// The same check on a context of its own, for the settings before start.
Status CheckTlsCiphers(std::string_view tls12, std::string_view tls13);

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_TLS_H_
