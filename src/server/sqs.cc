#include "server/sqs.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "server/ascii.h"
#include "server/claim_reply.h"
#include "server/sigv4.h"
#include "server/sqs_call.h"
#include "server/sqs_wire.h"
#include "server/target.h"
#include "server/trace.h"
#include "sqlq/text.h"

namespace sqlq::server {
namespace sqs {

[[noreturn]] void FailStatus(const Status& s) {
  switch (s.code()) {
    case Code::kNotFound:
      Fail(sqs::kNonExistentQueue, "The specified queue does not exist.");
    case Code::kInvalidArgument:
    case Code::kTooLarge:
      Fail(sqs::kInvalidParameterValue, s.message());
    case Code::kAlreadyExists:
      Fail(sqs::kQueueAlreadyExists, s.message());
    case Code::kBusy:
    case Code::kUnavailable:
    case Code::kTimeout:
    case Code::kPermissionDenied:
      Fail(sqs::kServiceUnavailable, s.message());
    default:
      Fail(sqs::kInternalFailure, s.message());
  }
}

// `v` when it is an object, else an empty one: to read an entry that is
// not a map as one with nothing in it.
const Json& AsObject(const Json& v) {
  static const Json kEmpty = Json::object();
  return v.is_object() ? v : kEmpty;
}

std::optional<std::int64_t> IntOf(const Json& v) {
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (!v.is_string()) return std::nullopt;
  const std::string& s = v.get_ref<const std::string&>();
  std::int64_t n = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) {
    return std::nullopt;
  }
  return n;
}

std::string Shown(const Json& v) {
  std::string text =
      v.is_string() ? v.get<std::string>()
                    : v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  return text;
}

// The queue named by a QueueUrl (http://HOST/ACCOUNT/NAME; the host is
// not checked: clients reach the server by many names).
std::string QueueOfUrl(std::string_view url) {
  const std::size_t slash = url.rfind('/');
  if (url.empty() || slash == std::string_view::npos ||
      slash + 1 == url.size()) {
    Fail(sqs::kNonExistentQueue, "The specified queue does not exist.");
  }
  return PercentDecode(url.substr(slash + 1));
}

bool ValidEntryId(std::string_view id) {
  return !id.empty() && id.size() <= 80 &&
         std::all_of(id.begin(), id.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
                  c == '-';
         });
}

// The entries of a batch request, checked as SQS checks them.
const Json& Entries(const Input& in) {
  const Json* e = in.Find("Entries");
  // The query protocol sends an empty list as one empty parameter.
  if (e == nullptr || (e->is_array() && e->empty()) ||
      (e->is_string() && e->get_ref<const std::string&>().empty())) {
    Fail(sqs::kEmptyBatchRequest,
         "There should be at least one entry in the request.");
  }
  if (!e->is_array()) {
    Fail(sqs::kInvalidParameterValue, "The parameter Entries must be a list.");
  }
  if (e->size() > kMaxBatch) {
    Fail(sqs::kTooManyEntriesInBatchRequest,
         fmt::format("Maximum number of entries per request are {}. You have "
                     "sent {}.",
                     kMaxBatch, e->size()));
  }
  std::set<std::string> ids;
  for (const Json& entry : *e) {
    Input x(AsObject(entry));
    const std::string id = x.String("Id").value_or("");
    if (!ValidEntryId(id)) {
      Fail(sqs::kInvalidBatchEntryId,
           "A batch entry id can only contain alphanumeric characters, "
           "hyphens and underscores. It can be at most 80 letters long.");
    }
    if (!ids.insert(id).second) {
      Fail(sqs::kBatchEntryIdsNotDistinct, fmt::format("Id {} repeated.", id));
    }
  }
  return *e;
}

Json FailedEntry(const std::string& id, const sqs::Error& e) {
  return Json{{"Id", id},
              {"SenderFault", e.status < 500},
              {"Code", std::string(e.code)},
              {"Message", e.message}};
}

std::int64_t Millis(Timestamp t) {
  return duration_cast<milliseconds>(t.time_since_epoch()).count();
}
}  // namespace sqs

using namespace sqs;  // NOLINT: the endpoint's own helpers

namespace {

// The characters SQS allows in a body and in string attributes: #x9, #xA,
// #xD, #x20 to #xD7FF, #xE000 to #xFFFD, #x10000 to #x10FFFF.
bool SqsText(std::string_view s) {
  if (!IsUtf8(s)) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') return false;
    // U+FFFE and U+FFFF: EF BF BE, EF BF BF.
    if (c == 0xEF && i + 2 < s.size() &&
        static_cast<unsigned char>(s[i + 1]) == 0xBF &&
        (static_cast<unsigned char>(s[i + 2]) & 0xFE) == 0xBE) {
      return false;
    }
  }
  return true;
}

