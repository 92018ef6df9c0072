#include "wire/json.h"

#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <iterator>
#include <optional>

#include "sqlq/text.h"
#include "wire/json_parse.h"

namespace sqlq::wire {

namespace {

// Appends `s` (valid UTF-8) as a JSON string, escaped as nlohmann::json
// escapes it: the two-character escapes where JSON has them, \u00XX for the
// other control characters, everything else as is.
void AppendJsonString(std::string& out, std::string_view s) {
  out += '"';
  std::size_t run = 0;  // start of the bytes not yet copied
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out.append(s, run, i - run);
    run = i + 1;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        fmt::format_to(std::back_inserter(out), "\\u{:04x}", c);
    }
  }
  out.append(s, run, s.size() - run);
  out += '"';
}

}  // namespace

std::string FormatTime(Timestamp t) {
  auto us = t.time_since_epoch().count();
  std::time_t secs = static_cast<std::time_t>(us / 1000000);
  long frac = static_cast<long>(us % 1000000);
  if (frac < 0) {
    frac += 1000000;
    --secs;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec, frac);
}

Result<Timestamp> ParseTime(std::string_view text) {
  auto bad = [&]() {
    return Status::InvalidArgument(fmt::format(
        "'{}' is not an RFC 3339 time such as 2026-11-22T10:00:00Z or "
        "2026-11-22T11:00:00.5+01:00",
        text.substr(0, 64)));
  };
  std::size_t i = 0;
  auto digits = [&](int n) -> std::optional<int> {
    int v = 0;
    for (int k = 0; k < n; ++k, ++i) {
      if (i >= text.size() || text[i] < '0' || text[i] > '9') {
        return std::nullopt;
      }
      v = v * 10 + (text[i] - '0');
    }
    return v;
  };
  auto expect = [&](std::string_view any) {
    if (i < text.size() && any.find(text[i]) != std::string_view::npos) {
      ++i;
      return true;
    }
    return false;
  };
  auto year = digits(4);
  if (!year || !expect("-")) return bad();
  auto month = digits(2);
  if (!month || !expect("-")) return bad();
  auto day = digits(2);
  if (!day || !expect("Tt ")) return bad();
  auto hour = digits(2);
  if (!hour || !expect(":")) return bad();
  auto minute = digits(2);
  if (!minute || !expect(":")) return bad();
  auto second = digits(2);
  if (!second) return bad();
  std::int64_t micros = 0;
  if (expect(".")) {
    int n = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      if (n < 6) micros = micros * 10 + (text[i] - '0');
      ++n;
      ++i;
    }
    if (n == 0) return bad();
    for (; n < 6; ++n) micros *= 10;
  }
  std::int64_t offset_s = 0;
  if (!expect("Zz")) {
    if (i >= text.size() || (text[i] != '+' && text[i] != '-')) return bad();
    const int sign = text[i] == '-' ? -1 : 1;
    ++i;
    auto oh = digits(2);
    if (!oh || !expect(":")) return bad();
    auto om = digits(2);
    if (!om || *oh > 23 || *om > 59) return bad();
    offset_s = sign * (*oh * 3600 + *om * 60);
  }
  if (i != text.size()) return bad();
  using namespace std::chrono;
  const year_month_day ymd{std::chrono::year(*year),
                           std::chrono::month(static_cast<unsigned>(*month)),
                           std::chrono::day(static_cast<unsigned>(*day))};
  if (!ymd.ok() || *hour > 23 || *minute > 59 || *second > 60) return bad();
  // A leap second names a moment the clocks sqlq reads never show (they
  // smear or repeat it), and ":60" at any other minute names none at all:
  // refused rather than read as the next minute.
  if (*second == 60) {
    return Status::InvalidArgument(fmt::format(
        "'{}' has second 60 (a leap second), which sqlq does not accept: "
        "give :59 or the next minute's :00",
        text.substr(0, 64)));
  }
  const auto secs = sys_days(ymd).time_since_epoch() + hours(*hour) +
                    minutes(*minute) + seconds(*second) - seconds(offset_s);
  return Timestamp(duration_cast<microseconds>(secs) + microseconds(micros));
}

