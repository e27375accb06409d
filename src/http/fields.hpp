#pragma once
// Field rules at the boundary of a hop, shared by both codecs and the proxy.
#include <array>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/beast.hpp"

namespace idemproxy::http {

/// A number's decimal digits in bytes of their own, for a field's value (a
/// Content-Length) without a string.
class Decimal {
 public:
  Decimal() = default;
  explicit Decimal(std::uint64_t n)
      : size_(static_cast<std::size_t>(
            std::to_chars(digits_.data(), digits_.data() + digits_.size(), n).ptr -
            digits_.data())) {}
  std::string_view view() const { return {digits_.data(), size_}; }

 private:
  std::array<char, 20> digits_{};  // 2^64 - 1 has 20
  std::size_t size_ = 0;
};

/// Removes hop-by-hop fields (RFC 9110 7.6.1), including those the Connection
/// field names. Framing fields stay: a streamed body still needs them.
/// `s` without the optional whitespace (spaces, tabs) around it (RFC 9110 5.6.3).
std::string_view trim_ows(std::string_view s);

void strip_hop_by_hop(Fields& fields);

/// Whether Beast's number for a field's name is one of the connection headers
/// (engine::kConnectionHeaders); a name Beast does not know never is.
bool is_connection_field(bhttp::field name);

/// Whether two field names are the same name (RFC 9110 5.1: case-insensitive). Lengths
/// first, inline: most names a walk over a head meets differ in length, and
/// beast::iequals is a call.
inline bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && beast::iequals(a, b);
}

/// Every line of the field `name`, in order, joined as one comma-separated list
/// (RFC 9110 5.3), each value without its surrounding whitespace; "" when absent.
std::string joined_values(const Fields& fields, std::string_view name);

/// Appends to `codings` the transfer codings a Transfer-Encoding value lists other
/// than chunked (RFC 9112 7), in order, comma-separated from what it holds: those a
/// message keeps when the proxy frames its body anew.
void append_codings_but_chunked(std::string& codings, std::string_view value);

/// A decimal as Beast's parse_dec reads one: digits only, at least one, no overflow.
inline bool parse_decimal(std::string_view s, std::uint64_t& out) {
  if (s.empty()) return false;
  std::uint64_t v = 0;
  for (const char c : s) {
    if (c < '0' || c > '9') return false;
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (v > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) return false;
    v = v * 10 + digit;
  }
  out = v;
  return true;
}

/// A Content-Length as one number: Beast's parser lets a list of equal values
/// through (RFC 9110 8.6, `5, 5`), which a peer need not take (nghttp2 refuses it
/// over HTTP/2); its first element, without whitespace.
inline std::string_view single_length(std::string_view value) {
  return trim_ows(value.substr(0, value.find(',')));
}

/// Whether a Transfer-Encoding value is a list of codings (RFC 9112 6.1), with no
/// transfer parameters: `chunke k1` (two tokens, no comma) and `chunked;q=1` are not.
/// Beast's parsers read such a value up to its first bad element and drop the rest.
bool coding_list(std::string_view value);

/// RFC 9113 §8.2.2: connection-specific fields are not sent over HTTP/2, nor is
/// anything the Connection field (`connection`, its value) names.
bool connection_specific(std::string_view name, std::string_view connection);

/// Whether a trailer may carry a field of this name (RFC 9110 6.5.1).
bool allowed_in_trailers(std::string_view name);

}  // namespace idemproxy::http
