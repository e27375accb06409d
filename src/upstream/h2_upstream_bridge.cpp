// Each exchange an HTTP/1.1 pooled connection makes over the socket pair: its
// request sent as a stream of the link, and the answer written back as HTTP/1.1.
#include "upstream/h2_link.hpp"

namespace idemproxy::http {
namespace h2 {
namespace {

// nghttp2 asks for a request's next body bytes (the data provider start_call sets).
ssize_t body_source_cb(nghttp2_session*, std::int32_t id, std::uint8_t* buf, std::size_t size,
                       std::uint32_t* flags, nghttp2_data_source*, void* user) {
  return static_cast<UpstreamLink*>(user)->read_body(id, buf, size, flags);
}

}  // namespace

asio::awaitable<std::pair<beast::error_code, std::optional<tcp::socket>>> UpstreamLink::open_bridge(
    asio::any_io_executor near_ex, std::unique_ptr<http::Stream> established) {
  using Result = std::pair<beast::error_code, std::optional<tcp::socket>>;
  if (auto ec = co_await ready(std::move(established))) co_return Result{ec, std::nullopt};
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0) {
    co_return Result{beast::error_code(errno, boost::system::system_category()), std::nullopt};
  }
  beast::error_code ec;
  tcp::socket near(near_ex);
  near.assign(tcp::v4(), fds[0], ec);
  auto pipe = std::make_shared<Pipe>(ex_);
  pipe->assign(asio::local::stream_protocol(), fds[1], ec);
  ++bridges;
  asio::co_spawn(
      ex_,
      [self = shared_from_this(), pipe]() -> asio::awaitable<void> { co_await self->bridge(pipe); },
      [self = shared_from_this()](const std::exception_ptr& e) {
        --self->bridges;
        if (e) {
          try {
            std::rethrow_exception(e);
          } catch (const std::exception& x) {
            spdlog::error("upstream HTTP/2 bridge: {}", x.what());
          }
        }
      });
  co_return Result{beast::error_code{}, std::move(near)};
}

// Serves one socket pair: each HTTP/1.1 request read from it becomes a stream, and
// its answer is written back, until the pool closes the pair or a request asks to.
asio::awaitable<void> UpstreamLink::bridge(std::shared_ptr<Pipe> pipe) {
  beast::flat_buffer buffer;
  for (;;) {
    RequestParser<bhttp::buffer_body> parser;
    parser.header_limit(kMaxHeadBytes);
    parser.body_limit(boost::none);
    auto [ec, n] = co_await bhttp::async_read_header(*pipe, buffer, parser, use_nothrow);
    if (ec) break;
    if (state_ == State::ready && !closed_to_new_) {
      if (!co_await exchange(*pipe, buffer, parser, false)) break;
      continue;
    }
    // This connection takes no new streams (the upstream sent GOAWAY, or it is
    // gone): another carries the request, and the socket pair ends after it.
    auto registry = registry_.lock();
    auto other = registry ? registry->pick(nullptr) : nullptr;
    if (!other) {
      co_await not_sent(*pipe, "the proxy is stopping");
      break;
    }
    co_await asio::co_spawn(other->executor(), other->carry(*pipe, buffer, parser),
                            asio::use_awaitable);
    --other->bridges;
    break;
  }
  beast::error_code ec;
  pipe->close(ec);
}

asio::awaitable<void> UpstreamLink::carry(Pipe& pipe, beast::flat_buffer& buffer,
                                          RequestParser<bhttp::buffer_body>& parser) {
  if (auto ec = co_await ready(nullptr)) {
    co_await not_sent(pipe, "cannot connect to the upstream: " + ec.message());
    co_return;
  }
  co_await exchange(pipe, buffer, parser, true);
}

asio::awaitable<bool> UpstreamLink::exchange(Pipe& pipe, beast::flat_buffer& buffer,
                                             RequestParser<bhttp::buffer_body>& parser, bool last) {
  auto& req = parser.get();
  Outgoing request;
  request.head_request = req.method() == bhttp::verb::head;
  request.keep_alive = req.keep_alive() && !last;
  // RFC 9113 §8.3.1: the request line and Host become pseudo-header fields.
  Fields& owned = request.fields;
  owned.reserve(16);
  owned.emplace_back(":method", std::string(req.method_string()));
  owned.emplace_back(":scheme", tls_ != nullptr ? "https" : "http");
  owned.emplace_back(":authority", std::string(req[bhttp::field::host]));
  owned.emplace_back(":path", std::string(req.target()));
  // gRPC servers require "te: trailers" (the gRPC HTTP/2 protocol); an HTTP/1.1 hop
  // drops it as hop-by-hop, so it is restored here, as nginx's grpc_pass does.
  const auto content_type = req[bhttp::field::content_type];
  request.trailers = engine::is_grpc_content_type(content_type);
  if (request.trailers) owned.emplace_back("te", "trailers");
  const auto connection = req[bhttp::field::connection];
  for (const auto& f : req.base()) {
    const auto name = f.name_string();
    if (connection_specific(name, connection) || beast::iequals(name, "host")) continue;
    // te is connection-specific too, but "trailers" may (and for gRPC must) pass.
    if (beast::iequals(name, "te") &&
        (!beast::iequals(f.value(), "trailers") || engine::is_grpc_content_type(content_type))) {
      continue;
    }
    if (beast::iequals(name, "te")) request.trailers = true;
    owned.emplace_back(lower_case(name), std::string(f.value()));
  }
  auto call = start_call(request, !parser.is_done());
  if (!call) {
    co_await not_sent(pipe, "cannot start a stream");
    co_return false;
  }

  // The request body, as the session writes it, within the stream's window. A copy
  // is kept, up to kResendBody, in case the stream is refused unprocessed.
  std::array<char, std::size_t{16} * 1024> scratch;
  while (!parser.is_done() && !call->closed) {
    while (!call->closed && call->out.size() - call->out_at > kOutHighWater) {
      co_await call->room.wait();
    }
    if (call->closed) break;
    req.body().data = scratch.data();
    req.body().size = scratch.size();
    auto [rec, got] = co_await bhttp::async_read_some(pipe, buffer, parser, use_nothrow);
    if (rec && rec != bhttp::error::need_buffer) {
      if (!call->closed)
        nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, call->id, NGHTTP2_CANCEL);
      wake_writer();
      co_return false;
    }
    const std::string_view piece(scratch.data(), scratch.size() - req.body().size);
    call->out.append(piece);
    if (request.resendable && request.body.size() + piece.size() <= kResendBody) {
      request.body.append(piece);
    } else {
      request.resendable = false;
      request.body.clear();
    }
    if (parser.is_done()) call->out_end = true;
    if (call->out_deferred && !call->closed) {
      call->out_deferred = false;
      nghttp2_session_resume_data(session_, call->id);
    }
    wake_writer();
  }
  // Only a request read whole can go again.
  request.resendable = request.resendable && parser.is_done();
  co_return co_await relay_answer(pipe, call, request);
}

