// Input rules shared by every engine and front end.

#include "core/validate.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "core/columns.h"
#include "tests/support/test_util.h"

namespace sqlq::core {
namespace {

constexpr Timestamp kNow = Timestamp(std::chrono::seconds(1704067200));
Timestamp Now() { return kNow; }

TEST(ValidateName, AcceptsOneToSixtyFourLettersDigitsUnderscoresDashesDots) {
  for (const std::string& name :
       {std::string("a"), std::string("Z"), std::string("0"), std::string("_"),
        std::string("-"), std::string("emails-2024_v2"),
        std::string("orders.fifo"), std::string("a..b."),
        std::string(64, 'x')}) {
    SCOPED_TRACE(name);
    EXPECT_OK(ValidateName("queue", name));
  }
}

TEST(ValidateName, RejectsEmptyAndTooLongNames) {
  EXPECT_CODE(ValidateName("queue", ""), Code::kInvalidArgument);
  EXPECT_CODE(ValidateName("queue", std::string(65, 'x')),
              Code::kInvalidArgument);
  EXPECT_CODE(ValidateName("queue", std::string(10000, 'x')),
              Code::kInvalidArgument);
}

TEST(ValidateName, RejectsEveryOtherCharacter) {
  for (const std::string& name :
       {std::string("a b"), std::string("x;DROP TABLE"), std::string("."),
        std::string(".."), std::string(".hidden"), std::string("a/b"),
        std::string("'q'"), std::string("\"q\""), std::string("a\nb"),
        std::string("a\tb"), std::string("a%"), std::string("caf\xc3\xa9"),
        std::string("\xff"), std::string("a\0b", 3)}) {
    SCOPED_TRACE(name);
    EXPECT_CODE(ValidateName("queue", name), Code::kInvalidArgument);
  }
}

TEST(ValidateName, MessageNamesTheKindAndTheName) {
  Status s = ValidateName("ring", "bad name");
  EXPECT_NE(s.message().find("ring"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("bad name"), std::string::npos) << s.ToString();
}

TEST(ValidateQueueOptions, DefaultsAreValid) {
  EXPECT_OK(ValidateQueueOptions({}));
}

TEST(ValidateQueueOptions, BoundsAreInclusive) {
  EXPECT_OK(ValidateQueueOptions({.max_attempts = 1}));
  EXPECT_OK(ValidateQueueOptions({.max_attempts = 1000000}));
  EXPECT_OK(ValidateQueueOptions({.lease = Duration(1)}));
  EXPECT_OK(ValidateQueueOptions({.lease = kMaxLease}));
  EXPECT_OK(ValidateQueueOptions(
      {.backoff_base = Duration(5), .backoff_max = Duration(5)}));
  EXPECT_OK(ValidateQueueOptions({.max_payload_bytes = 1}));
  EXPECT_OK(ValidateQueueOptions({.max_payload_bytes = kMaxPayloadLimit}));
}

TEST(ValidateMessage, PayloadAtTheLimitIsAcceptedAndOneMoreIsTooLarge) {
  EXPECT_OK(ValidateMessage({.payload = std::string(10, 'x')}, 10, Now()));
  EXPECT_CODE(ValidateMessage({.payload = std::string(11, 'x')}, 10, Now()),
              Code::kTooLarge);
}

TEST(ValidateBatch, NamesTheOffendingMessage) {
  std::vector<Message> batch = {{.payload = "ok"}, {.payload = "too long"}};
  Status s = ValidateBatch(batch, 4, Now());
  EXPECT_EQ(s.code(), Code::kTooLarge);
  EXPECT_NE(s.message().find("message 2"), std::string::npos) << s.ToString();
}

TEST(ValidateMessage, HeadersWithinTheLimitsAreAccepted) {
  Headers at_limits;
  for (std::size_t i = 0; i < kMaxHeaders; ++i) {
    at_limits[fmt::format("k{:03}", i)] = std::string(200, 'v');
  }
  EXPECT_OK(ValidateMessage({.headers = at_limits}, 10, Now()));
  EXPECT_OK(ValidateMessage(
      {.headers = {{"traceparent", "00-abc-def-01"},
                   {std::string(kMaxHeaderKey, 'k'), ""},
                   {"tag.v1:x_y-z", std::string(kMaxHeaderValue, 'v')}}},
      10, Now()));
  EXPECT_OK(ValidateMessage({.headers = {{"h", "caf\xc3\xa9"}}}, 10, Now()));
}

TEST(ValidateMessage, HeadersPastALimitAreRefusedWithTheReason) {
  Headers too_many;
  for (std::size_t i = 0; i <= kMaxHeaders; ++i) {
    too_many[fmt::format("k{}", i)] = "v";
  }
  Headers too_big;
  for (int i = 0; i < 5; ++i) {
    too_big[fmt::format("k{}", i)] = std::string(kMaxHeaderValue, 'v');
  }
  struct Case {
    Headers headers;
    std::string says;
  } cases[] = {
      {too_many, "more than the 64"},
      {too_big, "exceed 16384"},
      {{{"", "v"}}, "must be 1 to 128"},
      {{{std::string(kMaxHeaderKey + 1, 'k'), "v"}}, "must be 1 to 128"},
      {{{"has space", "v"}}, "only letters"},
      {{{"quote\"", "v"}}, "only letters"},
      {{{"k", std::string(kMaxHeaderValue + 1, 'v')}}, "more than 4096"},
      {{{"k", "\xff"}}, "UTF-8"},
      {{{"k", std::string("a\0b", 3)}}, "NUL"},
  };
  for (const Case& c : cases) {
    Status s = ValidateMessage({.headers = c.headers}, 10, Now());
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << c.says;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s.ToString();
  }
}

TEST(ValidateMessage, RunAtWithinAYearEitherWayIsAcceptedButNotWithADelay) {
  EXPECT_OK(ValidateMessage({.run_at = kNow + kMaxDelay}, 10, Now()));
  EXPECT_OK(ValidateMessage({.run_at = kNow - kMaxDelay}, 10, Now()));
  EXPECT_CODE(
      ValidateMessage({.run_at = kNow + kMaxDelay + std::chrono::seconds(1)},
                      10, Now()),
      Code::kInvalidArgument);
  EXPECT_CODE(
      ValidateMessage({.run_at = kNow - kMaxDelay - std::chrono::seconds(1)},
                      10, Now()),
      Code::kInvalidArgument);
  Status both = ValidateMessage(
      {.delay = std::chrono::seconds(1), .run_at = kNow}, 10, Now());
  EXPECT_EQ(both.code(), Code::kInvalidArgument);
  EXPECT_NE(both.message().find("not both"), std::string::npos);
}

TEST(Columns, HeadersRoundTripThroughTheirColumnText) {
  const Headers h = {{"a", "1"}, {"trace", "x\"y\\z"}, {"u", "caf\xc3\xa9"}};
  EXPECT_EQ(DecodeHeaders(EncodeHeaders(h)), h);
  EXPECT_EQ(EncodeHeaders({}), "");
  EXPECT_TRUE(DecodeHeaders("").empty());
  // Written by hand in SQL: what can be read is read.
  EXPECT_EQ(DecodeHeaders(R"({"a": "1", "n": 2})"), (Headers{{"a", "1"}}));
  EXPECT_TRUE(DecodeHeaders("not json").empty());
}

TEST(Columns, ErrorHistoryReadsTheEnginesEntries) {
  auto e = DecodeErrors(
      R"([{"attempt": 1, "at": 5, "error": "x"}, {"at": 7, "error": "y",
          "attempt": 2}])");
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].attempt, 1);
  EXPECT_EQ(e[0].at.time_since_epoch().count(), 5);
  EXPECT_EQ(e[0].error, "x");
  EXPECT_EQ(e[1].attempt, 2);
  EXPECT_EQ(e[1].error, "y");
  EXPECT_TRUE(DecodeErrors("").empty());
}

TEST(Columns, ErrorTextIsCutAndMadeValidUtf8) {
  EXPECT_EQ(CleanErrorText("plain"), "plain");
  EXPECT_EQ(CleanErrorText("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(CleanErrorText(std::string("a\0b", 3)),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(CleanErrorText("\xff\xfe"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(CleanErrorText(std::string(5000, 'e')).size(), kMaxErrorText);
}

TEST(ValidateList, RejectsBadLimitsAndNegativeAfterId) {
  EXPECT_OK(ValidateList({}));
  EXPECT_CODE(ValidateList({.limit = 0}), Code::kInvalidArgument);
  EXPECT_CODE(ValidateList({.limit = kMaxListLimit + 1}),
              Code::kInvalidArgument);
  EXPECT_CODE(ValidateList({.after_id = -1}), Code::kInvalidArgument);
}

}  // namespace
}  // namespace sqlq::core
