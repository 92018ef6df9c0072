#include "server/inputs.h"

#include <fmt/format.h>

#include <charconv>
#include <optional>
#include <utility>

#include "sqlq/text.h"
#include "wire/json.h"

namespace sqlq::server {

namespace {

MessageState ReadState(const std::string& text) {
  auto s = ParseMessageState(text);
  if (!s.ok()) Throw(400, "invalid_argument", s.status().message());
  return *s;
}

// "NAME=VALUE", the header a filter asks for.
std::pair<std::string, std::string> ReadHeaderMatch(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos) {
    Throw(400, "invalid_argument",
          "header must be NAME=VALUE, the header's name and its exact value");
  }
  return {text.substr(0, eq), text.substr(eq + 1)};
}

}  // namespace

std::int64_t QueryInt(const Target& t, const std::string& key,
                      std::int64_t dflt, std::int64_t min, std::int64_t max) {
  auto it = t.query.find(key);
  if (it == t.query.end()) return dflt;
  std::int64_t v = 0;
  const std::string& s = it->second;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < min || v > max) {
    Throw(400, "invalid_argument",
          fmt::format("query parameter '{}' must be an integer in {}..{}", key,
                      min, max));
  }
  return v;
}

std::string ReadPayload(const Body& b, bool required, std::size_t max_bytes) {
  auto text = b.String("payload");
  auto b64 = b.String("payload_base64");
  if (text && b64) {
    Throw(400, "invalid_argument",
          b.prefix() + "give \"payload\" or \"payload_base64\", not both");
  }
  std::string out;
  if (b64) {
    auto decoded = Base64Decode(*b64);
    if (!decoded.ok()) {
      Throw(400, "invalid_argument",
            b.prefix() + "\"payload_base64\" is not valid base64");
    }
    out = std::move(*decoded);
  } else if (text) {
    out = std::move(*text);
  } else if (required) {
    Throw(400, "invalid_argument",
          b.prefix() + "\"payload\" or \"payload_base64\" is required");
  }
  if (out.size() > max_bytes) {
    Throw(413, "too_large",
          fmt::format("{}payload of {} bytes exceeds the server's limit of {}",
                      b.prefix(), out.size(), max_bytes));
  }
  return out;
}

Message ReadMessage(const Body& mb, std::size_t max_payload) {
  Message msg;
  const Json* value = mb.Value("payload");
  if (value != nullptr && !value->is_string()) {
    if (mb.Has("payload_base64")) {
      Throw(400, "invalid_argument",
            mb.prefix() + "give \"payload\" or \"payload_base64\", not both");
    }
    msg.payload = value->dump();
    if (msg.payload.size() > max_payload) {
      Throw(
          413, "too_large",
          fmt::format("{}payload of {} bytes exceeds the server's limit of {}",
                      mb.prefix(), msg.payload.size(), max_payload));
    }
    msg.headers[wire::kContentType] = wire::kJsonContentType;
  } else {
    msg.payload = ReadPayload(mb, true, max_payload);
  }
  if (const Json* h = mb.Object("headers")) {
    for (const auto& [key, v] : h->items()) {
      if (!v.is_string()) {
        Throw(400, "wrong_type",
              fmt::format("{}header \"{}\" must be a string", mb.prefix(),
                          key.substr(0, 80)));
      }
      auto [it, added] = msg.headers.emplace(key, v.get<std::string>());
      if (!added && it->second != v.get<std::string>()) {
        Throw(400, "invalid_argument",
              fmt::format("{}a JSON payload has content-type {}, not \"{}\"",
                          mb.prefix(), wire::kJsonContentType,
                          it->second.substr(0, 80)));
      }
    }
  }
  if (auto v = mb.Int("priority", INT32_MIN, INT32_MAX)) {
    msg.priority = static_cast<std::int32_t>(*v);
  }
  if (auto v = mb.Millis("delay_ms", kMaxDelay.count())) msg.delay = *v;
  if (auto v = mb.String("run_at")) {
    if (mb.Has("delay_ms")) {
      Throw(400, "invalid_argument",
            mb.prefix() + "give \"delay_ms\" or \"run_at\", not both");
    }
    auto t = wire::ParseTime(*v);
    if (!t.ok()) {
      Throw(400, "invalid_argument",
            mb.prefix() + "\"run_at\": " + t.status().message());
    }
    msg.run_at = *t;
  }
  if (auto v = mb.String("dedup")) msg.dedup_key = *v;
  if (auto v = mb.String("group")) msg.group = *v;
  if (auto v = mb.String("kind")) msg.kind = *v;
  if (auto v = mb.Millis("timeout_ms", kMaxLease.count())) msg.timeout = *v;
  if (auto v = mb.Millis("expire_after_ms", kMaxDelay.count())) {
    msg.expire_after = *v;
  }
  if (auto v = mb.String("on_expiry")) {
    auto action = ParseExpiryAction(*v);
    if (!action.ok()) {
      Throw(400, "invalid_argument",
            mb.prefix() + "\"on_expiry\": " + action.status().message());
    }
    msg.on_expiry = *action;
  }
  // The job's own retry policy (the library checks the ranges).
  if (auto v = mb.Int("max_attempts", INT32_MIN, INT32_MAX)) {
    msg.max_attempts = static_cast<int>(*v);
  }
  if (auto v = mb.Millis("backoff_ms", kMaxDelay.count())) {
    msg.backoff_base = *v;
  }
  if (auto v = mb.Millis("backoff_max_ms", kMaxDelay.count())) {
    msg.backoff_max = *v;
  }
  // Dependencies: ids, and indexes of earlier messages of the batch (the
  // library checks the rest).
  auto ints = [&](const char* key, std::int64_t min) {
    std::vector<std::int64_t> out;
    const Json* a = mb.Array(key);
    if (a == nullptr) return out;
    if (a->size() > kMaxDependencies) {
      Throw(400, "invalid_argument",
            fmt::format("{}\"{}\" lists {} messages; at most {}", mb.prefix(),
                        key, a->size(), kMaxDependencies));
    }
    for (const Json& v : *a) {
      if (!v.is_number_integer() || v.get<std::int64_t>() < min) {
        Throw(400, "wrong_type",
              fmt::format("{}\"{}\" must list {}", mb.prefix(), key,
                          min == 0 ? "indexes (integers from 0)"
                                   : "message ids (positive integers)"));
      }
      out.push_back(v.get<std::int64_t>());
    }
    return out;
  };
  msg.depends_on = ints("depends_on", 1);
  for (std::int64_t k : ints("depends_on_batch", 0)) {
    msg.depends_on_batch.push_back(static_cast<std::size_t>(k));
  }
  if (auto v = mb.String("if_dependency_dies")) {
    auto policy = ParseIfDependencyDies(*v);
    if (!policy.ok()) {
      Throw(
          400, "invalid_argument",
          mb.prefix() + "\"if_dependency_dies\": " + policy.status().message());
    }
    msg.if_dependency_dies = *policy;
  }
  return msg;
}

