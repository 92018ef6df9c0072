// Topics: validation, the filter rule and the publish, which sends to every
// subscriber through the engine's SendEach in one transaction; the engine
// stores topics and subscriptions (engines/shared/sql_topics.h).
// docs/semantics.md, "Topics".

#include <fmt/format.h>

#include <limits>
#include <map>

#include "core/columns.h"
#include "core/rows.h"
#include "core/store_impl.h"
#include "core/validate.h"
#include "sqlq/store.h"

namespace sqlq {

namespace core {
namespace {

// A publish's topic name and messages (1..kMaxBatch), before the
// transaction: each subscribed queue checks their payloads against its own
// limit in it.
Status ValidatePublish(std::string_view topic,
                       std::span<const Message> messages, Timestamp now) {
  Status s = ValidateName("topic", topic);
  if (!s.ok()) return s;
  return ValidateBatch(messages, std::numeric_limits<std::size_t>::max(), now);
}

Status ValidateFilter(const Headers& filter) {
  Status s = ValidateHeaders(filter);
  return s.ok() ? s : s.WithContext("filter");
}

// Whether the message carries every header of the filter with its value.
bool Matches(const Headers& filter, const Message& m) {
  for (const auto& [key, value] : filter) {
    auto it = m.headers.find(key);
    if (it == m.headers.end() || it->second != value) return false;
  }
  return true;
}

}  // namespace

Result<std::vector<WriteBatcher::Published>> PublishIn(
    StoreImpl& store, Conn& conn, std::string_view topic,
    std::span<const Message> messages) {
  Engine& e = store.engine();
  auto subscribers = e.LockSubscribers(conn, topic);
  if (!subscribers.ok()) return subscribers.status();
  struct Send {
    const SubscriberRecord* to;
    std::vector<Message> messages;
    std::vector<std::size_t> index;  // each one's place in `messages`
  };
  std::vector<Send> sends;
  const Timestamp now = store.Now();
  for (const SubscriberRecord& sub : *subscribers) {
    const Headers filter = DecodeHeaders(sub.filter);
    Send send{.to = &sub};
    for (std::size_t i = 0; i < messages.size(); ++i) {
      if (!Matches(filter, messages[i])) continue;
      send.messages.push_back(messages[i]);
      send.index.push_back(i);
    }
    if (send.messages.empty()) continue;
    const QueueOptions& o = sub.queue.info.options;
    Status s = ValidateBatch(send.messages, o.max_payload_bytes, now);
    if (!s.ok()) {
      return s.WithContext(fmt::format("queue '{}'", sub.queue.info.name));
    }
    sends.push_back(std::move(send));
  }
  std::vector<SendParams> each;
  each.reserve(sends.size());
  for (const Send& send : sends) {
    const QueueRecord& q = send.to->queue;
    each.push_back({.queue_id = q.id,
                    .messages = send.messages,
                    .unique_for = Micros(q.info.options.unique_for),
                    .grouped = q.info.options.groups != GroupMode::kNone});
  }
  // A queue dropped since the subscriptions were read takes nothing (its
  // entry is empty): the others still get the publish.
  auto r = e.SendEach(conn, each);
  if (!r.ok()) return r.status();
  std::vector<WriteBatcher::Published> out;
  for (std::size_t k = 0; k < sends.size(); ++k) {
    if (!(*r)[k]) continue;
    const std::vector<SendResult>& stored = *(*r)[k];
    const QueueRecord& q = sends[k].to->queue;
    for (std::size_t i = 0; i < stored.size(); ++i) {
      out.push_back({.delivery = {.queue = q.info.name,
                                  .message = sends[k].index[i],
                                  .sent = stored[i]},
                     .queue_id = q.id});
    }
  }
  return out;
}

namespace {

// The deliveries of a publish; how many each queue stored, not duplicates,
// in `sent` (to wake its claims after the commit).
std::vector<Delivery> Deliveries(
    std::vector<WriteBatcher::Published>& published,
    std::map<std::int64_t, std::int64_t>& sent) {
  std::vector<Delivery> out;
  out.reserve(published.size());
  for (WriteBatcher::Published& p : published) {
    if (!p.delivery.sent.duplicate) ++sent[p.queue_id];
    out.push_back(std::move(p.delivery));
  }
  return out;
}

}  // namespace
}  // namespace core

Status Store::CreateTopic(std::string_view name) {
  Status s = core::ValidateName("topic", name);
  if (!s.ok()) return s;
  return impl_->engine().Write([&](core::Conn& conn) {
    return impl_->engine().CreateTopic(conn, name).status();
  });
}

Status Store::DropTopic(std::string_view name) {
  Status s = core::ValidateName("topic", name);
  if (!s.ok()) return s;
  return impl_->engine().Write([&](core::Conn& conn) {
    auto id = impl_->engine().GetTopic(conn, name);
    if (!id.ok()) return id.status();
    return impl_->engine().DropTopic(conn, *id);
  });
}

Result<std::vector<TopicInfo>> Store::ListTopics() {
  auto all = core::SnapshotRead<std::vector<core::TopicRecord>>(
      *impl_, [](core::TopicOps& e, core::Conn& c) { return e.ListTopics(c); });
  if (!all.ok()) return all.status();
  std::vector<TopicInfo> out;
  for (auto& t : *all) {
    out.push_back({.name = std::move(t.name),
                   .created_at = core::FromUs(t.created_us),
                   .subscriptions = t.subscriptions});
  }
  return out;
}

Result<bool> Store::Subscribe(std::string_view topic, std::string_view queue,
                              const Headers& filter) {
  Status s = core::ValidateName("topic", topic);
  if (s.ok()) s = core::ValidateName("queue", queue);
  if (s.ok()) s = core::ValidateFilter(filter);
  if (!s.ok()) return s;
  const std::string text = core::EncodeHeaders(filter);
  bool added = false;
  s = impl_->engine().Write([&](core::Conn& conn) -> Status {
    core::Engine& e = impl_->engine();
    auto topic_id = e.GetTopic(conn, topic);
    if (!topic_id.ok()) return topic_id.status();
    auto q = e.GetQueue(conn, queue);
    if (!q.ok()) return q.status();
    auto r = e.Subscribe(
        conn, {.topic_id = *topic_id, .queue_id = q->id, .filter = text});
    if (!r.ok()) return r.status();
    added = *r;
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return added;
}

Status Store::Unsubscribe(std::string_view topic, std::string_view queue) {
  Status s = core::ValidateName("topic", topic);
  if (s.ok()) s = core::ValidateName("queue", queue);
  if (!s.ok()) return s;
  return impl_->engine().Write([&](core::Conn& conn) -> Status {
    core::Engine& e = impl_->engine();
    auto topic_id = e.GetTopic(conn, topic);
    if (!topic_id.ok()) return topic_id.status();
    auto q = e.GetQueue(conn, queue);
    if (!q.ok()) return q.status();
    auto r = e.Unsubscribe(conn, *topic_id, q->id);
    if (!r.ok()) return r.status();
    if (!*r) {
      return Status::NotFound(fmt::format(
          "queue '{}' is not subscribed to topic '{}'", queue, topic));
    }
    return Status::Ok();
  });
}

Result<std::vector<Subscription>> Store::ListSubscriptions(
    std::string_view topic) {
  Status s = core::ValidateName("topic", topic);
  if (!s.ok()) return s;
  auto subs = core::SnapshotRead<std::vector<core::SubscriberRecord>>(
      *impl_,
      [&](core::TopicOps& e,
          core::Conn& c) -> Result<std::vector<core::SubscriberRecord>> {
        auto id = e.GetTopic(c, topic);
        if (!id.ok()) return id.status();
        return e.ListSubscribers(c, *id);
      });
  if (!subs.ok()) return subs.status();
  std::vector<Subscription> out;
  for (auto& sub : *subs) {
    out.push_back({.topic = std::string(topic),
                   .queue = std::move(sub.queue.info.name),
                   .filter = core::DecodeHeaders(sub.filter),
                   .subscribed_at = core::FromUs(sub.subscribed_us)});
  }
  return out;
}

Result<std::vector<Delivery>> Store::Publish(std::string_view topic,
                                             const Message& message) {
  return PublishBatch(topic, std::span<const Message>(&message, 1));
}

Result<std::vector<Delivery>> Store::PublishBatch(
    std::string_view topic, std::span<const Message> messages) {
  Status s = core::ValidatePublish(topic, messages, impl_->Now());
  if (!s.ok()) return s;
  auto r = impl_->batcher().Publish(topic, messages);
  if (!r.ok()) return r.status();
  std::map<std::int64_t, std::int64_t> sent;
  std::vector<Delivery> out = core::Deliveries(*r, sent);
  for (auto [queue_id, n] : sent) impl_->hub().Notify(queue_id, n);
  return out;
}

Result<std::vector<Delivery>> Store::Publish(Tx& tx, std::string_view topic,
                                             const Message& message) {
  core::TxImpl* t = tx.impl_.get();
  if (t == nullptr || t->conn() == nullptr) {
    return Status::FailedPrecondition("transaction is closed");
  }
  if (&t->store() != impl_.get()) {
    return Status::InvalidArgument(
        "transaction belongs to another store than this one");
  }
  const std::span<const Message> one(&message, 1);
  Status s = core::ValidatePublish(topic, one, impl_->Now());
  if (!s.ok()) return s;
  auto r = core::PublishIn(*impl_, *t->conn(), topic, one);
  if (!r.ok()) {
    if (!core::IsCleanFailure(r.status())) t->Poison(r.status());
    return r.status();
  }
  std::map<std::int64_t, std::int64_t> sent;
  std::vector<Delivery> out = core::Deliveries(*r, sent);
  for (auto [queue_id, n] : sent) t->sent()[queue_id] += n;
  return out;
}

}  // namespace sqlq
