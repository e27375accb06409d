#pragma once
// Parsing of the Idempotency-Key header value.
#include <string>
#include <string_view>
#include <variant>

namespace idemproxy::engine {

inline constexpr std::size_t kMaxKeyLength = 255;

/// Why a key was refused; the text is safe to show to the client.
struct KeyError {
  std::string reason;
};

/// Accepts a bare token (`abc`) or an RFC 8941 sf-string (`"abc"`); both mean `abc`.
/// The result is 1..255 printable ASCII characters.
std::variant<std::string, KeyError> parse_key(std::string_view header_value);

}  // namespace idemproxy::engine
