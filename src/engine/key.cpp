#include "idemproxy/engine/key.hpp"

#include <cstdint>

namespace idemproxy::engine {
namespace {

bool printable(char c) { return c >= 0x20 && c <= 0x7e; }

// RFC 8941 §3.3: Idempotency-Key is an Item, so a List (members separated by commas,
// §3.1; also what two field lines of it combine into, RFC 9110 §5.3), an Inner List
// (in parentheses, §3.1.1) or a Dictionary (§3.2) is not a key.
constexpr const char* kNotAnItem =
    "the key field holds a list, an inner list or a dictionary, not one key "
    "(RFC 8941 section 3.3: Idempotency-Key is an Item)";

// RFC 8941 sf-string: DQUOTE *( unescaped / "\" ( DQUOTE / "\" ) ) DQUOTE
std::variant<std::string, KeyError> parse_sf_string(std::string_view v) {
  std::string out;
  for (std::size_t i = 1; i < v.size(); ++i) {
    const char c = v[i];
    if (c == '\\') {
      if (i + 1 >= v.size() || (v[i + 1] != '"' && v[i + 1] != '\\')) {
        return KeyError{"the key string has an invalid escape (only \\\" and \\\\ are allowed)"};
      }
      out += v[++i];
    } else if (c == '"') {
      if (i + 1 == v.size()) return out;
      const auto rest = v.find_first_not_of(" \t", i + 1);
      if (rest != std::string_view::npos && v[rest] == ',') return KeyError{kNotAnItem};
      return KeyError{"the key has characters after its closing quote"};
    } else if (!printable(c)) {
      return KeyError{"the key must be printable ASCII"};
    } else {
      out += c;
    }
  }
  return KeyError{"the key string has no closing quote"};
}

std::optional<std::string> size_error(std::string_view key) {
  if (key.empty()) return "the key is empty";
  if (key.size() > kMaxKeyLength) {
    return "the key is longer than " + std::to_string(kMaxKeyLength) + " characters";
  }
  return std::nullopt;
}

}  // namespace

std::variant<std::string, KeyError> parse_key(std::string_view value) {
  if (!value.empty() && value.front() == '"') {
    auto parsed = parse_sf_string(value);
    if (const auto* key = std::get_if<std::string>(&parsed)) {
      if (auto error = key_rule_error(*key)) return KeyError{std::move(*error)};
    }
    return parsed;
  }
  // A bare key (as many clients send a UUID, unquoted) is kept as it is, but for
  // what can only be structure: a comma separates List or Dictionary members, a
  // leading parenthesis opens an Inner List, and a quote inside one is a member's
  // string value (`k="v"`). One walk over it (find_first_of took a memchr a byte).
  bool structure = !value.empty() && value.front() == '(';
  for (const char c : value) {
    if (!printable(c)) return KeyError{"the key must be printable ASCII"};
    structure = structure || c == ',' || c == '"';
  }
  if (structure) return KeyError{kNotAnItem};
  if (auto error = size_error(value)) return KeyError{std::move(*error)};
  return std::string(value);
}

std::optional<std::string> key_rule_error(std::string_view key) {
  if (auto error = size_error(key)) return error;
  for (const char c : key) {
    if (!printable(c)) return "the key must be printable ASCII";
  }
  return std::nullopt;
}

std::string header_scope(std::string_view value) {
  for (const std::string_view reserved : {"cert:", "hmac:", "header:", "ns:"}) {
    if (value.starts_with(reserved)) return "header:" + std::string(value);
  }
  return std::string(value);
}

std::optional<TimePoint> uuid7_time(std::string_view key) {
  // 8-4-4-4-12 hex digits; the version nibble (7) starts the third group and the
  // variant (10xx: 8, 9, a or b) the fourth (RFC 9562 sections 4.1, 4.2).
  if (key.size() != 36 || key[8] != '-' || key[13] != '-' || key[18] != '-' || key[23] != '-') {
    return std::nullopt;
  }
  std::uint64_t ms = 0;
  for (std::size_t i = 0; i < key.size(); ++i) {
    if (i == 8 || i == 13 || i == 18 || i == 23) continue;
    const char c = key[i];
    const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (!hex) return std::nullopt;
    if (i < 13) {  // unix_ts_ms: the first 12 hex digits
      const int v = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
      ms = ms * 16 + static_cast<std::uint64_t>(v);
    }
  }
  const char variant = static_cast<char>(key[19] | 0x20);
  if (key[14] != '7' || (variant != '8' && variant != '9' && variant != 'a' && variant != 'b')) {
    return std::nullopt;
  }
  return TimePoint{std::chrono::milliseconds{static_cast<std::int64_t>(ms)}};
}

}  // namespace idemproxy::engine
