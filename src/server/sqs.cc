#include "server/sqs.h"

#include <fmt/format.h>
#include <openssl/rand.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <string_view>

#include "server/api.h"
#include "server/sigv4.h"
#include "server/target.h"

namespace sqlq::server {
namespace {

constexpr std::string_view kXmlns =
    "http://queue.amazonaws.com/doc/2012-11-05/";

// An error as SQS sends it: its code (what the SDKs map to exception
// classes), HTTP status, and whose fault it is.
struct SqsError {
  unsigned status = 400;
  std::string code;
  std::string message;
  bool sender = true;
};

[[noreturn]] void Fail(unsigned status, std::string code, std::string message) {
  throw SqsError{status, std::move(code), std::move(message), status < 500};
}

[[noreturn]] void FailStatus(const Status& s) {
  switch (s.code()) {
    case Code::kNotFound:
      Fail(400, "AWS.SimpleQueueService.NonExistentQueue",
           "The specified queue does not exist.");
    case Code::kInvalidArgument:
      Fail(400, "InvalidParameterValue", s.message());
    case Code::kAlreadyExists:
      Fail(400, "QueueAlreadyExists", s.message());
    default:
      Fail(500, "InternalFailure", s.message());
  }
}

std::string Xml(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string RequestId() {
  unsigned char b[16];
  RAND_bytes(b, sizeof b);
  return fmt::format(
      "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-"
      "{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
      b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
      b[12], b[13], b[14], b[15]);
}

Reply XmlReply(unsigned status, std::string body) {
  Reply r;
  r.status = status;
  r.text = "<?xml version=\"1.0\"?>" + std::move(body);
  r.content_type = "text/xml";
  return r;
}

// <ACTIONResponse><ACTIONResult>result</ACTIONResult>...</ACTIONResponse>;
// no Result element when `result` is unset.
Reply Success(std::string_view action, std::optional<std::string> result) {
  std::string body = fmt::format("<{}Response xmlns=\"{}\">", action, kXmlns);
  if (result)
    body += fmt::format("<{0}Result>{1}</{0}Result>", action, *result);
  body += fmt::format(
      "<ResponseMetadata><RequestId>{}</RequestId></ResponseMetadata></"
      "{}Response>",
      RequestId(), action);
  return XmlReply(200, std::move(body));
}

Reply ErrorXml(const SqsError& e) {
  return XmlReply(
      e.status,
      fmt::format("<ErrorResponse xmlns=\"{}\"><Error><Type>{}</Type><Code>{}"
                  "</Code><Message>{}</Message><Detail/></Error><RequestId>{}"
                  "</RequestId></ErrorResponse>",
                  kXmlns, e.sender ? "Sender" : "Receiver", Xml(e.code),
                  Xml(e.message), RequestId()));
}

// The parameters of a query-protocol request: the query, then the form
// body of a POST.
std::map<std::string, std::string> Parameters(const Request& r) {
  std::map<std::string, std::string> out;
  const std::size_t q = r.target.find('?');
  if (q != std::string::npos) {
    AddDecodedPairs(std::string_view(r.target).substr(q + 1), out);
  }
  if (r.method == "POST") AddDecodedPairs(r.body, out);
  return out;
}

// The queue named by a QueueUrl (http://HOST/ACCOUNT/NAME; the host is
// not checked: clients reach the server by many names).
std::string QueueOfUrl(std::string_view url) {
  const std::size_t slash = url.rfind('/');
  if (url.empty() || slash == std::string_view::npos ||
      slash + 1 == url.size()) {
    Fail(400, "AWS.SimpleQueueService.NonExistentQueue",
         "The specified queue does not exist.");
  }
  return PercentDecode(url.substr(slash + 1));
}

// The settings SQS's CreateQueue takes (Attribute.N.Name/Value).
std::map<std::string, std::string> Attributes(
    const std::map<std::string, std::string>& params) {
  std::map<std::string, std::string> out;
  for (int n = 1;; ++n) {
    auto name = params.find(fmt::format("Attribute.{}.Name", n));
    if (name == params.end()) break;
    auto value = params.find(fmt::format("Attribute.{}.Value", n));
    out[name->second] = value == params.end() ? "" : value->second;
  }
  return out;
}

QueueOptions OptionsOf(const std::map<std::string, std::string>& attrs) {
  QueueOptions o;
  for (const auto& [name, value] : attrs) {
    if (name == "VisibilityTimeout") {
      int seconds = -1;
      auto [end, ec] =
          std::from_chars(value.data(), value.data() + value.size(), seconds);
      if (ec != std::errc() || end != value.data() + value.size() ||
          seconds < 0 || seconds > 43200) {
        Fail(400, "InvalidAttributeValue",
             fmt::format("Invalid value for the parameter VisibilityTimeout: "
                         "'{}' (0 to 43200 seconds)",
                         value));
      }
      // sqlq leases last at least a millisecond.
      o.lease = seconds == 0 ? Duration(std::chrono::milliseconds(1))
                             : Duration(std::chrono::seconds(seconds));
    } else {
      Fail(400, "InvalidAttributeName",
           fmt::format("Unknown or not yet supported attribute {}", name));
    }
  }
  return o;
}

}  // namespace

SqsApi::SqsApi(Store& store, const Auth& auth,
               std::function<std::chrono::system_clock::time_point()> now)
    : store_(store), auth_(auth), now_(std::move(now)) {}

bool SqsApi::Wants(std::string_view method, std::string_view target,
                   std::string_view content_type,
                   std::string_view authorization, bool has_amz_target) {
  if (target.starts_with("/v1/") || target == "/v1" ||
      target.starts_with("/v1?")) {
    return false;
  }
  if (has_amz_target || authorization.starts_with("AWS4-")) return true;
  if (method == "POST" &&
      content_type.starts_with("application/x-www-form-urlencoded")) {
    return true;
  }
  const std::size_t q = target.find('?');
  return q != std::string_view::npos &&
         (target.substr(q + 1).starts_with("Action=") ||
          target.find("&Action=", q) != std::string_view::npos);
}

Reply SqsApi::Handle(const Request& r) {
  std::string action = "Unknown";
  Reply reply = Run(r, action);
  // Routes label metrics: only actions this endpoint knows, so that a
  // client cannot make up new series.
  static constexpr std::string_view kKnown[] = {"CreateQueue", "GetQueueUrl",
                                                "ListQueues", "DeleteQueue"};
  const bool known = std::find(std::begin(kKnown), std::end(kKnown), action) !=
                     std::end(kKnown);
  reply.route = known ? "SQS " + action : "SQS (other)";
  return reply;
}

Reply SqsApi::Run(const Request& r, std::string& action) {
  try {
    const KeyEntry* key = nullptr;
    if (auth_.enabled()) {
      const sigv4::Verdict v = sigv4::Verify(
          {.method = r.method,
           .target = r.target,
           .headers = r.headers,
           .body = r.body},
          [&](std::string_view id) -> const std::string* {
            const KeyEntry* k = auth_.FindKey(id);
            return k == nullptr ? nullptr : &k->secret;
          },
          now_());
      if (v.refusal != sigv4::Refusal::kNone) {
        const sigv4::SqsError e = sigv4::ErrorOf(v.refusal);
        Fail(static_cast<unsigned>(e.status), std::string(e.code), v.message);
      }
      key = auth_.FindKey(v.access_key);
    }
    auto allowed = [&](unsigned perm, const std::string& name) {
      return key == nullptr || Auth::Allows(*key, perm, name);
    };
    auto sees = [&](const std::string& name) {
      return key == nullptr || Auth::Sees(*key, name);
    };
    auto params = Parameters(r);
    if (params.count("Action") == 0) {
      Fail(400, "MissingAction", "the request names no Action");
    }
    action = params["Action"];
    const std::optional<std::string> host =
        sigv4::HeaderValue(r.headers, "host");
    auto url_of = [&](const std::string& name) {
      return fmt::format("http://{}/{}/{}", host ? *host : "localhost",
                         kSqsAccount, name);
    };
    auto param = [&](const char* name) -> const std::string& {
      auto it = params.find(name);
      if (it == params.end()) {
        Fail(400, "MissingParameter",
             fmt::format("The request must contain the parameter {}.", name));
      }
      return it->second;
    };
    auto denied = [&](const std::string& name) {
      Fail(403, "AccessDenied",
           fmt::format("Access to the resource {} is denied.", url_of(name)));
    };

    if (action == "CreateQueue") {
      const std::string& name = param("QueueName");
      if (!allowed(kAdmin, name)) denied(name);
      const auto attributes = Attributes(params);
      const QueueOptions wanted = OptionsOf(attributes);
      auto created = store_.CreateQueue(name, wanted);
      if (!created.ok() && created.status().code() == Code::kAlreadyExists) {
        // Idempotent, as SQS is: the attributes given must be the queue's.
        auto existing = store_.Queue(name);
        if (!existing.ok()) FailStatus(existing.status());
        if (attributes.count("VisibilityTimeout") != 0 &&
            existing->options().lease != wanted.lease) {
          Fail(400, "QueueAlreadyExists",
               fmt::format("A queue already exists with the same name and a "
                           "different value for attribute VisibilityTimeout"));
        }
      } else if (!created.ok()) {
        FailStatus(created.status());
      }
      return Success(action, "<QueueUrl>" + Xml(url_of(name)) + "</QueueUrl>");
    }
    if (action == "GetQueueUrl") {
      const std::string& name = param("QueueName");
      if (!sees(name)) denied(name);
      auto q = store_.Queue(name);
      if (!q.ok()) FailStatus(q.status());
      return Success(action, "<QueueUrl>" + Xml(url_of(name)) + "</QueueUrl>");
    }
    if (action == "ListQueues") {
      const std::string prefix =
          params.count("QueueNamePrefix") ? params["QueueNamePrefix"] : "";
      int max = 1000;
      if (params.count("MaxResults")) {
        const std::string& v = params["MaxResults"];
        auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), max);
        if (ec != std::errc() || end != v.data() + v.size() || max < 1 ||
            max > 1000) {
          Fail(400, "InvalidParameterValue",
               "MaxResults must be an integer from 1 to 1000");
        }
      }
      const std::string after =
          params.count("NextToken") ? params["NextToken"] : "";
      auto all = store_.ListQueues();
      if (!all.ok()) FailStatus(all.status());
      std::vector<std::string> names;
      for (const QueueInfo& q : *all) {
        if (q.name.starts_with(prefix) && sees(q.name) &&
            (after.empty() || q.name > after)) {
          names.push_back(q.name);
        }
      }
      std::sort(names.begin(), names.end());
      std::string result;
      const bool more = static_cast<int>(names.size()) > max;
      if (more) names.resize(static_cast<std::size_t>(max));
      for (const std::string& n : names) {
        result += "<QueueUrl>" + Xml(url_of(n)) + "</QueueUrl>";
      }
      // Paging only when asked for with MaxResults, as SQS does.
      if (more && params.count("MaxResults")) {
        result += "<NextToken>" + Xml(names.back()) + "</NextToken>";
      }
      return Success(action, result);
    }
    if (action == "DeleteQueue") {
      const std::string name = QueueOfUrl(param("QueueUrl"));
      if (!allowed(kAdmin, name)) denied(name);
      Status s = store_.DropQueue(name);
      if (!s.ok()) FailStatus(s);
      return Success(action, std::nullopt);
    }
    Fail(400, "InvalidAction",
         fmt::format("The action {} is not valid for this endpoint.", action));
  } catch (const SqsError& e) {
    return ErrorXml(e);
  } catch (const HttpError& e) {  // a malformed percent escape
    return ErrorXml({400, "MalformedQueryString", e.message, true});
  }
}

}  // namespace sqlq::server
