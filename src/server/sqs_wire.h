// The two wire protocols of Amazon SQS, read into one shape and written back
// (docs/sqs.md, "Protocols"):
//
// - the query protocol: form-encoded `Action=...` parameters with flattened
//   lists and maps (`Attribute.1.Name`, `SendMessageBatchRequestEntry.2.Id`),
//   XML replies and XML errors;
// - the JSON protocol: `X-Amz-Target: AmazonSQS.ACTION` and an
//   `application/x-amz-json-1.0` body, JSON replies, errors with `__type`
//   and the `x-amzn-query-error` header.
//
// A call's input is read into the JSON protocol's shape whatever the
// protocol (the query protocol's lists become arrays, its name/value pairs
// objects; values stay strings), so that each operation is written once.

#ifndef SQLQ_SERVER_SQS_WIRE_H_
#define SQLQ_SERVER_SQS_WIRE_H_

#include <optional>
#include <string>
#include <string_view>

#include "server/reply.h"

namespace sqlq::server {

struct Request;

namespace sqs {

enum class Protocol { kQuery, kJson };

// An error as SQS sends it. `code` is the query protocol's code (what
// boto3 and the JSON protocol's x-amzn-query-error header carry); `shape`
// the JSON protocol's error shape, when it has another name.
struct Error {
  unsigned status = 400;
  std::string_view code;
  std::string_view shape;
  std::string message;
};

// The errors the endpoint gives, by the name SQS documents them under.
struct ErrorKind {
  std::string_view code;
  std::string_view shape;  // empty: the same as code
  unsigned status;
};
inline constexpr ErrorKind kNonExistentQueue{
    "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist", 400};
inline constexpr ErrorKind kQueueAlreadyExists{"QueueAlreadyExists",
                                               "QueueNameExists", 400};
inline constexpr ErrorKind kReceiptHandleIsInvalid{"ReceiptHandleIsInvalid", "",
                                                   400};
inline constexpr ErrorKind kMessageNotInflight{
    "AWS.SimpleQueueService.MessageNotInflight", "MessageNotInflight", 400};
inline constexpr ErrorKind kBatchEntryIdsNotDistinct{
    "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
    "BatchEntryIdsNotDistinct", 400};
inline constexpr ErrorKind kTooManyEntriesInBatchRequest{
    "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
    "TooManyEntriesInBatchRequest", 400};
inline constexpr ErrorKind kEmptyBatchRequest{
    "AWS.SimpleQueueService.EmptyBatchRequest", "EmptyBatchRequest", 400};
inline constexpr ErrorKind kInvalidBatchEntryId{
    "AWS.SimpleQueueService.InvalidBatchEntryId", "InvalidBatchEntryId", 400};
inline constexpr ErrorKind kBatchRequestTooLong{
    "AWS.SimpleQueueService.BatchRequestTooLong", "BatchRequestTooLong", 400};
inline constexpr ErrorKind kInvalidAttributeName{"InvalidAttributeName", "",
                                                 400};
inline constexpr ErrorKind kInvalidAttributeValue{"InvalidAttributeValue", "",
                                                  400};
inline constexpr ErrorKind kInvalidMessageContents{"InvalidMessageContents", "",
                                                   400};
inline constexpr ErrorKind kInvalidParameterValue{"InvalidParameterValue", "",
                                                  400};
inline constexpr ErrorKind kMissingParameter{"MissingParameter", "", 400};
inline constexpr ErrorKind kAccessDenied{
    "AccessDenied", "com.amazon.coral.service#AccessDeniedException", 403};
inline constexpr ErrorKind kInvalidAction{
    "InvalidAction", "com.amazon.coral.service#UnknownOperationException", 400};
inline constexpr ErrorKind kMalformedInput{"MalformedQueryString",
                                           "SerializationException", 400};
inline constexpr ErrorKind kOverLimit{"OverLimit", "", 403};
inline constexpr ErrorKind kResourceNotFound{"ResourceNotFoundException", "",
                                             404};
inline constexpr ErrorKind kRequestThrottled{"RequestThrottled", "", 400};
inline constexpr ErrorKind kServiceUnavailable{"ServiceUnavailable", "", 503};
inline constexpr ErrorKind kInternalFailure{"InternalFailure", "", 500};

// Throws the error (caught by SqsApi::Handle, which answers with it).
[[noreturn]] void Fail(const ErrorKind& kind, std::string message);
// Throws an error whose code is known only at run time (signatures).
[[noreturn]] void Fail(unsigned status, std::string_view code,
                       std::string message);

struct Call {
  Protocol protocol = Protocol::kQuery;
  std::string action;  // "SendMessage"; empty when the request names none
  Json input = Json::object();
};

// The most parameters a query-protocol request may have, in its query
// string and form body together (docs/sqs.md, "Limits"). SQS's largest
// request, a SendMessageBatch of 10 entries with 10 message attributes
// each, has under 400; a request past it is refused before any parameter
// is decoded. The JSON protocol's bodies have the HTTP API's bounds
// (ParseBody).
inline constexpr std::size_t kMaxParameters = 1000;

// Reads a request of either protocol. Throws the SQS error for a body or
// parameters that do not parse.
Call Read(const Request& request);

// The reply to a call that succeeded with `output` (the JSON protocol's
// shape; null for operations that return nothing).
Reply Write(const Call& call, const Json& output);
Reply WriteError(Protocol protocol, const Error& error);

// `bytes` random bytes in lower-case hex (request ids, task handles).
std::string RandomHex(std::size_t bytes);

// Text as XML element content: markup and carriage returns escaped.
std::string XmlText(std::string_view text);

}  // namespace sqs
}  // namespace sqlq::server

#endif  // SQLQ_SERVER_SQS_WIRE_H_
