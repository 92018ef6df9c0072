// Input rules shared by every engine and front end.

#include "core/validate.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/support/test_util.h"

namespace sqlq::core {
namespace {

TEST(ValidateName, AcceptsOneToSixtyFourLettersDigitsUnderscoresAndDashes) {
  for (const std::string& name :
       {std::string("a"), std::string("Z"), std::string("0"), std::string("_"),
        std::string("-"), std::string("emails-2024_v2"),
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
       {std::string("a b"), std::string("x;DROP TABLE"), std::string("a.b"),
        std::string("a/b"), std::string("'q'"), std::string("\"q\""),
        std::string("a\nb"), std::string("a\tb"), std::string("a%"),
        std::string("caf\xc3\xa9"), std::string("\xff"),
        std::string("a\0b", 3)}) {
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
  EXPECT_OK(ValidateMessage({.payload = std::string(10, 'x')}, 10));
  EXPECT_CODE(ValidateMessage({.payload = std::string(11, 'x')}, 10),
              Code::kTooLarge);
}

TEST(ValidateBatch, NamesTheOffendingMessage) {
  std::vector<Message> batch = {{.payload = "ok"}, {.payload = "too long"}};
  Status s = ValidateBatch(batch, 4);
  EXPECT_EQ(s.code(), Code::kTooLarge);
  EXPECT_NE(s.message().find("message 2"), std::string::npos) << s.ToString();
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
