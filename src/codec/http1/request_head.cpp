#include "codec/http1/request_head.hpp"

namespace idemproxy::codec::http1 {
namespace {

using bhttp::error;

// A request target's, as Beast reads it: anything but controls, SP and DEL
// (normalize_target checks the rest).
constexpr CharClass kTarget = char_class([](unsigned char c) { return c > 0x20 && c != 0x7f; });

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
  unsigned version = 0;
  if (!parse_http_version(p, version)) return error::bad_version;
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
  return parse_fields(p, end, head, facts,
                      [&](bhttp::field name) { note_first(name, head, facts); });
}

}  // namespace idemproxy::codec::http1
