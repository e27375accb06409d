#include "codec/http1/trailer_section.hpp"

#include "codec/http1/field_line.hpp"

namespace idemproxy::codec::http1 {

beast::error_code parse_trailer_section(std::string_view bytes, std::vector<Header>& trailers,
                                        std::size_t& used) {
  using bhttp::error;
  std::size_t at = bytes.starts_with("\r\n") ? 2 : 0;  // the chunk before ends
  if (at == bytes.size() || bytes[at] != '0') return error::bad_chunk;
  // last-chunk = 1*"0" [ chunk-ext ] CRLF: Beast read its size and extensions.
  const auto line_end = bytes.find("\r\n", at);
  if (line_end == std::string_view::npos) return error::need_more;
  at = line_end + 2;
  // The section ends in the first blank line: at once when it has no fields.
  std::size_t end = 0;
  if (bytes.substr(at, 2) == "\r\n") {
    end = at + 2;
  } else if (const auto blank = bytes.find("\r\n\r\n", at); blank != std::string_view::npos) {
    end = blank + 4;
  } else {
    return error::need_more;
  }
  const char* p = bytes.data() + at;
  const char* const stop = bytes.data() + end;
  while (*p != '\r') {
    std::string_view name, value;
    if (const auto ec = parse_field_line(p, stop, name, value); ec != error{}) return ec;
    if (allowed_in_trailers(name)) trailers.push_back({std::string(name), std::string(value)});
  }
  used = end;
  return {};
}

}  // namespace idemproxy::codec::http1
