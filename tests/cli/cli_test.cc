// The sqlq command-line contract, as a script sees it: the real program is
// run with arguments, stdin and environment, and the tests check its JSON
// lines, tables, one-line error messages and exit codes, and that bad input
// leaves the stored data untouched. Exit codes: ExitCode() in
// src/wire/printer.cc and the program's --help footer.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tests/cli/cli_assertions.h"
#include "tests/cli/cli_fixture.h"
#include "tests/cli/cli_runner.h"

namespace sqlq::cli_test {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Stats without oldest_ready_age_ms, which grows while the test runs.
json Counts(json stats) {
  stats.erase("oldest_ready_age_ms");
  return stats;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::set<std::string> DirEntries(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    out.insert(e.path().filename().string());
  }
  return out;
}

// Whitespace-separated words of a line.
std::vector<std::string> Words(const std::string& line) {
  std::istringstream in(line);
  return {std::istream_iterator<std::string>(in),
          std::istream_iterator<std::string>()};
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// True once the main thread of `pid` sleeps in futex(2): for the sqlq
// program blocked in a waiting claim, that is the wait for a wake-up (it
// takes no other lock that anyone could hold). Returns false at `deadline`.
bool WaitUntilBlockedInFutex(pid_t pid,
                             std::chrono::steady_clock::time_point deadline) {
  const std::string path = "/proc/" + std::to_string(pid) + "/syscall";
  while (std::chrono::steady_clock::now() < deadline) {
    std::string s = ReadFile(path);
    if (s.rfind(std::to_string(SYS_futex) + " ", 0) == 0) return true;
    if (s.empty()) return false;  // exited
    usleep(1000);
  }
  return false;
}

class CliTest : public CliFixture {
 protected:
  // Makes `as` run the program as user nobody when the tests run as root,
  // who ignores file modes; fails when nobody cannot run it.
  void AsUnprivileged(RunOptions& as) {
    if (geteuid() != 0) return;
    passwd* nobody = getpwnam("nobody");
    ASSERT_NE(nobody, nullptr);
    as.uid = nobody->pw_uid;
    as.gid = nobody->pw_gid;
    RunResult probe = Sqlq({"--version"}, as);
    ASSERT_EQ(probe.exit_code, kOk)
        << "user nobody cannot run " << SQLQ_BIN
        << " (are the build directory and its parents world-executable?)\n"
        << Show(probe);
  }
  json Stats(const std::string& queue) {
    return One({"queue", "stats", queue});
  }
  std::vector<std::string> QueueNames() {
    std::vector<std::string> names;
    for (const json& q : Ok({"queue", "list"})) names.push_back(q["name"]);
    return names;
  }
  std::int64_t Send(const std::string& queue, const std::string& payload) {
    json j = One({"send", queue, payload});
    return j.value("id", std::int64_t{-1});
  }
};

// ---------------------------------------------------------------- queues

TEST_F(CliTest, QueueCreateTakesEveryOption) {
  json created = One({"queue",
                      "create",
                      "jobs",
                      "--max-attempts",
                      "3",
                      "--lease",
                      "500ms",
                      "--backoff-base",
                      "2s",
                      "--backoff-max",
                      "5m",
                      "--archive",
                      "--retention",
                      "1d",
                      "--max-payload",
                      "100",
                      "--unique-for",
                      "10m",
                      "--max-leased",
                      "4",
                      "--rate-limit",
                      "10/s",
                      "--rate-burst",
                      "20",
                      "--dead-letter-queue",
                      "jobs-dlq",
                      "--label",
                      "owner=payments",
                      "--label",
                      "tier=gold"});
  // The queue object, as `queue list` and the HTTP API show it.
  ASSERT_TRUE(created.contains("created_at")) << created;
  EXPECT_LE(std::abs(NowUs() - ParseTimeUs(created["created_at"])), 60'000'000);
  created.erase("created_at");
  EXPECT_EQ(created, json::parse(R"({"name":"jobs","kind":"queue",
      "max_attempts":3,"lease_ms":500,"backoff_base_ms":2000,
      "backoff_max_ms":300000,"archive":true,"retention_ms":86400000,
      "max_payload_bytes":100,"dead_retention_ms":0,"unique_for_ms":600000,"groups":"none",
      "max_leased":4,"rate_limit":10.0,"rate_burst":20,"group_limit":null,
      "dead_letter_queue":"jobs-dlq","labels":{"owner":"payments","tier":"gold"},
      "paused":false})"));

  // The settings are stored, not just echoed.
  auto list = Ok({"queue", "list"});
  ASSERT_EQ(list.size(), 1u);
  json q = list[0];
  ASSERT_TRUE(q.contains("created_at"));
  std::int64_t created_at = ParseTimeUs(q["created_at"]);
  EXPECT_LE(std::abs(NowUs() - created_at), 60'000'000);
  q.erase("created_at");
  EXPECT_EQ(q, json::parse(R"({"name":"jobs","kind":"queue","max_attempts":3,
      "lease_ms":500,"backoff_base_ms":2000,"backoff_max_ms":300000,"archive":true,
      "retention_ms":86400000,"max_payload_bytes":100,"dead_retention_ms":0,
      "unique_for_ms":600000,"groups":"none","max_leased":4,"rate_limit":10.0,
      "rate_burst":20,"group_limit":null,"dead_letter_queue":"jobs-dlq",
      "labels":{"owner":"payments","tier":"gold"},"paused":false})"));

  // alter: "none" lifts the dead-letter queue, NAME= drops a label.
  json altered = One({"queue", "alter", "jobs", "--dead-letter-queue", "none",
                      "--label", "tier=", "--label", "team=core"});
  EXPECT_TRUE(altered["dead_letter_queue"].is_null()) << altered;
  EXPECT_EQ(altered["labels"], json::parse(R"({"owner":"payments",
      "team":"core"})"));
}

TEST_F(CliTest, QueueCreateDefaults) {
  json created = One({"queue", "create", "plain"});
  created.erase("created_at");
  EXPECT_EQ(created, json::parse(R"({"name":"plain","kind":"queue",
      "max_attempts":5,"lease_ms":30000,"backoff_base_ms":1000,
      "backoff_max_ms":600000,"archive":false,"retention_ms":604800000,
      "max_payload_bytes":1048576,"dead_retention_ms":0,"unique_for_ms":0,"groups":"none",
      "max_leased":null,"rate_limit":null,"rate_burst":null,"group_limit":null,
      "dead_letter_queue":null,"labels":{},"paused":false})"));
}

TEST_F(CliTest, DurationsTakeEveryUnitAndPlainSeconds) {
  const std::vector<std::pair<std::string, std::int64_t>> forms = {
      {"500ms", 500}, {"30s", 30000}, {"5m", 300000}, {"2h", 7200000},
      {"45", 45000},  {"0.5", 500},   {"1.5s", 1500}};
  int i = 0;
  for (const auto& [text, ms] : forms) {
    std::string name = "q" + std::to_string(i++);
    json j = One({"queue", "create", name, "--lease", text});
    EXPECT_EQ(j["lease_ms"], ms) << text;
  }
  json j = One({"queue", "create", "ret", "--retention", "30d"});
  EXPECT_EQ(j["retention_ms"], 30LL * 86400 * 1000);
}

TEST_F(CliTest, QueueCreateTwiceExits4AndKeepsTheFirst) {
  One({"queue", "create", "jobs", "--max-attempts", "7"});
  EXPECT_TRUE(FailsWith(Human({"queue", "create", "jobs"}), kExists, "jobs"));
  auto list = Ok({"queue", "list"});
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["max_attempts"], 7);
}

TEST_F(CliTest, QueueListIsOneJsonObjectPerQueueInNameOrder) {
  One({"queue", "create", "zeta"});
  One({"queue", "create", "alpha", "--archive"});
  One({"queue", "create", "mid-1_x"});
  auto list = Ok({"queue", "list"});
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0]["name"], "alpha");
  EXPECT_EQ(list[0]["archive"], true);
  EXPECT_EQ(list[1]["name"], "mid-1_x");
  EXPECT_EQ(list[2]["name"], "zeta");
  EXPECT_EQ(list[2]["archive"], false);
}

