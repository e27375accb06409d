#include "codec/http1/response_head.hpp"

namespace idemproxy::codec::http1 {

beast::error_code parse_response_head(std::string_view bytes, ResponseHeader& head,
                                      AnswerFacts& facts) {
  using bhttp::error;
  // Every scan below stops at a CR, and a CR is never the last byte: with the head's
  // blank line at its end, none reads past it. Beast waits for eight bytes of version.
  if (!bytes.ends_with("\r\n\r\n") || bytes.size() < 8) return error::need_more;
  const char* p = bytes.data();
  const char* const end = p + bytes.size();

  // status-line = HTTP-version SP status-code SP [ reason-phrase ] CRLF
  unsigned version = 0;
  if (!parse_http_version(p, version) || version < 10 || version > 11 || *p++ != ' ') {
    return error::bad_version;
  }
  unsigned status = 0;
  for (int i = 0; i < 3; ++i, ++p) {
    if (*p < '0' || *p > '9') return error::bad_status;
    status = 10 * status + static_cast<unsigned>(*p - '0');
  }
  if (*p++ != ' ') return error::bad_status;
  const char* const reason = p;
  p = skip(p, end, kValue, 0x20);
  if (*p != '\r') return error::bad_reason;
  if (p[1] != '\n') return error::bad_line_ending;
  head.result(status);
  head.version(version);
  // Beast's head reads the status's own reason when it holds none: only another is
  // copied into it.
  const std::string_view reason_text(reason, static_cast<std::size_t>(p - reason));
  if (reason_text != bhttp::obsolete_reason(static_cast<bhttp::status>(status))) {
    head.reason(reason_text);
  }
  p += 2;
  facts.version = version;
  facts.status = status;

  // field-line = field-name ":" OWS field-value OWS CRLF
  return parse_fields(p, end, head, facts, [](bhttp::field) {});
}

}  // namespace idemproxy::codec::http1
