// The JSON shapes both front ends print (src/wire/json.h): the keys a user
// reads in `sqlq --json` and in the HTTP API's replies.

#include "wire/json.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "wire/duration.h"

namespace sqlq::wire {
namespace {

std::vector<std::string> Keys(const Json& j) {
  std::vector<std::string> out;
  for (const auto& [k, v] : j.items()) out.push_back(k);
  return out;
}

Timestamp At(std::int64_t us) {
  return Timestamp(std::chrono::microseconds(us));
}

TEST(WireJson, TimesAreRfc3339UtcWithMicroseconds) {
  EXPECT_EQ(FormatTime(At(0)), "1970-01-01T00:00:00.000000Z");
  EXPECT_EQ(FormatTime(At(1'764'000'000'123'456)),
            "2025-11-24T16:00:00.123456Z");
  // Before the epoch the fraction still counts forward from the second.
  EXPECT_EQ(FormatTime(At(-1)), "1969-12-31T23:59:59.999999Z");
}

TEST(WireJson, PayloadIsTextOrBase64) {
  Json text, binary;
  PutPayload(text, "hello");
  PutPayload(binary, std::string("\xff\x00\x01", 3));
  EXPECT_EQ(text, Json({{"payload", "hello"}}));
  EXPECT_EQ(binary, Json({{"payload_base64", "/wAB"}}));
}

TEST(WireJson, QueueObjectHasKindOptionsAndCreationTime) {
  QueueInfo q{.name = "emails", .options = {}, .created_at = At(1'000'000)};
  Json j = QueueJson(q);
  EXPECT_EQ(Keys(j), (std::vector<std::string>{"name",
                                               "kind",
                                               "max_attempts",
                                               "lease_ms",
                                               "backoff_base_ms",
                                               "backoff_max_ms",
                                               "archive",
                                               "retention_ms",
                                               "max_payload_bytes",
                                               "dead_retention_ms",
                                               "unique_for_ms",
                                               "groups",
                                               "max_leased",
                                               "rate_limit",
                                               "rate_burst",
                                               "group_limit",
                                               "dead_letter_queue",
                                               "labels",
                                               "created_at",
                                               "paused"}));
  EXPECT_EQ(j["kind"], "queue");
  EXPECT_TRUE(j["dead_letter_queue"].is_null());
  EXPECT_EQ(j["labels"], Json::object());
  EXPECT_EQ(j["lease_ms"], QueueOptions{}.lease.count());
  EXPECT_EQ(j["created_at"], "1970-01-01T00:00:01.000000Z");
  // An unknown creation time is left out rather than shown as 1970.
  EXPECT_FALSE(QueueJson({.name = "emails"}).contains("created_at"));
}

TEST(WireJson, StatsNameTheirQueue) {
  QueueStats s;
  s.name = "emails";
  s.ready = 3;
  Json j = StatsJson(s);
  EXPECT_EQ(j["name"], "emails");
  EXPECT_EQ(j["ready"], 3);
  EXPECT_TRUE(j.contains("oldest_ready_age_ms"));
  EXPECT_TRUE(j.contains("dead_lettered"));
}

TEST(WireJson, ClaimedWrittenDirectlyIsTheSameObjectAsTheTree) {
  const std::vector<std::string> payloads = {
      "plain",
      "",
      "quote \" backslash \\ slash /",
      "controls \b\f\n\r\t \x01\x1f",
      "caf\xc3\xa9 \xe2\x82\xac",
      std::string("\xff\xfe binary \x00", 12)};
  for (const std::string& p : payloads) {
    ClaimedMessage m{.id = 42,
                     .receipt = "42-1-00000000deadbeef",
                     .attempt = 2,
                     .priority = -5,
                     .payload = p,
                     .enqueued_at = At(1'764'000'000'000'001),
                     .lease_expires_at = At(1'764'000'030'000'001)};
    std::string direct;
    AppendClaimed(direct, m);
    const Json tree = ClaimedJson(m);
    EXPECT_EQ(direct, tree.dump()) << "payload " << Json(p.size());
    EXPECT_EQ(Json::parse(direct), tree);
  }
}

TEST(WireJson, RingAndRotationObjectsNameTheirKind) {
  EXPECT_EQ(RingJson("latest", {.capacity = 5}),
            Json({{"name", "latest"},
                  {"kind", "ring"},
                  {"capacity", 5},
                  {"max_payload_bytes", RingOptions{}.max_payload_bytes}}));
  EXPECT_EQ(RotationJson("proxies", {.max_failures = 2}),
            Json({{"name", "proxies"},
                  {"kind", "rotation"},
                  {"max_failures", 2},
                  {"max_payload_bytes", RotationOptions{}.max_payload_bytes}}));
}

TEST(WireJson, ErrorsCarryCodeNameAndMessage) {
  EXPECT_EQ(ErrorJson(Status::NotFound("queue 'x' not found")),
            Json({{"code", "not_found"}, {"message", "queue 'x' not found"}}));
}

TEST(WireTime, Rfc3339TimesWithFractionsAndOffsets) {
  const Timestamp base = Timestamp(std::chrono::seconds(1795168800));
  ASSERT_EQ(FormatTime(base), "2026-11-20T10:00:00.000000Z");
  EXPECT_EQ(*ParseTime("2026-11-20T10:00:00Z"), base);
  EXPECT_EQ(*ParseTime("2026-11-20t10:00:00z"), base);
  EXPECT_EQ(*ParseTime("2026-11-20 10:00:00Z"), base);
  EXPECT_EQ(*ParseTime("2026-11-20T11:30:00+01:30"), base);
  EXPECT_EQ(*ParseTime("2026-11-20T05:00:00-05:00"), base);
  EXPECT_EQ(*ParseTime("2026-11-20T10:00:00.25Z"),
            base + std::chrono::milliseconds(250));
  // Past microseconds, digits are cut.
  EXPECT_EQ(*ParseTime("2026-11-20T10:00:00.1234567Z"),
            base + std::chrono::microseconds(123456));
  // What FormatTime writes reads back as the same time.
  const Timestamp odd = base + std::chrono::microseconds(987654321);
  EXPECT_EQ(*ParseTime(FormatTime(odd)), odd);
  for (const char* bad :
       {"", "2026-11-21", "2026-11-21T08:00:00", "2026-11-21T08:00Z",
        "2026-02-30T00:00:00Z", "2026-11-21T24:00:00Z", "2026-11-21T08:00:00.Z",
        "2026-11-21T08:00:00+0100", "2026-11-21T08:00:00Z junk",
        "26-11-21T08:00:00Z", "tomorrow"}) {
    auto t = ParseTime(bad);
    EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << bad;
  }
}

// A second of 60 is refused wherever it falls: at the end of a day that
// had a leap second, at the end of one that had none, mid-day, and behind
// an offset; :59 of the same minute is read.
TEST(WireTime, ASecondOfSixtyIsRefused) {
  for (const char* leap :
       {"2016-12-31T23:59:60Z", "2026-11-20T23:59:60Z", "2026-11-20T10:00:60Z",
        "2026-11-20T10:00:60.5Z", "2026-11-21T00:59:60+01:00"}) {
    auto t = ParseTime(leap);
    EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << leap;
    EXPECT_NE(t.status().message().find("second 60"), std::string::npos)
        << t.status().message();
  }
  EXPECT_EQ(*ParseTime("2026-11-20T10:00:59Z"),
            Timestamp(std::chrono::seconds(1795168859)));
  EXPECT_EQ(ParseTime("2026-11-20T10:00:61Z").status().code(),
            Code::kInvalidArgument);
}

TEST(WireJson, AMessageSentAsJsonGoesOutAsJson) {
  ClaimedMessage m{
      .id = 7,
      .receipt = "r",
      .payload = R"({"a":[1,2]})",
      .headers = {{"content-type", "application/json"}, {"t\"x", "v\n"}}};
  const Json j = ClaimedJson(m);
  EXPECT_EQ(j["payload"], Json::parse(R"({"a":[1,2]})"));
  EXPECT_EQ(j["headers"]["t\"x"], "v\n");
  // The claim reply's own writer gives the same object.
  std::string text;
  AppendClaimed(text, m);
  EXPECT_EQ(Json::parse(text), j);
  // Marked JSON but not JSON: it goes out as text.
  m.payload = "not {json";
  EXPECT_EQ(ClaimedJson(m)["payload"], "not {json");
  text.clear();
  AppendClaimed(text, m);
  EXPECT_EQ(Json::parse(text), ClaimedJson(m));
  // No headers: no "headers" key.
  m.headers.clear();
  EXPECT_FALSE(ClaimedJson(m).contains("headers"));
}

TEST(WireDuration, UnitsAndPlainSeconds) {
  EXPECT_EQ(*ParseDuration("250ms"), Duration(250));
  EXPECT_EQ(*ParseDuration("30"), Duration(30'000));
  EXPECT_EQ(*ParseDuration("0.5"), Duration(500));
  EXPECT_EQ(*ParseDuration("2h"), Duration(7'200'000));
  for (const char* bad : {"", "-1s", "5x", "s", "1e3", "200y"}) {
    auto d = ParseDuration(bad);
    EXPECT_EQ(d.status().code(), Code::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace sqlq::wire
