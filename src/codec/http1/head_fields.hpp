#pragma once
// The field section of an HTTP/1.1 head (RFC 9112 5), read in one pass by the request
// head's parser (request_head.hpp) and the answer head's (response_head.hpp): each
// field inserted into the head as it is read, with what the fields say about the
// message's framing and its connection gathered on the way, as Beast's basic_parser
// reads them (its do_field), and refused with its errors.
#include <cstdint>
#include <optional>
#include <string_view>

#include "codec/http1/field_line.hpp"
#include "codec/http_names.hpp"

namespace idemproxy::codec::http1 {

/// What a head's start line and fields say about its message.
struct MessageFacts {
  unsigned version = 11;
  std::optional<std::uint64_t> content_length;  // the body's length, when it names one
  bool chunked = false;                         // Transfer-Encoding's last coding is chunked
  bool keep_alive = true;                       // by the version and every Connection field
  std::size_t fields = 0;                       // how many fields the head has
  std::size_t lengths = 0;                      // how many Content-Length fields
  std::size_t encodings = 0;                    // how many Transfer-Encoding fields
  std::size_t codings = 0;                      // how many codings they list, in all
};

/// Connection's tokens (and Proxy-Connection's) a head's keep_alive is decided by.
struct ConnectionTokens {
  bool close = false;
  bool keep_alive = false;
};

/// Reads HTTP-version (RFC 9112 2.3: "HTTP/" DIGIT "." DIGIT) at `p` into `version`
/// (11 for 1.1) and moves `p` past it; false when it is not one. At least eight bytes
/// follow `p` when the head is whole (it ends in a blank line, after a start line).
inline bool parse_http_version(const char*& p, unsigned& version) {
  for (const char c : std::string_view("HTTP/")) {
    if (*p++ != c) return false;
  }
  if (*p < '0' || *p > '9' || p[1] != '.' || p[2] < '0' || p[2] > '9') return false;
  version = static_cast<unsigned>(10 * (p[0] - '0') + (p[2] - '0'));
  p += 3;
  return true;
}

/// Notes one framing field (Content-Length, Transfer-Encoding, Connection or
/// Proxy-Connection) in `facts` and `tokens`, before it is inserted; an error refuses
/// the head. Content-Length: one number, or a list of equal numbers, none beside
/// chunked. Transfer-Encoding: none beside Content-Length, only one naming chunked,
/// and a list of codings (RFC 9112 6.1): Beast's parser read `chunke k1`, two tokens
/// with no comma, up to its first bad element and took the rest for nothing.
bhttp::error note_framing_field(bhttp::field name, std::string_view value, MessageFacts& facts,
                                ConnectionTokens& tokens);
/// The same for any field: most say nothing of the framing, and cost no call.
inline bhttp::error note_field(bhttp::field name, std::string_view value, MessageFacts& facts,
                               ConnectionTokens& tokens) {
  switch (name) {
    case bhttp::field::content_length:
    case bhttp::field::transfer_encoding:
    case bhttp::field::connection:
    case bhttp::field::proxy_connection:
      return note_framing_field(name, value, facts, tokens);
    default:
      return {};
  }
}

/// Reads the field lines from `p` to the head's blank line into `head` (any Beast
/// header) and `facts`, and calls `noted(name)` after each is inserted. The bytes up
/// to `end` must end in the blank line (field_line.hpp).
template <class Header, class Noted>
bhttp::error parse_fields(const char* p, const char* end, Header& head, MessageFacts& facts,
                          Noted&& noted) {
  ConnectionTokens tokens;
  while (*p != '\r') {
    std::string_view name_text, value_text;
    if (const auto ec = parse_field_line(p, end, name_text, value_text); ec != bhttp::error{}) {
      return ec;
    }
    const auto field = bhttp::string_to_field(name_text);
    if (const auto ec = note_field(field, value_text, facts, tokens); ec != bhttp::error{}) {
      return ec;
    }
    head.insert(field, name_text, value_text);
    ++facts.fields;
    noted(field);
  }
  if (p[1] != '\n') return bhttp::error::bad_line_ending;
  facts.keep_alive = facts.version >= 11 ? !tokens.close : tokens.keep_alive;
  return {};
}

}  // namespace idemproxy::codec::http1