Timestamp ReadTime(const std::string& what, const std::string& text) {
  auto t = wire::ParseTime(text);
  if (!t.ok()) {
    Throw(400, "invalid_argument", what + ": " + t.status().message());
  }
  return *t;
}

MessageFilter FilterFromQuery(const Target& t) {
  MessageFilter f;
  auto get = [&](const char* key) -> const std::string* {
    auto it = t.query.find(key);
    return it == t.query.end() ? nullptr : &it->second;
  };
  if (auto* v = get("state")) f.state = ReadState(*v);
  if (get("min_priority")) {
    f.min_priority = static_cast<std::int32_t>(
        QueryInt(t, "min_priority", 0, INT32_MIN, INT32_MAX));
  }
  if (get("max_priority")) {
    f.max_priority = static_cast<std::int32_t>(
        QueryInt(t, "max_priority", 0, INT32_MIN, INT32_MAX));
  }
  if (auto* v = get("dedup")) f.dedup_key = *v;
  if (auto* v = get("group")) f.group = *v;
  if (auto* v = get("kind")) f.kind = *v;
  if (auto* v = get("header")) f.header = ReadHeaderMatch(*v);
  if (auto* v = get("payload_prefix")) f.payload_prefix = *v;
  if (auto* v = get("enqueued_after")) {
    f.enqueued_after = ReadTime("enqueued_after", *v);
  }
  if (auto* v = get("enqueued_before")) {
    f.enqueued_before = ReadTime("enqueued_before", *v);
  }
  return f;
}

namespace {

// The same filter as a JSON object: {"state", "min_priority",
// "max_priority", "dedup", "group", "kind", "header": {"name", "value"},
// "payload_prefix",
// "enqueued_after", "enqueued_before"}.
MessageFilter FilterFromJson(const Json& obj) {
  Body b(obj,
         {"state", "min_priority", "max_priority", "dedup", "group", "kind",
          "header", "payload_prefix", "enqueued_after", "enqueued_before"},
         "filter");
  MessageFilter f;
  if (auto v = b.String("state")) f.state = ReadState(*v);
  if (auto v = b.Int("min_priority", INT32_MIN, INT32_MAX)) {
    f.min_priority = static_cast<std::int32_t>(*v);
  }
  if (auto v = b.Int("max_priority", INT32_MIN, INT32_MAX)) {
    f.max_priority = static_cast<std::int32_t>(*v);
  }
  if (auto v = b.String("dedup")) f.dedup_key = *v;
  if (auto v = b.String("group")) f.group = *v;
  if (auto v = b.String("kind")) f.kind = *v;
  if (auto v = b.String("payload_prefix")) f.payload_prefix = *v;
  if (const Json* h = b.Object("header")) {
    Body hb(*h, {"name", "value"}, "filter.header");
    auto name = hb.String("name");
    auto value = hb.String("value");
    if (!name || !value) {
      Throw(400, "invalid_argument",
            "filter.header needs \"name\" and \"value\"");
    }
    f.header = std::pair(*name, *value);
  }
  if (auto v = b.String("enqueued_after")) {
    f.enqueued_after = ReadTime("enqueued_after", *v);
  }
  if (auto v = b.String("enqueued_before")) {
    f.enqueued_before = ReadTime("enqueued_before", *v);
  }
  return f;
}

}  // namespace

