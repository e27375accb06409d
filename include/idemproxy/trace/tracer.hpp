#pragma once
// Starts spans and decides which are sampled. Parent-based: a request whose valid
// traceparent is sampled is always recorded, one whose traceparent is not sampled
// never is, and a root (no traceparent, or an invalid one) is recorded with
// probability tracing.sample_ratio, decided from its trace id as OpenTelemetry's
// TraceIdRatioBased sampler does, so every process judging that id agrees.
//
// What the proxy calls, phase by phase (nothing here knows HTTP plumbing):
//
//   intake:      trace::Span span = tracer.start_request_span(
//                    {tp.trace_id, tp.parent_id, tp.flags}, method, route.path_prefix);
//                  (for a started trace: {trace_id, "", ""}; for no route: route "")
//                set_protocol(span, "1.1" | "2"); set_server_address(span, host, port);
//                set_client_address(span, peer); set_key_hash(span, ctx.key_hash);
//   claim:       { trace::Span claim = span.child(kSpanStoreClaim); ...store call...
//                  if (failed) claim.set_error("store unreachable"); }   // ends at scope exit
//   replay:      if (auto link = trace::context_from_hex(stored_trace, stored_span))
//                  span.add_link(*link);
//   upstream:    trace::Span up = span.child(kSpanUpstream, SpanKind::client);
//                  forward traceparent: if (up.context().valid()) write_traceparent(up.context(),
//                  ...) else forward today's value. up.set_http_status(answer status);
//   completion:  { trace::Span done = span.child(kSpanStoreComplete); ... }
//   record:      store span.context()'s ids with the record (store::kTraceIdEntry,
//                store::kSpanIdEntry) when span.context().valid().
//   answer:      set_outcome(span, ops::to_string(outcome)); span.set_http_status(status);
//                span.end() (or let it go out of scope).
#include <atomic>
#include <cstdint>
#include <string_view>

#include "idemproxy/trace/span.hpp"

namespace idemproxy::trace {

/// What a request brought, as hex views: a valid traceparent's trace id, parent id and
/// flags; or only the trace id the proxy started for it (parent_id and flags empty).
/// An invalid trace_id makes the span a root of a new trace.
struct Incoming {
  std::string_view trace_id;
  std::string_view parent_id;
  std::string_view flags;
};

/// The root sampling decision for `trace_id` at `ratio`: its rightmost 56 bits
/// (W3C Trace Context level 2's random part) against ratio * 2^56.
bool sampled_by_ratio(const TraceId& trace_id, double ratio);

/// A random id, never all zero, from a per-thread generator.
TraceId random_trace_id();
SpanId random_span_id();

class Tracer {
 public:
  /// Off: every span it starts is the null span, at the cost of one branch.
  Tracer() = default;
  /// On: sampled spans go to `sink`, which must outlive the tracer and its spans.
  /// A null `sink` makes the tracer off.
  Tracer(SpanSink* sink, double sample_ratio) : sink_(sink) { set_sample_ratio(sample_ratio); }
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  bool enabled() const { return sink_ != nullptr; }
  /// tracing.sample_ratio, reloadable: roots started after this call use it.
  void set_sample_ratio(double ratio);
  double sample_ratio() const;

  /// The request's server span, named "METHOD ROUTE" ("METHOD" without a route, as the
  /// HTTP semantic conventions name it), with http.request.method and http.route set.
  Span start_request_span(const Incoming& incoming, std::string_view method,
                          std::string_view route) const {
    if (sink_ == nullptr) return Span{};  // tracing off: nothing to record or allocate
    return start_request_span_on(incoming, method, route);
  }

 private:
  Span start_request_span_on(const Incoming& incoming, std::string_view method,
                             std::string_view route) const;

  SpanSink* sink_ = nullptr;
  std::atomic<double> ratio_{1.0};
};

// Span names for the request's children.
inline constexpr std::string_view kSpanStoreClaim = "idempotency claim";
inline constexpr std::string_view kSpanUpstream = "upstream";
inline constexpr std::string_view kSpanStoreComplete = "idempotency complete";
/// A streamed answer's body, from its head to its end: relayed and stored as it flows.
inline constexpr std::string_view kSpanStream = "idempotency stream";

// Attributes: the OpenTelemetry HTTP semantic conventions (stable since v1.23), and
// idemproxy's own under idempotency.*.
inline constexpr std::string_view kHttpRequestMethod = "http.request.method";
inline constexpr std::string_view kHttpRoute = "http.route";
inline constexpr std::string_view kHttpResponseStatusCode = "http.response.status_code";
inline constexpr std::string_view kNetworkProtocolName = "network.protocol.name";
inline constexpr std::string_view kNetworkProtocolVersion = "network.protocol.version";
inline constexpr std::string_view kServerAddress = "server.address";
inline constexpr std::string_view kServerPort = "server.port";
inline constexpr std::string_view kClientAddress = "client.address";
inline constexpr std::string_view kErrorType = "error.type";
inline constexpr std::string_view kIdempotencyOutcome = "idempotency.outcome";
inline constexpr std::string_view kIdempotencyKeyHash = "idempotency.key_hash";
inline constexpr std::string_view kIdempotencyStreamBytes = "idempotency.stream.bytes";
inline constexpr std::string_view kIdempotencyStreamChunks = "idempotency.stream.chunks";

/// network.protocol.name "http" and network.protocol.version ("1.1", "2").
void set_protocol(Span& span, std::string_view version);
/// server.address and server.port: the Host the client named.
void set_server_address(Span& span, std::string_view host, int port);
/// client.address: the peer's address.
void set_client_address(Span& span, std::string_view address);
/// idempotency.outcome: ops::to_string(Outcome), e.g. executed, replayed, mismatch.
void set_outcome(Span& span, std::string_view outcome);
/// idempotency.key_hash: the hash the access log names the key by; never the key.
void set_key_hash(Span& span, std::string_view hash);

}  // namespace idemproxy::trace
