// The SQS endpoint's queue operations: queues and their attributes, tags,
// dead-letter queues and moving messages back from one (docs/sqs.md).
//
// SQS attributes that are sqlq options map onto them (VisibilityTimeout:
// lease; MaximumMessageSize: max_payload_bytes; RedrivePolicy:
// max_attempts and dead_letter_queue; FifoQueue: ordered groups and a
// dedup window). The others are kept in the queue's labels under "sqs:"
// and applied by this endpoint (DelaySeconds, ReceiveMessageWaitTimeSeconds)
// or only kept and shown.

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "server/sqs_call.h"
#include "sqlq/text.h"
#include "wire/json_parse.h"

namespace sqlq::server {

using namespace sqs;  // NOLINT: the endpoint's own helpers

namespace {

constexpr std::string_view kTagsLabel = "sqs:tags";
constexpr std::string_view kModifiedLabel = "sqs:LastModifiedTimestamp";
constexpr std::size_t kMaxTags = 50;
constexpr Duration kFifoDedupWindow = std::chrono::minutes(5);

std::string Label(std::string_view attribute) {
  return std::string(kLabelPrefix) + std::string(attribute);
}

// The attributes kept in labels, with the range of their values (numbers)
// or the values they may take (names); `fifo` ones only on FIFO queues.
struct KeptAttribute {
  std::string_view name;
  std::int64_t lo = 0, hi = 0;            // numbers, when hi > 0
  std::vector<std::string_view> choices;  // names; empty: any text
  bool fifo = false;
  std::string_view standard_value;  // shown when unset; empty: not shown
};

const std::vector<KeptAttribute>& Kept() {
  static const std::vector<KeptAttribute> kKept = {
      {.name = "DelaySeconds", .lo = 0, .hi = 900, .standard_value = "0"},
      {.name = "MessageRetentionPeriod",
       .lo = 60,
       .hi = 1209600,
       .standard_value = "345600"},
      {.name = "ReceiveMessageWaitTimeSeconds",
       .lo = 0,
       .hi = 20,
       .standard_value = "0"},
      {.name = "KmsDataKeyReusePeriodSeconds", .lo = 60, .hi = 86400},
      {.name = "SqsManagedSseEnabled",
       .choices = {"true", "false"},
       .standard_value = "true"},
      {.name = "KmsMasterKeyId"},
      {.name = "Policy"},
      {.name = "RedriveAllowPolicy"},
      {.name = "ContentBasedDeduplication",
       .choices = {"true", "false"},
       .fifo = true,
       .standard_value = "false"},
      {.name = "DeduplicationScope",
       .choices = {"messageGroup", "queue"},
       .fifo = true,
       .standard_value = "queue"},
      {.name = "FifoThroughputLimit",
       .choices = {"perQueue", "perMessageGroupId"},
       .fifo = true,
       .standard_value = "perQueue"},
  };
  return kKept;
}

const KeptAttribute* FindKept(std::string_view name) {
  for (const KeptAttribute& k : Kept()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

[[noreturn]] void BadValue(std::string_view name, const Json& v,
                           std::string_view why) {
  Fail(kInvalidAttributeValue,
       fmt::format("Invalid value for the parameter {}: '{}' ({})", name,
                   Shown(v), why));
}

std::int64_t NumberIn(std::string_view name, const Json& v, std::int64_t lo,
                      std::int64_t hi) {
  auto n = IntOf(v);
  if (!n || *n < lo || *n > hi) {
    BadValue(name, v, fmt::format("{} to {}", lo, hi));
  }
  return *n;
}

std::string Text(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::map<std::string, std::string> TagsOf(const QueueOptions& o) {
  std::map<std::string, std::string> tags;
  auto it = o.labels.find(std::string(kTagsLabel));
  if (it == o.labels.end()) return tags;
  Json parsed;
  // A label someone else wrote may be anything: then no tags.
  if (wire::ParseJson(it->second, {}, "the tags", parsed)) return tags;
  for (const auto& [k, v] : parsed.items()) {
    if (v.is_string()) tags[k] = v.get<std::string>();
  }
  return tags;
}

void SetTags(QueueOptions& o, const std::map<std::string, std::string>& tags) {
  if (tags.empty()) {
    o.labels.erase(std::string(kTagsLabel));
  } else {
    o.labels[std::string(kTagsLabel)] = Json(tags).dump();
  }
}

// Adds tags (a map of the input) to `tags`, checked as SQS checks them.
void AddTags(const Json& given, std::map<std::string, std::string>& tags) {
  for (const auto& [k, v] : given.items()) {
    if (!v.is_string()) {
      Fail(kInvalidParameterValue,
           fmt::format("The value of tag {} must be a string.", k));
    }
    const std::string& value = v.get_ref<const std::string&>();
    if (k.empty() || k.size() > 128 || value.size() > 256 || !IsUtf8(k) ||
        !IsUtf8(value)) {
      Fail(kInvalidParameterValue,
           "Tag keys are 1 to 128 characters and values up to 256.");
    }
    tags[k] = value;
  }
  if (tags.size() > kMaxTags) {
    Fail(kInvalidParameterValue,
         fmt::format("Too many tags: a queue has at most {}.", kMaxTags));
  }
}

std::string Now() {
  return std::to_string(duration_cast<seconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count());
}

}  // namespace

bool sqs::IsFifo(const QueueOptions& o) {
  auto it = o.labels.find(Label("FifoQueue"));
  return it != o.labels.end() && it->second == "true";
}

std::optional<std::string> sqs::KeptValue(const QueueOptions& o,
                                          std::string_view attribute) {
  auto it = o.labels.find(Label(attribute));
  if (it == o.labels.end()) return std::nullopt;
  return it->second;
}

std::string SqsApi::Call::NameOfArn(std::string_view arn) const {
  // arn:aws:sqs:REGION:ACCOUNT:NAME; the region and account are not
  // checked, as queue URLs' hosts are not.
  const std::size_t colon = arn.rfind(':');
  if (!arn.starts_with("arn:") || colon == std::string_view::npos ||
      colon + 1 == arn.size()) {
    Fail(kInvalidParameterValue,
         fmt::format("'{}' is not the ARN of a queue.", arn));
  }
  return std::string(arn.substr(colon + 1));
}

void SqsApi::Call::ApplyAttributes(const Json& attrs, const std::string& name,
                                   QueueOptions& o, bool creating) {
  const bool fifo = creating ? name.ends_with(".fifo") : IsFifo(o);
  for (const auto& [attr, v] : attrs.items()) {
    if (attr == "VisibilityTimeout") {
      const std::int64_t s = NumberIn(attr, v, 0, kMaxVisibility);
      // sqlq leases last at least a millisecond.
      o.lease = s == 0 ? Duration(1) : Duration(seconds(s));
    } else if (attr == "MaximumMessageSize") {
      o.max_payload_bytes =
          static_cast<std::size_t>(NumberIn(attr, v, 1024, kMaxMessageSize));
    } else if (attr == "RedrivePolicy") {
      const std::string text = Text(v);
      if (text.empty()) {  // removes the policy
        o.dead_letter_queue.clear();
        o.max_attempts = kForever;
        continue;
      }
      Json policy;
      if (wire::ParseJson(text, {}, "RedrivePolicy", policy)) {
        BadValue(attr, v, "a JSON object");
      }
      if (!policy.is_object() || !policy.contains("deadLetterTargetArn") ||
          !policy["deadLetterTargetArn"].is_string() ||
          !policy.contains("maxReceiveCount")) {
        BadValue(attr, v,
                 "deadLetterTargetArn and maxReceiveCount are required");
      }
      const std::string target =
          NameOfArn(policy["deadLetterTargetArn"].get<std::string>());
      o.max_attempts = static_cast<int>(
          NumberIn("maxReceiveCount", policy["maxReceiveCount"], 1, 1000));
      // The target receives this queue's dead letters: naming it is a
      // send there, so it needs send (or admin) on it, checked before
      // whether it exists, which a key without a grant is not told.
      Need(kSend, target);
      auto dlq = api_.store_.Queue(target);
      if (!dlq.ok()) {
        Fail(kInvalidParameterValue,
             fmt::format("Value {} for parameter RedrivePolicy is invalid. "
                         "Reason: Dead letter target does not exist.",
                         text));
      }
      if (IsFifo(dlq->options()) != fifo || target == name) {
        Fail(kInvalidParameterValue,
             fmt::format("Value {} for parameter RedrivePolicy is invalid. "
                         "Reason: Dead-letter target must be another queue "
                         "of the same type.",
                         text));
      }
      o.dead_letter_queue = target;
    } else if (attr == "FifoQueue") {
      const std::string t = Text(v);
      if (!creating && t != (fifo ? "true" : "false")) {
        BadValue(attr, v, "a queue's type is set when it is created");
      }
      if (t != "true" && t != "false") BadValue(attr, v, "true or false");
      if ((t == "true") != fifo) {
        Fail(kInvalidParameterValue,
             "The name of a FIFO queue must end with the .fifo suffix, and "
             "only a FIFO queue's name may.");
      }
    } else if (const KeptAttribute* k = FindKept(attr)) {
      if (k->fifo && !fifo) {
        Fail(kInvalidAttributeName,
             fmt::format("Unknown Attribute {}: FIFO queues only.", attr));
      }
      std::string text = Text(v);
      if (k->hi > 0) {
        text = std::to_string(NumberIn(attr, v, k->lo, k->hi));
      } else if (!k->choices.empty() &&
                 std::find(k->choices.begin(), k->choices.end(), text) ==
                     k->choices.end()) {
        BadValue(attr, v,
                 fmt::format("one of {}", fmt::join(k->choices, ", ")));
      }
      if (text.size() > kMaxLabelValue || !IsUtf8(text)) {
        BadValue(attr, v, "too long");
      }
      o.labels[Label(attr)] = std::move(text);
    } else {
      Fail(kInvalidAttributeName,
           fmt::format("Unknown or read-only Attribute {}.", attr));
    }
  }
  if (creating && name.ends_with(".fifo") && !IsFifo(o) &&
      attrs.value("FifoQueue", Json("false")) != Json("true")) {
    Fail(kInvalidParameterValue,
         "The name of a FIFO queue must end with the .fifo suffix, and only "
         "a FIFO queue's name may: set FifoQueue to true.");
  }
}

Reply SqsApi::Call::CreateQueue(const Input& in) {
  const std::string name = in.Need("QueueName");
  Need(kAdmin, name);
  const Json& attrs = in.Object("Attributes");
  QueueOptions wanted;
  wanted.max_attempts = kForever;
  wanted.max_payload_bytes = kDefaultMessageSize;
  ApplyAttributes(attrs, name, wanted, /*creating=*/true);
  if (name.ends_with(".fifo")) {
    // FIFO: each group in send order, one message at a time; a dedup id
    // stays taken five minutes after its message leaves.
    wanted.groups = GroupMode::kOrdered;
    wanted.unique_for = kFifoDedupWindow;
    wanted.labels[Label("FifoQueue")] = "true";
  } else {
    // Standard: receives share fairly between MessageGroupIds, as SQS fair
    // queues do (messages without one share the group "").
    wanted.groups = GroupMode::kFair;
  }
  std::map<std::string, std::string> tags;
  AddTags(in.Object(in.Find("tags") ? "tags" : "Tags"), tags);
  SetTags(wanted, tags);
  auto created = api_.store_.CreateQueue(name, wanted);
  if (!created.ok() && created.status().code() == Code::kAlreadyExists) {
    // Idempotent, as SQS is: the attributes given must be the queue's.
    QueueOptions has = Take(api_.store_.Queue(name)).options();
    if (IsFifo(has) != name.ends_with(".fifo")) {
      Fail(kQueueAlreadyExists,
           "A queue of another type already exists with the same name.");
    }
    QueueOptions changed = has;
    ApplyAttributes(attrs, name, changed, /*creating=*/false);
    if (changed.lease != has.lease ||
        changed.max_payload_bytes != has.max_payload_bytes ||
        changed.max_attempts != has.max_attempts ||
        changed.dead_letter_queue != has.dead_letter_queue ||
        changed.labels != has.labels) {
      Fail(kQueueAlreadyExists,
           "A queue already exists with the same name and a different value "
           "for an attribute.");
    }
  } else if (!created.ok()) {
    FailStatus(created.status());
  }
  return Done({{"QueueUrl", UrlOf(name)}});
}

Reply SqsApi::Call::ListQueues(const Input& in) {
  const std::string prefix = in.String("QueueNamePrefix").value_or("");
  std::vector<std::string> names;
  for (const QueueInfo& q : Take(api_.store_.ListQueues())) {
    if (q.name.starts_with(prefix) && Sees(q.name)) names.push_back(q.name);
  }
  return Done(UrlPage(in, std::move(names), "QueueUrls"));
}

Json SqsApi::Call::UrlPage(const Input& in, std::vector<std::string> names,
                           const char* key) const {
  const std::optional<std::int64_t> max = in.Int("MaxResults", 1, 1000);
  const std::string after = in.String("NextToken").value_or("");
  std::sort(names.begin(), names.end());
  std::erase_if(names, [&](const std::string& n) {
    return !after.empty() && n <= after;
  });
  const std::size_t limit = static_cast<std::size_t>(max.value_or(1000));
  const bool more = names.size() > limit;
  if (more) names.resize(limit);
  Json out = Json::object();
  Json urls = Json::array();
  for (const std::string& n : names) urls.push_back(UrlOf(n));
  // ListDeadLetterSourceQueues always has its list; ListQueues only when
  // it has queues, as SQS does.
  if (!urls.empty() || std::string_view(key) == "queueUrls") {
    out[key] = std::move(urls);
  }
  // Paging only when asked for with MaxResults, as SQS does.
  if (more && max) out["NextToken"] = names.back();
  return out;
}

Reply SqsApi::Call::GetQueueAttributes(const Input& in) {
  const std::string name = QueueOfUrl(in.Need("QueueUrl"));
  if (!Sees(name)) Denied(name);
  WorkQueue q = Queue(name);
  const QueueInfo info = q.info();
  const QueueOptions& o = info.options;
  const QueueStats st = Take(q.Stats());
  const std::string created = std::to_string(
      duration_cast<seconds>(info.created_at.time_since_epoch()).count());
  const bool fifo = IsFifo(o);
  Json all = {
      {"QueueArn", ArnOf(name)},
      {"ApproximateNumberOfMessages", std::to_string(st.ready)},
      {"ApproximateNumberOfMessagesNotVisible", std::to_string(st.leased)},
      {"ApproximateNumberOfMessagesDelayed", std::to_string(st.delayed)},
      {"CreatedTimestamp", created},
      {"LastModifiedTimestamp",
       KeptValue(o, kModifiedLabel.substr(kLabelPrefix.size()))
           .value_or(created)},
      {"VisibilityTimeout",
       std::to_string(duration_cast<seconds>(o.lease).count())},
      {"MaximumMessageSize", std::to_string(o.max_payload_bytes)},
  };
  for (const KeptAttribute& k : Kept()) {
    if (k.fifo && !fifo) continue;
    if (auto v = KeptValue(o, k.name)) {
      all[std::string(k.name)] = *v;
    } else if (!k.standard_value.empty()) {
      all[std::string(k.name)] = std::string(k.standard_value);
    }
  }
  if (fifo) all["FifoQueue"] = "true";
  if (!o.dead_letter_queue.empty()) {
    all["RedrivePolicy"] = Json{
        {"deadLetterTargetArn", ArnOf(o.dead_letter_queue)},
        {"maxReceiveCount",
         o.max_attempts}}.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  const std::vector<std::string> wanted = in.Strings("AttributeNames");
  Json out = Json::object();
  for (const std::string& w : wanted) {
    if (w == "All") {
      out = all;
      break;
    }
    if (all.contains(w)) {
      out[w] = all[w];
    } else if (w != "RedrivePolicy" && !FindKept(w) && w != "FifoQueue") {
      Fail(kInvalidAttributeName, fmt::format("Unknown Attribute {}.", w));
    }
  }
  if (out.empty()) return Done(Json::object());
  return Done({{"Attributes", out}});
}

Reply SqsApi::Call::SetQueueAttributes(const Input& in) {
  const std::string name = QueueOfUrl(in.Need("QueueUrl"));
  Need(kAdmin, name);
  WorkQueue q = Queue(name);
  QueueOptions o = q.options();
  ApplyAttributes(in.Object("Attributes"), name, o, /*creating=*/false);
  o.labels[std::string(kModifiedLabel)] = Now();
  Status s = q.Alter(o);
  if (!s.ok()) FailStatus(s);
  return Done(Json());
}

Reply SqsApi::Call::Tags(const Input& in) {
  const std::string name = QueueOfUrl(in.Need("QueueUrl"));
  const std::string& action = call_.action;
  if (action == "ListQueueTags") {
    if (!Sees(name)) Denied(name);
    const auto tags = TagsOf(Queue(name).options());
    if (tags.empty()) return Done(Json::object());
    return Done({{"Tags", tags}});
  }
  Need(kAdmin, name);
  WorkQueue q = Queue(name);
  QueueOptions o = q.options();
  auto tags = TagsOf(o);
  if (action == "TagQueue") {
    AddTags(in.Object("Tags"), tags);
  } else {
    for (const std::string& k : in.Strings("TagKeys")) tags.erase(k);
  }
  SetTags(o, tags);
  Status s = q.Alter(o);
  if (!s.ok()) FailStatus(s);
  return Done(Json());
}

Reply SqsApi::Call::ListDeadLetterSourceQueues(const Input& in) {
  const std::string name = QueueOfUrl(in.Need("QueueUrl"));
  if (!Sees(name)) Denied(name);
  Queue(name);
  std::vector<std::string> sources;
  for (const QueueInfo& q : Take(api_.store_.ListQueues())) {
    if (q.options.dead_letter_queue == name && Sees(q.name)) {
      sources.push_back(q.name);
    }
  }
  return Done(UrlPage(in, std::move(sources), "queueUrls"));
}

Reply SqsApi::Call::MoveTasks(const Input& in) {
  const std::string& action = call_.action;
  if (action == "CancelMessageMoveTask") {
    // Moves run to their end within StartMessageMoveTask's request.
    Fail(kResourceNotFound,
         "The task has already finished: moves run to their end when they "
         "are started.");
  }
  const std::string source_arn = in.Need("SourceArn");
  const std::string source = NameOfArn(source_arn);
  if (action == "ListMessageMoveTasks") {
    if (!Sees(source)) Denied(source);
    Queue(source);
    Json results = Json::array();
    std::lock_guard<std::mutex> lock(api_.tasks_mu_);
    auto it = api_.tasks_.find(source);
    if (it != api_.tasks_.end()) results.push_back(it->second);
    return Done({{"Results", results}});
  }
  // StartMessageMoveTask: the ready messages of a dead-letter queue back
  // into the queue whose dead letters it takes (or DestinationArn's).
  Need(kClaim, source);
  WorkQueue from = Queue(source);
  std::string dest;
  if (auto d = in.String("DestinationArn")) {
    dest = NameOfArn(*d);
  } else {
    std::vector<std::string> sources;
    for (const QueueInfo& q : Take(api_.store_.ListQueues())) {
      if (q.options.dead_letter_queue == source && Sees(q.name)) {
        sources.push_back(q.name);
      }
    }
    if (sources.size() != 1) {
      Fail(kInvalidParameterValue,
           fmt::format("The queue {} is the dead-letter queue of {} queues: "
                       "name the one to move to in DestinationArn.",
                       source, sources.size()));
    }
    dest = sources.front();
  }
  if (dest == source) {
    Fail(kInvalidParameterValue,
         "The destination of a message move task must be another queue.");
  }
  Need(kSend, dest);
  WorkQueue to = Take(api_.store_.Queue(dest));
  // The messages ready now; those that come meanwhile wait for the next
  // task, so that a task ends.
  const std::int64_t ready = Take(from.Stats()).ready;
  const auto started = std::chrono::system_clock::now();
  const std::string handle = RandomHex(12);
  // Each batch in one transaction: sent to the destination and acked here
  // together, so that a message is moved once, never lost or doubled.
  std::int64_t moved = 0;
  while (moved < ready) {
    auto claimed = Take(from.Claim(
        {.max = static_cast<int>(std::min<std::int64_t>(100, ready - moved)),
         .lease = std::chrono::minutes(5),
         .worker = "sqs-move"}));
    if (claimed.empty()) break;
    Tx tx = Take(api_.store_.BeginTx());
    for (const ClaimedMessage& m : claimed) {
      Take(to.Send(tx, {.payload = m.payload,
                        .priority = m.priority,
                        .headers = m.headers,
                        .group = m.group}));
      Status s = from.Ack(tx, m.receipt);
      if (!s.ok()) FailStatus(s);
    }
    Status s = tx.Commit();
    if (!s.ok()) FailStatus(s);
    moved += static_cast<std::int64_t>(claimed.size());
  }
  {
    std::lock_guard<std::mutex> lock(api_.tasks_mu_);
    api_.tasks_[source] = {
        {"TaskHandle", handle},
        {"Status", "COMPLETED"},
        {"SourceArn", source_arn},
        {"DestinationArn", ArnOf(dest)},
        {"ApproximateNumberOfMessagesMoved", moved},
        {"ApproximateNumberOfMessagesToMove", ready},
        {"StartedTimestamp",
         Millis(std::chrono::time_point_cast<std::chrono::microseconds>(
             started))}};
  }
  return Done({{"TaskHandle", handle}});
}

}  // namespace sqlq::server