TEST_F(CliTest, QueueListHumanIsATableWithAHeader) {
  One({"queue", "create", "jobs", "--lease", "5m"});
  One({"queue", "create", "mail"});
  RunResult r = Human({"queue", "list"});
  ASSERT_EQ(r.exit_code, kOk) << Show(r);
  EXPECT_EQ(r.err, "");
  auto lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_EQ(Words(lines[0]),
            (std::vector<std::string>{"NAME", "PAUSED", "GROUPS",
                                      "MAX_ATTEMPTS", "LEASE", "ARCHIVE",
                                      "LIMITS", "DEAD_LETTER_QUEUE"}));
  auto jobs = Words(lines[1]);
  ASSERT_EQ(jobs.size(), 8u) << lines[1];
  EXPECT_EQ(jobs[0], "jobs");
  EXPECT_EQ(jobs[4], "5m");
  // Columns line up under their headers.
  EXPECT_EQ(lines[1].find("5m"), lines[0].find("LEASE"));
  EXPECT_EQ(Words(lines[2])[0], "mail");
}

TEST_F(CliTest, QueueStatsCountSendsClaimsAcksAndNacks) {
  One({"queue", "create", "jobs"});
  One({"queue", "create", "other"});
  json s = Stats("jobs");
  EXPECT_EQ(s, json::parse(R"({"name":"jobs","ready":0,"delayed":0,
      "leased":0,"waiting":0,"dead":0,"archived":0,"oldest_ready_age_ms":0,"sends":0,
      "claims":0,"acks":0,"nacks":0,"expirations":0,"dead_lettered":0,
      "expired":0,"paused":false})"));

  for (const char* p : {"a", "b", "c"}) Send("jobs", p);
  s = Stats("jobs");
  EXPECT_EQ(s["ready"], 3);
  EXPECT_EQ(s["sends"], 3);
  EXPECT_GE(s["oldest_ready_age_ms"].get<std::int64_t>(), 0);

  auto claimed = Ok({"claim", "jobs", "--max", "2"});
  ASSERT_EQ(claimed.size(), 2u);
  s = Stats("jobs");
  EXPECT_EQ(s["ready"], 1);
  EXPECT_EQ(s["leased"], 2);
  EXPECT_EQ(s["claims"], 2);

  One({"ack", "jobs", claimed[0]["receipt"]});
  s = Stats("jobs");
  EXPECT_EQ(s["leased"], 1);
  EXPECT_EQ(s["acks"], 1);

  One({"nack", "jobs", claimed[1]["receipt"], "--delay", "1h"});
  s = Stats("jobs");
  EXPECT_EQ(s["ready"], 1);
  EXPECT_EQ(s["leased"], 0);
  EXPECT_EQ(s["delayed"], 1);
  EXPECT_EQ(s["nacks"], 1);
  EXPECT_EQ(s["sends"], 3);

  // Without a name: every queue, in name order; the other one untouched.
  auto all = Ok({"queue", "stats"});
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(Counts(all[0]), Counts(s));
  EXPECT_EQ(all[1]["name"], "other");
  EXPECT_EQ(all[1]["sends"], 0);
}

TEST_F(CliTest, ClaimWithAckAcksTheHeldMessageAndClaimsTheNext) {
  One({"queue", "create", "jobs"});
  for (const char* p : {"a", "b"}) Send("jobs", p);
  auto first = Ok({"claim", "jobs"});
  ASSERT_EQ(first.size(), 1u);
  auto next = Ok({"claim", "jobs", "--ack", first[0]["receipt"]});
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0]["payload"], "b");
  json s = Stats("jobs");
  EXPECT_EQ(s["acks"], 1);
  EXPECT_EQ(s["leased"], 1);
  // The same receipt again: refused, and the command claims nothing.
  Send("jobs", "c");
  EXPECT_TRUE(FailsWith(Human({"claim", "jobs", "--ack", first[0]["receipt"]}),
                        kNotFound, "not in the queue"));
  s = Stats("jobs");
  EXPECT_EQ(s["ready"], 1);
  EXPECT_EQ(s["leased"], 1);
}

TEST_F(CliTest, QueueStatsHumanIsATableWithAHeader) {
  One({"queue", "create", "jobs"});
  Send("jobs", "x");
  RunResult r = Human({"queue", "stats", "jobs"});
  ASSERT_EQ(r.exit_code, kOk) << Show(r);
  auto lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  auto header = Words(lines[0]);
  ASSERT_GE(header.size(), 3u);
  EXPECT_EQ(header[0], "NAME");
  EXPECT_EQ(header[1], "READY");
  auto row = Words(lines[1]);
  ASSERT_EQ(row.size(), header.size()) << r.out;
  EXPECT_EQ(row[0], "jobs");
  EXPECT_EQ(row[1], "1");
}

TEST_F(CliTest, QueueDropDeletesTheQueue) {
  One({"queue", "create", "jobs"});
  One({"queue", "create", "keep"});
  Send("jobs", "x");
  Send("keep", "y");
  EXPECT_EQ(One({"queue", "drop", "jobs"}),
            json::parse(R"({"dropped":"jobs"})"));
  EXPECT_EQ(QueueNames(), std::vector<std::string>{"keep"});
  EXPECT_TRUE(FailsWith(Human({"queue", "stats", "jobs"}), kNotFound, "jobs"));
  EXPECT_TRUE(FailsWith(Human({"send", "jobs", "x"}), kNotFound, "jobs"));
  EXPECT_TRUE(FailsWith(Human({"queue", "drop", "jobs"}), kNotFound, "jobs"));
  EXPECT_EQ(Stats("keep")["ready"], 1);
}

TEST_F(CliTest, QueuePurgeDeletesMessagesAndKeepsDeadLetters) {
  One({"queue", "create", "jobs", "--max-attempts", "1"});
  Send("jobs", "will die");
  auto c = Ok({"claim", "jobs"});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(One({"nack", "jobs", c[0]["receipt"]})["outcome"], "dead");
  Send("jobs", "ready");
  Send("jobs", "leased");
  One({"send", "jobs", "delayed", "--delay", "1h"});
  ASSERT_EQ(Ok({"claim", "jobs"}).size(), 1u);

  EXPECT_EQ(One({"queue", "purge", "jobs"}), json::parse(R"({"purged":3})"));
  json s = Stats("jobs");
  EXPECT_EQ(s["ready"], 0);
  EXPECT_EQ(s["leased"], 0);
  EXPECT_EQ(s["delayed"], 0);
  EXPECT_EQ(s["dead"], 1);
  EXPECT_EQ(Ok({"dead", "list", "jobs"}).size(), 1u);
}

// ------------------------------------------------------------------ send

TEST_F(CliTest, SendPrintsTheIdOfTheNewMessage) {
  One({"queue", "create", "jobs"});
  json a = One({"send", "jobs", "first"});
  json b = One({"send", "jobs", "second"});
  ASSERT_TRUE(a["id"].is_number_integer());
  EXPECT_EQ(a.size(), 1u) << a;  // no "duplicate" unless it is one
  EXPECT_GT(b["id"].get<std::int64_t>(), a["id"].get<std::int64_t>());

  RunResult r = Human({"send", "jobs", "third"});
  EXPECT_EQ(r.exit_code, kOk) << Show(r);
  EXPECT_EQ(r.out, "sent message " +
                       std::to_string(b["id"].get<std::int64_t>() + 1) + "\n");
}

