// The sqlq program. The command-line contract (commands, JSON fields, exit
// codes) is documented in docs/cli.md; scripts rely on it, so change it only
// by adding.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "cli/bench_program.h"
#include "cli/cli.h"
#include "cli/serve.h"
#include "core/periodic_thread.h"
#include "core/validate.h"
#include "engines/engines.h"
#include "sqlq/store.h"
#include "sqlq/text.h"
#include "wire/duration.h"
#include "wire/json.h"
#include "wire/printer.h"

namespace sqlq::cli {
namespace {

using wire::FormatTime;
using wire::ParseDuration;
using wire::Printer;

struct Globals {
  std::string db;
  bool json = false;
};

// For unsigned options: CLI11 would read "-1" as 2^64 - 1.
CLI::Validator NotNegative() {
  return CLI::Validator(
      [](std::string& in) -> std::string {
        return !in.empty() && in[0] == '-' ? "must not be negative" : "";
      },
      "", "NotNegative");
}

// Set by the command callbacks; the exit code of the run.
int g_exit = wire::kExitOk;

// A CLI11 validator-free duration option: parsed after CLI11 is done, so that
// the error message is ours, in the unit the user typed.
struct DurationArg {
  std::string flag;
  std::string text;
  std::optional<Duration> value;
  // The range the option takes (the library's for what it sets), checked
  // here so that the error echoes what was typed: "--lease 13h is too long:
  // the range is 1ms to 12h", not the library's milliseconds.
  Duration lo{0}, hi = kMaxDelay;
  // Set when the option is added; given means count() > 0, so that an
  // explicitly empty value ("--lease ''") is an error, not "not given".
  CLI::Option* option = nullptr;

  CLI::Option* Add(CLI::App* cmd, std::string name, const std::string& help,
                   Duration min, Duration max) {
    flag = std::move(name);
    lo = min;
    hi = max;
    option = cmd->add_option(flag, text, help);
    return option;
  }
  Status Resolve() {
    if (option == nullptr || option->count() == 0) return Status::Ok();
    auto d = ParseDuration(text);
    if (!d.ok()) return d.status().WithContext(flag);
    Status s = wire::CheckDurationRange(flag, text, *d, lo, hi);
    if (!s.ok()) return s;
    value = *d;
    return Status::Ok();
  }
};

class Runner {
 public:
  explicit Runner(Globals& g) : g_(g), out_(g.json) {}

  // The global options are parsed after the commands are set up, so read
  // --json when printing, not when constructing.
  Printer& out() {
    out_.set_json(g_.json);
    return out_;
  }

  // Opens the store; only commands that create things create the file.
  Result<Store*> Open(bool create) {
    if (store_) return store_.get();
    std::string url = g_.db.empty() ? std::string(Store::kDefaultUrl) : g_.db;
    auto s =
        Store::Open(url, {.create_if_missing = create, .report_waiting = true});
    if (!s.ok()) return s.status();
    store_ = std::move(*s);
    return store_.get();
  }

  Result<WorkQueue> Queue(const std::string& name) {
    auto store = Open(false);
    if (!store.ok()) return store.status();
    return (*store)->Queue(name);
  }
  Result<sqlq::Ring> Ring(const std::string& name) {
    auto store = Open(false);
    if (!store.ok()) return store.status();
    return (*store)->GetRing(name);
  }
  Result<sqlq::Rotation> Rotation(const std::string& name) {
    auto store = Open(false);
    if (!store.ok()) return store.status();
    return (*store)->GetRotation(name);
  }

  int Fail(const Status& s) { return out().Fail(s); }

 private:
  Globals& g_;
  Printer out_;
  std::unique_ptr<Store> store_;
};

// True (after printing the error and setting the exit code) when `r` failed.
template <typename R>
bool Failed(Runner& run, const R& r) {
  const Status& s = [&]() -> const Status& {
    if constexpr (std::is_same_v<R, Status>) {
      return r;
    } else {
      return r.status();
    }
  }();
  if (s.ok()) return false;
  g_exit = run.Fail(s);
  return true;
}

// The options of `queue create` and `queue alter`; for alter each one
// given changes, the others keep their value.
struct QueueOptionArgs {
  std::optional<int> max_attempts;
  std::optional<std::size_t> max_payload;
  std::string groups;
  bool archive = false, no_archive = false;
  DurationArg lease, base, max, retention, dead_retention, unique_for;
  // Limits as given: a number, or "none" to lift one (alter).
  std::optional<std::string> max_leased, rate_limit, rate_burst, group_limit;
  // A queue's name, or "none" (alter); labels as NAME=TEXT, NAME= drops
  // one (alter).
  std::optional<std::string> dead_letter_queue;
  std::vector<std::string> labels;

  void AddTo(CLI::App* cmd, bool alter) {
    auto dflt = [&](const char* d) {
      return alter ? std::string() : std::string(" (default ") + d + ")";
    };
    cmd->add_option(
        "--max-attempts", max_attempts,
        "Deliveries before a message becomes a dead letter" + dflt("5"));
    lease.Add(cmd, "--lease", "Default lease of a claim" + dflt("30s"),
              Duration(1), kMaxLease);
    base.Add(cmd, "--backoff-base",
             "Retry delay after the first failure" + dflt("1s"), Duration(0),
             kMaxDelay);
    max.Add(cmd, "--backoff-max", "Cap of the retry delay" + dflt("10m"),
            Duration(0), kMaxDelay);
    auto* on = cmd->add_flag("--archive", archive,
                             "Keep acked messages in the archive");
    if (alter) {
      cmd->add_flag("--no-archive", no_archive,
                    "Stop keeping acked messages (the archive stays)")
          ->excludes(on);
    }
    retention.Add(cmd, "--retention",
                  "How long the archive keeps messages" + dflt("7d"),
                  Duration(1), kMaxRetention);
    dead_retention.Add(cmd, "--dead-retention",
                       "How long dead letters are kept; 0 for ever" + dflt("0"),
                       Duration(0), kMaxRetention);
    unique_for.Add(cmd, "--unique-for",
                   "How long a dedup key stays taken after its message is "
                   "acked or dead-lettered" +
                       dflt("0"),
                   Duration(0), kMaxRetention);
    cmd->add_option("--max-payload", max_payload,
                    "Largest payload in bytes" + dflt("1048576"))
        ->check(NotNegative());
    cmd->add_option("--max-leased", max_leased,
                    "At most N messages leased at once, over every consumer "
                    "and process" +
                        std::string(alter ? "; none lifts it" : ""));
    cmd->add_option("--rate-limit", rate_limit,
                    "At most R claims a second, shared by every process: R, "
                    "R/s, R/m or R/h (100/m is 100 a minute)" +
                        std::string(alter ? "; none lifts it" : ""));
    cmd->add_option("--rate-burst", rate_burst,
                    "Claims that may go at once after a quiet spell (default "
                    "one second's worth)" +
                        std::string(alter ? "; none for the default" : ""));
    cmd->add_option("--group-limit", group_limit,
                    "Fair queues: at most K messages of one group leased at "
                    "once" +
                        std::string(alter ? "; none lifts it" : ""));
    cmd->add_option("--dead-letter-queue", dead_letter_queue,
                    "Move messages that use up their attempts into this "
                    "queue, ready, instead of keeping them as dead letters" +
                        std::string(alter ? "; none keeps them here" : ""));
    cmd->add_option("--label", labels,
                    "A label NAME=TEXT kept with the queue (repeatable)" +
                        std::string(alter ? "; NAME= removes it" : ""));
    if (!alter) {
      cmd->add_option("--groups", groups,
                      "How claims treat message groups: none, fair "
                      "(round-robin between groups) or ordered (each group "
                      "in send order, one at a time) (default none)");
    }
  }
  Status Apply(QueueOptions& o) {
    for (DurationArg* arg :
         {&lease, &base, &max, &retention, &dead_retention, &unique_for}) {
      Status s = arg->Resolve();
      if (!s.ok()) return s;
    }
    if (max_attempts) o.max_attempts = *max_attempts;
    if (lease.value) o.lease = *lease.value;
    if (base.value) o.backoff_base = *base.value;
    if (max.value) o.backoff_max = *max.value;
    if (o.backoff_max < o.backoff_base) {
      // Said with the flags given, in the unit typed; the other bound may
      // be the queue's (alter) or the default (create).
      if (max.value && base.value) {
        return Status::InvalidArgument(
            fmt::format("--backoff-max {} is shorter than --backoff-base {}",
                        max.text, base.text));
      }
      if (max.value) {
        return Status::InvalidArgument(fmt::format(
            "--backoff-max {} is shorter than the backoff base, {}: give a "
            "shorter --backoff-base too",
            max.text, wire::FormatDurationLike(o.backoff_base, max.text)));
      }
      return Status::InvalidArgument(fmt::format(
          "--backoff-base {} is longer than the backoff max, {}: give a "
          "longer --backoff-max too",
          base.text, wire::FormatDurationLike(o.backoff_max, base.text)));
    }
    if (archive) o.archive = true;
    if (no_archive) o.archive = false;
    if (retention.value) o.retention = *retention.value;
    if (dead_retention.value) o.dead_retention = *dead_retention.value;
    if (unique_for.value) o.unique_for = *unique_for.value;
    if (max_payload) o.max_payload_bytes = *max_payload;
    if (!groups.empty()) {
      auto mode = ParseGroupMode(groups);
      if (!mode.ok()) return mode.status();
      o.groups = *mode;
    }
    for (auto [text, field, flag, most, none] :
         {std::tuple{&max_leased, &o.max_leased, "--max-leased",
                     kMaxLeasedLimit, "no limit"},
          {&rate_burst, &o.rate_burst, "--rate-burst", kMaxRateBurst,
           "one second's worth"},
          {&group_limit, &o.group_limit, "--group-limit", kMaxGroupLimit,
           "no limit"}}) {
      if (!*text) continue;
      auto v = ParseLimit(**text, flag, most, none);
      if (!v.ok()) return v.status();
      *field = *v;
    }
    if (rate_limit) {
      auto v = ParseRate(*rate_limit);
      if (!v.ok()) return v.status();
      o.rate_limit = *v;
      if (!*v) o.rate_burst.reset();
    }
    if (dead_letter_queue) {
      o.dead_letter_queue =
          *dead_letter_queue == "none" ? std::string() : *dead_letter_queue;
    }
    for (const std::string& l : labels) {
      const std::size_t eq = l.find('=');
      if (eq == std::string::npos || eq == 0) {
        return Status::InvalidArgument(
            fmt::format("--label '{}': expected NAME=TEXT", l.substr(0, 80)));
      }
      if (eq + 1 == l.size()) {
        o.labels.erase(l.substr(0, eq));
      } else {
        o.labels[l.substr(0, eq)] = l.substr(eq + 1);
      }
    }
    return Status::Ok();
  }

