// The SQS endpoint's inside, shared by its files (sqs.cc: the endpoint
// and messages; sqs_queues.cc: queues): what a request is while it is
// handled, its input, and the helpers that turn library results into SQS
// errors. Not for other code: SqsApi (sqs.h) is the interface.

#ifndef SQLQ_SERVER_SQS_CALL_H_
#define SQLQ_SERVER_SQS_CALL_H_

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/config.h"
#include "server/request.h"
#include "server/sigv4.h"
#include "server/sqs.h"
#include "server/sqs_wire.h"

namespace sqlq::server {
namespace sqs {

using std::chrono::duration_cast;
using std::chrono::milliseconds;
using std::chrono::seconds;

// The settings of queues made by CreateQueue (docs/sqs.md): SQS keeps a
// message until it is deleted, however often it is received, unless a
// redrive policy says otherwise.
constexpr int kForever = 1000000;  // QueueOptions::max_attempts' largest
constexpr std::size_t kDefaultMessageSize = 262144;
constexpr std::size_t kMaxMessageSize = 1 << 20;
constexpr int kMaxBatch = 10;
constexpr int kMaxMessageAttributes = 10;
constexpr std::int64_t kMaxVisibility = 43200;  // seconds: 12 hours
constexpr std::int64_t kMaxWaitSeconds = 20;
// A message attribute's type that is not "String" travels in a header
// of its own beside the value: "sqs:type:NAME". SQS names have no ':', so
// these never meet an attribute's.
constexpr std::string_view kTypeHeader = "sqs:type:";

// The SQS settings a queue keeps in its labels (QueueOptions::labels) are
// under this prefix: "sqs:DelaySeconds".
inline constexpr std::string_view kLabelPrefix = "sqs:";
// Whether a queue is a FIFO queue (made by CreateQueue with FifoQueue).
bool IsFifo(const QueueOptions& o);
// An attribute kept in the queue's labels, when set.
std::optional<std::string> KeptValue(const QueueOptions& o,
                                     std::string_view attribute);

// Throws the SQS error for a library failure: kNotFound is a queue that
// does not exist.
[[noreturn]] void FailStatus(const Status& s);

template <class T>
T Take(Result<T> r) {
  if (!r.ok()) FailStatus(r.status());
  return std::move(*r);
}

// `v` when it is an object, else an empty one: to read an entry that is
// not a map as one with nothing in it.
const Json& AsObject(const Json& v);
// A JSON integer, or a string of one (the query protocol's values).
std::optional<std::int64_t> IntOf(const Json& v);
// A value as an error message shows it.
std::string Shown(const Json& v);
// The queue named by a QueueUrl (http://HOST/ACCOUNT/NAME; the host is not
// checked: clients reach the server by many names).
std::string QueueOfUrl(std::string_view url);
// The entries of a batch request, checked as SQS checks them.
const Json& Entries(const class Input& in);
Json FailedEntry(const std::string& id, const Error& e);
std::int64_t Millis(Timestamp t);

// An operation's input, in the JSON protocol's shape (sqs_wire.h).
class Input {
 public:
  explicit Input(const Json& j) : j_(j) {}

