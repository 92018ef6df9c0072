// The server's parts called directly, without a socket: routing and
// authentication through Api::Handle over a real SQLite store, token globs
// and token files, the config file and settings, and URL decoding. What a
// client sees over real HTTP is tested in tests/server.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "server/api.h"
#include "server/auth.h"
#include "server/config.h"
#include "server/log.h"
#include "server/reply.h"
#include "server/target.h"
#include "server/trace.h"
#include "sqlq/store.h"
#include "tests/support/test_util.h"

namespace sqlq::server {
namespace {

using test::TempDir;
using Json = nlohmann::ordered_json;

// ---- URL decoding ---------------------------------------------------------

TEST(Target, SplitsPathAndDecodesSegmentsAndQuery) {
  Target t = ParseTarget("/v1/queues/a%20b%2Fc?limit=10&name=x+y%21&flag");
  EXPECT_EQ(t.segments, (std::vector<std::string>{"v1", "queues", "a b/c"}));
  EXPECT_EQ(t.query.at("limit"), "10");
  EXPECT_EQ(t.query.at("name"), "x y!");  // '+' is a space in a query
  EXPECT_EQ(t.query.at("flag"), "");
  // In a path segment '+' is itself.
  EXPECT_EQ(ParseTarget("/a+b").segments, (std::vector<std::string>{"a+b"}));
}

TEST(Target, BadEscapesAndRelativeTargetsAre400) {
  for (const char* bad : {"/v1/%", "/v1/%4", "/v1/%zz", "/v1?x=%g0", "v1"}) {
    try {
      ParseTarget(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const HttpError& e) {
      EXPECT_EQ(e.status, 400u) << bad;
      EXPECT_EQ(e.code, "bad_request") << bad;
    }
  }
  EXPECT_EQ(PercentDecode("%41%62%2b"), "Ab+");
}

// ---- token globs and files -----------------------------------------------

TEST(Auth, GlobsMatchWholeNames) {
  EXPECT_TRUE(GlobMatch("*", "anything"));
  EXPECT_TRUE(GlobMatch("jobs-*", "jobs-"));
  EXPECT_TRUE(GlobMatch("jobs-*", "jobs-emails"));
  EXPECT_FALSE(GlobMatch("jobs-*", "job-emails"));
  EXPECT_TRUE(GlobMatch("q?", "q1"));
  EXPECT_FALSE(GlobMatch("q?", "q"));
  EXPECT_FALSE(GlobMatch("q?", "q12"));
  EXPECT_TRUE(GlobMatch("a*b*c", "aXXbYYc"));
  EXPECT_FALSE(GlobMatch("a*b*c", "aXXbYY"));
  EXPECT_FALSE(GlobMatch("emails", "emails2"));
}

TEST(Auth, TokenFileGrantsWhatItSaysAndNoMore) {
  TempDir dir;
  const std::string path = (dir.path() / "tokens").string();
  std::ofstream(path) << "# workers\n"
                         "worker-token send,claim:jobs-*\n"
                         "admin-token admin:*\n";
  auto auth = Auth::Load(path);
  ASSERT_TRUE(auth.ok()) << auth.status().ToString();
  ASSERT_TRUE(auth->enabled());
  EXPECT_EQ(auth->Find("nobody"), nullptr);
  auto w = auth->Find("worker-token");
  ASSERT_NE(w, nullptr);
  EXPECT_TRUE(Auth::Allows(*w, kSend, "jobs-emails"));
  EXPECT_TRUE(Auth::Allows(*w, kClaim, "jobs-emails"));
  EXPECT_FALSE(Auth::Allows(*w, kAdmin, "jobs-emails"));
  EXPECT_FALSE(Auth::Allows(*w, kSend, "billing"));
  EXPECT_FALSE(Auth::Sees(*w, "billing"));
  EXPECT_FALSE(Auth::ReadsMetrics(*w));
  auto a = auth->Find("admin-token");
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(Auth::Allows(*a, kSend, "billing"));  // admin includes send
  EXPECT_TRUE(Auth::ReadsMetrics(*a));

  std::ofstream(path) << "same-token send:a\nsame-token claim:b\n";
  EXPECT_EQ(Auth::Load(path).status().code(), Code::kInvalidArgument);
  std::ofstream(path) << "some-token fly:a\n";
  EXPECT_EQ(Auth::Load(path).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Auth::Load((dir.path() / "missing").string()).status().code(),
            Code::kNotFound);
}

// AWS access keys for the SQS endpoint live in the same file, with the
// same grants; bad keys are refused with what is wrong and where.
TEST(Auth, AccessKeysCarryTheirSecretAndGrants) {
  TempDir dir;
  const std::string path = (dir.path() / "tokens").string();
  const std::string secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
  for (const std::string& text : std::vector<std::string>{
           "worker-token send:jobs\naws-key AKIAWORKER " + secret +
               " send,claim:jobs-*\n",
           R"({"tokens":[{"token":"worker-token","grants":{"jobs":["send"]}}],)"
           R"("keys":[{"access_key_id":"AKIAWORKER","secret_access_key":")" +
               secret + R"(","grants":{"jobs-*":["send","claim"]}}]})"}) {
    SCOPED_TRACE(text);
    std::ofstream(path) << text;
    auto auth = Auth::Load(path);
    ASSERT_TRUE(auth.ok()) << auth.status().ToString();
    EXPECT_EQ(auth->FindKey("AKIAOTHER"), nullptr);
    // A key is no bearer token, and a token no key.
    EXPECT_EQ(auth->Find("AKIAWORKER"), nullptr);
    EXPECT_EQ(auth->FindKey("worker-token"), nullptr);
    auto k = auth->FindKey("AKIAWORKER");
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->secret, secret);
    EXPECT_TRUE(Auth::Allows(*k, kClaim, "jobs-emails"));
    EXPECT_FALSE(Auth::Allows(*k, kAdmin, "jobs-emails"));
    EXPECT_FALSE(Auth::Sees(*k, "billing"));
  }
  // Keys alone make a token file.
  std::ofstream(path) << "aws-key AKIAONLY " << secret << " admin:*\n";
  ASSERT_TRUE(Auth::Load(path).ok());
  for (
      const std::string& bad : std::vector<std::string>{
          "aws-key AKIAWORKER\n", "aws-key AK " + secret + " send:q\n",
          "aws-key AKIA/WORKER " + secret + " send:q\n",
          "aws-key AKIAWORKER short send:q\n",
          "aws-key AKIAWORKER " + secret + "\n",
          "aws-key AKIAWORKER " + secret + " send:a\naws-key AKIAWORKER " +
              secret + " claim:b\n",
          R"({"keys":[{"access_key_id":"AKIAWORKER","grants":{"q":["send"]}}]})",
          R"({"keys":[{"access_key_id":"AKIAWORKER","secret_access_key":")" +
              secret + R"(","grants":{"q":["send"]},"region":"x"}]})",
          R"({"keys":{}})"}) {
    SCOPED_TRACE(bad);
    std::ofstream(path) << bad;
    auto auth = Auth::Load(path);
    EXPECT_EQ(auth.status().code(), Code::kInvalidArgument);
    // The message says where, never the secret.
    EXPECT_EQ(auth.status().message().find(secret), std::string::npos)
        << auth.status().message();
  }
}

