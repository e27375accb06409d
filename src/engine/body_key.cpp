// A key taken from the JSON body by an RFC 6901 pointer (key_json_pointer): webhook
// deliveries carry theirs there (a Stripe event's id, a message id).
#include <nlohmann/json.hpp>

#include "idemproxy/engine/key.hpp"

namespace idemproxy::engine {

std::optional<std::string> json_pointer_error(const std::string& pointer) {
  if (pointer.empty() || pointer.front() != '/') {
    return "must be a JSON pointer starting with / (RFC 6901), e.g. /id or /data/object/id";
  }
  try {
    nlohmann::json::json_pointer parsed(pointer);  // checks the ~0 and ~1 escapes
  } catch (const nlohmann::json::exception&) {
    return "is not a JSON pointer (RFC 6901 section 3: '~' must be followed by 0 or 1)";
  }
  return std::nullopt;
}

BodyKey key_from_json(std::string_view body, const std::string& pointer) {
  const auto refused = [&](const std::string& why) {
    return BodyKey{BodyKey::Found::refused, {}, "key_json_pointer " + pointer + ": " + why};
  };
  // nlohmann's parser is iterative, so nesting costs memory (bounded by max_body),
  // not stack.
  const auto doc = nlohmann::json::parse(body, nullptr, false);
  if (doc.is_discarded()) return refused("the body is not valid JSON");
  nlohmann::json::json_pointer at(pointer);  // the config checked it
  const nlohmann::json* value = nullptr;
  try {
    if (doc.contains(at)) value = &doc.at(at);
  } catch (const nlohmann::json::exception&) {
    value = nullptr;  // e.g. a name where the document has an array
  }
  if (value == nullptr) return {BodyKey::Found::absent, {}, {}};
  std::string key;
  if (value->is_string()) {
    key = value->get<std::string>();
  } else if (value->is_number_integer()) {
    key = value->dump();
  } else {
    return refused(std::string("the value is ") + value->type_name() +
                   ", not a string or an integer");
  }
  if (const auto error = key_rule_error(key)) return refused(*error);
  return {BodyKey::Found::key, std::move(key), {}};
}

}  // namespace idemproxy::engine
