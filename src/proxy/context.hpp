#pragma once
// The context one request carries through the proxy's phases, whatever its protocol:
// the exchange its codec made, the runtime every request shares, and what the
// phases learn on the way.
#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>
#include <string>

#include "http/exchange.hpp"
#include "http/problem.hpp"
#include "http/trace_context.hpp"
#include "idemproxy/common/inline_string.hpp"
#include "idemproxy/common/sha256.hpp"
#include "idemproxy/ops/logging.hpp"
#include "idemproxy/trace/span.hpp"
#include "proxy/http_names.hpp"
#include "proxy/runtime.hpp"
#include "upstream/call.hpp"

namespace idemproxy::proxy {

struct RequestContext {
  RequestContext(Exchange& e, Runtime& r)
      : ex(e),
        rt(r),
        settings(e.settings()),
        target(reuse(e.kept().target)),
        request_id(reuse(e.kept().request_id)),
        trace_id(reuse(e.kept().trace_id)),
        started(e.started()) {}
  ~RequestContext() {
    ex.kept().target = std::move(target);
    ex.kept().request_id = std::move(request_id);
    ex.kept().trace_id = std::move(trace_id);
  }
  RequestContext(const RequestContext&) = delete;
  RequestContext& operator=(const RequestContext&) = delete;

  Exchange& ex;
  Runtime& rt;
  const Settings& settings;  // the exchange's snapshot, for the whole request
  const engine::RoutePolicy* route = nullptr;
  ops::Outcome outcome = ops::Outcome::passthrough;
  unsigned status = 0;
  std::string method;
  std::string target;
  std::string request_id;              // X-Request-Id: the client's, or one made here
  std::string trace_id;                // traceparent's trace id: read it through trace()
  InlineString<32> original_trace_id;  // a replay's: the trace id of the request that executed
  unsigned upstream_status = 0;
  double upstream_ms = 0;
  /// The request's idempotency key while its Flow lives (intake's take_key); null
  /// before and after.
  const std::string* key = nullptr;
  InlineString<16> key_hash;  // logged instead of the key: made by key_digest()
  /// The head's first Content-Type value, found by the route phase's walk over the
  /// fields: a view of the head's own field, which no phase erases.
  std::string_view content_type;
  /// A gRPC call (content-type application/grpc…), decided once: refusals are gRPC
  /// statuses, answers keep their trailers, grpc-timeout bounds the upstream.
  bool grpc = false;
  /// The client sent `te: trailers` (prepare_forward found it; the upstream's codec
  /// decides what goes on).
  bool te_trailers = false;
  /// The fields the proxy adds to the request it forwards (X-Forwarded-*, its
  /// framing, its ids), sent after the head's own (prepare_forward, frame_request,
  /// start_upstream_span): a request forwarded again finds them here.
  ExtraFields to_upstream;
  std::chrono::steady_clock::time_point started;
  trace::Span span;  // the request's server span (proxy/spans.hpp); null without tracing
  /// What the head needs of the ids above before it goes upstream: decided by the route
  /// phase, written by start_upstream_span, so that a request answered here (a
  /// replay, a refusal) spends no field edits on a head never forwarded.
  struct Stamp {
    int request_ids = 0;      // X-Request-Id fields the client sent
    bool request_id = false;  // request_id goes upstream in their place
    int traceparents = 0;     // traceparent fields the client sent
    bool tracestate = false;  // and a tracestate
    bool started = false;     // `traceparent`, a trace started here, goes in their place
    bool pending = false;     // a trace is to start here, at its first use (trace())
    http::StartedTrace traceparent{};
  } stamp;

  std::optional<ProxyError> error;  // set by fail(); sent by send_problem()

  /// Records why the request fails; send_problem() then answers with it.
  /// (Errors travel in the context rather than as temporaries inside co_await
  /// expressions, which GCC 12 miscompiles.)
  void fail(ProblemKind kind, std::string detail, ops::Outcome why,
            std::optional<int> retry_after = std::nullopt) {
    error = ProxyError{kind, std::move(detail), retry_after, std::nullopt};
    outcome = why;
  }
  void fail(const ProxyError& e, ops::Outcome why) {
    error = e;
    outcome = why;
  }

  /// The request's trace id: the client's, or one started here at the first read, so
  /// that a request no log line, span, record or forward names starts none (its 48
  /// random digits were 2 % of a replay's instructions).
  const std::string& trace() {
    if (stamp.pending) {
      stamp.pending = false;
      stamp.started = true;
      trace_id.assign(http::start_trace(stamp.traceparent).trace_id);
    }
    return trace_id;
  }

  /// Logs an event of this request; the line carries its trace id.
  template <class... Args>
  void log(spdlog::level::level_enum level, spdlog::format_string_t<Args...> format,
           Args&&... args) {
    if (!spdlog::should_log(level)) return;
    const ops::TraceTag tag(trace());
    spdlog::log(level, format, std::forward<Args>(args)...);
  }

  /// The key as logs and spans name it, its SHA-256's first 16 hex digits: made at
  /// the first read, so a request that no log line, access line or span names never
  /// hashes its key (2.7 % of a replay's CPU under `log.level: warn`); empty without
  /// a key.
  std::string_view key_digest() {
    if (key_hash.empty() && key != nullptr) key_hash = sha256_hex16(*key);
    return key_hash.view();
  }

  /// A kept string's memory, emptied.
  static std::string reuse(std::string& kept) {
    std::string s = std::move(kept);
    s.clear();
    return s;
  }

  const std::string& route_name() const {
    static const std::string none = "-";
    return route ? route->name : none;
  }
};

/// Sends a whole answer: X-Request-Id added, the status noted for the log.
asio::awaitable<bool> send_answer(RequestContext& ctx, ResponseHeader& head, std::string_view body,
                                  Trailers trailers);
/// Sends ctx.error as a problem (a gRPC status to a gRPC client).
asio::awaitable<bool> send_problem(RequestContext& ctx);
/// Whether an enabled route covers this request's method: its rules apply, whether
/// or not the request carries a key.
bool covered(const RequestContext& ctx);

/// Refuses a covered request for its key, as engine::Coordinator::judge_key decided
/// (refuse): a missing key is told where a key may go (the route's header, and the
/// body when the route reads keys from it); an unusable one is `unusable` (two key
/// fields, or a body key that is no usable string), with `why`.
void refuse_key(RequestContext& ctx, const engine::KeyVerdict& verdict, ProblemKind unusable,
                std::string why);
/// The published policy's Link field value (`<...>; rel="describedby"`) for this
/// request's problems and stored answers: "" unless a route covers it, a policy is
/// published, and the client is not gRPC (whose metadata it would clutter).
std::string_view policy_link(const RequestContext& ctx);

/// Streams an upstream answer to the client: its head (read by `call`), `prefix`
/// (body bytes already read), then the rest. False when the answer did not go out
/// whole.
asio::awaitable<bool> stream_response(RequestContext& ctx, upstream::UpstreamCall& call,
                                      std::string_view prefix);
/// Streams a request no route protects to the upstream and the answer back.
asio::awaitable<void> pass_through(RequestContext& ctx);
/// What is left to answer a request: nothing when it was answered at once (a warm
/// replay, most of the time), so that such a request makes no coroutine frame for it.
using Answering = std::optional<asio::awaitable<void>>;

}  // namespace idemproxy::proxy
