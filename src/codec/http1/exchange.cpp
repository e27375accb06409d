#include "codec/http1/exchange.hpp"

#include <array>

#include "codec/http1/prepared_head.hpp"
#include "http/fields.hpp"
#include "http/parse_buffered.hpp"
#include "http/request_target.hpp"
#include "http/try_io.hpp"

namespace idemproxy::codec::http1 {
namespace {

using Clock = std::chrono::steady_clock;

BodyPiece::Error body_error(const beast::error_code& ec) {
  if (ec == bhttp::error::body_limit) return BodyPiece::Error::too_large;
  if (ec == beast::error::timeout) return BodyPiece::Error::timeout;
  if (ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
      ec != bhttp::error::partial_message && ec != bhttp::error::end_of_stream) {
    return BodyPiece::Error::malformed;
  }
  return BodyPiece::Error::gone;
}

}  // namespace

Exchange::Exchange(ClientConnection& conn, std::shared_ptr<const Settings> settings,
                   std::uint64_t settings_version, const Service& service)
    : conn_(conn),
      service_(service),
      settings_version_(settings_version),
      head_storage_(conn.fields_allocator()) {
  facts_.settings = std::move(settings);
  head_ = &head_storage_;
  facts_.peer = &conn.peer;
  kept_ = &conn.kept;
  facts_.protocol = Protocol::http11;
}

bool Exchange::reusable() const {
  return !broken_ && !facts_.head_error && keep_ && answered_ && body_done() &&
         !service_.draining();
}

void Exchange::body_limit(std::uint64_t limit) {
  limit_ = limit;
  if (chunked_) chunked_->body_limit(limit);  // Beast counts each chunk against it
}

bool Exchange::body_done() const { return chunked_ ? chunked_->is_done() : left_ == 0; }

// As read_body's first case, a body framed by Content-Length that came with the head,
// taken whole.
bool Exchange::take_buffered_body(std::string& body) {
  if (body_done()) {
    body.clear();
    return true;
  }
  if (chunked_ || (facts_.content_length && *facts_.content_length > limit_) ||
      left_ > conn_.buffer.size()) {
    return false;
  }
  body.assign(take_from_buffer(static_cast<std::size_t>(left_)));
  return true;
}

std::string_view Exchange::take_from_buffer(std::size_t max) {
  const auto n = static_cast<std::size_t>(
      std::min<std::uint64_t>(std::min<std::uint64_t>(left_, max), conn_.buffer.size()));
  const std::string_view data(static_cast<const char*>(conn_.buffer.data().data()), n);
  conn_.buffer.consume(n);
  left_ -= n;
  read_ += n;
  return data;
}

void Exchange::deadline_for_read(std::optional<TimePoint> deadline) {
  const auto by = Clock::now() + facts_.settings->config.server.read_timeout;
  conn_.stream.expires_at(deadline ? std::min(by, *deadline) : by);
}

std::optional<BodyPiece> Exchange::read_body_now(std::size_t max) {
  if (body_done()) return BodyPiece{{}, true, BodyPiece::Error::none};
  if (facts_.content_length && *facts_.content_length > limit_) {
    return BodyPiece{{}, false, BodyPiece::Error::too_large};
  }
  // A body framed by Content-Length whose bytes came with the head (most API
  // requests) is handed on where it lies, in the connection's buffer, which nothing
  // reads into again before the exchange ends: no chunk is taken for it. Holding one
  // per request beside the answer's relay chunk outran the thread's free list of
  // chunks at 64 connections, and each request then zeroed and freed 64 KiB
  // (bench/results/HISTORY.md, "HTTP/1.1 pass-through regression").
  if (!chunked_ && conn_.buffer.size() > 0) {
    const std::string_view data = take_from_buffer(max);
    return BodyPiece{data, left_ == 0, BodyPiece::Error::none};
  }
  return std::nullopt;
}

asio::awaitable<BodyPiece> Exchange::read_body(std::size_t max, std::optional<TimePoint> deadline) {
  if (auto now = read_body_now(max)) co_return *now;
  if (!chunk_) chunk_.emplace();
  const std::size_t room = std::min(max, chunk_->size());
  beast::error_code ec;
  // Once the bytes buffered with the head are used up, a body framed by
  // Content-Length has nothing for a parser to find in it, only bytes to count: it
  // is read straight into the chunk (through a parser, each byte was copied once
  // more: docs/PERFORMANCE.md).
  if (!chunked_) {
    deadline_for_read(deadline);
    std::size_t n = 0;
    std::tie(ec, n) = co_await conn_.stream.async_read_some(
        asio::buffer(chunk_->data(),
                     static_cast<std::size_t>(std::min<std::uint64_t>(room, left_))),
        use_nothrow);
    if (ec == asio::error::eof) ec = bhttp::error::partial_message;  // as Beast says it
    if (ec) co_return BodyPiece{{}, false, body_error(ec)};
    left_ -= n;
    read_ += n;
    co_return BodyPiece{{chunk_->data(), n}, left_ == 0, BodyPiece::Error::none};
  }
  for (;;) {
    chunked_->get().body().data = chunk_->data();
    chunked_->get().body().size = room;
    if (!parse_buffered(conn_.buffer, *chunked_, ec)) {
      deadline_for_read(deadline);
      std::tie(ec, std::ignore) =
          co_await bhttp::async_read_some(conn_.stream, conn_.buffer, *chunked_, use_nothrow);
    }
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec) co_return BodyPiece{{}, false, body_error(ec)};
    const std::size_t n = room - chunked_->get().body().size;
    read_ += n;
    // Trailer fields of a chunked request are discarded (RFC 9110 6.5.1 lets a
    // recipient): the parser merges them into a head of its own, not the request's,
    // which is forwarded and fingerprinted (RFC 9110 6.5 forbids trailers there).
    if (chunked_->is_done()) co_return BodyPiece{{chunk_->data(), n}, true, BodyPiece::Error::none};
    // A read may parse only framing (a chunk header): nothing to hand on yet.
    if (n > 0) co_return BodyPiece{{chunk_->data(), n}, false, BodyPiece::Error::none};
  }
}

