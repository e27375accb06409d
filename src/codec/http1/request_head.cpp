#include "codec/http1/request_head.hpp"

#include <algorithm>

#include "codec/http1/field_line.hpp"

namespace idemproxy::codec::http1 {
namespace {

using bhttp::error;

// A request target's, as Beast reads it: anything but controls, SP and DEL
// (normalize_target checks the rest).
constexpr CharClass kTarget = char_class([](unsigned char c) { return c > 0x20 && c != 0x7f; });

// Content-Length (RFC 9110 8.6), as Beast's do_field reads it: one number, or a
// list of equal numbers; none beside chunked.
error content_length(std::string_view value, HeadFacts& facts) {
  if (facts.chunked) return error::bad_content_length;
  std::uint64_t v = 0;
  if (http::parse_decimal(value, v)) {  // most heads: one number
    if (facts.content_length && *facts.content_length != v) return error::multiple_content_length;
    facts.content_length = v;
    return {};
  }
  auto unread = 1 + std::count(value.begin(), value.end(), ',');
  const bhttp::opt_token_list tokens{value};
  if (tokens.begin() == tokens.end() || !bhttp::validate_list(tokens)) {
    return error::bad_content_length;
  }
  auto known = facts.content_length;
  for (const auto token : tokens) {
    if (!http::parse_decimal({token.data(), token.size()}, v)) return error::bad_content_length;
    --unread;
    if (known && *known != v) return error::multiple_content_length;
    known = v;
  }
  if (unread != 0) return error::bad_content_length;
  facts.content_length = known;
  return {};
}

// Transfer-Encoding: chunked when its last coding is; none beside Content-Length,
// and only one naming chunked. A value that is not a list of codings (RFC 9112 6.1:
// `chunke k1`, two tokens with no comma) is refused: Beast's parser read such a list
// up to its first bad element and took the rest of the field for nothing, so a
// second field could still make the body chunked. Transfer parameters go with it:
// Beast read `chunked;q=1` as chunked and `gzip;level=1, chunked` as gzip alone (not
// chunked, so refused), and no coding the proxy reads takes one.
error transfer_encoding(std::string_view value, HeadFacts& facts) {
  if (facts.chunked || facts.content_length) return error::bad_transfer_encoding;
  if (!http::coding_list(value)) return error::bad_transfer_encoding;
  const bhttp::opt_token_list codings{value};
  const auto chunked = std::find_if(codings.begin(), codings.end(),
                                    [](auto coding) { return beast::iequals(coding, "chunked"); });
  if (chunked != codings.end() && std::next(chunked) == codings.end()) facts.chunked = true;
  return {};
}

struct ConnectionTokens {
  bool close = false;
  bool keep_alive = false;
};

error connection(std::string_view value, ConnectionTokens& tokens) {
  const bhttp::opt_token_list list{value};
  if (!bhttp::validate_list(list)) return error::bad_value;
  for (const auto token : list) {
    if (beast::iequals(token, "close")) tokens.close = true;
    if (beast::iequals(token, "keep-alive")) tokens.keep_alive = true;
  }
  return {};
}

// What the head records of a field before it is inserted; an error refuses the head.
error note_field(bhttp::field name, std::string_view value, HeadFacts& facts,
                 ConnectionTokens& tokens) {
  switch (name) {
    case bhttp::field::content_length:
      ++facts.lengths;
      return content_length(value, facts);
    case bhttp::field::transfer_encoding:
      ++facts.encodings;
      return transfer_encoding(value, facts);
    case bhttp::field::connection:
    case bhttp::field::proxy_connection:
      return connection(value, tokens);
    default:
      return {};
  }
}

// The first value of a field the exchange reads by name, from the head's own copy:
// a field's first occurrence goes to the end of the head's list.
void note_first(bhttp::field name, const RequestHeader& head, HeadFacts& facts) {
  std::string_view* first = nullptr;
  if (name == bhttp::field::host) {
    if (facts.hosts++ == 0) first = &facts.host;
  } else if (name == bhttp::field::expect) {
    if (facts.expect.data() == nullptr) first = &facts.expect;
  } else if (name == bhttp::field::te) {
    if (facts.te.data() == nullptr) first = &facts.te;
  }
  if (first != nullptr) {
    const auto value = std::prev(head.end())->value();
    *first = {value.data(), value.size()};
  }
}

}  // namespace

beast::error_code parse_request_head(std::string_view bytes, RequestHeader& head,
                                     HeadFacts& facts) {
  // Every scan below stops at a CR, and a CR is never the last byte: with the head's
  // blank line at its end, none reads past it.
  if (!bytes.ends_with("\r\n\r\n")) return error::need_more;
  const char* p = bytes.data();
  const char* const end = p + bytes.size();

  // request-line = method SP request-target SP HTTP-version CRLF
  const char* const method = p;
  while (in(kToken, *p)) ++p;
  if (*p != ' ' || p == method) return error::bad_method;
  const std::string_view method_name(method, static_cast<std::size_t>(p - method));
  const char* const target = ++p;
  p = skip(p, end, kTarget, 0x21);
  if (*p != ' ' || p == target) return error::bad_target;
  const std::string_view target_text(target, static_cast<std::size_t>(p - target));
  ++p;
  for (const char c : std::string_view("HTTP/")) {
    if (*p++ != c) return error::bad_version;
  }
  if (*p < '0' || *p > '9' || p[1] != '.' || p[2] < '0' || p[2] > '9') {
    return error::bad_version;
  }
  const auto version = static_cast<unsigned>(10 * (p[0] - '0') + (p[2] - '0'));
  p += 3;
  if (version < 10 || version > 11 || p[0] != '\r' || p[1] != '\n') return error::bad_version;
  p += 2;
  facts.version = version;
  head.target(target_text);
  if (const auto verb = bhttp::string_to_verb(method_name); verb != bhttp::verb::unknown) {
    head.method(verb);
  } else {
    head.method_string(method_name);
  }
  head.version(version);

  // field-line = field-name ":" OWS field-value OWS CRLF
  ConnectionTokens tokens;
  while (*p != '\r') {
    std::string_view name_text, value_text;
    if (const auto ec = parse_field_line(p, end, name_text, value_text); ec != error{}) return ec;
    const auto field = bhttp::string_to_field(name_text);
    if (const auto ec = note_field(field, value_text, facts, tokens); ec != error{}) return ec;
    head.insert(field, name_text, value_text);
    ++facts.fields;
    note_first(field, head, facts);
  }
  if (p[1] != '\n') return error::bad_line_ending;
  facts.keep_alive = version >= 11 ? !tokens.close : tokens.keep_alive;
  return {};
}

}  // namespace idemproxy::codec::http1