// A token file may hold a token's SHA-256 instead of the token: whoever
// reads the file learns no token, and the token it hashes works.
TEST(Auth, HashedTokensAreTheirTokens) {
  TempDir dir;
  const std::string path = (dir.path() / "tokens").string();
  const std::string hash = TokenHashHex("mailer-worker-91cc");
  // What `sha256sum` prints for the token's bytes.
  EXPECT_EQ(TokenHashHex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::string upper = hash;
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  for (const std::string& text : std::vector<std::string>{
           "sha256:" + hash + " claim:emails\nadmin-token admin:*\n",
           "sha256:" + upper + " claim:emails\n",
           R"({"tokens":[{"sha256":")" + hash +
               R"(","grants":{"emails":["claim"]}}]})"}) {
    SCOPED_TRACE(text);
    std::ofstream(path) << text;
    auto auth = Auth::Load(path);
    ASSERT_TRUE(auth.ok()) << auth.status().ToString();
    auto w = auth->Find("mailer-worker-91cc");
    ASSERT_NE(w, nullptr);
    EXPECT_TRUE(Auth::Allows(*w, kClaim, "emails"));
    EXPECT_FALSE(Auth::Allows(*w, kSend, "emails"));
    // The hash itself is no token.
    EXPECT_EQ(auth->Find(hash), nullptr);
    EXPECT_EQ(auth->Find("sha256:" + hash), nullptr);
  }
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"sha256:" + hash.substr(1) + " send:q\n",
       "line 1: a token's SHA-256 is 64 hex digits"},
      {"sha256:" + hash.substr(1) + "g send:q\n", "64 hex digits"},
      // A token and its own hash are one token given twice.
      {"mailer-worker-91cc send:q\nsha256:" + hash + " claim:q\n",
       "line 2 repeats the token of line 1"},
      {R"({"tokens":[{"sha256":"00","grants":{"q":["send"]}}]})",
       "tokens[0]: a token's SHA-256 is 64 hex digits"},
      {R"({"tokens":[{"token":"mailer-worker-91cc","sha256":")" + hash +
           R"(","grants":{"q":["send"]}}]})",
       "needs \"token\" or \"sha256\""}};
  for (const auto& [text, why] : bad) {
    SCOPED_TRACE(text);
    std::ofstream(path) << text;
    auto auth = Auth::Load(path);
    EXPECT_EQ(auth.status().code(), Code::kInvalidArgument);
    EXPECT_NE(auth.status().message().find(why), std::string::npos)
        << auth.status().message();
  }
}

