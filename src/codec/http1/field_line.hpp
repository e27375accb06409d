#pragma once
// One field line of an HTTP/1.1 head or trailer section (RFC 9112 5), read in one pass:
// the request head's parser (request_head.cpp) and the trailer section's
// (trailer_section.cpp) both read their fields with it.
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "codec/http_names.hpp"

namespace idemproxy::codec::http1 {

using CharClass = std::array<bool, 256>;

constexpr CharClass char_class(bool (*in)(unsigned char)) {
  CharClass t{};
  for (unsigned c = 0; c < 256; ++c) t[c] = in(static_cast<unsigned char>(c));
  return t;
}

// RFC 9110 5.6.2's tchar: a method's and a field name's characters.
inline constexpr CharClass kToken = char_class([](unsigned char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
});
// A field value's (RFC 9110 5.5, obs-text included): anything but the controls other
// than HTAB, and DEL.
inline constexpr CharClass kValue =
    char_class([](unsigned char c) { return (c >= 0x20 && c != 0x7f) || c == '\t'; });

inline bool in(const CharClass& t, char c) { return t[static_cast<unsigned char>(c)]; }

// Skips the bytes of class `t` (a target's or a value's) from `p`, eight at a time:
// no byte of such a class is below `below` or DEL but a value's HTAB, so a word's
// first byte that is one (the lowest flag below, which a borrow never sets early) is
// where the scan stops, or, at a value's HTAB, goes on past. The last bytes before
// `end` are read one at a time.
static_assert(std::endian::native == std::endian::little);
inline const char* skip(const char* p, const char* end, const CharClass& t, std::uint64_t below) {
  constexpr std::uint64_t kOnes = 0x0101010101010101, kHighs = 0x8080808080808080;
  while (end - p >= 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, p, sizeof word);  // little-endian: the first byte is the lowest
    const std::uint64_t del = word ^ (kOnes * 0x7f);
    const std::uint64_t flags =
        (((word - kOnes * below) & ~word) | ((del - kOnes) & ~del)) & kHighs;
    if (flags == 0) {
      p += 8;
      continue;
    }
    p += std::countr_zero(flags) / 8;
    if (!in(t, *p)) return p;  // not a value's HTAB
    ++p;
  }
  while (in(t, *p)) ++p;
  return p;
}

/// Reads the field line at `p` (field-name ":" OWS field-value OWS CRLF) into `name`
/// and `value` (without the whitespace around it), and moves `p` past its CRLF. The
/// bytes up to `end` must end in a blank line ("\r\n\r\n"): every scan stops at a
/// CR, and a CR is then never the last byte. Errors are Beast's, as its parser names
/// them; a line folded onto the one before (obs-fold) starts with no name: bad_field.
inline bhttp::error parse_field_line(const char*& p, const char* end, std::string_view& name,
                                     std::string_view& value) {
  const char* const name_at = p;
  while (in(kToken, *p)) ++p;
  if (*p != ':' || p == name_at) return bhttp::error::bad_field;
  name = std::string_view(name_at, static_cast<std::size_t>(p - name_at));
  ++p;
  while (*p == ' ' || *p == '\t') ++p;
  const char* const value_at = p;
  p = skip(p, end, kValue, 0x20);
  if (*p != '\r') return bhttp::error::bad_value;
  if (p[1] != '\n') return bhttp::error::bad_line_ending;
  const char* last = p;
  while (last != value_at && (last[-1] == ' ' || last[-1] == '\t')) --last;
  p += 2;
  value = std::string_view(value_at, static_cast<std::size_t>(last - value_at));
  return {};
}

}  // namespace idemproxy::codec::http1
