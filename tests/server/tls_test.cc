// HTTPS (--tls-cert, --tls-key) with real TLS clients: curl and OpenSSL's
// s_client verify the server's certificate, send requests over kept-alive
// connections and wait in long polls; plain HTTP and old TLS versions are
// refused without hurting anyone else; only forward-secret authenticated
// cipher suites are offered, as configured; bad certificate or cipher
// settings stop the server at start.

#include <cstdio>

#include "tests/server/server_fixture.h"
#include "tests/support/shell.h"

namespace sqlq::server_test {
namespace {

using test::Ran;
using test::Shell;

class Tls : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    // A self-signed certificate for 127.0.0.1 and localhost, made now.
    const Ran made = Shell(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
        "-nodes -days 2 -subj /CN=sqlq-test -addext "
        "subjectAltName=IP:127.0.0.1,DNS:localhost -keyout " +
        key().string() + " -out " + cert().string());
    ASSERT_EQ(made.exit, 0) << made.out;
  }
  fs::path cert() const { return dir_ / "cert.pem"; }
  fs::path key() const { return dir_ / "key.pem"; }
  void StartTls(std::vector<std::string> more = {}) {
    std::vector<std::string> args = {"--tls-cert", cert().string(), "--tls-key",
                                     key().string()};
    args.insert(args.end(), more.begin(), more.end());
    StartServer(std::move(args));
  }
  std::string Url(const std::string& path) const {
    return "https://127.0.0.1:" + std::to_string(port()) + path;
  }
  // A certificate and key of RSA, for the suites that need one.
  void MakeRsaCertificate() {
    const Ran made = Shell(
        "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "
        "/CN=sqlq-test -addext subjectAltName=IP:127.0.0.1 -keyout " +
        (dir_ / "rsa_key.pem").string() + " -out " +
        (dir_ / "rsa_cert.pem").string());
    ASSERT_EQ(made.exit, 0) << made.out;
  }
  void StartRsaTls(std::vector<std::string> more = {}) {
    std::vector<std::string> args = {
        "--tls-cert", (dir_ / "rsa_cert.pem").string(), "--tls-key",
        (dir_ / "rsa_key.pem").string()};
    args.insert(args.end(), more.begin(), more.end());
    StartServer(std::move(args));
  }
  // A handshake of OpenSSL's s_client offering only what `offer` says
  // ("-tls1_2 -cipher AES128-SHA"): the suite agreed on, or "" when the
  // server refuses every suite offered.
  std::string Agreed(const std::string& offer) const {
    const Ran r =
        Shell("openssl s_client -connect 127.0.0.1:" + std::to_string(port()) +
              " " + offer + " < /dev/null");
    const std::size_t at = r.out.find(", Cipher is ");
    if (r.exit != 0 || at == std::string::npos) {
      EXPECT_NE(r.out.find("alert handshake failure"), std::string::npos)
          << offer << "\n"
          << r.out;
      return "";
    }
    const std::size_t from = at + std::string(", Cipher is ").size();
    return r.out.substr(from, r.out.find('\n', from) - from);
  }
  // curl, trusting only the test's certificate.
  std::string Curl() const {
    return "curl --silent --show-error --max-time 30 --cacert " +
           cert().string() + " ";
  }
};

TEST_F(Tls, CurlVerifiesTheServerAndKeepsItsConnection) {
  StartTls();
  EXPECT_NE(server_->log().find("tls=on"), std::string::npos) << server_->log();
  const Ran health = Shell(Curl() + Url("/healthz"));
  ASSERT_EQ(health.exit, 0) << health.out;
  EXPECT_EQ(Json::parse(health.out)["status"], "ok");

  // Create, send and claim in one curl run: three requests, one TLS
  // connection (curl counts the connections each transfer made).
  const std::string json = " -H 'Content-Type: application/json' ";
  const Ran three =
      Shell(Curl() + "-w '\\nconnects=%{num_connects}\\n' -X POST" + json +
            "-d '{}' " + Url("/v1/queues/jobs") + " --next --cacert " +
            cert().string() + " -w '\\nconnects=%{num_connects}\\n' -X POST" +
            json + "-d '{\"messages\":[{\"payload\":\"over tls\"}]}' " +
            Url("/v1/queues/jobs/messages") + " --next --cacert " +
            cert().string() + " -w '\\nconnects=%{num_connects}\\n' -X POST" +
            json + "-d '{\"max\":1}' " + Url("/v1/queues/jobs/claim"));
  ASSERT_EQ(three.exit, 0) << three.out;
  EXPECT_EQ(Occurrences(three.out, "connects=1"), 1u) << three.out;
  EXPECT_EQ(Occurrences(three.out, "connects=0"), 2u) << three.out;
  EXPECT_NE(three.out.find("\"payload\":\"over tls\""), std::string::npos)
      << three.out;

  // Without the test's certificate to trust, curl refuses the server: the
  // connection really is verified TLS.
  const Ran untrusted =
      Shell("curl --silent --show-error --max-time 30 " + Url("/healthz"));
  EXPECT_EQ(untrusted.exit, 60) << untrusted.out;  // peer not verified
}