TEST_F(CliTest, ClaimTakesHigherPriorityFirstThenSendOrder) {
  One({"queue", "create", "jobs"});
  One({"send", "jobs", "low", "--priority", "-5"});
  One({"send", "jobs", "mid-1"});
  One({"send", "jobs", "high", "--priority", "10"});
  One({"send", "jobs", "mid-2", "--priority", "0"});
  auto c = Ok({"claim", "jobs", "--max", "10"});
  ASSERT_EQ(c.size(), 4u);
  std::vector<std::string> payloads;
  std::vector<int> priorities;
  for (const json& m : c) {
    payloads.push_back(m["payload"]);
    priorities.push_back(m["priority"]);
  }
  EXPECT_EQ(payloads,
            (std::vector<std::string>{"high", "mid-1", "mid-2", "low"}));
  EXPECT_EQ(priorities, (std::vector<int>{10, 0, 0, -5}));
}

TEST_F(CliTest, SendWithDelayIsNotClaimableYet) {
  One({"queue", "create", "jobs"});
  One({"send", "jobs", "later", "--delay", "1h"});
  Send("jobs", "now");
  json s = Stats("jobs");
  EXPECT_EQ(s["delayed"], 1);
  EXPECT_EQ(s["ready"], 1);
  auto c = Ok({"claim", "jobs", "--max", "10"});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0]["payload"], "now");
}

TEST_F(CliTest, SendWithSameDedupKeyPrintsTheSameIdAndDuplicate) {
  One({"queue", "create", "jobs"});
  json first = One({"send", "jobs", "original", "--dedup", "order-42"});
  json second = One({"send", "jobs", "again", "--dedup", "order-42"});
  EXPECT_EQ(first, json({{"id", first["id"]}}));
  EXPECT_EQ(second, json({{"id", first["id"]}, {"duplicate", true}}));
  RunResult human = Human({"send", "jobs", "third", "--dedup", "order-42"});
  EXPECT_EQ(human.exit_code, kOk) << Show(human);
  EXPECT_NE(human.out.find("duplicate"), std::string::npos) << human.out;

  json s = Stats("jobs");
  EXPECT_EQ(s["ready"], 1);
  EXPECT_EQ(s["sends"], 1);
  auto c = Ok({"claim", "jobs", "--max", "10"});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0]["payload"], "original");

  // Once the message is gone, the key is free again.
  One({"ack", "jobs", c[0]["receipt"]});
  json third = One({"send", "jobs", "new", "--dedup", "order-42"});
  EXPECT_FALSE(third.contains("duplicate"));
  EXPECT_NE(third["id"], first["id"]);
}

TEST_F(CliTest, SendDashSendsEachStdinLineAsOneMessage) {
  One({"queue", "create", "jobs"});
  // The last line has no newline; an empty line is an empty message.
  auto sent = Ok({"send", "jobs", "-"}, "one\ntwo words\n\nlast");
  ASSERT_EQ(sent.size(), 4u);
  std::vector<std::int64_t> ids;
  for (const json& j : sent) {
    EXPECT_EQ(j.size(), 1u) << j;
    ids.push_back(j["id"]);
  }
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  EXPECT_EQ(std::set<std::int64_t>(ids.begin(), ids.end()).size(), 4u);

  auto c = Ok({"claim", "jobs", "--max", "10"});
  ASSERT_EQ(c.size(), 4u);
  for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(c[i]["id"], ids[i]);
  EXPECT_EQ(c[0]["payload"], "one");
  EXPECT_EQ(c[1]["payload"], "two words");
  EXPECT_EQ(c[2]["payload"], "");
  EXPECT_EQ(c[3]["payload"], "last");
}

TEST_F(CliTest, SendDashWithManyLinesSendsThemAll) {
  One({"queue", "create", "jobs"});
  std::string input;
  for (int i = 0; i < 2500; ++i) input += "m" + std::to_string(i) + "\n";
  auto sent = Ok({"send", "jobs", "-"}, input);
  EXPECT_EQ(sent.size(), 2500u);
  EXPECT_EQ(Stats("jobs")["ready"], 2500);
}

TEST_F(CliTest, SendBase64DecodesTheArgumentAndEachStdinLine) {
  One({"queue", "create", "jobs"});
  One({"send", "jobs", "aGVsbG8gd29ybGQ=", "--base64"});      // "hello world"
  Ok({"send", "jobs", "-", "--base64"}, "b25l\ndHdvIQ==\n");  // "one", "two!"
  auto c = Ok({"claim", "jobs", "--max", "10"});
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0]["payload"], "hello world");
  EXPECT_EQ(c[1]["payload"], "one");
  EXPECT_EQ(c[2]["payload"], "two!");
}

TEST_F(CliTest, SendBase64RejectsWhatIsNotBase64AndStoresNothing) {
  One({"queue", "create", "jobs"});
  EXPECT_TRUE(FailsWith(Human({"send", "jobs", "not base64!", "--base64"}),
                        kUsage, "base64"));
  EXPECT_TRUE(FailsWith(Human({"send", "jobs", "Zm9v=", "--base64"}), kUsage,
                        "base64"));
  EXPECT_EQ(Stats("jobs")["sends"], 0);
}

// With PAYLOAD "-" a bad line stops the send: what was printed before it is
// exactly what was stored, and nothing after it is.
TEST_F(CliTest, SendDashStopsAtABadLineAndPrintsWhatWasStored) {
  One({"queue", "create", "jobs"});
  RunResult r = Json({"send", "jobs", "-", "--base64"},
                     {.stdin_bytes = "b25l\n%%%%\ndHdv\n"});
  EXPECT_EQ(r.exit_code, kUsage) << Show(r);
  std::vector<json> out, err;
  ASSERT_TRUE(ParseLines(r.out, &out));
  ASSERT_TRUE(ParseLines(r.err, &err));
  ASSERT_EQ(err.size(), 1u);
  EXPECT_NE(err[0]["error"]["message"].get<std::string>().find("line 2"),
            std::string::npos)
      << err[0];
  EXPECT_EQ(Stats("jobs")["sends"], static_cast<std::int64_t>(out.size()));
  auto c = Ok({"claim", "jobs", "--max", "10"});
  ASSERT_EQ(c.size(), out.size());
  for (size_t i = 0; i < c.size(); ++i) {
    EXPECT_EQ(c[i]["id"], out[i]["id"]);
    EXPECT_EQ(c[i]["payload"], "one");  // never "two", after the bad line
  }
}

TEST_F(CliTest, NonUtf8PayloadComesOutAsPayloadBase64) {
  One({"queue", "create", "jobs"});
  Ok({"send", "jobs", "-"}, std::string("\xff\xfe\n", 3));
  // The same bytes as an argument: no shell, so they pass untouched.
  One({"send", "jobs", std::string("\xff\xfe", 2)});
  One({"send", "jobs", "//4=", "--base64"});
  auto c = Ok({"claim", "jobs", "--max", "10"});
  ASSERT_EQ(c.size(), 3u);
  for (const json& m : c) {
    EXPECT_EQ(m["payload_base64"], "//4=") << m;
    EXPECT_FALSE(m.contains("payload")) << m;
  }
}

TEST_F(CliTest, PayloadArgumentPassesUntouched) {
  One({"queue", "create", "jobs"});
  const std::string payload =
      "  two  spaces, a\ttab, \"quotes\", $HOME, `cmd`, 'single', \xc3\xbc "
      "and a \\ backslash ";
  One({"send", "jobs", payload});
  One({"send", "jobs", "--", "-dash-first"});
  auto c = Ok({"claim", "jobs", "--max", "10"});
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0]["payload"], payload);
  EXPECT_EQ(c[1]["payload"], "-dash-first");
}