// A message attribute: its type ("String", "Number", "Binary", each
// optionally with ".label") and value (bytes, for Binary).
struct Attribute {
  std::string type;
  std::string value;
  bool binary() const { return type.starts_with("Binary"); }
};
using Attributes = std::map<std::string, Attribute>;

// MessageGroupId and MessageDeduplicationId: letters, digits and
// punctuation (!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~).
bool ValidIdText(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return c > ' ' && c < 127; });
}

bool ValidAttributeName(std::string_view n) {
  if (n.empty() || n.size() > kMaxHeaderKey - kTypeHeader.size()) return false;
  if (n.front() == '.' || n.back() == '.' ||
      n.find("..") != std::string_view::npos) {
    return false;
  }
  const std::string lower = AsciiLower(n);
  if (lower.starts_with("aws.") || lower.starts_with("amazon.")) return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
           c == '-' || c == '.';
  });
}

bool ValidNumber(std::string_view s) {
  std::size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  std::size_t digits = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    ++i;
    ++digits;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      ++i;
      ++digits;
    }
  }
  if (digits == 0 || digits > 38) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    std::size_t exp = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      ++i;
      ++exp;
    }
    if (exp == 0) return false;
  }
  return i == s.size();
}

Attributes ReadAttributes(const Json& map) {
  if (map.size() > kMaxMessageAttributes) {
    Fail(sqs::kInvalidParameterValue,
         fmt::format("Number of message attributes [{}] exceeds the allowed "
                     "maximum [{}].",
                     map.size(), kMaxMessageAttributes));
  }
  Attributes out;
  for (const auto& [name, v] : map.items()) {
    if (!ValidAttributeName(name)) {
      Fail(sqs::kInvalidParameterValue,
           fmt::format("Message attribute name '{}' is invalid: letters, "
                       "digits, '_', '-' and '.', at most {} characters, not "
                       "starting with AWS. or Amazon.",
                       name, kMaxHeaderKey - kTypeHeader.size()));
    }
    Input a(AsObject(v));
    Attribute attr;
    attr.type = a.String("DataType").value_or("");
    const std::string base = attr.type.substr(0, attr.type.find('.'));
    if (base != "String" && base != "Number" && base != "Binary") {
      Fail(sqs::kInvalidParameterValue,
           fmt::format("The type of message attribute '{}' is invalid. "
                       "You must use only the following supported type "
                       "prefixes: Binary, Number, String.",
                       name));
    }
    if (attr.type.size() > 256 || !SqsText(attr.type)) {
      Fail(sqs::kInvalidParameterValue,
           fmt::format("The type of message attribute '{}' is invalid.", name));
    }
    if (attr.binary()) {
      auto bytes = Base64Decode(a.String("BinaryValue").value_or(""));
      if (!bytes.ok() || bytes->empty()) {
        Fail(sqs::kInvalidParameterValue,
             fmt::format("Message attribute '{}' must contain a non-empty "
                         "base64 binary value.",
                         name));
      }
      attr.value = std::move(*bytes);
    } else {
      attr.value = a.String("StringValue").value_or("");
      if (attr.value.empty()) {
        Fail(sqs::kInvalidParameterValue,
             fmt::format("Message attribute '{}' must contain a non-empty "
                         "value of message attribute type '{}'.",
                         name, attr.type));
      }
      if (!SqsText(attr.value)) {
        Fail(sqs::kInvalidMessageContents,
             fmt::format("Message attribute '{}' has characters outside "
                         "those SQS allows.",
                         name));
      }
      if (base == "Number" && !ValidNumber(attr.value)) {
        Fail(sqs::kInvalidParameterValue,
             fmt::format("Message attribute '{}' of type Number has the "
                         "value '{}', which is not a number.",
                         name, attr.value));
      }
    }
    out.emplace(name, std::move(attr));
  }
  return out;
}

// MD5OfMessageAttributes as SQS computes it: for each attribute in name
// order, the name, the type and the value, each preceded by its length as
// four bytes big-endian, with a byte 1 (string or number) or 2 (binary)
// before the value.
std::string AttributesMd5(const Attributes& attrs) {
  std::string buf;
  auto put = [&](std::string_view s) {
    const auto n = static_cast<std::uint32_t>(s.size());
    for (int shift : {24, 16, 8, 0}) buf += static_cast<char>(n >> shift);
    buf += s;
  };
  for (const auto& [name, a] : attrs) {
    put(name);
    put(a.type);
    buf += static_cast<char>(a.binary() ? 2 : 1);
    put(a.value);
  }
  return sigv4::Md5Hex(buf);
}

// The bytes SQS counts against a message's size limit: the body and
// every attribute's name, type and value.
std::size_t SizeOf(std::string_view body, const Attributes& attrs) {
  std::size_t n = body.size();
  for (const auto& [name, a] : attrs) {
    n += name.size() + a.type.size() + a.value.size();
  }
  return n;
}

