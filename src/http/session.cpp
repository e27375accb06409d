#include "http/session.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>

#include "http/chunk.hpp"
#include "http/h2_connection.hpp"
#include "http/parse_buffered.hpp"
#include "http/request_target.hpp"
#include "http/trace_context.hpp"
#include "idemproxy/engine/grpc_status.hpp"
#include "idemproxy/ops/logging.hpp"

namespace idemproxy::http {
namespace {

bool is_disconnect(const beast::error_code& ec) {
  return ec == bhttp::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::operation_aborted || ec == beast::error::timeout ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe;
}

// Framing checks that close request-smuggling doors (RFC 9112 6.1, 6.3), and the
// Host rules of RFC 9112 3.2: an HTTP/1.1 request without Host, or with two, is 400.
std::optional<std::string> framing_error(const Request<bhttp::empty_body>& req) {
  const auto lengths = req.count(bhttp::field::content_length);
  const auto encodings = req.count(bhttp::field::transfer_encoding);
  if (lengths > 0 && encodings > 0) return "both Content-Length and Transfer-Encoding are present";
  if (lengths > 1) return "more than one Content-Length header";
  if (encodings > 0 && !req.chunked()) return "Transfer-Encoding must end with chunked";
  const auto hosts = req.count(bhttp::field::host);
  if (hosts > 1) return "more than one Host header";
  if (hosts == 0 && req.version() >= 11) return "an HTTP/1.1 request needs a Host header";
  const auto host = req[bhttp::field::host];
  if (!host.empty() && !valid_authority(host)) return "the Host header is not a valid host";
  return std::nullopt;
}

// Checks a request head's raw bytes for what Beast's parser accepts silently:
// obsolete line folding (RFC 9112 5.2: a server may reject it with 400; folding the
// line as Beast does lets two parsers read different values) and more header fields
// than `max_fields`. Returns the reason to reject, if any.
std::optional<std::pair<ProblemKind, std::string>> head_error(std::string_view head,
                                                              std::size_t max_fields) {
  std::size_t lines = 0;
  for (std::size_t at = head.find('\n'); at != std::string_view::npos;
       at = head.find('\n', at + 1)) {
    ++lines;
    if (at + 1 < head.size() && (head[at + 1] == ' ' || head[at + 1] == '\t')) {
      return std::pair{ProblemKind::malformed_request,
                       std::string("obsolete line folding in a header field")};
    }
  }
  // The request line and the blank line end in LF too.
  if (lines > max_fields + 2) {
    return std::pair{
        ProblemKind::header_too_large,
        "more than " + std::to_string(max_fields) + " header fields (server.max_header_fields)"};
  }
  return std::nullopt;
}

// Reads until conn.buffer holds a whole request head, or `limit` bytes without one
// (the parser then reports header_limit). `head_size` gets the head's length.
asio::awaitable<beast::error_code> read_head_bytes(ClientConnection& conn, std::size_t limit,
                                                   std::size_t& head_size) {
  // Each read resumes the search where the last one stopped: a head trickled a byte
  // at a time must not cost a scan of everything before it per byte.
  std::size_t searched = 0;
  for (;;) {
    const auto* data = static_cast<const char*>(conn.buffer.data().data());
    const std::string_view seen(data, conn.buffer.size());
    const auto end = seen.find("\r\n\r\n", searched);
    searched = seen.size() < 3 ? 0 : seen.size() - 3;
    if (end != std::string_view::npos) {
      head_size = end + 4;
      co_return beast::error_code{};
    }
    if (seen.size() > limit) {
      head_size = 0;
      co_return beast::error_code{};
    }
    auto [ec, n] = co_await conn.stream.async_read_some(conn.buffer.prepare(4096), use_nothrow);
    if (ec) co_return ec;
    conn.buffer.commit(n);
  }
}

// The published idempotency policy at policy.path: JSON, or a page when the client
// prefers HTML (a browser's Accept names text/html; RFC 9110 12.5.1). Generated from
// the configuration in force, so a reload republishes it.
asio::awaitable<bool> send_policy(RequestContext& ctx) {
  const auto& head = ctx.head.get();
  // A GET with a body (RFC 9110 9.3.1: no defined meaning) is answered, then the
  // connection closed rather than the body read.
  if (head.chunked() || ctx.head.content_length().value_or(0) > 0) ctx.keep_alive = false;
  const bool html = head[bhttp::field::accept].find("text/html") != std::string_view::npos;
  StringResponse res{bhttp::status::ok, ctx.version};
  res.set(bhttp::field::content_type, html ? "text/html; charset=utf-8" : "application/json");
  res.set(bhttp::field::cache_control, "max-age=300");
  res.set(bhttp::field::vary, "Accept");
  res.body() = html ? ctx.settings->policy.html : ctx.settings->policy.json;
  res.prepare_payload();
  ctx.outcome = ops::Outcome::passthrough;
  const bool sent = co_await send_response(ctx, res);
  co_return sent&& ctx.keep_alive;
}

// Honours a sane X-Request-Id; otherwise makes a random one (128 bits, hex). Written
// into `id`, whose memory the connection keeps from request to request.
void take_request_id(const Request<bhttp::empty_body>& req, std::string& id) {
  const auto given = req["X-Request-Id"];
  if (!given.empty() && given.size() <= 128 &&
      std::all_of(given.begin(), given.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
    id.assign(given);
    return;
  }
  id.assign(32, '0');
  random_hex(id.data(), id.size());
}

// W3C Trace Context: a valid traceparent is forwarded as sent; otherwise a trace is
// started, and a tracestate is dropped with the traceparent it belonged to (3.3.1.1:
// a vendor that cannot parse traceparent must not parse tracestate). Two traceparent
// fields are invalid (3.2).
void follow_trace(RequestContext& ctx) {
  auto& head = ctx.head.get();
  std::optional<TraceParent> given;
  if (head.count("traceparent") == 1) given = parse_traceparent(head["traceparent"]);
  if (given) {
    ctx.trace_id.assign(given->trace_id);  // before the fields it views change
    return;
  }
  StartedTrace started{};
  given = start_trace(started);
  ctx.trace_id.assign(given->trace_id);
  head.erase("traceparent");
  head.erase("tracestate");
  head.set("traceparent", given->header);
}

// Phase: route. Decides whether the request is protected, and how.
asio::awaitable<bool> dispatch(RequestContext& ctx) {
  const auto& req = ctx.head.get();
  ctx.version = req.version();
  ctx.keep_alive = req.keep_alive() && !ctx.rt.draining;
  ctx.method.assign(req.method_string());
  ctx.target.assign(req.target());
  ctx.grpc = engine::is_grpc_content_type(req[bhttp::field::content_type]);
  take_request_id(req, ctx.request_id);
  ctx.head.get().set("X-Request-Id", ctx.request_id);  // forwarded to the upstream
  follow_trace(ctx);
  if (auto error = framing_error(req)) {
    ctx.keep_alive = false;
    ctx.fail(ProblemKind::malformed_request, *error, ops::Outcome::bad_request);
    co_return co_await send_problem(ctx);
  }
  // Routes match, the fingerprint covers, and the upstream receives one spelling
  // of the target: the one an upstream's router would resolve it to.
  const auto& server = ctx.settings->config.server;
  RequestTarget& target = ctx.client.kept.normalized;
  if (const auto bad = normalize_target(
          req.target(), {server.merge_slashes, server.reject_escaped_slashes}, target)) {
    ctx.keep_alive = false;
    ctx.fail(ProblemKind::malformed_request, std::string(*bad), ops::Outcome::bad_request);
    co_return co_await send_problem(ctx);
  }
  // RFC 9112 3.2.2: with an absolute-form target, its authority is the Host.
  if (!target.authority.empty()) ctx.head.get().set(bhttp::field::host, target.authority);
  if (target.forward != req.target()) ctx.head.get().target(target.forward);
  ctx.target.assign(target.forward);
  const auto& published = ctx.settings->config.policy;
  if (published.url.empty() && !published.path.empty() && target.route_path == published.path &&
      ctx.method == "GET") {
    co_return co_await send_policy(ctx);
  }
  ctx.route = ctx.settings->routes.match(target.route_path);
  if (ctx.route == nullptr || !ctx.route->enabled || !ctx.route->covers_method(ctx.method)) {
    co_return co_await pass_through(ctx);
  }
  ctx.head.get().erase(kFencingTokenHeader);
  const auto key_count = req.count(ctx.route->header);
  const bool shadow = ctx.route->mode == engine::Mode::shadow;
  if (key_count == 0 && !ctx.route->key_json_pointer.empty()) {
    co_return co_await run_idempotent(ctx, std::nullopt);  // the key is in the body
  }
  if (key_count == 0) {
    if (!ctx.route->key_required) co_return co_await pass_through(ctx);
    if (shadow) {
      ctx.outcome = ops::Outcome::shadow_would_reject;
      co_return co_await pass_through(ctx);
    }
    ctx.keep_alive = false;
    ctx.fail(ProblemKind::missing_key,
             "route " + ctx.route->name + " requires an " + ctx.route->header + " header",
             ops::Outcome::missing_key);
    co_return co_await send_problem(ctx);
  }
  if (key_count > 1 && shadow) {
    ctx.outcome = ops::Outcome::shadow_would_reject;
    co_return co_await pass_through(ctx);
  }
  if (key_count > 1) {
    ctx.keep_alive = false;
    ctx.fail(ProblemKind::bad_key, "more than one " + ctx.route->header + " header",
             ops::Outcome::bad_key);
    co_return co_await send_problem(ctx);
  }
  const std::string key_header(req[ctx.route->header]);
  co_return co_await run_idempotent(ctx, key_header);
}

// After a final response on a connection whose request was not read to the end
// (413, 431, 400), closing at once would make a client that is still sending see
// a reset instead of the answer: data arriving at a closed socket draws an RST,
// which discards the answer the client has not read yet. RFC 9112 9.6: half-close,
// then read until the client closes. Discard what arrives until the client closes,
// stops sending for 2 s, or 10 s have passed (nginx's lingering close; its defaults
// are 5 s and 30 s). Bounded by time only: a byte cap (1 MiB until now) reset every
// client whose body outran it, however fast it sent.
asio::awaitable<void> linger_and_close(ClientConnection& conn) {
  beast::error_code ec;
  conn.stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  Chunk scratch;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds{10};
  while (std::chrono::steady_clock::now() < until) {
    conn.stream.expires_after(std::min<std::chrono::milliseconds>(
        std::chrono::seconds{2}, std::chrono::duration_cast<std::chrono::milliseconds>(
                                     until - std::chrono::steady_clock::now())));
    auto [rec, n] = co_await conn.stream.async_read_some(
        asio::buffer(scratch.data(), scratch.size()), use_nothrow);
    if (rec) break;
  }
  conn.stream.socket().close(ec);
}

// RFC 9113 §3.3: a cleartext connection that starts with the HTTP/2 preface speaks
// HTTP/2 (prior knowledge); one that departs from it is HTTP/1.1. Reads only while
// what has arrived is a proper prefix of the preface; the bytes stay in the buffer
// for whichever protocol serves them.
enum class Opening { http1, http2, gone };

asio::awaitable<Opening> sniff_preface(ClientConnection& conn, Duration idle_timeout) {
  for (;;) {
    const std::string_view seen(static_cast<const char*>(conn.buffer.data().data()),
                                conn.buffer.size());
    const auto n = std::min(seen.size(), kH2Preface.size());
    if (seen.substr(0, n) != kH2Preface.substr(0, n)) co_return Opening::http1;
    if (n == kH2Preface.size()) co_return Opening::http2;
    conn.stream.expires_after(idle_timeout);
    auto [ec, got] = co_await conn.stream.async_read_some(conn.buffer.prepare(4096), use_nothrow);
    // A client gone, a timeout, or drain (or the connection limit) closing an idle
    // connection: nothing to serve.
    if (ec) co_return Opening::gone;
    conn.buffer.commit(got);
  }
}

void log_request(const RequestContext& ctx, std::chrono::steady_clock::time_point ended) {
  if (!ops::access_log_enabled()) return;
  ops::AccessRecord r;
  r.request_id = ctx.request_id;
  r.trace_id = ctx.trace_id;
  r.original_trace_id = ctx.original_trace_id;
  r.peer = ctx.client.peer_ip;
  r.method = ctx.method;
  r.target = ctx.target;
  r.route = ctx.route_name();
  r.outcome = ops::to_string(ctx.outcome);
  r.status = ctx.status;
  r.upstream_status = ctx.upstream_status;
  r.key_hash = ctx.key_hash;
  r.duration_ms = std::chrono::duration<double, std::milli>(ended - ctx.started).count();
  r.upstream_ms = ctx.upstream_ms;
  ops::log_access(r);
}

}  // namespace

void log_exception(const std::exception_ptr& e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    spdlog::error("connection ended by an unexpected error: {}", ex.what());
  }
}

void SessionTracker::add(const std::shared_ptr<ClientConnection>& c) {
  std::lock_guard lock(mu_);
  live_.insert(c);
}

void SessionTracker::remove(const std::shared_ptr<ClientConnection>& c) {
  std::lock_guard lock(mu_);
  live_.erase(c);
}

std::size_t SessionTracker::size() const {
  std::lock_guard lock(mu_);
  return live_.size();
}

std::size_t SessionTracker::reclaim_idle(std::size_t most) {
  std::lock_guard lock(mu_);
  std::size_t closed = 0;
  for (const auto& c : live_) {
    if (closed == most) break;
    // Each connection is chosen once: its close takes a moment, and choosing it
    // again would let a flood past the limit.
    if (!c->idle || c->reclaimed.exchange(true)) continue;
    ++closed;
    asio::post(c->stream.get_executor(), [c] {
      if (c->idle) c->stream.cancel();
    });
  }
  return closed;
}

void SessionTracker::close_idle() {
  std::lock_guard lock(mu_);
  for (const auto& c : live_) {
    // Runs on the connection's strand, so `idle` cannot change underneath it.
    asio::post(c->stream.get_executor(), [c] {
      if (c->idle) c->stream.cancel();
    });
  }
}

asio::awaitable<void> serve_connection(std::shared_ptr<ClientConnection> conn, Runtime& rt,
                                       SessionTracker& tracker) {
  tracker.add(conn);
  beast::error_code ec;
  if (conn->peer_ip.empty()) {  // a bridged HTTP/2 stream has its connection's
    const auto remote = conn->stream.socket().remote_endpoint(ec);
    conn->peer_ip = ec ? "unknown" : remote.address().to_string();
  }
  bool linger = false;
  if (auto* tls = conn->stream.tls()) {
    // The handshake counts against header_timeout, like the request head it precedes.
    conn->stream.expires_after(rt.settings()->config.server.header_timeout);
    auto [hec] = co_await tls->async_handshake(ssl::stream_base::server, use_nothrow);
    if (hec) {
      rt.metrics.count_tls_handshake_failure();
      spdlog::info("TLS handshake with {} failed: {}", conn->peer_ip, hec.message());
      conn->stream.socket().close(ec);
      tracker.remove(conn);
      co_return;
    }
    conn->peer_subject = peer_subject(conn->stream);
  }
  if (!conn->h2_stream && rt.settings()->config.server.http2) {
    auto opening = Opening::http1;
    if (conn->stream.tls() != nullptr) {
      if (alpn_chose_h2(conn->stream)) opening = Opening::http2;
    } else {
      opening = co_await sniff_preface(*conn, rt.settings()->config.server.idle_timeout);
    }
    if (opening == Opening::gone) {
      conn->stream.socket().close(ec);
      tracker.remove(conn);
      co_return;
    }
    if (opening == Opening::http2) {
      co_await serve_h2(conn, rt);
      tracker.remove(conn);
      co_return;
    }
  }

  // The clock is read as each request starts and as it ends; the deadlines of the waits
  // around a request are set from those readings, not from a reading of their own.
  auto now = std::chrono::steady_clock::now();  // then: as the last request ended
  for (;;) {
    RequestContext ctx(*conn, rt, rt.settings());
    const auto& server = ctx.settings->config.server;
    ctx.head.header_limit(static_cast<std::uint32_t>(server.max_header_size));
    // Body limits depend on the route, known only after the head: pass_through and
    // run_idempotent check Content-Length (Beast's default of 1 MiB would answer 400).
    ctx.head.body_limit(boost::none);
    conn->idle = true;
    // A bridged HTTP/2 stream was admitted before the GOAWAY; it is served.
    if (rt.draining && !conn->h2_stream) break;
    // Two clocks: idle_timeout for the next request to start, then header_timeout for
    // its head to arrive whole, so a client trickling bytes (slowloris) cannot hold
    // the connection for longer than header_timeout.
    beast::error_code rec;
    ctx.started = now;  // a pipelined request waited in the buffer since then
    if (conn->buffer.size() == 0) {
      conn->stream.expires_at(now + server.idle_timeout);
      std::size_t got = 0;
      std::tie(rec, got) =
          co_await conn->stream.async_read_some(conn->buffer.prepare(4096), use_nothrow);
      conn->buffer.commit(got);
      ctx.started = std::chrono::steady_clock::now();
    }
    conn->idle = false;
    std::optional<std::pair<ProblemKind, std::string>> bad_head;
    if (!rec) {
      conn->stream.expires_at(ctx.started + server.header_timeout);
      std::size_t head_size = 0;
      rec = co_await read_head_bytes(*conn, server.max_header_size, head_size);
      if (!rec && head_size > 0) {
        bad_head = head_error({static_cast<const char*>(conn->buffer.data().data()), head_size},
                              server.max_header_fields);
      }
    }
    if (!rec && !bad_head) {
      // read_head_bytes saw the whole head arrive: it is parsed in place, by the same
      // put() Beast's read would call (which remains for a parser that wants more).
      ctx.head.eager(false);  // as async_read_header has it: the body is not parsed here
      parse_buffered(conn->buffer, ctx.head, rec);
      if (!rec && !ctx.head.is_header_done()) {
        std::tie(rec, std::ignore) =
            co_await bhttp::async_read_header(conn->stream, conn->buffer, ctx.head, use_nothrow);
      }
    }
    if (rec && is_disconnect(rec)) break;
    if (rec && !bad_head) {
      bad_head = std::pair{rec == bhttp::error::header_limit ? ProblemKind::header_too_large
                                                             : ProblemKind::malformed_request,
                           rec.message()};
    }
    if (bad_head) {
      ctx.keep_alive = false;
      ctx.fail(bad_head->first, "the request could not be parsed: " + bad_head->second,
               ops::Outcome::bad_request);
      co_await send_problem(ctx);
      rt.metrics.count_request("-", ops::Outcome::bad_request);
      spdlog::info("malformed request from {}: {}", conn->peer_ip, bad_head->second);
      linger = true;
      break;
    }
    const bool keep = co_await dispatch(ctx);
    now = std::chrono::steady_clock::now();
    rt.metrics.count_request(ctx.route_name(), ctx.outcome,
                             std::chrono::duration<double>(now - ctx.started).count());
    log_request(ctx, now);
    if (!keep) {
      linger = ctx.error.has_value();  // the request may not have been read to the end
      break;
    }
  }
  if (linger) {
    co_await linger_and_close(*conn);
  } else {
    conn->stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  }
  tracker.remove(conn);
}

}  // namespace idemproxy::http
