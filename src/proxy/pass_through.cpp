// Requests no route protects stream through without being buffered: the body is
// relayed in fixed-size chunks in both directions.
#include <spdlog/spdlog.h>

#include "http/fields.hpp"
#include "proxy/context.hpp"
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
  auto [cec, call] = co_await rt.upstream.open_call(ctx.ex.fields_allocator());
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
  const auto sent =
      co_await send_request(*call, req, ctx.to_upstream, ctx.ex, te_trailers, cfg.upstream.timeout,
                            body_deadline, read_error, write_error);
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
  if (sent == RelayError::write) {
    ctx.fail(ProblemKind::upstream_failed,
             "sending the request to the upstream failed: " + write_error.message(),
             ops::Outcome::upstream_error);
    co_await send_problem(ctx);
    co_return;
  }

  const std::optional<std::uint64_t> body_limit = cfg.server.max_stream_body;
  const FieldsAllocator fields = ctx.ex.fields_allocator();
  const auto head_by = std::chrono::steady_clock::now() + cfg.upstream.timeout;
  const auto hec = co_await read_final_head(*call, &ctx.ex, is_head, body_limit, fields, head_by);
  if (hec) {
    const auto kind =
        hec == beast::error::timeout ? ProblemKind::upstream_timeout : ProblemKind::upstream_failed;
    ctx.fail(kind, "the upstream's response could not be read: " + hec.message(),
             ops::Outcome::upstream_error);
    co_await send_problem(ctx);
    co_return;
  }
  // Streamed: the upstream's time is measured to its response head.
  const double upstream_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - upstream_started).count();
  rt.metrics.observe_upstream(upstream_seconds);
  ctx.upstream_ms = upstream_seconds * 1000;
  up.set_http_status(static_cast<int>(call->head().result_int()));
  const std::string_view nothing_read;
  co_await stream_response(ctx, *call, nothing_read);
}

}  // namespace idemproxy::proxy
