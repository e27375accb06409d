// Idempotency-Key parsing: never crashes, and whatever it accepts is a valid key.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "idemproxy/engine/key.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto parsed = idemproxy::engine::parse_key(input);
  if (const auto* key = std::get_if<std::string>(&parsed)) {
    if (key->empty() || key->size() > idemproxy::engine::kMaxKeyLength) std::abort();
    for (char c : *key) {
      if (c < 0x20 || c > 0x7e) std::abort();
    }
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