TEST_F(Tls, ALongPollOverTlsGetsItsMessage) {
  StartTls();
  ASSERT_EQ(Shell(Curl() +
                  "-X POST -H 'Content-Type: application/json' -d "
                  "'{}' " +
                  Url("/v1/queues/jobs"))
                .exit,
            0);
  // The claim waits in a curl of its own; the send comes from another.
  const fs::path out = dir_ / "claim.out";
  const std::string claim = Curl() +
                            "-X POST -H 'Content-Type: application/json' -d "
                            "'{\"wait_ms\":20000}' " +
                            Url("/v1/queues/jobs/claim") + " > " +
                            out.string() + " 2>&1";
  std::thread waiter([&] { (void)std::system(claim.c_str()); });
  ASSERT_TRUE(WaitFor([&] {
    const Ran m = Shell(Curl() + Url("/metrics"));
    return m.out.find("sqlq_server_waiting_consumers 1\n") != std::string::npos;
  }));
  const Ran sent = Shell(Curl() +
                         "-X POST -H 'Content-Type: application/json' -d "
                         "'{\"messages\":[{\"payload\":\"woken\"}]}' " +
                         Url("/v1/queues/jobs/messages"));
  ASSERT_EQ(sent.exit, 0) << sent.out;
  waiter.join();
  std::ifstream f(out);
  std::stringstream got;
  got << f.rdbuf();
  EXPECT_NE(got.str().find("\"payload\":\"woken\""), std::string::npos)
      << got.str();
}

