// Http1Call's request side: the head laid out and held for the body's first bytes,
// both written in as few system calls as the socket allows, and a request whose first
// write fails on a reused connection sent again on a new one. (The answer's side is
// http1_call.cpp; a write beside a watch for an early answer, http1_early_answer.cpp.)
#include "codec/http1/body_frames.hpp"
#include "http/try_io.hpp"
#include "upstream/http1_call.hpp"

namespace idemproxy::upstream {

std::optional<beast::error_code> Http1Call::send_head_now(RequestHeader& head,
                                                          const ExtraFields& extra,
                                                          RequestFraming framing) {
  if (!framing.body) return std::nullopt;
  hold_head(head, extra, framing);
  return beast::error_code{};  // it goes with the first body bytes
}

asio::awaitable<beast::error_code> Http1Call::send_head(RequestHeader& head,
                                                        const ExtraFields& extra,
                                                        RequestFraming framing, TimePoint until) {
  if (const auto held = send_head_now(head, extra, framing)) co_return *held;
  hold_head(head, extra, framing);
  // (No temporary of class type inside a co_await expression: GCC 12 miscompiles
  // some, exchange.cpp says which.)
  const asio::const_buffer only = asio::buffer(*head_bytes_);
  const std::span<const asio::const_buffer> buffers(&only, 1);
  Rest rest(buffers);
  beast::error_code ec;
  if (const auto done = write_now(rest, ec)) co_return *done;
  co_return co_await write_rest(buffers, rest, ec, until);
}

void Http1Call::hold_head(RequestHeader& head, const ExtraFields& extra, RequestFraming framing) {
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
}

asio::awaitable<beast::error_code> Http1Call::send_body(std::string_view data, bool last,
                                                        TimePoint until) {
  // Unless send_body_now() began this piece, it begins here.
  if (!piece_) {
    if (const auto done = send_body_now(data, last)) co_return *done;
  }
  const PieceRest piece = *piece_;
  piece_.reset();
  codec::http1::BodyFrames frames(chunked_);
  lay_out(frames, data, last);
  const std::span<const asio::const_buffer> gathered = frames.buffers();
  Rest rest(gathered);
  rest.consume(piece.taken);
  co_return co_await write_rest(gathered, rest, piece.ec, until);
}

std::optional<beast::error_code> Http1Call::send_body_now(std::string_view data, bool last) {
  if (stopped_) return beast::error_code{};
  codec::http1::BodyFrames frames(chunked_);
  lay_out(frames, data, last);
  if (frames.empty()) return beast::error_code{};
  Rest rest(frames.buffers());
  beast::error_code ec;
  if (const auto done = write_now(rest, ec)) return done;
  // send_body() writes the rest.
  piece_.emplace(PieceRest{asio::buffer_size(frames.buffers()) - asio::buffer_size(rest), ec});
  return std::nullopt;
}

void Http1Call::lay_out(codec::http1::BodyFrames& frames, std::string_view data, bool last) const {
  if (head_bytes_) frames.add_bytes(*head_bytes_);
  frames.add_piece(data);
  if (last) frames.add_end();
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

}  // namespace idemproxy::upstream