// SIGHUP reads the file again: new tokens work and removed ones stop at
// once; an entry already looked up stays whole; a bad file changes nothing.
TEST(Auth, ReloadReplacesTheTokensOrKeepsThemWhenTheFileIsBad) {
  TempDir dir;
  const std::string path = (dir.path() / "tokens").string();
  std::ofstream(path) << "old-token-1 send:jobs\n";
  auto auth = Auth::Load(path);
  ASSERT_TRUE(auth.ok()) << auth.status().ToString();
  auto held = auth->Find("old-token-1");
  ASSERT_NE(held, nullptr);

  std::ofstream(path)
      << "new-token-1 claim:jobs\nnew-token-2 admin:*\n"
      << "aws-key AKIANEW wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
      << " send:jobs\n";
  auto counts = auth->Reload();
  ASSERT_TRUE(counts.ok()) << counts.status().ToString();
  EXPECT_EQ(counts->tokens, 2u);
  EXPECT_EQ(counts->keys, 1u);
  EXPECT_EQ(auth->Find("old-token-1"), nullptr);
  ASSERT_NE(auth->Find("new-token-1"), nullptr);
  EXPECT_TRUE(Auth::Allows(*auth->Find("new-token-1"), kClaim, "jobs"));
  EXPECT_NE(auth->FindKey("AKIANEW"), nullptr);
  // The request that looked the old token up finishes with its grants.
  EXPECT_TRUE(Auth::Allows(*held, kSend, "jobs"));

  std::ofstream(path) << "new-token-1 nonsense:jobs\n";
  auto failed = auth->Reload();
  EXPECT_EQ(failed.status().code(), Code::kInvalidArgument);
  EXPECT_NE(failed.status().message().find("line 1"), std::string::npos)
      << failed.status().message();
  EXPECT_NE(auth->Find("new-token-2"), nullptr);
  EXPECT_EQ(auth->counts().tokens, 2u);

  std::filesystem::remove(path);
  EXPECT_EQ(auth->Reload().status().code(), Code::kNotFound);
  EXPECT_NE(auth->Find("new-token-2"), nullptr);

  Auth open = Auth::AllowAll();
  EXPECT_EQ(open.Reload().status().code(), Code::kFailedPrecondition);
}

