#include "idemproxy/engine/key.hpp"

namespace idemproxy::engine {
namespace {

bool printable(char c) { return c >= 0x20 && c <= 0x7e; }

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
      if (i + 1 != v.size()) return KeyError{"the key has characters after its closing quote"};
      return out;
    } else if (!printable(c)) {
      return KeyError{"the key must be printable ASCII"};
    } else {
      out += c;
    }
  }
  return KeyError{"the key string has no closing quote"};
}

}  // namespace

std::variant<std::string, KeyError> parse_key(std::string_view value) {
  std::variant<std::string, KeyError> parsed;
  if (!value.empty() && value.front() == '"') {
    parsed = parse_sf_string(value);
  } else {
    for (char c : value) {
      if (!printable(c)) return KeyError{"the key must be printable ASCII"};
    }
    parsed = std::string(value);
  }
  if (const auto* key = std::get_if<std::string>(&parsed)) {
    if (key->empty()) return KeyError{"the key is empty"};
    if (key->size() > kMaxKeyLength) {
      return KeyError{"the key is longer than " + std::to_string(kMaxKeyLength) + " characters"};
    }
  }
  return parsed;
}

std::string header_scope(std::string_view value) {
  for (const std::string_view reserved : {"cert:", "hmac:", "header:"}) {
    if (value.starts_with(reserved)) return "header:" + std::string(value);
  }
  return std::string(value);
}

}  // namespace idemproxy::engine
