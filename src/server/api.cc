#include "server/api.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "server/claim_reply.h"
#include "server/dashboard.h"
#include "server/target.h"
#include "sqlq/text.h"
#include "wire/json.h"
#include "wire/json_parse.h"

namespace sqlq::server {

// docs/openapi.json, compiled in by cmake/embed_text.cmake.
extern const std::string_view kOpenApiJson;

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void Throw(unsigned status, std::string code,
                        std::string message) {
  throw HttpError{status, std::move(code), std::move(message)};
}

// Throws the error reply of a failed library call.
void Check(const Status &s) {
  if (!s.ok()) {
    throw HttpError{HttpStatusFor(s.code()), std::string(CodeName(s.code())),
                    s.message()};
  }
}
template <typename T>
T Take(Result<T> r) {
  Check(r.status());
  return std::move(*r);
}

std::int64_t QueryInt(const Target &t, const std::string &key,
                      std::int64_t dflt, std::int64_t min, std::int64_t max) {
  auto it = t.query.find(key);
  if (it == t.query.end()) return dflt;
  std::int64_t v = 0;
  const std::string &s = it->second;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < min || v > max) {
    Throw(400, "invalid_argument",
          fmt::format("query parameter '{}' must be an integer in {}..{}", key,
                      min, max));
  }
  return v;
}

// A JSON request body: an object whose fields are all known, each read with
// its type checked. An empty body is an empty object.
class Body {
 public:
  Body(const std::string &text, std::initializer_list<const char *> allowed)
      : doc_(owned_) {
    if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
      owned_ = Json::object();
    } else {
      owned_ = ParseBody(text);
    }
    Init(doc_, allowed, "the request body");
  }
  // A part of another body (one message of a batch), read in place: a copy
  // per message was a tenth of a batched send's server time.
  Body(const Json &obj, std::initializer_list<const char *> allowed,
       const std::string &what)
      : doc_(obj) {
    Init(doc_, allowed, what);
  }
  Body(const Body &) = delete;

  bool Has(const char *key) const { return doc_.contains(key); }

  std::optional<std::int64_t> Int(const char *key, std::int64_t min,
                                  std::int64_t max) const {
    if (!Has(key)) return std::nullopt;
    const Json &v = doc_[key];
    if (!v.is_number_integer()) Wrong(key, "an integer");
    std::int64_t x =
        v.is_number_unsigned()
            ? (v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)
                   ? INT64_MAX
                   : static_cast<std::int64_t>(v.get<std::uint64_t>()))
            : v.get<std::int64_t>();
    if (x < min || x > max) {
      Throw(400, "invalid_argument",
            fmt::format("{}\"{}\" must be in {}..{}", prefix_, key, min, max));
    }
    return x;
  }
  std::optional<Duration> Millis(const char *key, std::int64_t max) const {
    auto v = Int(key, 0, max);
    if (!v) return std::nullopt;
    return Duration(*v);
  }
  std::optional<bool> Bool(const char *key) const {
    if (!Has(key)) return std::nullopt;
    if (!doc_[key].is_boolean()) Wrong(key, "true or false");
    return doc_[key].get<bool>();
  }
  std::optional<std::string> String(const char *key) const {
    if (!Has(key)) return std::nullopt;
    if (!doc_[key].is_string()) Wrong(key, "a string");
    return doc_[key].get<std::string>();
  }
  // The value of `key` as given, any JSON type; nullptr when absent.
  const Json *Value(const char *key) const {
    return Has(key) ? &doc_[key] : nullptr;
  }
  const Json *Object(const char *key) const {
    if (!Has(key)) return nullptr;
    if (!doc_[key].is_object()) Wrong(key, "an object");
    return &doc_[key];
  }
  const Json *Array(const char *key) const {
    if (!Has(key)) return nullptr;
    if (!doc_[key].is_array()) Wrong(key, "an array");
    return &doc_[key];
  }
  [[noreturn]] void Wrong(const char *key, const char *type) const {
    Throw(400, "wrong_type",
          fmt::format("{}\"{}\" must be {}", prefix_, key, type));
  }
  const std::string &prefix() const { return prefix_; }

 private:
  void Init(const Json &doc, std::initializer_list<const char *> allowed,
            const std::string &what) {
    if (!doc.is_object()) {
      Throw(400, "wrong_type", what + " must be a JSON object");
    }
    if (what != "the request body") prefix_ = what + ": ";
    for (const auto &[key, value] : doc.items()) {
      bool known = false;
      for (const char *a : allowed) known = known || key == a;
      if (!known) {
        Throw(400, "unknown_field",
              fmt::format("{}unknown field \"{}\"", prefix_, key));
      }
    }
  }
  Json owned_;
  const Json &doc_;
  std::string prefix_;
};

