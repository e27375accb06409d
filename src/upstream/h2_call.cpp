// Each exchange with an HTTP/2 upstream as one stream: the request's head and body
// go out through the link's session, and the answer's head, body and trailers come
// back to the phases through UpstreamCall. Nothing is translated to HTTP/1.1 text
// and parsed again on the way.
#include <boost/asio/co_spawn.hpp>
#include <charconv>

#include "http/chunk.hpp"
#include "upstream/h2_link.hpp"

namespace idemproxy::http {
namespace h2 {
namespace {

// nghttp2 asks for a request's next body bytes (the data provider start() sets).
ssize_t body_source_cb(nghttp2_session*, std::int32_t id, std::uint8_t* buf, std::size_t size,
                       std::uint32_t* flags, nghttp2_data_source*, void* user) {
  return static_cast<UpstreamLink*>(user)->read_body(id, buf, size, flags);
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

nghttp2_nv nv(const std::string& name, const std::string& value) {
  return {reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), name.size(),
          value.size(), NGHTTP2_NV_FLAG_NONE};
}

// RFC 9113 §8.3.1: the request line and Host become pseudo-header fields; §8.2.2:
// connection-specific fields are not sent, and te only as "trailers" (which the
// proxy forwards only when the client sent it, proxy/forward.cpp).
Fields request_fields(const RequestHeader& req, bool tls) {
  Fields out;
  out.reserve(16);
  out.emplace_back(":method", std::string(req.method_string()));
  out.emplace_back(":scheme", tls ? "https" : "http");
  out.emplace_back(":authority", std::string(req[bhttp::field::host]));
  out.emplace_back(":path", std::string(req.target()));
  const auto connection = req[bhttp::field::connection];
  std::string name;
  for (const auto& f : req) {
    const auto field_name = f.name_string();
    if (connection_specific(field_name, connection) || beast::iequals(field_name, "host")) continue;
    if (beast::iequals(field_name, "te") && !beast::iequals(trim_ows(f.value()), "trailers"))
      continue;
    lower_case(field_name, name);
    out.emplace_back(name, std::string(f.value()));
  }
  return out;
}

}  // namespace

// --- the link's side: everything here runs on its executor ---

std::shared_ptr<Call> UpstreamLink::start(const Outgoing& request) {
  if (state_ != State::ready || closed_to_new_) return nullptr;
  std::vector<nghttp2_nv> nva;
  nva.reserve(request.fields.size());
  for (const auto& [name, value] : request.fields) nva.push_back(nv(name, value));
  auto call = std::make_shared<Call>(ex_);
  nghttp2_data_provider body{};
  body.read_callback = body_source_cb;
  call->out_end = !request.has_body;
  call->id = nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(),
                                    request.has_body ? &body : nullptr, nullptr);
  if (call->id < 0) {
    spdlog::info("upstream HTTP/2: cannot start a stream: {}", nghttp2_strerror(call->id));
    return nullptr;
  }
  calls_[call->id] = call;
  wake_writer();
  return call;
}

void UpstreamLink::push(Call& call, std::string_view data, bool end) {
  if (call.closed) return;
  call.out.append(data);
  if (end) call.out_end = true;
  if (call.out_deferred) {
    call.out_deferred = false;
    nghttp2_session_resume_data(session_, call.id);
  }
  wake_writer();
}

void UpstreamLink::consume(Call& call, std::size_t n) {
  if (n == 0 || call.closed || state_ != State::ready) return;
  nghttp2_session_consume_stream(session_, call.id, n);
  wake_writer();
}

void UpstreamLink::release(Call& call) {
  if (!call.closed && state_ == State::ready) {
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, call.id, NGHTTP2_CANCEL);
    calls_.erase(call.id);
    call.closed = true;
    wake_writer();
  }
}

// --- the call's side: runs on the client's executor, and hops onto the link's ---

StreamCall::~StreamCall() { release(); }

void StreamCall::release() {
  if (!link_) return;
  auto link = std::move(link_);
  auto call = std::move(call_);
  // Counted out at once, so the next pick sees the room; the stream itself is let
  // go on the link's executor.
  link->last_release = now_ns();
  --link->streams;
  if (!call) return;
  if (!link->own_executor()) {
    link->release(*call);
    return;
  }
  try {
    asio::post(link->executor(), [link, call] { link->release(*call); });
  } catch (const std::exception& e) {  // the executor is gone: so is the session
    spdlog::debug("upstream HTTP/2: a stream was not released: {}", e.what());
  }
}

