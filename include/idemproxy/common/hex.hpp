#pragma once
// Lower-case hexadecimal, both ways.
#include <optional>
#include <string>
#include <string_view>

namespace idemproxy {

/// Writes the 2 * bytes.size() lower-case hex digits of `bytes` at `out`.
inline void hex_into(std::string_view bytes, char* out) {
  static constexpr char digits[] = "0123456789abcdef";
  for (const unsigned char c : bytes) {
    *out++ = digits[c >> 4];
    *out++ = digits[c & 15];
  }
}

inline std::string to_hex(std::string_view bytes) {
  std::string out(bytes.size() * 2, '\0');
  hex_into(bytes, out.data());
  return out;
}

/// The value of one hex digit (either case), or -1.
inline int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/// The bytes `hex` spells (either case); nullopt for an odd length or a non-hex digit.
inline std::optional<std::string> from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string out;
  out.reserve(hex.size() / 2);
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    const int hi = hex_digit(hex[i]);
    const int lo = hex_digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
  }
  return out;
}

}  // namespace idemproxy
