// What a person sees of a queue and a message without --json: `message get`
// with its error history, `queue list` with what tells queues apart (paused,
// limits, dead-letter queue), `queue show` with every field; and that
// --json of the same commands holds every field.

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/cli_assertions.h"
#include "tests/cli/cli_fixture.h"
#include "tests/cli/cli_runner.h"

namespace sqlq::cli_test {
namespace {

// The lines of `text`, and the words of a line.
std::vector<std::string> LinesOf(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}
std::vector<std::string> WordsOf(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

// The value shown after `label` in a record ("label   value"), or "?" when
// no line has that label.
std::string Field(const std::string& out, const std::string& label) {
  for (const std::string& line : LinesOf(out)) {
    if (line.rfind(label + " ", 0) != 0) continue;
    const auto value = line.find_first_not_of(' ', label.size());
    return value == std::string::npos ? "" : line.substr(value);
  }
  return "?";
}

class InspectCliTest : public CliFixture {};

TEST_F(InspectCliTest, MessageGetShowsTheErrorHistory) {
  One({"queue", "create", "emails", "--max-attempts", "3"});
  One({"send", "emails", "--header", "tenant=acme", "--group", "acct-7",
       "reset password for ada"});
  for (const char* error : {"smtp 451", "smtp 421\nretry later"}) {
    json claimed = One({"claim", "emails"});
    One({"nack", "emails", claimed["receipt"], "--delay", "0s", "--error",
         error});
  }
  json claimed = One({"claim", "emails", "--worker", "host-7"});

  RunResult r = Human({"message", "get", "emails", "1"});
  ASSERT_EQ(r.exit_code, kOk) << Show(r);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(Field(r.out, "state"), "leased");
  EXPECT_EQ(Field(r.out, "attempts"), "3");
  EXPECT_EQ(Field(r.out, "group"), "acct-7");
  EXPECT_EQ(Field(r.out, "header tenant"), "acme");
  EXPECT_EQ(Field(r.out, "worker"), "host-7");
  EXPECT_EQ(Field(r.out, "lease_expires_at"), claimed["lease_expires_at"]);
  EXPECT_EQ(Field(r.out, "payload"), "reset password for ada");
  // The history, oldest first: when each attempt failed, and why (a line
  // break shown escaped, so that each attempt keeps one line).
  json got = One({"message", "get", "emails", "1"});
  ASSERT_EQ(got["errors"].size(), 2u);
  EXPECT_EQ(Field(r.out, "error 1"),
            got["errors"][0]["at"].get<std::string>() + "  smtp 451");
  EXPECT_EQ(Field(r.out, "error 2"),
            "\"" + got["errors"][1]["at"].get<std::string>() +
                "  smtp 421\\nretry later\"");
  // Values line up after the longest label.
  const auto lines = LinesOf(r.out);
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines[0].find('1'), lines[1].find(got["state"].get<std::string>()));

  One({"send", "emails", "fresh"});
  RunResult fresh = Human({"message", "get", "emails", "2"});
  ASSERT_EQ(fresh.exit_code, kOk) << Show(fresh);
  EXPECT_EQ(Field(fresh.out, "errors"), "none");
  EXPECT_EQ(Field(fresh.out, "state"), "ready");
}

TEST_F(InspectCliTest, QueueListShowsPausedLimitsAndTheDeadLetterQueue) {
  json crawl =
      One({"queue", "create", "crawl", "--max-leased", "20", "--rate-limit",
           "300/m", "--lease", "5m", "--groups", "fair", "--group-limit", "2",
           "--dead-letter-queue", "crawl-dead"});
  One({"queue", "create", "crawl-dead", "--archive"});
  One({"queue", "pause", "crawl-dead"});
  RunResult r = Human({"queue", "list"});
  ASSERT_EQ(r.exit_code, kOk) << Show(r);
  auto lines = LinesOf(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_EQ(WordsOf(lines[0]),
            (std::vector<std::string>{"NAME", "PAUSED", "GROUPS",
                                      "MAX_ATTEMPTS", "LEASE", "ARCHIVE",
                                      "LIMITS", "DEAD_LETTER_QUEUE"}));
  EXPECT_EQ(WordsOf(lines[1]),
            (std::vector<std::string>{
                "crawl", "false", "fair", "5", "5m", "false",
                "max_leased=20,rate_limit=5/s,group_limit=2", "crawl-dead"}));
  EXPECT_EQ(WordsOf(lines[2]),
            (std::vector<std::string>{"crawl-dead", "true", "none", "5", "30s",
                                      "true", "-", "-"}));
  // Columns line up under their headers.
  EXPECT_EQ(lines[1].find("5m"), lines[0].find("LEASE"));

  // --json: every setting of each queue, the object queue create printed.
  auto list = Ok({"queue", "list"});
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0], crawl);
  EXPECT_EQ(list[0]["dead_letter_queue"], "crawl-dead");
  EXPECT_EQ(list[0]["group_limit"], 2);
  EXPECT_EQ(list[1]["paused"], true);
}

TEST_F(InspectCliTest, QueueShowPrintsEveryField) {
  One({"queue",
       "create",
       "emails",
       "--max-attempts",
       "3",
       "--lease",
       "90s",
       "--backoff-base",
       "2s",
       "--backoff-max",
       "1h",
       "--archive",
       "--retention",
       "2d",
       "--max-payload",
       "4096",
       "--dead-retention",
       "30d",
       "--unique-for",
       "1h",
       "--rate-limit",
       "120/m",
       "--rate-burst",
       "4",
       "--label",
       "team=mail",
       "--dead-letter-queue",
       "emails-dead"});
  One({"queue", "create", "emails-dead", "--max-attempts", "1"});
  One({"queue", "create", "bounces", "--dead-letter-queue", "emails-dead"});
  One({"send", "emails", "a"});
  One({"send", "emails", "b"});
  One({"claim", "emails"});

  RunResult r = Human({"queue", "show", "emails"});
  ASSERT_EQ(r.exit_code, kOk) << Show(r);
  EXPECT_EQ(r.err, "");
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"name", "emails"},
      {"paused", "false"},
      {"groups", "none"},
      {"max_attempts", "3"},
      {"lease", "90s"},
      {"backoff_base", "2s"},
      {"backoff_max", "1h"},
      {"max_payload_bytes", "4096"},
      {"archive", "true"},
      {"retention", "2d"},
      {"dead_retention", "30d"},
      {"unique_for", "1h"},
      {"max_leased", "none"},
      {"rate_limit", "2/s"},
      {"rate_burst", "4"},
      {"group_limit", "none"},
      {"dead_letter_queue", "emails-dead"},
      {"dead_letters_from", "none"},
      {"label team", "mail"},
      {"ready", "1"},
      {"leased", "1"},
      {"dead", "0"},
      {"sends", "2"},
      {"claims", "1"},
      {"dead_lettered", "0"}};
  for (const auto& [label, value] : expected) {
    EXPECT_EQ(Field(r.out, label), value) << label << " in\n" << r.out;
  }
  EXPECT_NE(Field(r.out, "created_at"), "?");
  EXPECT_NE(Field(r.out, "oldest_ready_age"), "?");

  One({"queue", "pause", "emails-dead"});
  RunResult dead = Human({"queue", "show", "emails-dead"});
  ASSERT_EQ(dead.exit_code, kOk) << Show(dead);
  EXPECT_EQ(Field(dead.out, "paused"), "true");
  EXPECT_EQ(Field(dead.out, "dead_letters_from"), "bounces, emails");
  EXPECT_EQ(Field(dead.out, "dead_letter_queue"),
            "none (dead letters stay here)");
  EXPECT_EQ(Field(dead.out, "rate_limit"), "none");
  EXPECT_EQ(Field(dead.out, "dead_retention"), "0 (kept until purged)");

  // --json: the queue object (as queue list prints it), its stats, and
  // the queues whose dead letters come here.
  json shown = One({"queue", "show", "emails"});
  json listed = Ok({"queue", "list"})[1];
  ASSERT_EQ(listed["name"], "emails");
  for (const auto& [key, value] : listed.items()) {
    EXPECT_EQ(shown[key], value) << key;
  }
  EXPECT_EQ(shown["stats"]["ready"], 1);
  EXPECT_EQ(shown["stats"]["leased"], 1);
  EXPECT_EQ(shown["stats"]["sends"], 2);
  EXPECT_EQ(shown["dead_letters_from"], json::array());
  EXPECT_EQ(One({"queue", "show", "emails-dead"})["dead_letters_from"],
            json({"bounces", "emails"}));

  EXPECT_TRUE(FailsWith(Human({"queue", "show", "nope"}), kNotFound, "'nope'"));
}

}  // namespace
}  // namespace sqlq::cli_test