// ----------------------------------------------------------------- claim

TEST_F(CliTest, ClaimPrintsIdReceiptAttemptPriorityAndPayload) {
  One({"queue", "create", "jobs", "--lease", "5m"});
  std::int64_t id = One({"send", "jobs", "work", "--priority", "3"})["id"];
  auto c = Ok({"claim", "jobs"});
  ASSERT_EQ(c.size(), 1u);
  const json& m = c[0];
  EXPECT_EQ(m["id"], id);
  EXPECT_EQ(m["attempt"], 1);
  EXPECT_EQ(m["priority"], 3);
  EXPECT_EQ(m["payload"], "work");
  ASSERT_TRUE(m["receipt"].is_string());
  EXPECT_TRUE(
      std::regex_match(m["receipt"].get<std::string>(),
                       std::regex(std::to_string(id) + "-1-[0-9a-f]{16}")))
      << m;
  // The queue's lease (5m) applies when the claim names none.
  std::int64_t expires = ParseTimeUs(m["lease_expires_at"]);
  std::int64_t now = NowUs();
  EXPECT_GT(expires, now + 4 * 60'000'000LL);
  EXPECT_LE(expires, now + 5 * 60'000'000LL);
  EXPECT_LE(ParseTimeUs(m["enqueued_at"]), now);
}

TEST_F(CliTest, ClaimLeaseOptionSetsTheLease) {
  One({"queue", "create", "jobs", "--lease", "5m"});
  Send("jobs", "x");
  auto c = Ok({"claim", "jobs", "--lease", "2h"});
  ASSERT_EQ(c.size(), 1u);
  std::int64_t expires = ParseTimeUs(c[0]["lease_expires_at"]);
  std::int64_t now = NowUs();
  EXPECT_GT(expires, now + 119 * 60'000'000LL);
  EXPECT_LE(expires, now + 120 * 60'000'000LL);
}

TEST_F(CliTest, ClaimMaxLimitsHowManyComeBack) {
  One({"queue", "create", "jobs"});
  for (int i = 0; i < 5; ++i) Send("jobs", "m" + std::to_string(i));
  EXPECT_EQ(Ok({"claim", "jobs", "--max", "3"}).size(), 3u);
  EXPECT_EQ(Ok({"claim", "jobs", "--max", "3"}).size(), 2u);
  EXPECT_EQ(Ok({"claim", "jobs", "--max", "3"}).size(), 0u);
  EXPECT_EQ(Ok({"claim", "jobs"}).size(), 0u);
}

TEST_F(CliTest, ClaimFromAnEmptyQueueExitsZeroWithNoStdout) {
  One({"queue", "create", "jobs"});
  RunResult j = Json({"claim", "jobs"});
  EXPECT_EQ(j.exit_code, kOk) << Show(j);
  EXPECT_EQ(j.out, "");
  EXPECT_EQ(j.err, "");
  RunResult h = Human({"claim", "jobs", "--max", "5"});
  EXPECT_EQ(h.exit_code, kOk) << Show(h);
  EXPECT_EQ(h.out, "");
}

TEST_F(CliTest, ClaimHumanIsATableWithAHeader) {
  One({"queue", "create", "jobs"});
  Send("jobs", "hello");
  RunResult r = Human({"claim", "jobs"});
  ASSERT_EQ(r.exit_code, kOk) << Show(r);
  auto lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(Words(lines[0]),
            (std::vector<std::string>{"ID", "ATTEMPT", "PRIORITY", "RECEIPT",
                                      "PAYLOAD"}));
  auto row = Words(lines[1]);
  ASSERT_EQ(row.size(), 5u) << lines[1];
  EXPECT_EQ(row[1], "1");
  EXPECT_EQ(row[4], "hello");
  // The receipt in the table acks.
  EXPECT_EQ(One({"ack", "jobs", row[3]})["acked"], true);
}

TEST_F(CliTest, ClaimWaitReturnsWhenAnotherProcessSends) {
  One({"queue", "create", "jobs"});
  const auto started = std::chrono::steady_clock::now();
  Child claim = Child::Start(
      SQLQ_BIN, {"--db", db_, "--json", "claim", "jobs", "--wait", "30s"},
      {.cwd = dir_});
  ASSERT_GT(claim.pid(), 0);
  // The claim looked, found nothing and sleeps; now send.
  ASSERT_TRUE(
      WaitUntilBlockedInFutex(claim.pid(), started + std::chrono::seconds(20)));
  std::int64_t id = Send("jobs", "wake up");
  RunResult r = claim.Finish();
  const auto took = std::chrono::steady_clock::now() - started;
  ASSERT_EQ(r.exit_code, kOk) << Show(r);
  std::vector<json> lines;
  ASSERT_TRUE(ParseLines(r.out, &lines));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["id"], id);
  EXPECT_EQ(lines[0]["payload"], "wake up");
  EXPECT_LT(took, std::chrono::seconds(10)) << "a 30s wait did not wake up";
}

TEST_F(CliTest, ClaimWaitOnAnEmptyQueueWaitsThenExitsZero) {
  One({"queue", "create", "jobs"});
  RunResult r = Json({"claim", "jobs", "--wait", "300ms"});
  EXPECT_EQ(r.exit_code, kOk) << Show(r);
  EXPECT_EQ(r.out, "");
  EXPECT_GE(r.elapsed, milliseconds(300));
}

// ------------------------------------------------------ ack, nack, extend

TEST_F(CliTest, AckTakesSeveralReceiptsAtOnce) {
  One({"queue", "create", "jobs"});
  for (int i = 0; i < 3; ++i) Send("jobs", "m" + std::to_string(i));
  auto c = Ok({"claim", "jobs", "--max", "3"});
  ASSERT_EQ(c.size(), 3u);
  auto acked =
      Ok({"ack", "jobs", c[0]["receipt"], c[1]["receipt"], c[2]["receipt"]});
  ASSERT_EQ(acked.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(acked[i], json({{"receipt", c[i]["receipt"]}, {"acked", true}}));
  }
  json s = Stats("jobs");
  EXPECT_EQ(s["acks"], 3);
  EXPECT_EQ(s["leased"], 0);
  EXPECT_EQ(s["ready"], 0);
}

TEST_F(CliTest, AckReportsEachReceiptAndExitsWithTheFirstFailure) {
  One({"queue", "create", "jobs"});
  Send("jobs", "a");
  Send("jobs", "b");
  auto c = Ok({"claim", "jobs", "--max", "2"});
  ASSERT_EQ(c.size(), 2u);
  RunResult r =
      Json({"ack", "jobs", c[0]["receipt"], "garbage", c[1]["receipt"]});
  EXPECT_EQ(r.exit_code, kUsage) << Show(r);
  std::vector<json> out, err;
  ASSERT_TRUE(ParseLines(r.out, &out));
  ASSERT_TRUE(ParseLines(r.err, &err));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0]["receipt"], c[0]["receipt"]);
  EXPECT_EQ(out[1]["receipt"], c[1]["receipt"]);
  ASSERT_EQ(err.size(), 1u);
  EXPECT_EQ(err[0]["error"]["code"], "invalid_argument");
  EXPECT_EQ(Stats("jobs")["acks"], 2);

  // Acking again: the messages are gone.
  EXPECT_TRUE(FailsWith(Human({"ack", "jobs", c[0]["receipt"]}), kNotFound,
                        "not in the queue"));
}