// Failed authentications per address: a burst, then one more try per
// refill period; other addresses are not touched.
TEST(Auth, FailuresAreLimitedPerAddress) {
  using std::chrono::milliseconds;
  AuthFailures failures(3, milliseconds(1000));
  const auto t0 = AuthFailures::Clock::now();
  EXPECT_EQ(failures.Blocked("10.0.0.1", t0), milliseconds(0));
  EXPECT_FALSE(failures.Failed("10.0.0.1", "token", t0));
  EXPECT_FALSE(failures.Failed("10.0.0.1", "token", t0));
  EXPECT_EQ(failures.Blocked("10.0.0.1", t0), milliseconds(0));
  EXPECT_TRUE(failures.Failed("10.0.0.1", "token", t0));  // the last try
  EXPECT_EQ(failures.Blocked("10.0.0.1", t0), milliseconds(1000));
  EXPECT_EQ(failures.Blocked("10.0.0.1", t0 + milliseconds(400)),
            milliseconds(600));
  EXPECT_EQ(failures.Blocked("10.0.0.2", t0), milliseconds(0));
  // One try earned back per period, not the whole burst.
  const auto t1 = t0 + milliseconds(1000);
  EXPECT_EQ(failures.Blocked("10.0.0.1", t1), milliseconds(0));
  EXPECT_TRUE(failures.Failed("10.0.0.1", "token", t1));
  EXPECT_EQ(failures.Blocked("10.0.0.1", t1), milliseconds(1000));
  // After three periods without failures, the whole burst is back.
  const auto t4 = t1 + milliseconds(3000);
  EXPECT_FALSE(failures.Failed("10.0.0.1", "token", t4));
  EXPECT_FALSE(failures.Failed("10.0.0.1", "token", t4));
  EXPECT_TRUE(failures.Failed("10.0.0.1", "token", t4));
}

// ---- settings and the config file ----------------------------------------

TEST(Config, LogsShowDatabaseUrlsWithoutPasswords) {
  EXPECT_EQ(RedactedDbUrl("postgresql://sqlq:s3cret@db1:5432/sqlq"),
            "postgresql://sqlq:***@db1:5432/sqlq");
  EXPECT_EQ(RedactedDbUrl("mysql://root:p@ss:w@127.0.0.1:3306/q?x=1"),
            "mysql://root:***@127.0.0.1:3306/q?x=1");
  EXPECT_EQ(RedactedDbUrl("postgresql://db1/sqlq?user=a&password=s3cret&x=1"),
            "postgresql://db1/sqlq?user=a&password=***&x=1");
  EXPECT_EQ(RedactedDbUrl("host=db1 password=s3cret dbname=q"),
            "host=db1 password=*** dbname=q");
  EXPECT_EQ(RedactedDbUrl("postgresql://sqlq@db1/sqlq"),
            "postgresql://sqlq@db1/sqlq");
  EXPECT_EQ(RedactedDbUrl("sqlite:/var/lib/sqlq/q.db"),
            "sqlite:/var/lib/sqlq/q.db");
}

TEST(Config, FileLinesCommentsAndQuotes) {
  auto v = ParseConfigText(
      "# a comment\n\nmax-batch = 5   # five\nbind=\"0.0.0.0\"\r\n", "f.conf");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->size(), 2u);
  EXPECT_EQ(v->at("max-batch"), "5");
  EXPECT_EQ(v->at("bind"), "0.0.0.0");
  auto bad = ParseConfigText("port = 1\nno equals sign\n", "f.conf");
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("f.conf:2"), std::string::npos)
      << bad.status().message();
}