asio::awaitable<bool> Exchange::send_continue() {
  expects_continue_ = false;
  static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
  const auto bytes = asio::buffer(kContinue);
  co_return co_await write(bytes);
}

// In cleartext, what the socket takes now goes at once (http/try_io.hpp): most
// answers, whole. The rest, if any, is awaited as before, under the read timeout.
template <class Buffers>
std::optional<bool> Exchange::write_now(beast::buffers_suffix<Buffers>& rest) {
  beast::error_code ec;
  if (!http::sent_at_once(conn_.stream, rest, ec)) return std::nullopt;
  if (ec) broken_ = true;
  return !ec;
}

template <class Buffers>
asio::awaitable<bool> Exchange::write_rest(beast::buffers_suffix<Buffers>& rest) {
  conn_.stream.expires_after(facts_.settings->config.server.read_timeout);
  auto [ec, n] = co_await asio::async_write(conn_.stream, rest, use_nothrow);
  if (ec) broken_ = true;
  co_return !ec;
}

template <class Buffers>
asio::awaitable<bool> Exchange::write(const Buffers& buffers) {
  beast::buffers_suffix<Buffers> rest(buffers);
  if (const auto done = write_now(rest)) co_return *done;
  co_return co_await write_rest(rest);
}

asio::awaitable<bool> Exchange::send_interim(ResponseHeader& head) {
  // RFC 9110 15.2: never to an HTTP/1.0 client.
  if (version_ < 11 || broken_) co_return true;
  head.version(11);
  // Nor a 1xx (RFC 9110 8.6, RFC 9112 6.1): it has no body to frame.
  head.erase(bhttp::field::content_length);
  head.erase(bhttp::field::transfer_encoding);
  const HeadBytes bytes = serialize_head(head);
  const auto buffer = asio::buffer(bytes);
  co_return co_await write(buffer);
}

bool Exchange::bodiless(const ResponseHeader& head, Framing framing) const {
  const unsigned status = head.result_int();
  return head_request_ || status / 100 == 1 || status == 204 || status == 304 ||
         framing.kind == Framing::Kind::none;
}

std::optional<bool> Exchange::send_head_now(ResponseHeader& head, Framing framing) {
  if (bodiless(head, framing)) return std::nullopt;
  hold_head(head, framing, false);
  return true;
}