  const Json* Find(std::string_view name) const {
    auto it = j_.find(name);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  std::optional<std::string> String(std::string_view name) const {
    const Json* v = Find(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) {
      Fail(sqs::kInvalidParameterValue,
           fmt::format("The parameter {} must be a string.", name));
    }
    return v->get<std::string>();
  }
  std::string Need(std::string_view name) const {
    auto v = String(name);
    if (!v) {
      Fail(sqs::kMissingParameter,
           fmt::format("The request must contain the parameter {}.", name));
    }
    return *v;
  }
  std::optional<std::int64_t> Int(std::string_view name, std::int64_t lo,
                                  std::int64_t hi) const {
    const Json* v = Find(name);
    if (v == nullptr) return std::nullopt;
    auto n = IntOf(*v);
    if (!n || *n < lo || *n > hi) {
      Fail(sqs::kInvalidParameterValue,
           fmt::format("Value {} for parameter {} is invalid. Reason: must "
                       "be an integer from {} to {}.",
                       Shown(*v), name, lo, hi));
    }
    return n;
  }
  std::vector<std::string> Strings(std::string_view name) const {
    std::vector<std::string> out;
    const Json* v = Find(name);
    if (v == nullptr) return out;
    if (!v->is_array()) {
      Fail(sqs::kInvalidParameterValue,
           fmt::format("The parameter {} must be a list.", name));
    }
    for (const Json& e : *v) {
      if (!e.is_string()) {
        Fail(sqs::kInvalidParameterValue,
             fmt::format("The parameter {} must be a list of strings.", name));
      }
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  // A map of the input ({} when absent).
  const Json& Object(std::string_view name) const {
    const Json* v = Find(name);
    if (v == nullptr) return AsObject(Json());
    if (!v->is_object()) {
      Fail(sqs::kInvalidParameterValue,
           fmt::format("The parameter {} must be a map.", name));
    }
    return *v;
  }

 private:
  const Json& j_;
};

}  // namespace sqs

// One request on its way through the endpoint.
class SqsApi::Call {
 public:
  Call(SqsApi& api, const Request& r) : api_(api), r_(r) {}

  Outcome Run();
  const std::string& cached() const { return cached_; }
  bool hit() const { return hit_; }
  sqs::Protocol protocol() const { return call_.protocol; }
  const std::string& action() const { return call_.action; }

 private:
  void Authenticate();
  bool Allowed(unsigned perm, const std::string& name) const {
    return key_ == nullptr || Auth::Allows(*key_, perm, name);
  }
  bool Sees(const std::string& name) const {
    return key_ == nullptr || Auth::Sees(*key_, name);
  }
  void Need(unsigned perm, const std::string& name) const {
    if (!Allowed(perm, name)) Denied(name);
  }
  [[noreturn]] void Denied(const std::string& name) const {
    sqs::Fail(sqs::kAccessDenied,
              fmt::format("Access to the resource {} is denied.", UrlOf(name)));
  }
  std::string UrlOf(const std::string& name) const {
    const std::optional<std::string> host =
        sigv4::HeaderValue(r_.headers, "host");
    return fmt::format("http://{}/{}/{}", host ? *host : "localhost",
                       kSqsAccount, name);
  }
  std::string ArnOf(const std::string& name) const {
    return fmt::format("arn:aws:sqs:{}:{}:{}", region_, kSqsAccount, name);
  }
  WorkQueue Queue(const std::string& name) {
    cached_ = name;
    return sqs::Take(api_.cache_.Get(name, hit_));
  }
  Reply Done(const Json& output) const { return sqs::Write(call_, output); }
  // For a kNotFound of a message operation: with a handle from the cache,
  // the queue may have been dropped (perhaps made again) elsewhere rather
  // than the message gone, so the request is made once more with a fresh
  // handle (SqsApi::Handle retries NonExistentQueue once).
  void RetryIfCached() const {
    if (hit_) {
      sqs::Fail(sqs::kNonExistentQueue, "The specified queue does not exist.");
    }
  }

  // Queues (sqs_queues.cc).
  Reply CreateQueue(const sqs::Input& in);
  Reply ListQueues(const sqs::Input& in);
  Reply GetQueueAttributes(const sqs::Input& in);
  Reply SetQueueAttributes(const sqs::Input& in);
  // TagQueue, UntagQueue, ListQueueTags.
  Reply Tags(const sqs::Input& in);
  Reply ListDeadLetterSourceQueues(const sqs::Input& in);
  // StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask.
  Reply MoveTasks(const sqs::Input& in);
  // The queue an ARN names (arn:aws:sqs:REGION:ACCOUNT:NAME).
  std::string NameOfArn(std::string_view arn) const;
  // Applies the attributes of CreateQueue (`creating`) or
  // SetQueueAttributes to `o`, queue `name`'s options.
  void ApplyAttributes(const Json& attrs, const std::string& name,
                       QueueOptions& o, bool creating);
  // A page of queue URLs under `key` (MaxResults, NextToken).
  Json UrlPage(const sqs::Input& in, std::vector<std::string> names,
               const char* key) const;

  // Messages (sqs.cc).
  Reply SendMessage(const sqs::Input& in);
  Reply SendMessageBatch(const sqs::Input& in);
  Outcome ReceiveMessage(const sqs::Input& in);
  Reply DeleteMessage(const sqs::Input& in);
  Reply DeleteMessageBatch(const sqs::Input& in);
  Reply ChangeMessageVisibility(const sqs::Input& in);
  Reply ChangeMessageVisibilityBatch(const sqs::Input& in);

  // A message to send from a SendMessage or a batch entry: checked, with
  // its digests.
  struct Outgoing {
    Message message;
    std::string body_md5;
    std::string attributes_md5;  // empty without attributes
    std::size_t size = 0;
    bool fifo = false;  // sent to a FIFO queue
  };
  Outgoing ReadMessage(const sqs::Input& in, const QueueOptions& o) const;
  Json SentJson(const Outgoing& m, const SendResult& r) const;

  SqsApi& api_;
  const Request& r_;
  sqs::Call call_;
  // The access key that signed the request; nullptr without a token file.
  std::shared_ptr<const KeyEntry> key_;
  std::string region_ = "us-east-1";
  std::string cached_;
  bool hit_ = false;
};

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_SQS_CALL_H_
