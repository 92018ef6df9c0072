// /metrics of a real server, scraped and parsed as Prometheus does
// (the text exposition format 0.0.4), its names checked against
// Prometheus' naming rules, and sqlq_build_info and the process_* figures
// checked against the program and /proc (docs/server.md, "Metrics").

#include <dirent.h>
#include <gtest/gtest-spi.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <regex>
#include <set>

#include "tests/server/server_fixture.h"
#include "tests/support/test_servers.h"

namespace sqlq::server_test {
namespace {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};
struct Family {
  std::string help, type;
  std::vector<Sample> samples;
};
using Families = std::map<std::string, Family>;

double ParseValue(const std::string& text) {
  if (text == "+Inf") return HUGE_VAL;
  if (text == "-Inf") return -HUGE_VAL;
  if (text == "NaN") return NAN;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  EXPECT_TRUE(!text.empty() && *end == '\0') << "value '" << text << "'";
  return v;
}

// The samples' labels: name="value",... with \\, \" and \n escaped.
std::map<std::string, std::string> ParseLabels(const std::string& text,
                                               const std::string& line) {
  std::map<std::string, std::string> out;
  static const std::regex kLabelName("[a-zA-Z_][a-zA-Z0-9_]*");
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t eq = text.find('=', i);
    EXPECT_NE(eq, std::string::npos) << line;
    if (eq == std::string::npos) break;
    const std::string name = text.substr(i, eq - i);
    EXPECT_TRUE(std::regex_match(name, kLabelName)) << line;
    EXPECT_FALSE(name.starts_with("__")) << line;
    EXPECT_EQ(text[eq + 1], '"') << line;
    std::string value;
    i = eq + 2;
    for (; i < text.size() && text[i] != '"'; ++i) {
      if (text[i] == '\\') {
        ++i;
        EXPECT_TRUE(text[i] == '\\' || text[i] == '"' || text[i] == 'n')
            << line;
        value += text[i] == 'n' ? '\n' : text[i];
      } else {
        value += text[i];
      }
    }
    EXPECT_LT(i, text.size()) << "unterminated label value: " << line;
    EXPECT_TRUE(out.emplace(name, value).second) << "label twice: " << line;
    ++i;  // the closing quote
    if (i < text.size()) {
      EXPECT_EQ(text[i], ',') << line;
      ++i;
    }
  }
  return out;
}

// The family a sample belongs to: its own name, or a histogram's.
std::string FamilyOf(const std::string& sample, const Families& families) {
  if (families.contains(sample)) return sample;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s = suffix;
    if (sample.ends_with(s)) {
      const std::string base = sample.substr(0, sample.size() - s.size());
      auto it = families.find(base);
      if (it != families.end() && it->second.type == "histogram") return base;
    }
  }
  return "";
}

// Parses a scrape as Prometheus does, failing the test on what it would
// refuse: a sample before its family's TYPE, a family described twice or
// split in two, a malformed line, label or value.
Families Parse(const std::string& text) {
  Families families;
  std::set<std::string> closed;  // families whose samples are behind us
  std::string current;
  EXPECT_TRUE(text.ends_with("\n"));
  std::istringstream in(text);
  static const std::regex kHelp(R"(# HELP ([^ ]+) (.+))");
  static const std::regex kType(
      R"(# TYPE ([^ ]+) (counter|gauge|histogram|summary|untyped))");
  static const std::regex kSample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? ([^ ]+))");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    std::string family;
    if (std::regex_match(line, m, kHelp)) {
      family = m[1];
      EXPECT_TRUE(families[family].help.empty()) << "HELP twice: " << line;
      families[family].help = m[2];
    } else if (std::regex_match(line, m, kType)) {
      family = m[1];
      EXPECT_TRUE(families[family].type.empty()) << "TYPE twice: " << line;
      EXPECT_TRUE(families[family].samples.empty())
          << "TYPE after samples: " << line;
      families[family].type = m[2];
    } else if (std::regex_match(line, m, kSample)) {
      family = FamilyOf(m[1], families);
      EXPECT_FALSE(family.empty()) << "a sample without TYPE: " << line;
      if (family.empty()) continue;
      families[family].samples.push_back(
          {m[1], ParseLabels(m[2], line), ParseValue(m[3])});
    } else {
      ADD_FAILURE() << "not a line of the text format: '" << line << "'";
      continue;
    }
    if (family != current) {
      EXPECT_FALSE(closed.contains(family)) << "family split: " << line;
      closed.insert(current);
      current = family;
    }
  }
  return families;
}