asio::awaitable<bool> Exchange::send_head(ResponseHeader& head, Framing framing) {
  const bool none = bodiless(head, framing);
  hold_head(head, framing, none);
  if (!none) co_return true;
  beast::buffers_suffix<asio::const_buffer> rest(asio::buffer(*pending_));
  auto sent = write_now(rest);  // most often whole, with no frame for write()
  if (!sent) sent = co_await write_rest(rest);
  pending_.reset();
  answered_ = *sent;
  co_return *sent;
}

void Exchange::hold_head(ResponseHeader& head, Framing framing, bool bodiless) {
  const unsigned status = head.result_int();
  head.version(version_ == 10 ? 10 : 11);
  trailers_out_ = framing.trailers && accepts_trailers_ && version_ >= 11 && !bodiless;
  // The fields this codec decides, the framing and Connection, are written after the
  // head's own (serialize_head's `added`), and the head's of those names erased in
  // one walk: setting each in Beast's field tree cost ~400 instructions.
  std::array<ExtraField, 3> own;
  std::size_t owned = 0;
  Decimal length;
  bool reframed = false;
  if (!bodiless || (head_request_ && framing.kind == Framing::Kind::length)) {
    if (framing.kind == Framing::Kind::length && !trailers_out_) {
      reframed = true;
      length = Decimal(framing.length);
      own[owned++] = {"Content-Length", length.view()};
    } else if (!head_request_) {
      // RFC 9112 7.1: a body of unknown length, or one followed by trailers, goes
      // chunked to an HTTP/1.1 client; an HTTP/1.0 client reads until the close. No
      // answer comes in a transfer coding besides chunked (an upstream's is refused:
      // upstream/http1_call.cpp; HTTP/2 has none; a record keeps none).
      reframed = true;
      if (version_ >= 11) {
        chunked_out_ = true;
        own[owned++] = {"Transfer-Encoding", "chunked"};
      } else {
        keep_ = false;  // an HTTP/1.0 client reads the body until the connection closes
      }
    }
  }
  // The connection goes on only while the request was read whole: a body left in
  // the socket would be taken for the next request.
  keep_ = keep_ && client_keep_alive_ && body_done() && !facts_.head_error && !service_.draining();
  // RFC 9110 8.6, RFC 9112 6.1: a 204 has neither framing field, whatever came with it.
  const bool unframed = status == 204;
  // A length kept (a 304's, a HEAD answer's) goes once, as one number.
  std::optional<std::uint64_t> kept_length;
  for (auto it = head.begin(); it != head.end();) {
    const auto name = it->name();
    const bool framing_field =
        name == bhttp::field::content_length || name == bhttp::field::transfer_encoding;
    if (name == bhttp::field::connection || ((reframed || unframed) && framing_field)) {
      it = head.erase(it);
    } else if (name == bhttp::field::content_length) {
      std::uint64_t n = 0;
      if (!kept_length && http::parse_decimal(http::single_length(it->value()), n)) kept_length = n;
      it = head.erase(it);
    } else {
      ++it;
    }
  }
  if (kept_length) {
    length = Decimal(*kept_length);
    own[owned++] = {"Content-Length", length.view()};
  }
  // RFC 9112 9.3: HTTP/1.1 persists unless told to close; HTTP/1.0 the other way round.
  if (version_ >= 11 && !keep_) own[owned++] = {"Connection", "close"};
  if (version_ < 11 && keep_) own[owned++] = {"Connection", "keep-alive"};
  pending_.emplace(serialize_head(head, std::span<const ExtraField>(own.data(), owned)));
}

asio::awaitable<bool> Exchange::send_body(std::string_view data, bool last, Trailers trailers) {
  // Unless send_body_now() began this piece, it begins here.
  if (!piece_) {
    if (const auto sent = send_body_now(data, last, trailers)) co_return *sent;
  }
  const bool sent = co_await write_rest(*piece_->rest);
  co_return piece_sent(sent);
}

