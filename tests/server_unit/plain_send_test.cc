// The fast reader of plain sends (server/plain_send.h) against the general
// one (ReadSendDocument): what it reads must be exactly what the general
// reader makes of the same body, and every body it does not read must get
// the general reader's answer, messages or error, from ReadSend.

#include "server/plain_send.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

#include "server/api_call.h"
#include "server/config.h"

namespace sqlq::server {
namespace {

// Every field of a message, so that two readings compare whole.
std::string Describe(const Message& m) {
  std::string out = fmt::format(
      "payload={:?} priority={} delay={} dedup={:?} run_at={} group={:?} "
      "kind={:?} timeout={} expire_after={} on_expiry={} max_attempts={} "
      "backoff={}/{} depends_on={} depends_on_batch={} if_dies={} headers:",
      m.payload, m.priority, m.delay.count(), m.dedup_key,
      m.run_at ? std::to_string(m.run_at->time_since_epoch().count()) : "-",
      m.group, m.kind, m.timeout ? std::to_string(m.timeout->count()) : "-",
      m.expire_after ? std::to_string(m.expire_after->count()) : "-",
      static_cast<int>(m.on_expiry),
      m.max_attempts ? std::to_string(*m.max_attempts) : "-",
      m.backoff_base ? std::to_string(m.backoff_base->count()) : "-",
      m.backoff_max ? std::to_string(m.backoff_max->count()) : "-",
      fmt::join(m.depends_on, ","), fmt::join(m.depends_on_batch, ","),
      static_cast<int>(m.if_dependency_dies));
  for (const auto& [k, v] : m.headers) out += fmt::format(" {:?}={:?}", k, v);
  return out;
}

std::vector<std::string> Describe(const std::vector<Message>& ms) {
  std::vector<std::string> out;
  for (const Message& m : ms) out.push_back(Describe(m));
  return out;
}

// What a reader made of a body: its messages, or its error.
using Reading = std::variant<std::vector<std::string>, std::string>;

template <class F>
Reading Read(F&& read) {
  try {
    return Describe(read());
  } catch (const HttpError& e) {
    return fmt::format("{} {}: {}", e.status, e.code, e.message);
  }
}

Limits SmallLimits() {
  Limits l;
  l.max_batch = 5;
  l.max_payload_bytes = 64;
  return l;
}

std::optional<std::vector<Message>> Plain(const std::string& body,
                                          const Limits& l) {
  return ReadPlainSend(body, static_cast<std::size_t>(l.max_batch),
                       l.max_payload_bytes);
}

TEST(PlainSend, ReadsWhatTheGeneralReaderReads) {
  const Limits l = SmallLimits();
  const std::vector<std::string> bodies = {
      R"({"payload":"one"})",
      R"( {"messages":[{"payload":"a"},{"payload":""},{"payload":"c"}]} )",
      R"({"messages":[{"payload":"tab\tquote\"back\\slash\/nl\n"}]})",
      R"({"messages":[{"payload":"\u00e9\u4e2d\ud83d\ude00 and a \u0000 byte"}]})",
      "{\"messages\":[{\"payload\":\"raw UTF-8: "
      "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\"}]}",
      R"({"messages":[{"payload":"1"},{"payload":"2"},{"payload":"3"},{"payload":"4"},{"payload":"5"}]})",
      R"({"messages":[{"payload":"0123456789012345678901234567890123456789012345678901234567890123"}]})",
  };
  for (const std::string& body : bodies) {
    SCOPED_TRACE(body);
    auto plain = Plain(body, l);
    ASSERT_TRUE(plain.has_value());
    EXPECT_EQ(Reading(Describe(*plain)),
              Read([&] { return api::ReadSendDocument(body, l); }));
  }
  auto escaped = Plain(R"({"payload":"a\u0000b\"c"})", l);
  ASSERT_TRUE(escaped.has_value());
  EXPECT_EQ((*escaped)[0].payload, std::string("a\0b\"c", 5));
}

TEST(PlainSend, LeavesEveryOtherBodyToTheGeneralReader) {
  const Limits l = SmallLimits();
  const std::vector<std::string> bodies = {
      "",
      "   ",
      "null",
      "[]",
      R"("payload")",
      "{}",
      R"({"messages":[]})",
      R"({"messages":{}})",
      R"({"messages":[{"payload":"a"}],"extra":1})",
      R"({"messages":[{"payload":"a"}],"messages":[{"payload":"b"}]})",
      R"({"payload":"a","payload":"b"})",
      R"({"messages":[{"payload":"a","payload":"b"}]})",
      R"({"messages":[{"payload":"a","priority":3}]})",
      R"({"messages":[{"payload":{"json":true}}]})",
      R"({"messages":[{"payload":17}]})",
      R"({"messages":[{"payload":null}]})",
      R"({"messages":[{"payload_base64":"aGk="}]})",
      R"({"messages":[{"payload":"a","headers":{"x":"y"}}]})",
      R"({"messages":[{"Payload":"a"}]})",
      R"({"messages":[{}]})",
      R"({"messages":["a"]})",
      R"({"messages":[{"payload":"a"}]} trailing)",
      R"({"messages":[{"payload":"a"}])",
      R"({"messages":[{"payload":"lone \udc00 surrogate"}]})",
      R"({"messages":[{"payload":"lone \ud800 surrogate"}]})",
      "{\"messages\":[{\"payload\":\"bad \xc0\x80 UTF-8\"}]}",
      "{\"messages\":[{\"payload\":\"encoded surrogate \xed\xa0\x80\"}]}",
      R"({"messages":[{"payload":"a"}]})" + std::string(1, '\0'),
      R"({"messages":[{"payload":"1"},{"payload":"2"},{"payload":"3"},{"payload":"4"},{"payload":"5"},{"payload":"6"}]})",
      R"({"messages":[{"payload":"01234567890123456789012345678901234567890123456789012345678901234"}]})",
  };
  for (const std::string& body : bodies) {
    SCOPED_TRACE(body);
    EXPECT_FALSE(Plain(body, l).has_value());
    EXPECT_EQ(Read([&] { return api::ReadSend(body, l); }),
              Read([&] { return api::ReadSendDocument(body, l); }));
  }
}

TEST(PlainSend, LargeBodiesGoTheGeneralWay) {
  Limits l;
  l.max_batch = 100000;
  std::string body = R"({"messages":[)";
  while (body.size() <= kPlainSendMaxBytes) {
    body += R"({"payload":"0123456789012345678901234567890123456789"},)";
  }
  body.back() = ']';
  body += '}';
  EXPECT_FALSE(Plain(body, l).has_value());
  // Within the size, the general reader's bound on values still holds:
  // 50,000 messages are 100,002 values, past the 100,000 it allows.
  std::string many = R"({"messages":[)";
  for (int i = 0; i < 50000; ++i) many += R"({"payload":""},)";
  many.back() = ']';
  many += '}';
  ASSERT_LE(many.size(), kPlainSendMaxBytes);
  EXPECT_FALSE(Plain(many, l).has_value());
  // (Compared by count or error: a failure prints no 50,000 lines.)
  auto summary = [](const Reading& r) {
    if (const auto* ms = std::get_if<std::vector<std::string>>(&r)) {
      return fmt::format("{} messages", ms->size());
    }
    return std::get<std::string>(r);
  };
  EXPECT_EQ(summary(Read([&] { return api::ReadSend(many, l); })),
            summary(Read([&] { return api::ReadSendDocument(many, l); })));
}

}  // namespace
}  // namespace sqlq::server