void ToHeaders(const Attributes& attrs, Headers& h) {
  for (const auto& [name, a] : attrs) {
    h[name] = a.binary() ? Base64Encode(a.value) : a.value;
    if (a.type != "String") h[std::string(kTypeHeader) + name] = a.type;
  }
}

// A message's headers as SQS message attributes: those named as SQS names
// them, typed by their sqs:type: header ("String" without one).
Attributes FromHeaders(const Headers& h) {
  Attributes out;
  for (const auto& [key, value] : h) {
    if (key.find(':') != std::string::npos || !ValidAttributeName(key)) {
      continue;
    }
    Attribute a;
    auto type = h.find(std::string(kTypeHeader) + key);
    a.type = type == h.end() ? "String" : type->second;
    if (a.binary()) {
      auto bytes = Base64Decode(value);
      if (!bytes.ok()) continue;
      a.value = std::move(*bytes);
    } else {
      if (!SqsText(value) || value.empty()) continue;
      a.value = value;
    }
    out.emplace(key, std::move(a));
  }
  return out;
}

Json AttributesJson(const Attributes& attrs) {
  Json out = Json::object();
  for (const auto& [name, a] : attrs) {
    out[name] =
        a.binary()
            ? Json{{"BinaryValue", Base64Encode(a.value)}, {"DataType", a.type}}
            : Json{{"StringValue", a.value}, {"DataType", a.type}};
  }
  return out;
}

// Whether `name` is picked by a list of MessageAttributeNames: "All",
// ".*", a name, or a prefix followed by ".*".
bool Picked(const std::vector<std::string>& wanted, std::string_view name) {
  for (const std::string& w : wanted) {
    if (w == "All" || w == ".*" || w == name) return true;
    if (w.ends_with(".*") && name.starts_with(w.substr(0, w.size() - 1))) {
      return true;
    }
  }
  return false;
}

}  // namespace

void SqsApi::Call::Authenticate() {
  // The region goes into ARNs: one that looks like a region, or the
  // default.
  if (auto a = sigv4::ParseAuthorization(
          sigv4::HeaderValue(r_.headers, "authorization").value_or(""));
      a.ok() && !a->region.empty() && a->region.size() <= 32 &&
      std::all_of(a->region.begin(), a->region.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
      })) {
    region_ = a->region;
  }
  if (!api_.auth_.enabled()) {
    // No token file: loopback only, and no signature needed, so no page
    // in a browser may reach the endpoint (a form, a link, a script).
    // Browsers mark their requests; SQS clients send none of these.
    for (const char* h :
         {"origin", "sec-fetch-site", "sec-fetch-mode", "sec-fetch-dest"}) {
      if (sigv4::HeaderValue(r_.headers, h)) {
        Fail(sqs::kAccessDenied,
             "Requests from web browsers are not accepted by the SQS "
             "endpoint without a token file.");
      }
    }
    return;
  }
  // An address that failed too often is refused before its signature is
  // checked (docs/server.md, "Failed authentications").
  if (const auto wait = api_.failures_.Blocked(r_.peer); wait.count() > 0) {
    Fail(sqs::kRequestThrottled,
         fmt::format("Too many failed authentications from this address; "
                     "retry in {} s.",
                     (wait.count() + 999) / 1000));
  }
  // The key that signs is the key whose grants apply, even when the token
  // file is reloaded meanwhile.
  std::shared_ptr<const KeyEntry> signer;
  const sigv4::Verdict v = sigv4::Verify(
      {.method = r_.method,
       .target = r_.target,
       .headers = r_.headers,
       .body = r_.body},
      [&](std::string_view id) -> const std::string* {
        signer = api_.auth_.FindKey(id);
        return signer == nullptr ? nullptr : &signer->secret;
      },
      api_.now_());
  if (v.refusal != sigv4::Refusal::kNone || signer == nullptr) {
    // Asking unsigned is no guess (as a request without a token is not).
    if (v.refusal != sigv4::Refusal::kMissing) {
      api_.failures_.Failed(r_.peer, "sqs_signature");
    }
    const sigv4::SqsError e = sigv4::ErrorOf(v.refusal);
    Fail(static_cast<unsigned>(e.status), e.code, v.message);
  }
  key_ = std::move(signer);
}