std::chrono::steady_clock::time_point StreamCall::until(Duration timeout) const {
  const auto at = std::chrono::steady_clock::now() + timeout;
  return deadline_ ? std::min(at, *deadline_) : at;
}

asio::awaitable<beast::error_code> StreamCall::open(std::unique_ptr<http::Stream> established) {
  link_ = registry_->pick(established.get());
  beast::error_code ec;
  for (int attempt = 0;; ++attempt) {
    auto& link = *link_;
    auto step = [&link, &established]() -> asio::awaitable<beast::error_code> {
      co_return co_await link.ready(std::move(established));
    };
    ec = co_await on_link(link, step);
    // A burst picked a new link before its SETTINGS said how many streams it takes:
    // those beyond go to another connection, once (nghttp2 queues any still beyond).
    if (ec || attempt > 0 || link.streams.load() <= registry_->room(link)) break;
    const UpstreamLink* full = link_.get();
    release();
    link_ = registry_->pick(nullptr, full);
  }
  if (ec) release();
  co_return ec;
}

// Submits request_ on link_; when that link takes no new stream (GOAWAY, or it
// failed, since it was picked), on another, once.
asio::awaitable<beast::error_code> StreamCall::start() {
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto& link = *link_;
    std::shared_ptr<Call> started;
    auto step = [&]() -> asio::awaitable<void> {
      started = link.start(request_);
      co_return;
    };
    co_await on_link(link, step);
    if (started) {
      call_ = std::move(started);
      co_return beast::error_code{};
    }
    const UpstreamLink* refused = link_.get();
    release();
    link_ = registry_->pick(nullptr, refused);
    auto& next = *link_;
    auto ready = [&next]() -> asio::awaitable<beast::error_code> {
      co_return co_await next.ready(nullptr);
    };
    if (auto ec = co_await on_link(next, ready)) {
      release();
      co_return ec;
    }
  }
  release();
  co_return beast::error_code(asio::error::connection_aborted);
}

asio::awaitable<Taken> StreamCall::take(std::chrono::steady_clock::time_point until, bool body) {
  Taken got;
  if (!link_ || !call_) {
    got.closed = true;
    got.close_code = NGHTTP2_CANCEL;
    co_return got;
  }
  auto& link = *link_;
  Call& call = *call_;
  const std::size_t consumed = std::exchange(unconsumed_, 0);
  auto step = [&]() -> asio::awaitable<void> {
    link.consume(call, consumed);
    const auto has_news = [&] {
      return call.closed || !call.interim.empty() || (call.head && !call.head_taken) ||
             (body && call.head_taken && (!call.in.empty() || call.in_end));
    };
    while (!has_news()) {
      if (!co_await call.news.wait_until(until) && !has_news()) {
        got.timed_out = true;
        co_return;
      }
    }
    got.interim = std::move(call.interim);
    call.interim.clear();
    if (call.head && !call.head_taken) {
      call.head_taken = true;
      got.head = std::move(call.head);
    }
    if (body && call.head_taken) {
      got.data = std::move(call.in);
      call.in.clear();
      got.end = call.in_end;
      if (got.end) got.trailers = std::move(call.trailers);
    }
    got.closed = call.closed;
    got.close_code = call.close_code;
  };
  co_await on_link(link, step);
  unconsumed_ = got.data.size();
  co_return got;
}

