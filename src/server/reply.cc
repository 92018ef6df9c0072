#include "server/reply.h"

namespace sqlq::server {

std::string Reply::Body() const {
  if (!text.empty() || content_type != "application/json") return text;
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Reply JsonReply(unsigned status, Json body) {
  Reply r;
  r.status = status;
  r.json = std::move(body);
  return r;
}

Reply ErrorReply(unsigned status, std::string_view code,
                 std::string_view message) {
  return JsonReply(
      status,
      {{"error",
        {{"code", std::string(code)}, {"message", std::string(message)}}}});
}

void Throw(unsigned status, std::string code, std::string message) {
  throw HttpError{status, std::move(code), std::move(message)};
}

unsigned HttpStatusFor(Code code) {
  switch (code) {
    case Code::kOk:
      return 200;
    case Code::kInvalidArgument:
      return 400;
    case Code::kTooLarge:
      return 413;
    case Code::kNotFound:
      return 404;
    case Code::kAlreadyExists:
    case Code::kFailedPrecondition:
      return 409;
    case Code::kBusy:
    case Code::kUnavailable:
    case Code::kPermissionDenied:  // the database refuses us: not the client
      return 503;
    case Code::kTimeout:
      return 504;
    case Code::kOutcomeUnknown:
    case Code::kCorruption:
    case Code::kInternal:
      return 500;
  }
  return 500;
}

Reply StatusReply(const Status& status) {
  return ErrorReply(HttpStatusFor(status.code()), CodeName(status.code()),
                    status.message());
}

}  // namespace sqlq::server