TEST_F(CliTest, NackRetriesThenMovesToDeadLettersWithTheError) {
  One({"queue", "create", "jobs", "--max-attempts", "2"});
  std::int64_t id = Send("jobs", "fragile");
  auto c1 = Ok({"claim", "jobs"});
  ASSERT_EQ(c1.size(), 1u);
  EXPECT_EQ(One({"nack", "jobs", c1[0]["receipt"], "--delay", "0s", "--error",
                 "first failure"}),
            json({{"receipt", c1[0]["receipt"]}, {"outcome", "retry"}}));
  auto c2 = Ok({"claim", "jobs"});
  ASSERT_EQ(c2.size(), 1u);
  EXPECT_EQ(c2[0]["id"], id);
  EXPECT_EQ(c2[0]["attempt"], 2);
  EXPECT_EQ(One({"nack", "jobs", c2[0]["receipt"], "--error",
                 "second failure: disk on fire"}),
            json({{"receipt", c2[0]["receipt"]}, {"outcome", "dead"}}));

  auto dead = Ok({"dead", "list", "jobs"});
  ASSERT_EQ(dead.size(), 1u);
  EXPECT_EQ(dead[0]["id"], id);
  EXPECT_EQ(dead[0]["attempts"], 2);
  EXPECT_EQ(dead[0]["last_error"], "second failure: disk on fire");
  EXPECT_EQ(dead[0]["payload"], "fragile");
  EXPECT_TRUE(dead[0].contains("died_at"));
  json s = Stats("jobs");
  EXPECT_EQ(s["dead"], 1);
  EXPECT_EQ(s["dead_lettered"], 1);
  EXPECT_EQ(s["nacks"], 2);
  EXPECT_EQ(s["ready"], 0);
  EXPECT_EQ(Ok({"claim", "jobs"}).size(), 0u);
}

TEST_F(CliTest, NackDelayHoldsTheMessageBack) {
  One({"queue", "create", "jobs"});
  Send("jobs", "x");
  auto c = Ok({"claim", "jobs"});
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(One({"nack", "jobs", c[0]["receipt"], "--delay", "1h"})["outcome"],
            "retry");
  json s = Stats("jobs");
  EXPECT_EQ(s["delayed"], 1);
  EXPECT_EQ(s["ready"], 0);
  EXPECT_EQ(Ok({"claim", "jobs"}).size(), 0u);
}

TEST_F(CliTest, NackWithoutDelayUsesTheQueueBackoff) {
  One({"queue", "create", "jobs", "--backoff-base", "1h", "--backoff-max",
       "2h"});
  Send("jobs", "x");
  auto c = Ok({"claim", "jobs"});
  ASSERT_EQ(c.size(), 1u);
  One({"nack", "jobs", c[0]["receipt"]});
  EXPECT_EQ(Stats("jobs")["delayed"], 1);
  EXPECT_EQ(Ok({"claim", "jobs"}).size(), 0u);
}

TEST_F(CliTest, ExtendKeepsTheMessageLeasedPastItsFirstLease) {
  One({"queue", "create", "jobs"});
  Send("jobs", "long work");
  auto c = Ok({"claim", "jobs", "--lease", "200ms"});
  ASSERT_EQ(c.size(), 1u);
  json e = One({"extend", "jobs", c[0]["receipt"], "--lease", "1h"});
  EXPECT_EQ(e["receipt"], c[0]["receipt"]);
  std::int64_t expires = ParseTimeUs(e["lease_expires_at"]);
  std::int64_t now = NowUs();
  EXPECT_GT(expires, now + 59 * 60'000'000LL);
  EXPECT_LE(expires, now + 60 * 60'000'000LL);
  // Without the extension the 200ms lease would run out within this wait
  // and the claim would get the message back.
  RunResult r = Json({"claim", "jobs", "--wait", "1s"});
  EXPECT_EQ(r.exit_code, kOk) << Show(r);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(One({"ack", "jobs", c[0]["receipt"]})["acked"], true);
}

TEST_F(CliTest, StaleReceiptExits5) {
  One({"queue", "create", "jobs"});
  Send("jobs", "x");
  auto first = Ok({"claim", "jobs", "--lease", "100ms"});
  ASSERT_EQ(first.size(), 1u);
  // Returns only once the first lease has expired.
  auto second = Ok({"claim", "jobs", "--wait", "10s"});
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0]["attempt"], 2);
  const std::string stale = first[0]["receipt"];
  EXPECT_TRUE(FailsWith(Human({"ack", "jobs", stale}), kStale, "stale"));
  EXPECT_TRUE(FailsWith(Human({"nack", "jobs", stale}), kStale, "stale"));
  EXPECT_TRUE(FailsWith(Human({"extend", "jobs", stale, "--lease", "1m"}),
                        kStale, "stale"));
  RunResult j = Json({"ack", "jobs", stale});
  EXPECT_EQ(j.exit_code, kStale);
  std::vector<json> err;
  ASSERT_TRUE(ParseLines(j.err, &err));
  ASSERT_EQ(err.size(), 1u);
  EXPECT_EQ(err[0]["error"]["code"], "failed_precondition");
  // The live lease is untouched by the refused calls.
  json s = Stats("jobs");
  EXPECT_EQ(s["leased"], 1);
  EXPECT_EQ(s["acks"], 0);
  EXPECT_EQ(s["nacks"], 0);
  EXPECT_EQ(s["expirations"], 1);
  One({"ack", "jobs", second[0]["receipt"]});
  EXPECT_EQ(Stats("jobs")["acks"], 1);
}

// ------------------------------------------------- dead letters, archive

TEST_F(CliTest, DeadLettersCanBeListedRedrivenAndPurged) {
  One({"queue", "create", "jobs", "--max-attempts", "1"});
  std::vector<std::int64_t> ids;
  for (const char* p : {"a", "b", "c"}) ids.push_back(Send("jobs", p));
  auto kill_all = [&] {
    auto c = Ok({"claim", "jobs", "--max", "10"});
    EXPECT_EQ(c.size(), 3u);
    for (const json& m : c) {
      EXPECT_EQ(One({"nack", "jobs", m["receipt"], "--error", "no"})["outcome"],
                "dead");
    }
  };
  kill_all();
  auto dead = Ok({"dead", "list", "jobs"});
  ASSERT_EQ(dead.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(dead[i]["id"], ids[i]);
    EXPECT_EQ(dead[i]["attempts"], 1);
    EXPECT_EQ(dead[i]["last_error"], "no");
  }
  EXPECT_EQ(Ok({"dead", "list", "jobs", "--limit", "2"}).size(), 2u);
  auto after = Ok({"dead", "list", "jobs", "--after", std::to_string(ids[0])});
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(after[0]["id"], ids[1]);

  // One by id.
  EXPECT_EQ(One({"dead", "redrive", "jobs", std::to_string(ids[1])}),
            json::parse(R"({"redriven":1})"));
  json s = Stats("jobs");
  EXPECT_EQ(s["ready"], 1);
  EXPECT_EQ(s["dead"], 2);
  auto back = Ok({"claim", "jobs"});
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0]["id"], ids[1]);
  EXPECT_EQ(back[0]["payload"], "b");
  EXPECT_EQ(back[0]["attempt"], 1);  // fresh attempts
  One({"ack", "jobs", back[0]["receipt"]});

  // An id that is not a dead letter is skipped.
  EXPECT_EQ(One({"dead", "redrive", "jobs", "999999"}),
            json::parse(R"({"redriven":0})"));

  // All of them.
  EXPECT_EQ(One({"dead", "redrive", "jobs"}), json::parse(R"({"redriven":2})"));
  s = Stats("jobs");
  EXPECT_EQ(s["ready"], 2);
  EXPECT_EQ(s["dead"], 0);
  EXPECT_EQ(Ok({"dead", "list", "jobs"}).size(), 0u);

  // And purge.
  Send("jobs", "c2");
  kill_all();
  EXPECT_EQ(One({"dead", "purge", "jobs"}), json::parse(R"({"purged":3})"));
  EXPECT_EQ(Stats("jobs")["dead"], 0);
  EXPECT_EQ(Ok({"dead", "list", "jobs"}).size(), 0u);
}

