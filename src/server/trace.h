// Trace context on the wire: W3C Trace Context's `traceparent` (what
// OpenTelemetry and sqlq's clients send) and AWS X-Ray's trace header (what
// the AWS SDKs send, as `X-Amzn-Trace-Id` and as SQS's AWSTraceHeader
// message attribute). The two carry the same ids: X-Ray writes the 32-digit
// trace id as Root=1-<first 8 digits>-<other 24>, and the parent span id as
// Parent=<16 digits>.
#ifndef SQLQ_SERVER_TRACE_H_
#define SQLQ_SERVER_TRACE_H_

#include <optional>
#include <string>
#include <string_view>

namespace sqlq::server {

// The trace id a request carries, for its log lines: the 32 hex digits of
// its `traceparent`, else of the root of its X-Ray header. "" when neither
// is there and well formed.
std::string TraceIdOf(std::string_view traceparent, std::string_view xray);

// An X-Ray trace header as a traceparent ("00-<trace>-<parent>-01", or -00
// when not sampled); nullopt without a well-formed Root and Parent.
std::optional<std::string> TraceparentOfXRay(std::string_view xray);
// A traceparent as an X-Ray trace header
// ("Root=1-...;Parent=...;Sampled=1"); nullopt when it is not well formed.
std::optional<std::string> XRayOfTraceparent(std::string_view traceparent);

}  // namespace sqlq::server

#endif  // SQLQ_SERVER_TRACE_H_
