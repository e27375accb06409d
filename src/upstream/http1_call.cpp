#include "upstream/http1_call.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <span>

#include "codec/http1/trailer_section.hpp"
#include "http/arena.hpp"
#include "http/fields.hpp"
#include "http/parse_buffered.hpp"

namespace idemproxy::upstream {
namespace {

// A server sends few interim answers; an endless stream of them is an attack.
constexpr int kMaxInterim = 16;

// The parser a chunked answer's body is read by, in the arena the answer's fields use
// (making a parser allocates nothing, so nothing can throw between the two steps),
// given a head that says only that the body is chunked: the real head was read
// already.
ChunkParserPtr chunk_parser(std::optional<std::uint64_t> body_limit,
                            const FieldsAllocator& fields) {
  ArenaAllocator<ChunkParser> memory(fields);
  ChunkParserPtr parser(::new (memory.allocate(1)) ChunkParser(
      std::piecewise_construct, std::make_tuple(), std::make_tuple(fields)));
  parser->body_limit(body_limit ? boost::optional<std::uint64_t>(*body_limit) : boost::none);
  static constexpr std::string_view kChunked =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
  beast::error_code ec;
  parser->put(asio::buffer(kChunked), ec);
  BOOST_ASSERT(!ec && parser->is_header_done());
  return parser;
}

// The most a head may take (Beast's header_limit, as the proxy set it).
constexpr std::size_t kMaxHead = std::size_t{64} * 1024;

}  // namespace

// A pooled call lives in its client connection's arena: no heap call per request.
static_assert(sizeof(Http1Call) <= http::Arena::kLargest, "a call must fit an arena block");

UpstreamCallPtr Http1Call::make(FieldsAllocator memory, ConnectionHome& home,
                                std::unique_ptr<UpstreamConnection> conn) {
  ArenaAllocator<Http1Call> typed(memory);
  auto* call = ::new (typed.allocate(1)) Http1Call(home, std::move(conn));
  call->memory_ = memory;
  return UpstreamCallPtr(call);
}

void Http1Call::destroy() noexcept {
  ArenaAllocator<Http1Call> typed(memory_);
  this->~Http1Call();
  typed.deallocate(this, 1);
}

std::optional<beast::error_code> Http1Call::head_buffered(std::size_t& searched,
                                                          std::size_t& head_size) const {
  const std::string_view seen(static_cast<const char*>(conn_->buffer.data().data()),
                              conn_->buffer.size());
  if (const auto end = seen.find("\r\n\r\n", searched); end != std::string_view::npos) {
    head_size = end + 4;
    return beast::error_code{};
  }
  if (seen.size() > kMaxHead) return bhttp::error::header_limit;
  searched = seen.size() < 3 ? 0 : seen.size() - 3;
  return std::nullopt;
}

asio::awaitable<beast::error_code> Http1Call::read_head(bool head_request,
                                                        std::optional<std::uint64_t> body_limit,
                                                        FieldsAllocator fields, TimePoint until) {
  conn_->stream.expires_at(until);
  for (int interim = 0;; ++interim) {
    // Read until the buffer holds a whole head, each read resuming the search where
    // the last stopped; what ended the reads early is named as Beast's read named it.
    std::size_t head_size = 0, searched = 0;
    beast::error_code ec;
    for (;;) {
      if (const auto buffered = head_buffered(searched, head_size)) {
        ec = *buffered;
        break;
      }
      const bool none_yet = conn_->buffer.size() == 0;
      // Into the room the buffer has (a connection that read a large body keeps it).
      const std::size_t room =
          std::max<std::size_t>(4096, conn_->buffer.capacity() - conn_->buffer.size());
      std::size_t n = 0;
      std::tie(ec, n) =
          co_await conn_->stream.async_read_some(conn_->buffer.prepare(room), use_nothrow);
      conn_->buffer.commit(n);
      if (ec == asio::error::eof) {
        ec = none_yet ? bhttp::error::end_of_stream : bhttp::error::partial_message;
      }
      if (ec) break;
    }
    // A kept-alive connection the upstream closed as the request came, before a byte of
    // an answer (its end, or a reset, with nothing read: the FIN may be in flight while
    // the pool hands the connection out, before its idle read could see it).
    const bool unanswered =
        conn_->reused && conn_->buffer.size() == 0 &&
        (ec == bhttp::error::end_of_stream || ec == asio::error::connection_reset);
    if (unanswered && resendable_ && head_bytes_) {
      if (const auto rec = co_await resend(until)) co_return rec;
      --interim;  // no head was read
      continue;
    }
    resendable_ = false;
    head_bytes_.reset();
    if (ec) co_return ec;
    // Each head is read afresh (RFC 9110 15.2: a 1xx is never the answer; taking it
    // for one hands the real answer to the next request on the connection).
    head_.emplace(fields);
    facts_ = {};
    const std::string_view bytes(static_cast<const char*>(conn_->buffer.data().data()), head_size);
    ec = codec::http1::parse_response_head(bytes, *head_, facts_);
    conn_->buffer.consume(head_size);
    if (ec) co_return ec;
    const unsigned status = facts_.status;
    if (status / 100 != 1) co_return start_body(head_request, body_limit);
    // A 101 is an error: the proxy never forwards Upgrade, and a server must not
    // switch unasked (RFC 9110 7.8).
    if (status == 101 || interim == kMaxInterim) co_return bhttp::error::bad_status;
    if (status != 100) co_return ec;
  }
}

beast::error_code Http1Call::start_body(bool head_request,
                                        std::optional<std::uint64_t> body_limit) {
  if (!facts_.framed_one_way()) return bhttp::error::bad_transfer_encoding;
  const unsigned status = facts_.status;
  // RFC 9112 6.3: no body for HEAD, 204 and 304 (a message with none keeps its
  // fields: they describe the resource); else chunked, a length, or to the close.
  if (head_request || status == 204 || status == 304 || facts_.content_length == 0u) {
    body_ = Body::none;
  } else if (facts_.chunked) {
    body_ = Body::chunked;
    chunks_ = chunk_parser(body_limit, head_->get_allocator());
    chunks_->on_chunk_header(last_chunk_);
  } else if (facts_.content_length) {
    if (body_limit && *facts_.content_length > *body_limit) return bhttp::error::body_limit;
    body_ = Body::length;
    left_ = *facts_.content_length;
  } else {
    body_ = Body::to_close;
    left_ = body_limit.value_or(~std::uint64_t{0});
  }
  return {};
}

Framing Http1Call::framing() const {
  if (facts_.status / 100 == 1 || body_ == Body::none) return Framing::none();
  if (body_ == Body::length) return Framing::of(*facts_.content_length);
  return Framing::unknown(body_ == Body::chunked);  // chunked, or to the close
}

bool Http1Call::body_done() const {
  if (body_ == Body::length) return left_ == 0;
  if (body_ == Body::chunked) return trailers_read_ || chunks_->is_done();
  return body_ == Body::none || closed_;
}

asio::awaitable<AnswerPiece> Http1Call::read_body(TimePoint until) {
  AnswerPiece out;
  if (ended_) {
    out.end = true;
    out.trailers = trailers_;
    co_return out;
  }
  if (!chunk_) {
    chunk_.emplace();
    // Beast reads at most capacity() - size() bytes of a flat_buffer per call (and
    // at least 512): a buffer that only ever held a head reads chunks 512 bytes at a
    // time, a syscall and a parse each. It gets kBodyReadSize of room, and keeps it.
    if (body_ == Body::chunked) conn_->buffer.reserve(kBodyReadSize);
  }
  char* const room = chunk_->data();
  // Most API answers: a length that fits one chunk, read whole in one piece.
  const bool whole = body_ == Body::length && *facts_.content_length <= Chunk::kSize;
  std::size_t filled = 0;
  while (!body_done()) {
    conn_->stream.expires_at(until);
    const std::size_t before = filled;
    beast::error_code ec;
    if (body_ == Body::chunked) {
      ChunkParser& p = *chunks_;
      p.get().body().data = room + filled;
      p.get().body().size = Chunk::kSize - filled;
      if (!parse_buffered(conn_->buffer, p, ec)) {
        std::tie(ec, std::ignore) =
            co_await bhttp::async_read_some(conn_->stream, conn_->buffer, p, use_nothrow);
      }
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ec == bhttp::error::end_of_chunk && last_chunk_.reached) ec = read_trailer_section();
      filled = Chunk::kSize - p.get().body().size;
    } else if (!take_buffered(room, filled, ec)) {
      // The rest straight from the socket into the chunk.
      std::size_t n = 0;
      std::tie(ec, n) = co_await conn_->stream.async_read_some(
          asio::buffer(room + filled, raw_room(filled)), use_nothrow);
      ec = took_raw(ec, n, filled);
    }
    if (ec) {
      out.error = ec;
      co_return out;
    }
    // A read may parse only framing (a chunk header): nothing to hand on yet.
    if (whole || filled == before) continue;
    break;
  }
  out.data = {room, filled};
  if (body_done()) {
    out.end = true;
    out.trailers = trailers_;
    finish();
  }
  co_return out;
}

