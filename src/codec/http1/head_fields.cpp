#include "codec/http1/head_fields.hpp"

#include <algorithm>

namespace idemproxy::codec::http1 {
namespace {

using bhttp::error;

// Content-Length (RFC 9110 8.6), as Beast's do_field reads it: one number, or a
// list of equal numbers; none beside chunked.
error content_length(std::string_view value, MessageFacts& facts) {
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

// Transfer-Encoding: chunked when its last coding is, and no other is (Beast's reading:
// its first chunked is the last coding). A value that is not a list of
// codings is refused, and transfer parameters with it: Beast read `chunked;q=1` as
// chunked and `gzip;level=1, chunked` as gzip alone, and no coding the proxy reads
// takes one.
error transfer_encoding(std::string_view value, MessageFacts& facts) {
  if (facts.chunked || facts.content_length) return error::bad_transfer_encoding;
  if (!http::coding_list(value)) return error::bad_transfer_encoding;
  bool last_chunked = false;
  int chunked = 0;
  for (const auto coding : bhttp::opt_token_list{value}) {
    last_chunked = beast::iequals(coding, "chunked");
    chunked += last_chunked ? 1 : 0;
    ++facts.codings;
  }
  facts.chunked = last_chunked && chunked == 1;
  return {};
}

error connection(std::string_view value, ConnectionTokens& tokens) {
  const bhttp::opt_token_list list{value};
  if (!bhttp::validate_list(list)) return error::bad_value;
  for (const auto token : list) {
    if (beast::iequals(token, "close")) tokens.close = true;
    if (beast::iequals(token, "keep-alive")) tokens.keep_alive = true;
  }
  return {};
}

}  // namespace

error note_framing_field(bhttp::field name, std::string_view value, MessageFacts& facts,
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

}  // namespace idemproxy::codec::http1