std::optional<bool> Exchange::send_body_now(std::string_view data, bool last, Trailers trailers) {
  if (broken_) return false;
  if (answered_) return true;  // a bodiless answer: nothing more goes out
  auto& piece = piece_.emplace(chunked_out_);
  piece.last = last;
  if (pending_) piece.frames.add_bytes(*pending_);
  piece.frames.add_piece(data);
  if (last && chunked_out_) {
    if (trailers_out_ && !trailers.empty()) {
      auto& last_chunk = piece.last_chunk.emplace(conn_.fields_allocator());
      last_chunk += "0\r\n";
      for (const auto& t : trailers) append_field(last_chunk, t.name, t.value);
      last_chunk += "\r\n";
      piece.frames.add_end(last_chunk);
    } else {
      piece.frames.add_end();
    }
  }
  if (piece.frames.empty()) return piece_sent(true);
  const auto sent = write_now(piece.rest.emplace(piece.frames.buffers()));
  if (!sent) return std::nullopt;  // send_body() writes the rest
  return piece_sent(*sent);
}

bool Exchange::piece_sent(bool sent) {
  if (sent && piece_->last) answered_ = true;
  piece_.reset();
  pending_.reset();
  return sent;
}

std::optional<bool> Exchange::start_prepared(const PreparedAnswer& answer,
                                             std::span<const ExtraField> extra) {
  const bool chunk_trailers = !answer.trailers.empty() && accepts_trailers_;
  std::string_view prepared;  // this codec's form, laid out at the answer's first replay
  if (answer.codec_form != nullptr && version_ >= 11 && !head_request_ && !chunk_trailers) {
    prepared = answer.codec_form->get([&] {
      return prepared_head(answer.status, answer.fields, answer.body.size(),
                           !answer.trailers.empty());
    });
  }
  auto& p = prepared_.emplace();
  if (prepared.empty()) {  // laid out per request, by finish_prepared()
    p.answer = answer;
    p.extra.assign(extra.begin(), extra.end());
    return std::nullopt;
  }
  // The head laid out at caching time, the per-exchange lines after it, and the body
  // when the whole answer fits an arena block, copied into one piece: a send of many
  // small pieces cost the kernel more than the copy (an iovec array to allocate past
  // eight, and each piece copied on its own: 5 % of a replay's CPU against nginx's
  // two, docs/PERFORMANCE.md).
  static constexpr std::string_view kCrlf = "\r\n";
  static constexpr std::string_view kClose = "Connection: close\r\n";
  keep_ = keep_ && client_keep_alive_ && body_done() && !service_.draining();
  std::size_t size = prepared.size() + (keep_ ? 0 : kClose.size()) + kCrlf.size();
  for (const auto& f : extra) size += f.name.size() + f.value.size() + 4;
  const bool body_too = size + answer.body.size() < Arena::kLargest;  // and the terminator
  auto& bytes = p.gathered.emplace(conn_.fields_allocator());
  bytes.reserve(size + (body_too ? answer.body.size() : 0));
  bytes += prepared;
  if (!keep_) bytes += kClose;
  for (const auto& f : extra) append_field(bytes, f.name, f.value);
  bytes += kCrlf;
  if (body_too) bytes += answer.body;
  p.buffers = {asio::const_buffer(bytes.data(), bytes.size()),
               body_too ? asio::const_buffer() : asio::buffer(answer.body)};
  auto& rest = p.rest.emplace(std::span<const asio::const_buffer>(p.buffers));
  const auto sent = write_now(rest);  // most often whole, with no frame for write()
  if (sent) {
    answered_ = *sent;
    prepared_.reset();
  }
  return sent;
}

asio::awaitable<bool> Exchange::finish_prepared() {
  auto& p = *prepared_;
  bool sent = false;
  if (p.rest) {
    sent = co_await write_rest(*p.rest);
    answered_ = sent;
  } else {
    ResponseHeader head(conn_.fields_allocator());
    head.result(p.answer.status);
    for (const auto& f : p.answer.fields) head.insert(f.name, f.value);
    for (const auto& f : p.extra) head.insert(f.name, f.value);
    sent = co_await send(head, p.answer.body, p.answer.trailers);
  }
  prepared_.reset();
  co_return sent;
}

void Exchange::reset() {
  broken_ = true;
  beast::error_code ec;
  conn_.stream.socket().close(ec);
}

}  // namespace idemproxy::codec::http1