TEST(Config, DefaultsAndConvertedValues) {
  auto c = MakeServerConfig({}, "sqlite:x.db");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->db, "sqlite:x.db");
  EXPECT_EQ(c->bind, "127.0.0.1");
  EXPECT_EQ(c->port, 8080);
  EXPECT_EQ(c->limits.max_batch, 1000);
  EXPECT_EQ(c->limits.max_wait, std::chrono::seconds(60));
  EXPECT_FALSE(c->metrics_public);

  auto d = MakeServerConfig({{"max-batch", "7"},
                             {"max-wait", "1500ms"},
                             {"metrics-public", "true"},
                             {"port", "0"}},
                            "sqlite:x.db");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->limits.max_batch, 7);
  EXPECT_EQ(d->limits.max_wait, std::chrono::milliseconds(1500));
  EXPECT_TRUE(d->metrics_public);
  EXPECT_EQ(d->port, 0);

  // Ten failed authentications a minute by default: one every 6 s.
  EXPECT_EQ(c->limits.auth_failure_burst, 10);
  EXPECT_EQ(c->limits.auth_failure_refill, std::chrono::seconds(6));
  auto f = MakeServerConfig({{"auth-failures", "3/1s"}}, "sqlite:x.db");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->limits.auth_failure_burst, 3);
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::milliseconds>(
                f->limits.auth_failure_refill),
            std::chrono::milliseconds(333));
}

// Database threads: auto (the default) is 32 on SQLite, 16 on the server
// engines; a number is taken as it is.
TEST(Config, DatabaseThreadsDependOnTheEngineUnlessSet) {
  auto sqlite = MakeServerConfig({}, "sqlite:x.db");
  ASSERT_TRUE(sqlite.ok()) << sqlite.status().ToString();
  EXPECT_EQ(sqlite->db_threads, 32);
  for (const char* url :
       {"postgresql://u@h/db", "postgres://u@h/db", "mysql://u@h/db"}) {
    auto c = MakeServerConfig({}, url);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->db_threads, 16) << url;
  }
  auto set = MakeServerConfig({{"db-threads", "16"}}, "sqlite:x.db");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(set->db_threads, 16);
  auto pg = MakeServerConfig({{"db-threads", "48"}}, "postgresql://u@h/db");
  ASSERT_TRUE(pg.ok()) << pg.status().ToString();
  EXPECT_EQ(pg->db_threads, 48);
  auto given = MakeServerConfig({{"db-threads", "auto"}}, "mysql://u@h/db");
  ASSERT_TRUE(given.ok()) << given.status().ToString();
  EXPECT_EQ(given->db_threads, 16);
  auto bad = MakeServerConfig({{"db-threads", "many"}}, "sqlite:x.db");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "--db-threads: 'many' is not an integer in 1..1024, or auto");
}

TEST(Config, BadValuesNameTheirFlag) {
  const std::pair<const char*, const char*> bad[] = {
      {"max-batch", "0"},         {"max-batch", "10001"},
      {"port", "65536"},          {"port", "80x"},
      {"max-wait", "soon"},       {"metrics-public", "yes"},
      {"allowed-hosts", "a b"},   {"cors-origins", "example.com"},
      {"max-reply", "4095"},      {"auth-failures", "10"},
      {"auth-failures", "0/1m"},  {"auth-failures", "10/0s"},
      {"auth-failures", "x/1m"},  {"auth-failures", "10/25h"},
      {"auth-failures", "1011m"}, {"tls-cert", "cert.pem"},
      {"tls-key", "key.pem"},
  };
  for (auto [name, value] : bad) {
    auto c = MakeServerConfig({{name, value}}, "sqlite:x.db");
    EXPECT_EQ(c.status().code(), Code::kInvalidArgument) << name << value;
  }
  auto c = MakeServerConfig({{"max-batch", "0"}}, "sqlite:x.db");
  EXPECT_NE(c.status().message().find("--max-batch"), std::string::npos);
  auto unknown = MakeServerConfig({{"max-bach", "1"}}, "sqlite:x.db");
  EXPECT_EQ(unknown.status().code(), Code::kInvalidArgument);
}

