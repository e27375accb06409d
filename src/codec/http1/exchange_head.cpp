// Reading a request head on an HTTP/1.1 connection: its bytes buffered whole, parsed
// in one pass (request_head.hpp), then RFC 9112's rules.
#include "codec/http1/exchange.hpp"
#include "http/fields.hpp"
#include "http/request_target.hpp"

namespace idemproxy::codec::http1 {
namespace {

using Clock = std::chrono::steady_clock;

bool is_disconnect(const beast::error_code& ec) {
  return ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::operation_aborted || ec == beast::error::timeout ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
}

// Checks a refused head's raw bytes for the errors named before any other: obsolete
// line folding (RFC 9112 5.2: a server may reject it with 400; folding the line, as
// Beast's parser does, lets two parsers read different values) and more fields than
// `max_fields`.
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

}  // namespace

bool Exchange::awaits_request(TimePoint last_end) {
  facts_.started = last_end;  // a pipelined request waited in the buffer since then
  if (conn_.buffer.size() != 0) return false;
  // Two clocks: idle_timeout for the next request to start, then header_timeout for
  // its head to arrive whole.
  conn_.stream.expires_at(last_end + facts_.settings->config.server.idle_timeout);
  return true;
}

void Exchange::arrived(const beast::error_code& ec) {
  first_read_ = ec;
  facts_.started = Clock::now();
}

std::optional<bool> Exchange::take_head() {
  conn_.idle = false;
  // The request starts: the configuration in force now, which a reload during the
  // wait may have replaced.
  service_.keep_current(facts_.settings, settings_version_);
  if (first_read_) return read_failed(first_read_);
  conn_.stream.expires_at(facts_.started + facts_.settings->config.server.header_timeout);
  return parse_whole();
}

asio::awaitable<bool> Exchange::read_head() {
  for (;;) {
    auto [ec, got] = co_await conn_.stream.async_read_some(conn_.buffer.prepare(4096), use_nothrow);
    conn_.buffer.commit(got);
    if (ec) co_return read_failed(ec);
    if (const auto read = parse_whole()) co_return *read;
  }
}

bool Exchange::read_failed(const beast::error_code& ec) {
  if (is_disconnect(ec)) return false;
  facts_.head_error =
      HeadError{HeadError::Kind::malformed, "the request could not be read: " + ec.message()};
  return true;
}

// Each search resumes where the last one stopped: a head trickled a byte at a time
// must not cost a scan of everything before it per byte.
std::optional<bool> Exchange::parse_whole() {
  const auto& server = facts_.settings->config.server;
  const std::string_view seen(static_cast<const char*>(conn_.buffer.data().data()),
                              conn_.buffer.size());
  const auto end = seen.find("\r\n\r\n", searched_);
  searched_ = seen.size() < 3 ? 0 : seen.size() - 3;
  if (end == std::string_view::npos) {
    if (seen.size() <= server.max_header_size) return std::nullopt;
    facts_.head_error =
        HeadError{HeadError::Kind::too_large, "the request head is larger than " +
                                                  std::to_string(server.max_header_size) +
                                                  " bytes (server.max_header_size)"};
    return true;
  }
  const std::size_t head_size = end + 4;
  // The whole head is buffered: parsed in place, in one pass.
  const std::string_view bytes(static_cast<const char*>(conn_.buffer.data().data()), head_size);
  HeadFacts parsed;
  const auto ec = parse_request_head(bytes, head_storage_, parsed);
  if (ec || parsed.fields > server.max_header_fields) {
    // What the parse refused, or too many fields: the raw bytes name obsolete line
    // folding and the count, as before any other error.
    facts_.head_error = raw_head_error(bytes, server.max_header_fields);
    if (!facts_.head_error) {
      facts_.head_error =
          HeadError{HeadError::Kind::malformed, "the request could not be parsed: " + ec.message()};
    }
  }
  conn_.buffer.consume(head_size);
  if (!facts_.head_error) check_head(parsed);
  return true;
}

// Framing checks that close request-smuggling doors (RFC 9112 6.1, 6.3), and the
// Host rules of RFC 9112 3.2: an HTTP/1.1 request without Host, or with two, is 400.
void Exchange::check_head(const HeadFacts& facts) {
  const auto& req = *head_;
  version_ = facts.version;
  facts_.protocol = version_ >= 11 ? Protocol::http11 : Protocol::http10;
  head_request_ = req.method() == bhttp::verb::head;
  client_keep_alive_ = facts.keep_alive;
  facts_.content_length = facts.content_length;
  left_ = facts.chunked ? 0 : facts.content_length.value_or(0);
  facts_.has_body = facts.chunked || left_ > 0;
  // RFC 9110 10.1.1: an HTTP/1.0 request's expectation is ignored (and 15.2: no 1xx
  // is ever sent to an HTTP/1.0 client).
  expects_continue_ = version_ >= 11 && facts.expect.data() != nullptr &&
                      beast::iequals(facts.expect, "100-continue");
  for (const auto& coding : bhttp::token_list{facts.te}) {
    if (beast::iequals(coding, "trailers")) accepts_trailers_ = true;
  }
  const auto bad = [&](const char* why) {
    facts_.head_error = HeadError{HeadError::Kind::malformed, why};
  };
  if (facts.lengths > 0 && facts.encodings > 0) {
    bad("both Content-Length and Transfer-Encoding are present");
  } else if (facts.lengths > 1) {
    bad("more than one Content-Length header");
  } else if (facts.encodings > 0 && !facts.chunked) {
    bad("Transfer-Encoding must end with chunked");
  } else if (facts.hosts > 1) {
    bad("more than one Host header");
  } else if (facts.hosts == 0 && version_ >= 11) {
    bad("an HTTP/1.1 request needs a Host header");
  } else if (!facts.host.empty() && !valid_authority(facts.host)) {
    bad("the Host header is not a valid host");
  } else if (facts.chunked) {
    // A chunked body is read by Beast's parser, given a head that says only that.
    static constexpr std::string_view kChunked =
        "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
    auto& parser = chunked_.emplace(std::piecewise_construct, std::make_tuple(),
                                    std::make_tuple(conn_.fields_allocator()));
    parser.eager(false);
    parser.header_limit(static_cast<std::uint32_t>(facts_.settings->config.server.max_header_size));
    parser.body_limit(boost::none);  // set by body_limit(), once the route is known
    beast::error_code ec;
    parser.put(asio::buffer(kChunked), ec);
    BOOST_ASSERT(!ec && parser.is_header_done());
  }
}

}  // namespace idemproxy::codec::http1
