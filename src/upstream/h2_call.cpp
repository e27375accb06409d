// Each exchange with an HTTP/2 upstream as one stream: the request's head and body
// go out through the link's session, and the answer's head, body and trailers come
// back to the phases through UpstreamCall. Nothing is translated to HTTP/1.1 text
// and parsed again on the way.
#include <boost/asio/co_spawn.hpp>

#include "http/chunk.hpp"
#include "upstream/h2_link.hpp"

namespace idemproxy::upstream {
namespace h2 {
namespace {

// nghttp2 asks for a request's next body bytes (the data provider start() sets).
ssize_t body_source_cb(nghttp2_session*, std::int32_t id, std::uint8_t* buf, std::size_t size,
                       std::uint32_t* flags, nghttp2_data_source*, void* user) {
  return static_cast<UpstreamLink*>(user)->read_body(id, buf, size, flags);
}

// RFC 9113 §8.3.1: the request line and Host become pseudo-header fields; §8.2.2:
// connection-specific fields are not sent, and te only as "trailers", exactly when
// the client said it takes them (`te_trailers`, the proxy's reading of its request).
// The fields the proxy added (`extra`) follow the head's own, by the same rules.
// The list keeps its memory from one request on this call to the next.
void request_fields(const RequestHeader& req, const ExtraFields& extra, bool tls, bool te_trailers,
                    codec::http2::NvList& out) {
  out.clear();
  out.add(":method", req.method_string());
  out.add(":scheme", tls ? "https" : "http");
  const std::string_view* added_host = extra.find("Host");
  out.add(":authority",
          added_host != nullptr ? *added_host : std::string_view(req[bhttp::field::host]));
  out.add(":path", req.target());
  const auto connection = req[bhttp::field::connection];
  const auto add = [&](std::string_view name, std::string_view value) {
    if (connection_specific(name, connection) || beast::iequals(name, "host") ||
        beast::iequals(name, "te"))
      return;
    out.add(name, value);  // lower-cased by the list (RFC 9113 §8.2.1)
  };
  for (const auto& f : req) add(f.name_string(), f.value());
  for (const auto& f : extra) add(f.name, f.value);
  if (te_trailers) out.add("te", "trailers");
}

}  // namespace

// --- the link's side: everything here runs on its executor ---

std::shared_ptr<Call> UpstreamLink::start(Outgoing& request) {
  if (state_ != State::ready || closed_to_new_) return nullptr;
  auto call = std::make_shared<Call>(ex_);
  nghttp2_data_provider body{};
  body.read_callback = body_source_cb;
  call->out_end = !request.has_body;
  call->id = nghttp2_submit_request(session_, nullptr, request.fields.data(), request.fields.size(),
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
    // A send waiting for room, or a read for news, on the other direction of a
    // full-duplex exchange (StreamCall::interrupt) returns.
    call.room.notify();
    call.news.notify();
    wake_writer();
  }
}

// --- the call's side: runs on the client's executor, and hops onto the link's ---

StreamCall::~StreamCall() {
  try {
    release();
  } catch (...) {  // NOLINT(bugprone-empty-catch): the stream ends with its connection
  }
}

void StreamCall::release() {
  if (!link_) return;
  auto link = std::move(link_);
  auto call = std::move(call_);
  // Counted out at once, so the next pick sees the room; the stream itself is let
  // go on the link's executor.
  link->last_release = now_ns();
  --link->streams;
  if (call) end_on_link(link, call);
}

void StreamCall::end_on_link(const std::shared_ptr<UpstreamLink>& link,
                             const std::shared_ptr<Call>& call) {
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
      started_ = true;
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

asio::awaitable<beast::error_code> StreamCall::send_head(RequestHeader& head,
                                                         const ExtraFields& extra,
                                                         RequestFraming framing, TimePoint) {
  request_fields(head, extra, registry_->tls != nullptr, framing.te_trailers, request_.fields);
  request_.has_body = framing.body;
  co_return co_await start();
}

asio::awaitable<beast::error_code> StreamCall::send_body(std::string_view data, bool last,
                                                         TimePoint until) {
  if (!link_ || !call_) co_return beast::error_code(asio::error::connection_reset);
  // Kept to be sent again should the upstream refuse the stream unprocessed: a body
  // up to kResendBody, or one handed over whole (the idempotent path holds it anyway).
  const bool whole = last && !sent_body_;
  sent_body_ = true;
  if (request_.resendable && (whole || request_.body.size() + data.size() <= kResendBody)) {
    request_.body.append(data);
  } else {
    request_.resendable = false;
    request_.body.clear();
  }
  // Held here: in a full-duplex exchange the answer's side may release the call
  // (its end, an error, interrupt()) while this waits for room.
  const std::shared_ptr<UpstreamLink> held_link = link_;
  const std::shared_ptr<Call> held_call = call_;
  auto& link = *held_link;
  Call& call = *held_call;
  bool stalled = false;
  // The piece is copied on the link's executor while this coroutine waits. The wait
  // for room ends with the stream, and with a whole answer: an upstream that answered
  // without reading the rest (RFC 9113 §8.1) and keeps its window shut has nothing
  // more to say, whether or not a RST_STREAM follows.
  auto step = [&]() -> asio::awaitable<void> {
    link.push(call, data, last);
    while (!call.closed && !call.in_end && call.out.size() - call.out_at > kOutHighWater) {
      if (!co_await call.room.wait_until(until) && !call.closed && !call.in_end &&
          call.out.size() - call.out_at > kOutHighWater) {
        stalled = true;  // the upstream's window stayed shut
        co_return;
      }
    }
    // Only the stream's end (a RST_STREAM: RFC 9113 §8.1's way to say "stop sending")
    // or the answer's ends the request early. A head alone does not: a server may
    // begin its answer before it reads the body it still wants (a gRPC bidirectional
    // call; an HTTP/2 server that flushes its head first).
    answered_early_ = !last && (call.closed || call.in_end);
  };
  co_await on_link(link, step);
  if (last) body_ended_ = true;
  if (stalled) co_return beast::error_code(beast::error::timeout);
  co_return beast::error_code{};
}

void StreamCall::interrupt() {
  // The stream ends, but the call keeps its link and stream until release(): the
  // other direction may be waiting on them.
  if (link_ && call_) end_on_link(link_, call_);
}

asio::awaitable<bool> StreamCall::resend() {
  // Only a request sent whole goes again: a full-duplex one may be under way still.
  if (!request_.resendable || resends_ == kMaxResends || (request_.has_body && !body_ended_)) {
    co_return false;
  }
  ++resends_;
  spdlog::info("upstream HTTP/2 stream refused unprocessed: sent again");
  const UpstreamLink* refused = link_.get();
  release();
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

}  // namespace h2
}  // namespace idemproxy::upstream
