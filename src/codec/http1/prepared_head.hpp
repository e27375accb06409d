#pragma once
// The HTTP/1.1 codec's own form of a replay: its head laid out once, at the cached
// answer's first replay over HTTP/1.1, and kept with the answer
// (http::PreparedAnswer::codec_form), so that each later replay gathers bytes that are
// already there.
#include <cstddef>
#include <span>
#include <string>

#include "codec/http_names.hpp"

namespace idemproxy::codec::http1 {

/// The status line and `fields` with a Content-Length of `body_size`, in HTTP/1.1 and
/// without the blank line (the exchange adds its per-request lines before it); empty
/// for an answer laid out per request instead: one without a body (1xx, 204, 304), and
/// one with trailers, which a client gets chunked and only when it takes them.
std::string prepared_head(unsigned status, std::span<const Header> fields, std::size_t body_size,
                          bool has_trailers);

}  // namespace idemproxy::codec::http1
