#include "upstream/http1_call.hpp"

#include <array>
#include <span>

#include "codec/http1/body_frames.hpp"
#include "codec/http1/trailer_section.hpp"
#include "http/fields.hpp"
#include "http/parse_buffered.hpp"
#include "http/try_io.hpp"

namespace idemproxy::upstream {
namespace {

// A server sends few interim answers; an endless stream of them is an attack.
constexpr int kMaxInterim = 16;

StreamingParserPtr new_parser(bool head_request, std::optional<std::uint64_t> body_limit,
                              const FieldsAllocator& fields) {
  // In the arena the answer's fields use: one heap allocation fewer per exchange.
  // (Making a parser allocates nothing, so nothing can throw between the two steps.)
  ArenaAllocator<StreamingParser> memory(fields);
  StreamingParserPtr parser(::new (memory.allocate(1)) StreamingParser(
      std::piecewise_construct, std::make_tuple(), std::make_tuple(fields)));
  parser->header_limit(64 * 1024);
  parser->body_limit(body_limit ? boost::optional<std::uint64_t>(*body_limit) : boost::none);
  if (head_request) parser->skip(true);
  return parser;
}

// An answer's body is read one way only, the way its upstream framed it (RFC 9112
// 6.3), and its bytes are what they say: a Transfer-Encoding other than `chunked`
// alone (once, RFC 9112 6.1), or one beside Content-Length, is a malformed answer.
// Beast's parser refuses chunked beside Content-Length, but took `gzip` beside a
// length by the length (the coding says: to the close), and a value that is not a
// list of codings up to its first bad element (`gzip;level=1, chunked`: gzip alone,
// the chunks relayed as body bytes). And a body in a coding besides chunked was kept
// without the coding, which is connection-specific (never stored, nor sent over
// HTTP/2): its replay was gzip bytes with nothing to say so. (nginx 1.22, tried here,
// relays `gzip, chunked` as chunked with the gzip dropped, and `gzip` beside a length
// by the length.)
beast::error_code framing_error(const http::Fields& fields) {
  int codings = 0;  // all of them chunked
  bool length = false;
  for (const auto& field : fields) {
    const auto name = field.name();
    if (name == bhttp::field::content_length) {
      length = true;
    } else if (name == bhttp::field::transfer_encoding) {
      if (!http::coding_list(field.value())) return bhttp::error::bad_transfer_encoding;
      int listed = 0;
      for (const auto coding : bhttp::opt_token_list{field.value()}) {
        if (!beast::iequals(coding, "chunked")) return bhttp::error::bad_transfer_encoding;
        ++listed;
      }
      if (listed == 0) return bhttp::error::bad_transfer_encoding;  // an empty list
      codings += listed;
    }
  }
  if (codings > 1 || (codings == 1 && length)) return bhttp::error::bad_transfer_encoding;
  return {};
}

// Beast reads at most capacity() - size() bytes of a flat_buffer per call (and at
// least 512): a buffer that only ever held a head reads a body 512 bytes at a time,
// a syscall and a write each. While a body is large or of unknown length, the
// upstream connection's buffer gets kBodyReadSize of room, and keeps it.
void widen_for_body(beast::flat_buffer& buffer, const StreamingParser& p) {
  if (!p.is_done() && (p.chunked() || p.content_length().value_or(0) > 4096)) {
    buffer.reserve(kBodyReadSize);
  }
}

}  // namespace

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

asio::awaitable<beast::error_code> Http1Call::send_head(RequestHeader& head,
                                                        const ExtraFields& extra,
                                                        RequestFraming framing, TimePoint until) {
  // te is hop-by-hop (RFC 9110 10.1.4): an HTTP/1.1 upstream never gets it.
  bool te = false, length = false;  // one walk, not a search of the field tree each
  for (const auto& f : head) {
    te = te || f.name() == bhttp::field::te;
    length = length || f.name() == bhttp::field::content_length;
  }
  if (te) head.erase(bhttp::field::te);
  length = length || extra.find("Content-Length") != nullptr;
  chunked_ = framing.body && !length;
  resendable_ = framing.resendable && !framing.body;
  head_bytes_.emplace(serialize_head(head, extra.fields()));
  if (framing.body) co_return beast::error_code{};  // it goes with the first body bytes
  // (No temporary of class type inside a co_await expression: GCC 12 miscompiles
  // some, exchange.cpp says which.)
  const asio::const_buffer only = asio::buffer(*head_bytes_);
  const std::span<const asio::const_buffer> buffers(&only, 1);
  Rest rest(buffers);
  beast::error_code ec;
  if (const auto done = write_now(rest, ec)) co_return *done;
  co_return co_await write_rest(buffers, rest, ec, until);
}

asio::awaitable<beast::error_code> Http1Call::send_body(std::string_view data, bool last,
                                                        TimePoint until) {
  if (stopped_) co_return beast::error_code{};
  codec::http1::BodyFrames frames(chunked_);
  if (head_bytes_) frames.add_bytes(*head_bytes_);
  frames.add_piece(data);
  if (last) frames.add_end();
  if (frames.empty()) co_return beast::error_code{};
  const std::span<const asio::const_buffer> gathered = frames.buffers();
  Rest rest(gathered);
  beast::error_code ec;
  if (const auto done = write_now(rest, ec)) co_return *done;
  co_return co_await write_rest(gathered, rest, ec, until);
}

// In cleartext, what the socket takes now goes at once (http/try_io.hpp): most writes,
// whole. The rest, if any, is awaited until `until`.
bool Http1Call::sent_at_once(Rest& rest, beast::error_code& ec) {
  const std::size_t before = asio::buffer_size(rest);
  const bool settled = http::sent_at_once(conn_->stream, rest, ec);
  out_ += before - asio::buffer_size(rest);
  return settled;
}

std::optional<beast::error_code> Http1Call::write_now(Rest& rest, beast::error_code& ec) {
  if (!sent_at_once(rest, ec)) return std::nullopt;
  if (stale(ec)) return std::nullopt;  // again, on a new connection
  return written(ec);
}

asio::awaitable<beast::error_code> Http1Call::write_rest(
    std::span<const asio::const_buffer> buffers, Rest& rest, beast::error_code ec,
    TimePoint until) {
  for (;;) {
    if (!ec && asio::buffer_size(rest) != 0) {
      conn_->stream.expires_at(until);
      if (co_await write_or_answer(rest, ec)) {
        stopped_ = true;  // answered: the rest is not sent
        co_return written({});
      }
    }
    if (stale(ec)) {
      // A stale keep-alive connection: the same bytes go once more on a new one.
      written_ = true;
      if (const auto fec = co_await take_fresh()) co_return fec;
      rest = Rest(buffers);
      ec = {};
      sent_at_once(rest, ec);
      continue;
    }
    co_return written(ec);
  }
}

beast::error_code Http1Call::written(beast::error_code ec) {
  written_ = true;
  // The upstream stopped taking the request after it took some: not a request that
  // never reached it. Its answer, read next, may already be in the socket (a reset
  // leaves what came before it readable), or the read finds the connection's end: a
  // failure after sending, never one before (the request may have run).
  if (out_ > 0 && (ec == asio::error::connection_reset || ec == asio::error::broken_pipe)) {
    stopped_ = true;
    ec = {};
  }
  if (!ec && !resendable_) head_bytes_.reset();
  return ec;
}

asio::awaitable<beast::error_code> Http1Call::take_fresh() {
  auto [ec, fresh] = co_await home_.fresh();
  if (ec) co_return ec;
  conn_ = std::move(fresh);
  out_ = 0;
  co_return ec;
}

asio::awaitable<beast::error_code> Http1Call::resend(TimePoint until) {
  resendable_ = false;
  if (const auto fec = co_await take_fresh()) co_return fec;
  conn_->stream.expires_at(until);
  auto [ec, n] = co_await asio::async_write(conn_->stream, asio::buffer(*head_bytes_), use_nothrow);
  head_bytes_.reset();
  co_return ec;
}

asio::awaitable<beast::error_code> Http1Call::read_head(bool head_request,
                                                        std::optional<std::uint64_t> body_limit,
                                                        FieldsAllocator fields, TimePoint until) {
  conn_->stream.expires_at(until);
  for (int interim = 0;; ++interim) {
    // Each head gets a fresh parser (RFC 9110 15.2: a 1xx is never the answer; taking
    // it for one hands the real answer to the next request on the connection).
    parser_ = new_parser(head_request, body_limit, fields);
    parser_->on_chunk_header(last_chunk_);
    auto [ec, n] =
        co_await bhttp::async_read_header(conn_->stream, conn_->buffer, *parser_, use_nothrow);
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
    const unsigned status = parser_->get().result_int();
    if (status / 100 != 1) co_return framing_error(parser_->get());
    // A 101 is an error: the proxy never forwards Upgrade, and a server must not
    // switch unasked (RFC 9110 7.8).
    if (status == 101 || interim == kMaxInterim) co_return bhttp::error::bad_status;
    if (status != 100) co_return ec;
  }
}

Framing Http1Call::framing() const {
  const StreamingParser& p = *parser_;
  const unsigned status = p.get().result_int();
  // A message with no body keeps its fields: they describe the resource.
  if (p.is_done() || status / 100 == 1 || status == 204 || status == 304) return Framing::none();
  if (const auto length = p.content_length()) return Framing::of(*length);
  return Framing::unknown(p.chunked());
}

asio::awaitable<AnswerPiece> Http1Call::read_body(TimePoint until) {
  AnswerPiece out;
  if (ended_) {
    out.end = true;
    out.trailers = trailers_;
    co_return out;
  }
  StreamingParser& p = *parser_;
  if (!chunk_) {
    chunk_.emplace();
    widen_for_body(conn_->buffer, p);
  }
  char* const room = chunk_->data();
  // Most API answers: a length that fits one chunk, read whole in one piece.
  const bool whole = !p.chunked() &&
                     (p.is_done() || p.content_length().value_or(Chunk::kSize + 1) <= Chunk::kSize);
  std::size_t filled = 0;
  while (!body_done()) {
    conn_->stream.expires_at(until);
    if (!whole && !direct_ && conn_->buffer.size() == 0 && !p.chunked()) {
      if (const auto left = p.content_length_remaining()) direct_ = *left;
    }
    if (direct_) {
      const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(Chunk::kSize, *direct_));
      auto [ec, n] = co_await conn_->stream.async_read_some(asio::buffer(room, want), use_nothrow);
      if (ec == asio::error::eof) ec = bhttp::error::partial_message;  // as Beast says it
      if (ec) {
        out.error = ec;
        co_return out;
      }
      *direct_ -= n;
      filled = n;
      break;
    }
    p.get().body().data = room + filled;
    p.get().body().size = Chunk::kSize - filled;
    beast::error_code ec;
    if (!parse_buffered(conn_->buffer, p, ec)) {
      std::tie(ec, std::ignore) =
          co_await bhttp::async_read_some(conn_->stream, conn_->buffer, p, use_nothrow);
    }
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec == bhttp::error::end_of_chunk && last_chunk_.reached) ec = read_trailer_section();
    if (ec) {
      out.error = ec;
      co_return out;
    }
    filled = Chunk::kSize - p.get().body().size;
    // A read may parse only framing (a chunk header): nothing to hand on yet.
    if (whole || filled == 0) continue;
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
  // The parser's keep_alive() is what the head said, from its parse: the caller
  // strips the Connection field from the message before it relays it.
  // The last read said more was left after the answer: the upstream's end, which came
  // with its last bytes (it closed without saying so), or bytes nobody asked for.
  // Either makes the connection unusable; kept, the next request could take it before
  // its idle read saw it (within one turn of the loop: pipelined requests do).
  if (conn_ && !stopped_ && parser_->keep_alive() && !parser_->need_eof() &&
      !conn_->stream.transport().more_after_last_read()) {
    home_.give_back(std::move(conn_));
  }
}

}  // namespace idemproxy::upstream
