// Requests no route protects stream through without being buffered: the body is
// relayed in fixed-size chunks in both directions.
#include <spdlog/spdlog.h>

#include <exception>

#include "http/fields.hpp"
#include "proxy/context.hpp"
#include "proxy/duplex.hpp"
#include "proxy/forward.hpp"
#include "proxy/phases.hpp"
#include "proxy/pump.hpp"
#include "proxy/spans.hpp"

namespace idemproxy::proxy {

asio::awaitable<bool> stream_response(RequestContext& ctx, upstream::UpstreamCall& call,
                                      std::string_view prefix) {
  auto& res = call.head();
  strip_hop_by_hop(res);
  // Idempotency-Policy speaks to the proxy: on a covered route it never reaches the
  // client, also when this request carried no key (docs/BEHAVIOUR.md).
  if (covered(ctx)) res.erase("Idempotency-Policy");
  res.set("X-Request-Id", ctx.request_id);
  ctx.status = res.result_int();
  ctx.upstream_status = ctx.status;
  beast::error_code relay_error;
  const auto relayed = co_await relay_answer(
      call, ctx.ex, prefix, ctx.grpc, ctx.settings.config.upstream.read_timeout, relay_error);
  // An answer broken off must never pass for a whole one.
  if (relayed == RelayError::read) ctx.ex.reset();
  co_return relayed == RelayError::none;
}

namespace {

// The request could not go whole: the client's body broke off (gone, too slow,
// malformed, too large), or the upstream took no more of it.
asio::awaitable<void> request_failed(RequestContext& ctx, RelayError sent,
                                     BodyPiece::Error read_error,
                                     const beast::error_code& write_error) {
  if (sent == RelayError::read) {
    // The client went away mid-body, sent it too slowly, or broke its framing: the
    // upstream connection holds part of a request and is closed with this one.
    if (read_error == BodyPiece::Error::timeout) {
      ctx.log(spdlog::level::info, "request body from {} not received within server.body_timeout",
              ctx.ex.peer().ip);
    }
    if (read_error == BodyPiece::Error::too_large) {
      ctx.fail(ProblemKind::body_too_large,
               "the request body is larger than server.max_stream_body", ops::Outcome::too_large);
      co_await send_problem(ctx);
    } else if (read_error == BodyPiece::Error::malformed) {
      ctx.fail(ProblemKind::malformed_request, "malformed request body", ops::Outcome::bad_request);
      co_await send_problem(ctx);
    } else {
      ctx.ex.reset();
    }
    co_return;
  }
  ctx.fail(ProblemKind::upstream_failed,
           "sending the request to the upstream failed: " + write_error.message(),
           ops::Outcome::upstream_error);
  co_await send_problem(ctx);
}

asio::awaitable<void> head_failed(RequestContext& ctx, const beast::error_code& ec) {
  const auto kind =
      ec == beast::error::timeout ? ProblemKind::upstream_timeout : ProblemKind::upstream_failed;
  ctx.fail(kind, "the upstream's response could not be read: " + ec.message(),
           ops::Outcome::upstream_error);
  co_await send_problem(ctx);
}

// Streamed: the upstream's time is measured to its response head.
void head_came(RequestContext& ctx, upstream::UpstreamCall& call,
               std::chrono::steady_clock::time_point started, trace::Span& up) {
  const double upstream_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ctx.rt.metrics.observe_upstream(upstream_seconds);
  ctx.upstream_ms = upstream_seconds * 1000;
  up.set_http_status(static_cast<int>(call.head().result_int()));
}

// The request's body goes up in a coroutine of its own (RequestSide) while this one
// reads the answer and relays it; the answer's end stops what is left of the request.
asio::awaitable<void> pass_duplex(
    RequestContext& ctx, upstream::UpstreamCall& call, bool te_trailers,
    std::optional<std::chrono::steady_clock::time_point> body_deadline,
    std::chrono::steady_clock::time_point started, trace::Span& up) {
  const auto& cfg = ctx.settings.config;
  auto& req = ctx.ex.head();
  // The head first: the answer is read only once its request began.
  if (const auto ec = co_await send_request_head(call, req, ctx.to_upstream, ctx.ex, te_trailers,
                                                 cfg.upstream.timeout)) {
    co_await request_failed(ctx, RelayError::write, BodyPiece::Error::none, ec);
    co_return;
  }
  RequestSide request(co_await asio::this_coro::executor, call, req, ctx.to_upstream, ctx.ex,
                      te_trailers, cfg.upstream.timeout, body_deadline);
  request.start();
  beast::error_code hec;
  bool answered = false;
  std::exception_ptr failed;
  try {
    // No deadline of its own: RequestSide bounds the wait from the request's end.
    const auto unbounded = std::chrono::steady_clock::time_point::max();
    const std::optional<std::uint64_t> body_limit = cfg.server.max_stream_body;
    hec = co_await read_final_head(call, &ctx.ex, req.method() == bhttp::verb::head, body_limit,
                                   ctx.ex.fields_allocator(), unbounded);
    request.head_read();
    if (!hec) {
      answered = true;
      head_came(ctx, call, started, up);
      const std::string_view nothing_read;
      co_await stream_response(ctx, call, nothing_read);
    }
  } catch (...) {
    failed = std::current_exception();
  }
  const RequestSide::Outcome sent = co_await request.finish();
  if (failed) std::rethrow_exception(failed);
  if (answered) co_return;
  // No answer came: the request's side tells why first (its failure ended the read).
  if (sent.sent != RelayError::none) {
    co_await request_failed(ctx, sent.sent, sent.read_error, sent.write_error);
    co_return;
  }
  co_await head_failed(ctx, sent.head_late ? beast::error::timeout : hec);
}

}  // namespace

asio::awaitable<void> pass_through(RequestContext& ctx) {
  const auto& cfg = ctx.settings.config;
  auto& rt = ctx.rt;
  const auto declared = ctx.ex.content_length();
  if (declared && *declared > cfg.server.max_stream_body) {
    ctx.fail(ProblemKind::body_too_large, "the request body is larger than server.max_stream_body",
             ops::Outcome::too_large);
    co_await send_problem(ctx);
    co_return;
  }
  if (ctx.ex.expects_continue()) {
    const bool written = co_await ctx.ex.send_continue();
    if (!written) co_return;
  }
  ctx.ex.body_limit(cfg.server.max_stream_body);
  auto& req = ctx.ex.head();
  const bool is_head = req.method() == bhttp::verb::head;
  const bool te_trailers = prepare_forward(req, ctx.to_upstream, ctx.ex.peer(), cfg.upstream);
  frame_request(req, ctx.to_upstream, ctx.ex);

  const auto upstream_started = std::chrono::steady_clock::now();
  trace::Span up = start_upstream_span(ctx, req);
  upstream::UpstreamCallPtr call = rt.upstream.open_call_now(ctx.ex.fields_allocator());
  beast::error_code cec;
  if (!call) std::tie(cec, call) = co_await rt.upstream.open_call(ctx.ex.fields_allocator());
  if (cec) {
    up.set_error("upstream unreachable");
    ctx.fail(ProblemKind::upstream_unreachable, "cannot connect to the upstream: " + cec.message(),
             ops::Outcome::upstream_error);
    co_await send_problem(ctx);
    co_return;
  }
  BodyPiece::Error read_error = BodyPiece::Error::none;
  beast::error_code write_error;
  // The body's deadline counts from here (a body-less request has none to read).
  const auto body_deadline =
      !ctx.ex.has_body() || ctx.ex.body_done()
          ? std::nullopt
          : std::optional{std::chrono::steady_clock::now() + cfg.server.body_timeout};
  // A body still to come between two HTTP/2 peers: the answer is read while it goes
  // (a bidirectional gRPC call; an upload answered as it goes).
  if (call->full_duplex() && ctx.ex.full_duplex() && !ctx.ex.body_done()) {
    co_await pass_duplex(ctx, *call, te_trailers, body_deadline, upstream_started, up);
    co_return;
  }
  const auto sent =
      co_await send_request(*call, req, ctx.to_upstream, ctx.ex, te_trailers, cfg.upstream.timeout,
                            body_deadline, read_error, write_error);
  if (sent != RelayError::none) {
    co_await request_failed(ctx, sent, read_error, write_error);
    co_return;
  }

  const std::optional<std::uint64_t> body_limit = cfg.server.max_stream_body;
  const FieldsAllocator fields = ctx.ex.fields_allocator();
  const auto head_by = std::chrono::steady_clock::now() + cfg.upstream.timeout;
  const auto hec = co_await read_final_head(*call, &ctx.ex, is_head, body_limit, fields, head_by);
  if (hec) {
    co_await head_failed(ctx, hec);
    co_return;
  }
  head_came(ctx, *call, upstream_started, up);
  const std::string_view nothing_read;
  co_await stream_response(ctx, *call, nothing_read);
}

}  // namespace idemproxy::proxy