asio::awaitable<RelayError> StreamCall::send_request(RequestHeader& head, Exchange& from,
                                                     Duration timeout,
                                                     std::optional<Exchange::TimePoint> deadline,
                                                     BodyPiece::Error& read_error,
                                                     beast::error_code& write_error) {
  request_.fields = request_fields(head, registry_->tls != nullptr);
  request_.has_body = from.has_body() && !(from.body_done() && from.content_length() == 0);
  if (auto ec = co_await start()) {
    write_error = ec;
    co_return RelayError::write;
  }
  if (!request_.has_body) co_return RelayError::none;
  auto& link = *link_;
  Call& call = *call_;
  for (bool end = false; !end;) {
    const BodyPiece piece = co_await from.read_body(Chunk::kSize, deadline);
    if (piece.error != BodyPiece::Error::none) {
      read_error = piece.error;
      release();
      co_return RelayError::read;
    }
    end = piece.end;
    if (request_.resendable && request_.body.size() + piece.data.size() <= kResendBody) {
      request_.body.append(piece.data);
    } else {
      request_.resendable = false;
      request_.body.clear();
    }
    const auto by = until(timeout);
    bool stalled = false;
    bool answered = false;
    // The piece is copied on the link's executor while this coroutine waits.
    auto step = [&]() -> asio::awaitable<void> {
      link.push(call, piece.data, end);
      while (!call.closed && call.out.size() - call.out_at > kOutHighWater) {
        if (!co_await call.room.wait_until(by) && !call.closed &&
            call.out.size() - call.out_at > kOutHighWater) {
          stalled = true;  // the upstream's window stayed shut
          co_return;
        }
      }
      answered = call.closed || call.head.has_value();
    };
    co_await on_link(link, step);
    if (stalled) {
      write_error = beast::error::timeout;
      co_return RelayError::write;
    }
    // The upstream answered (or reset the stream) before taking the whole body: the
    // answer tells the rest (RFC 9113 §8.1).
    if (answered) break;
  }
  co_return RelayError::none;
}

asio::awaitable<beast::error_code> StreamCall::send_whole(const RequestHeader& head,
                                                          std::string_view body) {
  request_.fields = request_fields(head, registry_->tls != nullptr);
  request_.has_body = !body.empty();
  request_.body.assign(body);
  if (auto ec = co_await start()) co_return ec;
  if (body.empty()) co_return beast::error_code{};
  auto& link = *link_;
  Call& call = *call_;
  auto step = [&]() -> asio::awaitable<void> {
    link.push(call, body, true);
    co_return;
  };
  co_await on_link(link, step);
  co_return beast::error_code{};
}

asio::awaitable<bool> StreamCall::resend() {
  if (!request_.resendable) co_return false;
  spdlog::info("upstream HTTP/2 stream refused unprocessed: sent again");
  const UpstreamLink* refused = link_.get();
  release();
  request_.resendable = false;  // once
  link_ = registry_->pick(nullptr, refused);
  auto& link = *link_;
  auto ready = [&link]() -> asio::awaitable<beast::error_code> {
    co_return co_await link.ready(nullptr);
  };
  if (co_await on_link(link, ready)) {
    release();
    co_return false;
  }
  if (co_await start()) co_return false;
  if (request_.has_body) {
    Call& call = *call_;
    auto& on = *link_;
    auto step = [&]() -> asio::awaitable<void> {
      on.push(call, request_.body, true);
      co_return;
    };
    co_await on_link(on, step);
  }
  co_return true;
}

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
      if (!length.empty() && std::from_chars(length.data(), length.data() + length.size(),
                                             declared).ec == std::errc{} &&
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
                                                     Exchange& to, Duration timeout,
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
  const bool with_trailers = to.accepts_trailers() &&
                        (engine::is_grpc_content_type(head[bhttp::field::content_type]) ||
                         head.find(bhttp::field::trailer) != head.end());
  const auto length = head[bhttp::field::content_length];
  std::uint64_t declared = 0;
  const bool has_length =
      !length.empty() &&
      std::from_chars(length.data(), length.data() + length.size(), declared).ec == std::errc{};
  const Framing framing = has_length ? Framing::of(declared, with_trailers)
                                      : Framing::unknown(with_trailers);
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
                                                       const InterimSink& interim,
                                                       Duration timeout,
                                                       std::unique_ptr<Stream> established) {
  UpstreamAnswer out;
  std::unique_ptr<h2::StreamCall, DestroyCall> call(new h2::StreamCall(registry_));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  call->deadline(deadline);
  if (auto ec = co_await call->open(std::move(established))) {
    out.error = ProxyError{ProblemKind::upstream_unreachable,
                           "cannot connect to the upstream: " + ec.message(), std::nullopt,
                           std::nullopt};
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
        std::from_chars(length.data(), length.data() + length.size(), declared).ec ==
            std::errc{} &&
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
    out.error = ProxyError{out.sent ? ProblemKind::upstream_failed
                                    : ProblemKind::upstream_unreachable,
                           out.sent ? "the upstream stream failed after the request was sent: " +
                                          rec.message()
                                    : "the upstream refused the stream unprocessed",
                           std::nullopt, std::nullopt};
  }
  if (out.error) co_return out;
  out.trailers = call->trailers();
  out.response = StringResponse(std::move(call->head()), std::move(answer));
  co_return out;
}

}  // namespace idemproxy::http