// `sqlq serve` passes every setting, defaults included: the default cipher
// lists are fine without HTTPS, other lists need it.
TEST(Config, CipherListsOtherThanTheDefaultNeedHttps) {
  SettingValues all;
  for (const SettingSpec& s : ServeSettings()) all[s.name] = s.default_value;
  auto c = MakeServerConfig(all, "sqlite:x.db");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_NE(c->tls_ciphers.find("ECDHE-RSA-AES128-GCM-SHA256"),
            std::string::npos);
  all["tls-ciphers"] = "ECDHE-RSA-AES256-GCM-SHA384";
  auto d = MakeServerConfig(all, "sqlite:x.db");
  EXPECT_EQ(d.status().code(), Code::kInvalidArgument);
  EXPECT_NE(d.status().message().find("--tls-ciphers applies to HTTPS only"),
            std::string::npos)
      << d.status().message();
  all["tls-cert"] = "cert.pem";
  all["tls-key"] = "key.pem";
  auto e = MakeServerConfig(all, "sqlite:x.db");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->tls_ciphers, "ECDHE-RSA-AES256-GCM-SHA384");
}

TEST(Config, EveryFlagHasAnEnvironmentVariable) {
  for (const SettingSpec& s : ServeSettings()) {
    std::string env = "SQLQ_";
    for (const char* p = s.name; *p != '\0'; ++p) {
      env += *p == '-' ? '_' : static_cast<char>(std::toupper(*p));
    }
    EXPECT_EQ(env, s.env) << s.name;
  }
}

// ---- routing and authentication through Api::Handle ----------------------

class Routing : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = Store::Open("sqlite:" + (dir_.path() / "q.db").string());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(*s);
  }
  Api MakeApi(const Auth& auth) {
    return Api(*store_, limits_, auth, metrics_,
               {.read = [] { return Metrics::Gauges{}; },
                .shutting_down = [] { return false; }});
  }
  static Json Body(const Outcome& o) { return Json::parse(o.reply.Body()); }

  TempDir dir_;
  std::unique_ptr<Store> store_;
  Limits limits_;
  Metrics metrics_;
};

TEST_F(Routing, RoutesMethodsAndUnknownPaths) {
  Auth open = Auth::AllowAll();
  Api api = MakeApi(open);
  Outcome created = api.Handle({"POST", "/v1/queues/jobs", "", "{}"});
  EXPECT_EQ(created.reply.status, 201u);
  EXPECT_EQ(Body(created)["kind"], "queue");
  EXPECT_TRUE(Body(created).contains("created_at"));

  Outcome sent = api.Handle({"POST", "/v1/queues/jobs/messages", "",
                             R"({"messages":[{"payload":"a"}]})"});
  EXPECT_EQ(sent.reply.status, 200u);
  Outcome got = api.Handle({"GET", "/v1/queues/jobs", "", ""});
  EXPECT_EQ(Body(got)["stats"]["ready"], 1);
  EXPECT_EQ(Body(got)["stats"]["name"], "jobs");

  EXPECT_EQ(api.Handle({"PUT", "/v1/queues/jobs", "", ""}).reply.status, 405u);
  Outcome none = api.Handle({"GET", "/v1/nothing/here", "", ""});
  EXPECT_EQ(none.reply.status, 404u);
  EXPECT_EQ(Body(none)["error"]["code"], "no_route");
  Outcome missing = api.Handle({"GET", "/v1/queues/nope", "", ""});
  EXPECT_EQ(Body(missing)["error"]["code"], "not_found");
  // A claim that may wait is handed back to the server to park (it claims
  // first there); one that may not is answered at once.
  Outcome wait = api.Handle(
      {"POST", "/v1/queues/jobs/claim", "", R"({"max":5,"wait_ms":1000})"});
  ASSERT_TRUE(wait.park.has_value());
  EXPECT_EQ(wait.park->options.max, 5);
  Outcome now = api.Handle({"POST", "/v1/queues/jobs/claim", "", "{}"});
  EXPECT_FALSE(now.park.has_value());
  EXPECT_EQ(Body(now)["messages"].size(), 1u);
}

