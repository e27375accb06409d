// A stream's answer side: its head, interim answers, body and trailers, sent through
// a deferred data source without a copy (the connection's write loop takes them).

#include "codec/http2/connection.hpp"
#include "codec/http2/stream.hpp"
#include "http/fields.hpp"

namespace idemproxy::codec::http2 {
namespace {

using Clock = std::chrono::steady_clock;
// The largest last piece of an answer copied rather than awaited (send_last_now).
constexpr std::size_t kCopyLast = std::size_t{16} * 1024;

ssize_t data_source(nghttp2_session*, std::int32_t, std::uint8_t*, std::size_t room,
                    std::uint32_t* flags, nghttp2_data_source* source, void*) {
  return static_cast<Stream*>(source->ptr)->next_data(room, flags);
}

}  // namespace

void Stream::head_fields(unsigned status, const Fields* fields, std::span<const Header> stored,
                         std::span<const ExtraField> extra, Framing framing) {
  nv_.clear();
  digits_[0] = static_cast<char>('0' + status / 100 % 10);  // a status has three digits
  digits_[1] = static_cast<char>('0' + status / 10 % 10);
  digits_[2] = static_cast<char>('0' + status % 10);
  nv_.add(":status", std::string_view(digits_.data(), 3));
  // RFC 9110 8.6: a 1xx or a 204 has no content-length, whatever came with it (nghttp2
  // resets a 204 whose content-length is not 0, and a 1xx with one).
  const bool unframed = status / 100 == 1 || status == 204;
  const bool keep_length = framing.kind == Framing::Kind::none && !unframed;
  bool length_kept = false;  // once, as one number (nghttp2 refuses `5, 5`, or two)
  const auto keep = [&](std::string_view name, std::string_view connection) {
    if (beast::iequals(name, "content-length"))
      return keep_length && !std::exchange(length_kept, true);
    return !connection_specific(name, connection) && !beast::iequals(name, "te");
  };
  if (fields != nullptr) {
    const auto connection = (*fields)[bhttp::field::connection];
    for (const auto& f : *fields) {
      if (!keep(f.name_string(), connection)) continue;
      const bool length = f.name() == bhttp::field::content_length;
      const std::string_view value = f.value();
      nv_.add(f.name_string(), length ? http::single_length(value) : value);
    }
  }
  // A cached answer's fields outlive the head's submission (the replay holds its entry).
  for (const auto& h : stored) {
    if (keep(h.name, {})) nv_.add_lasting(h.name, h.value);
  }
  for (const auto& e : extra) nv_.add(e.name, e.value);
  if (framing.kind == Framing::Kind::length && !unframed) {
    nv_.add("content-length", Decimal(framing.length).view());  // the list copies it
  }
}

bool Stream::submit_head(bool with_body) {
  head_pending_ = false;
  submitted_ = true;
  if (closed_) return false;
  nghttp2_data_provider provider{};
  provider.source.ptr = this;
  provider.read_callback = data_source;
  const int rv = nghttp2_submit_response(conn_.session(), id_, nv_.data(), nv_.size(),
                                         with_body ? &provider : nullptr);
  conn_.wake_writer();
  if (!with_body && rv == 0) answered_ = true;
  if (answered_ && !end_stream_) answered_early_at_ = Clock::now();
  return rv == 0;
}

asio::awaitable<bool> Stream::send_interim(ResponseHeader& head) {
  if (closed_ || submitted_) co_return !closed_;
  head_fields(head.result_int(), &head, {}, {}, Framing::none());
  nghttp2_submit_headers(conn_.session(), NGHTTP2_FLAG_NONE, id_, nullptr, nv_.data(), nv_.size(),
                         nullptr);
  conn_.wake_writer();
  co_return true;
}

asio::awaitable<bool> Stream::send_head(ResponseHeader& head, Framing framing) {
  const unsigned status = head.result_int();
  const bool bodiless =
      head_request_ || status == 204 || status == 304 || framing.kind == Framing::Kind::none;
  // A HEAD answer keeps the length the body would have had (RFC 9110 9.3.2).
  head_fields(status, &head, {}, {},
              bodiless && !(head_request_ && framing.kind == Framing::Kind::length)
                  ? Framing::none()
                  : framing);
  if (bodiless) co_return submit_head(false);
  head_pending_ = true;
  co_return !closed_;
}

asio::awaitable<bool> Stream::send_body(std::string_view data, bool last, Trailers trailers) {
  if (closed_) co_return false;
  if (answered_ || (submitted_ && out_last_)) co_return true;
  if (head_pending_) {
    if (last && data.empty() && trailers.empty()) co_return submit_head(false);
    if (last && data.empty()) {
      // Head and trailers, no DATA frame between them.
      head_pending_ = false;
      submitted_ = true;
      nghttp2_submit_headers(conn_.session(), NGHTTP2_FLAG_NONE, id_, nullptr, nv_.data(),
                             nv_.size(), nullptr);
      nv_.clear();
      for (const auto& t : trailers) {
        if (allowed_in_trailers(t.name)) nv_.add(t.name, t.value);
      }
      nghttp2_submit_trailer(conn_.session(), id_, nv_.data(), nv_.size());
      conn_.wake_writer();
      mark_answered(Clock::now());
      co_return true;
    }
  }
  if (last) {
    if (const auto handed = send_last_now(data, trailers)) co_return *handed;
  }
  if (head_pending_ && !submit_head(true)) co_return false;
  hand_to_session(data, last, trailers);
  const bool written = co_await wait_written();
  out_ = {};
  if (written && last) mark_answered(Clock::now());
  co_return written;
}

void Stream::hand_to_session(std::string_view data, bool last, Trailers trailers) {
  out_ = data;
  out_at_ = 0;
  out_last_ = last;
  out_trailers_ = !trailers.empty();
  trailers_nv_.clear();
  for (const auto& t : trailers) {
    if (allowed_in_trailers(t.name)) trailers_nv_.add(t.name, t.value);
  }
  if (deferred_) {
    deferred_ = false;
    nghttp2_session_resume_data(conn_.session(), id_);
  }
  conn_.wake_writer();
}

void Stream::mark_answered(TimePoint now) {
  answered_ = true;
  if (!end_stream_) answered_early_at_ = now;
}

std::optional<bool> Stream::send_last_now(std::string_view data, Trailers trailers) {
  // Copying a small body (and its trailers) costs less than waiting for its write; a
  // larger one, or one the client's windows do not take now, is sent from its own
  // memory and awaited.
  if (data.size() > kCopyLast || closed_) return std::nullopt;
  if (head_pending_ && data.empty()) {
    // A head with nothing after it ends the stream itself (gRPC's trailers-only
    // answer); a head and trailers go as send_body() sends them.
    if (trailers.empty()) return submit_head(false);
    return std::nullopt;
  }
  const auto size = static_cast<std::int32_t>(data.size());
  if (nghttp2_session_get_stream_remote_window_size(conn_.session(), id_) < size ||
      nghttp2_session_get_remote_window_size(conn_.session()) < size) {
    return std::nullopt;
  }
  if (head_pending_ && !submit_head(true)) return false;
  out_copy_.assign(data);
  hand_to_session(out_copy_, true, trailers);
  handed_at_ = Clock::now();
  mark_answered(handed_at_);
  return true;
}

asio::awaitable<bool> Stream::wait_written() {
  const auto send_timeout = facts_.settings->config.server.read_timeout;
  auto moved = Clock::now();
  std::size_t at = out_at_;
  for (;;) {
    const bool taken = out_at_ == out_.size() && (!out_last_ || eof_taken_);
    if (taken && in_flight_ == 0) co_return true;
    if (closed_ && in_flight_ == 0) co_return false;
    if (out_at_ != at) {
      at = out_at_;
      moved = Clock::now();
    }
    // A client that opens no window for an answer (a zero window held forever) gets
    // the stream reset after server.read_timeout without progress, as an HTTP/1.1
    // client that stops reading gets its connection closed.
    const auto until = moved + send_timeout;
    if (!co_await progress_.wait_until(until) && out_at_ == at && !closed_) {
      stalled_since_ = moved;
      nghttp2_submit_rst_stream(conn_.session(), NGHTTP2_FLAG_NONE, id_, NGHTTP2_CANCEL);
      conn_.wake_writer();
    }
  }
}

ssize_t Stream::next_data(std::size_t room, std::uint32_t* flags) {
  const std::size_t ready = out_.size() - out_at_;
  if (ready == 0 && !out_last_) {
    deferred_ = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  const std::size_t n = std::min(room, ready);
  if (n > 0) *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
  if (n == ready && out_last_) {
    eof_taken_ = true;
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (out_trailers_) {
      // RFC 9113 §8.1: trailers are a HEADERS frame that ends the stream after the DATA.
      *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      nghttp2_submit_trailer(conn_.session(), id_, trailers_nv_.data(), trailers_nv_.size());
    }
    // A last piece with bytes goes out through take_data, and its flushed() wakes
    // wait_written once they are written; woken here too, it would only wait again
    // (a frame and a timer wait more per answer). An empty one has no flushed().
    if (n == 0) progress_.notify();
  }
  return static_cast<ssize_t>(n);
}

void Stream::take_data(const std::uint8_t* frame_head, std::size_t size) {
  conn_.queue_data(*this, frame_head, out_.data() + out_at_, size);
  out_at_ += size;
  in_flight_ += size;
}

void Stream::flushed(std::size_t size) {
  in_flight_ -= std::min(in_flight_, size);
  progress_.notify();
}

void Stream::abandon() {
  in_flight_ = 0;
  on_close(NGHTTP2_CANCEL);
}

void Stream::served() {
  serving_ = false;
  discarding_ = true;
  // Whatever the client still sends, and what it sent that was not read, is dropped
  // and its window given back.
  release_view();
  give_back(in_[fill_].size());
  in_[fill_].clear();
  if (closed_) return;
  // An exchange the proxy left without a whole answer is reset: the client must not
  // wait for one, nor take part of one for all of it. A malformed request that is
  // still open is a stream error (RFC 9113 §8.1.1), after its answer.
  if (!answered_) {
    nghttp2_submit_rst_stream(conn_.session(), NGHTTP2_FLAG_NONE, id_, NGHTTP2_INTERNAL_ERROR);
  } else if (facts_.head_error && !end_stream_) {
    nghttp2_submit_rst_stream(conn_.session(), NGHTTP2_FLAG_NONE, id_, NGHTTP2_PROTOCOL_ERROR);
  }
  conn_.wake_writer();
}

void Stream::reset() {
  if (closed_) return;
  nghttp2_submit_rst_stream(conn_.session(), NGHTTP2_FLAG_NONE, id_, NGHTTP2_INTERNAL_ERROR);
  conn_.wake_writer();
}

std::optional<bool> Stream::start_prepared(const PreparedAnswer& answer,
                                           std::span<const ExtraField> extra) {
  const bool bodiless = head_request_ || answer.status == 204 || answer.status == 304;
  head_fields(answer.status, nullptr, answer.fields, extra,
              Framing::of(answer.body.size(), !answer.trailers.empty()));
  head_pending_ = true;
  if (bodiless) return submit_head(false);
  if (const auto handed = send_last_now(answer.body, answer.trailers)) return handed;
  // The body goes with the head, through the session's writer: awaited.
  prepared_body_ = answer.body;
  prepared_trailers_ = answer.trailers;
  return std::nullopt;
}

asio::awaitable<bool> Stream::finish_prepared() {
  co_return co_await send_body(std::exchange(prepared_body_, {}), true,
                               std::exchange(prepared_trailers_, {}));
}

}  // namespace idemproxy::codec::http2