Outcome SqsApi::Call::Run() {
  // Known before the request is read, for the error of one that does not.
  if (sigv4::HeaderValue(r_.headers, "x-amz-target")) {
    call_.protocol = sqs::Protocol::kJson;
  }
  // Before the body is read: an unsigned request costs no parsing.
  Authenticate();
  call_ = sqs::Read(r_);
  // The query protocol may name the queue by the path instead of a
  // QueueUrl (a POST to /ACCOUNT/NAME), as kombu does.
  const std::string_view path =
      std::string_view(r_.target).substr(0, r_.target.find('?'));
  if (!call_.input.contains("QueueUrl") &&
      std::count(path.begin(), path.end(), '/') == 2 && !path.ends_with('/')) {
    call_.input["QueueUrl"] = std::string(path);
  }
  if (call_.action.empty()) {
    Fail(sqs::kMissingParameter,
         "The request must contain the parameter "
         "Action.");
  }
  const Input in(call_.input);
  const std::string& a = call_.action;
  auto reply = [](Reply r) { return Outcome{std::move(r), std::nullopt}; };
  if (a == "CreateQueue") return reply(CreateQueue(in));
  if (a == "GetQueueUrl") {
    const std::string name = in.Need("QueueName");
    if (!Sees(name)) Denied(name);
    Queue(name);
    return reply(Done({{"QueueUrl", UrlOf(name)}}));
  }
  if (a == "ListQueues") return reply(ListQueues(in));
  if (a == "DeleteQueue") {
    const std::string name = QueueOfUrl(in.Need("QueueUrl"));
    Need(kAdmin, name);
    api_.cache_.Forget(name);
    Status s = api_.store_.DropQueue(name);
    // Again: a request meanwhile may have cached the handle being dropped.
    api_.cache_.Forget(name);
    if (!s.ok()) FailStatus(s);
    return reply(Done(Json()));
  }
  if (a == "PurgeQueue") {
    const std::string name = QueueOfUrl(in.Need("QueueUrl"));
    Need(kAdmin, name);
    Take(Queue(name).Purge());
    return reply(Done(Json()));
  }
  if (a == "GetQueueAttributes") return reply(GetQueueAttributes(in));
  if (a == "TagQueue" || a == "UntagQueue" || a == "ListQueueTags") {
    return reply(Tags(in));
  }
  if (a == "ListDeadLetterSourceQueues") {
    return reply(ListDeadLetterSourceQueues(in));
  }
  if (a == "StartMessageMoveTask" || a == "ListMessageMoveTasks" ||
      a == "CancelMessageMoveTask") {
    return reply(MoveTasks(in));
  }
  if (a == "SetQueueAttributes") return reply(SetQueueAttributes(in));
  if (a == "SendMessage") return reply(SendMessage(in));
  if (a == "SendMessageBatch") return reply(SendMessageBatch(in));
  if (a == "ReceiveMessage") return ReceiveMessage(in);
  if (a == "DeleteMessage") return reply(DeleteMessage(in));
  if (a == "DeleteMessageBatch") return reply(DeleteMessageBatch(in));
  if (a == "ChangeMessageVisibility") {
    return reply(ChangeMessageVisibility(in));
  }
  if (a == "ChangeMessageVisibilityBatch") {
    return reply(ChangeMessageVisibilityBatch(in));
  }
  Fail(sqs::kInvalidAction,
       fmt::format("The action {} is not valid for this endpoint.", a));
}

// ---- messages ----

SqsApi::Call::Outgoing SqsApi::Call::ReadMessage(const Input& in,
                                                 const QueueOptions& o) const {
  Outgoing out;
  out.message.payload = in.Need("MessageBody");
  if (out.message.payload.empty()) {
    Fail(sqs::kInvalidParameterValue,
         "The message body must be at least one character.");
  }
  if (!SqsText(out.message.payload)) {
    Fail(sqs::kInvalidMessageContents,
         "Invalid characters found. Valid unicode characters are #x9 | #xA | "
         "#xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF");
  }
  const Attributes attrs = ReadAttributes(in.Object("MessageAttributes"));
  out.size = SizeOf(out.message.payload, attrs);
  if (out.size > o.max_payload_bytes) {
    Fail(sqs::kInvalidParameterValue,
         fmt::format("One or more parameters are invalid. Reason: Message "
                     "must be shorter than {} bytes.",
                     o.max_payload_bytes));
  }
  out.fifo = IsFifo(o);
  std::optional<std::int64_t> delay = in.Int("DelaySeconds", 0, 900);
  if (delay && out.fifo) {
    Fail(sqs::kInvalidParameterValue,
         "The request include parameter DelaySeconds that is not valid for "
         "this queue type: FIFO queues take a delay per queue only.");
  }
  if (!delay) {
    if (auto d = KeptValue(o, "DelaySeconds")) delay = IntOf(Json(*d));
    // Set natively, a label may hold anything: only SQS's range counts.
    if (delay && (*delay < 0 || *delay > 900)) delay.reset();
  }
  if (delay) out.message.delay = seconds(*delay);
  auto group = in.String("MessageGroupId");
  auto dedup = in.String("MessageDeduplicationId");
  for (const auto* id : {&group, &dedup}) {
    if (*id && (id->value().empty() || id->value().size() > 128 ||
                !ValidIdText(**id))) {
      Fail(sqs::kInvalidParameterValue,
           "MessageGroupId and MessageDeduplicationId are 1 to 128 "
           "characters, letters, digits and punctuation.");
    }
  }
  if (out.fifo) {
    if (!group) {
      Fail(sqs::kMissingParameter,
           "The request must contain the parameter MessageGroupId.");
    }
    if (!dedup) {
      if (KeptValue(o, "ContentBasedDeduplication") != "true") {
        Fail(sqs::kInvalidParameterValue,
             "The queue should either have ContentBasedDeduplication "
             "enabled or MessageDeduplicationId provided explicitly");
      }
      dedup = sigv4::Sha256Hex(out.message.payload);
    }
    out.message.dedup_key = *dedup;
  } else if (dedup) {
    Fail(sqs::kInvalidParameterValue,
         "The request include parameter MessageDeduplicationId that is not "
         "valid for this queue type: FIFO queues only.");
  }
  if (group) out.message.group = *group;
  ToHeaders(attrs, out.message.headers);
  // The one system attribute a send may carry: AWS X-Ray's trace header,
  // which the AWS SDKs set when the application traces. Kept as the
  // message's W3C traceparent header (unless an attribute set one), so that
  // a sqlq worker continues the trace, and a receive that asks for
  // AWSTraceHeader gets it back.
  if (const Json* system = in.Find("MessageSystemAttributes")) {
    for (const auto& [name, v] : AsObject(*system).items()) {
      if (name != "AWSTraceHeader") {
        Fail(sqs::kInvalidParameterValue,
             fmt::format("Message system attribute name '{}' is invalid: "
                         "only AWSTraceHeader is taken.",
                         name));
      }
      Input a(AsObject(v));
      auto traceparent =
          TraceparentOfXRay(a.String("StringValue").value_or(""));
      if (!traceparent) {
        Fail(sqs::kInvalidParameterValue,
             "The message system attribute AWSTraceHeader must be an AWS "
             "X-Ray trace header: Root=1-XXXXXXXX-YYYYYYYYYYYYYYYYYYYYYYYY;"
             "Parent=ZZZZZZZZZZZZZZZZ;Sampled=1");
      }
      out.message.headers.emplace("traceparent", std::move(*traceparent));
    }
  }
  out.body_md5 = sigv4::Md5Hex(out.message.payload);
  if (!attrs.empty()) out.attributes_md5 = AttributesMd5(attrs);
  return out;
}