// Bulk changes by id look where "state" says: dead letters are redriven and
// deleted by their ids, which the queue alone does not hold.
TEST_F(Routing, BulkChangesByIdTakeWhereTheIdsAre) {
  Auth open = Auth::AllowAll();
  Api api = MakeApi(open);
  ASSERT_EQ(api.Handle({"POST", "/v1/queues/jobs", "", R"({"max_attempts":1})"})
                .reply.status,
            201u);
  ASSERT_EQ(api.Handle({"POST", "/v1/queues/jobs/messages", "",
                        R"({"messages":[{"payload":"a"},{"payload":"b"}]})"})
                .reply.status,
            200u);
  Json claimed =
      Body(api.Handle({"POST", "/v1/queues/jobs/claim", "", R"({"max":2})"}));
  std::vector<std::int64_t> ids;
  for (const Json& m : claimed["messages"]) {
    ids.push_back(m["id"].get<std::int64_t>());
    ASSERT_EQ(api.Handle({"POST", "/v1/queues/jobs/nack", "",
                          Json({{"receipt", m["receipt"]}}).dump()})
                  .reply.status,
              200u);
  }
  ASSERT_EQ(ids.size(), 2u);
  const std::string one = Json({{"ids", {ids[0]}}}).dump();
  // In the queue (the default) they are not: nothing changes.
  EXPECT_EQ(Body(api.Handle({"POST", "/v1/queues/jobs/messages/retry", "",
                             one}))["changed"],
            0);
  // Among the dead letters they are.
  EXPECT_EQ(
      Body(api.Handle(
          {"POST", "/v1/queues/jobs/messages/retry", "",
           Json({{"ids", {ids[0]}}, {"state", "dead"}}).dump()}))["changed"],
      1);
  EXPECT_EQ(
      Body(api.Handle(
          {"POST", "/v1/queues/jobs/messages/delete", "",
           Json({{"ids", {ids[1]}}, {"state", "dead"}}).dump()}))["changed"],
      1);
  Json stats = Body(api.Handle({"GET", "/v1/queues/jobs", "", ""}))["stats"];
  EXPECT_EQ(stats["ready"], 1);
  EXPECT_EQ(stats["dead"], 0);
  // A state beside a filter is refused: the filter has its own.
  EXPECT_EQ(api.Handle({"POST", "/v1/queues/jobs/messages/delete", "",
                        R"({"filter":{},"state":"dead"})"})
                .reply.status,
            400u);
}

