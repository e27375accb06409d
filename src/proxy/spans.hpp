#pragma once
// A request's spans (OpenTelemetry, exported over OTLP by src/trace): one server span
// per request, named by its method and route, with children for the store claim, the
// upstream exchange and the completion. A replay's span links to the span of the
// request that executed, whose ids the record keeps. With tracing off, each call here
// costs one branch.
#include "http/beast.hpp"
#include "idemproxy/store/record.hpp"
#include "idemproxy/trace/tracer.hpp"
#include "proxy/http_names.hpp"

namespace idemproxy::proxy {

struct RequestContext;

/// Starts ctx.span from the request's traceparent: `given` when the client sent a
/// valid one (its sampled flag decides), otherwise a root in the trace the proxy
/// started for it (ctx.trace_id, already in the logs).
void start_request_span(RequestContext& ctx, bool given);
/// Names the span by its route, once the request is routed ("POST /v1/orders").
void name_request_span(RequestContext& ctx);
/// The upstream exchange's client span. The forwarded request first gets the request's
/// ids as the route phase decided (RequestContext::Stamp: X-Request-Id, a started
/// trace's traceparent), then a traceparent whose parent is that span (Trace Context
/// 3.2), so the upstream's spans nest under it: the client's fields of those names
/// leave `forwarded`, ours go in ctx.to_upstream. Every forward calls it, once.
trace::Span start_upstream_span(RequestContext& ctx, RequestHeader& forwarded);
/// The record keeps the executing span's ids beside its trace id, for replays to link to.
void keep_span_ids(const RequestContext& ctx, store::StoredResponse& answer);
/// A replay's span links to the executing request's span (records written before
/// spans were kept have none).
void link_to_executing(RequestContext& ctx, const store::StoredResponse& stored);
/// Sets the outcome, status and key hash, and ends the span (it goes to the exporter).
void end_request_span(RequestContext& ctx);

}  // namespace idemproxy::proxy
