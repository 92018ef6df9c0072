// The common body of a send read without building a JSON document: every
// message a payload given as a JSON string and nothing else,
//   {"messages":[{"payload":"..."},...]}   or   {"payload":"..."}
// which is what producers send most (and what `sqlq bench` sends). The
// general reader (ReadSend, api_call.h) parses the body into a Json
// document and reads each message's fields from it; for a batch of 100 such
// messages that was about a fifth of the server's CPU. Here simdjson parses
// it (its DOM, whose kernel is chosen for the processor at run time) and
// the payloads are copied out of its tape.
//
// Only bodies that the general reader would accept as the same messages
// are read here; for any other (another field, a JSON value as payload, a
// repeated key, invalid JSON or UTF-8, too many messages, a payload over
// the limit, a body over kPlainSendMaxBytes) ReadPlainSend gives nullopt and
// the general reader reads it, with its errors.

#ifndef SQLQ_SERVER_PLAIN_SEND_H_
#define SQLQ_SERVER_PLAIN_SEND_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "sqlq/queue.h"

namespace sqlq::server {

// Bodies above this size go the general way, so that the parser's buffers
// (a few times the body) stay small.
inline constexpr std::size_t kPlainSendMaxBytes = 1 << 20;

// The messages of `text` when it is a plain send of at most `max_messages`
// messages, each payload at most `max_payload` bytes; nullopt otherwise.
std::optional<std::vector<Message>> ReadPlainSend(const std::string& text,
                                                  std::size_t max_messages,
                                                  std::size_t max_payload);

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_PLAIN_SEND_H_
