#include "server/body.h"

#include <fmt/format.h>

#include <cstdint>

#include "wire/json_parse.h"

namespace sqlq::server {

Json ParseBody(const std::string& text) {
  Json doc;
  if (auto refused =
          wire::ParseJson(text, kBodyBounds, "the request body", doc)) {
    Throw(400, std::move(refused->code), std::move(refused->message));
  }
  return doc;
}

Body::Body(const std::string& text, std::initializer_list<const char*> allowed)
    : doc_(owned_) {
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    owned_ = Json::object();
  } else {
    owned_ = ParseBody(text);
  }
  Init(doc_, allowed, "the request body");
}

Body::Body(const Json& obj, std::initializer_list<const char*> allowed,
           const std::string& what)
    : doc_(obj) {
  Init(doc_, allowed, what);
}

std::optional<std::int64_t> Body::Int(const char* key, std::int64_t min,
                                      std::int64_t max) const {
  if (!Has(key)) return std::nullopt;
  const Json& v = doc_[key];
  if (!v.is_number_integer()) Wrong(key, "an integer");
  std::int64_t x =
      v.is_number_unsigned()
          ? (v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)
                 ? INT64_MAX
                 : static_cast<std::int64_t>(v.get<std::uint64_t>()))
          : v.get<std::int64_t>();
  if (x < min || x > max) {
    Throw(400, "invalid_argument",
          fmt::format("{}\"{}\" must be in {}..{}", prefix_, key, min, max));
  }
  return x;
}

std::optional<Duration> Body::Millis(const char* key, std::int64_t max) const {
  auto v = Int(key, 0, max);
  if (!v) return std::nullopt;
  return Duration(*v);
}

std::optional<bool> Body::Bool(const char* key) const {
  if (!Has(key)) return std::nullopt;
  if (!doc_[key].is_boolean()) Wrong(key, "true or false");
  return doc_[key].get<bool>();
}

std::optional<std::string> Body::String(const char* key) const {
  if (!Has(key)) return std::nullopt;
  if (!doc_[key].is_string()) Wrong(key, "a string");
  return doc_[key].get<std::string>();
}

const Json* Body::Object(const char* key) const {
  if (!Has(key)) return nullptr;
  if (!doc_[key].is_object()) Wrong(key, "an object");
  return &doc_[key];
}

const Json* Body::Array(const char* key) const {
  if (!Has(key)) return nullptr;
  if (!doc_[key].is_array()) Wrong(key, "an array");
  return &doc_[key];
}

void Body::Wrong(const char* key, const char* type) const {
  Throw(400, "wrong_type",
        fmt::format("{}\"{}\" must be {}", prefix_, key, type));
}

void Body::Init(const Json& doc, std::initializer_list<const char*> allowed,
                const std::string& what) {
  if (!doc.is_object()) {
    Throw(400, "wrong_type", what + " must be a JSON object");
  }
  if (what != "the request body") prefix_ = what + ": ";
  for (const auto& [key, value] : doc.items()) {
    bool known = false;
    for (const char* a : allowed) known = known || key == a;
    if (!known) {
      Throw(400, "unknown_field",
            fmt::format("{}unknown field \"{}\"", prefix_, key));
    }
  }
}

}  // namespace sqlq::server