Json SqsApi::Call::SentJson(const Outgoing& m, const SendResult& r) const {
  Json out = {{"MessageId", std::to_string(r.id)},
              {"MD5OfMessageBody", m.body_md5}};
  if (!m.attributes_md5.empty()) {
    out["MD5OfMessageAttributes"] = m.attributes_md5;
  }
  // A FIFO queue's messages are numbered in send order: sqlq's ids are.
  if (m.fifo) out["SequenceNumber"] = std::to_string(r.id);
  return out;
}

Reply SqsApi::Call::SendMessage(const Input& in) {
  const std::string name = QueueOfUrl(in.Need("QueueUrl"));
  Need(kSend, name);
  WorkQueue q = Queue(name);
  const Outgoing m = ReadMessage(in, q.options());
  const SendResult r = Take(q.Send(m.message));
  return Done(SentJson(m, r));
}

Reply SqsApi::Call::SendMessageBatch(const Input& in) {
  const std::string name = QueueOfUrl(in.Need("QueueUrl"));
  Need(kSend, name);
  const Json& entries = Entries(in);
  WorkQueue q = Queue(name);
  const QueueOptions& o = q.options();
  // Entries that are wrong fail on their own; the others are sent together.
  std::vector<Outgoing> good;
  std::vector<std::string> good_ids;
  Json failed = Json::array();
  std::size_t total = 0;
  for (const Json& e : entries) {
    const Input x(AsObject(e));
    const std::string id = x.Need("Id");
    try {
      good.push_back(ReadMessage(x, o));
      good_ids.push_back(id);
      total += good.back().size;
    } catch (const sqs::Error& err) {
      failed.push_back(FailedEntry(id, err));
    }
  }
  if (total > o.max_payload_bytes) {
    Fail(sqs::kBatchRequestTooLong,
         fmt::format("Batch requests cannot be longer than {} bytes. You have "
                     "sent {} bytes.",
                     o.max_payload_bytes, total));
  }
  Json ok = Json::array();
  if (!good.empty()) {
    std::vector<Message> batch;
    batch.reserve(good.size());
    for (Outgoing& m : good) batch.push_back(std::move(m.message));
    const std::vector<SendResult> sent = Take(q.SendBatch(batch));
    for (std::size_t i = 0; i < sent.size(); ++i) {
      Json entry = SentJson(good[i], sent[i]);
      entry["Id"] = good_ids[i];
      ok.push_back(std::move(entry));
    }
  }
  Json out = Json::object();
  if (!ok.empty()) out["Successful"] = std::move(ok);
  if (!failed.empty()) out["Failed"] = std::move(failed);
  return Done(out);
}