  // A whole number in [1, most], or "none" (which means `none`).
  static Result<std::optional<int>> ParseLimit(const std::string& text,
                                               const char* flag, int most,
                                               const char* none) {
    if (text == "none") return std::optional<int>();
    int v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size()) {
      return Status::InvalidArgument(
          fmt::format("{} takes a whole number or none, not '{}'", flag, text));
    }
    if (v < 1 || v > most) {
      return Status::InvalidArgument(
          fmt::format("{} {} is out of range: the range is 1 to {} (none: {})",
                      flag, text, most, none));
    }
    return std::optional<int>(v);
  }
  // R, R/s, R/m or R/h, as claims a second; or "none".
  static Result<std::optional<double>> ParseRate(const std::string& text) {
    if (text == "none") return std::optional<double>();
    const std::size_t slash = text.find('/');
    const std::string number = text.substr(0, slash);
    const std::string unit =
        slash == std::string::npos ? "s" : text.substr(slash + 1);
    double per = 0;
    if (unit == "s" || unit == "sec") {
      per = 1;
    } else if (unit == "m" || unit == "min") {
      per = 60;
    } else if (unit == "h") {
      per = 3600;
    }
    double v = 0;
    auto [end, ec] =
        std::from_chars(number.data(), number.data() + number.size(), v);
    if (per == 0 || number.empty() || ec != std::errc() ||
        end != number.data() + number.size()) {
      return Status::InvalidArgument(fmt::format(
          "--rate-limit takes R, R/s, R/m or R/h (R a number) or none, not "
          "'{}'",
          text));
    }
    // The library's range, said in the unit typed: "0.01/h" is refused
    // as below 3.6/h, not as 2.8e-06 claims a second.
    const double rate = v / per;
    if (!(rate >= kMinRateLimit && rate <= kMaxRateLimit)) {
      const std::string in = slash == std::string::npos ? "" : "/" + unit;
      return Status::InvalidArgument(fmt::format(
          "--rate-limit {} is out of range: the range is {}{} to {}{}{} (none: "
          "no limit)",
          text, kMinRateLimit * per, in, kMaxRateLimit * per, in,
          in.empty() ? " claims a second" : ""));
    }
    return std::optional<double>(rate);
  }
};

// A rate in claims a second as a person would write it: "5/s", "300/m"
// when that is no whole number a second, "90/h", else claims a second.
std::string RateText(double per_second) {
  for (auto [per, unit] : {std::pair{1.0, "s"}, {60.0, "m"}, {3600.0, "h"}}) {
    const double n = per_second * per;
    if (std::abs(n - std::round(n)) < 1e-9 * std::max(1.0, n)) {
      return fmt::format("{}/{}", std::llround(n), unit);
    }
  }
  return fmt::format("{}/s", per_second);
}

// The limits a queue has, as `queue list` shows them: "max_leased=20,
// rate_limit=5/s"; null when it has none.
wire::Json LimitsText(const QueueOptions& o) {
  std::vector<std::string> set;
  if (o.max_leased) set.push_back(fmt::format("max_leased={}", *o.max_leased));
  if (o.rate_limit) set.push_back("rate_limit=" + RateText(*o.rate_limit));
  if (o.rate_burst) set.push_back(fmt::format("rate_burst={}", *o.rate_burst));
  if (o.group_limit) {
    set.push_back(fmt::format("group_limit={}", *o.group_limit));
  }
  if (set.empty()) return nullptr;
  return fmt::format("{}", fmt::join(set, ","));
}

// A row of `queue list` for people: what tells queues apart at a glance
// (--json and `queue show` have every setting).
wire::Json QueueGlance(const QueueInfo& q) {
  const QueueOptions& o = q.options;
  return {{"name", q.name},
          {"paused", q.paused},
          {"groups", GroupModeName(o.groups)},
          {"max_attempts", o.max_attempts},
          {"lease", wire::FormatDuration(o.lease)},
          {"archive", o.archive},
          {"limits", LimitsText(o)},
          {"dead_letter_queue", o.dead_letter_queue.empty()
                                    ? wire::Json(nullptr)
                                    : wire::Json(o.dead_letter_queue)}};
}

// Every field of a queue, as `queue show` shows it to people: durations
// and rates in units, unset settings saying what they mean.
std::vector<Printer::Field> QueueFields(
    const QueueInfo& q, const QueueStats& st,
    const std::vector<std::string>& sources) {
  const QueueOptions& o = q.options;
  auto limit = [](const std::optional<int>& v, const char* unset) {
    return v ? wire::Json(*v) : wire::Json(unset);
  };
  auto join = [](const std::vector<std::string>& names) {
    return fmt::format("{}", fmt::join(names, ", "));
  };
  std::vector<Printer::Field> f = {
      {"name", q.name},
      {"paused", q.paused},
      {"created_at", wire::FormatTime(q.created_at)},
      {"groups", GroupModeName(o.groups)},
      {"max_attempts", o.max_attempts},
      {"lease", wire::FormatDuration(o.lease)},
      {"backoff_base", wire::FormatDuration(o.backoff_base)},
      {"backoff_max", wire::FormatDuration(o.backoff_max)},
      {"max_payload_bytes", o.max_payload_bytes},
      {"archive", o.archive},
      {"retention", wire::FormatDuration(o.retention)},
      {"dead_retention", o.dead_retention.count() == 0
                             ? "0 (kept until purged)"
                             : wire::FormatDuration(o.dead_retention)},
      {"unique_for", o.unique_for.count() == 0
                         ? "0 (a key is free once its message leaves)"
                         : wire::FormatDuration(o.unique_for)},
      {"max_leased", limit(o.max_leased, "none")},
      {"rate_limit",
       o.rate_limit ? RateText(*o.rate_limit) : std::string("none")},
      {"rate_burst",
       limit(o.rate_burst, o.rate_limit ? "one second's worth" : "none")},
      {"group_limit", limit(o.group_limit, "none")},
      {"dead_letter_queue", o.dead_letter_queue.empty()
                                ? "none (dead letters stay here)"
                                : o.dead_letter_queue},
      {"dead_letters_from", sources.empty() ? "none" : join(sources)}};
  for (const auto& [label, text] : o.labels) {
    f.emplace_back("label " + label, text);
  }
  const wire::Json stats = wire::StatsJson(st);
  for (const auto& [key, value] : stats.items()) {
    if (key == "name" || key == "paused") continue;
    if (key == "oldest_ready_age_ms") {
      f.emplace_back("oldest_ready_age",
                     wire::FormatDuration(st.oldest_ready_age));
    } else {
      f.emplace_back(key, value);
    }
  }
  return f;
}

void AddQueueCommands(CLI::App& app, Runner& run) {
  auto* queue =
      app.add_subcommand("queue", "Create, list, inspect, drop queues");
  queue->require_subcommand(1);

  {
    auto* cmd = queue->add_subcommand("create", "Create a work queue");
    auto name = std::make_shared<std::string>();
    auto args = std::make_shared<QueueOptionArgs>();
    cmd->add_option("NAME", *name, "Queue name: 1-64 of [A-Za-z0-9_-]")
        ->required();
    args->AddTo(cmd, /*alter=*/false);
    cmd->callback([=, &run] {
      QueueOptions o;
      if (Failed(run, args->Apply(o))) return;
      // Refuse bad input before the database file gets created.
      Status valid = CheckQueueName(*name);
      if (valid.ok()) valid = CheckQueueOptions(o);
      if (Failed(run, valid)) return;
      auto store = run.Open(true);
      if (Failed(run, store)) return;
      auto q = (*store)->CreateQueue(*name, o);
      if (Failed(run, q)) return;
      run.out().Say(wire::QueueJson(q->info()),
                    "created queue '" + *name + "'");
    });
  }
  {
    auto* cmd = queue->add_subcommand(
        "alter", "Change a queue's settings (those given; the rest stay)");
    auto name = std::make_shared<std::string>();
    auto args = std::make_shared<QueueOptionArgs>();
    cmd->add_option("NAME", *name, "Queue name")->required();
    args->AddTo(cmd, /*alter=*/true);
    cmd->callback([=, &run] {
      auto q = run.Queue(*name);
      if (Failed(run, q)) return;
      QueueOptions o = q->options();
      if (Failed(run, args->Apply(o))) return;
      if (Failed(run, q->Alter(o))) return;
      run.out().Say(wire::QueueJson(q->info()),
                    "altered queue '" + *name + "'");
    });
  }
  for (const bool pause : {true, false}) {
    auto* cmd = queue->add_subcommand(
        pause ? "pause" : "resume",
        pause ? "Pause a queue: sends go on, claims get nothing"
              : "Resume a paused queue");
    auto name = std::make_shared<std::string>();
    cmd->add_option("NAME", *name, "Queue name")->required();
    cmd->callback([=, &run] {
      auto q = run.Queue(*name);
      if (Failed(run, q)) return;
      if (Failed(run, pause ? q->Pause() : q->Resume())) return;
      run.out().Say(
          wire::QueueJson(q->info()),
          (pause ? "paused queue '" : "resumed queue '") + *name + "'");
    });
  }

  queue
      ->add_subcommand("list",
                       "List queues and their settings (every setting with "
                       "--json; one queue in full: queue show)")
      ->callback([&run] {
        auto store = run.Open(false);
        if (Failed(run, store)) return;
        auto list = (*store)->ListQueues();
        if (Failed(run, list)) return;
        run.out().Columns({"name", "paused", "groups", "max_attempts", "lease",
                           "archive", "limits", "dead_letter_queue"});
        for (const auto& q : *list) {
          run.out().Row(run.out().json() ? wire::QueueJson(q) : QueueGlance(q));
        }
        run.out().Flush();
      });
  {
    auto* cmd = queue->add_subcommand(
        "show",
        "One queue in full: settings, limits, dead-letter queue, labels, "
        "paused, messages and counters");
    auto name = std::make_shared<std::string>();
    cmd->add_option("NAME", *name, "Queue name")->required();
    cmd->callback([=, &run] {
      auto q = run.Queue(*name);
      if (Failed(run, q)) return;
      auto st = q->Stats();
      if (Failed(run, st)) return;
      auto all = (*run.Open(false))->ListQueues();
      if (Failed(run, all)) return;
      // The queues whose dead letters come here.
      std::vector<std::string> sources;
      for (const QueueInfo& other : *all) {
        if (other.options.dead_letter_queue == *name) {
          sources.push_back(other.name);
        }
      }
      QueueInfo info = q->info();
      info.paused = st->paused;  // as the store says now
      wire::Json j = wire::QueueJson(info);
      j["stats"] = wire::StatsJson(*st);
      j["dead_letters_from"] = sources;
      run.out().Record(j, QueueFields(info, *st, sources));
    });
  }

  {
    auto* cmd = queue->add_subcommand(
        "stats", "Depth and counters of one queue, or of every queue");
    auto name = std::make_shared<std::string>();
    cmd->add_option("NAME", *name, "Queue name (all queues when omitted)");
    cmd->callback([=, &run] {
      auto store = run.Open(false);
      if (Failed(run, store)) return;
      std::vector<std::string> names;
      if (!name->empty()) {
        names.push_back(*name);
      } else {
        auto list = (*store)->ListQueues();
        if (Failed(run, list)) return;
        for (auto& q : *list) names.push_back(q.name);
      }
      run.out().Columns({"name", "ready", "delayed", "leased", "waiting",
                         "dead", "archived", "oldest_ready_age_ms", "sends",
                         "acks", "nacks", "expirations", "expired"});
      for (const auto& n : names) {
        auto q = (*store)->Queue(n);
        if (Failed(run, q)) return;
        auto st = q->Stats();
        if (Failed(run, st)) return;
        run.out().Row(wire::StatsJson(*st));
      }
      run.out().Flush();
    });
  }

  {
    auto* cmd = queue->add_subcommand(
        "drop", "Delete a queue with its messages, dead letters and archive");
    auto name = std::make_shared<std::string>();
    cmd->add_option("NAME", *name, "Queue name")->required();
    cmd->callback([=, &run] {
      auto store = run.Open(false);
      if (Failed(run, store)) return;
      Status s = (*store)->DropQueue(*name);
      if (Failed(run, s)) return;
      run.out().Say({{"dropped", *name}}, "dropped queue '" + *name + "'");
    });
  }

  {
    auto* cmd = queue->add_subcommand(
        "purge", "Delete every message of a queue (keeps dead letters)");
    auto name = std::make_shared<std::string>();
    cmd->add_option("NAME", *name, "Queue name")->required();
    cmd->callback([=, &run] {
      auto q = run.Queue(*name);
      if (Failed(run, q)) return;
      auto n = q->Purge();
      if (Failed(run, n)) return;
      run.out().Say({{"purged", *n}},
                    "purged " + std::to_string(*n) + " messages");
    });
  }
}

// --header NAME=VALUE (or another such option: `flag`), as given
// (repeatable).
Result<Headers> HeaderArgs(const std::vector<std::string>& args,
                           std::string_view flag = "--header") {
  Headers headers;
  for (const std::string& h : args) {
    const auto eq = h.find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument(
          fmt::format("{} '{}' must be NAME=VALUE", flag, h));
    }
    headers[h.substr(0, eq)] = h.substr(eq + 1);
  }
  return headers;
}