MessageSelection SelectionFromBody(const Body& b) {
  const Json* ids = b.Array("ids");
  const Json* filter = b.Object("filter");
  if ((ids == nullptr) == (filter == nullptr)) {
    Throw(400, "invalid_argument",
          "give either \"ids\" (an array of message ids) or \"filter\" "
          "(an object; {} for every message in the queue)");
  }
  MessageSelection sel;
  if (ids != nullptr) {
    if (ids->empty()) {
      Throw(400, "invalid_argument", "\"ids\" must not be empty");
    }
    for (const Json& id : *ids) {
      if (!id.is_number_integer()) b.Wrong("ids", "an array of integers");
      sel.ids.push_back(id.get<std::int64_t>());
    }
    // Where the ids are: the queue (by default), the dead letters or the
    // archive.
    if (auto state = b.String("state")) sel.filter.state = ReadState(*state);
  } else {
    if (b.String("state")) {
      Throw(400, "invalid_argument",
            "\"state\" goes with \"ids\"; a filter has its own");
    }
    sel.filter = FilterFromJson(*filter);
  }
  return sel;
}

void ReadQueueOptions(const Body& b, QueueOptions& o) {
  if (auto v = b.Int("max_attempts", 1, 1000000)) {
    o.max_attempts = static_cast<int>(*v);
  }
  if (auto v = b.Millis("lease_ms", kMaxLeaseMs)) o.lease = *v;
  if (auto v = b.Millis("backoff_base_ms", kMaxDelayMs)) o.backoff_base = *v;
  if (auto v = b.Millis("backoff_max_ms", kMaxDelayMs)) o.backoff_max = *v;
  if (auto v = b.Bool("archive")) o.archive = *v;
  if (auto v = b.Millis("retention_ms", kMaxRetentionMs)) o.retention = *v;
  if (auto v = b.Int("max_payload_bytes", 1, 64 << 20)) {
    o.max_payload_bytes = static_cast<std::size_t>(*v);
  }
  if (auto v = b.Millis("dead_retention_ms", kMaxRetentionMs)) {
    o.dead_retention = *v;
  }
  if (auto v = b.Millis("unique_for_ms", kMaxRetentionMs)) o.unique_for = *v;
  if (auto v = b.String("groups")) {
    auto mode = ParseGroupMode(*v);
    if (!mode.ok()) Throw(400, "invalid_argument", mode.status().message());
    o.groups = *mode;
  }
  // Limits: a number, or null to lift the limit.
  auto limit = [&](const char* key, int max, std::optional<int>& field) {
    const Json* v = b.Value(key);
    if (v == nullptr) return;
    if (v->is_null()) {
      field.reset();
      return;
    }
    field = static_cast<int>(*b.Int(key, 1, max));
  };
  limit("max_leased", kMaxLeasedLimit, o.max_leased);
  limit("rate_burst", kMaxRateBurst, o.rate_burst);
  limit("group_limit", kMaxGroupLimit, o.group_limit);
  if (const Json* v = b.Value("rate_limit")) {
    if (v->is_null()) {
      o.rate_limit.reset();
      o.rate_burst.reset();
    } else {
      if (!v->is_number()) b.Wrong("rate_limit", "a number or null");
      const double rate = v->get<double>();
      if (!(rate >= 0.001 && rate <= kMaxRateLimit)) {
        Throw(400, "invalid_argument",
              fmt::format("\"rate_limit\" must be in 0.001..{} claims per "
                          "second, or null for none",
                          kMaxRateLimit));
      }
      o.rate_limit = rate;
    }
  }
  // A queue's name, or null for none.
  if (const Json* v = b.Value("dead_letter_queue")) {
    if (v->is_null()) {
      o.dead_letter_queue.clear();
    } else {
      if (!v->is_string()) b.Wrong("dead_letter_queue", "a string or null");
      o.dead_letter_queue = v->get<std::string>();
    }
  }
  // All of the queue's labels, as given ({name: string}).
  if (const Json* v = b.Value("labels")) {
    if (!v->is_object()) b.Wrong("labels", "an object of strings");
    o.labels.clear();
    for (const auto& [key, text] : v->items()) {
      if (!text.is_string()) b.Wrong("labels", "an object of strings");
      o.labels[key] = text.get<std::string>();
    }
  }
}

}  // namespace sqlq::server
