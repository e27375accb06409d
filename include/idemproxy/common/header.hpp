#pragma once
// One field of a message as a name and a value: what an answer's head and trailers
// are made of, whether it is on the wire (http/), stored (store/) or replayed. It
// sits at the bottom of the layers so that the store keeps what HTTP sends without
// either including the other; http/ names it http::Header.
#include <string>
#include <string_view>

namespace idemproxy {

struct Header {
  std::string name;
  std::string value;
  bool operator==(const Header&) const = default;
  /// Whether the field is named `lower` (given in lower case), in any case (RFC 9110
  /// 5.1): the lengths first, so most fields are told apart without a byte compared
  /// (strcasecmp walked every name up to its first difference, a call each).
  bool named(std::string_view lower) const {
    if (name.size() != lower.size()) return false;
    for (std::size_t i = 0; i < lower.size(); ++i) {
      const char c = name[i];
      if ((c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c) != lower[i]) return false;
    }
    return true;
  }
};

}  // namespace idemproxy
