// Topics: one publish, stored in every subscribed queue in one transaction.
// A topic has a name (in the one namespace of queues, rings and rotations)
// and subscriptions: queues, each with an optional header filter. A publish
// sends its messages to each subscribed queue whose filter they match, as
// that queue's own send would (its payload limit, dedup, groups; a paused
// queue takes them), all or nothing. Semantics: docs/semantics.md, "Topics".
//
// The calls are Store's (sqlq/store.h): CreateTopic, DropTopic, ListTopics,
// Subscribe, Unsubscribe, ListSubscriptions, Publish, PublishBatch.

#ifndef SQLQ_TOPIC_H_
#define SQLQ_TOPIC_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "sqlq/queue.h"

namespace sqlq {

// What a topic is: its name, when it was made and how many queues
// subscribe to it (Store::ListTopics).
struct TopicInfo {
  std::string name;
  Timestamp created_at;
  std::int64_t subscriptions = 0;
};

// A queue's subscription to a topic. `filter`: the headers a message must
// carry, each with exactly that value, to be delivered to the queue; empty,
// every message is. At most kMaxHeaders pairs, with the limits of Headers.
struct Subscription {
  std::string topic;
  std::string queue;
  Headers filter;
  Timestamp subscribed_at;
};

// One message of a publish stored in one subscribed queue: the queue, the
// message's place in the publish (0 for Store::Publish, its index for
// PublishBatch) and what the queue's send returned (the id it has there;
// duplicate when the queue's dedup matched it).
struct Delivery {
  std::string queue;
  std::size_t message = 0;
  SendResult sent;
};

}  // namespace sqlq

#endif  // SQLQ_TOPIC_H_
