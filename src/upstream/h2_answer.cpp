// An HTTP/2 upstream stream's answer as the proxy pulls it: its heads, interim ones
// then the final one; its body as the proxy takes it (the stream's window reopens
// only then); its trailers.
#include "http/fields.hpp"
#include "upstream/h2_link.hpp"

namespace idemproxy::upstream {
namespace h2 {
namespace {

std::optional<std::uint64_t> parse_length(std::string_view length) {
  std::uint64_t declared = 0;
  if (!http::parse_decimal(length, declared)) return std::nullopt;
  return declared;
}

}  // namespace

asio::awaitable<beast::error_code> StreamCall::read_head(bool head_request,
                                                         std::optional<std::uint64_t> body_limit,
                                                         FieldsAllocator fields, TimePoint until) {
  head_request_ = head_request;  // nghttp2 knows a HEAD request's answer has no body
  if (body_limit) body_limit_ = *body_limit;
  // The head's fields go into Beast's; the two framing() reads are noted on the way
  // (a lookup in Beast's set by name compares without case, field by field).
  const auto make_head = [&](const FieldBlock& block) {
    head_.emplace(fields);
    head_->version(11);
    head_->result(block.status());
    declared_.reset();
    announces_trailers_ = false;
    bool length_seen = false;
    for (std::size_t i = 0; i < block.size(); ++i) {
      const std::string_view name = block.name(i), value = block.value(i);
      if (!length_seen && name == "content-length") {
        length_seen = true;  // the first, as Beast's lookup would find
        declared_ = parse_length(value);
      } else if (name == "trailer") {
        announces_trailers_ = true;
      }
      head_->insert(name, value);
    }
  };
  for (;;) {
    while (!interims_.empty()) {
      FieldBlock block = std::move(interims_.front());
      interims_.erase(interims_.begin());
      const unsigned status = block.status();
      // RFC 9110 15.2: 100 answers an expectation the proxy met itself; 101 never
      // comes over HTTP/2 (RFC 9113 §8.6); a flood of interim answers is an attack.
      if (++interim_count_ > 16) {
        release();
        co_return bhttp::error::bad_status;
      }
      if (status == 100) continue;
      make_head(block);
      co_return beast::error_code{};
    }
    if (final_) {
      make_head(*final_);
      final_.reset();
      if (declared_ && *declared_ > body_limit_) {
        release();
        co_return bhttp::error::body_limit;
      }
      co_return beast::error_code{};
    }
    Taken got = co_await take(until, false);
    if (got.timed_out) {
      release();
      co_return beast::error::timeout;
    }
    for (auto& interim : got.interim) interims_.push_back(std::move(interim));
    if (got.head) final_ = std::move(got.head);
    if (!interims_.empty() || final_) continue;
    if (got.closed) {
      // RFC 9113 §8.7: a stream refused (REFUSED_STREAM, or above a GOAWAY's last
      // stream id, which nghttp2 closes with that code) was never processed, and may
      // go again; anything else may have been.
      if (got.close_code == NGHTTP2_REFUSED_STREAM) {
        refused_ = true;
        if (co_await resend()) {
          refused_ = false;
          continue;
        }
        release();
        co_return beast::error_code(asio::error::connection_refused);
      }
      spdlog::info("upstream HTTP/2 stream ended before its answer: {}",
                   nghttp2_http2_strerror(got.close_code));
      release();
      co_return beast::error_code(asio::error::connection_reset);
    }
  }
}

Framing StreamCall::framing() const {
  const ResponseHeader& head = *head_;
  const unsigned status = head.result_int();
  if (head_request_ || status == 204 || status == 304) return Framing::none();
  // An HTTP/2 answer may end in trailers whatever its length (RFC 9113 §8.1); one
  // that announces them (Trailer, RFC 9110 6.6.2) says so.
  return declared_ ? Framing::of(*declared_, announces_trailers_)
                   : Framing::unknown(announces_trailers_);
}

asio::awaitable<Taken> StreamCall::take_body(std::chrono::steady_clock::time_point until) {
  Taken got = co_await take(until, true);
  body_seen_ += got.data.size();
  if (got.end) {
    trailers_.clear();
    trailers_.reserve(got.trailers.size());
    for (std::size_t i = 0; i < got.trailers.size(); ++i) {
      trailers_.push_back({std::string(got.trailers.name(i)), std::string(got.trailers.value(i))});
    }
    ended_ = true;
    release();  // the stream is done: its room goes to the next caller now
  }
  co_return got;
}

asio::awaitable<AnswerPiece> StreamCall::read_body(TimePoint until) {
  AnswerPiece out;
  if (!ended_ && framing().kind == Framing::Kind::none) {
    ended_ = true;
    release();
  }
  while (!ended_) {
    Taken got = co_await take_body(until);
    if (got.timed_out) {
      out.error = beast::error::timeout;
      release();
      co_return out;
    }
    if (body_seen_ > body_limit_) {
      out.error = bhttp::error::body_limit;
      release();
      co_return out;
    }
    if (!got.end && got.closed && got.data.empty()) {
      // Reset, or the connection failed, before the answer was whole: it is never
      // passed off as a whole one.
      spdlog::info("upstream HTTP/2 stream ended before its answer: {}",
                   nghttp2_http2_strerror(got.close_code));
      out.error = bhttp::error::partial_message;
      release();
      co_return out;
    }
    if (got.data.empty() && !got.end) continue;
    piece_ = std::move(got.data);
    out.data = piece_;
    break;
  }
  out.end = ended_;
  if (out.end) out.trailers = trailers_;
  co_return out;
}

}  // namespace h2
}  // namespace idemproxy::upstream
