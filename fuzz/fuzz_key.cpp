// Idempotency-Key parsing, from the header and from a JSON body (key_json_pointer):
// never crashes, and whatever either accepts is a valid key.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "idemproxy/engine/key.hpp"

namespace {

void check(const std::string& key) {
  if (key.empty() || key.size() > idemproxy::engine::kMaxKeyLength) std::abort();
  for (char c : key) {
    if (c < 0x20 || c > 0x7e) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto parsed = idemproxy::engine::parse_key(input);
  for (const char* pointer : {"/id", "/data/object/id", "/0", "/a~1b"}) {
    const auto found = idemproxy::engine::key_from_json(input, pointer);
    if (found.found == idemproxy::engine::BodyKey::Found::key) check(found.key);
  }
  if (const auto* key = std::get_if<std::string>(&parsed)) {
    check(*key);
    // The quoted form of an accepted key means the same key.
    std::string quoted = "\"";
    for (char c : *key) {
      if (c == '"' || c == '\\') quoted += '\\';
      quoted += c;
    }
    quoted += '"';
    const auto again = idemproxy::engine::parse_key(quoted);
    if (!std::holds_alternative<std::string>(again) || std::get<std::string>(again) != *key) {
      std::abort();
    }
  }
  return 0;
}
