#pragma once
// One field of a message as a name and a value: what an answer's head and trailers
// are made of, whether it is on the wire (http/), stored (store/) or replayed. It
// sits at the bottom of the layers so that the store keeps what HTTP sends without
// either including the other; http/ names it http::Header.
#include <string>
#include <string_view>

namespace idemproxy {

/// Whether `text` is `lower` (given in lower case) in any ASCII case: a field name or
/// a token (RFC 9110 5.1, 5.6.2), where no locale's tolower() applies. The lengths
/// first, so most are told apart without a byte compared.
inline bool equals_lower(std::string_view text, std::string_view lower) {
  if (text.size() != lower.size()) return false;
  for (std::size_t i = 0; i < lower.size(); ++i) {
    const char c = text[i];
    if ((c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) != lower[i]) return false;
  }
  return true;
}

struct Header {
  std::string name;
  std::string value;
  bool operator==(const Header&) const = default;
  /// Whether the field is named `lower` (given in lower case), in any case
  /// (equals_lower; strcasecmp walked every name up to its first difference, a call each).
  bool named(std::string_view lower) const { return equals_lower(name, lower); }
};

}  // namespace idemproxy
