// Reading a request head on an HTTP/1.1 connection: the raw bytes first, checked for
// what Beast's parser accepts silently, then Beast's parse, then RFC 9112's rules.
#include "codec/http1/exchange.hpp"
#include "http/fields.hpp"
#include "http/parse_buffered.hpp"
#include "http/request_target.hpp"

namespace idemproxy::codec::http1 {
namespace {

using Clock = std::chrono::steady_clock;

bool is_disconnect(const beast::error_code& ec) {
  return ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::operation_aborted || ec == beast::error::timeout ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
}

// Checks a head's raw bytes for what Beast's parser accepts silently: obsolete line
// folding (RFC 9112 5.2: a server may reject it with 400; folding the line as Beast
// does lets two parsers read different values) and more fields than `max_fields`.
std::optional<HeadError> raw_head_error(std::string_view head, std::size_t max_fields) {
  std::size_t lines = 0;
  for (std::size_t at = head.find('\n'); at != std::string_view::npos;
       at = head.find('\n', at + 1)) {
    ++lines;
    if (at + 1 < head.size() && (head[at + 1] == ' ' || head[at + 1] == '\t')) {
      return HeadError{HeadError::Kind::malformed, "obsolete line folding in a header field"};
    }
  }
  // The request line and the blank line end in LF too.
  if (lines > max_fields + 2) {
    return HeadError{HeadError::Kind::too_large, "more than " + std::to_string(max_fields) +
                                                     " header fields (server.max_header_fields)"};
  }
  return std::nullopt;
}

// Reads until the buffer holds a whole request head, or `limit` bytes without one
// (the parser then reports header_limit). `head_size` gets the head's length. Each
// read resumes the search where the last one stopped: a head trickled a byte at a
// time must not cost a scan of everything before it per byte.
asio::awaitable<beast::error_code> read_head_bytes(ClientConnection& conn, std::size_t limit,
                                                   std::size_t& head_size) {
  std::size_t searched = 0;
  for (;;) {
    const std::string_view seen(static_cast<const char*>(conn.buffer.data().data()),
                                conn.buffer.size());
    const auto end = seen.find("\r\n\r\n", searched);
    searched = seen.size() < 3 ? 0 : seen.size() - 3;
    if (end != std::string_view::npos) {
      head_size = end + 4;
      co_return beast::error_code{};
    }
    if (seen.size() > limit) {
      head_size = 0;
      co_return beast::error_code{};
    }
    auto [ec, n] = co_await conn.stream.async_read_some(conn.buffer.prepare(4096), use_nothrow);
    if (ec) co_return ec;
    conn.buffer.commit(n);
  }
}

}  // namespace

asio::awaitable<bool> Exchange::read_head(TimePoint last_end) {
  const auto& server = facts_.settings->config.server;
  parser_.header_limit(static_cast<std::uint32_t>(server.max_header_size));
  // Body limits depend on the route, known only after the head (body_limit()).
  parser_.body_limit(boost::none);
  parser_.eager(false);  // the body is not parsed with the head
  // Two clocks: idle_timeout for the next request to start, then header_timeout for
  // its head to arrive whole.
  beast::error_code ec;
  facts_.started = last_end;  // a pipelined request waited in the buffer since then
  if (conn_.buffer.size() == 0) {
    conn_.stream.expires_at(last_end + server.idle_timeout);
    std::size_t got = 0;
    std::tie(ec, got) =
        co_await conn_.stream.async_read_some(conn_.buffer.prepare(4096), use_nothrow);
    conn_.buffer.commit(got);
    facts_.started = Clock::now();
  }
  conn_.idle = false;
  if (!ec) {
    conn_.stream.expires_at(facts_.started + server.header_timeout);
    std::size_t head_size = 0;
    ec = co_await read_head_bytes(conn_, server.max_header_size, head_size);
    if (!ec && head_size > 0) {
      facts_.head_error =
          raw_head_error({static_cast<const char*>(conn_.buffer.data().data()), head_size},
                         server.max_header_fields);
    }
  }
  if (!ec && !facts_.head_error) {
    // The whole head is buffered: parsed in place, by the same put() Beast's read
    // would call (which remains for a parser that wants more).
    parse_buffered(conn_.buffer, parser_, ec);
    if (!ec && !parser_.is_header_done()) {
      std::tie(ec, std::ignore) =
          co_await bhttp::async_read_header(conn_.stream, conn_.buffer, parser_, use_nothrow);
    }
  }
  if (ec && is_disconnect(ec)) co_return false;
  if (ec && !facts_.head_error) {
    facts_.head_error = HeadError{
        ec == bhttp::error::header_limit ? HeadError::Kind::too_large : HeadError::Kind::malformed,
        "the request could not be parsed: " + ec.message()};
  }
  if (!facts_.head_error) check_head();
  co_return true;
}

// Framing checks that close request-smuggling doors (RFC 9112 6.1, 6.3), and the
// Host rules of RFC 9112 3.2: an HTTP/1.1 request without Host, or with two, is 400.
void Exchange::check_head() {
  const auto& req = parser_.get();
  version_ = req.version();
  facts_.protocol = version_ >= 11 ? Protocol::http11 : Protocol::http10;
  head_request_ = req.method() == bhttp::verb::head;
  client_keep_alive_ = req.keep_alive();
  facts_.content_length =
      parser_.content_length() ? std::optional{*parser_.content_length()} : std::nullopt;
  facts_.has_body = !parser_.is_done();
  const auto bad = [&](const char* why) {
    facts_.head_error = HeadError{HeadError::Kind::malformed, why};
  };
  // One walk over the fields, in their order, rather than a lookup each: a field's
  // first value is what req[name] would give.
  std::size_t lengths = 0, encodings = 0, hosts = 0, expects = 0, tes = 0;
  std::string_view host;
  expects_continue_ = false;
  for (const auto& f : req) {
    switch (f.name()) {
      case bhttp::field::content_length:
        ++lengths;
        break;
      case bhttp::field::transfer_encoding:
        ++encodings;
        break;
      case bhttp::field::host:
        if (hosts++ == 0) host = f.value();
        break;
      case bhttp::field::expect:
        // RFC 9110 10.1.1: an HTTP/1.0 request's expectation is ignored (and 15.2: no
        // 1xx is ever sent to an HTTP/1.0 client).
        if (expects++ == 0) {
          expects_continue_ = version_ >= 11 && beast::iequals(f.value(), "100-continue");
        }
        break;
      case bhttp::field::te:
        if (tes++ > 0) break;
        for (const auto& coding : bhttp::token_list{f.value()}) {
          if (beast::iequals(coding, "trailers")) accepts_trailers_ = true;
        }
        break;
      default:
        break;
    }
  }
  if (lengths > 0 && encodings > 0) {
    bad("both Content-Length and Transfer-Encoding are present");
  } else if (lengths > 1) {
    bad("more than one Content-Length header");
  } else if (encodings > 0 && !req.chunked()) {
    bad("Transfer-Encoding must end with chunked");
  } else if (hosts > 1) {
    bad("more than one Host header");
  } else if (hosts == 0 && version_ >= 11) {
    bad("an HTTP/1.1 request needs a Host header");
  } else if (!host.empty() && !valid_authority(host)) {
    bad("the Host header is not a valid host");
  }
}

}  // namespace idemproxy::codec::http1