TEST_F(Routing, TokensAreCheckedOnEveryRoute) {
  const std::string path = (dir_.path() / "tokens").string();
  std::ofstream(path) << "sender-token send:jobs\nboss-token admin:*\n";
  auto auth = Auth::Load(path);
  ASSERT_TRUE(auth.ok());
  Api api = MakeApi(*auth);
  EXPECT_EQ(api.Handle({"POST", "/v1/queues/jobs", "Bearer boss-token", "{}"})
                .reply.status,
            201u);
  EXPECT_EQ(api.Handle({"GET", "/v1/queues", "", ""}).reply.status, 401u);
  EXPECT_EQ(api.Handle({"GET", "/v1/queues", "Bearer wrong", ""}).reply.status,
            401u);
  EXPECT_EQ(
      api.Handle({"POST", "/v1/queues/jobs/messages", "bearer sender-token",
                  R"({"messages":[{"payload":"a"}]})"})
          .reply.status,
      200u);
  EXPECT_EQ(
      api.Handle({"POST", "/v1/queues/jobs/claim", "Bearer sender-token", "{}"})
          .reply.status,
      403u);
  EXPECT_EQ(api.Handle({"DELETE", "/v1/queues/jobs", "Bearer sender-token", ""})
                .reply.status,
            403u);
  // /metrics needs a metrics or admin grant.
  EXPECT_EQ(
      api.Handle({"GET", "/metrics", "Bearer sender-token", ""}).reply.status,
      403u);
  EXPECT_EQ(
      api.Handle({"GET", "/metrics", "Bearer boss-token", ""}).reply.status,
      200u);
}

// The trace id a request's log lines carry: W3C traceparent first, else
// the root of AWS X-Ray's header; nothing from a malformed one.
TEST(TraceId, FromTraceparentOrTheXRayRoot) {
  const std::string w3c =
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  EXPECT_EQ(TraceIdOf(w3c, ""), "4bf92f3577b34da6a3ce929d0e0e4736");
  // A later version may carry more after a dash.
  EXPECT_EQ(TraceIdOf("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-"
                      "01-more",
                      ""),
            "4bf92f3577b34da6a3ce929d0e0e4736");
  const std::string xray =
      "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;"
      "Sampled=1";
  EXPECT_EQ(TraceIdOf("", xray), "5759e988bd862e3fe1be46a994272793");
  EXPECT_EQ(
      TraceIdOf("", "Self=1-aaa;Root=1-5759E988-BD862E3FE1BE46A994272793"),
      "5759e988bd862e3fe1be46a994272793");
  EXPECT_EQ(TraceIdOf(w3c, xray), "4bf92f3577b34da6a3ce929d0e0e4736");
  for (const char* bad :
       {"", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",  // short
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // version
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",   // zero
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",   // case
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01"}) {
    EXPECT_EQ(TraceIdOf(bad, ""), "") << bad;
  }
  EXPECT_EQ(TraceIdOf("", "Root=1-5759e988-bd86"), "");
  EXPECT_EQ(TraceIdOf("", "Root=2-5759e988-bd862e3fe1be46a994272793"), "");
}

// SQS's AWSTraceHeader and a message's traceparent header are one context.
TEST(TraceId, XRayHeadersAndTraceparentsConvertBothWays) {
  const std::string xray =
      "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;"
      "Sampled=1";
  const std::string w3c =
      "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01";
  EXPECT_EQ(TraceparentOfXRay(xray), w3c);
  EXPECT_EQ(XRayOfTraceparent(w3c), xray);
  EXPECT_EQ(TraceparentOfXRay("Root=1-5759e988-bd862e3fe1be46a994272793;"
                              "Parent=53995C3F42CD8AD8;Sampled=0"),
            "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-00");
  EXPECT_EQ(XRayOfTraceparent(
                "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-00"),
            "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;"
            "Sampled=0");
  // No parent, a short one, no root: nothing to continue.
  EXPECT_EQ(TraceparentOfXRay("Root=1-5759e988-bd862e3fe1be46a994272793"),
            std::nullopt);
  EXPECT_EQ(TraceparentOfXRay("Root=1-5759e988-bd862e3fe1be46a994272793;"
                              "Parent=53995c3f"),
            std::nullopt);
  EXPECT_EQ(TraceparentOfXRay("Parent=53995c3f42cd8ad8"), std::nullopt);
  EXPECT_EQ(XRayOfTraceparent("not-a-trace"), std::nullopt);
  EXPECT_EQ(XRayOfTraceparent(
                "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-zz"),
            std::nullopt);
}

}  // namespace
}  // namespace sqlq::server