bool IsJsonPayload(const Headers& headers, std::string_view payload) {
  auto it = headers.find(kContentType);
  return it != headers.end() && it->second == kJsonContentType &&
         Json::accept(payload);
}

Json ErrorsJson(const std::vector<AttemptError>& errors) {
  Json out = Json::array();
  for (const AttemptError& e : errors) {
    out.push_back(
        {{"attempt", e.attempt}, {"at", FormatTime(e.at)}, {"error", e.error}});
  }
  return out;
}

void PutPayload(Json& obj, std::string_view payload, const Headers& headers) {
  // Parsed in linear time: a sender chooses the payload, and any reader
  // pays for it. Repeated keys stay, so the value goes out as it was sent,
  // as in a claim's reply (AppendClaimed).
  auto type = headers.find(kContentType);
  Json value;
  if (type != headers.end() && type->second == kJsonContentType &&
      !ParseJson(payload, {.keep_duplicates = true}, "the payload", value)) {
    obj["payload"] = std::move(value);
  } else {
    PutPayload(obj, payload);
  }
  if (!headers.empty()) obj["headers"] = headers;
}

void PutPayload(Json& obj, std::string_view payload) {
  if (PayloadIsText(payload)) {
    obj["payload"] = std::string(payload);
  } else {
    obj["payload_base64"] = Base64Encode(payload);
  }
}

namespace {
// A limit: its value, or null for none.
Json LimitJson(const std::optional<int>& v) {
  return v ? Json(*v) : Json(nullptr);
}
}  // namespace

Json QueueOptionsJson(const QueueOptions& o) {
  return {
      {"max_attempts", o.max_attempts},
      {"lease_ms", o.lease.count()},
      {"backoff_base_ms", o.backoff_base.count()},
      {"backoff_max_ms", o.backoff_max.count()},
      {"archive", o.archive},
      {"retention_ms", o.retention.count()},
      {"max_payload_bytes", o.max_payload_bytes},
      {"dead_retention_ms", o.dead_retention.count()},
      {"unique_for_ms", o.unique_for.count()},
      {"groups", GroupModeName(o.groups)},
      {"max_leased", LimitJson(o.max_leased)},
      {"rate_limit", o.rate_limit ? Json(*o.rate_limit) : Json(nullptr)},
      {"rate_burst", LimitJson(o.rate_burst)},
      {"group_limit", LimitJson(o.group_limit)},
      {"dead_letter_queue",
       o.dead_letter_queue.empty() ? Json(nullptr) : Json(o.dead_letter_queue)},
      {"labels", o.labels}};
}

Json QueueJson(const QueueInfo& q) {
  Json j = {{"name", q.name}, {"kind", "queue"}};
  j.update(QueueOptionsJson(q.options));
  if (q.created_at != Timestamp{}) j["created_at"] = FormatTime(q.created_at);
  j["paused"] = q.paused;
  return j;
}

Json StatsJson(const QueueStats& s) {
  return {{"name", s.name},
          {"ready", s.ready},
          {"delayed", s.delayed},
          {"leased", s.leased},
          {"waiting", s.waiting},
          {"dead", s.dead},
          {"archived", s.archived},
          {"oldest_ready_age_ms", s.oldest_ready_age.count()},
          {"sends", s.sends},
          {"claims", s.claims},
          {"acks", s.acks},
          {"nacks", s.nacks},
          {"expirations", s.expirations},
          {"dead_lettered", s.dead_lettered},
          {"expired", s.expired},
          {"paused", s.paused}};
}

Json BatchRefJson(const BatchRef& b) {
  Json j = {{"id", b.id}};
  if (b.callback) j["callback"] = true;
  if (b.counts) {
    j["total"] = b.counts->total;
    j["completed"] = b.counts->completed;
    j["dead"] = b.counts->dead;
    j["cancelled"] = b.counts->cancelled;
  }
  return j;
}

Json ParentsJson(const std::vector<ParentRef>& parents) {
  Json out = Json::array();
  for (const ParentRef& p : parents) {
    Json j = Json::object();
    if (!p.queue.empty()) j["queue"] = p.queue;
    j["id"] = p.id;
    out.push_back(std::move(j));
  }
  return out;
}