// Prometheus' naming rules (prometheus.io/docs/practices/naming, and the
// lints of promtool check metrics): snake case, an application prefix,
// base units spelt out and last (before _total), _total on counters and
// only there, no type in the name, no reserved suffix on a plain family.
void CheckNames(const Families& families) {
  static const std::regex kName("(sqlq|process)_[a-z0-9_]*[a-z0-9]");
  static const std::set<std::string> kNotBaseUnits = {
      "ms",      "msec",      "millis",       "milliseconds", "us",
      "usec",    "micros",    "microseconds", "ns",           "nanoseconds",
      "sec",     "secs",      "minutes",      "hours",        "days",
      "kb",      "kib",       "mb",           "mib",          "gb",
      "gib",     "kilobytes", "megabytes",    "percent",      "count",
      "counter", "gauge",     "histogram"};
  for (const auto& [name, f] : families) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(std::regex_match(name, kName));
    EXPECT_FALSE(f.help.empty());
    EXPECT_FALSE(f.type.empty());
    EXPECT_EQ(f.type == "counter", name.ends_with("_total"));
    std::istringstream words(name);
    for (std::string w; std::getline(words, w, '_');) {
      EXPECT_FALSE(kNotBaseUnits.contains(w)) << "'" << w << "' in the name";
    }
    std::string stem = name;
    if (stem.ends_with("_total")) stem.resize(stem.size() - 6);
    for (const std::string unit : {"seconds", "bytes"}) {
      if (stem.find("_" + unit) != std::string::npos) {
        EXPECT_TRUE(stem.ends_with("_" + unit)) << "the unit goes last";
      }
    }
    if (f.type != "histogram") {
      for (const char* reserved : {"_bucket", "_sum", "_count"}) {
        EXPECT_FALSE(name.ends_with(reserved));
      }
    }
    for (const Sample& s : f.samples) {
      if (f.type == "counter") {
        EXPECT_GE(s.value, 0) << s.name;
      }
    }
  }
}

// Every histogram's series: buckets rising to +Inf, which is _count.
void CheckHistograms(const Families& families) {
  for (const auto& [name, f] : families) {
    if (f.type != "histogram") continue;
    std::map<std::map<std::string, std::string>, std::vector<const Sample*>>
        buckets;
    std::map<std::map<std::string, std::string>, double> counts, sums;
    for (const Sample& s : f.samples) {
      auto labels = s.labels;
      if (s.name == name + "_bucket") {
        ASSERT_TRUE(labels.contains("le")) << s.name;
        labels.erase("le");
        buckets[labels].push_back(&s);
      } else if (s.name == name + "_count") {
        counts[labels] = s.value;
      } else {
        sums[labels] = s.value;
      }
    }
    for (const auto& [labels, list] : buckets) {
      ASSERT_FALSE(list.empty());
      EXPECT_EQ(list.back()->labels.at("le"), "+Inf") << name;
      for (std::size_t i = 1; i < list.size(); ++i) {
        EXPECT_LT(ParseValue(list[i - 1]->labels.at("le")),
                  ParseValue(list[i]->labels.at("le")));
        EXPECT_LE(list[i - 1]->value, list[i]->value);
      }
      EXPECT_EQ(counts.at(labels), list.back()->value) << name;
      EXPECT_TRUE(sums.contains(labels)) << name;
    }
  }
}

// The one sample of an unlabelled family (or the first of a labelled one).
double Value(const Families& families, const std::string& name) {
  auto it = families.find(name);
  if (it == families.end() || it->second.samples.empty()) {
    ADD_FAILURE() << name << " is missing";
    return NAN;
  }
  return it->second.samples.front().value;
}