namespace {

// What a ReceiveMessage asked to see of each message.
struct Wanted {
  std::set<std::string> system;  // "All" or names
  std::vector<std::string> attributes;
  bool fifo = false;  // of a FIFO queue
  bool Wants(const std::string& name) const {
    return system.contains("All") || system.contains(name);
  }
};

Json ReceivedJson(WorkQueue& q, const ClaimedMessage& m, const Wanted& shown,
                  std::int64_t received_ms) {
  const bool text = SqsText(m.payload);
  // A payload sent natively that is not text SQS allows goes out in base64.
  const std::string body = text ? m.payload : Base64Encode(m.payload);
  Json out = {{"MessageId", std::to_string(m.id)},
              {"ReceiptHandle", m.receipt},
              {"MD5OfBody", sigv4::Md5Hex(body)},
              {"Body", body}};
  Json system = Json::object();
  if (shown.Wants("SenderId")) system["SenderId"] = kSqsAccount;
  if (shown.Wants("SentTimestamp")) {
    system["SentTimestamp"] = std::to_string(Millis(m.enqueued_at));
  }
  if (shown.Wants("ApproximateReceiveCount")) {
    system["ApproximateReceiveCount"] = std::to_string(m.attempt);
  }
  if (shown.Wants("ApproximateFirstReceiveTimestamp")) {
    // sqlq keeps when each failed attempt ended, not when the first began:
    // for a message received before, the end of its first recorded attempt.
    std::int64_t first = received_ms;
    if (m.attempt > 1) {
      auto info = q.Get(m.id);
      if (info.ok() && !info->errors.empty()) {
        first = Millis(info->errors.front().at);
      }
    }
    system["ApproximateFirstReceiveTimestamp"] = std::to_string(first);
  }
  if (shown.Wants("MessageGroupId") && !m.group.empty()) {
    system["MessageGroupId"] = m.group;
  }
  if (shown.fifo && shown.Wants("SequenceNumber")) {
    system["SequenceNumber"] = std::to_string(m.id);
  }
  if (shown.fifo && shown.Wants("MessageDeduplicationId")) {
    auto info = q.Get(m.id);
    if (info.ok() && !info->dedup_key.empty()) {
      system["MessageDeduplicationId"] = info->dedup_key;
    }
  }
  if (shown.Wants("AWSTraceHeader")) {
    auto tp = m.headers.find("traceparent");
    if (tp != m.headers.end()) {
      if (auto xray = XRayOfTraceparent(tp->second)) {
        system["AWSTraceHeader"] = std::move(*xray);
      }
    }
  }
  if (!system.empty()) out["Attributes"] = std::move(system);
  if (!shown.attributes.empty()) {
    Attributes attrs = FromHeaders(m.headers);
    std::erase_if(attrs, [&](const auto& a) {
      return !Picked(shown.attributes, a.first);
    });
    if (!attrs.empty()) {
      out["MD5OfMessageAttributes"] = AttributesMd5(attrs);
      out["MessageAttributes"] = AttributesJson(attrs);
    }
  }
  return out;
}

}  // namespace

Outcome SqsApi::Call::ReceiveMessage(const Input& in) {
  const std::string name = QueueOfUrl(in.Need("QueueUrl"));
  Need(kClaim, name);
  ClaimOptions o;
  o.max =
      static_cast<int>(in.Int("MaxNumberOfMessages", 1, kMaxBatch).value_or(1));
  if (auto v = in.Int("VisibilityTimeout", 0, kMaxVisibility)) {
    o.lease = *v == 0 ? Duration(1) : Duration(seconds(*v));
  }
  std::optional<std::int64_t> wait_s =
      in.Int("WaitTimeSeconds", 0, kMaxWaitSeconds);
  o.max_bytes = ClaimPayloadBudget(api_.limits_.max_reply_bytes, o.max);
  Wanted shown;
  for (const char* list : {"AttributeNames", "MessageSystemAttributeNames"}) {
    for (std::string& n : in.Strings(list)) shown.system.insert(std::move(n));
  }
  shown.attributes = in.Strings("MessageAttributeNames");
  WorkQueue q = Queue(name);
  const QueueOptions qo = q.options();
  shown.fifo = IsFifo(qo);
  // Without WaitTimeSeconds, the queue's ReceiveMessageWaitTimeSeconds.
  if (!wait_s) {
    if (auto d = KeptValue(qo, "ReceiveMessageWaitTimeSeconds")) {
      wait_s = IntOf(Json(*d));
      if (wait_s && (*wait_s < 0 || *wait_s > kMaxWaitSeconds)) wait_s.reset();
    }
  }
  const Duration wait = seconds(wait_s.value_or(0));
  // How the receive is answered, now or once parked: the call's protocol
  // and action only (not its input), the queue's handle and name.
  sqs::Call reply_as{.protocol = call_.protocol, .action = call_.action};
  auto answer = [call = std::move(reply_as), shown, q, name,
                 cache = &api_.cache_](
                    const Result<std::vector<ClaimedMessage>>& r,
                    const ClaimNote&) mutable -> Reply {
    try {
      if (!r.ok()) {
        // Dropped (perhaps made again) elsewhere: the next request looks
        // the queue up afresh.
        if (r.status().code() == Code::kNotFound) cache->Forget(name);
        FailStatus(r.status());
      }
      const std::int64_t now =
          Millis(std::chrono::time_point_cast<std::chrono::microseconds>(
              std::chrono::system_clock::now()));
      Json messages = Json::array();
      for (const ClaimedMessage& m : *r) {
        messages.push_back(ReceivedJson(q, m, shown, now));
      }
      Json out = Json::object();
      if (!messages.empty()) out["Messages"] = std::move(messages);
      return sqs::Write(call, out);
    } catch (const sqs::Error& e) {
      return sqs::WriteError(call.protocol, e);
    } catch (const std::exception& e) {
      return sqs::WriteError(call.protocol,
                             {500, sqs::kInternalFailure.code, {}, e.what()});
    }
  };
  if (wait.count() == 0) {
    ClaimNote note;
    auto claimed = q.Claim(o, &note);
    return Outcome{answer(claimed, note), std::nullopt};
  }
  return Outcome{
      Reply(), ParkedClaim{.queue = q,
                           .options = o,
                           .deadline = std::chrono::steady_clock::now() + wait,
                           .token = key_ == nullptr ? "" : key_->id,
                           .answer = std::move(answer)}};
}