Json BatchJson(const BatchStatus& b) {
  Json j = {{"id", b.id},
            {"total", b.counts.total},
            {"completed", b.counts.completed},
            {"dead", b.counts.dead},
            {"cancelled", b.counts.cancelled},
            {"pending", b.counts.pending()},
            {"done", b.done},
            {"callback_queue", b.callback_queue},
            {"callback_id", b.callback_id},
            {"queues", b.queues},
            {"created_at", FormatTime(b.created_at)}};
  if (b.done_at) j["done_at"] = FormatTime(*b.done_at);
  if (b.cancelled_at) j["cancelled_at"] = FormatTime(*b.cancelled_at);
  if (b.expires_at) j["expires_at"] = FormatTime(*b.expires_at);
  return j;
}

Json ClaimedJson(const ClaimedMessage& m) {
  Json j = {{"id", m.id},
            {"receipt", m.receipt},
            {"attempt", m.attempt},
            {"priority", m.priority}};
  PutPayload(j, m.payload, m.headers);
  if (!m.group.empty()) j["group"] = m.group;
  if (!m.kind.empty()) j["kind"] = m.kind;
  if (m.timeout) j["timeout_ms"] = m.timeout->count();
  if (m.expire_after) {
    j["expires_at"] = FormatTime(m.enqueued_at + *m.expire_after);
  }
  if (m.on_expiry != ExpiryAction::kDeadLetter) {
    j["on_expiry"] = ExpiryActionName(m.on_expiry);
  }
  if (m.max_attempts) j["max_attempts"] = *m.max_attempts;
  if (m.batch) j["batch"] = BatchRefJson(*m.batch);
  if (!m.parents.empty()) j["parents"] = ParentsJson(m.parents);
  j["enqueued_at"] = FormatTime(m.enqueued_at);
  j["lease_expires_at"] = FormatTime(m.lease_expires_at);
  return j;
}

void AppendClaimed(std::string& out, const ClaimedMessage& m) {
  auto put = std::back_inserter(out);
  fmt::format_to(put, R"({{"id":{},"receipt":)", m.id);
  AppendJsonString(out, m.receipt);
  fmt::format_to(put, R"(,"attempt":{},"priority":{},)", m.attempt, m.priority);
  if (!m.headers.empty() && IsJsonPayload(m.headers, m.payload)) {
    // Checked to be JSON: written as it is, a value in the reply.
    out += R"("payload":)";
    out += m.payload;
  } else if (PayloadIsText(m.payload)) {
    out += R"("payload":)";
    AppendJsonString(out, m.payload);
  } else {
    out += R"("payload_base64":")";
    out += Base64Encode(m.payload);
    out += '"';
  }
  if (!m.headers.empty()) {
    out += R"(,"headers":{)";
    bool first = true;
    for (const auto& [key, value] : m.headers) {
      if (!first) out += ',';
      first = false;
      AppendJsonString(out, key);
      out += ':';
      AppendJsonString(out, value);
    }
    out += '}';
  }
  if (!m.group.empty()) {
    out += R"(,"group":)";
    AppendJsonString(out, m.group);
  }
  if (!m.kind.empty()) {
    out += R"(,"kind":)";
    AppendJsonString(out, m.kind);
  }
  if (m.timeout) fmt::format_to(put, R"(,"timeout_ms":{})", m.timeout->count());
  if (m.expire_after) {
    out += R"(,"expires_at":")";
    out += FormatTime(m.enqueued_at + *m.expire_after);
    out += '"';
  }
  if (m.on_expiry != ExpiryAction::kDeadLetter) {
    out += R"(,"on_expiry":")";
    out += ExpiryActionName(m.on_expiry);
    out += '"';
  }
  if (m.max_attempts) {
    fmt::format_to(put, R"(,"max_attempts":{})", *m.max_attempts);
  }
  if (m.batch) {
    out += R"(,"batch":)";
    out += BatchRefJson(*m.batch).dump();
  }
  if (!m.parents.empty()) {
    out += R"(,"parents":)";
    out += ParentsJson(m.parents).dump();
  }
  out += R"(,"enqueued_at":")";
  out += FormatTime(m.enqueued_at);
  out += R"(","lease_expires_at":")";
  out += FormatTime(m.lease_expires_at);
  out += "\"}";
}