std::size_t Http1Call::raw_room(std::size_t filled) const {
  const std::size_t room = Chunk::kSize - filled;
  if (body_ == Body::to_close) return room;
  return static_cast<std::size_t>(std::min<std::uint64_t>(room, left_));
}

bool Http1Call::take_buffered(char* room, std::size_t& filled, beast::error_code& ec) {
  const std::size_t n = std::min(raw_room(filled), conn_->buffer.size());
  if (n == 0) return false;
  std::memcpy(room + filled, conn_->buffer.data().data(), n);
  conn_->buffer.consume(n);
  ec = took_raw({}, n, filled);
  return true;
}

beast::error_code Http1Call::took_raw(beast::error_code ec, std::size_t n, std::size_t& filled) {
  if (ec == asio::error::eof && body_ == Body::to_close) {
    closed_ = true;
    return {};
  }
  if (ec == asio::error::eof) return bhttp::error::partial_message;  // as Beast says it
  if (ec) return ec;
  if (body_ == Body::to_close && n > left_) return bhttp::error::body_limit;
  left_ -= n;
  filled += n;
  return {};
}

beast::error_code Http1Call::read_trailer_section() {
  // The bytes from the last chunk on are still in the buffer: Beast's read consumes
  // only what its parse used, and the parse stopped as it reached that chunk, with its
  // whole section buffered.
  const auto data = conn_->buffer.data();
  const std::string_view bytes(static_cast<const char*>(data.data()), data.size());
  std::size_t used = 0;
  // (Trailer, RFC 9110 6.6.2, is a connection field: it is never kept.)
  const auto ec = codec::http1::parse_trailer_section(bytes, trailers_, used);
  if (ec == bhttp::error::need_more) return bhttp::error::bad_chunk;  // Beast found its end
  if (ec) return ec;
  conn_->buffer.consume(used);
  trailers_read_ = true;
  return {};
}

void Http1Call::finish() {
  ended_ = true;
  // The head's keep-alive is what it said, from its parse: the caller strips the
  // Connection field from the message before it relays it. A body framed by the
  // close ended the connection.
  // Bytes left in the buffer past the answer, or a last read that said more was left
  // after it (the upstream's end, which came with its last bytes, closing without
  // saying so; or bytes nobody asked for), make the connection unusable: kept, the
  // next request could take it before its idle read saw it (within one turn of the
  // loop: pipelined requests do), or read those bytes as its answer.
  if (conn_ && !stopped_ && facts_.keep_alive && body_ != Body::to_close &&
      conn_->buffer.size() == 0 && !conn_->stream.transport().more_after_last_read()) {
    home_.give_back(std::move(conn_));
  }
}

}  // namespace idemproxy::upstream
