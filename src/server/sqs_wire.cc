#include "server/sqs_wire.h"

#include <fmt/format.h>
#include <openssl/rand.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <vector>

#include "server/body.h"
#include "server/request.h"
#include "server/sigv4.h"
#include "server/target.h"

namespace sqlq::server::sqs {
namespace {

constexpr std::string_view kXmlns =
    "http://queue.amazonaws.com/doc/2012-11-05/";
constexpr std::string_view kJsonType = "application/x-amz-json-1.0";
constexpr std::string_view kTargetPrefix = "AmazonSQS.";

std::string RequestId() {
  const std::string h = RandomHex(16);
  return fmt::format("{}-{}-{}-{}-{}", h.substr(0, 8), h.substr(8, 4),
                     h.substr(12, 4), h.substr(16, 4), h.substr(20));
}

bool IsIndex(std::string_view s) {
  if (s.empty() || s.size() > 6 || s[0] == '0') return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// The query protocol's parameters are read into a Tree, whose objects are
// std::maps, and made a Json (whose objects find a key by walking all of
// theirs) once complete: lookups while building cost log n, not n.
using Tree = nlohmann::json;

// Flattened names as a tree: "A.1.B" -> {"A": {"1": {"B": value}}}.
// Numbered levels are made arrays afterwards (Arrays).
void Put(Tree& root, std::string_view name, const std::string& value) {
  // SQS's deepest name has five parts
  // (SendMessageBatchRequestEntry.1.MessageAttribute.1.Name).
  if (std::count(name.begin(), name.end(), '.') > 6) {
    Fail(kMalformedInput, "parameter names have at most seven parts");
  }
  Tree* at = &root;
  for (;;) {
    const std::size_t dot = name.find('.');
    const std::string key(name.substr(0, dot));
    if (key.empty() || !at->is_object()) {
      Fail(kMalformedInput, fmt::format("malformed parameter name"));
    }
    if (dot == std::string_view::npos) {
      (*at)[key] = value;
      return;
    }
    at = &(*at)[key];
    if (at->is_null()) *at = Tree::object();
    name.remove_prefix(dot + 1);
  }
}

// Objects whose keys are all 1, 2, ... become arrays in that order.
Tree Arrays(Tree v) {
  if (!v.is_object()) return v;
  bool numbered = !v.empty();
  for (const auto& [k, _] : v.items()) numbered = numbered && IsIndex(k);
  if (!numbered) {
    for (auto& [k, e] : v.items()) e = Arrays(std::move(e));
    return v;
  }
  std::map<int, Tree> in_order;
  for (auto& [k, e] : v.items()) in_order[std::stoi(k)] = Arrays(std::move(e));
  Tree out = Tree::array();
  for (auto& [_, e] : in_order) out.push_back(std::move(e));
  return out;
}

// The name/value lists of the query protocol as the JSON protocol's
// objects ("Attribute": [{"Name", "Value"}] -> "Attributes": {Name: Value}).
Tree PairsToObject(const Tree& list, const char* key, const char* value) {
  Tree out = Tree::object();
  if (!list.is_array()) Fail(kMalformedInput, "malformed parameter list");
  for (const Tree& e : list) {
    if (!e.is_object() || !e.contains(key) || !e[key].is_string()) {
      Fail(kMalformedInput,
           fmt::format("an entry of a list has no {} parameter", key));
    }
    out[e[key].get<std::string>()] = e.contains(value) ? e[value] : Tree("");
  }
  return out;
}

Tree Normalize(Tree v) {
  if (v.is_array()) {
    for (Tree& e : v) e = Normalize(std::move(e));
    return v;
  }
  if (!v.is_object()) return v;
  Tree out = Tree::object();
  for (auto& [k, e] : v.items()) {
    if (k == "Attribute" || k == "MessageSystemAttribute") {
      out[k + "s"] = PairsToObject(e, "Name", "Value");
    } else if (k == "MessageAttribute") {
      out["MessageAttributes"] = PairsToObject(e, "Name", "Value");
    } else if (k == "Tag") {
      out["Tags"] = PairsToObject(e, "Key", "Value");
    } else if (k == "AttributeName" || k == "MessageAttributeName" ||
               k == "MessageSystemAttributeName" || k == "TagKey") {
      out[k + "s"] = e;
    } else if (k.ends_with("BatchRequestEntry")) {
      out["Entries"] = Normalize(std::move(e));
    } else {
      out[k] = Normalize(std::move(e));
    }
  }
  return out;
}

// The element each entry of a list is written as, in XML.
std::string ListMember(std::string_view action, std::string_view key) {
  if (key == "QueueUrls" || key == "queueUrls") return "QueueUrl";
  if (key == "Messages") return "Message";
  if (key == "Successful") return std::string(action) + "ResultEntry";
  if (key == "Failed") return "BatchResultErrorEntry";
  if (key == "Results") return std::string(action) + "ResultEntry";
  return std::string(key);
}

std::string ScalarText(const Json& v) {
  if (v.is_string()) return XmlText(v.get_ref<const std::string&>());
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void WriteXml(std::string& out, std::string_view action, const Json& obj) {
  for (const auto& [k, v] : obj.items()) {
    if (k == "Attributes" && v.is_object()) {
      for (const auto& [name, value] : v.items()) {
        out += fmt::format(
            "<Attribute><Name>{}</Name><Value>{}</Value>"
            "</Attribute>",
            XmlText(name), ScalarText(value));
      }
    } else if (k == "MessageAttributes" && v.is_object()) {
      for (const auto& [name, value] : v.items()) {
        out += "<MessageAttribute><Name>" + XmlText(name) + "</Name><Value>";
        WriteXml(out, action, value);
        out += "</Value></MessageAttribute>";
      }
    } else if (k == "Tags" && v.is_object()) {
      for (const auto& [name, value] : v.items()) {
        out += fmt::format("<Tag><Key>{}</Key><Value>{}</Value></Tag>",
                           XmlText(name), ScalarText(value));
      }
    } else if (v.is_array()) {
      const std::string member = ListMember(action, k);
      for (const Json& e : v) {
        out += "<" + member + ">";
        if (e.is_object()) {
          WriteXml(out, action, e);
        } else {
          out += ScalarText(e);
        }
        out += "</" + member + ">";
      }
    } else if (v.is_object()) {
      out += "<" + k + ">";
      WriteXml(out, action, v);
      out += "</" + k + ">";
    } else {
      out += fmt::format("<{0}>{1}</{0}>", k, ScalarText(v));
    }
  }
}

// The JSON protocol's replies: JSON under its own content type.
Reply AmzJsonReply(unsigned status, const Json& body) {
  Reply r;
  r.status = status;
  r.text = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  r.content_type = std::string(kJsonType);
  r.headers.emplace_back("x-amzn-RequestId", RequestId());
  return r;
}

Reply XmlReply(unsigned status, std::string body) {
  Reply r;
  r.status = status;
  r.text = "<?xml version=\"1.0\"?>" + std::move(body);
  r.content_type = "text/xml";
  return r;
}

}  // namespace

std::string RandomHex(std::size_t bytes) {
  std::vector<unsigned char> b(bytes);
  RAND_bytes(b.data(), static_cast<int>(b.size()));
  return HexOf(b.data(), b.size());
}

void Fail(const ErrorKind& kind, std::string message) {
  throw Error{kind.status, kind.code, kind.shape, std::move(message)};
}

void Fail(unsigned status, std::string_view code, std::string message) {
  throw Error{status, code, {}, std::move(message)};
}

std::string XmlText(std::string_view text) {
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
      case '\r':  // XML readers turn a bare one into a line feed
        out += "&#xD;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Call Read(const Request& r) {
  Call call;
  const std::optional<std::string> target =
      sigv4::HeaderValue(r.headers, "x-amz-target");
  if (target) {
    call.protocol = Protocol::kJson;
    if (!std::string_view(*target).starts_with(kTargetPrefix)) {
      Fail(kInvalidAction,
           fmt::format("{} is not an operation of this endpoint", *target));
    }
    call.action = target->substr(kTargetPrefix.size());
    if (r.body.empty()) return call;
    try {
      call.input = ParseBody(r.body);
    } catch (const HttpError& e) {
      Fail(kMalformedInput, e.message);
    }
    if (!call.input.is_object()) {
      Fail(kMalformedInput, "the request body is not a JSON object");
    }
    return call;
  }
  // Counted before any is decoded: a request past the limit costs a scan.
  const std::size_t q = r.target.find('?');
  const std::string_view query = q == std::string::npos
                                     ? std::string_view()
                                     : std::string_view(r.target).substr(q + 1);
  const std::string_view form =
      r.method == "POST" ? std::string_view(r.body) : std::string_view();
  if (CountPairs(query, kMaxParameters + 1) +
          CountPairs(form, kMaxParameters + 1) >
      kMaxParameters) {
    Fail(kMalformedInput,
         fmt::format("The request has more than {} parameters, the limit of "
                     "this endpoint.",
                     kMaxParameters));
  }
  std::map<std::string, std::string> params;
  AddDecodedPairs(query, params);
  AddDecodedPairs(form, params);
  Tree tree = Tree::object();
  for (const auto& [name, value] : params) {
    if (name == "Action") {
      call.action = value;
    } else if (name != "Version") {
      try {
        Put(tree, name, value);
      } catch (const Tree::exception&) {
        Fail(kMalformedInput, "malformed parameter " + name);
      }
    }
  }
  call.input = Json(Normalize(Arrays(std::move(tree))));
  return call;
}

Reply Write(const Call& call, const Json& output) {
  if (call.protocol == Protocol::kJson) {
    return AmzJsonReply(200, output.is_null() ? Json::object() : output);
  }
  std::string body =
      fmt::format("<{}Response xmlns=\"{}\">", call.action, kXmlns);
  if (!output.is_null()) {
    body += "<" + call.action + "Result>";
    WriteXml(body, call.action, output);
    body += "</" + call.action + "Result>";
  }
  body += fmt::format(
      "<ResponseMetadata><RequestId>{}</RequestId></ResponseMetadata></"
      "{}Response>",
      RequestId(), call.action);
  return XmlReply(200, std::move(body));
}

Reply WriteError(Protocol protocol, const Error& e) {
  const bool sender = e.status < 500;
  if (protocol == Protocol::kJson) {
    const std::string_view shape = e.shape.empty() ? e.code : e.shape;
    const std::string type = shape.find('#') == std::string_view::npos
                                 ? fmt::format("com.amazonaws.sqs#{}", shape)
                                 : std::string(shape);
    Reply r =
        AmzJsonReply(e.status, Json{{"__type", type}, {"message", e.message}});
    // The JSON protocol's SDKs take the query protocol's code from here.
    r.headers.emplace_back(
        "x-amzn-query-error",
        fmt::format("{};{}", e.code, sender ? "Sender" : "Receiver"));
    return r;
  }
  return XmlReply(
      e.status,
      fmt::format("<ErrorResponse xmlns=\"{}\"><Error><Type>{}</Type><Code>{}"
                  "</Code><Message>{}</Message><Detail/></Error><RequestId>{}"
                  "</RequestId></ErrorResponse>",
                  kXmlns, sender ? "Sender" : "Receiver", XmlText(e.code),
                  XmlText(e.message), RequestId()));
}

}  // namespace sqlq::server::sqs