TEST_F(CliTest, ArchiveListShowsAckedMessagesOfAnArchivingQueue) {
  One({"queue", "create", "kept", "--archive"});
  One({"queue", "create", "gone"});
  std::int64_t id = Send("kept", "done work");
  Send("gone", "other work");
  for (const char* q : {"kept", "gone"}) {
    auto c = Ok({"claim", q, "--worker", "worker-7"});
    ASSERT_EQ(c.size(), 1u);
    One({"ack", q, c[0]["receipt"]});
  }
  auto a = Ok({"archive", "list", "kept"});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0]["id"], id);
  EXPECT_EQ(a[0]["payload"], "done work");
  EXPECT_EQ(a[0]["attempts"], 1);
  EXPECT_EQ(a[0]["worker"], "worker-7");
  std::int64_t done = ParseTimeUs(a[0]["completed_at"]);
  EXPECT_LE(std::abs(NowUs() - done), 60'000'000);
  EXPECT_EQ(Stats("kept")["archived"], 1);

  EXPECT_EQ(Ok({"archive", "list", "gone"}).size(), 0u);
  EXPECT_EQ(Stats("gone")["archived"], 0);
}

// -------------------------------------------------------- global options

TEST_F(CliTest, GlobalOptionsWorkBeforeAndAfterTheCommand) {
  RunResult before = Sqlq({"--db", db_, "--json", "queue", "create", "a"});
  RunResult after = Sqlq({"queue", "create", "b", "--db", db_, "--json"});
  RunResult mixed = Sqlq({"--json", "send", "a", "x", "--db", db_});
  for (const RunResult* r : {&before, &after, &mixed}) {
    EXPECT_EQ(r->exit_code, kOk) << Show(*r);
    std::vector<json> lines;
    EXPECT_TRUE(ParseLines(r->out, &lines));
    EXPECT_EQ(lines.size(), 1u);
  }
  EXPECT_EQ(QueueNames(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(Stats("a")["ready"], 1);
  // Nothing went to the default database.
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/sqlq.db"));
}

TEST_F(CliTest, SqlqDbFromTheEnvironmentIsUsedWithoutDb) {
  const std::string env_db = "sqlite:" + dir_ + "/env.db";
  RunResult r =
      Sqlq({"--json", "queue", "create", "from-env"}, {.sqlq_db = env_db});
  ASSERT_EQ(r.exit_code, kOk) << Show(r);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/env.db"));
  EXPECT_FALSE(std::filesystem::exists(db_path_));
  r = Sqlq({"--json", "queue", "list"}, {.sqlq_db = env_db});
  ASSERT_EQ(r.exit_code, kOk) << Show(r);
  std::vector<json> lines;
  ASSERT_TRUE(ParseLines(r.out, &lines));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["name"], "from-env");
}

TEST_F(CliTest, DbOverridesSqlqDb) {
  const std::string env_db = "sqlite:" + dir_ + "/env.db";
  ASSERT_EQ(Sqlq({"queue", "create", "in-env"}, {.sqlq_db = env_db}).exit_code,
            kOk);
  RunResult r = Sqlq({"--db", db_, "--json", "queue", "create", "in-flag"},
                     {.sqlq_db = env_db});
  ASSERT_EQ(r.exit_code, kOk) << Show(r);
  EXPECT_EQ(QueueNames(), std::vector<std::string>{"in-flag"});
  r = Sqlq({"--json", "queue", "list"}, {.sqlq_db = env_db});
  std::vector<json> lines;
  ASSERT_TRUE(ParseLines(r.out, &lines));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["name"], "in-env");
}

TEST_F(CliTest, WithoutDbOrSqlqDbTheDatabaseIsSqlqDbInTheCurrentDirectory) {
  RunResult r = Sqlq({"queue", "create", "here"});
  ASSERT_EQ(r.exit_code, kOk) << Show(r);
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/sqlq.db"));
}

TEST_F(CliTest, ErrorsInJsonModeAreOneJsonObjectOnStderr) {
  One({"queue", "create", "jobs"});
  RunResult r = Json({"send", "nosuch", "x"});
  EXPECT_EQ(r.exit_code, kNotFound);
  EXPECT_EQ(r.out, "");
  std::vector<json> err;
  ASSERT_TRUE(ParseLines(r.err, &err));
  ASSERT_EQ(err.size(), 1u);
  EXPECT_EQ(err[0]["error"]["code"], "not_found");
  EXPECT_NE(err[0]["error"]["message"].get<std::string>().find("nosuch"),
            std::string::npos);
}

// ------------------------------------------------------------- bad input

TEST_F(CliTest, InvalidQueueNamesAreRefusedAndNothingChanges) {
  One({"queue", "create", "good"});
  Send("good", "x");
  const json before = Stats("good");
  const std::vector<std::string> bad = {"a b",  std::string(65, 'a'), "a;b", "",
                                        "../x", "caf\xc3\xa9"};
  for (const std::string& name : bad) {
    SCOPED_TRACE("name '" + name + "'");
    EXPECT_TRUE(FailsWith(Human({"queue", "create", name}), kUsage,
                          "invalid queue name"));
    EXPECT_TRUE(
        FailsWith(Human({"send", name, "x"}), kUsage, "invalid queue name"));
    EXPECT_TRUE(
        FailsWith(Human({"claim", name}), kUsage, "invalid queue name"));
    EXPECT_TRUE(FailsWith(Human({"queue", "drop", name}), kUsage,
                          "invalid queue name"));
  }
  EXPECT_EQ(QueueNames(), std::vector<std::string>{"good"});
  EXPECT_EQ(Counts(Stats("good")), Counts(before));
  // The limit is 64: exactly 64 is fine.
  One({"queue", "create", std::string(64, 'a')});
}

TEST_F(CliTest, InvalidQueueOptionsAreRefusedAndNothingIsCreated) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--max-attempts", "0"}, "max attempts"},
      {{"--max-attempts", "lots"}, "lots"},
      {{"--max-payload", "0"}, "max payload"},
      {{"--max-payload", "67108865"}, "max payload"},
      {{"--backoff-base", "10m", "--backoff-max", "1m"},
       "--backoff-max 1m is shorter than --backoff-base 10m"},
      {{"--lease", "0ms"}, "lease"},
  };
  for (const auto& [options, mention] : cases) {
    SCOPED_TRACE(::testing::PrintToString(options));
    std::vector<std::string> args = {"queue", "create", "jobs"};
    args.insert(args.end(), options.begin(), options.end());
    EXPECT_TRUE(FailsWith(Human(args), kUsage, mention));
  }
  // Refused before the database is opened: not even the file appears.
  EXPECT_FALSE(std::filesystem::exists(db_path_));
  One({"queue", "create", "other"});
  EXPECT_EQ(QueueNames(), std::vector<std::string>{"other"});
}

