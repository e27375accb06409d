#pragma once
// The end of a chunked body, read by the proxy itself (RFC 9112 7.1.2): the last chunk
// and the trailer section after it.
//
// Beast's parser reads trailer fields as it reads a head's: into the message's own
// fields, with the head's rules, so a trailer `Content-Length` or `Transfer-Encoding`
// failed the answer after its last chunk (the client saw it break off; a covered
// record was left `indeterminate`), and a trailer `Connection: close` closed a
// connection the head kept alive. RFC 9110 6.5.1 says a trailer cannot carry
// framing; a recipient reads past such a field. An HTTP/1.1 upstream's answer is
// parsed by Beast up to its last chunk and from there by this.
#include <string_view>
#include <vector>

#include "codec/http_names.hpp"

namespace idemproxy::codec::http1 {

/// Reads the end of a chunked body from `bytes`, which must start at its last chunk
/// once Beast's parser has read that chunk's line (its size 0 and its extensions, and
/// found the section's blank line): an optional CRLF that ends the chunk before, the
/// last chunk's line, the trailer fields, and the blank line. Each field a trailer may
/// carry (http::allowed_in_trailers) is appended to `trailers`; `used` is the bytes
/// read. An error is Beast's name for a malformed section (bhttp::error);
/// need_more when `bytes` does not hold the whole section.
beast::error_code parse_trailer_section(std::string_view bytes, std::vector<Header>& trailers,
                                        std::size_t& used);

}  // namespace idemproxy::codec::http1