std::string ShellOutput(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[256];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) {
    out.append(buf, n);
  }
  ::pclose(p);
  return out;
}

// A line's first number after `key` in a /proc file of the server.
double ProcField(pid_t pid, const std::string& file, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + file);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(key)) {
      std::istringstream rest(line.substr(key.size()));
      double v = -1;
      rest >> v;
      return v;
    }
  }
  return -1;
}

int OpenFds(pid_t pid) {
  int n = 0;
  if (DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str())) {
    while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

// The checks fail where Prometheus (or its rules) would.
TEST(MetricsChecks, RefuseWhatPrometheusWould) {
  EXPECT_NONFATAL_FAILURE(Parse("sqlq_x 1\n"), "a sample without TYPE");
  EXPECT_NONFATAL_FAILURE(Parse("# TYPE sqlq_x gauge\nsqlq_x one\n"),
                          "value 'one'");
  EXPECT_NONFATAL_FAILURE(Parse("# TYPE sqlq_a gauge\nsqlq_a 1\n# TYPE sqlq_b "
                                "gauge\nsqlq_b 1\nsqlq_a{q=\"x\"} 2\n"),
                          "family split");
  EXPECT_NONFATAL_FAILURE(
      CheckNames(Parse("# HELP sqlq_sends x\n# TYPE sqlq_sends counter\n")),
      "name.ends_with(\"_total\")");
  EXPECT_NONFATAL_FAILURE(
      CheckNames(Parse("# HELP sqlq_age_ms x\n# TYPE sqlq_age_ms gauge\n")),
      "'ms' in the name");
  EXPECT_NONFATAL_FAILURE(
      CheckNames(Parse("# HELP sqlq_seconds_waited x\n"
                       "# TYPE sqlq_seconds_waited gauge\n")),
      "the unit goes last");
}

class MetricsScrape : public ServerTest {
 protected:
  Families Scrape(Client& c) {
    auto r = c.Get("/metrics");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.header("content-type"),
              "text/plain; version=0.0.4; charset=utf-8");
    return Parse(r.body);
  }
};

TEST_F(MetricsScrape, EveryFamilyParsesAndFollowsTheNamingRules) {
  StartServer();
  Client c(port());
  // Something in every family: a queue with messages in each state, a
  // ring, a rotation, requests of several routes and statuses.
  ASSERT_EQ(c.Post("/v1/queues/jobs", Json::object()).status, 201);
  ASSERT_EQ(c.Post("/v1/queues/jobs/messages",
                   Json::parse(R"({"messages":[{"payload":"a"},
                       {"payload":"b"},{"payload":"c","delay_ms":60000}]})"))
                .status,
            200);
  ASSERT_EQ(c.Post("/v1/queues/jobs/claim", Json::object()).status, 200);
  ASSERT_EQ(c.Post("/v1/rings/seen", {{"capacity", 3}}).status, 201);
  ASSERT_EQ(c.Post("/v1/rotations/relays", Json::object()).status, 201);
  ASSERT_EQ(c.Get("/v1/queues/nope").status, 404);
  ASSERT_EQ(c.Call("HEAD", "/healthz").status, 200);

  const Families families = Scrape(c);
  CheckNames(families);
  CheckHistograms(families);
  std::set<std::string> names;
  for (const auto& [name, f] : families) names.insert(name);
  for (const char* expected : {"sqlq_build_info",
                               "process_cpu_seconds_total",
                               "process_resident_memory_bytes",
                               "process_virtual_memory_bytes",
                               "process_open_fds",
                               "process_max_fds",
                               "process_start_time_seconds",
                               "sqlq_server_connections",
                               "sqlq_server_waiting_consumers",
                               "sqlq_server_requests_in_flight",
                               "sqlq_server_scheduler_leader",
                               "sqlq_server_claim_wakeups_total",
                               "sqlq_queue_ready",
                               "sqlq_queue_delayed",
                               "sqlq_queue_leased",
                               "sqlq_queue_waiting",
                               "sqlq_queue_dead",
                               "sqlq_queue_archived",
                               "sqlq_queue_sends_total",
                               "sqlq_queue_claims_total",
                               "sqlq_queue_acks_total",
                               "sqlq_queue_nacks_total",
                               "sqlq_queue_expirations_total",
                               "sqlq_queue_dead_lettered_total",
                               "sqlq_queue_expired_total",
                               "sqlq_queue_waiting_consumers",
                               "sqlq_queue_paused",
                               "sqlq_queue_oldest_ready_age_seconds",
                               "sqlq_ring_capacity",
                               "sqlq_ring_groups",
                               "sqlq_ring_entries",
                               "sqlq_ring_pushes_total",
                               "sqlq_rotation_items",
                               "sqlq_rotation_parked",
                               "sqlq_rotation_serves_total",
                               "sqlq_job_wait_seconds",
                               "sqlq_job_run_seconds",
                               "sqlq_job_outcomes_total",
                               "sqlq_http_request_duration_seconds"}) {
    EXPECT_TRUE(names.erase(expected)) << expected << " is missing";
  }
  EXPECT_TRUE(names.empty())
      << "not in the test's list (and docs?): " << *names.begin();
  // The figures are the queue's own.
  for (const Sample& s : families.at("sqlq_queue_ready").samples) {
    EXPECT_EQ(s.labels,
              (std::map<std::string, std::string>{{"queue", "jobs"}}));
    EXPECT_EQ(s.value, 1);
  }
  EXPECT_EQ(Value(families, "sqlq_queue_delayed"), 1);
  EXPECT_EQ(Value(families, "sqlq_queue_leased"), 1);
  EXPECT_EQ(Value(families, "sqlq_queue_waiting"), 0);
  EXPECT_EQ(Value(families, "sqlq_queue_sends_total"), 3);
}