Reply SqsApi::Call::DeleteMessage(const Input& in) {
  const std::string name = QueueOfUrl(in.Need("QueueUrl"));
  Need(kClaim, name);
  const std::string receipt = in.Need("ReceiptHandle");
  Status s = Queue(name).Ack(receipt);
  if (s.code() == Code::kNotFound) RetryIfCached();
  // A stale receipt (the message was received again since) deletes
  // nothing and succeeds, as SQS's does; so does one of a message already
  // gone.
  if (!s.ok() && s.code() != Code::kFailedPrecondition &&
      s.code() != Code::kNotFound) {
    if (s.code() == Code::kInvalidArgument) {
      Fail(sqs::kReceiptHandleIsInvalid,
           fmt::format("The input receipt handle \"{}\" is not a valid "
                       "receipt handle.",
                       receipt));
    }
    FailStatus(s);
  }
  return Done(Json());
}

Reply SqsApi::Call::DeleteMessageBatch(const Input& in) {
  const std::string name = QueueOfUrl(in.Need("QueueUrl"));
  Need(kClaim, name);
  const Json& entries = Entries(in);
  std::vector<std::string> receipts;
  for (const Json& e : entries) {
    receipts.push_back(Input(AsObject(e)).Need("ReceiptHandle"));
  }
  const std::vector<Status> acked = Take(Queue(name).AckBatch(receipts));
  for (const Status& s : acked) {
    if (s.code() == Code::kNotFound) RetryIfCached();
  }
  Json ok = Json::array();
  Json failed = Json::array();
  for (std::size_t i = 0; i < acked.size(); ++i) {
    const std::string id = entries[i]["Id"].get<std::string>();
    const Status& s = acked[i];
    if (s.ok() || s.code() == Code::kFailedPrecondition ||
        s.code() == Code::kNotFound) {
      ok.push_back({{"Id", id}});
    } else if (s.code() == Code::kInvalidArgument) {
      failed.push_back(FailedEntry(
          id, {400,
               sqs::kReceiptHandleIsInvalid.code,
               {},
               fmt::format("The input receipt handle \"{}\" is not a valid "
                           "receipt handle.",
                           receipts[i])}));
    } else {
      failed.push_back(
          FailedEntry(id, {500, sqs::kInternalFailure.code, {}, s.message()}));
    }
  }
  Json out = Json::object();
  if (!ok.empty()) out["Successful"] = std::move(ok);
  if (!failed.empty()) out["Failed"] = std::move(failed);
  return Done(out);
}

namespace {

// ChangeMessageVisibility of one receipt: the lease renewed to `s` seconds
// from now (0: the message is visible again at once). `cached`: the handle
// came from the cache (Call::RetryIfCached).
void ChangeVisibility(WorkQueue& q, const std::string& receipt, std::int64_t s,
                      bool cached) {
  const Duration lease = s == 0 ? Duration(1) : Duration(seconds(s));
  auto r = q.Extend(receipt, lease);
  if (r.ok()) return;
  switch (r.status().code()) {
    case Code::kInvalidArgument:
      Fail(sqs::kReceiptHandleIsInvalid,
           fmt::format("The input receipt handle \"{}\" is not a valid "
                       "receipt handle.",
                       receipt));
    case Code::kFailedPrecondition:
      Fail(sqs::kInvalidParameterValue,
           fmt::format("Value {} for parameter ReceiptHandle is invalid. "
                       "Reason: The receipt handle has expired.",
                       receipt));
    case Code::kNotFound:
      if (cached) {
        Fail(sqs::kNonExistentQueue, "The specified queue does not exist.");
      }
      Fail(sqs::kMessageNotInflight,
           "The message referred to is not in flight.");
    default:
      FailStatus(r.status());
  }
}

}  // namespace