// The payload of a message, ring entry or rotation item: "payload" (text) or
// "payload_base64" (bytes), at most one; `required` when one must be given.
std::string ReadPayload(const Body &b, bool required, std::size_t max_bytes) {
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

// One message of a send: "payload" (a string, or any other JSON value,
// stored as its JSON text and marked with the JSON content type) or
// "payload_base64", "priority", "delay_ms" or "run_at" (RFC 3339),
// "dedup", "group", and "headers" ({name: string}).
Message ReadMessage(const Body &mb, std::size_t max_payload) {
  Message msg;
  const Json *value = mb.Value("payload");
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
  if (const Json *h = mb.Object("headers")) {
    for (const auto &[key, v] : h->items()) {
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
  return msg;
}

// A time given as RFC 3339 in `what`.
Timestamp ReadTime(const std::string &what, const std::string &text) {
  auto t = wire::ParseTime(text);
  if (!t.ok()) {
    Throw(400, "invalid_argument", what + ": " + t.status().message());
  }
  return *t;
}

MessageState ReadState(const std::string &text) {
  auto s = ParseMessageState(text);
  if (!s.ok()) Throw(400, "invalid_argument", s.status().message());
  return *s;
}

// "NAME=VALUE", the header a filter asks for.
std::pair<std::string, std::string> ReadHeaderMatch(const std::string &text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos) {
    Throw(400, "invalid_argument",
          "header must be NAME=VALUE, the header's name and its exact value");
  }
  return {text.substr(0, eq), text.substr(eq + 1)};
}

// A listing's filter from the query: state, min_priority, max_priority,
// dedup, group, header (NAME=VALUE), payload_prefix (text), enqueued_after,
// enqueued_before.
MessageFilter FilterFromQuery(const Target &t) {
  MessageFilter f;
  auto get = [&](const char *key) -> const std::string * {
    auto it = t.query.find(key);
    return it == t.query.end() ? nullptr : &it->second;
  };
  if (auto *v = get("state")) f.state = ReadState(*v);
  if (get("min_priority")) {
    f.min_priority = static_cast<std::int32_t>(
        QueryInt(t, "min_priority", 0, INT32_MIN, INT32_MAX));
  }
  if (get("max_priority")) {
    f.max_priority = static_cast<std::int32_t>(
        QueryInt(t, "max_priority", 0, INT32_MIN, INT32_MAX));
  }
  if (auto *v = get("dedup")) f.dedup_key = *v;
  if (auto *v = get("group")) f.group = *v;
  if (auto *v = get("header")) f.header = ReadHeaderMatch(*v);
  if (auto *v = get("payload_prefix")) f.payload_prefix = *v;
  if (auto *v = get("enqueued_after")) {
    f.enqueued_after = ReadTime("enqueued_after", *v);
  }
  if (auto *v = get("enqueued_before")) {
    f.enqueued_before = ReadTime("enqueued_before", *v);
  }
  return f;
}

// The same filter as a JSON object: {"state", "min_priority",
// "max_priority", "dedup", "group", "header": {"name", "value"},
// "payload_prefix",
// "enqueued_after", "enqueued_before"}.
MessageFilter FilterFromJson(const Json &obj) {
  Body b(obj,
         {"state", "min_priority", "max_priority", "dedup", "group", "header",
          "payload_prefix", "enqueued_after", "enqueued_before"},
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
  if (auto v = b.String("payload_prefix")) f.payload_prefix = *v;
  if (const Json *h = b.Object("header")) {
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

// The messages a bulk change takes: {"ids": [...]} or {"filter": {...}}
// ({} selects every message in the queue), one of the two.
MessageSelection SelectionFromBody(const Body &b) {
  const Json *ids = b.Array("ids");
  const Json *filter = b.Object("filter");
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
    for (const Json &id : *ids) {
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

// Runs a change of messages: `action` is delete, cancel, retry, reschedule
// (needs "run_at") or priority (needs "priority"); returns how many
// changed.
std::int64_t Steer(WorkQueue q, const std::string &action,
                   const MessageSelection &sel, const Body &b) {
  const char *wants = action == "reschedule" ? "run_at"
                      : action == "priority" ? "priority"
                                             : nullptr;
  for (const char *field : {"run_at", "priority"}) {
    if (b.Has(field) && (wants == nullptr || std::string(wants) != field)) {
      Throw(400, "unknown_field",
            fmt::format("\"{}\" does not go with {}", field, action));
    }
  }
  if (wants != nullptr && !b.Has(wants)) {
    Throw(400, "invalid_argument",
          fmt::format("{} needs \"{}\"", action, wants));
  }
  if (action == "delete") return Take(q.Delete(sel));
  if (action == "cancel") return Take(q.Cancel(sel));
  if (action == "retry") return Take(q.RetryNow(sel));
  if (action == "reschedule") {
    return Take(q.Reschedule(sel, ReadTime("run_at", *b.String("run_at"))));
  }
  return Take(q.SetPriority(sel, static_cast<std::int32_t>(*b.Int(
                                     "priority", INT32_MIN, INT32_MAX))));
}

// Reads a listing (dead letters, archive, a ring group) page by page, so
// that its reply stays within `reply_bytes`: each page asks for as many
// rows as fit in what is left, counting `max_payload` for each (the
// queue's limit; for rings the server's), and what came back is charged at
// its encoded size (at most 4/3 of the payload and the text slack, plus
// `row_bytes` for the other fields). `next(o, row)` moves the options'
// cursor past a row. Sets `limited` when it stopped before `o.limit` rows
// for lack of room; the client goes on from the last row.
template <typename Row, typename Options, typename Fetch, typename Next>
std::vector<Row> ListWithin(std::size_t reply_bytes, std::size_t max_payload,
                            std::size_t row_bytes, Options o, Fetch fetch,
                            Next next, bool &limited) {
  std::vector<Row> rows;
  const auto encoded = [&](std::size_t n) {
    return (n + 2) / 3 * 4 + kPayloadTextSlack + row_bytes;
  };
  std::size_t left = reply_bytes > 64 ? reply_bytes - 64 : 0;
  const std::size_t limit = static_cast<std::size_t>(o.limit);
  while (rows.size() < limit) {
    std::size_t page =
        std::min(limit - rows.size(), left / encoded(max_payload));
    if (page == 0) {
      if (!rows.empty()) {
        limited = true;
        break;
      }
      page = 1;  // one row always, however large
    }
    o.limit = static_cast<int>(page);
    std::vector<Row> got = Take(fetch(o));
    for (Row &r : got) {
      left -= std::min(left, encoded(r.payload.size()));
      next(o, r);
      rows.push_back(std::move(r));
    }
    if (got.size() < page) break;  // the end
  }
  return rows;
}

// ListWithin's cursor of dead letters and archived messages.
constexpr auto NextId = [](ListOptions &o, const auto &row) {
  o.after_id = row.id;
};

// The token of an Authorization header, or the 401 reply. The scheme is
// case-insensitive (RFC 9110); one or more spaces follow it.
std::string BearerToken(std::string_view header) {
  constexpr std::string_view kScheme = "bearer";
  if (header.empty()) {
    Throw(401, "unauthorized",
          "this server requires 'Authorization: Bearer TOKEN'");
  }
  bool scheme =
      header.size() > kScheme.size() &&
      (header[kScheme.size()] == ' ' || header[kScheme.size()] == '\t');
  for (std::size_t i = 0; scheme && i < kScheme.size(); ++i) {
    scheme = std::tolower(static_cast<unsigned char>(header[i])) == kScheme[i];
  }
  std::string_view token = scheme ? header.substr(kScheme.size()) : "";
  while (!token.empty() && (token.front() == ' ' || token.front() == '\t')) {
    token.remove_prefix(1);
  }
  if (token.empty()) {
    Throw(401, "unauthorized",
          "the Authorization header must be 'Bearer TOKEN'");
  }
  return std::string(token);
}

// A listing's reply: {key: rows}, with "limited":true when ListWithin
// stopped it at the reply size limit.
Json Listing(const char *key, Json rows, bool limited) {
  Json body = {{key, std::move(rows)}};
  if (limited) body["limited"] = true;
  return body;
}

// The library's own limits, so that the server's errors name them.
constexpr std::int64_t kMaxLeaseMs = kMaxLease.count();
constexpr std::int64_t kMaxDelayMs = kMaxDelay.count();
constexpr std::int64_t kMaxRetentionMs = kMaxRetention.count();

// A queue's options in a body (create, change), each optional.
constexpr std::initializer_list<const char *> kQueueOptionFields = {
    "max_attempts",  "lease_ms",     "backoff_base_ms",   "backoff_max_ms",
    "archive",       "retention_ms", "max_payload_bytes", "dead_retention_ms",
    "unique_for_ms", "groups",       "max_leased",        "rate_limit",
    "rate_burst",    "group_limit",  "dead_letter_queue", "labels"};

// Sets in `o` the options `b` gives.
void ReadQueueOptions(const Body &b, QueueOptions &o) {
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
  auto limit = [&](const char *key, int max, std::optional<int> &field) {
    const Json *v = b.Value(key);
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
  if (const Json *v = b.Value("rate_limit")) {
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
  if (const Json *v = b.Value("dead_letter_queue")) {
    if (v->is_null()) {
      o.dead_letter_queue.clear();
    } else {
      if (!v->is_string()) b.Wrong("dead_letter_queue", "a string or null");
      o.dead_letter_queue = v->get<std::string>();
    }
  }
  // All of the queue's labels, as given ({name: string}).
  if (const Json *v = b.Value("labels")) {
    if (!v->is_object()) b.Wrong("labels", "an object of strings");
    o.labels.clear();
    for (const auto &[key, text] : v->items()) {
      if (!text.is_string()) b.Wrong("labels", "an object of strings");
      o.labels[key] = text.get<std::string>();
    }
  }
}

}  // namespace

Json ParseBody(const std::string &text) {
  // A document costs about 50 bytes per value, so 16 MiB of "[[[[" or
  // "[0,0,0" would take many times its size. The API's bodies need a depth
  // of 3 and a value per field of each message of a batch; their widest
  // object is a message's headers (at most kMaxHeaders keys).
  // docs/http-api.md ("Errors") states these bounds.
  static constexpr wire::JsonBounds kBounds{
      .max_depth = 16, .max_values = 100000, .max_keys = 1000};
  Json doc;
  if (auto refused = wire::ParseJson(text, kBounds, "the request body", doc)) {
    Throw(400, std::move(refused->code), std::move(refused->message));
  }
  return doc;
}

Api::Own::Own(Store &store, const Limits &limits)
    : auth_failures(limits.auth_failure_burst,
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        limits.auth_failure_refill)),
      queues(store) {}

Api::Api(Store &store, const Limits &limits, const Auth &auth, Metrics &metrics,
         ServerGauges gauges, bool metrics_public, Overview::Options overview,
         std::optional<Shared> shared)
    : store_(store),
      limits_(limits),
      auth_(auth),
      own_(shared ? nullptr : std::make_unique<Own>(store, limits)),
      auth_failures_(shared ? shared->auth_failures : own_->auth_failures),
      cache_(shared ? shared->queues : own_->queues),
      overview_(store, std::move(overview)),
      metrics_(metrics),
      gauges_(std::move(gauges)),
      metrics_public_(metrics_public) {}

std::shared_ptr<const TokenEntry> Api::Authenticate(const Request &req,
                                                    std::string *token) {
  if (!auth_.enabled()) return nullptr;
  // An address that failed too often is refused before its token is looked
  // at: a guess gets no answer, right or wrong.
  if (const auto wait = auth_failures_.Blocked(req.peer); wait.count() > 0) {
    const auto seconds = (wait.count() + 999) / 1000;
    throw HttpError{
        429,
        "too_many_auth_failures",
        fmt::format("too many failed authentications from this address; "
                    "retry in {} s",
                    seconds),
        {{"Retry-After", std::to_string(seconds)}}};
  }
  std::string presented = BearerToken(req.authorization);
  auto who = auth_.Find(presented);
  if (who == nullptr) {
    // Asking without a token is no guess; a wrong token is.
    if (!req.authorization.empty()) auth_failures_.Failed(req.peer, "token");
    Throw(401, "unauthorized", "unknown token");
  }
  if (token != nullptr) *token = std::move(presented);
  return who;
}

Status Api::CheckWritable() {
  std::lock_guard<std::mutex> lock(ready_mu_);
  const auto now = Clock::now();
  if (now - ready_checked_ >= std::chrono::seconds(1)) {
    ready_ = store_.CheckWritable();
    ready_checked_ = now;
  }
  return ready_;
}

namespace {

// A queue's rates, per second, as the overview and the history show them.
Json RatesJson(const Rates &r) {
  return {{"sends", r[0]},
          {"claims", r[1]},
          {"acks", r[2]},
          {"dead_lettered", r[3]}};
}

}  // namespace

Json Api::OverviewJson(const Picture &picture, const TokenEntry *who) const {
  auto sees = [&](const std::string &name) {
    return who == nullptr || Auth::Sees(*who, name);
  };
  // What the token may do with an object: the buttons a page shows.
  auto can = [&](const std::string &name) {
    Json list = Json::array();
    for (const auto &[perm, word] :
         {std::pair{kSend, "send"}, {kClaim, "claim"}, {kAdmin, "admin"}}) {
      if (who == nullptr || Auth::Allows(*who, perm, name)) {
        list.push_back(word);
      }
    }
    return list;
  };
  Json queues = Json::array();
  std::int64_t waiting = 0;  // in the queues the token sees
  for (std::size_t i = 0; i < picture.infos.size(); ++i) {
    const QueueInfo &info = picture.infos[i];
    if (!sees(info.name)) continue;
    Json q = wire::StatsJson(picture.figures.queues[i]);
    q["kind"] = "queue";
    q["waiting_consumers"] = picture.figures.WaitingFor(info.name);
    waiting += picture.figures.WaitingFor(info.name);
    q["groups"] = std::string(GroupModeName(info.options.groups));
    q["rates"] = RatesJson(picture.rates[i]);
    q["can"] = can(info.name);
    queues.push_back(std::move(q));
  }
  // Rings and rotations: their stats, kind and "can".
  auto each = [&](const auto &list, const char *kind, auto json) {
    Json out = Json::array();
    for (const auto &s : list) {
      if (!sees(s.name)) continue;
      Json j = json(s);
      j["kind"] = kind;
      j["can"] = can(s.name);
      out.push_back(std::move(j));
    }
    return out;
  };
  Json rings = each(picture.figures.rings, "ring",
                    [](const RingStats &s) { return wire::RingStatsJson(s); });
  Json rotations =
      each(picture.figures.rotations, "rotation",
           [](const RotationStats &s) { return wire::RotationStatsJson(s); });
  Json schedules = Json::array();
  for (const ScheduleInfo &s : picture.schedules) {
    if (!sees(s.options.queue)) continue;
    Json j = wire::ScheduleJson(s);
    j["can"] = can(s.options.queue);
    schedules.push_back(std::move(j));
  }
  // The server's own figures, for those who may read /metrics.
  const bool metrics = who == nullptr || Auth::ReadsMetrics(*who);
  Json server = nullptr;
  if (metrics) {
    const Metrics::Gauges g = gauges_.read();
    server = {{"connections", g.connections},
              {"waiting_consumers", g.waiting_consumers},
              {"requests_in_flight", g.requests_in_flight}};
  }
  return {{"at", wire::FormatTime(picture.at)},
          {"waiting_consumers", waiting},
          {"server", std::move(server)},
          {"metrics", metrics},
          {"queues", std::move(queues)},
          {"rings", std::move(rings)},
          {"rotations", std::move(rotations)},
          {"schedules", std::move(schedules)}};
}

Outcome Api::Handle(const Request &req) {
  Outcome out;
  std::string route = "unmatched";
  std::string cached;  // the queue whose cached handle this request used
  bool hit = false;
  auto handle = [&]() -> Outcome {
    const Target t = ParseTarget(req.target);
    const auto &seg = t.segments;
    const std::string &m = req.method;
    auto reply = [&](unsigned status, Json body) {
      return Outcome{JsonReply(status, std::move(body)), std::nullopt};
    };
    auto route_is = [&](const char *r) { route = r; };

    // Without /v1's authentication: the dashboard page (it holds no data
    // and fetches everything with the user's token), health, and metrics
    // (which checks a token of its own unless --metrics-public).
    if (seg.empty() || (seg.size() == 1 && seg[0] == "dashboard")) {
      route_is("GET /dashboard");
      if (m != "GET") Throw(405, "method_not_allowed", "use GET");
      Reply r;
      r.text = std::string(DashboardHtml());
      r.content_type = "text/html; charset=utf-8";
      r.headers = DashboardHeaders();
      return Outcome{std::move(r), std::nullopt};
    }
    if (seg.size() == 1 && seg[0] == "healthz") {
      route_is("GET /healthz");
      if (m != "GET") Throw(405, "method_not_allowed", "use GET");
      return reply(200, {{"status", "ok"}});
    }
    if (seg.size() == 1 && seg[0] == "readyz") {
      route_is("GET /readyz");
      if (m != "GET") Throw(405, "method_not_allowed", "use GET");
      if (gauges_.shutting_down()) {
        Throw(503, "shutting_down", "the server is shutting down");
      }
      // Ready means writes commit (a full disk still reads fine): a write
      // that changes nothing, at most once a second however often the
      // load balancer asks.
      Check(CheckWritable());
      return reply(200, {{"status", "ready"}});
    }
    // The OpenAPI description of this API: a public document, like the
    // dashboard's page.
    if (seg.size() == 1 && seg[0] == "openapi.json") {
      route_is("GET /openapi.json");
      if (m != "GET") Throw(405, "method_not_allowed", "use GET");
      Reply r;
      r.text = std::string(kOpenApiJson);
      return Outcome{std::move(r), std::nullopt};
    }
    if (seg.size() == 1 && seg[0] == "metrics") {
      route_is("GET /metrics");
      if (m != "GET") Throw(405, "method_not_allowed", "use GET");
      const std::shared_ptr<const TokenEntry> reader =
          metrics_public_ ? nullptr : Authenticate(req);
      if (reader != nullptr) {
        if (!Auth::ReadsMetrics(*reader)) {
          Throw(403, "forbidden",
                "reading /metrics needs a token with the 'metrics' or "
                "'admin' permission");
        }
      }
      // A token sees what it has a grant on (metrics:* sees all); what
      // was dropped meanwhile is left out.
      auto visible = [&](const std::string &name) {
        return reader == nullptr || Auth::Sees(*reader, name);
      };
      // The store as it is now (the reading the dashboard shares).
      const std::shared_ptr<const Picture> picture = Take(overview_.Read());
      Metrics::Figures figures;
      figures.waiting = picture->figures.waiting;  // shown for the queues
      for (const QueueStats &s : picture->figures.queues) {
        if (visible(s.name)) figures.queues.push_back(s);
      }
      for (const RingStats &s : picture->figures.rings) {
        if (visible(s.name)) figures.rings.push_back(s);
      }
      for (const RotationStats &s : picture->figures.rotations) {
        if (visible(s.name)) figures.rotations.push_back(s);
      }
      Reply r;
      r.text = metrics_.Render(figures, gauges_.read());
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      return Outcome{std::move(r), std::nullopt};
    }
    if (seg.empty() || seg[0] != "v1" || seg.size() < 2) {
      Throw(404, "no_route",
            fmt::format("no endpoint at {} {}", m,
                        req.target.substr(0, req.target.find('?'))));
    }

    // Authentication for everything under /v1.
    std::string token;  // for the per-token limit of waiting claims
    const std::shared_ptr<const TokenEntry> who = Authenticate(req, &token);
    auto need = [&](unsigned perm, const std::string &name) {
      if (who == nullptr || Auth::Allows(*who, perm, name)) return;
      const char *what = perm == kSend    ? "send"
                         : perm == kClaim ? "claim"
                                          : "admin";
      Throw(403, "forbidden",
            fmt::format("this token lacks the '{}' permission on '{}'", what,
                        name));
    };
    auto see = [&](const std::string &name) {
      if (who == nullptr || Auth::Sees(*who, name)) return;
      Throw(403, "forbidden",
            fmt::format("this token has no permission on '{}'", name));
    };
    auto method = [&](std::initializer_list<const char *> allowed) {
      for (const char *a : allowed) {
        if (m == a) return;
      }
      std::string list;
      for (const char *a : allowed)
        list += (list.empty() ? "" : ", ") + std::string(a);
      Throw(405, "method_not_allowed",
            fmt::format("{} is not allowed here; use {}", m, list));
    };

    const std::string &kind = seg[1];
    // ---- work queues ----
    if (kind == "queues") {
      if (seg.size() == 2) {
        route_is("GET /v1/queues");
        method({"GET"});
        Body b(req.body, {});
        Json list = Json::array();
        for (const QueueInfo &q : Take(store_.ListQueues())) {
          if (who != nullptr && !Auth::Sees(*who, q.name)) continue;
          list.push_back(wire::QueueJson(q));
        }
        return reply(200, {{"queues", std::move(list)}});
      }
      const std::string &name = seg[2];
      auto queue = [&] {
        cached = name;
        return Take(cache_.Get(name, hit));
      };
      // A queue's dead letters go to its dead-letter queue: naming one is a
      // send there, so it needs send (or admin) on that queue as well.
      auto need_dead_letter_queue = [&](const Body &b, const QueueOptions &o) {
        if (b.Value("dead_letter_queue") != nullptr &&
            !o.dead_letter_queue.empty()) {
          need(kSend, o.dead_letter_queue);
        }
      };
      if (seg.size() == 3) {
        if (m == "POST") {
          route_is("POST /v1/queues/{name}");
          need(kAdmin, name);
          Body b(req.body, kQueueOptionFields);
          QueueOptions o;
          ReadQueueOptions(b, o);
          need_dead_letter_queue(b, o);
          Check(CheckQueueName(name));
          Check(CheckQueueOptions(o));
          WorkQueue q = Take(store_.CreateQueue(name, o));
          return reply(201, wire::QueueJson(q.info()));
        }
        if (m == "GET") {
          route_is("GET /v1/queues/{name}");
          see(name);
          WorkQueue q = queue();
          QueueStats s = Take(q.Stats());
          Json j = {{"name", name},
                    {"kind", "queue"},
                    {"stats", wire::StatsJson(s)},
                    {"options", wire::QueueOptionsJson(q.options())}};
          return reply(200, std::move(j));
        }
        if (m == "PATCH") {
          // The options given change; the others stay as they are.
          route_is("PATCH /v1/queues/{name}");
          need(kAdmin, name);
          Body b(req.body, kQueueOptionFields);
          WorkQueue q = queue();
          QueueOptions o = q.options();
          ReadQueueOptions(b, o);
          need_dead_letter_queue(b, o);
          Check(q.Alter(o));
          return reply(200, wire::QueueJson(q.info()));
        }
        route_is("DELETE /v1/queues/{name}");
        method({"POST", "GET", "PATCH", "DELETE"});
        need(kAdmin, name);
        cache_.Forget(name);
        Check(store_.DropQueue(name));
        return reply(200, {{"dropped", name}});
      }
      const std::string &op = seg[3];
      if (seg.size() == 4 && (op == "pause" || op == "resume")) {
        route_is(op == "pause" ? "POST /v1/queues/{name}/pause"
                               : "POST /v1/queues/{name}/resume");
        method({"POST"});
        need(kAdmin, name);
        Body b(req.body, {});
        WorkQueue q = queue();
        Check(op == "pause" ? q.Pause() : q.Resume());
        return reply(200, wire::QueueJson(q.info()));
      }
      if (seg.size() == 4 && op == "messages" && m == "GET") {
        route_is("GET /v1/queues/{name}/messages");
        need(kAdmin, name);
        ListMessagesOptions o{
            .filter = FilterFromQuery(t),
            .limit = static_cast<int>(QueryInt(t, "limit", 100, 1, 1000))};
        if (auto it = t.query.find("cursor"); it != t.query.end()) {
          o.cursor = it->second;
        }
        WorkQueue q = queue();
        // Within the reply limit: a page that would not fit is asked for
        // again with as many messages as fit (at least one), so that its
        // next_cursor goes on from the last one sent.
        for (;;) {
          MessagePage page = Take(q.ListMessages(o));
          Json list = Json::array();
          std::size_t bytes = 64 + page.next_cursor.size();
          int fit = 0;
          for (const MessageInfo &info : page.messages) {
            Json j = wire::MessageInfoJson(info);
            bytes += j.dump().size() + 1;
            if (fit > 0 && bytes > limits_.max_reply_bytes) break;
            list.push_back(std::move(j));
            ++fit;
          }
          if (fit < static_cast<int>(page.messages.size())) {
            o.limit = fit;
            continue;
          }
          Json body = {{"messages", std::move(list)}};
          body["next_cursor"] =
              page.next_cursor.empty() ? Json(nullptr) : Json(page.next_cursor);
          return reply(200, std::move(body));
        }
      }
      if (seg.size() == 5 && op == "messages" && seg[4] == "count") {
        route_is("GET /v1/queues/{name}/messages/count");
        method({"GET"});
        need(kAdmin, name);
        const MessageCount n = Take(queue().CountMessages(FilterFromQuery(t)));
        return reply(200, {{"count", n.count}, {"at", wire::FormatTime(n.at)}});
      }
      if (seg.size() == 5 && op == "messages" &&
          (seg[4] == "delete" || seg[4] == "cancel" || seg[4] == "retry" ||
           seg[4] == "reschedule" || seg[4] == "priority")) {
        const std::string &action = seg[4];
        route_is(action == "delete"   ? "POST /v1/queues/{name}/messages/delete"
                 : action == "cancel" ? "POST /v1/queues/{name}/messages/cancel"
                 : action == "retry"  ? "POST /v1/queues/{name}/messages/retry"
                 : action == "reschedule"
                     ? "POST /v1/queues/{name}/messages/reschedule"
                     : "POST /v1/queues/{name}/messages/priority");
        method({"POST"});
        need(kAdmin, name);
        Body b(req.body, {"ids", "state", "filter", "run_at", "priority"});
        MessageSelection sel = SelectionFromBody(b);
        return reply(200, {{"changed", Steer(queue(), action, sel, b)}});
      }
      if ((seg.size() == 5 || seg.size() == 6) && op == "messages") {
        std::int64_t id = 0;
        const std::string &text = seg[4];
        auto [end, ec] =
            std::from_chars(text.data(), text.data() + text.size(), id);
        if (ec != std::errc() || end != text.data() + text.size()) {
          Throw(404, "no_route",
                fmt::format("no endpoint at {} {}: '{}' is not a message id", m,
                            req.target.substr(0, req.target.find('?')),
                            text.substr(0, 64)));
        }
        MessageSelection sel{.ids = {id}};
        if (seg.size() == 5) {
          if (m == "GET") {
            route_is("GET /v1/queues/{name}/messages/{id}");
            need(kAdmin, name);
            return reply(200, wire::MessageInfoJson(Take(queue().Get(id))));
          }
          route_is("DELETE /v1/queues/{name}/messages/{id}");
          method({"GET", "DELETE"});
          need(kAdmin, name);
          // A message in the queue, a dead letter or an archived one:
          // wherever it is.
          WorkQueue q = queue();
          MessageInfo info = Take(q.Get(id));
          if (info.state == MessageState::kDead ||
              info.state == MessageState::kArchived) {
            sel.filter.state = info.state;
          }
          return reply(200, {{"deleted", Take(q.Delete(sel))}});
        }
        const std::string &action = seg[5];
        if (action != "retry" && action != "cancel" && action != "reschedule" &&
            action != "priority") {
          Throw(404, "no_route",
                fmt::format("no endpoint at {} {}", m,
                            req.target.substr(0, req.target.find('?'))));
        }
        route_is(
            action == "retry"    ? "POST /v1/queues/{name}/messages/{id}/retry"
            : action == "cancel" ? "POST /v1/queues/{name}/messages/{id}/cancel"
            : action == "reschedule"
                ? "POST /v1/queues/{name}/messages/{id}/reschedule"
                : "POST /v1/queues/{name}/messages/{id}/priority");
        method({"POST"});
        need(kAdmin, name);
        Body b(req.body, {"run_at", "priority"});
        WorkQueue q = queue();
        // Retry of a dead letter redrives it.
        if (action == "retry") {
          MessageInfo info = Take(q.Get(id));
          if (info.state == MessageState::kDead) {
            sel.filter.state = MessageState::kDead;
          }
        }
        return reply(200, {{"changed", Steer(q, action, sel, b)}});
      }
      if (seg.size() == 4 && op == "messages") {
        route_is("POST /v1/queues/{name}/messages");
        method({"POST"});
        need(kSend, name);
        Body b(req.body, {"messages"});
        const Json *list = b.Array("messages");
        if (list == nullptr || list->empty()) {
          Throw(400, "invalid_argument",
                "\"messages\" must be a non-empty array");
        }
        if (list->size() > static_cast<std::size_t>(limits_.max_batch)) {
          Throw(413, "batch_too_large",
                fmt::format("{} messages exceed the server's batch limit "
                            "of {}",
                            list->size(), limits_.max_batch));
        }
        std::vector<Message> msgs;
        msgs.reserve(list->size());
        for (std::size_t i = 0; i < list->size(); ++i) {
          Body mb((*list)[i],
                  {"payload", "payload_base64", "priority", "delay_ms",
                   "run_at", "dedup", "group", "headers"},
                  fmt::format("messages[{}]", i));
          msgs.push_back(ReadMessage(mb, limits_.max_payload_bytes));
        }
        WorkQueue q = queue();
        auto results = Take(q.SendBatch(msgs));
        // Written directly, as ClaimReply is: the reply of every send.
        std::string text = R"({"ids":[)";
        auto put = std::back_inserter(text);
        for (std::size_t i = 0; i < results.size(); ++i) {
          fmt::format_to(put, "{}{}", i ? "," : "", results[i].id);
        }
        text += R"(],"duplicate":[)";
        for (std::size_t i = 0; i < results.size(); ++i) {
          text += i ? "," : "";
          text += results[i].duplicate ? "true" : "false";
        }
        text += "]}";
        Reply r;
        r.text = std::move(text);
        return Outcome{std::move(r), std::nullopt};
      }
      if (seg.size() == 4 && op == "claim") {
        route_is("POST /v1/queues/{name}/claim");
        method({"POST"});
        need(kClaim, name);
        Body b(req.body, {"max", "lease_ms", "wait_ms", "worker", "ack"});
        ClaimOptions o;
        if (auto v = b.Int("max", 1, 1000)) o.max = static_cast<int>(*v);
        if (auto v = b.Millis("lease_ms", kMaxLeaseMs)) o.lease = *v;
        if (auto v = b.String("worker")) o.worker = *v;
        Duration wait{0};
        if (auto v = b.Int("wait_ms", 0, INT64_MAX)) {
          if (Duration(*v) > limits_.max_wait) {
            Throw(400, "wait_too_long",
                  fmt::format("wait_ms {} exceeds the server's limit of {}", *v,
                              limits_.max_wait.count()));
          }
          wait = Duration(*v);
        }
        // "ack": a receipt this consumer is done with, acked in the
        // claim's transaction (WorkQueue::AckAndClaim).
        std::string ack;
        if (auto v = b.String("ack")) ack = *v;
        o.max_bytes = ClaimPayloadBudget(limits_.max_reply_bytes, o.max);
        WorkQueue q = queue();
        if (wait.count() == 0) {
          ClaimNote note;
          auto claimed =
              ack.empty() ? q.Claim(o, &note) : q.AckAndClaim(ack, o, &note);
          return Outcome{ClaimReply(q, o, Take(std::move(claimed)), note),
                         std::nullopt};
        }
        Outcome park{Reply(), ParkedClaim{.queue = q,
                                          .options = o,
                                          .deadline = Clock::now() + wait,
                                          .token = token,
                                          .ack = std::move(ack)}};
        return park;
      }
      if (seg.size() == 4 && op == "ack") {
        route_is("POST /v1/queues/{name}/ack");
        method({"POST"});
        need(kClaim, name);
        Body b(req.body, {"receipt", "receipts"});
        WorkQueue q = queue();
        if (auto r = b.String("receipt")) {
          if (b.Has("receipts")) {
            Throw(400, "invalid_argument",
                  "give \"receipt\" or \"receipts\", not both");
          }
          Check(q.Ack(*r));
          return reply(200, {{"acked", 1}});
        }
        const Json *list = b.Array("receipts");
        if (list == nullptr || list->empty()) {
          Throw(400, "invalid_argument",
                "\"receipt\" or a non-empty \"receipts\" array is required");
        }
        if (list->size() > static_cast<std::size_t>(limits_.max_batch)) {
          Throw(413, "batch_too_large",
                fmt::format("{} receipts exceed the server's batch limit "
                            "of {}",
                            list->size(), limits_.max_batch));
        }
        std::vector<std::string> receipts;
        for (const Json &r : *list) {
          if (!r.is_string()) b.Wrong("receipts", "an array of strings");
          receipts.push_back(r.get<std::string>());
        }
        auto statuses = Take(q.AckBatch(receipts));
        Json results = Json::array();
        int acked = 0;
        for (const Status &s : statuses) {
          if (s.ok()) {
            ++acked;
            results.push_back({{"ok", true}});
          } else {
            results.push_back({{"ok", false}, {"error", wire::ErrorJson(s)}});
          }
        }
        return reply(200, {{"acked", acked}, {"results", std::move(results)}});
      }
      if (seg.size() == 4 && op == "nack") {
        route_is("POST /v1/queues/{name}/nack");
        method({"POST"});
        need(kClaim, name);
        Body b(req.body, {"receipt", "delay_ms", "error"});
        auto receipt = b.String("receipt");
        if (!receipt) Throw(400, "invalid_argument", "\"receipt\" is required");
        NackOptions o;
        if (auto v = b.Millis("delay_ms", kMaxDelayMs)) o.delay = *v;
        if (auto v = b.String("error")) o.error = *v;
        WorkQueue q = queue();
        NackOutcome n = Take(q.Nack(*receipt, o));
        return reply(200,
                     {{"outcome", n == NackOutcome::kDead ? "dead" : "retry"}});
      }
      if (seg.size() == 4 && op == "extend") {
        route_is("POST /v1/queues/{name}/extend");
        method({"POST"});
        need(kClaim, name);
        Body b(req.body, {"receipt", "lease_ms"});
        auto receipt = b.String("receipt");
        auto lease = b.Millis("lease_ms", kMaxLeaseMs);
        if (!receipt || !lease) {
          Throw(400, "invalid_argument",
                "\"receipt\" and \"lease_ms\" are required");
        }
        WorkQueue q = queue();
        Timestamp until = Take(q.Extend(*receipt, *lease));
        return reply(200, {{"lease_expires_at", wire::FormatTime(until)}});
      }
      if (seg.size() == 4 && op == "purge") {
        route_is("POST /v1/queues/{name}/purge");
        method({"POST"});
        need(kAdmin, name);
        Body b(req.body, {});
        WorkQueue q = queue();
        return reply(200, {{"purged", Take(q.Purge())}});
      }
      if (op == "dead" && seg.size() == 4) {
        if (m == "GET") {
          route_is("GET /v1/queues/{name}/dead");
          need(kAdmin, name);
          ListOptions lo{
              .limit = static_cast<int>(QueryInt(t, "limit", 100, 1, 10000)),
              .after_id = QueryInt(t, "after_id", 0, 0, INT64_MAX)};
          WorkQueue q = queue();
          Json list = Json::array();
          bool limited = false;
          // A last error of up to 4,096 bytes escapes to six times that.
          const auto dead = ListWithin<DeadLetter>(
              limits_.max_reply_bytes, q.options().max_payload_bytes,
              6 * 4096 + 320, lo,
              [&](const ListOptions &page) { return q.ListDead(page); }, NextId,
              limited);
          for (const DeadLetter &d : dead) {
            list.push_back(wire::DeadLetterJson(d));
          }
          return reply(200, Listing("dead", std::move(list), limited));
        }
        route_is("DELETE /v1/queues/{name}/dead");
        method({"GET", "DELETE"});
        need(kAdmin, name);
        WorkQueue q = queue();
        return reply(200, {{"purged", Take(q.PurgeDead())}});
      }
      if (op == "dead" && seg.size() == 5 && seg[4] == "redrive") {
        route_is("POST /v1/queues/{name}/dead/redrive");
        method({"POST"});
        need(kAdmin, name);
        Body b(req.body, {"ids", "all"});
        WorkQueue q = queue();
        bool all = b.Bool("all").value_or(false);
        const Json *ids = b.Array("ids");
        if (all == (ids != nullptr)) {
          Throw(400, "invalid_argument",
                "give either \"ids\" (an array) or \"all\": true");
        }
        if (all) return reply(200, {{"redriven", Take(q.RedriveAll())}});
        std::vector<std::int64_t> list;
        for (const Json &id : *ids) {
          if (!id.is_number_integer()) b.Wrong("ids", "an array of integers");
          list.push_back(id.get<std::int64_t>());
        }
        return reply(200, {{"redriven", Take(q.Redrive(list))}});
      }
      if (op == "history" && seg.size() == 4) {
        route_is("GET /v1/queues/{name}/history");
        method({"GET"});
        see(name);
        Body b(req.body, {});
        queue();  // not_found for a queue that does not exist
        Json points = Json::array();
        for (const HistoryPoint &h : overview_.History(name)) {
          points.push_back({{"at", wire::FormatTime(h.at)},
                            {"ready", h.ready},
                            {"delayed", h.delayed},
                            {"leased", h.leased},
                            {"dead", h.dead},
                            {"rates", RatesJson(h.rates)}});
        }
        return reply(
            200,
            {{"step_s",
              std::chrono::duration<double>(overview_.options().step).count()},
             {"points", std::move(points)}});
      }
      if (op == "archive" && seg.size() == 4) {
        route_is("GET /v1/queues/{name}/archive");
        method({"GET"});
        need(kAdmin, name);
        ListOptions lo{
            .limit = static_cast<int>(QueryInt(t, "limit", 100, 1, 10000)),
            .after_id = QueryInt(t, "after_id", 0, 0, INT64_MAX)};
        WorkQueue q = queue();
        Json list = Json::array();
        bool limited = false;
        // A worker name of up to 255 bytes escapes to six times that.
        const auto archived = ListWithin<ArchivedMessage>(
            limits_.max_reply_bytes, q.options().max_payload_bytes,
            6 * 255 + 320, lo,
            [&](const ListOptions &page) { return q.ListArchive(page); },
            NextId, limited);
        for (const ArchivedMessage &a : archived) {
          list.push_back(wire::ArchivedJson(a));
        }
        return reply(200, Listing("archive", std::move(list), limited));
      }
    }

    // ---- rings and rotations: the lists, and everything at once ----
    auto visible = [&](const std::string &name) {
      return who == nullptr || Auth::Sees(*who, name);
    };
    auto rings = [&] {
      Json list = Json::array();
      for (const RingInfo &r : Take(store_.ListRings())) {
        if (visible(r.name)) list.push_back(wire::RingJson(r.name, r.options));
      }
      return list;
    };
    auto rotations = [&] {
      Json list = Json::array();
      for (const RotationInfo &r : Take(store_.ListRotations())) {
        if (visible(r.name)) {
          list.push_back(wire::RotationJson(r.name, r.options));
        }
      }
      return list;
    };
    if ((kind == "rings" || kind == "rotations") && seg.size() == 2) {
      route_is(kind == "rings" ? "GET /v1/rings" : "GET /v1/rotations");
      method({"GET"});
      Body b(req.body, {});
      return reply(200, {{kind, kind == "rings" ? rings() : rotations()}});
    }
    if (kind == "overview" && seg.size() == 2) {
      route_is("GET /v1/overview");
      method({"GET"});
      Body b(req.body, {});
      return reply(200, OverviewJson(*Take(overview_.Latest()), who.get()));
    }
    if (kind == "all" && seg.size() == 2) {
      route_is("GET /v1/all");
      method({"GET"});
      Body b(req.body, {});
      Json queues = Json::array();
      for (const QueueInfo &q : Take(store_.ListQueues())) {
        if (visible(q.name)) queues.push_back(wire::QueueJson(q));
      }
      return reply(200, {{"queues", std::move(queues)},
                         {"rings", rings()},
                         {"rotations", rotations()}});
    }

    // ---- rings ----
    if (kind == "rings" && seg.size() >= 3) {
      const std::string &name = seg[2];
      if (seg.size() == 3) {
        if (m == "POST") {
          route_is("POST /v1/rings/{name}");
          need(kAdmin, name);
          Body b(req.body, {"capacity", "max_payload_bytes"});
          RingOptions o;
          if (auto v = b.Int("capacity", 1, INT64_MAX)) o.capacity = *v;
          if (auto v = b.Int("max_payload_bytes", 1, 64 << 20)) {
            o.max_payload_bytes = static_cast<std::size_t>(*v);
          }
          Ring r = Take(store_.CreateRing(name, o));
          return reply(201, wire::RingJson(r.name(), o));
        }
        if (m == "GET") {
          route_is("GET /v1/rings/{name}");
          see(name);
          RingStats s = Take(Take(store_.GetRing(name)).Stats());
          return reply(200, wire::RingStatsJson(s));
        }
        route_is("DELETE /v1/rings/{name}");
        method({"POST", "GET", "DELETE"});
        need(kAdmin, name);
        Check(store_.DropRing(name));
        return reply(200, {{"dropped", name}});
      }
      if (seg[3] == "groups" && seg.size() == 4) {
        route_is("GET /v1/rings/{name}/groups");
        method({"GET"});
        need(kClaim, name);
        Json list = Json::array();
        for (const RingGroup &g : Take(Take(store_.GetRing(name)).Groups())) {
          list.push_back(wire::RingGroupJson(g));
        }
        return reply(200, {{"groups", std::move(list)}});
      }
      if (seg[3] == "groups" && seg.size() == 5) {
        const std::string &group = seg[4];
        if (m == "POST") {
          route_is("POST /v1/rings/{name}/groups/{group}");
          need(kSend, name);
          Body b(req.body, {"payload", "payload_base64"});
          std::string payload = ReadPayload(b, true, limits_.max_payload_bytes);
          Ring r = Take(store_.GetRing(name));
          return reply(200, wire::RingEntryJson(Take(r.Push(group, payload))));
        }
        if (m == "GET") {
          route_is("GET /v1/rings/{name}/groups/{group}");
          need(kClaim, name);
          RingReadOptions o;
          o.limit = static_cast<int>(QueryInt(t, "limit", 100, 1, 10000));
          if (auto it = t.query.find("order"); it != t.query.end()) {
            if (it->second == "oldest") {
              o.oldest_first = true;
            } else if (it->second != "newest") {
              Throw(400, "invalid_argument",
                    "query parameter 'order' must be newest or oldest");
            }
          }
          o.after_seq = QueryInt(t, "after_seq", 0, 0, INT64_MAX);
          Ring r = Take(store_.GetRing(name));
          Json list = Json::array();
          bool limited = false;
          // A group name of up to 255 bytes escapes to six times that.
          const auto entries = ListWithin<RingEntry>(
              limits_.max_reply_bytes, limits_.max_payload_bytes, 6 * 255 + 320,
              o,
              [&](const RingReadOptions &page) { return r.Read(group, page); },
              [](RingReadOptions &page, const RingEntry &e) {
                page.after_seq = e.seq;
              },
              limited);
          for (const RingEntry &e : entries)
            list.push_back(wire::RingEntryJson(e));
          return reply(200, Listing("entries", std::move(list), limited));
        }
        route_is("DELETE /v1/rings/{name}/groups/{group}");
        method({"POST", "GET", "DELETE"});
        need(kAdmin, name);
        Ring r = Take(store_.GetRing(name));
        return reply(200, {{"deleted", Take(r.DeleteGroup(group))}});
      }
      if (seg[3] == "groups" && seg.size() == 6) {
        // As for a message id: a segment that is no number is no route.
        std::int64_t seq = 0;
        const std::string &s = seg[5];
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), seq);
        if (ec != std::errc() || p != s.data() + s.size()) {
          Throw(404, "no_route",
                fmt::format("no endpoint at {} {}: '{}' is not an entry's seq",
                            m, req.target.substr(0, req.target.find('?')),
                            s.substr(0, 64)));
        }
        route_is("DELETE /v1/rings/{name}/groups/{group}/{seq}");
        method({"DELETE"});
        need(kAdmin, name);
        Ring r = Take(store_.GetRing(name));
        Check(r.Delete(seg[4], seq));
        return reply(200, {{"deleted", 1}});
      }
    }

    // ---- schedules: permissions follow the schedule's queue ----
    if (kind == "schedules" && seg.size() == 2) {
      route_is("GET /v1/schedules");
      method({"GET"});
      Body b(req.body, {});
      Json list = Json::array();
      for (const ScheduleInfo &s : Take(store_.ListSchedules())) {
        if (visible(s.options.queue)) list.push_back(wire::ScheduleJson(s));
      }
      return reply(200, {{"schedules", std::move(list)}});
    }
    if (kind == "schedules" &&
        (seg.size() == 3 ||
         (seg.size() == 4 && (seg[3] == "pause" || seg[3] == "resume")))) {
      const std::string &name = seg[2];
      if (seg.size() == 3 && m == "POST") {
        route_is("POST /v1/schedules/{name}");
        Body b(req.body,
               {"cron", "time_zone", "queue", "payload", "payload_base64",
                "priority", "headers", "group", "catch_up"});
        ScheduleOptions o;
        auto cron = b.String("cron");
        auto queue = b.String("queue");
        if (!cron || !queue) {
          Throw(400, "invalid_argument",
                "a schedule needs \"cron\" and \"queue\"");
        }
        need(kAdmin, *queue);
        o.cron = *cron;
        o.queue = *queue;
        if (auto v = b.String("time_zone")) o.time_zone = *v;
        if (auto v = b.Int("catch_up", 0, kMaxCatchUp)) {
          o.catch_up = static_cast<int>(*v);
        }
        o.message = ReadMessage(b, limits_.max_payload_bytes);
        auto created = store_.CreateSchedule(name, o);
        if (!created.ok() && created.status().code() == Code::kAlreadyExists) {
          // Schedule names are shared by all tokens. The name's being taken
          // cannot be hidden, but whose it is can: a schedule on a queue
          // this token has no grant on is refused as out of its reach,
          // naming nothing but the name it asked for.
          auto taken = store_.GetSchedule(name);
          if (taken.ok() && !visible(taken->options.queue)) {
            Throw(403, "forbidden",
                  fmt::format("the schedule name '{}' is not available to "
                              "this token",
                              name));
          }
        }
        return reply(201, wire::ScheduleJson(Take(std::move(created))));
      }
      ScheduleInfo s = Take(store_.GetSchedule(name));
      // A schedule on a queue this token has no grant on is, to it, not
      // there: the same reply as for a name no schedule has (Sees).
      if (!visible(s.options.queue)) {
        Check(Status::NotFound(fmt::format("schedule '{}' not found", name)));
      }
      if (seg.size() == 3 && m == "GET") {
        route_is("GET /v1/schedules/{name}");
        return reply(200, wire::ScheduleJson(s));
      }
      if (seg.size() == 3) {
        route_is("DELETE /v1/schedules/{name}");
        method({"POST", "GET", "DELETE"});
        need(kAdmin, s.options.queue);
        Check(store_.DropSchedule(name));
        return reply(200, {{"dropped", name}});
      }
      route_is(seg[3] == "pause" ? "POST /v1/schedules/{name}/pause"
                                 : "POST /v1/schedules/{name}/resume");
      method({"POST"});
      need(kAdmin, s.options.queue);
      Body b(req.body, {});
      Check(seg[3] == "pause" ? store_.PauseSchedule(name)
                              : store_.ResumeSchedule(name));
      return reply(200, wire::ScheduleJson(Take(store_.GetSchedule(name))));
    }

    // ---- rotations ----
    if (kind == "rotations" && seg.size() >= 3) {
      const std::string &name = seg[2];
      if (seg.size() == 3) {
        if (m == "POST") {
          route_is("POST /v1/rotations/{name}");
          need(kAdmin, name);
          Body b(req.body, {"max_failures", "max_payload_bytes"});
          RotationOptions o;
          if (auto v = b.Int("max_failures", 1, INT32_MAX)) {
            o.max_failures = static_cast<int>(*v);
          }
          if (auto v = b.Int("max_payload_bytes", 1, 64 << 20)) {
            o.max_payload_bytes = static_cast<std::size_t>(*v);
          }
          Rotation r = Take(store_.CreateRotation(name, o));
          return reply(201, wire::RotationJson(r.name(), o));
        }
        if (m == "GET") {
          route_is("GET /v1/rotations/{name}");
          see(name);
          RotationStats s = Take(Take(store_.GetRotation(name)).Stats());
          return reply(200, wire::RotationStatsJson(s));
        }
        route_is("DELETE /v1/rotations/{name}");
        method({"POST", "GET", "DELETE"});
        need(kAdmin, name);
        Check(store_.DropRotation(name));
        return reply(200, {{"dropped", name}});
      }
      if (seg[3] == "items" && seg.size() == 4) {
        if (m == "POST") {
          route_is("POST /v1/rotations/{name}/items");
          need(kAdmin, name);
          Body b(req.body, {"key", "payload", "payload_base64"});
          auto key = b.String("key");
          if (!key) Throw(400, "invalid_argument", "\"key\" is required");
          std::string payload =
              ReadPayload(b, false, limits_.max_payload_bytes);
          Rotation r = Take(store_.GetRotation(name));
          Check(r.Add(*key, payload));
          return reply(201, {{"added", *key}});
        }
        route_is("GET /v1/rotations/{name}/items");
        method({"POST", "GET"});
        need(kClaim, name);
        Rotation r = Take(store_.GetRotation(name));
        Json list = Json::array();
        for (const RotationItem &i : Take(r.List())) {
          list.push_back(wire::RotationItemJson(i));
        }
        return reply(200, {{"items", std::move(list)}});
      }
      if (seg[3] == "items" && seg.size() == 5) {
        route_is("DELETE /v1/rotations/{name}/items/{key}");
        method({"DELETE"});
        need(kAdmin, name);
        Rotation r = Take(store_.GetRotation(name));
        Check(r.Remove(seg[4]));
        return reply(200, {{"removed", seg[4]}});
      }
      if (seg[3] == "items" && seg.size() == 6) {
        const std::string &action = seg[5];
        if (action != "fail" && action != "ok" && action != "reset") {
          Throw(404, "no_route",
                fmt::format("unknown item action '{}' (fail, ok, reset)",
                            action.substr(0, 64)));
        }
        route_is(action == "fail" ? "POST /v1/rotations/{name}/items/{key}/fail"
                 : action == "ok"
                     ? "POST /v1/rotations/{name}/items/{key}/ok"
                     : "POST /v1/rotations/{name}/items/{key}/reset");
        method({"POST"});
        need(action == "reset" ? kAdmin : kClaim, name);
        Body b(req.body, {});
        Rotation r = Take(store_.GetRotation(name));
        if (action == "fail") {
          return reply(200, wire::RotationItemJson(Take(r.Fail(seg[4]))));
        }
        if (action == "ok") {
          return reply(200, wire::RotationItemJson(Take(r.Ok(seg[4]))));
        }
        return reply(200, wire::RotationItemJson(Take(r.Reset(seg[4]))));
      }
      if (seg[3] == "next" && seg.size() == 4) {
        route_is("POST /v1/rotations/{name}/next");
        method({"POST"});
        need(kClaim, name);
        Body b(req.body, {"n"});
        int n = static_cast<int>(b.Int("n", 1, 10000).value_or(1));
        Rotation r = Take(store_.GetRotation(name));
        Json list = Json::array();
        for (const RotationItem &i : Take(r.Next(n))) {
          list.push_back(wire::RotationItemJson(i));
        }
        return reply(200, {{"items", std::move(list)}});
      }
    }
    Throw(404, "no_route",
          fmt::format("no endpoint at {} {}", m,
                      req.target.substr(0, req.target.find('?'))));
  };
  for (int attempt = 0;; ++attempt) {
    try {
      out = handle();
      break;
    } catch (const HttpError &e) {
      if (e.status == 404 && !cached.empty()) {
        // The queue may have been dropped (and made again) elsewhere: a
        // handle from the cache is refreshed and the request made once more.
        // A 404 leaves nothing done, so the retry is safe.
        cache_.Forget(cached);
        cached.clear();
        if (hit && attempt == 0) continue;
      }
      out = Outcome{ErrorReply(e.status, e.code, e.message), std::nullopt};
      out.reply.headers = e.headers;
      break;
    }
  }
  out.reply.route = route;
  return out;
}

}  // namespace sqlq::server