void AddSend(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand(
      "send", "Send a message (PAYLOAD '-' sends each line of stdin)");
  struct Args {
    std::string name, payload, dedup, run_at, group, kind, on_expiry;
    int priority = 0;
    DurationArg delay, timeout, expire_after, backoff, backoff_max;
    std::optional<int> max_attempts;
    bool base64 = false, json = false;
    std::vector<std::string> headers;
    std::vector<std::int64_t> depends_on;
    std::string if_dependency_dies = "cancel";
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("NAME", a->name, "Queue name")->required();
  cmd->add_option("PAYLOAD", a->payload,
                  "Message payload, or '-' for one message per stdin line")
      ->required();
  cmd->add_option("--depends-on", a->depends_on,
                  "Wait until the message with this ID (in any queue) has "
                  "completed (repeatable, or IDs separated by commas)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--if-dependency-dies", a->if_dependency_dies,
                  "When one it depends on dies: cancel (dead-letter it too), "
                  "run (anyway) or wait (for a redrive)")
      ->check(CLI::IsMember({"cancel", "run", "wait"}));
  cmd->add_option("--priority", a->priority, "Higher first (default 0)");
  a->delay.Add(cmd, "--delay", "Claimable only after this delay (e.g. 30s)",
               Duration(0), kMaxDelay);
  cmd->add_option("--dedup", a->dedup,
                  "Deduplication key: no second message with this key while "
                  "one is in the queue");
  cmd->add_option("--group", a->group,
                  "The message's group: delivered in order (queues created "
                  "--groups ordered), or shared fairly (--groups fair)");
  cmd->add_option("--kind", a->kind,
                  "The job's kind (e.g. email.send): which handler a worker "
                  "runs it with");
  a->timeout.Add(cmd, "--timeout",
                 "The longest one attempt may run (e.g. 30s): a worker is "
                 "cut off there",
                 Duration(1), kMaxLease);
  a->expire_after.Add(cmd, "--expire-after",
                      "Dead-letter it unless started within this long after "
                      "the send (e.g. 10m)",
                      Duration(1), kMaxDelay);
  cmd->add_option("--on-expiry", a->on_expiry,
                  "What --expire-after does with it: dead (dead-letter it, "
                  "the default) or drop (delete it)");
  cmd->add_option("--max-attempts", a->max_attempts,
                  "The job's own attempts (lowers the queue's, never raises "
                  "it)");
  a->backoff.Add(cmd, "--backoff",
                 "The job's own retry delay after its first failure, doubled "
                 "after each next (e.g. 30s)",
                 Duration(0), kMaxDelay);
  a->backoff_max.Add(cmd, "--backoff-max",
                     "The job's own cap of the retry delay (e.g. 1h)",
                     Duration(0), kMaxDelay);
  auto* run_at = cmd->add_option(
      "--run-at", a->run_at,
      "Claimable from this RFC 3339 time on (e.g. 2026-12-01T09:00:00Z)");
  run_at->excludes(a->delay.option);
  cmd->add_option("--header", a->headers,
                  "A header NAME=VALUE to send with the message (repeatable)");
  auto* base64 =
      cmd->add_flag("--base64", a->base64, "PAYLOAD (or each line) is base64");
  cmd->add_flag("--json-payload", a->json,
                "PAYLOAD (or each line) is JSON: checked, and marked with "
                "the header content-type: application/json")
      ->excludes(base64);
  cmd->callback([a, &run] {
    if (Failed(run, a->delay.Resolve())) return;
    if (Failed(run, a->timeout.Resolve())) return;
    if (Failed(run, a->expire_after.Resolve())) return;
    if (Failed(run, a->backoff.Resolve())) return;
    if (Failed(run, a->backoff_max.Resolve())) return;
    ExpiryAction on_expiry = ExpiryAction::kDeadLetter;
    if (!a->on_expiry.empty()) {
      auto action = ParseExpiryAction(a->on_expiry);
      if (!action.ok()) {
        g_exit = run.Fail(action.status().WithContext("--on-expiry"));
        return;
      }
      on_expiry = *action;
    }
    auto parsed = HeaderArgs(a->headers);
    if (Failed(run, parsed)) return;
    Headers headers = std::move(*parsed);
    if (a->json) headers[wire::kContentType] = wire::kJsonContentType;
    std::optional<Timestamp> at;
    if (!a->run_at.empty()) {
      auto t = wire::ParseTime(a->run_at);
      if (!t.ok()) {
        g_exit = run.Fail(t.status().WithContext("--run-at"));
        return;
      }
      at = *t;
    }
    auto dies = ParseIfDependencyDies(a->if_dependency_dies);
    if (Failed(run, dies)) return;
    auto q = run.Queue(a->name);
    if (Failed(run, q)) return;
    auto make = [&](std::string payload) -> Result<Message> {
      if (a->base64) {
        auto d = Base64Decode(payload);
        if (!d.ok()) return d.status();
        payload = std::move(*d);
      }
      if (a->json && !nlohmann::json::accept(payload)) {
        return Status::InvalidArgument("the payload is not valid JSON");
      }
      return Message{.payload = std::move(payload),
                     .priority = a->priority,
                     .delay = a->delay.value.value_or(Duration(0)),
                     .dedup_key = a->dedup,
                     .run_at = at,
                     .headers = headers,
                     .group = a->group,
                     .kind = a->kind,
                     .timeout = a->timeout.value,
                     .expire_after = a->expire_after.value,
                     .on_expiry = on_expiry,
                     .max_attempts = a->max_attempts,
                     .backoff_base = a->backoff.value,
                     .backoff_max = a->backoff_max.value,
                     .depends_on = a->depends_on,
                     .if_dependency_dies = *dies};
    };
    auto report = [&](const SendResult& r) {
      nlohmann::ordered_json j = {{"id", r.id}};
      if (r.duplicate) j["duplicate"] = true;
      run.out().Say(j, r.duplicate
                           ? "duplicate of message " + std::to_string(r.id)
                           : "sent message " + std::to_string(r.id));
    };
    if (a->payload != "-") {
      auto m = make(a->payload);
      if (Failed(run, m)) return;
      auto r = q->Send(*m);
      if (Failed(run, r)) return;
      report(*r);
      return;
    }
    // One message per line; lines are sent in batches of up to 1000, each
    // batch one commit. A bad line (not base64, too large) stops the run
    // after storing the lines before it; a failed commit stops it at that
    // batch. Either way the ids printed are exactly what was stored.
    std::vector<Message> batch;
    auto flush = [&]() -> bool {
      if (batch.empty()) return true;
      auto r = q->SendBatch(batch);
      batch.clear();
      if (Failed(run, r)) return false;
      for (const auto& one : *r) report(one);
      return true;
    };
    std::string line;
    std::size_t lineno = 0;
    const std::size_t limit = q->options().max_payload_bytes;
    while (std::getline(std::cin, line)) {
      ++lineno;
      auto m = make(line);
      // Checked here too, so that the error names the line, not the
      // position within its batch.
      if (m.ok() && m->payload.size() > limit) {
        m = Status::TooLarge(fmt::format(
            "payload of {} bytes exceeds the queue's limit of {} bytes",
            m->payload.size(), limit));
      }
      if (!m.ok()) {
        // A failed commit of the lines before is the error to report.
        if (!flush()) return;
        g_exit = run.Fail(
            m.status().WithContext("stdin line " + std::to_string(lineno)));
        return;
      }
      batch.push_back(std::move(*m));
      if (batch.size() == 1000 && !flush()) return;
    }
    flush();
  });
}

// A claim that waits is listed among the live workers while it waits
// (`sqlq worker list`): one report before the wait, one every kTtl / 3
// while it lasts longer, and the report's removal when it is over. A
// report that fails costs the claim nothing.
class WaitingClaimReport {
 public:
  static constexpr Duration kTtl = std::chrono::seconds(15);

  WaitingClaimReport(Store& store, const std::string& queue,
                     const std::string& worker, int max)
      : store_(store),
        report_{.id = NewWorkerId(),
                .name = worker.empty() ? "sqlq claim" : worker,
                .host = WorkerHost(),
                .pid = getpid(),
                .queues = {queue},
                .concurrency = std::max(max, 1),
                .started_at =
                    std::chrono::time_point_cast<std::chrono::microseconds>(
                        std::chrono::system_clock::now()),
                .ttl = kTtl},
        reported_(store_.ReportWorker(report_).ok()) {
    if (!reported_) return;
    thread_.emplace(
        [this] {
          (void)store_.ReportWorker(report_);
          return kTtl / 3;
        },
        kTtl / 3);
  }
  ~WaitingClaimReport() {
    thread_.reset();  // no report after the removal
    if (reported_) (void)store_.RemoveWorker(report_.id);
  }
  WaitingClaimReport(const WaitingClaimReport&) = delete;
  WaitingClaimReport& operator=(const WaitingClaimReport&) = delete;

 private:
  Store& store_;
  const WorkerReport report_;
  const bool reported_;
  std::optional<core::PeriodicThread> thread_;  // last: it uses the others
};

void AddClaim(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("claim", "Claim ready messages under a lease");
  struct Args {
    std::string name, worker, ack;
    int max = 1;
    DurationArg lease, wait;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("NAME", a->name, "Queue name")->required();
  cmd->add_option("--ack", a->ack,
                  "Ack this receipt in the claim's transaction first (one "
                  "commit for both); when it is refused nothing is claimed");
  cmd->add_option("--max", a->max, "Claim up to N messages (default 1)");
  a->lease.Add(cmd, "--lease", "Lease to take (default: the queue's)",
               Duration(1), kMaxLease);
  a->wait.Add(cmd, "--wait", "Wait up to this long for a message (default 0)",
              Duration(0), core::kMaxWait);
  cmd->add_option("--worker", a->worker, "Name of this consumer (archived)");
  cmd->callback([a, &run] {
    for (DurationArg* arg : {&a->lease, &a->wait}) {
      if (Failed(run, arg->Resolve())) return;
    }
    auto q = run.Queue(a->name);
    if (Failed(run, q)) return;
    const ClaimOptions o{.max = a->max,
                         .lease = a->lease.value,
                         .wait = a->wait.value.value_or(Duration(0)),
                         .worker = a->worker};
    ClaimNote note;
    std::optional<WaitingClaimReport> listed;
    if (o.wait > Duration(0)) {
      listed.emplace(**run.Open(false), a->name, a->worker, a->max);
    }
    auto r =
        a->ack.empty() ? q->Claim(o, &note) : q->AckAndClaim(a->ack, o, &note);
    listed.reset();
    if (Failed(run, r)) return;
    run.out().Columns({"id", "attempt", "priority", "receipt", "payload"});
    for (const auto& m : *r) {
      run.out().Row(wire::ClaimedJson(m));
    }
    run.out().Flush();
    // A limit, a pause or busy groups that held the claim back are said on
    // stderr (the messages stay the only output).
    if (note.paused) {
      std::cerr << fmt::format(
          "sqlq: queue '{}' is paused: no message is handed out until "
          "`sqlq queue resume {}`\n",
          a->name, a->name);
    } else if (!note.limited_by.empty()) {
      std::cerr << fmt::format(
          "sqlq: held back by the queue's {}; more claimable in {}ms\n",
          note.limited_by == "rate_limit" ? "rate limit" : "max_leased",
          note.retry_after.count());
    } else if (note.groups_busy) {
      std::cerr << "sqlq: messages are ready, but their groups hold them "
                   "back (an earlier message of the group in flight or "
                   "waiting for its retry, or the group at its "
                   "group_limit)\n";
    } else if (r->empty() && !run.out().json()) {
      std::cerr << "sqlq: no message ready\n";
    }
  });
}

// Where the messages that just became dead letters of `q` are: moved into
// its dead-letter queue, when it has one that exists (the library moves
// them there right after they die), or kept as dead letters of `q`. Said to
// people ("moved to ..."), and in --json as "dead_letter_queue" when moved.
struct DeadLetterPlace {
  std::string moved_to;  // the dead-letter queue, or "" when kept in `q`
  std::string sentence;  // "now dead letters of queue 'jobs'" ...
  void AddTo(nlohmann::ordered_json& j) const {
    if (!moved_to.empty()) j["dead_letter_queue"] = moved_to;
  }
};

DeadLetterPlace WhereDeadLettersWent(Runner& run, const WorkQueue& q) {
  const std::string dlq = q.options().dead_letter_queue;
  if (dlq.empty()) {
    return {.sentence = fmt::format(
                "now in the dead letters of queue '{}' (sqlq dead list {})",
                q.name(), q.name())};
  }
  if (!run.Queue(dlq).ok()) {
    return {.sentence = fmt::format(
                "kept in the dead letters of queue '{}': its dead-letter "
                "queue '{}' does not exist",
                q.name(), dlq)};
  }
  return {.moved_to = dlq,
          .sentence = fmt::format(
              "moved to queue '{}' (the dead-letter queue of '{}'), ready", dlq,
              q.name())};
}

void AddReceiptCommands(CLI::App& app, Runner& run) {
  {
    auto* cmd = app.add_subcommand("ack", "Mark claimed messages done");
    auto name = std::make_shared<std::string>();
    auto receipts = std::make_shared<std::vector<std::string>>();
    auto result = std::make_shared<std::optional<std::string>>();
    auto ttl = std::make_shared<DurationArg>();
    cmd->add_option("NAME", *name, "Queue name")->required();
    cmd->add_option("RECEIPT", *receipts, "Receipts printed by claim")
        ->required();
    cmd->add_option("--result", *result,
                    "The job's result, kept with the ack for `sqlq result` "
                    "(one receipt only)");
    ttl->Add(cmd, "--result-ttl", "How long the result is kept (default 1d)",
             kMinResultTtl, kMaxResultTtl);
    cmd->callback([=, &run] {
      if (Failed(run, ttl->Resolve())) return;
      auto q = run.Queue(*name);
      if (Failed(run, q)) return;
      if (result->has_value() || ttl->value) {
        if (receipts->size() != 1 || !result->has_value()) {
          Failed(run, Status::InvalidArgument(
                          "--result takes exactly one receipt, and "
                          "--result-ttl goes with --result"));
          return;
        }
        AckOptions o{.result = **result};
        if (ttl->value) o.result_ttl = *ttl->value;
        if (Failed(run, q->Ack(receipts->front(), o))) return;
        run.out().Say({{"receipt", receipts->front()}, {"acked", true}},
                      "acked " + receipts->front() + " with its result");
        return;
      }
      auto r = q->AckBatch(*receipts);
      if (Failed(run, r)) return;
      // Every receipt gets its line; the exit code is the first failure's.
      for (size_t i = 0; i < receipts->size(); ++i) {
        const Status& s = (*r)[i];
        if (s.ok()) {
          run.out().Say({{"receipt", (*receipts)[i]}, {"acked", true}},
                        "acked " + (*receipts)[i]);
        } else {
          int code = run.Fail(s);
          if (g_exit == wire::kExitOk) g_exit = code;
        }
      }
    });
  }
  {
    auto* cmd = app.add_subcommand(
        "nack", "Give a claimed message back for a retry (or dead letter)");
    auto name = std::make_shared<std::string>();
    auto receipt = std::make_shared<std::string>();
    auto delay = std::make_shared<DurationArg>();
    auto error = std::make_shared<std::string>();
    auto dead = std::make_shared<bool>(false);
    auto snooze = std::make_shared<bool>(false);
    cmd->add_option("NAME", *name, "Queue name")->required();
    cmd->add_option("RECEIPT", *receipt, "Receipt printed by claim")
        ->required();
    delay->Add(cmd, "--delay",
               "Retry after exactly this delay (default: backoff; with "
               "--snooze: at once)",
               Duration(0), kMaxDelay);
    cmd->add_option("--error", *error, "Why the attempt failed");
    auto* dead_flag = cmd->add_flag(
        "--dead", *dead,
        "A permanent failure: dead-letter it now, whatever attempts are left");
    cmd->add_flag("--snooze", *snooze,
                  "Not now: claimable again after --delay without spending "
                  "the attempt (no error kept)")
        ->excludes(dead_flag);
    cmd->callback([=, &run] {
      if (Failed(run, delay->Resolve())) return;
      auto q = run.Queue(*name);
      if (Failed(run, q)) return;
      const NackAction action = *dead     ? NackAction::kDead
                                : *snooze ? NackAction::kSnooze
                                          : NackAction::kRetry;
      auto r = q->Nack(
          *receipt, {.delay = delay->value, .error = *error, .action = action});
      if (Failed(run, r)) return;
      if (*r == NackOutcome::kRetry) {
        run.out().Say({{"receipt", *receipt}, {"outcome", "retry"}},
                      "will be retried");
        return;
      }
      if (*r == NackOutcome::kSnoozed) {
        run.out().Say({{"receipt", *receipt}, {"outcome", "snoozed"}},
                      "snoozed: claimable again without spending the attempt");
        return;
      }
      const DeadLetterPlace went = WhereDeadLettersWent(run, *q);
      nlohmann::ordered_json j = {{"receipt", *receipt}, {"outcome", "dead"}};
      went.AddTo(j);
      run.out().Say(j, std::string(*dead ? "failed permanently: "
                                         : "attempts used up: ") +
                           went.sentence);
    });
  }
  {
    auto* cmd = app.add_subcommand(
        "progress",
        "Record the progress of a claimed job (sqlq result shows it)");
    auto name = std::make_shared<std::string>();
    auto receipt = std::make_shared<std::string>();
    auto value = std::make_shared<double>(0);
    auto note = std::make_shared<std::string>();
    cmd->add_option("NAME", *name, "Queue name")->required();
    cmd->add_option("RECEIPT", *receipt, "Receipt printed by claim")
        ->required();
    cmd->add_option("PROGRESS", *value, "A number, e.g. a percent")->required();
    cmd->add_option("--note", *note, "A short note (at most 4096 bytes)");
    cmd->callback([=, &run] {
      auto q = run.Queue(*name);
      if (Failed(run, q)) return;
      if (Failed(run, q->Progress(*receipt, *value, *note))) return;
      run.out().Say({{"receipt", *receipt}, {"progress", *value}},
                    fmt::format("progress {} recorded", *value));
    });
  }
  {
    auto* cmd = app.add_subcommand(
        "result", "Where a job is, its progress and its result; --wait for it");
    auto name = std::make_shared<std::string>();
    auto id = std::make_shared<std::int64_t>(0);
    auto wait = std::make_shared<DurationArg>();
    cmd->add_option("NAME", *name, "Queue name")->required();
    cmd->add_option("ID", *id, "Message id printed by send")->required();
    wait->Add(cmd, "--wait",
              "Wait up to this long for the job to complete or die",
              Duration(0), std::chrono::hours(1));
    cmd->callback([=, &run] {
      if (Failed(run, wait->Resolve())) return;
      auto q = run.Queue(*name);
      if (Failed(run, q)) return;
      auto r = q->ReadResult(*id, wait->value.value_or(Duration(0)));
      if (Failed(run, r)) return;
      nlohmann::ordered_json j = {{"id", r->id},
                                  {"state", JobStateName(r->state)}};
      std::string text =
          fmt::format("job {}: {}", r->id, JobStateName(r->state));
      if (r->result) {
        j["result"] = *r->result;
        text += "\nresult: " + *r->result;
      }
      if (r->completed_at) j["completed_at"] = FormatTime(*r->completed_at);
      if (r->progress) {
        j["progress"] = *r->progress;
        text += fmt::format("\nprogress: {}", *r->progress);
        if (!r->note.empty()) {
          j["note"] = r->note;
          text += " (" + r->note + ")";
        }
        if (r->progress_at) j["progress_at"] = FormatTime(*r->progress_at);
      }
      if (!r->error.empty()) {
        j["error"] = r->error;
        text += "\nerror: " + r->error;
      }
      if (r->attempts > 0) j["attempts"] = r->attempts;
      run.out().Say(j, text);
    });
  }
  {
    auto* cmd = app.add_subcommand("extend", "Renew the lease of a message");
    auto name = std::make_shared<std::string>();
    auto receipt = std::make_shared<std::string>();
    auto lease = std::make_shared<DurationArg>();
    cmd->add_option("NAME", *name, "Queue name")->required();
    cmd->add_option("RECEIPT", *receipt, "Receipt printed by claim")
        ->required();
    lease->Add(cmd, "--lease", "New lease, from now", Duration(1), kMaxLease)
        ->required();
    cmd->callback([=, &run] {
      if (Failed(run, lease->Resolve())) return;
      auto q = run.Queue(*name);
      if (Failed(run, q)) return;
      auto r = q->Extend(*receipt, *lease->value);
      if (Failed(run, r)) return;
      run.out().Say(
          {{"receipt", *receipt}, {"lease_expires_at", FormatTime(*r)}},
          "lease now expires at " + FormatTime(*r));
    });
  }
}

// "dead list" and "archive list" share paging flags.
struct Paging {
  int limit = 100;
  std::int64_t after = 0;
};

void AddPaging(CLI::App* cmd, Paging& p) {
  cmd->add_option("--limit", p.limit, "At most N entries (default 100)");
  cmd->add_option("--after", p.after, "Entries with id greater than this");
}

void AddDeadAndArchive(CLI::App& app, Runner& run) {
  auto* dead = app.add_subcommand("dead", "Dead letters: list, redrive, purge");
  dead->require_subcommand(1);
  {
    auto* cmd = dead->add_subcommand("list", "List dead letters");
    auto name = std::make_shared<std::string>();
    auto paging = std::make_shared<Paging>();
    cmd->add_option("NAME", *name, "Queue name")->required();
    AddPaging(cmd, *paging);
    cmd->callback([=, &run] {
      auto q = run.Queue(*name);
      if (Failed(run, q)) return;
      auto r = q->ListDead({.limit = paging->limit, .after_id = paging->after});
      if (Failed(run, r)) return;
      run.out().Columns({"id", "attempts", "died_at", "last_error", "payload"});
      for (const auto& d : *r) {
        run.out().Row(wire::DeadLetterJson(d));
      }
      run.out().Flush();
    });
  }
  {
    auto* cmd = dead->add_subcommand(
        "redrive", "Move dead letters back into the queue (all if no ID)");
    auto name = std::make_shared<std::string>();
    auto ids = std::make_shared<std::vector<std::int64_t>>();
    cmd->add_option("NAME", *name, "Queue name")->required();
    cmd->add_option("ID", *ids, "Ids of dead letters to redrive");
    cmd->callback([=, &run] {
      auto q = run.Queue(*name);
      if (Failed(run, q)) return;
      auto r = ids->empty() ? q->RedriveAll() : q->Redrive(*ids);
      if (Failed(run, r)) return;
      run.out().Say({{"redriven", *r}},
                    "redrove " + std::to_string(*r) + " dead letters");
    });
  }
  {
    auto* cmd = dead->add_subcommand(
        "prune", "Delete dead letters older than the queue's dead retention");
    auto name = std::make_shared<std::string>();
    cmd->add_option("NAME", *name, "Queue name")->required();
    cmd->callback([=, &run] {
      auto q = run.Queue(*name);
      if (Failed(run, q)) return;
      auto r = q->PruneDead();
      if (Failed(run, r)) return;
      run.out().Say({{"pruned", *r}},
                    "pruned " + std::to_string(*r) + " dead letters");
    });
  }
  {
    auto* cmd = dead->add_subcommand("purge", "Delete every dead letter");
    auto name = std::make_shared<std::string>();
    cmd->add_option("NAME", *name, "Queue name")->required();
    cmd->callback([=, &run] {
      auto q = run.Queue(*name);
      if (Failed(run, q)) return;
      auto r = q->PurgeDead();
      if (Failed(run, r)) return;
      run.out().Say({{"purged", *r}},
                    "purged " + std::to_string(*r) + " dead letters");
    });
  }

  auto* archive = app.add_subcommand("archive",
                                     "Acked messages kept by "
                                     "queues created with --archive");
  archive->require_subcommand(1);
  {
    auto* cmd = archive->add_subcommand("list", "List archived messages");
    auto name = std::make_shared<std::string>();
    auto paging = std::make_shared<Paging>();
    cmd->add_option("NAME", *name, "Queue name")->required();
    AddPaging(cmd, *paging);
    cmd->callback([=, &run] {
      auto q = run.Queue(*name);
      if (Failed(run, q)) return;
      auto r =
          q->ListArchive({.limit = paging->limit, .after_id = paging->after});
      if (Failed(run, r)) return;
      run.out().Columns(
          {"id", "attempts", "worker", "completed_at", "payload"});
      for (const auto& m : *r) {
        run.out().Row(wire::ArchivedJson(m));
      }
      run.out().Flush();
    });
  }
  {
    auto* cmd = archive->add_subcommand(
        "prune", "Delete archived messages older than the retention");
    auto name = std::make_shared<std::string>();
    cmd->add_option("NAME", *name, "Queue name")->required();
    cmd->callback([=, &run] {
      auto q = run.Queue(*name);
      if (Failed(run, q)) return;
      auto r = q->PruneArchive();
      if (Failed(run, r)) return;
      run.out().Say({{"pruned", *r}},
                    "pruned " + std::to_string(*r) + " archived messages");
    });
  }
}

// Reads the payload argument, decoding it when --base64 was given.
Result<std::string> PayloadArg(const std::string& text, bool base64) {
  if (!base64) return text;
  return Base64Decode(text);
}

// The filter options of `message list` and the bulk changes.
struct FilterArgs {
  std::string state, dedup, header, after, before, payload_prefix;
  std::optional<std::string> group, kind;
  std::optional<std::int32_t> min_priority, max_priority;
  bool all = false;

  void AddTo(CLI::App* cmd) {
    cmd->add_option("--state", state,
                    "ready, delayed, leased, dead or archived (default: "
                    "every message in the queue)");
    cmd->add_option("--min-priority", min_priority, "Priority at least P");
    cmd->add_option("--max-priority", max_priority, "Priority at most P");
    cmd->add_option("--dedup", dedup, "With this dedup key");
    cmd->add_option("--group", group, "In this group");
    cmd->add_option("--kind", kind, "Of this kind");
    cmd->add_option("--header", header,
                    "With this header: NAME=VALUE, the value exactly");
    cmd->add_option("--payload-prefix", payload_prefix,
                    "Whose payload begins with this text");
    cmd->add_option("--enqueued-after", after,
                    "Sent at or after this RFC 3339 time");
    cmd->add_option("--enqueued-before", before,
                    "Sent before this RFC 3339 time");
  }
  // Whether any criterion was given (bulk changes by filter need one, or
  // --all).
  bool any() const { return !state.empty() || beyond_state(); }
  // Whether a criterion other than --state (which names a place) was given.
  bool beyond_state() const {
    return !dedup.empty() || !header.empty() || !after.empty() ||
           !before.empty() || min_priority || max_priority || group || kind ||
           !payload_prefix.empty();
  }
  // The criteria as they were typed: "--state ready --header tenant=acme".
  std::string Typed() const {
    std::vector<std::string> words;
    auto put = [&](const char* flag, const std::string& value) {
      if (value.empty()) return;
      const bool quote = value.find_first_of(" \t'") != std::string::npos;
      words.push_back(quote ? fmt::format("{} '{}'", flag, value)
                            : fmt::format("{} {}", flag, value));
    };
    put("--state", state);
    if (min_priority) put("--min-priority", std::to_string(*min_priority));
    if (max_priority) put("--max-priority", std::to_string(*max_priority));
    put("--dedup", dedup);
    if (group) put("--group", group->empty() ? "''" : *group);
    if (kind) put("--kind", *kind);
    put("--header", header);
    put("--payload-prefix", payload_prefix);
    put("--enqueued-after", after);
    put("--enqueued-before", before);
    if (all) words.emplace_back("--all");
    return fmt::format("{}", fmt::join(words, " "));
  }
  Result<MessageFilter> Filter() const {
    MessageFilter f;
    if (!state.empty()) {
      auto st = ParseMessageState(state);
      if (!st.ok()) return st.status().WithContext("--state");
      f.state = *st;
    }
    f.min_priority = min_priority;
    f.max_priority = max_priority;
    f.dedup_key = dedup;
    f.payload_prefix = payload_prefix;
    f.group = group;
    f.kind = kind;
    if (!header.empty()) {
      const auto eq = header.find('=');
      if (eq == std::string::npos) {
        return Status::InvalidArgument(
            fmt::format("--header '{}' must be NAME=VALUE", header));
      }
      f.header = std::pair(header.substr(0, eq), header.substr(eq + 1));
    }
    for (auto [text, into, flag] :
         {std::tuple{&after, &f.enqueued_after, "--enqueued-after"},
          std::tuple{&before, &f.enqueued_before, "--enqueued-before"}}) {
      if (text->empty()) continue;
      auto t = wire::ParseTime(*text);
      if (!t.ok()) return t.status().WithContext(flag);
      *into = *t;
    }
    return f;
  }
};

// A message object (wire::MessageInfoJson) as `message get` shows it to
// people: its fields in its order, each header on a line of its own
// ("header tenant"), the error history a line per failed attempt ("error
// 2": when, and why), and a payload that is not text as "base64:...".
std::vector<Printer::Field> MessageFields(const wire::Json& m) {
  std::vector<Printer::Field> out;
  for (const auto& [key, value] : m.items()) {
    if (key == "headers") {
      for (const auto& [header, v] : value.items()) {
        out.emplace_back("header " + header, v);
      }
    } else if (key == "errors") {
      if (value.empty()) out.emplace_back("errors", "none");
      for (const wire::Json& e : value) {
        out.emplace_back(
            fmt::format("error {}", e["attempt"].get<int>()),
            e["at"].get<std::string>() + "  " + e["error"].get<std::string>());
      }
    } else if (key == "payload_base64") {
      out.emplace_back("payload", "base64:" + value.get<std::string>());
    } else if (key == "payload" && !value.is_string()) {
      out.emplace_back("payload", value.dump());  // sent as JSON
    } else {
      out.emplace_back(key, value);
    }
  }
  return out;
}

// How many messages a delete or cancel of `sel` would touch: those the
// filter chooses, or of the ids those found where the command acts (the
// queue, or the place --state names).
Result<std::int64_t> WouldTouch(WorkQueue& q, const MessageSelection& sel) {
  if (sel.ids.empty()) {
    auto n = q.CountMessages(sel.filter);
    if (!n.ok()) return n.status();
    return n->count;
  }
  const std::optional<MessageState> state = sel.filter.state;
  std::int64_t n = 0;
  for (std::int64_t id :
       std::set<std::int64_t>(sel.ids.begin(), sel.ids.end())) {
    auto m = q.Get(id);
    if (!m.ok() && m.status().code() == Code::kNotFound) continue;
    if (!m.ok()) return m.status();
    const bool queued =
        m->state != MessageState::kDead && m->state != MessageState::kArchived;
    if (state ? m->state == *state : queued) ++n;
  }
  return n;
}

// Asks the person at the terminal to confirm a delete or cancel chosen by a
// filter (or --all), after counting what it would touch. Returns whether
// to go on; on yes the change is narrowed to messages sent before the
// count, so that it touches what was counted, not what came since.
Result<bool> Confirm(WorkQueue& q, const std::string& action,
                     const FilterArgs& args, MessageFilter& filter) {
  auto n = q.CountMessages(filter);
  if (!n.ok()) return n.status();
  if (!filter.enqueued_before || *filter.enqueued_before > n->at) {
    filter.enqueued_before = n->at;
  }
  if (n->count == 0) return true;  // nothing to ask about
  std::cerr << fmt::format("{} {} message{} of queue '{}' ({})? [y/N] ", action,
                           n->count, n->count == 1 ? "" : "s", q.name(),
                           args.Typed());
  std::cerr.flush();
  std::string answer;
  std::getline(std::cin, answer);
  std::erase_if(answer, [](char c) {
    return std::isspace(static_cast<unsigned char>(c));
  });
  std::transform(answer.begin(), answer.end(), answer.begin(), [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  });
  return answer == "y" || answer == "yes";
}

void AddMessageCommands(CLI::App& app, Runner& run) {
  auto* msg = app.add_subcommand(
      "message",
      "See and steer single messages: get, list, count, delete, cancel, "
      "retry, reschedule, priority");
  msg->require_subcommand(1);
  {
    auto* cmd = msg->add_subcommand(
        "get", "A message by id: in the queue, dead or archived");
    auto name = std::make_shared<std::string>();
    auto id = std::make_shared<std::int64_t>(0);
    cmd->add_option("NAME", *name, "Queue name")->required();
    cmd->add_option("ID", *id, "Message id")->required();
    cmd->callback([=, &run] {
      auto q = run.Queue(*name);
      if (Failed(run, q)) return;
      auto m = q->Get(*id);
      if (Failed(run, m)) return;
      const wire::Json j = wire::MessageInfoJson(*m);
      run.out().Record(j, MessageFields(j));
    });
  }
  {
    auto* cmd = msg->add_subcommand(
        "list", "Messages in id order, filtered; pages through the queue");
    auto name = std::make_shared<std::string>();
    auto filter = std::make_shared<FilterArgs>();
    auto limit = std::make_shared<int>(100);
    auto cursor = std::make_shared<std::string>();
    cmd->add_option("NAME", *name, "Queue name")->required();
    filter->AddTo(cmd);
    cmd->add_option("--limit", *limit,
                    "At most N messages (default 100, at most 100000)");
    cmd->add_option("--cursor", *cursor,
                    "Go on where a listing stopped (its next_cursor)");
    cmd->callback([=, &run] {
      if (*limit < 1 || *limit > 100000) {
        Failed(run, Status::InvalidArgument(fmt::format(
                        "--limit {} is out of range [1, 100000]", *limit)));
        return;
      }
      auto f = filter->Filter();
      if (Failed(run, f)) return;
      auto q = run.Queue(*name);
      if (Failed(run, q)) return;
      run.out().Columns(
          {"id", "state", "attempts", "priority", "last_error", "payload"});
      ListMessagesOptions o{.filter = *f, .cursor = *cursor};
      int left = *limit;
      std::string next;
      while (left > 0) {
        o.limit = std::min(left, 1000);
        auto page = q->ListMessages(o);
        if (Failed(run, page)) return;
        for (const MessageInfo& m : page->messages) {
          run.out().Row(wire::MessageInfoJson(m));
        }
        left -= static_cast<int>(page->messages.size());
        next = page->next_cursor;
        if (next.empty()) break;
        o.cursor = next;
      }
      run.out().Flush();
      if (!next.empty()) {
        // More to list: said on stderr, so that stdout stays messages.
        if (run.out().json()) {
          std::cerr << nlohmann::json({{"next_cursor", next}}).dump() << "\n";
        } else {
          std::cerr << "sqlq: more messages; go on with --cursor " << next
                    << "\n";
        }
      }
    });
  }
  {
    auto* cmd = msg->add_subcommand(
        "count",
        "How many messages a filter chooses (what a change by it "
        "would touch)");
    auto name = std::make_shared<std::string>();
    auto filter = std::make_shared<FilterArgs>();
    cmd->add_option("NAME", *name, "Queue name")->required();
    filter->AddTo(cmd);
    cmd->callback([=, &run] {
      auto f = filter->Filter();
      if (Failed(run, f)) return;
      auto q = run.Queue(*name);
      if (Failed(run, q)) return;
      auto n = q->CountMessages(*f);
      if (Failed(run, n)) return;
      run.out().Say({{"count", n->count}, {"at", wire::FormatTime(n->at)}},
                    std::to_string(n->count));
    });
  }
  // The bulk changes: by ids, or by filter (one criterion at least, or
  // --all).
  struct Change {
    const char* name;
    const char* help;
  };
  for (Change c :
       {Change{"delete",
               "Delete messages (in the queue, or dead or archived "
               "with --state)"},
        Change{"cancel",
               "Cancel messages in the queue (any state): they become dead "
               "letters with the error \"cancelled\""},
        Change{"retry",
               "Make delayed messages ready now; redrive dead "
               "letters (--state dead)"},
        Change{"reschedule", "Move ready and delayed messages to --at TIME"},
        Change{"priority", "Give messages in the queue --priority P"}}) {
    auto* cmd = msg->add_subcommand(c.name, c.help);
    auto name = std::make_shared<std::string>();
    auto ids = std::make_shared<std::vector<std::int64_t>>();
    auto filter = std::make_shared<FilterArgs>();
    auto at = std::make_shared<std::string>();
    auto priority = std::make_shared<std::int32_t>(0);
    auto dry_run = std::make_shared<bool>(false);
    auto yes = std::make_shared<bool>(false);
    const std::string action = c.name;
    cmd->add_option("NAME", *name, "Queue name")->required();
    cmd->add_option("ID", *ids, "Message ids (else the filter's messages)");
    filter->AddTo(cmd);
    cmd->add_flag("--all", filter->all,
                  "With no ids and no filter: every message the state selects");
    if (action == "reschedule") {
      cmd->add_option("--at", *at, "RFC 3339 time")->required();
    }
    if (action == "priority") {
      cmd->add_option("--priority", *priority, "The new priority")->required();
    }
    // The two that take many messages out of the queue at once (for good,
    // or into the dead letters): a count first if wanted, and a question
    // when a person is at the terminal.
    const bool destructive = action == "delete" || action == "cancel";
    if (destructive) {
      cmd->add_flag(
          "--dry-run", *dry_run,
          "Count the messages it would " + action + "; change nothing");
      cmd->add_flag("--yes,-y", *yes,
                    "Do not ask for confirmation (asked only by a filter or "
                    "--all, when stdin is a terminal)");
    }
    cmd->callback([=, &run] {
      auto f = filter->Filter();
      if (Failed(run, f)) return;
      if (ids->empty() && !filter->any() && !filter->all) {
        Failed(run, Status::InvalidArgument(
                        "give message ids, a filter (--state, --header, ...) "
                        "or --all"));
        return;
      }
      if (action == "cancel" && f->state &&
          (*f->state == MessageState::kDead ||
           *f->state == MessageState::kArchived)) {
        // Refused before anything is counted or asked.
        Failed(run,
               Status::InvalidArgument(fmt::format(
                   "cancel applies to messages in the queue, not to {}",
                   *f->state == MessageState::kDead ? "dead letters"
                                                    : "archived messages")));
        return;
      }
      if (*dry_run && !ids->empty() && filter->beyond_state()) {
        Failed(run, Status::InvalidArgument(
                        "--dry-run counts by ids or by a filter, not both"));
        return;
      }
      std::optional<Timestamp> when;
      if (action == "reschedule") {
        auto t = wire::ParseTime(*at);
        if (!t.ok()) {
          Failed(run, t.status().WithContext("--at"));
          return;
        }
        when = *t;
      }
      auto q = run.Queue(*name);
      if (Failed(run, q)) return;
      if (*dry_run) {
        auto n = WouldTouch(*q, {.ids = *ids, .filter = *f});
        if (Failed(run, n)) return;
        run.out().Say({{"changed", 0}, {"would_change", *n}, {"dry_run", true}},
                      fmt::format("{}: would {} {} message{}; nothing changed "
                                  "(--dry-run)",
                                  action, action, *n, *n == 1 ? "" : "s"));
        return;
      }
      if (destructive && ids->empty() && !*yes && isatty(STDIN_FILENO)) {
        auto go = Confirm(*q, action, *filter, *f);
        if (Failed(run, go)) return;
        if (!*go) {
          if (run.out().json()) run.out().Row({{"changed", 0}});
          std::cerr << "sqlq: not confirmed; nothing changed\n";
          return;
        }
      }
      const MessageSelection sel{.ids = *ids, .filter = *f};
      auto r = action == "delete"       ? q->Delete(sel)
               : action == "cancel"     ? q->Cancel(sel)
               : action == "retry"      ? q->RetryNow(sel)
               : action == "reschedule" ? q->Reschedule(sel, *when)
                                        : q->SetPriority(sel, *priority);
      if (Failed(run, r)) return;
      nlohmann::ordered_json j = {{"changed", *r}};
      std::string sentence =
          fmt::format("{}: {} message{}", action, *r, *r == 1 ? "" : "s");
      if (action == "cancel" && *r > 0) {
        const DeadLetterPlace went = WhereDeadLettersWent(run, *q);
        went.AddTo(j);
        sentence += ", " + went.sentence;
      }
      run.out().Say(j, sentence);
    });
  }
}

void AddWorkerCommands(CLI::App& app, Runner& run) {
  auto* worker = app.add_subcommand(
      "worker", "Live workers: the worker processes reporting themselves");
  worker->require_subcommand(1);
  auto queue = std::make_shared<std::string>();
  auto* cmd = worker->add_subcommand(
      "list",
      "List the live workers: host, pid, queues, concurrency, the jobs in "
      "their hands, last report");
  cmd->add_option("--queue", *queue, "Only the workers that serve this queue");
  cmd->callback([queue, &run] {
    auto store = run.Open(false);
    if (Failed(run, store)) return;
    auto list = (*store)->ListWorkers();
    if (Failed(run, list)) return;
    run.out().Columns({"id", "name", "host", "pid", "queues", "concurrency",
                       "jobs", "last_seen"});
    for (const WorkerInfo& w : *list) {
      const auto& qs = w.report.queues;
      if (!queue->empty() &&
          std::find(qs.begin(), qs.end(), *queue) == qs.end()) {
        continue;
      }
      run.out().Row(wire::WorkerJson(w));
    }
    run.out().Flush();
  });
}

void AddScheduleCommands(CLI::App& app, Runner& run) {
  auto* sched = app.add_subcommand(
      "schedule",
      "Schedules: a message sent to a queue at each tick of a cron "
      "expression");
  sched->require_subcommand(1);
  {
    struct Args {
      std::string name, cron, tz = "UTC", queue, payload, group, kind;
      std::vector<std::string> headers;
      std::int32_t priority = 0;
      int catch_up = 0;
      bool base64 = false;
    };
    auto a = std::make_shared<Args>();
    auto* cmd = sched->add_subcommand(
        "add", "Add a schedule (sent by `sqlq serve`, or `schedule run`)");
    cmd->add_option("NAME", a->name, "Schedule name: 1-64 of [A-Za-z0-9_-]")
        ->required();
    cmd->add_option("--cron", a->cron,
                    "When: five fields (minute hour day-of-month month "
                    "day-of-week), six with seconds first, or @hourly, "
                    "@daily, @weekly, @monthly, @yearly")
        ->required();
    cmd->add_option("--tz", a->tz,
                    "Time zone of the cron's times (default UTC), e.g. "
                    "Europe/Berlin");
    cmd->add_option("--queue", a->queue, "Queue the messages go to")
        ->required();
    cmd->add_option("--payload", a->payload, "Payload of each message")
        ->required();
    cmd->add_flag("--base64", a->base64, "--payload is base64");
    cmd->add_option("--priority", a->priority, "Priority of each message");
    cmd->add_option("--header", a->headers,
                    "A header NAME=VALUE of each message (repeatable)");
    cmd->add_option("--group", a->group, "Group of each message");
    cmd->add_option("--kind", a->kind, "Kind of each message");
    cmd->add_option("--catch-up", a->catch_up,
                    "Ticks missed while no scheduler ran that are still "
                    "sent, the latest first (default 0: skip them)");
    cmd->callback([a, &run] {
      ScheduleOptions o{.cron = a->cron,
                        .time_zone = a->tz,
                        .queue = a->queue,
                        .message = {.payload = a->payload,
                                    .priority = a->priority,
                                    .group = a->group,
                                    .kind = a->kind},
                        .catch_up = a->catch_up};
      if (a->base64) {
        auto d = Base64Decode(a->payload);
        if (Failed(run, d)) return;
        o.message.payload = std::move(*d);
      }
      auto headers = HeaderArgs(a->headers);
      if (Failed(run, headers)) return;
      o.message.headers = std::move(*headers);
      auto store = run.Open(false);
      if (Failed(run, store)) return;
      auto s = (*store)->CreateSchedule(a->name, o);
      if (Failed(run, s)) return;
      run.out().Say(wire::ScheduleJson(*s), "added schedule '" + a->name + "'");
    });
  }
  sched->add_subcommand("list", "List schedules: next tick, last tick, sent")
      ->callback([&run] {
        auto store = run.Open(false);
        if (Failed(run, store)) return;
        auto list = (*store)->ListSchedules();
        if (Failed(run, list)) return;
        run.out().Columns({"name", "cron", "time_zone", "queue", "paused",
                           "next_tick", "sent", "skipped"});
        for (const ScheduleInfo& s : *list) {
          run.out().Row(wire::ScheduleJson(s));
        }
        run.out().Flush();
      });
  for (const char* verb : {"pause", "resume", "remove"}) {
    auto name = std::make_shared<std::string>();
    const std::string v = verb;
    auto* cmd = sched->add_subcommand(
        verb, v == "pause"    ? "Stop a schedule sending (it keeps its place)"
              : v == "resume" ? "Send again, from the next tick after now"
                              : "Remove a schedule");
    cmd->add_option("NAME", *name, "Schedule name")->required();
    cmd->callback([name, v, &run] {
      auto store = run.Open(false);
      if (Failed(run, store)) return;
      Status s = v == "pause"    ? (*store)->PauseSchedule(*name)
                 : v == "resume" ? (*store)->ResumeSchedule(*name)
                                 : (*store)->DropSchedule(*name);
      if (Failed(run, s)) return;
      if (v == "remove") {
        run.out().Say({{"removed", *name}}, "removed schedule '" + *name + "'");
        return;
      }
      auto info = (*store)->GetSchedule(*name);
      if (Failed(run, info)) return;
      run.out().Say(
          wire::ScheduleJson(*info),
          (v == "pause" ? "paused schedule '" : "resumed schedule '") + *name +
              "'");
    });
  }
  sched
      ->add_subcommand("run",
                       "One pass of the scheduler: send the due ticks, "
                       "unless another process holds the scheduler lease")
      ->callback([&run] {
        auto store = run.Open(false);
        if (Failed(run, store)) return;
        auto r = (*store)->RunSchedules();
        if (Failed(run, r)) return;
        nlohmann::ordered_json j = {
            {"leader", r->leader}, {"sent", r->sent}, {"skipped", r->skipped}};
        run.out().Say(j, r->leader ? fmt::format("sent {}, skipped {}", r->sent,
                                                 r->skipped)
                                   : "another process holds the scheduler "
                                     "lease");
      });
}

void AddRingCommands(CLI::App& app, Runner& run) {
  auto* ring = app.add_subcommand(
      "ring", "Rings: capped per-group queues (each group keeps its newest N)");
  ring->require_subcommand(1);
  struct Args {
    std::string name, group, payload;
    std::int64_t capacity = 0;
    std::size_t max_payload = 1 << 20;
    std::vector<std::int64_t> seq;
    bool oldest_first = false, base64 = false;
    int limit = 100;
  };
  auto a = std::make_shared<Args>();
  auto name = [&](CLI::App* cmd) {
    cmd->add_option("NAME", a->name, "Ring name")->required();
  };
  {
    auto* cmd = ring->add_subcommand("create", "Create a ring");
    name(cmd);
    cmd->add_option("--capacity", a->capacity, "Entries each group keeps")
        ->required();
    cmd->add_option("--max-payload", a->max_payload,
                    "Largest payload in bytes (default 1048576)")
        ->check(NotNegative());
    cmd->callback([a, &run] {
      RingOptions o{.capacity = a->capacity,
                    .max_payload_bytes = a->max_payload};
      Status valid = CheckQueueName(a->name);
      if (Failed(run, valid)) return;
      auto store = run.Open(true);
      if (Failed(run, store)) return;
      auto r = (*store)->CreateRing(a->name, o);
      if (Failed(run, r)) return;
      run.out().Say(wire::RingJson(r->name(), o),
                    "created ring '" + a->name + "'");
    });
  }
  ring->add_subcommand("list", "List rings and their settings")
      ->callback([&run] {
        auto store = run.Open(false);
        if (Failed(run, store)) return;
        auto list = (*store)->ListRings();
        if (Failed(run, list)) return;
        run.out().Columns({"name", "capacity", "max_payload_bytes"});
        for (const auto& r : *list) {
          run.out().Row(wire::RingJson(r.name, r.options));
        }
        run.out().Flush();
      });
  {
    auto* cmd = ring->add_subcommand("push", "Push an entry to a group");
    name(cmd);
    cmd->add_option("GROUP", a->group, "Group")->required();
    cmd->add_option("PAYLOAD", a->payload, "Payload")->required();
    cmd->add_flag("--base64", a->base64, "PAYLOAD is base64");
    cmd->callback([a, &run] {
      auto payload = PayloadArg(a->payload, a->base64);
      if (Failed(run, payload)) return;
      auto r = run.Ring(a->name);
      if (Failed(run, r)) return;
      auto e = r->Push(a->group, *payload);
      if (Failed(run, e)) return;
      run.out().Say(
          wire::RingEntryJson(*e),
          "pushed entry " + std::to_string(e->seq) + " to '" + e->group + "'");
    });
  }
  {
    auto* cmd = ring->add_subcommand("read", "Read a group, newest first");
    name(cmd);
    cmd->add_option("GROUP", a->group, "Group")->required();
    cmd->add_flag("--oldest-first", a->oldest_first, "Oldest entry first");
    cmd->add_option("--limit", a->limit, "At most N entries (default 100)");
    cmd->callback([a, &run] {
      auto r = run.Ring(a->name);
      if (Failed(run, r)) return;
      auto entries = r->Read(
          a->group, {.oldest_first = a->oldest_first, .limit = a->limit});
      if (Failed(run, entries)) return;
      run.out().Columns({"seq", "group", "pushed_at", "payload"});
      for (const auto& e : *entries) run.out().Row(wire::RingEntryJson(e));
      run.out().Flush();
    });
  }
  {
    auto* cmd = ring->add_subcommand("groups", "Groups and their entry counts");
    name(cmd);
    cmd->callback([a, &run] {
      auto r = run.Ring(a->name);
      if (Failed(run, r)) return;
      auto groups = r->Groups();
      if (Failed(run, groups)) return;
      run.out().Columns({"group", "entries"});
      for (const auto& g : *groups) {
        run.out().Row(wire::RingGroupJson(g));
      }
      run.out().Flush();
    });
  }
  {
    auto* cmd = ring->add_subcommand(
        "delete", "Delete one entry (SEQ) or a whole group (no SEQ)");
    name(cmd);
    cmd->add_option("GROUP", a->group, "Group")->required();
    cmd->add_option("SEQ", a->seq, "Entry to delete")->expected(0, 1);
    cmd->callback([a, &run] {
      auto r = run.Ring(a->name);
      if (Failed(run, r)) return;
      std::int64_t deleted = 1;
      if (a->seq.empty()) {
        auto n = r->DeleteGroup(a->group);
        if (Failed(run, n)) return;
        deleted = *n;
      } else if (Failed(run, r->Delete(a->group, a->seq[0]))) {
        return;
      }
      run.out().Say({{"deleted", deleted}},
                    "deleted " + std::to_string(deleted) + " entries");
    });
  }
  {
    auto* cmd = ring->add_subcommand(
        "capacity", "Change the capacity (groups over it lose their oldest)");
    name(cmd);
    cmd->add_option("CAPACITY", a->capacity, "New capacity")->required();
    cmd->callback([a, &run] {
      auto r = run.Ring(a->name);
      if (Failed(run, r)) return;
      auto evicted = r->SetCapacity(a->capacity);
      if (Failed(run, evicted)) return;
      run.out().Say({{"capacity", a->capacity}, {"evicted", *evicted}},
                    "capacity now " + std::to_string(a->capacity) + "; " +
                        std::to_string(*evicted) + " entries evicted");
    });
  }
  {
    auto* cmd = ring->add_subcommand("stats", "Groups, entries and pushes");
    name(cmd);
    cmd->callback([a, &run] {
      auto r = run.Ring(a->name);
      if (Failed(run, r)) return;
      auto st = r->Stats();
      if (Failed(run, st)) return;
      run.out().Row(wire::RingStatsJson(*st));
      run.out().Flush();
    });
  }
  {
    auto* cmd = ring->add_subcommand("drop", "Delete a ring and its entries");
    name(cmd);
    cmd->callback([a, &run] {
      auto store = run.Open(false);
      if (Failed(run, store)) return;
      if (Failed(run, (*store)->DropRing(a->name))) return;
      run.out().Say({{"dropped", a->name}}, "dropped ring '" + a->name + "'");
    });
  }
}

void AddRotationCommands(CLI::App& app, Runner& run) {
  auto* rot = app.add_subcommand(
      "rotation", "Rotations: round-robin pools of items served in turn");
  rot->require_subcommand(1);
  struct Args {
    std::string name, key, payload;
    int max_failures = 3;
    std::size_t max_payload = 1 << 20;
    int n = 1;
    bool base64 = false;
  };
  auto a = std::make_shared<Args>();
  auto name = [&](CLI::App* cmd) {
    cmd->add_option("NAME", a->name, "Rotation name")->required();
  };
  {
    auto* cmd = rot->add_subcommand("create", "Create a rotation");
    name(cmd);
    cmd->add_option("--max-failures", a->max_failures,
                    "Failures that park an item (default 3)");
    cmd->add_option("--max-payload", a->max_payload,
                    "Largest payload in bytes (default 1048576)")
        ->check(NotNegative());
    cmd->callback([a, &run] {
      RotationOptions o{.max_failures = a->max_failures,
                        .max_payload_bytes = a->max_payload};
      if (Failed(run, CheckQueueName(a->name))) return;
      auto store = run.Open(true);
      if (Failed(run, store)) return;
      auto r = (*store)->CreateRotation(a->name, o);
      if (Failed(run, r)) return;
      run.out().Say(wire::RotationJson(r->name(), o),
                    "created rotation '" + a->name + "'");
    });
  }
  {
    auto* cmd = rot->add_subcommand("add", "Add an item");
    name(cmd);
    cmd->add_option("KEY", a->key, "Item key")->required();
    cmd->add_option("PAYLOAD", a->payload, "Item payload (default empty)");
    cmd->add_flag("--base64", a->base64, "PAYLOAD is base64");
    cmd->callback([a, &run] {
      auto payload = PayloadArg(a->payload, a->base64);
      if (Failed(run, payload)) return;
      auto r = run.Rotation(a->name);
      if (Failed(run, r)) return;
      if (Failed(run, r->Add(a->key, *payload))) return;
      run.out().Say({{"key", a->key}, {"added", true}},
                    "added '" + a->key + "'");
    });
  }
  {
    auto* cmd = rot->add_subcommand("remove", "Remove an item");
    name(cmd);
    cmd->add_option("KEY", a->key, "Item key")->required();
    cmd->callback([a, &run] {
      auto r = run.Rotation(a->name);
      if (Failed(run, r)) return;
      if (Failed(run, r->Remove(a->key))) return;
      run.out().Say({{"key", a->key}, {"removed", true}},
                    "removed '" + a->key + "'");
    });
  }
  {
    auto* cmd =
        rot->add_subcommand("next", "Serve the N least recently served items");
    name(cmd);
    cmd->add_option("--n", a->n, "How many (default 1)");
    cmd->callback([a, &run] {
      auto r = run.Rotation(a->name);
      if (Failed(run, r)) return;
      auto items = r->Next(a->n);
      if (Failed(run, items)) return;
      run.out().Columns({"key", "served", "failures", "payload"});
      for (const auto& item : *items) {
        auto j = wire::RotationItemJson(item);
        j.erase("parked");
        run.out().Row(j);
      }
      run.out().Flush();
    });
  }
  struct ItemCommand {
    const char* name;
    const char* help;
    Result<RotationItem> (sqlq::Rotation::*call)(std::string_view);
  };
  for (const ItemCommand& c :
       {ItemCommand{"fail", "Count a failure (parks at max failures)",
                    &sqlq::Rotation::Fail},
        ItemCommand{"ok", "Clear an item's failures", &sqlq::Rotation::Ok},
        ItemCommand{"reset", "Unpark an item and clear its failures",
                    &sqlq::Rotation::Reset}}) {
    auto* cmd = rot->add_subcommand(c.name, c.help);
    name(cmd);
    cmd->add_option("KEY", a->key, "Item key")->required();
    cmd->callback([a, &run, call = c.call] {
      auto r = run.Rotation(a->name);
      if (Failed(run, r)) return;
      auto item = ((*r).*call)(a->key);
      if (Failed(run, item)) return;
      run.out().Say(wire::RotationItemJson(*item),
                    "'" + item->key + "': " + std::to_string(item->failures) +
                        " failures" + (item->parked ? ", parked" : ""));
    });
  }
  {
    auto* cmd = rot->add_subcommand(
        "list",
        "Without NAME: every rotation and its settings; with NAME: its items "
        "in serving order");
    cmd->add_option("NAME", a->name, "Rotation name");
    cmd->callback([a, &run] {
      if (a->name.empty()) {
        auto store = run.Open(false);
        if (Failed(run, store)) return;
        auto list = (*store)->ListRotations();
        if (Failed(run, list)) return;
        run.out().Columns({"name", "max_failures", "max_payload_bytes"});
        for (const auto& r : *list) {
          run.out().Row(wire::RotationJson(r.name, r.options));
        }
        run.out().Flush();
        return;
      }
      auto r = run.Rotation(a->name);
      if (Failed(run, r)) return;
      auto items = r->List();
      if (Failed(run, items)) return;
      run.out().Columns({"key", "served", "failures", "parked", "payload"});
      for (const auto& item : *items)
        run.out().Row(wire::RotationItemJson(item));
      run.out().Flush();
    });
  }
  {
    auto* cmd = rot->add_subcommand("stats", "Items, parked items, serves");
    name(cmd);
    cmd->callback([a, &run] {
      auto r = run.Rotation(a->name);
      if (Failed(run, r)) return;
      auto st = r->Stats();
      if (Failed(run, st)) return;
      run.out().Row(wire::RotationStatsJson(*st));
      run.out().Flush();
    });
  }
  {
    auto* cmd = rot->add_subcommand("drop", "Delete a rotation and its items");
    name(cmd);
    cmd->callback([a, &run] {
      auto store = run.Open(false);
      if (Failed(run, store)) return;
      if (Failed(run, (*store)->DropRotation(a->name))) return;
      run.out().Say({{"dropped", a->name}},
                    "dropped rotation '" + a->name + "'");
    });
  }
}

// A batch's status as `sqlq batch status` says it in text.
std::string BatchText(const BatchStatus& b) {
  const BatchCounts& c = b.counts;
  std::string out = fmt::format(
      "batch {}: {} of {} ended (completed {}, dead {}, cancelled {}), {}; "
      "callback message {} in '{}'",
      b.id, c.total - c.pending(), c.total, c.completed, c.dead, c.cancelled,
      b.done ? "done" : fmt::format("{} pending", c.pending()), b.callback_id,
      b.callback_queue);
  if (b.cancelled_at) out += "; cancelled";
  return out;
}

void AddBatchCommands(CLI::App& app, Runner& run) {
  auto* batch = app.add_subcommand(
      "batch",
      "Batches: members in any queues sent under one id with a callback "
      "message, ready once every member has completed or died");
  batch->require_subcommand(1);
  struct Args {
    std::string id, callback_queue, callback_payload, kind, callback_kind,
        stdin_queue;
    std::vector<std::string> members, callback_headers;
    DurationArg retention;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  {
    auto* cmd = batch->add_subcommand(
        "send",
        "Send a batch: the members (--member QUEUE=PAYLOAD, or --stdin QUEUE "
        "for one member per line) and the callback, in one transaction");
    cmd->add_option("CALLBACK_QUEUE", a->callback_queue,
                    "The queue the callback goes to")
        ->required();
    cmd->add_option("CALLBACK_PAYLOAD", a->callback_payload,
                    "The callback's payload")
        ->required();
    cmd->add_option("--member", a->members,
                    "A member QUEUE=PAYLOAD (repeatable; members may be in "
                    "several queues)");
    cmd->add_option("--stdin", a->stdin_queue,
                    "Members to this queue, one per line of stdin (after "
                    "those of --member)");
    cmd->add_option("--id", a->id,
                    "The batch id (ASCII letters, digits, '_', '-', '.', "
                    "':'); one is made when none is given");
    a->retention.Add(cmd, "--retention",
                     "How long its status stays readable once it is done "
                     "(default 7d)",
                     kMinBatchRetention, kMaxBatchRetention);
    cmd->add_option("--kind", a->kind, "The members' kind (e.g. image.resize)");
    cmd->add_option("--callback-kind", a->callback_kind,
                    "The callback's kind (e.g. album.done)");
    cmd->add_option("--callback-header", a->callback_headers,
                    "A header NAME=VALUE of the callback (repeatable)");
    cmd->add_flag("--json-payload", a->json,
                  "The payloads are JSON: checked, and marked with the header "
                  "content-type: application/json");
    cmd->callback([a, &run] {
      if (Failed(run, a->retention.Resolve())) return;
      if (!a->id.empty() && Failed(run, CheckBatchId(a->id))) return;
      auto headers = HeaderArgs(a->callback_headers, "--callback-header");
      if (Failed(run, headers)) return;
      BatchSpec spec{.id = a->id};
      if (a->retention.value) spec.retention = *a->retention.value;
      auto payload = [&](const std::string& text,
                         const std::string& what) -> Status {
        if (a->json && !nlohmann::json::accept(text)) {
          return Status::InvalidArgument(what +
                                         ": the payload is not valid JSON");
        }
        return Status::Ok();
      };
      Headers json_header;
      if (a->json) json_header[wire::kContentType] = wire::kJsonContentType;
      for (const std::string& m : a->members) {
        const auto eq = m.find('=');
        if (eq == std::string::npos || eq == 0) {
          g_exit = run.Fail(Status::InvalidArgument(
              fmt::format("--member '{}' must be QUEUE=PAYLOAD", m)));
          return;
        }
        if (Failed(run, payload(m.substr(eq + 1), "--member " + m))) return;
        spec.members.push_back({m.substr(0, eq),
                                {.payload = m.substr(eq + 1),
                                 .headers = json_header,
                                 .kind = a->kind}});
      }
      if (!a->stdin_queue.empty()) {
        std::string line;
        std::size_t lineno = 0;
        while (std::getline(std::cin, line)) {
          ++lineno;
          if (Failed(run,
                     payload(line, fmt::format("stdin line {}", lineno)))) {
            return;
          }
          spec.members.push_back(
              {a->stdin_queue,
               {.payload = line, .headers = json_header, .kind = a->kind}});
        }
      }
      if (spec.members.empty()) {
        g_exit = run.Fail(Status::InvalidArgument(
            "a batch needs at least one member: give --member QUEUE=PAYLOAD "
            "or --stdin QUEUE"));
        return;
      }
      if (Failed(run, payload(a->callback_payload, "the callback"))) return;
      Headers cb_headers = std::move(*headers);
      if (a->json) cb_headers[wire::kContentType] = wire::kJsonContentType;
      spec.callback = {a->callback_queue,
                       {.payload = a->callback_payload,
                        .headers = cb_headers,
                        .kind = a->callback_kind}};
      auto store = run.Open(false);
      if (Failed(run, store)) return;
      auto sent = (*store)->CreateBatch(spec);
      if (Failed(run, sent)) return;
      run.out().Say({{"id", sent->id},
                     {"members", sent->members},
                     {"callback_id", sent->callback_id}},
                    fmt::format("sent batch {}: {} members, callback message "
                                "{} in '{}'",
                                sent->id, sent->members.size(),
                                sent->callback_id, a->callback_queue));
    });
  }
  {
    auto* cmd = batch->add_subcommand(
        "status",
        "A batch's counts: total, completed, dead, cancelled, pending, and "
        "whether it is done");
    cmd->add_option("ID", a->id, "The batch id")->required();
    cmd->callback([a, &run] {
      if (Failed(run, CheckBatchId(a->id))) return;
      auto store = run.Open(false);
      if (Failed(run, store)) return;
      auto st = (*store)->GetBatch(a->id);
      if (Failed(run, st)) return;
      run.out().Say(wire::BatchJson(*st), BatchText(*st));
    });
  }
  {
    auto* cmd = batch->add_subcommand(
        "cancel",
        "Cancel a batch's members that have not ended (the callback then "
        "comes, with the counts)");
    cmd->add_option("ID", a->id, "The batch id")->required();
    cmd->callback([a, &run] {
      if (Failed(run, CheckBatchId(a->id))) return;
      auto store = run.Open(false);
      if (Failed(run, store)) return;
      auto st = (*store)->CancelBatch(a->id);
      if (Failed(run, st)) return;
      run.out().Say(wire::BatchJson(*st), BatchText(*st));
    });
  }
}

void AddTopicCommands(CLI::App& app, Runner& run) {
  auto* topic = app.add_subcommand(
      "topic",
      "Topics: one publish stored in every subscribed queue (with a header "
      "filter each)");
  topic->require_subcommand(1);
  struct Args {
    std::string name, queue, payload, dedup, group, kind;
    std::vector<std::string> filter, headers;
    int priority = 0;
    bool base64 = false;
  };
  auto a = std::make_shared<Args>();
  auto name = [&](CLI::App* cmd) {
    cmd->add_option("TOPIC", a->name, "Topic name")->required();
  };
  auto name_and_queue = [&](CLI::App* cmd) {
    name(cmd);
    cmd->add_option("QUEUE", a->queue, "Queue name")->required();
  };
  {
    auto* cmd = topic->add_subcommand("create", "Create a topic");
    name(cmd);
    cmd->callback([a, &run] {
      // Before the database is opened (and made): a bad name makes nothing.
      if (Failed(run, core::ValidateName("topic", a->name))) return;
      auto store = run.Open(true);
      if (Failed(run, store)) return;
      if (Failed(run, (*store)->CreateTopic(a->name))) return;
      run.out().Say({{"name", a->name}, {"kind", "topic"}},
                    "created topic '" + a->name + "'");
    });
  }
  {
    auto* cmd = topic->add_subcommand(
        "drop", "Delete a topic and its subscriptions (the queues stay)");
    name(cmd);
    cmd->callback([a, &run] {
      auto store = run.Open(false);
      if (Failed(run, store)) return;
      if (Failed(run, (*store)->DropTopic(a->name))) return;
      run.out().Say({{"dropped", a->name}}, "dropped topic '" + a->name + "'");
    });
  }
  topic->add_subcommand("list", "List topics and how many queues subscribe")
      ->callback([&run] {
        auto store = run.Open(false);
        if (Failed(run, store)) return;
        auto list = (*store)->ListTopics();
        if (Failed(run, list)) return;
        run.out().Columns({"name", "subscriptions", "created_at"});
        for (const auto& t : *list) run.out().Row(wire::TopicJson(t));
        run.out().Flush();
      });
  {
    auto* cmd = topic->add_subcommand(
        "subscribe",
        "Subscribe a queue to a topic (again: replaces its filter)");
    name_and_queue(cmd);
    cmd->add_option("--filter", a->filter,
                    "Deliver only messages with header NAME=VALUE "
                    "(repeatable: all must match; none: every message)");
    cmd->callback([a, &run] {
      auto filter = HeaderArgs(a->filter, "--filter");
      if (Failed(run, filter)) return;
      auto store = run.Open(false);
      if (Failed(run, store)) return;
      auto added = (*store)->Subscribe(a->name, a->queue, *filter);
      if (Failed(run, added)) return;
      nlohmann::ordered_json f = nlohmann::ordered_json::object();
      for (const auto& [k, v] : *filter) f[k] = v;
      run.out().Say({{"topic", a->name},
                     {"queue", a->queue},
                     {"filter", f},
                     {"created", *added}},
                    (*added ? "subscribed '" : "changed the filter of '") +
                        a->queue + "' to topic '" + a->name + "'");
    });
  }
  {
    auto* cmd =
        topic->add_subcommand("unsubscribe", "Remove a queue's subscription");
    name_and_queue(cmd);
    cmd->callback([a, &run] {
      auto store = run.Open(false);
      if (Failed(run, store)) return;
      if (Failed(run, (*store)->Unsubscribe(a->name, a->queue))) return;
      run.out().Say(
          {{"topic", a->name}, {"unsubscribed", a->queue}},
          "unsubscribed '" + a->queue + "' from topic '" + a->name + "'");
    });
  }
  {
    auto* cmd = topic->add_subcommand(
        "subscriptions", "List a topic's subscribed queues and their filters");
    name(cmd);
    cmd->callback([a, &run] {
      auto store = run.Open(false);
      if (Failed(run, store)) return;
      auto list = (*store)->ListSubscriptions(a->name);
      if (Failed(run, list)) return;
      run.out().Columns({"queue", "filter", "subscribed_at"});
      for (const auto& sub : *list) {
        run.out().Row(wire::SubscriptionJson(sub));
      }
      run.out().Flush();
    });
  }
  {
    auto* cmd = topic->add_subcommand(
        "publish",
        "Publish a message: stored in every subscribed queue whose filter "
        "it matches, in one transaction");
    name(cmd);
    cmd->add_option("PAYLOAD", a->payload, "Message payload")->required();
    cmd->add_option("--header", a->headers,
                    "A header NAME=VALUE to send with the message "
                    "(repeatable)");
    cmd->add_option("--priority", a->priority, "Higher first (default 0)");
    cmd->add_option("--dedup", a->dedup,
                    "Deduplication key, as each queue's send takes it");
    cmd->add_option("--group", a->group, "The message's group");
    cmd->add_option("--kind", a->kind, "The job's kind");
    cmd->add_flag("--base64", a->base64, "PAYLOAD is base64");
    cmd->callback([a, &run] {
      auto headers = HeaderArgs(a->headers);
      if (Failed(run, headers)) return;
      auto payload = PayloadArg(a->payload, a->base64);
      if (Failed(run, payload)) return;
      auto store = run.Open(false);
      if (Failed(run, store)) return;
      auto d = (*store)->Publish(a->name, {.payload = std::move(*payload),
                                           .priority = a->priority,
                                           .dedup_key = a->dedup,
                                           .headers = std::move(*headers),
                                           .group = a->group,
                                           .kind = a->kind});
      if (Failed(run, d)) return;
      if (d->empty() && !run.out().json()) {
        std::cout << "stored in no queue: no subscription takes it\n";
        return;
      }
      run.out().Columns({"queue", "id", "duplicate"});
      for (const Delivery& x : *d) {
        run.out().Row({{"queue", x.queue},
                       {"id", x.sent.id},
                       {"duplicate", x.sent.duplicate}});
      }
      run.out().Flush();
    });
  }
}

}  // namespace

int Main(int argc, char** argv) {
  g_exit = wire::kExitOk;
  // `sqlq bench ...` is sqlq-bench's command line, passed on whole.
  if (auto bench = BenchArgs(argc, argv)) return RunBenchProgram(*bench, false);
  Globals g;
  CLI::App app{"sqlq: durable queues in SQL tables", "sqlq"};
  app.set_version_flag("--version", "sqlq " SQLQ_VERSION);
  app.require_subcommand(1);
  // --db and --json may stand before or after the command.
  app.fallthrough();
  app.add_option("--db", g.db,
                 "Database URL (default sqlite:sqlq.db); also $SQLQ_DB")
      ->envname("SQLQ_DB")
      ->type_name("URL");
  app.add_flag("--json", g.json, "Print one JSON object per line");
  app.footer(
      "Durations: 500ms, 30s, 5m, 2h, 1d (a plain number is seconds).\n"
      "Exit codes: 0 ok, 2 usage or invalid input, 3 not found, 4 exists,\n"
      "5 stale receipt, 6 too large, 7 permission, 8 busy/unavailable (try\n"
      "again), 9 commit outcome unknown, 10 not a database, 1 internal.\n"
      "See docs/cli.md.");

  Runner run(g);
  AddQueueCommands(app, run);
  AddSend(app, run);
  AddClaim(app, run);
  AddReceiptCommands(app, run);
  app.add_subcommand("list",
                     "List everything in the store: queues, rings, "
                     "rotations and topics, by kind and name")
      ->callback([&run] {
        auto store = run.Open(false);
        if (Failed(run, store)) return;
        auto queues = (*store)->ListQueues();
        if (Failed(run, queues)) return;
        auto rings = (*store)->ListRings();
        if (Failed(run, rings)) return;
        auto rotations = (*store)->ListRotations();
        if (Failed(run, rotations)) return;
        auto topics = (*store)->ListTopics();
        if (Failed(run, topics)) return;
        run.out().Columns({"kind", "name"});
        for (const auto& q : *queues) run.out().Row(wire::QueueJson(q));
        for (const auto& r : *rings) {
          run.out().Row(wire::RingJson(r.name, r.options));
        }
        for (const auto& r : *rotations) {
          run.out().Row(wire::RotationJson(r.name, r.options));
        }
        for (const auto& t : *topics) run.out().Row(wire::TopicJson(t));
        run.out().Flush();
      });
  AddDeadAndArchive(app, run);
  AddMessageCommands(app, run);
  AddRingCommands(app, run);
  AddScheduleCommands(app, run);
  AddWorkerCommands(app, run);
  AddRotationCommands(app, run);
  AddTopicCommands(app, run);
  AddBatchCommands(app, run);
  AddServeCommand(
      app, [&] { return g.db; }, g_exit);
  AddTokenCommands(
      app, [&] { return g.json; }, g_exit);
  app.add_subcommand("sql-api",
                     "Print the SQL that installs the SQL-level API on the "
                     "database of --db (docs/sql-api.md), for an "
                     "administrator to run where sqlq's user may not create "
                     "it")
      ->callback([&] {
        auto text = engines::SqlApiText(g.db);
        if (!text.ok()) {
          std::cerr << "sqlq sql-api: " << text.status().message() << "\n";
          g_exit = wire::ExitCode(text.status().code());
          return;
        }
        std::cout << *text;
      });
  // Listed in --help; reached only in forms BenchArgs does not take (such
  // as "sqlq --help bench").
  auto* bench =
      app.add_subcommand("bench",
                         "Measure throughput and latency: runs the program "
                         "sqlq-bench (see 'sqlq bench --help')");
  bench->allow_extras()->prefix_command();
  bench->callback([&g, bench] {
    std::vector<std::string> args = bench->remaining();
    if (!g.db.empty()) args.insert(args.begin(), {"--db", g.db});
    g_exit = RunBenchProgram(args, g.json);
  });

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    // CLI11 reports a missing command before the words it did not know, so
    // "sqlq frob" would otherwise not name the word at fault.
    std::vector<std::string> unknown = app.remaining(true);
    if (what == "A subcommand is required" && !unknown.empty()) {
      what = "unknown command '" + unknown.front() + "'";
    }
    // One line, like every other error, so scripts can log it as one.
    if (g.json) {
      nlohmann::ordered_json err = {
          {"error", {{"code", "usage"}, {"message", what}}}};
      std::cerr << err.dump(-1, ' ', false,
                            nlohmann::ordered_json::error_handler_t::replace)
                << '\n';
    } else {
      std::cerr << "sqlq: " << what << " (see 'sqlq --help')\n";
    }
    return wire::kExitUsage;
  }
  return g_exit;
}

}  // namespace sqlq::cli
