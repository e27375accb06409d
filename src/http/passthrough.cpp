// Requests no route protects stream through without being buffered: the body is
// relayed in fixed-size chunks in both directions.
#include <spdlog/spdlog.h>

#include "http/headers.hpp"
#include "http/relay.hpp"
#include "http/request_context.hpp"

namespace idemproxy::http {

asio::awaitable<bool> stream_response(RequestContext& ctx,
                                      std::unique_ptr<UpstreamConnection>& conn,
                                      StreamingParser& parser, std::string_view prefix) {
  const auto& cfg = ctx.settings->config;
  auto& res = parser.get();
  const bool upstream_keep_alive = res.keep_alive();
  strip_hop_by_hop(res);
  // Idempotency-Policy speaks to the proxy: on a covered route it never reaches the
  // client, also when this request carried no key (README, "Behaviour").
  if (covered(ctx)) res.erase("Idempotency-Policy");
  res.version(ctx.version == 10 ? 10 : 11);
  set_relay_framing(res, parser, ctx.version != 10);
  // An HTTP/1.0 client gets a body of unknown length delimited by closing.
  if (ctx.version == 10 && !parser.is_done() && !parser.content_length()) ctx.keep_alive = false;
  res.keep_alive(ctx.keep_alive);
  res.set("X-Request-Id", ctx.request_id);
  ctx.status = res.result_int();
  ctx.upstream_status = ctx.status;
  beast::error_code relay_error;
  const auto relayed =
      co_await relay<false>(conn->stream, conn->buffer, parser, ctx.client.stream,
                            cfg.upstream.timeout, cfg.server.read_timeout, relay_error, prefix);
  if (relayed == RelayError::none && upstream_keep_alive && !parser.need_eof()) {
    ctx.rt.upstream.give_back(std::move(conn));
  }
  co_return ctx.keep_alive ? relayed == RelayError::none : false;
}

asio::awaitable<bool> pass_through(RequestContext& ctx) {
  const auto& cfg = ctx.settings->config;
  auto& rt = ctx.rt;
  const auto declared = ctx.head.content_length();
  if (declared && *declared > cfg.server.max_stream_body) {
    ctx.keep_alive = false;
    ctx.fail(ProblemKind::body_too_large, "the request body is larger than server.max_stream_body",
             ops::Outcome::too_large);
    co_return co_await send_problem(ctx);
  }
  if (!co_await continue_if_expected(ctx)) co_return false;
  RequestParser<bhttp::buffer_body> req_parser{std::move(ctx.head)};
  req_parser.body_limit(cfg.server.max_stream_body);
  auto& req = req_parser.get();
  const bool is_head = req.method() == bhttp::verb::head;
  prepare_forward(req, ctx.client.peer_ip, ctx.client.secure, cfg.upstream);
  set_relay_framing(req, req_parser, true);

  const auto upstream_started = std::chrono::steady_clock::now();
  auto [cec, conn] = co_await rt.upstream.acquire(false);
  if (cec) {
    ctx.keep_alive = false;  // the request body was not read
    ctx.fail(ProblemKind::upstream_unreachable, "cannot connect to the upstream: " + cec.message(),
             ops::Outcome::upstream_error);
    co_return co_await send_problem(ctx);
  }

  beast::error_code relay_error;
  // The body's deadline counts from here (a body-less request has none to read).
  const auto body_deadline =
      req_parser.is_done()
          ? std::nullopt
          : std::optional{std::chrono::steady_clock::now() + cfg.server.body_timeout};
  const auto sent = co_await relay<true>(ctx.client.stream, ctx.client.buffer, req_parser,
                                         conn->stream, cfg.server.read_timeout,
                                         cfg.upstream.timeout, relay_error, {}, body_deadline);
  if (sent == RelayError::read) {
    // The client went away mid-body, or sent it too slowly: the upstream connection
    // holds part of a request and is closed with this one.
    if (relay_error == beast::error::timeout) {
      ctx.log(spdlog::level::info, "request body from {} not received within server.body_timeout",
              ctx.client.peer_ip);
    }
    co_return false;
  }
  if (sent == RelayError::write) {
    ctx.keep_alive = false;
    ctx.fail(ProblemKind::upstream_failed,
             "sending the request to the upstream failed: " + relay_error.message(),
             ops::Outcome::upstream_error);
    co_return co_await send_problem(ctx);
  }

  StreamingParserPtr res_parser;
  conn->stream.expires_after(cfg.upstream.timeout);
  const auto hec = co_await read_final_head(
      *conn, res_parser, is_head, cfg.server.max_stream_body,
      InterimSink{&ctx.client.stream, ctx.version, cfg.server.read_timeout},
      ctx.client.fields_allocator());
  if (hec) {
    const auto kind =
        hec == beast::error::timeout ? ProblemKind::upstream_timeout : ProblemKind::upstream_failed;
    ctx.keep_alive = false;
    ctx.fail(kind, "no response from the upstream: " + hec.message(), ops::Outcome::upstream_error);
    co_return co_await send_problem(ctx);
  }
  // Streamed: the upstream's time is measured to its response head.
  const double upstream_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - upstream_started).count();
  rt.metrics.observe_upstream(upstream_seconds);
  ctx.upstream_ms = upstream_seconds * 1000;
  co_return co_await stream_response(ctx, conn, *res_parser, {});
}

}  // namespace idemproxy::http