std::shared_ptr<Call> UpstreamLink::start_call(const Outgoing& request, bool has_body) {
  const auto nva = nv_list(request.fields);
  auto call = std::make_shared<Call>(ex_);
  nghttp2_data_provider body{};
  body.read_callback = body_source_cb;
  call->out_end = !has_body;
  call->id = nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(),
                                    has_body ? &body : nullptr, nullptr);
  if (call->id < 0) {
    spdlog::info("upstream HTTP/2: cannot start a stream: {}", nghttp2_strerror(call->id));
    return nullptr;
  }
  calls_[call->id] = call;
  wake_writer();
  return call;
}

asio::awaitable<void> UpstreamLink::resend(Pipe& pipe, Outgoing& request) {
  if (auto ec = co_await ready(nullptr)) {
    co_await not_sent(pipe, "cannot connect to the upstream: " + ec.message());
    co_return;
  }
  request.keep_alive = false;  // the socket pair belongs to the other connection
  request.resendable = false;  // once
  auto call = start_call(request, !request.body.empty());
  if (!call) {
    co_await not_sent(pipe, "cannot start a stream");
    co_return;
  }
  call->out = std::move(request.body);
  call->out_end = true;
  co_await relay_answer(pipe, call, request);
}

asio::awaitable<bool> UpstreamLink::relay_answer(Pipe& pipe, std::shared_ptr<Call> call,
                                                 Outgoing& request) {
  const bool head_request = request.head_request;
  const bool keep_alive = request.keep_alive;
  // The answer: interim heads, the final head, the body, the trailers.
  std::string pending;
  bool chunked = false;
  for (;;) {
    while (!call->closed && call->interim.empty() && (!call->head || call->head_taken) &&
           call->in.empty() && !call->in_end) {
      co_await call->news.wait();
    }
    if (call->in_end && !call->head) co_return false;  // nghttp2 allows no such stream
    while (!call->interim.empty()) {
      auto& [status, fields] = call->interim.front();
      pending.append("HTTP/1.1 ").append(std::to_string(status)).append(" \r\n");
      for (const auto& [name, value] : fields) pending.append(name + ": " + value + "\r\n");
      pending.append("\r\n");
      call->interim.pop_front();
    }
    if (call->head && !call->head_taken) {
      call->head_taken = true;
      const auto& [status, fields] = *call->head;
      const bool bodiless = head_request || status == 204 || status == 304;
      const bool has_length = std::any_of(
          fields.begin(), fields.end(), [](const auto& f) { return f.first == "content-length"; });
      // No content-length (RFC 9113 §8.1.1: DATA frames delimit the body), or a
      // client that takes trailers (an HTTP/2 answer may end with trailers whatever
      // its content-length; in HTTP/1.1 only chunked coding carries them, RFC 9112
      // §7.1.2): chunked, without the content-length (RFC 9112 §6.1).
      chunked = !bodiless && (!has_length || request.trailers);
      pending.append("HTTP/1.1 ").append(std::to_string(status)).append(" \r\n");
      for (const auto& [name, value] : fields) {
        if (chunked && name == "content-length") continue;
        pending.append(name).append(": ").append(value).append("\r\n");
      }
      if (chunked) pending.append("transfer-encoding: chunked\r\n");
      if (!keep_alive) pending.append("connection: close\r\n");
      pending.append("\r\n");
    }
    std::size_t taken = 0;
    if (call->head_taken && !call->in.empty()) {
      taken = call->in.size();
      if (chunked) {
        append_chunk(pending, call->in);
      } else {
        pending.append(call->in);
      }
      call->in.clear();
    }
    const bool whole = call->head_taken && call->in_end;
    if (whole && chunked) {
      pending.append("0\r\n");
      for (const auto& [name, value] : call->trailers) {
        pending.append(name).append(": ").append(value).append("\r\n");
      }
      pending.append("\r\n");
    }
    if (!pending.empty()) {
      auto [ec, n] = co_await asio::async_write(pipe, asio::buffer(pending), use_nothrow);
      if (ec) {
        // The session went (its client left, or it timed out): the stream stops.
        if (!call->closed) {
          nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, call->id, NGHTTP2_CANCEL);
          wake_writer();
        }
        co_return false;
      }
      pending.clear();
      if (taken > 0 && !call->closed) {
        nghttp2_session_consume_stream(session_, call->id, taken);
        wake_writer();
      }
    }
    if (whole) co_return keep_alive;
    if (call->closed && !call->head && call->close_code == NGHTTP2_REFUSED_STREAM) {
      // RFC 9113 §8.7: a refused stream (or one past a GOAWAY's last stream) was
      // not processed, so it may go again, on another connection: once, when its
      // whole body is at hand. Otherwise the session gets a 502 that releases the
      // claim (not_sent).
      auto registry = request.resendable ? registry_.lock() : nullptr;
      auto other = registry ? registry->pick(nullptr) : nullptr;
      if (!other) {
        co_await not_sent(pipe, "the upstream refused the stream");
        co_return false;
      }
      spdlog::info("upstream HTTP/2 stream {} refused unprocessed: sent again", call->id);
      co_await asio::co_spawn(other->executor(), other->resend(pipe, request), asio::use_awaitable);
      --other->bridges;
      co_return false;
    }
    if (call->closed && call->in.empty() && !call->in_end) {
      // Reset, or the connection failed, before the answer was whole: the session
      // sees the connection end, and never takes a cut body for a whole one.
      spdlog::info("upstream HTTP/2 stream {} ended before its answer: {}", call->id,
                   nghttp2_http2_strerror(call->close_code));
      co_return false;
    }
  }
}

}  // namespace h2
}  // namespace idemproxy::http
