#pragma once
// Parsing what a connection's buffer already holds without Beast's composed read.
#include "http/beast.hpp"

namespace idemproxy::http {

/// What bhttp::async_read_some does first, done in place: when `buffer` holds
/// bytes, one parse of them (one call of the parser's put, consuming what it used).
/// Returns true when that settled the read (the parser made progress, or failed:
/// `ec` says which, need_buffer included); false when bytes must be read first (an
/// empty buffer, a finished parser, or a parser that needs more than the buffer
/// holds), and the caller then starts Beast's asynchronous read, which picks up
/// where this stopped.
/// Beast's read completes through a post even when no read was needed: a scheduler
/// round trip and a coroutine suspension each time. A request's head, a small body
/// and an answer's body mostly arrive whole, with the bytes before them (issue 26).
template <bool isRequest>
bool parse_buffered(beast::flat_buffer& buffer, bhttp::basic_parser<isRequest>& parser,
                    beast::error_code& ec) {
  ec = {};
  if (buffer.size() == 0 || parser.is_done()) return false;
  const auto used = parser.put(buffer.data(), ec);
  buffer.consume(used);
  if (ec != bhttp::error::need_more) return true;
  ec = {};
  return false;
}

}  // namespace idemproxy::http