TEST_F(CliTest, PayloadOverMaxPayloadExits6AndStoresNothing) {
  One({"queue", "create", "small", "--max-payload", "10"});
  EXPECT_TRUE(
      FailsWith(Human({"send", "small", "12345678901"}), kTooLarge, "10"));
  EXPECT_EQ(Stats("small")["sends"], 0);
  // From stdin the lines before the oversized one are stored and printed,
  // the error names the line, and nothing from that line on is stored.
  RunResult r =
      Json({"send", "small", "-"}, {.stdin_bytes = "ok\n12345678901\nafter\n"});
  EXPECT_EQ(r.exit_code, kTooLarge) << Show(r);
  std::vector<json> lines;
  ASSERT_TRUE(ParseLines(r.out, &lines)) << Show(r);
  ASSERT_EQ(lines.size(), 1u) << Show(r);
  EXPECT_NE(r.err.find("line 2"), std::string::npos) << Show(r);
  EXPECT_EQ(Stats("small")["sends"], 1);
  auto claimed = Ok({"claim", "small", "--max", "10"});
  ASSERT_EQ(claimed.size(), 1u);
  EXPECT_EQ(claimed[0]["id"], lines[0]["id"]);
  EXPECT_EQ(claimed[0]["payload"], "ok");
  One({"send", "small", "1234567890"});  // exactly the limit is fine
  EXPECT_EQ(Stats("small")["ready"], 1);
}

TEST_F(CliTest, BadDurationsAreRefusedAndNothingChanges) {
  One({"queue", "create", "jobs"});
  Send("jobs", "x");
  auto c = Ok({"claim", "jobs", "--lease", "1h"});
  ASSERT_EQ(c.size(), 1u);
  const std::string receipt = c[0]["receipt"];
  Send("jobs", "y");
  const json before = Stats("jobs");
  struct Case {
    std::vector<std::string> args;
    std::string mention;
  };
  const std::vector<Case> cases = {
      {{"queue", "create", "x", "--lease", "-5s"}, "-5s"},
      {{"queue", "create", "x", "--lease", "5x"}, "5x"},
      {{"queue", "create", "x", "--lease", "13h"}, "lease"},
      {{"queue", "create", "x", "--lease", ""}, "--lease"},
      {{"queue", "create", "x", "--backoff-base", "soon"}, "soon"},
      {{"queue", "create", "x", "--retention", "-1d"}, "-1d"},
      {{"send", "jobs", "z", "--delay", "-5s"}, "-5s"},
      {{"send", "jobs", "z", "--delay", "5x"}, "5x"},
      {{"send", "jobs", "z", "--delay", "400d"}, "delay"},
      {{"claim", "jobs", "--lease", "13h"}, "lease"},
      {{"claim", "jobs", "--wait", "-1s"}, "-1s"},
      {{"claim", "jobs", "--wait", "2h"}, "wait"},
      {{"nack", "jobs", receipt, "--delay", "400d"}, "delay"},
      {{"nack", "jobs", receipt, "--delay", "5x"}, "5x"},
      {{"extend", "jobs", receipt, "--lease", "13h"}, "lease"},
      {{"extend", "jobs", receipt, "--lease", "-5s"}, "-5s"},
      {{"extend", "jobs", receipt, "--lease", ""}, "--lease"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(::testing::PrintToString(k.args));
    EXPECT_TRUE(FailsWith(Human(k.args), kUsage, k.mention));
  }
  // A value out of range is said back as it was typed, with the range in
  // the same unit (and as sqlq writes it where that differs).
  const std::vector<Case> ranges = {
      {{"queue", "create", "x", "--lease", "13h"},
       "sqlq: --lease 13h is too long: the range is 1ms to 12h\n"},
      {{"queue", "create", "x", "--lease", "780m"},
       "sqlq: --lease 780m is too long: the range is 1ms to 720m (12h)\n"},
      {{"queue", "create", "x", "--lease", "46800"},
       "sqlq: --lease 46800 is too long: the range is 0.001s (1ms) to "
       "43200s (12h)\n"},
      {{"queue", "create", "x", "--lease", "0s"},
       "sqlq: --lease 0s is too short: the range is 0.001s (1ms) to 43200s "
       "(12h)\n"},
      {{"queue", "create", "x", "--retention", "11000d"},
       "sqlq: --retention 11000d is too long: the range is 1ms to 3650d\n"},
      {{"queue", "create", "x", "--backoff-base", "20m"},
       "sqlq: --backoff-base 20m is longer than the backoff max, 10m: give a "
       "longer --backoff-max too\n"},
      {{"queue", "create", "x", "--backoff-max", "500ms"},
       "sqlq: --backoff-max 500ms is shorter than the backoff base, 1000ms "
       "(1s): give a shorter --backoff-base too\n"},
      {{"queue", "create", "x", "--backoff-base", "1m", "--backoff-max", "30s"},
       "sqlq: --backoff-max 30s is shorter than --backoff-base 1m\n"},
      {{"send", "jobs", "z", "--delay", "400d"},
       "sqlq: --delay 400d is too long: the range is 0 to 365d\n"},
      {{"claim", "jobs", "--wait", "2h"},
       "sqlq: --wait 2h is too long: the range is 0 to 1h\n"},
      {{"claim", "jobs", "--wait", "0.5d"},
       "sqlq: --wait 0.5d is too long: the range is 0 to 1h\n"},
      {{"nack", "jobs", receipt, "--delay", "9000h"},
       "sqlq: --delay 9000h is too long: the range is 0 to 8760h (365d)\n"},
      {{"extend", "jobs", receipt, "--lease", "1d"},
       "sqlq: --lease 1d is too long: the range is 1ms to 0.5d (12h)\n"},
  };
  for (const Case& k : ranges) {
    SCOPED_TRACE(::testing::PrintToString(k.args));
    RunResult r = Human(k.args);
    EXPECT_EQ(r.exit_code, kUsage) << Show(r);
    EXPECT_EQ(r.err, k.mention);
  }
  EXPECT_EQ(QueueNames(), std::vector<std::string>{"jobs"});
  EXPECT_EQ(Counts(Stats("jobs")), Counts(before));
  // The lease the refused nack and extend named is still the one we hold.
  auto c2 = Ok({"claim", "jobs", "--max", "10"});
  ASSERT_EQ(c2.size(), 1u);
  EXPECT_EQ(c2[0]["payload"], "y");
  EXPECT_EQ(One({"ack", "jobs", receipt})["acked"], true);
}

TEST_F(CliTest, UnknownQueueExits3) {
  One({"queue", "create", "jobs"});
  const std::string receipt = "1-1-00000000000000ff";
  const std::vector<std::vector<std::string>> cases = {
      {"send", "nosuch", "x"},
      {"claim", "nosuch"},
      {"claim", "nosuch", "--wait", "10s"},
      {"ack", "nosuch", receipt},
      {"nack", "nosuch", receipt},
      {"extend", "nosuch", receipt, "--lease", "1m"},
      {"queue", "stats", "nosuch"},
      {"queue", "purge", "nosuch"},
      {"queue", "drop", "nosuch"},
      {"dead", "list", "nosuch"},
      {"dead", "redrive", "nosuch"},
      {"dead", "purge", "nosuch"},
      {"archive", "list", "nosuch"},
  };
  for (const auto& args : cases) {
    SCOPED_TRACE(::testing::PrintToString(args));
    RunResult r = Human(args);
    EXPECT_TRUE(FailsWith(r, kNotFound, "'nosuch'"));
    EXPECT_LT(r.elapsed, seconds(5)) << "waited for a queue that is not there";
  }
  EXPECT_EQ(QueueNames(), std::vector<std::string>{"jobs"});
}

TEST_F(CliTest, MalformedReceiptExits2) {
  One({"queue", "create", "jobs"});
  Send("jobs", "x");
  auto c = Ok({"claim", "jobs"});
  ASSERT_EQ(c.size(), 1u);
  const std::string good = c[0]["receipt"];
  for (const std::string& bad :
       {std::string("garbage"), std::string("1-1-xyz"), std::string(""),
        std::string("0-1-00000000000000ff"), good + "0", "-" + good}) {
    SCOPED_TRACE("receipt '" + bad + "'");
    EXPECT_TRUE(FailsWith(Human({"ack", "jobs", bad}), kUsage, "receipt"));
    EXPECT_TRUE(FailsWith(Human({"nack", "jobs", bad}), kUsage, "receipt"));
    EXPECT_TRUE(FailsWith(Human({"extend", "jobs", bad, "--lease", "1m"}),
                          kUsage, "receipt"));
  }
  json s = Stats("jobs");
  EXPECT_EQ(s["leased"], 1);
  EXPECT_EQ(s["acks"], 0);
  EXPECT_EQ(s["nacks"], 0);
}

TEST_F(CliTest, MissingDatabaseExits3ForReadCommandsAndCreatesNoFile) {
  const std::string missing = "sqlite:" + dir_ + "/missing.db";
  const std::vector<std::vector<std::string>> cases = {
      {"queue", "list"},      {"queue", "stats"}, {"queue", "stats", "q"},
      {"send", "q", "x"},     {"claim", "q"},     {"dead", "list", "q"},
      {"queue", "drop", "q"},
  };
  for (const auto& args : cases) {
    SCOPED_TRACE(::testing::PrintToString(args));
    std::vector<std::string> full = {"--db", missing};
    full.insert(full.end(), args.begin(), args.end());
    EXPECT_TRUE(FailsWith(Sqlq(full), kNotFound, "missing.db"));
    EXPECT_TRUE(DirEntries(dir_).empty()) << "a file was created";
  }
}

TEST_F(CliTest, FileThatIsNotADatabaseExits10AndIsLeftAlone) {
  const std::string text = "this is not a database\njust some notes\n";
  {
    std::ofstream f(db_path_, std::ios::binary);
    f << text;
  }
  const std::vector<std::vector<std::string>> cases = {
      {"queue", "list"},
      {"queue", "create", "jobs"},
      {"send", "jobs", "x"},
      {"claim", "jobs"},
  };
  for (const auto& args : cases) {
    SCOPED_TRACE(::testing::PrintToString(args));
    EXPECT_TRUE(FailsWith(Human(args), kNotADatabase, "not"));
    EXPECT_EQ(ReadFile(db_path_), text);
    EXPECT_EQ(DirEntries(dir_), std::set<std::string>{"q.db"});
  }
  RunResult j = Json({"queue", "list"});
  EXPECT_EQ(j.exit_code, kNotADatabase);
  std::vector<json> err;
  ASSERT_TRUE(ParseLines(j.err, &err));
  ASSERT_EQ(err.size(), 1u);
  EXPECT_EQ(err[0]["error"]["code"], "corruption");
}

TEST_F(CliTest, ReadOnlyDatabaseExits7AndIsLeftAlone) {
  One({"queue", "create", "jobs"});
  Send("jobs", "x");
  const json before = Stats("jobs");
  const std::string bytes = ReadFile(db_path_);
  ASSERT_FALSE(bytes.empty());
  RunOptions as;
  ASSERT_NO_FATAL_FAILURE(AsUnprivileged(as));
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  ASSERT_EQ(chmod(db_path_.c_str(), 0444), 0);
  const std::vector<std::vector<std::string>> cases = {
      {"send", "jobs", "y"},
      {"claim", "jobs"},
      {"queue", "create", "more"},
      {"queue", "purge", "jobs"},
  };
  for (const auto& args : cases) {
    SCOPED_TRACE(::testing::PrintToString(args));
    EXPECT_TRUE(FailsWith(Human(args, as), kPermission, "read-only"));
  }
  EXPECT_EQ(ReadFile(db_path_), bytes);
  ASSERT_EQ(chmod(db_path_.c_str(), 0644), 0);
  EXPECT_EQ(QueueNames(), std::vector<std::string>{"jobs"});
  EXPECT_EQ(Counts(Stats("jobs")), Counts(before));
}

// Regression: a directory, or a directory where no file may be created,
// exited 8 ("try again"), which no retry would ever fix.
TEST_F(CliTest, DatabaseThatCannotBeCreatedOrIsADirectoryExits7) {
  const std::filesystem::path sub = std::filesystem::path(dir_) / "sub";
  std::filesystem::create_directories(sub);
  EXPECT_TRUE(FailsWith(
      Sqlq({"--db", "sqlite:" + sub.string(), "queue", "create", "jobs"}),
      kPermission, "directory"));
  RunOptions as;
  ASSERT_NO_FATAL_FAILURE(AsUnprivileged(as));
  ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
  ASSERT_EQ(chmod(sub.c_str(), 0555), 0);
  EXPECT_TRUE(FailsWith(Sqlq({"--db", "sqlite:" + (sub / "q.db").string(),
                              "queue", "create", "jobs"},
                             as),
                        kPermission, "q.db"));
  EXPECT_TRUE(std::filesystem::is_empty(sub));
  ASSERT_EQ(chmod(sub.c_str(), 0755), 0);
}

TEST_F(CliTest, UnknownCommandOrFlagExits2) {
  One({"queue", "create", "jobs"});
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"frob"}, "frob"},
      {{"queue", "frob"}, "frob"},
      {{"send", "jobs", "x", "--frob"}, "--frob"},
      {{"--frob", "queue", "list"}, "--frob"},
      {{"claim", "jobs", "--max", "many"}, "many"},
      {{"send", "jobs"}, "PAYLOAD"},
      {{}, "command"},
  };
  for (const auto& [args, mention] : cases) {
    SCOPED_TRACE(::testing::PrintToString(args));
    EXPECT_TRUE(FailsWith(Human(args), kUsage, mention));
  }
  EXPECT_EQ(Stats("jobs")["sends"], 0);
}

