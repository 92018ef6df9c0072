#include "server/plain_send.h"

#include <simdjson.h>

#include <algorithm>
#include <utility>

#include "server/body.h"

namespace sqlq::server {

namespace {

using simdjson::SUCCESS;
namespace dom = simdjson::dom;

// One message: exactly {"payload": a string} of at most `max_payload`
// bytes, added to `out`; false for anything else.
bool ReadOne(dom::element e, std::size_t max_payload,
             std::vector<Message>& out) {
  dom::object o;
  if (e.get_object().get(o) != SUCCESS || o.size() != 1) return false;
  const dom::key_value_pair field = *o.begin();
  std::string_view payload;
  if (field.key != "payload" ||
      field.value.get_string().get(payload) != SUCCESS ||
      payload.size() > max_payload) {
    return false;
  }
  Message m;
  m.payload.assign(payload);
  out.push_back(std::move(m));
  return true;
}

}  // namespace

std::optional<std::vector<Message>> ReadPlainSend(const std::string& text,
                                                  std::size_t max_messages,
                                                  std::size_t max_payload) {
  if (text.size() > kPlainSendMaxBytes) return std::nullopt;
  // The general reader's bound on values (each message is an object and
  // its payload; the body and its list two more).
  max_messages = std::min(max_messages, (kBodyBounds.max_values - 2) / 2);
  // Refuses invalid JSON and UTF-8, and anything after the value.
  dom::parser parser;
  dom::element doc;
  if (parser.parse(text).get(doc) != SUCCESS) return std::nullopt;
  dom::object root;
  if (doc.get_object().get(root) != SUCCESS || root.size() != 1) {
    return std::nullopt;
  }
  std::vector<Message> out;
  const dom::key_value_pair field = *root.begin();
  if (field.key == "payload") {
    if (!ReadOne(doc, max_payload, out)) return std::nullopt;
    return out;
  }
  dom::array list;
  if (field.key != "messages" || field.value.get_array().get(list) != SUCCESS) {
    return std::nullopt;
  }
  const std::size_t n = list.size();
  if (n == 0 || n > max_messages) return std::nullopt;
  out.reserve(n);
  for (dom::element m : list) {
    if (!ReadOne(m, max_payload, out)) return std::nullopt;
  }
  return out;
}

}  // namespace sqlq::server