Json DeadLetterJson(const DeadLetter& d) {
  Json j = {{"id", d.id},
            {"priority", d.priority},
            {"attempts", d.attempts},
            {"last_error", d.last_error}};
  PutPayload(j, d.payload, d.headers);
  if (!d.kind.empty()) j["kind"] = d.kind;
  j["errors"] = ErrorsJson(d.errors);
  j["enqueued_at"] = FormatTime(d.enqueued_at);
  j["died_at"] = FormatTime(d.died_at);
  return j;
}

Json ArchivedJson(const ArchivedMessage& a) {
  Json j = {{"id", a.id},
            {"priority", a.priority},
            {"attempts", a.attempts},
            {"worker", a.worker}};
  PutPayload(j, a.payload, a.headers);
  if (!a.kind.empty()) j["kind"] = a.kind;
  j["errors"] = ErrorsJson(a.errors);
  j["enqueued_at"] = FormatTime(a.enqueued_at);
  j["completed_at"] = FormatTime(a.completed_at);
  return j;
}

Json MessageLinksJson(const MessageLinks& l) {
  Json parents = Json::array();
  for (const MessageLink& p : l.parents) {
    parents.push_back({{"queue", p.queue}, {"id", p.id}, {"dead", p.dead}});
  }
  Json dependents = Json::array();
  for (const MessageLink& d : l.dependents) {
    dependents.push_back({{"queue", d.queue}, {"id", d.id}});
  }
  return {{"parents", std::move(parents)},
          {"dependents", std::move(dependents)},
          {"more_dependents", l.more_dependents}};
}

Json MessageInfoJson(const MessageInfo& m) {
  Json j = {{"id", m.id},
            {"state", std::string(MessageStateName(m.state))},
            {"priority", m.priority},
            {"attempts", m.attempts}};
  PutPayload(j, m.payload, m.headers);
  if (!m.dedup_key.empty()) j["dedup"] = m.dedup_key;
  if (!m.group.empty()) j["group"] = m.group;
  if (!m.kind.empty()) j["kind"] = m.kind;
  if (m.timeout) j["timeout_ms"] = m.timeout->count();
  if (m.expire_after) {
    j["expire_after_ms"] = m.expire_after->count();
    j["expires_at"] = FormatTime(m.enqueued_at + *m.expire_after);
  }
  if (m.on_expiry != ExpiryAction::kDeadLetter) {
    j["on_expiry"] = ExpiryActionName(m.on_expiry);
  }
  if (m.max_attempts) j["max_attempts"] = *m.max_attempts;
  if (m.backoff_base) j["backoff_ms"] = m.backoff_base->count();
  if (m.backoff_max) j["backoff_max_ms"] = m.backoff_max->count();
  if (m.snoozes > 0) j["snoozes"] = m.snoozes;
  if (m.batch) j["batch"] = BatchRefJson(*m.batch);
  if (!m.parents.empty()) j["parents"] = ParentsJson(m.parents);
  j["enqueued_at"] = FormatTime(m.enqueued_at);
  if (m.ready_at) j["ready_at"] = FormatTime(*m.ready_at);
  if (m.lease_expires_at) {
    j["lease_expires_at"] = FormatTime(*m.lease_expires_at);
  }
  if (!m.worker.empty()) j["worker"] = m.worker;
  if (!m.last_error.empty()) j["last_error"] = m.last_error;
  j["errors"] = ErrorsJson(m.errors);
  if (m.died_at) j["died_at"] = FormatTime(*m.died_at);
  if (m.completed_at) j["completed_at"] = FormatTime(*m.completed_at);
  if (m.state == MessageState::kWaiting) {
    j["waits_for"] = m.waits_for;
    j["waits_for_dead"] = m.waits_for_dead;
  }
  return j;
}

Json TopicJson(const TopicInfo& t) {
  return {{"name", t.name},
          {"kind", "topic"},
          {"created_at", FormatTime(t.created_at)},
          {"subscriptions", t.subscriptions}};
}