// ---------------------------------------------------------------- tokens

// `token new` makes a fresh random token each time with its hash; `token
// hash` gives the same hash for it from stdin; no store is touched.
TEST_F(CliTest, TokenNewAndHashAgree) {
  RunResult a = Sqlq({"--json", "token", "new"});
  RunResult b = Sqlq({"--json", "token", "new"});
  ASSERT_EQ(a.exit_code, kOk) << Show(a);
  ASSERT_EQ(b.exit_code, kOk) << Show(b);
  const json ja = json::parse(a.out);
  const json jb = json::parse(b.out);
  const std::string token = ja["token"];
  EXPECT_EQ(token.size(), 64u);
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(token, jb["token"].get<std::string>());
  RunResult h = Sqlq({"token", "hash"}, {.stdin_bytes = token + "\n"});
  ASSERT_EQ(h.exit_code, kOk) << Show(h);
  EXPECT_EQ(h.out, "sha256:" + ja["sha256"].get<std::string>() + "\n");
  // What sha256sum says of the token's bytes.
  RunResult known = Sqlq({"token", "hash"}, {.stdin_bytes = "my-token-12345"});
  EXPECT_EQ(known.out,
            "sha256:7a2038c466dbff5887365b306a1c0b826261c3f89c4cba321f7bebc08"
            "92e9f48\n");
  // Human output: the token, then the line's first word.
  RunResult human = Sqlq({"token", "new"});
  ASSERT_EQ(human.exit_code, kOk) << Show(human);
  const auto lines = Lines(human.out);
  ASSERT_EQ(lines.size(), 2u) << human.out;
  EXPECT_EQ(lines[0].rfind("token: ", 0), 0u) << human.out;
  EXPECT_EQ(lines[1].rfind("line:  sha256:", 0), 0u) << human.out;

  RunResult bad = Sqlq({"token", "hash"}, {.stdin_bytes = "short\n"});
  EXPECT_EQ(bad.exit_code, kUsage) << Show(bad);
  EXPECT_NE(bad.err.find("at least 8 characters"), std::string::npos)
      << Show(bad);
  EXPECT_EQ(bad.out, "");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/sqlq.db"));
}

}  // namespace
}  // namespace sqlq::cli_test
