// The proxy's entry and its first phase, route: what a request is, whether a route
// protects it, and where it goes next.
#include "proxy/serve.hpp"

#include <algorithm>
#include <memory>
#include <utility>

#include "http/trace_context.hpp"
#include "idemproxy/engine/grpc_status.hpp"
#include "proxy/context.hpp"
#include "proxy/forward.hpp"
#include "proxy/lookup.hpp"
#include "proxy/phases.hpp"
#include "proxy/spans.hpp"

namespace idemproxy::proxy {
namespace {

using engine::KeyState;
using engine::KeyVerdict;

// What the proxy reads of every request's fields, found in one walk over them rather
// than a search of the field tree per name (case-insensitive: eight searches a
// request): each name's first value, as head[name] gives it, and how many lines carry
// it.
struct SeenFields {
  std::string_view content_type, request_id, traceparent;
  int request_ids = 0, traceparents = 0;
  bool tracestate = false, fencing_token = false;
};

SeenFields seen_fields(const RequestHeader& head) {
  SeenFields s;
  bool content_typed = false;
  for (const auto& f : head) {
    if (f.name() == bhttp::field::content_type) {
      if (!std::exchange(content_typed, true)) s.content_type = f.value();
      continue;
    }
    const auto name = f.name_string();
    const auto is = [name](std::string_view n) { return same_name(name, n); };
    if (is("X-Request-Id")) {
      if (s.request_ids++ == 0) s.request_id = f.value();
    } else if (is("traceparent")) {
      if (s.traceparents++ == 0) s.traceparent = f.value();
    } else if (is("tracestate")) {
      s.tracestate = true;
    } else if (is(kFencingTokenHeader)) {
      s.fencing_token = true;
    }
  }
  return s;
}

// How many lines carry the field `name`, and the first one's value: a walk over the
// few fields a request has, where the field tree's equal_range made two searches.
std::pair<int, std::string_view> lines_of(const RequestHeader& head, std::string_view name) {
  int lines = 0;
  std::string_view first;
  for (const auto& f : head) {
    if (same_name(f.name_string(), name) && lines++ == 0) first = f.value();
  }
  return {lines, first};
}

// Honours a sane X-Request-Id (the first, when several came), to be forwarded as the
// only one; otherwise makes a random one (128 bits, hex) to go in place of any sent
// (start_upstream_span writes the head). Written into ctx.request_id, whose memory the
// connection keeps from request to request.
void take_request_id(RequestContext& ctx, const SeenFields& seen) {
  const auto given = seen.request_id;
  ctx.stamp.request_ids = seen.request_ids;
  if (!given.empty() && given.size() <= 128 &&
      std::all_of(given.begin(), given.end(), [](char c) { return c > 0x20 && c < 0x7f; })) {
    ctx.request_id.assign(given);
    ctx.stamp.request_id = seen.request_ids > 1;  // one goes as it came
  } else {
    ctx.request_id.assign(32, '0');
    random_hex(ctx.request_id.data(), ctx.request_id.size());
    ctx.stamp.request_id = true;
  }
}

// W3C Trace Context: a valid traceparent is forwarded as sent; otherwise a trace is
// started, and a tracestate is dropped with the traceparent it belonged to (3.3.1.1:
// a vendor that cannot parse traceparent must not parse tracestate). Two traceparent
// fields are invalid (3.2). True when the client's traceparent is followed.
bool follow_trace(RequestContext& ctx, const SeenFields& seen) {
  std::optional<TraceParent> given;
  if (seen.traceparents == 1) given = parse_traceparent(seen.traceparent);
  if (given) {
    ctx.trace_id.assign(given->trace_id);  // before the fields it views change
    return true;
  }
  // Started here, at its first use (ctx.trace()): the head gets it, in place of the
  // client's, when forwarded.
  auto& stamp = ctx.stamp;
  stamp.traceparents = seen.traceparents;
  stamp.tracestate = seen.tracestate;
  stamp.pending = true;
  return false;
}

// The published idempotency policy at policy.path: JSON, or a page when the client
// prefers HTML (a browser's Accept names text/html; RFC 9110 12.5.1). Generated from
// the configuration in force, so a reload republishes it.
asio::awaitable<void> send_policy(RequestContext& ctx) {
  const bool html = ctx.ex.head()[bhttp::field::accept].find("text/html") != std::string_view::npos;
  ResponseHeader head;
  head.result(bhttp::status::ok);
  head.set(bhttp::field::content_type, html ? "text/html; charset=utf-8" : "application/json");
  head.set(bhttp::field::cache_control, "max-age=300");
  head.set(bhttp::field::vary, "Accept");
  // As the admin page's: the page loads nothing, runs nothing and is framed by no one.
  head.set("X-Content-Type-Options", "nosniff");
  if (html) {
    head.set("Content-Security-Policy",
             "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    head.set("X-Frame-Options", "DENY");
    head.set("Referrer-Policy", "no-referrer");
  }
  ctx.outcome = ops::Outcome::passthrough;
  const std::string_view body = html ? ctx.settings.policy.html : ctx.settings.policy.json;
  const Trailers none;
  co_await send_answer(ctx, head, body, none);
}

// Whether `path` is the key lookup's: policy.path, then kLookupSuffix.
bool is_lookup(std::string_view policy_path, std::string_view path) {
  return !policy_path.empty() && path.size() == policy_path.size() + kLookupSuffix.size() &&
         path.starts_with(policy_path) && path.ends_with(kLookupSuffix);
}

// Answers with the problem ctx.fail() named (dispatch's way out for a refused request).
asio::awaitable<void> refuse(RequestContext& ctx) { co_await send_problem(ctx); }

// Phase: route. Decides whether the request is protected, and how, and returns what is
// left to answer it. Not a coroutine: every way out hands on to what answers, so a
// request costs no frame here. A protected request's phases share `flow`, made here.
Answering dispatch(RequestContext& ctx, std::optional<idempotent::Flow>& flow) {
  auto& head = ctx.ex.head();
  ctx.method.assign(head.method_string());
  const SeenFields seen = seen_fields(head);  // views: read before the fields change
  ctx.content_type = seen.content_type;
  ctx.grpc = engine::is_grpc_content_type(seen.content_type);
  take_request_id(ctx, seen);
  const bool traced = follow_trace(ctx, seen);
  start_request_span(ctx, traced);
  if (const auto& bad = ctx.ex.head_error()) {
    ctx.target.assign(head.target());  // for the access log, as sent
    ctx.fail(bad->kind == HeadError::Kind::too_large ? ProblemKind::header_too_large
                                                     : ProblemKind::malformed_request,
             bad->detail, ops::Outcome::bad_request);
    spdlog::info("malformed request from {}: {}", ctx.ex.peer().ip, bad->detail);
    return refuse(ctx);
  }
  // Only the proxy writes the fencing token an upstream may trust: a client's never
  // reaches an upstream, on any route or method.
  if (seen.fencing_token) head.erase(kFencingTokenHeader);
  // Routes match, the fingerprint covers, and the upstream receives one spelling
  // of the target: the one an upstream's router would resolve it to.
  const auto& server = ctx.settings.config.server;
  // Scratch of this thread, read only before the next suspension: its strings keep
  // their memory from one request to the next, whichever connection sends it.
  thread_local RequestTarget scratch;
  RequestTarget& target = scratch;
  if (const auto bad = normalize_target(
          head.target(), {server.merge_slashes, server.reject_escaped_slashes}, target)) {
    ctx.target.assign(head.target());
    ctx.fail(ProblemKind::malformed_request, std::string(*bad), ops::Outcome::bad_request);
    return refuse(ctx);
  }
  // RFC 9112 3.2.2: with an absolute-form target (HTTP/1.1 only: the HTTP/2 codec
  // refuses one, RFC 9113 §8.3.1), its authority is the Host.
  if (!target.authority.empty()) head.set(bhttp::field::host, target.authority);
  if (target.forward != head.target()) head.target(target.forward);
  ctx.target.assign(target.forward);
  const auto& published = ctx.settings.config.policy;
  if (published.url.empty() && !published.path.empty() && target.route_path == published.path &&
      ctx.method == "GET") {
    return send_policy(ctx);
  }
  if (is_lookup(published.path, target.route_path) && ctx.method == "GET") {
    return send_lookup(ctx, target.forward);
  }
  ctx.route = ctx.settings.routes.match(target.route_path);
  name_request_span(ctx);
  if (!covered(ctx)) {
    return pass_through(ctx);
  }
  const auto& route = *ctx.route;
  const auto [key_count, first_key] = lines_of(head, route.header);
  if (key_count == 0 && !route.key_json_pointer.empty()) {
    return idempotent::run(flow.emplace(ctx, std::nullopt));  // the key is in the body
  }
  if (key_count == 1) {
    // A view of the head's field: the key phase, first, takes its copy before anything
    // changes the head.
    return idempotent::run(flow.emplace(ctx, first_key));
  }
  const auto verdict =
      engine::Coordinator::judge_key(route, key_count == 0 ? KeyState::absent : KeyState::invalid);
  if (verdict.kind == KeyVerdict::Kind::forward) {
    ctx.outcome = verdict.outcome;
    return pass_through(ctx);
  }
  refuse_key(ctx, verdict, ProblemKind::bad_key, "more than one " + route.header + " header");
  return refuse(ctx);
}

void log_request(RequestContext& ctx, std::chrono::steady_clock::time_point ended) {
  if (!ops::access_log_enabled()) return;
  ops::AccessRecord r;
  r.request_id = ctx.request_id;
  r.trace_id = ctx.trace();
  r.original_trace_id = ctx.original_trace_id.view();
  r.peer = ctx.ex.peer().ip;
  r.method = ctx.method;
  r.target = ctx.target;
  r.route = ctx.route_name();
  r.outcome = ops::to_string(ctx.outcome);
  r.status = ctx.status;
  r.upstream_status = ctx.upstream_status;
  r.key_hash = ctx.key_hash.view();
  r.duration_ms = std::chrono::duration<double, std::milli>(ended - ctx.started).count();
  r.upstream_ms = ctx.upstream_ms;
  ops::log_access(r);
}

// Counts and logs a request that has ended, its span ended too.
void end_request(Runtime& rt, RequestContext& ctx, std::optional<idempotent::Flow>& flow) {
  flow.reset();  // its end hashes the key the access line and the span name
  const auto ended = std::chrono::steady_clock::now();
  rt.metrics.count_request(ctx.route_name(), ctx.outcome,
                           std::chrono::duration<double>(ended - ctx.started).count());
  log_request(ctx, ended);
  end_request_span(ctx);
}

// A request's state in the room its exchange offers (Exchange::request_room), where
// serve()'s frame would hold it: a request answered at once (a replay) then takes no
// frame at all. Ended (not freed: the room is the exchange's) whichever way it goes.
struct Held {
  Held(Exchange& e, Runtime& rt) : ctx(e, rt) {}
  RequestContext ctx;
  std::optional<idempotent::Flow> flow;
};
struct EndHeld {
  void operator()(Held* held) const { held->~Held(); }
};
using HeldRequest = std::unique_ptr<Held, EndHeld>;
// The room the HTTP/1.1 codec offers; past it, serve_now() would fall back to serve().
static_assert(sizeof(Held) <= http::kRequestRoom);

// The rest of a request that waits. What it awaits is a local, so that it ends before
// `held` (a parameter) whichever way the frame ends, as serve()'s locals do.
asio::awaitable<void> finish_held(Runtime& rt, HeldRequest held, asio::awaitable<void> rest) {
  asio::awaitable<void> waiting = std::move(rest);
  co_await std::move(waiting);
  end_request(rt, held->ctx, held->flow);
}

}  // namespace

asio::awaitable<void> Proxy::serve(Exchange& exchange) {
  RequestContext ctx(exchange, rt_);
  std::optional<idempotent::Flow> flow;
  if (Answering rest = dispatch(ctx, flow)) co_await std::move(*rest);
  end_request(rt_, ctx, flow);
}

Answering Proxy::serve_now(Exchange& exchange) {
  void* room = exchange.request_room(sizeof(Held), alignof(Held));
  if (room == nullptr) return serve(exchange);
  HeldRequest held(new (room) Held(exchange, rt_));
  Answering rest = dispatch(held->ctx, held->flow);
  if (!rest) {
    end_request(rt_, held->ctx, held->flow);
    return std::nullopt;
  }
  return finish_held(rt_, std::move(held), std::move(*rest));
}

}  // namespace idemproxy::proxy