// The sample named `name` (a histogram's "_count" too) whose labels are
// `labels`; NAN when there is none.
double SampleValue(const Families& families, const std::string& name,
                   const std::map<std::string, std::string>& labels) {
  for (const auto& [family, f] : families) {
    for (const auto& s : f.samples) {
      if (s.name == name && s.labels == labels) return s.value;
    }
  }
  return NAN;
}

TEST_F(MetricsScrape, JobsAreMeasuredPerQueueAndKind) {
  StartServer();
  Client c(port());
  ASSERT_EQ(c.Post("/v1/queues/jobs", Json::object()).status, 201);
  ASSERT_EQ(c.Post("/v1/queues/jobs/messages", Json::parse(R"({"messages":[
                       {"payload":"a","kind":"email.send"},
                       {"payload":"b","kind":"email.send"},
                       {"payload":"c","kind":"email.send"},
                       {"payload":"d"}]})"))
                .status,
            200);
  auto claimed = c.Post("/v1/queues/jobs/claim", {{"max", 4}});
  ASSERT_EQ(claimed.status, 200) << claimed.body;
  const Json& m = claimed.json["messages"];
  ASSERT_EQ(m.size(), 4u) << claimed.body;
  ASSERT_EQ(
      c.Post("/v1/queues/jobs/ack", {{"receipt", m[0]["receipt"]}}).status,
      200);
  ASSERT_EQ(c.Post("/v1/queues/jobs/nack",
                   {{"receipt", m[1]["receipt"]}, {"delay_ms", 0}})
                .status,
            200);
  ASSERT_EQ(c.Post("/v1/queues/jobs/nack",
                   {{"receipt", m[2]["receipt"]}, {"action", "dead"}})
                .status,
            200);
  ASSERT_EQ(
      c.Post("/v1/queues/jobs/ack", {{"receipts", {m[3]["receipt"]}}}).status,
      200);
  // A stale receipt counts nothing.
  EXPECT_EQ(
      c.Post("/v1/queues/jobs/ack", {{"receipt", m[0]["receipt"]}}).status,
      404);

  const Families f = Scrape(c);
  CheckHistograms(f);
  const std::map<std::string, std::string> email = {{"queue", "jobs"},
                                                    {"kind", "email.send"}};
  const std::map<std::string, std::string> none = {{"queue", "jobs"},
                                                   {"kind", ""}};
  auto with = [](std::map<std::string, std::string> l, const char* outcome) {
    l["outcome"] = outcome;
    return l;
  };
  EXPECT_EQ(SampleValue(f, "sqlq_job_outcomes_total", with(email, "completed")),
            1);
  EXPECT_EQ(SampleValue(f, "sqlq_job_outcomes_total", with(email, "retry")), 1);
  EXPECT_EQ(SampleValue(f, "sqlq_job_outcomes_total", with(email, "dead")), 1);
  EXPECT_EQ(SampleValue(f, "sqlq_job_outcomes_total", with(none, "completed")),
            1);
  EXPECT_EQ(SampleValue(f, "sqlq_job_wait_seconds_count", email), 3);
  EXPECT_EQ(SampleValue(f, "sqlq_job_wait_seconds_count", none), 1);
  EXPECT_EQ(SampleValue(f, "sqlq_job_run_seconds_count", email), 3);
  EXPECT_EQ(SampleValue(f, "sqlq_job_run_seconds_count", none), 1);
  EXPECT_GE(SampleValue(f, "sqlq_job_run_seconds_sum", email), 0);

  // The retried one, claimed again (attempt 2): its wait is not observed
  // again, its run is.
  auto again = c.Post("/v1/queues/jobs/claim", {{"ack", m[0]["receipt"]}});
  EXPECT_EQ(again.status, 404) << again.body;  // the ack is refused first
  again = c.Post("/v1/queues/jobs/claim", Json::object());
  ASSERT_EQ(again.json["messages"].size(), 1u) << again.body;
  EXPECT_EQ(again.json["messages"][0]["attempt"], 2);
  auto last = c.Post("/v1/queues/jobs/claim",
                     {{"ack", again.json["messages"][0]["receipt"]}});
  ASSERT_EQ(last.status, 200) << last.body;
  const Families g = Scrape(c);
  EXPECT_EQ(SampleValue(g, "sqlq_job_wait_seconds_count", email), 3);
  EXPECT_EQ(SampleValue(g, "sqlq_job_run_seconds_count", email), 4);
  EXPECT_EQ(SampleValue(g, "sqlq_job_outcomes_total", with(email, "completed")),
            2);

  // A claim that waits (wait_ms) counts the job it acks as well: when it
  // finds the next at once, and when it has to wait for one.
  ASSERT_EQ(c.Post("/v1/queues/jobs/messages", Json::parse(R"({"messages":[
                       {"payload":"e","kind":"email.send"},
                       {"payload":"f","kind":"email.send"}]})"))
                .status,
            200);
  auto e = c.Post("/v1/queues/jobs/claim", Json::object());
  ASSERT_EQ(e.json["messages"].size(), 1u) << e.body;
  auto f2 =
      c.Post("/v1/queues/jobs/claim",
             {{"ack", e.json["messages"][0]["receipt"]}, {"wait_ms", 50}});
  ASSERT_EQ(f2.json["messages"].size(), 1u) << f2.body;
  auto empty =
      c.Post("/v1/queues/jobs/claim",
             {{"ack", f2.json["messages"][0]["receipt"]}, {"wait_ms", 50}});
  ASSERT_EQ(empty.status, 200) << empty.body;
  EXPECT_EQ(empty.json["messages"].size(), 0u) << empty.body;
  const Families h = Scrape(c);
  EXPECT_EQ(SampleValue(h, "sqlq_job_outcomes_total", with(email, "completed")),
            4);
  EXPECT_EQ(SampleValue(h, "sqlq_job_run_seconds_count", email), 6);
}