Json SubscriptionJson(const Subscription& s) {
  Json filter = Json::object();
  for (const auto& [k, v] : s.filter) filter[k] = v;
  return {{"topic", s.topic},
          {"queue", s.queue},
          {"filter", std::move(filter)},
          {"subscribed_at", FormatTime(s.subscribed_at)}};
}

Json RingJson(std::string_view name, const RingOptions& o) {
  return {{"name", name},
          {"kind", "ring"},
          {"capacity", o.capacity},
          {"max_payload_bytes", o.max_payload_bytes}};
}

Json RingEntryJson(const RingEntry& e) {
  Json j = {{"seq", e.seq}, {"group", e.group}};
  PutPayload(j, e.payload);
  j["pushed_at"] = FormatTime(e.pushed_at);
  return j;
}

Json RingGroupJson(const RingGroup& g) {
  return {{"group", g.group}, {"entries", g.entries}};
}

Json RingStatsJson(const RingStats& s) {
  return {{"name", s.name},
          {"capacity", s.capacity},
          {"groups", s.groups},
          {"entries", s.entries},
          {"pushes", s.pushes}};
}

Json WorkerJson(const WorkerInfo& w) {
  const WorkerReport& r = w.report;
  Json jobs = Json::array();
  for (const WorkerJob& j : r.jobs) {
    jobs.push_back(
        {{"queue", j.queue}, {"id", j.id}, {"since", FormatTime(j.since)}});
  }
  return {{"id", r.id},
          {"name", r.name},
          {"host", r.host},
          {"pid", r.pid},
          {"queues", r.queues},
          {"kinds", r.kinds},
          {"concurrency", r.concurrency},
          {"jobs", std::move(jobs)},
          {"started_at", FormatTime(r.started_at)},
          {"last_seen", FormatTime(w.last_seen)},
          {"expires_at", FormatTime(w.expires_at)},
          {"ttl_ms", r.ttl.count()}};
}

Json ScheduleJson(const ScheduleInfo& s) {
  const ScheduleOptions& o = s.options;
  auto time = [](const std::optional<Timestamp>& t) {
    return t ? Json(FormatTime(*t)) : Json(nullptr);
  };
  Json j = {{"name", s.name},
            {"cron", o.cron},
            {"time_zone", o.time_zone},
            {"queue", o.queue}};
  PutPayload(j, o.message.payload, o.message.headers);
  j["priority"] = o.message.priority;
  j["headers"] = o.message.headers;
  j["group"] = o.message.group;
  if (!o.message.kind.empty()) j["kind"] = o.message.kind;
  if (o.message.timeout) j["timeout_ms"] = o.message.timeout->count();
  if (o.message.expire_after) {
    j["expire_after_ms"] = o.message.expire_after->count();
  }
  if (o.message.on_expiry != ExpiryAction::kDeadLetter) {
    j["on_expiry"] = ExpiryActionName(o.message.on_expiry);
  }
  j["catch_up"] = o.catch_up;
  j["paused"] = s.paused;
  j["next_tick"] = time(s.next_tick);
  j["last_tick"] = time(s.last_tick);
  j["sent"] = s.sent;
  j["skipped"] = s.skipped;
  j["last_error"] = s.last_error;
  j["created_at"] = FormatTime(s.created_at);
  return j;
}

Json RotationJson(std::string_view name, const RotationOptions& o) {
  return {{"name", name},
          {"kind", "rotation"},
          {"max_failures", o.max_failures},
          {"max_payload_bytes", o.max_payload_bytes}};
}

Json RotationItemJson(const RotationItem& i) {
  Json j = {{"key", i.key}};
  PutPayload(j, i.payload);
  j["served"] = i.served;
  j["failures"] = i.failures;
  j["parked"] = i.parked;
  return j;
}

Json RotationStatsJson(const RotationStats& s) {
  return {{"name", s.name},
          {"max_failures", s.max_failures},
          {"items", s.items},
          {"parked", s.parked},
          {"serves", s.serves}};
}

Json ErrorJson(const Status& s) {
  return {{"code", std::string(CodeName(s.code()))}, {"message", s.message()}};
}

}  // namespace sqlq::wire
