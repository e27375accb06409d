#pragma once
// A request head parsed in one pass over its bytes, buffered whole (RFC 9112 sections
// 3 and 5): the request line, then each field, inserted into the head as it is read,
// with what the fields say about the message's framing gathered on the way.
//
// It accepts and refuses what Beast's basic_parser does with the same whole head, and
// names each refusal by Beast's error code (tests/http/request_head_test.cpp compares
// the two on every input), with two exceptions: obsolete line folding is refused
// (Beast folds it; the caller names that error), and a head too short for its version
// is refused where Beast waits for more bytes. Beast's parser took about 2,400
// instructions for a head of three fields, in several passes (a search for the
// head's end, then the start line and fields, then the framing fields again); this
// takes one (docs/PERFORMANCE.md).
#include <string_view>

#include "codec/http1/head_fields.hpp"

namespace idemproxy::codec::http1 {

/// What a request head says about its message, gathered as it is parsed.
struct HeadFacts : MessageFacts {
  std::size_t hosts = 0;
  std::string_view host;    // the first Host field's value (in the head's storage)
  std::string_view expect;  // the first Expect field's value
  std::string_view te;      // the first TE field's value
};

/// Parses `bytes`, a whole request head that ends in its blank line ("\r\n\r\n"),
/// into `head` (an empty head) and `facts`. An error is one of Beast's
/// (bhttp::error): the head is malformed and `head` holds what was read before it.
beast::error_code parse_request_head(std::string_view bytes, RequestHeader& head, HeadFacts& facts);

}  // namespace idemproxy::codec::http1
