#include "wire/json_parse.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>
#include <utility>
#include <vector>

namespace sqlq::wire {
namespace {

// Builds a document from nlohmann's parser events (SAX), checking each
// event first against ParseJson's rules and stopping at the first that
// breaks one.
//
// Linear in the text: Json's objects (ordered_json) find a key by walking
// all of theirs, so this builder never asks an object for a key. It
// appends each key once the duplicate check has passed, and finds
// duplicates by a search of the object's keys only while it has a few (the
// API's objects: the hot path) and by a hash set beyond that.
class CheckedBuilder {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  CheckedBuilder(Json& doc, const JsonBounds& bounds, std::string_view what)
      : root_(doc), bounds_(bounds), what_(what) {}

  bool null() { return Put(nullptr); }
  bool boolean(bool v) { return Put(v); }
  bool number_integer(number_integer_t v) { return Put(v); }
  bool number_unsigned(number_unsigned_t v) { return Put(v); }
  bool number_float(number_float_t v, const string_t&) { return Put(v); }
  // Copied, not moved: `v` is the lexer's buffer, which keeps its
  // capacity for the next string only while it is not taken.
  bool string(string_t& v) { return Put(v); }
  bool binary(binary_t& v) { return Put(std::move(v)); }
  bool start_object(std::size_t) { return Open(Json::value_t::object); }
  bool end_object() { return Close(); }
  bool start_array(std::size_t) { return Open(Json::value_t::array); }
  bool end_array() { return Close(); }
  bool key(string_t& k) {
    const Level& at = open_.back();
    auto& members = static_cast<Json::object_t::Container&>(
        *at.value->get_ptr<Json::object_t*>());
    if (members.size() == bounds_.max_keys) {
      return Refuse("json_too_complex",
                    fmt::format("an object in {} has more than {} keys", what_,
                                bounds_.max_keys));
    }
    bool repeated = false;
    if (bounds_.keep_duplicates) {
      // Nothing to check.
    } else if (members.size() < kSearchedKeys) {
      repeated = std::any_of(members.begin(), members.end(),
                             [&](const auto& m) { return m.first == k; });
    } else {
      if (members.size() == kSearchedKeys) {
        // Past a few keys: the object's keys go to the hash set.
        for (const auto& m : members) many_.emplace(at.serial, m.first);
      }
      repeated = !many_.emplace(at.serial, k).second;
    }
    if (repeated) {
      return Refuse("duplicate_field",
                    fmt::format("the field \"{}\" appears twice in one object",
                                k.substr(0, 100)));
    }
    // Appended, not looked up: the check above found no such key.
    members.emplace_back(k, nullptr);  // copied, as a string() is
    slot_ = &members.back().second;
    return true;
  }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception&) {
    return Refuse("malformed_json", fmt::format("{} is not valid JSON", what_));
  }
  // Set when the text was refused.
  std::optional<JsonRefusal> refusal_;

 private:
  // Objects of at most this many keys are checked for duplicates by a
  // search of their keys: no hashing, no allocation per key.
  static constexpr std::size_t kSearchedKeys = 16;

  struct Level {
    Json* value;             // the open array or object
    std::size_t serial = 0;  // tells its keys from others' in many_
  };
  struct KeyHash {
    std::size_t operator()(const std::pair<std::size_t, std::string>& k) const {
      return std::hash<std::string>()(k.second) ^
             (k.first * 0x9e3779b97f4a7c15ULL);
    }
  };

  bool Refuse(std::string_view code, std::string message) {
    if (!refusal_)
      refusal_ = JsonRefusal{std::string(code), std::move(message)};
    return false;
  }
  // Puts a value where the next one goes: the root, the end of the open
  // array, or the slot of the key just read.
  template <typename V>
  Json* Place(V&& v) {
    if (open_.empty()) {
      root_ = Json(std::forward<V>(v));
      return &root_;
    }
    Json& at = *open_.back().value;
    if (at.is_array()) {
      auto& elements = *at.get_ptr<Json::array_t*>();
      elements.emplace_back(std::forward<V>(v));
      return &elements.back();
    }
    *slot_ = Json(std::forward<V>(v));
    return slot_;
  }
  bool Counted() {
    if (++values_ <= bounds_.max_values) return true;
    return Refuse("json_too_complex",
                  fmt::format("{} holds more than {} JSON values", what_,
                              bounds_.max_values));
  }
  template <typename V>
  bool Put(V&& v) {
    if (!Counted()) return false;
    Place(std::forward<V>(v));
    return true;
  }
  bool Open(Json::value_t type) {
    if (!Counted()) return false;
    if (open_.size() == bounds_.max_depth) {
      return Refuse("json_too_complex",
                    fmt::format("{} nests deeper than {} levels", what_,
                                bounds_.max_depth));
    }
    // Values are added only to the innermost open array or object, so the
    // pointers held here stay valid until it closes.
    open_.push_back({.value = Place(type), .serial = ++serial_});
    return true;
  }
  bool Close() {
    open_.pop_back();
    return true;
  }

  Json& root_;
  const JsonBounds& bounds_;
  std::string_view what_;
  Json* slot_ = nullptr;
  std::size_t values_ = 0;
  std::size_t serial_ = 0;
  std::vector<Level> open_;
  // The keys of larger objects, with the object's serial number.
  std::unordered_set<std::pair<std::size_t, std::string>, KeyHash> many_;
};

}  // namespace

std::optional<JsonRefusal> ParseJson(std::string_view text,
                                     const JsonBounds& bounds,
                                     std::string_view what, Json& out) {
  if (text.find('\0') != std::string_view::npos) {
    // nlohmann's parser stops at a NUL as at the end of its input, which
    // would accept `{}` followed by NUL and anything.
    return JsonRefusal{
        "malformed_json",
        fmt::format("{} holds a NUL byte, which JSON does not allow outside "
                    "strings (write \\u0000 inside them)",
                    what)};
  }
  CheckedBuilder builder(out, bounds, what);
  const bool ok = Json::sax_parse(text.begin(), text.end(), &builder,
                                  Json::input_format_t::json, /*strict=*/true);
  if (ok && !builder.refusal_) return std::nullopt;
  return builder.refusal_.value_or(
      JsonRefusal{"malformed_json", fmt::format("{} is not valid JSON", what)});
}

}  // namespace sqlq::wire