Reply SqsApi::Call::ChangeMessageVisibility(const Input& in) {
  const std::string name = QueueOfUrl(in.Need("QueueUrl"));
  Need(kClaim, name);
  const std::string receipt = in.Need("ReceiptHandle");
  const auto s = in.Int("VisibilityTimeout", 0, kMaxVisibility);
  if (!s) {
    Fail(sqs::kMissingParameter,
         "The request must contain the parameter VisibilityTimeout.");
  }
  WorkQueue q = Queue(name);
  ChangeVisibility(q, receipt, *s, hit_);
  return Done(Json());
}

Reply SqsApi::Call::ChangeMessageVisibilityBatch(const Input& in) {
  const std::string name = QueueOfUrl(in.Need("QueueUrl"));
  Need(kClaim, name);
  const Json& entries = Entries(in);
  WorkQueue q = Queue(name);
  Json ok = Json::array();
  Json failed = Json::array();
  for (const Json& e : entries) {
    const Input x(AsObject(e));
    const std::string id = x.Need("Id");
    try {
      const auto s = x.Int("VisibilityTimeout", 0, kMaxVisibility);
      if (!s) {
        Fail(sqs::kMissingParameter,
             "The request must contain the parameter VisibilityTimeout.");
      }
      ChangeVisibility(q, x.Need("ReceiptHandle"), *s, hit_);
      ok.push_back({{"Id", id}});
    } catch (const sqs::Error& err) {
      // A queue gone fails the whole request.
      if (err.code == sqs::kNonExistentQueue.code) throw;
      failed.push_back(FailedEntry(id, err));
    }
  }
  Json out = Json::object();
  if (!ok.empty()) out["Successful"] = std::move(ok);
  if (!failed.empty()) out["Failed"] = std::move(failed);
  return Done(out);
}

// ---- the endpoint ----

SqsApi::SqsApi(Store& store, const Limits& limits, const Auth& auth,
               AuthFailures& failures, QueueCache& cache,
               std::function<std::chrono::system_clock::time_point()> now)
    : store_(store),
      limits_(limits),
      auth_(auth),
      failures_(failures),
      cache_(cache),
      now_(std::move(now)) {}

std::span<const std::string_view> SqsApi::Actions() {
  static constexpr std::string_view kActions[] = {
      "CreateQueue",
      "GetQueueUrl",
      "ListQueues",
      "DeleteQueue",
      "PurgeQueue",
      "GetQueueAttributes",
      "SetQueueAttributes",
      "SendMessage",
      "SendMessageBatch",
      "ReceiveMessage",
      "DeleteMessage",
      "DeleteMessageBatch",
      "ChangeMessageVisibility",
      "ChangeMessageVisibilityBatch",
      "TagQueue",
      "UntagQueue",
      "ListQueueTags",
      "ListDeadLetterSourceQueues",
      "StartMessageMoveTask",
      "ListMessageMoveTasks",
      "CancelMessageMoveTask"};
  return kActions;
}

Outcome SqsApi::Handle(const Request& r) {
  // Routes label metrics: only actions this endpoint knows, so that a
  // client cannot make up new series.
  static const std::set<std::string, std::less<>> kKnown(Actions().begin(),
                                                         Actions().end());
  Outcome out;
  std::string action;
  for (int attempt = 0;; ++attempt) {
    Call call(*this, r);
    try {
      out = call.Run();
      action = call.action();
      break;
    } catch (const sqs::Error& e) {
      action = call.action();
      // The queue may have been dropped (and made again) elsewhere: a
      // handle from the cache is refreshed and the request made once more.
      // Nothing is done before a queue is found missing, so that is safe.
      if (e.code == sqs::kNonExistentQueue.code && !call.cached().empty()) {
        cache_.Forget(call.cached());
        if (call.hit() && attempt == 0) continue;
      }
      out = Outcome{sqs::WriteError(call.protocol(), e), std::nullopt};
      break;
    } catch (const HttpError& e) {  // a malformed percent escape
      out = Outcome{
          sqs::WriteError(call.protocol(),
                          {400, sqs::kMalformedInput.code, {}, e.message}),
          std::nullopt};
      action = call.action();
      break;
    } catch (const std::exception& e) {  // a bug: answered, not fatal
      out = Outcome{
          sqs::WriteError(call.protocol(),
                          {500, sqs::kInternalFailure.code, {}, e.what()}),
          std::nullopt};
      action = call.action();
      break;
    }
  }
  out.reply.route =
      kKnown.contains(action) ? "SQS " + action : std::string("SQS (other)");
  return out;
}

}  // namespace sqlq::server