TEST_F(MetricsScrape, BuildInfoNamesTheVersionAndEngine) {
  StartServer();
  Client c(port());
  const Families families = Scrape(c);
  const Family& info = families.at("sqlq_build_info");
  EXPECT_EQ(info.type, "gauge");
  ASSERT_EQ(info.samples.size(), 1u);
  std::string version = ShellOutput(std::string(SQLQ_BIN) + " --version");
  ASSERT_TRUE(version.starts_with("sqlq ")) << version;
  version = version.substr(5, version.find_first_of("\n ", 5) - 5);
  EXPECT_EQ(info.samples[0].labels,
            (std::map<std::string, std::string>{{"version", version},
                                                {"engine", "sqlite"}}));
  EXPECT_EQ(info.samples[0].value, 1);
}

TEST_F(MetricsScrape, ProcessFiguresAreThoseOfTheServersProcess) {
  const double before = static_cast<double>(std::time(nullptr));
  StartServer();
  const double after = static_cast<double>(std::time(nullptr)) + 1;
  Client c(port());
  const pid_t pid = server_->pid();

  Families first = Scrape(c);
  // Started when the test started it (btime and ticks: to the second).
  const double start = Value(first, "process_start_time_seconds");
  EXPECT_GE(start, before - 1);
  EXPECT_LE(start, after + 1);
  // The soft limit of open files, which the server raised to the hard one.
  EXPECT_EQ(Value(first, "process_max_fds"),
            ProcField(pid, "limits", "Max open files"));

  // Twenty more connections: twenty more descriptors, as /proc counts them.
  const double fds = Value(first, "process_open_fds");
  std::vector<std::unique_ptr<RawConn>> conns;
  for (int i = 0; i < 20; ++i)
    conns.push_back(std::make_unique<RawConn>(port()));
  ASSERT_TRUE(
      WaitFor([&] { return Metric(c, "sqlq_server_connections") == 21; },
              std::chrono::seconds(10)));
  Families second = Scrape(c);
  const double more = Value(second, "process_open_fds");
  EXPECT_EQ(more, fds + 20);
  EXPECT_NEAR(more, OpenFds(pid), 2);  // the scrape itself may differ

  // Resident memory as the kernel reports it (VmRSS, kB), give or take
  // what changed between the two reads.
  const double rss = Value(second, "process_resident_memory_bytes");
  const double vmrss = ProcField(pid, "status", "VmRSS:") * 1024;
  EXPECT_NEAR(rss, vmrss, std::max(4.0 * (1 << 20), 0.25 * vmrss));
  EXPECT_GT(Value(second, "process_virtual_memory_bytes"), rss);

  // CPU time grows with work and is the kernel's utime + stime.
  for (int i = 0; i < 300; ++i) ASSERT_EQ(c.Get("/healthz").status, 200);
  Families third = Scrape(c);
  const double cpu = Value(third, "process_cpu_seconds_total");
  EXPECT_GT(cpu, Value(first, "process_cpu_seconds_total"));
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), {});
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && (fields >> field); ++i) {
    if (i >= 14) ticks += std::stod(field);  // utime, stime
  }
  EXPECT_NEAR(cpu, ticks / static_cast<double>(::sysconf(_SC_CLK_TCK)), 0.1);
}

// The engine label on the server engines, where their test servers run
// (tests/support/test_servers.h).
void ExpectEngine(const fs::path& dir, const std::string& url,
                  const std::string& engine) {
  fs::create_directories(dir);
  ServerProcess server(dir, {}, url);
  ASSERT_TRUE(server.Start()) << server.log();
  Client c(server.port());
  const Families families = Parse(c.Get("/metrics").body);
  ASSERT_EQ(families.at("sqlq_build_info").samples.size(), 1u);
  EXPECT_EQ(families.at("sqlq_build_info").samples[0].labels.at("engine"),
            engine);
  CheckNames(families);
}

TEST_F(MetricsScrape, PostgresBuildInfo) {
  SQLQ_REQUIRE_SERVER(test::kPostgresServer);
  ExpectEngine(dir_ / "pg", test::ServerUrl(test::kPostgresServer), "postgres");
}

TEST_F(MetricsScrape, MariadbBuildInfo) {
  SQLQ_REQUIRE_SERVER(test::kMariadbServer);
  ExpectEngine(dir_ / "my", test::ServerUrl(test::kMariadbServer), "mysql");
}

}  // namespace
}  // namespace sqlq::server_test
