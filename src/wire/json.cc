#include "wire/json.h"

#include <fmt/format.h>

#include <ctime>
#include <iterator>

#include "sqlq/text.h"

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

void PutPayload(Json& obj, std::string_view payload) {
  if (PayloadIsText(payload)) {
    obj["payload"] = std::string(payload);
  } else {
    obj["payload_base64"] = Base64Encode(payload);
  }
}

Json QueueOptionsJson(const QueueOptions& o) {
  return {{"max_attempts", o.max_attempts},
          {"lease_ms", o.lease.count()},
          {"backoff_base_ms", o.backoff_base.count()},
          {"backoff_max_ms", o.backoff_max.count()},
          {"archive", o.archive},
          {"retention_ms", o.retention.count()},
          {"max_payload_bytes", o.max_payload_bytes}};
}

Json QueueJson(const QueueInfo& q) {
  Json j = {{"name", q.name}, {"kind", "queue"}};
  j.update(QueueOptionsJson(q.options));
  if (q.created_at != Timestamp{}) j["created_at"] = FormatTime(q.created_at);
  return j;
}

Json StatsJson(const QueueStats& s) {
  return {{"name", s.name},
          {"ready", s.ready},
          {"delayed", s.delayed},
          {"leased", s.leased},
          {"dead", s.dead},
          {"archived", s.archived},
          {"oldest_ready_age_ms", s.oldest_ready_age.count()},
          {"sends", s.sends},
          {"claims", s.claims},
          {"acks", s.acks},
          {"nacks", s.nacks},
          {"expirations", s.expirations},
          {"dead_lettered", s.dead_lettered}};
}

Json ClaimedJson(const ClaimedMessage& m) {
  Json j = {{"id", m.id},
            {"receipt", m.receipt},
            {"attempt", m.attempt},
            {"priority", m.priority}};
  PutPayload(j, m.payload);
  j["enqueued_at"] = FormatTime(m.enqueued_at);
  j["lease_expires_at"] = FormatTime(m.lease_expires_at);
  return j;
}

void AppendClaimed(std::string& out, const ClaimedMessage& m) {
  auto put = std::back_inserter(out);
  fmt::format_to(put, R"({{"id":{},"receipt":)", m.id);
  AppendJsonString(out, m.receipt);
  fmt::format_to(put, R"(,"attempt":{},"priority":{},)", m.attempt, m.priority);
  if (PayloadIsText(m.payload)) {
    out += R"("payload":)";
    AppendJsonString(out, m.payload);
  } else {
    out += R"("payload_base64":")";
    out += Base64Encode(m.payload);
    out += '"';
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
  PutPayload(j, d.payload);
  j["enqueued_at"] = FormatTime(d.enqueued_at);
  j["died_at"] = FormatTime(d.died_at);
  return j;
}

Json ArchivedJson(const ArchivedMessage& a) {
  Json j = {{"id", a.id},
            {"priority", a.priority},
            {"attempts", a.attempts},
            {"worker", a.worker}};
  PutPayload(j, a.payload);
  j["enqueued_at"] = FormatTime(a.enqueued_at);
  j["completed_at"] = FormatTime(a.completed_at);
  return j;
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
