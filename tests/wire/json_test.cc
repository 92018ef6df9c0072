// The JSON shapes both front ends print (src/wire/json.h): the keys a user
// reads in `sqlq --json` and in the HTTP API's replies.

#include "wire/json.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "wire/duration.h"
#include "wire/json_parse.h"

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

// Durations said back: in the largest whole unit, or in the unit the user
// typed (with sqlq's own form beside it where that differs).
TEST(WireDuration, FormattedInTheUnitTyped) {
  EXPECT_EQ(FormatDuration(Duration(0)), "0");
  EXPECT_EQ(FormatDuration(Duration(1)), "1ms");
  EXPECT_EQ(FormatDuration(Duration(90'000)), "90s");
  EXPECT_EQ(FormatDuration(Duration(43'200'000)), "12h");
  EXPECT_EQ(FormatDuration(Duration(86'400'000)), "1d");
  const Duration twelve_hours(43'200'000);
  EXPECT_EQ(FormatDurationLike(twelve_hours, "13h"), "12h");
  EXPECT_EQ(FormatDurationLike(twelve_hours, "780m"), "720m (12h)");
  EXPECT_EQ(FormatDurationLike(twelve_hours, "1d"), "0.5d (12h)");
  EXPECT_EQ(FormatDurationLike(twelve_hours, "46800"), "43200s (12h)");
  EXPECT_EQ(FormatDurationLike(Duration(1), "0s"), "0.001s (1ms)");
  // No whole number of thousandths of an hour: sqlq's form.
  EXPECT_EQ(FormatDurationLike(Duration(1), "13h"), "1ms");
  EXPECT_EQ(FormatDurationLike(Duration(0), "13h"), "0");
  EXPECT_TRUE(CheckDurationRange("--lease", "12h", twelve_hours, Duration(1),
                                 twelve_hours)
                  .ok());
  Status s = CheckDurationRange("--lease", "13h", Duration(46'800'000),
                                Duration(1), twelve_hours);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "--lease 13h is too long: the range is 1ms to 12h");
}

// {"k0":0,"k1":0,...}: an object of `keys` keys.
std::string WideObject(int keys) {
  std::string s = "{";
  for (int i = 0; i < keys; ++i) {
    s += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
  }
  return s + "}";
}

// The median time of `runs` parses of `text`, in microseconds.
double MedianParseMicros(const std::string& text, int runs) {
  std::vector<double> times;
  for (int i = 0; i < runs; ++i) {
    Json doc;
    const auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(ParseJson(text, {}, "the text", doc).has_value());
    times.push_back(std::chrono::duration<double, std::micro>(
                        std::chrono::steady_clock::now() - start)
                        .count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

TEST(WireJson, ParseJsonKeepsKeysInOrderAndValuesAsGiven) {
  Json doc;
  ASSERT_FALSE(ParseJson(R"({"b":1,"a":[true,null,"x",{"c":-2.5}],"z":{}})", {},
                         "the text", doc)
                   .has_value());
  EXPECT_EQ(Keys(doc), (std::vector<std::string>{"b", "a", "z"}));
  EXPECT_EQ(doc.dump(), R"({"b":1,"a":[true,null,"x",{"c":-2.5}],"z":{}})");
  ASSERT_FALSE(ParseJson("7", {}, "the text", doc).has_value());
  EXPECT_EQ(doc, Json(7));
}

TEST(WireJson, ParseJsonRefusesWhatBreaksItsRules) {
  Json doc;
  auto refusal = [&](std::string_view text, const JsonBounds& bounds = {}) {
    return ParseJson(text, bounds, "the text", doc)
        .value_or(JsonRefusal{"none", ""});
  };
  EXPECT_EQ(refusal("{").code, "malformed_json");
  EXPECT_EQ(refusal("{} x").code, "malformed_json");
  EXPECT_EQ(refusal(std::string_view("{}\0x", 4)).code, "malformed_json");
  EXPECT_EQ(refusal(R"({"a":1,"a":2})").code, "duplicate_field");
  // Past the few keys searched one by one, duplicates are still found.
  std::string wide = WideObject(40);
  wide.back() = ',';
  wide += R"("k33":1})";
  EXPECT_EQ(refusal(wide).code, "duplicate_field");
  EXPECT_EQ(refusal(wide).message,
            R"(the field "k33" appears twice in one object)");
  // The same key in two objects, or in an object and the one inside it,
  // is no duplicate.
  EXPECT_EQ(refusal(R"([{"a":1},{"a":2,"b":{"a":3}}])").code, "none");
  EXPECT_EQ(refusal("[[[]]]", {.max_depth = 2}).message,
            "the text nests deeper than 2 levels");
  EXPECT_EQ(refusal("[1,2,3]", {.max_values = 3}).message,
            "the text holds more than 3 JSON values");
  const JsonRefusal keys = refusal(WideObject(1001), {.max_keys = 1000});
  EXPECT_EQ(keys.code, "json_too_complex");
  EXPECT_EQ(keys.message, "an object in the text has more than 1000 keys");
  EXPECT_EQ(refusal(WideObject(1000), {.max_keys = 1000}).code, "none");
  // Kept on request, as the text has them.
  EXPECT_EQ(refusal(R"({"a":1,"a":2})", {.keep_duplicates = true}).code,
            "none");
  EXPECT_EQ(doc.dump(), R"({"a":1,"a":2})");
}

// Regression: Json's objects find a key by walking the keys before it, and
// the parser asked the object for every key it read (and the duplicate
// check walked them again), so an object of n keys cost n^2: 20,000 keys
// took 23 s in a debug build. Linear: 100 times the keys, 100 times the
// work. Measured on a loaded machine the ratio reaches several hundred
// (1,000 keys stay in the CPU's caches, 100,000 do not; Json::accept, which
// builds nothing, shows the same), while a parser that walks does 10,000
// times the work: the bound lies between.
TEST(WireJson, ParseJsonTakesTimeLinearInTheKeysOfAnObject) {
  const std::string small = WideObject(1000);
  const std::string large = WideObject(100000);
  const double small_us = MedianParseMicros(small, 9);
  const double large_us = MedianParseMicros(large, 3);
  RecordProperty("small_us", std::to_string(small_us));
  RecordProperty("large_us", std::to_string(large_us));
  EXPECT_LT(large_us, 2000 * small_us)
      << "1,000 keys: " << small_us << " us; 100,000 keys: " << large_us
      << " us";
}

// A sender chooses a JSON payload's keys and every reader of the message
// (peek, dead letters, the dashboard) parsed them with Json::parse, whose
// objects cost the square of their keys. Now linear, and a repeated key
// goes out as it was sent, as the claim reply writes it.
TEST(WireJson, AJsonPayloadGoesOutInTimeLinearInItsKeys) {
  auto micros = [](const std::string& payload, int runs) {
    const ClaimedMessage m{.id = 1,
                           .receipt = "r",
                           .payload = payload,
                           .headers = {{"content-type", "application/json"}}};
    std::vector<double> times;
    for (int i = 0; i < runs; ++i) {
      const auto start = std::chrono::steady_clock::now();
      const Json j = ClaimedJson(m);
      EXPECT_TRUE(j["payload"].is_object());
      times.push_back(std::chrono::duration<double, std::micro>(
                          std::chrono::steady_clock::now() - start)
                          .count());
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };
  const double small_us = micros(WideObject(1000), 9);
  const double large_us = micros(WideObject(100000), 3);
  EXPECT_LT(large_us, 2000 * small_us)
      << "1,000 keys: " << small_us << " us; 100,000 keys: " << large_us
      << " us";

  ClaimedMessage m{.id = 1,
                   .receipt = "r",
                   .payload = R"({"a":1,"a":2})",
                   .headers = {{"content-type", "application/json"}}};
  std::string text;
  AppendClaimed(text, m);
  EXPECT_EQ(ClaimedJson(m).dump(), text);
}

}  // namespace
}  // namespace sqlq::wire
