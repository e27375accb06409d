// An HTTP/2 upstream stream's answer: its final head past interim ones, its body as
// its client takes it (the stream's window reopens only then), its trailers; and
// round_trip, the buffered exchange of the idempotent path, over one stream.
#include <charconv>

#include "upstream/h2_link.hpp"

namespace idemproxy::http {
namespace h2 {

asio::awaitable<beast::error_code> StreamCall::read_final_head(
    bool head_request, boost::optional<std::uint64_t> body_limit, const InterimSink& sink,
    FieldsAllocator fields, Duration timeout) {
  (void)head_request;  // nghttp2 knows a HEAD request's answer has no body
  if (body_limit) body_limit_ = *body_limit;
  const auto by = until(timeout);
  for (int interim = 0;;) {
    Taken got = co_await take(by, false);
    if (got.timed_out) {
      release();
      co_return beast::error::timeout;
    }
    for (auto& [status, block] : got.interim) {
      // RFC 9110 15.2: 100 answers an expectation the proxy met itself; 101 never
      // comes over HTTP/2 (RFC 9113 §8.6); a flood of interim answers is an attack.
      if (++interim > 16) {
        release();
        co_return bhttp::error::bad_status;
      }
      if (status == 100 || sink.client == nullptr) continue;
      ResponseHeader head(fields);
      head.result(status);
      for (const auto& [name, value] : block) head.insert(name, value);
      strip_hop_by_hop(head);
      co_await sink.client->send_interim(head);
    }
    if (got.head) {
      head_.emplace(fields);
      head_->version(11);
      head_->result(got.head->first);
      for (const auto& [name, value] : got.head->second) head_->insert(name, value);
      const auto length = (*head_)[bhttp::field::content_length];
      std::uint64_t declared = 0;
      if (!length.empty() &&
          std::from_chars(length.data(), length.data() + length.size(), declared).ec ==
              std::errc{} &&
          declared > body_limit_) {
        release();
        co_return bhttp::error::body_limit;
      }
      co_return beast::error_code{};
    }
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

asio::awaitable<Taken> StreamCall::take_body(std::chrono::steady_clock::time_point until) {
  Taken got = co_await take(until, true);
  body_seen_ += got.data.size();
  if (got.end) {
    trailers_ = std::move(got.trailers);
    got.trailers.clear();
    ended_ = true;
    release();  // the stream is done: its room goes to the next caller now
  }
  co_return got;
}

std::vector<store::Header> StreamCall::trailers() const {
  std::vector<store::Header> out;
  out.reserve(trailers_.size());
  for (const auto& [name, value] : trailers_) out.push_back({name, value});
  return out;
}

asio::awaitable<RelayError> StreamCall::relay_answer(std::string_view prefix, bool head_request,
                                                     bool grpc, Exchange& to, Duration timeout,
                                                     beast::error_code& read_error) {
  ResponseHeader& head = *head_;
  const unsigned status = head.result_int();
  if (head_request || status == 204 || status == 304) {
    release();
    const Framing none = Framing::none();
    const bool sent = co_await to.send_head(head, none);
    co_return sent ? RelayError::none : RelayError::write;
  }
  // An HTTP/2 answer may end in trailers whatever its length (RFC 9113 §8.1); an
  // HTTP/1.1 client takes them only chunked, so a gRPC answer, or one that announces
  // them (Trailer, RFC 9110 6.6.2), goes chunked to a client that accepts them.
  const bool with_trailers =
      to.accepts_trailers() && (grpc || head.find(bhttp::field::trailer) != head.end());
  const auto length = head[bhttp::field::content_length];
  std::uint64_t declared = 0;
  const bool has_length =
      !length.empty() &&
      std::from_chars(length.data(), length.data() + length.size(), declared).ec == std::errc{};
  const Framing framing =
      has_length ? Framing::of(declared, with_trailers) : Framing::unknown(with_trailers);
  if (!co_await to.send_head(head, framing)) {
    release();
    co_return RelayError::write;
  }
  // Body bytes round_trip read before it found the answer too large to store.
  if (!prefix.empty() || ended_) {
    const std::vector<store::Header> kept = ended_ ? trailers() : std::vector<store::Header>{};
    const Trailers after = kept;
    if (!co_await to.send_body(prefix, ended_, after)) {
      release();
      co_return RelayError::write;
    }
    if (ended_) co_return RelayError::none;
  }
  for (;;) {
    Taken got = co_await take_body(until(timeout));
    if (got.timed_out) {
      read_error = beast::error::timeout;
      release();
      co_return RelayError::read;
    }
    if (body_seen_ > body_limit_) {
      read_error = bhttp::error::body_limit;
      release();
      co_return RelayError::read;
    }
    if (!got.end && got.closed && got.data.empty()) {
      // Reset, or the connection failed, before the answer was whole: it is never
      // passed off as a whole one.
      spdlog::info("upstream HTTP/2 stream ended before its answer: {}",
                   nghttp2_http2_strerror(got.close_code));
      read_error = bhttp::error::partial_message;
      release();
      co_return RelayError::read;
    }
    if (got.data.empty() && !got.end) continue;
    const std::vector<store::Header> kept = got.end ? trailers() : std::vector<store::Header>{};
    const Trailers after = kept;
    if (!co_await to.send_body(got.data, got.end, after)) {
      release();
      co_return RelayError::write;
    }
    if (got.end) co_return RelayError::none;
  }
}

}  // namespace h2

asio::awaitable<UpstreamAnswer> H2Upstream::round_trip(StringRequest& request,
                                                       const InterimSink& interim, Duration timeout,
                                                       std::unique_ptr<Stream> established) {
  UpstreamAnswer out;
  std::unique_ptr<h2::StreamCall, DestroyCall> call(new h2::StreamCall(registry_));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  call->deadline(deadline);
  if (auto ec = co_await call->open(std::move(established))) {
    out.error =
        ProxyError{ProblemKind::upstream_unreachable,
                   "cannot connect to the upstream: " + ec.message(), std::nullopt, std::nullopt};
    co_return out;
  }
  const std::string_view body = request.body();
  if (auto ec = co_await call->send_whole(request.base(), body)) {
    out.error = ProxyError{ProblemKind::upstream_unreachable,
                           "cannot start a stream to the upstream: " + ec.message(), std::nullopt,
                           std::nullopt};
    co_return out;
  }
  out.sent = true;
  const bool head_request = request.method() == bhttp::verb::head;
  const FieldsAllocator heap;
  auto rec = co_await call->read_final_head(head_request, boost::none, interim, heap, timeout);
  std::string answer;
  const auto limit = registry_->config.max_response_size;
  if (!rec) {
    const auto length = call->head()[bhttp::field::content_length];
    std::uint64_t declared = 0;
    const bool too_long =
        !length.empty() &&
        std::from_chars(length.data(), length.data() + length.size(), declared).ec == std::errc{} &&
        declared > limit;
    for (bool end = head_request || too_long; !end;) {
      h2::Taken got = co_await call->take_body(deadline);
      answer.append(got.data);
      if (got.timed_out) {
        rec = beast::error::timeout;
        break;
      }
      end = got.end;
      if (!end && got.closed && got.data.empty()) {
        rec = bhttp::error::partial_message;
        break;
      }
      if (!end && answer.size() > limit) break;
    }
    if (!rec && (too_long || answer.size() > limit)) {
      // Streamed on, never truncated (flow.cpp).
      out.oversized = UpstreamAnswer::Oversized{UpstreamCallPtr(call.release()), std::move(answer)};
      co_return out;
    }
  }
  if (rec == beast::error::timeout) {
    out.error = ProxyError{ProblemKind::upstream_timeout, "the upstream did not answer in time",
                           std::nullopt, std::nullopt};
  } else if (rec) {
    out.sent = call->maybe_processed();
    out.error = ProxyError{
        out.sent ? ProblemKind::upstream_failed : ProblemKind::upstream_unreachable,
        out.sent ? "the upstream stream failed after the request was sent: " + rec.message()
                 : "the upstream refused the stream unprocessed",
        std::nullopt, std::nullopt};
  }
  if (out.error) co_return out;
  out.trailers = call->trailers();
  out.response = StringResponse(std::move(call->head()), std::move(answer));
  co_return out;
}

}  // namespace idemproxy::http