TEST_F(Tls, PlainHttpAndOldTlsAreRefusedAndOthersGoOn) {
  StartTls();
  // A plain HTTP request to the TLS port: no reply, the connection closed,
  // a line in the log.
  RawConn raw(port());
  ASSERT_TRUE(raw.ok());
  ASSERT_TRUE(raw.Write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  EXPECT_TRUE(raw.ClosedWithin(std::chrono::seconds(10)));
  EXPECT_EQ(raw.buffered().find("HTTP/1.1 200"), std::string::npos);
  EXPECT_TRUE(WaitFor([&] {
    return server_->log().find("event=tls_handshake_failed") !=
           std::string::npos;
  }));
  // TLS 1.1 is refused by the server (the client is told to allow it:
  // the alert comes from the server); 1.2 and 1.3 are served.
  const Ran old =
      Shell("openssl s_client -connect 127.0.0.1:" + std::to_string(port()) +
            " -tls1_1 -cipher DEFAULT@SECLEVEL=0 -CAfile " + cert().string() +
            " < /dev/null");
  EXPECT_NE(old.exit, 0) << old.out;
  EXPECT_NE(old.out.find("alert protocol version"), std::string::npos)
      << old.out;
  for (const char* version : {"-tls1_2", "-tls1_3"}) {
    const Ran ok =
        Shell("openssl s_client -connect 127.0.0.1:" + std::to_string(port()) +
              " " + version + " -verify_return_error -CAfile " +
              cert().string() + " < /dev/null");
    EXPECT_EQ(ok.exit, 0) << version << ok.out;
    EXPECT_NE(ok.out.find("Verify return code: 0 (ok)"), std::string::npos)
        << version << ok.out;
  }
  // A client that connects and says nothing is dropped after the request
  // timeout, and the server goes on.
  RawConn silent(port());
  ASSERT_TRUE(silent.ok());
  const Ran health = Shell(Curl() + Url("/healthz"));
  EXPECT_EQ(health.exit, 0) << health.out;
}

// By default TLS 1.2 offers only suites with forward secrecy (ECDHE) and
// authenticated encryption (GCM, ChaCha20-Poly1305): not static RSA key
// exchange, whose recorded sessions a stolen key opens, nor CBC with
// SHA-1. TLS 1.3 is served.
TEST_F(Tls, OnlyForwardSecretAuthenticatedSuitesAreOffered) {
  MakeRsaCertificate();
  StartRsaTls();
  for (const char* refused :
       {"AES128-SHA", "AES256-GCM-SHA384", "AES128-GCM-SHA256",
        "ECDHE-RSA-AES128-SHA", "ECDHE-RSA-AES256-SHA384"}) {
    EXPECT_EQ(Agreed(std::string("-tls1_2 -cipher ") + refused), "") << refused;
  }
  for (const char* served :
       {"ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-GCM-SHA384",
        "ECDHE-RSA-CHACHA20-POLY1305"}) {
    EXPECT_EQ(Agreed(std::string("-tls1_2 -cipher ") + served), served);
  }
  // A client offering everything gets an ECDHE suite of the list.
  EXPECT_EQ(Agreed("-tls1_2 -cipher ALL").rfind("ECDHE-RSA-", 0), 0u);
  EXPECT_EQ(Agreed("-tls1_3"), "TLS_AES_256_GCM_SHA384");
  server_.reset();
  // The same with an ECDSA certificate.
  StartTls();
  EXPECT_EQ(Agreed("-tls1_2 -cipher ECDHE-ECDSA-AES128-SHA"), "");
  EXPECT_EQ(Agreed("-tls1_2 -cipher ECDHE-ECDSA-AES128-GCM-SHA256"),
            "ECDHE-ECDSA-AES128-GCM-SHA256");
}

// --tls-ciphers and --tls-ciphersuites replace the lists.
TEST_F(Tls, TheOfferedSuitesAreConfigurable) {
  MakeRsaCertificate();
  StartRsaTls({"--tls-ciphers", "ECDHE-RSA-AES256-GCM-SHA384",
               "--tls-ciphersuites", "TLS_CHACHA20_POLY1305_SHA256"});
  EXPECT_EQ(Agreed("-tls1_2 -cipher ECDHE-RSA-AES128-GCM-SHA256"), "");
  EXPECT_EQ(Agreed("-tls1_2"), "ECDHE-RSA-AES256-GCM-SHA384");
  EXPECT_EQ(Agreed("-tls1_3 -ciphersuites TLS_AES_256_GCM_SHA384"), "");
  EXPECT_EQ(Agreed("-tls1_3"), "TLS_CHACHA20_POLY1305_SHA256");
}

TEST_F(Tls, BadCertificateSettingsStopTheServerAtStart) {
  auto refused = [&](std::vector<std::string> args, const std::string& why) {
    ServerProcess s(dir_, std::move(args));
    EXPECT_FALSE(s.Start());
    EXPECT_EQ(s.WaitExit(std::chrono::seconds(10)), 2) << s.log();
    EXPECT_NE(s.log().find(why), std::string::npos) << s.log();
    fs::remove(s.log_file());
  };
  refused({"--tls-cert", cert().string()},
          "--tls-cert and --tls-key go together");
  refused({"--tls-cert", (dir_ / "missing.pem").string(), "--tls-key",
           key().string()},
          "--tls-cert '" + (dir_ / "missing.pem").string() + "'");
  // A key of another certificate.
  const fs::path other = dir_ / "other.pem";
  ASSERT_EQ(Shell("openssl genpkey -algorithm ec -pkeyopt "
                  "ec_paramgen_curve:prime256v1 -out " +
                  other.string())
                .exit,
            0);
  refused({"--tls-cert", cert().string(), "--tls-key", other.string()},
          "is not the key of --tls-cert");
  // The certificate given as the key.
  refused({"--tls-cert", cert().string(), "--tls-key", cert().string()},
          "cannot use it as a PEM private key");
  // Cipher lists with a name OpenSSL does not know (a typo would
  // otherwise drop a suite silently), empty, or without a certificate.
  const std::vector<std::string> tls = {"--tls-cert", cert().string(),
                                        "--tls-key", key().string()};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = tls;
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  refused(with({"--tls-ciphers",
                "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-"
                "AES128-GMC-SHA256"}),
          "--tls-ciphers: 'ECDHE-RSA-AES128-GMC-SHA256' names no TLS 1.2 "
          "cipher suite OpenSSL knows");
  refused(with({"--tls-ciphers", "TLS_AES_128_GCM_SHA256"}),
          "--tls-ciphers: 'TLS_AES_128_GCM_SHA256' names no TLS 1.2");
  refused(with({"--tls-ciphers", ""}), "--tls-ciphers is empty");
  refused(with({"--tls-ciphersuites", "TLS_AES_128_GCM_SHA256:AES128-SHA"}),
          "--tls-ciphersuites: 'AES128-SHA' is not a TLS 1.3 cipher suite");
  refused(with({"--tls-ciphersuites", ""}), "--tls-ciphersuites is empty");
  refused({"--tls-ciphers", "ECDHE-RSA-AES128-GCM-SHA256"},
          "--tls-ciphers applies to HTTPS only");
}

}  // namespace
}  // namespace sqlq::server_test
