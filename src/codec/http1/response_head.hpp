#pragma once
// An answer's head from an HTTP/1.1 upstream, parsed in one pass over its bytes,
// buffered whole (RFC 9112 sections 4 and 5): the status line, then each field,
// inserted into the head as it is read, with what the fields say about the answer's
// framing gathered on the way.
//
// It accepts and refuses what Beast's basic_parser does with the same whole head, and
// names each refusal by Beast's error code (tests/http/response_head_test.cpp compares
// the two on named and on mutated heads), with the request head's exceptions
// (request_head.hpp): obsolete line folding is refused (RFC 9112 5.2 lets a proxy
// answer 502 for it; Beast folds it), so is a Transfer-Encoding that is not a list of
// codings, and a head too short for its version. Beast's parser took about 2,600
// instructions to read a small answer's head through its composed read, in several
// passes; this takes one.
#include <string_view>

#include "codec/http1/head_fields.hpp"

namespace idemproxy::codec::http1 {

/// What an answer's head says about the answer.
struct AnswerFacts : MessageFacts {
  unsigned status = 0;
  /// Whether its body is framed as RFC 9112 6.1 and 6.3 allow a proxy to read it one
  /// way only: by chunked alone, named once beside no Content-Length, or by a length,
  /// or to the close. Beast's parser took `gzip` beside a length by the length (the
  /// coding says: to the close), and a body in a coding besides chunked was kept
  /// without the coding, which is connection-specific: its replay was gzip bytes with
  /// nothing to say so. (An interim answer has no body: its fields frame nothing.)
  bool framed_one_way() const {
    return encodings == 0 || (codings == 1 && chunked && !content_length);
  }
};

/// Parses `bytes`, a whole answer head that ends in its blank line ("\r\n\r\n"),
/// into `head` (an empty head) and `facts`. An error is one of Beast's
/// (bhttp::error): the head is malformed and `head` holds what was read before it.
beast::error_code parse_response_head(std::string_view bytes, ResponseHeader& head,
                                      AnswerFacts& facts);

}  // namespace idemproxy::codec::http1
