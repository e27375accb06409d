#include "proxy/spans.hpp"

#include <charconv>

#include "http/trace_context.hpp"
#include "proxy/context.hpp"

namespace idemproxy::proxy {

void start_request_span(RequestContext& ctx, bool given) {
  const trace::Tracer* tracer = ctx.rt.tracer;
  if (tracer == nullptr || !tracer->enabled()) return;
  auto& head = ctx.ex.head();
  trace::Incoming incoming{ctx.trace(), {}, {}};
  std::optional<TraceParent> parent;
  if (given) parent = parse_traceparent(head["traceparent"]);
  if (parent) incoming = {parent->trace_id, parent->parent_id, parent->flags};
  ctx.span = tracer->start_request_span(incoming, ctx.method, {});
  if (!ctx.span.recording()) return;
  // network.protocol.version: the version the client spoke, HTTP/1.0 included.
  const Protocol spoken = ctx.ex.protocol();
  trace::set_protocol(ctx.span, spoken == Protocol::http2    ? "2"
                                : spoken == Protocol::http10 ? "1.0"
                                                             : "1.1");
  // server.address and server.port: the authority the client named (Host or :authority).
  const std::string_view host = head[bhttp::field::host];
  const auto colon = host.rfind(':');
  int port = 0;
  if (colon != std::string_view::npos && host.find(']', colon) == std::string_view::npos) {
    std::from_chars(host.data() + colon + 1, host.data() + host.size(), port);
  }
  const bool has_port = port > 0 && colon != std::string_view::npos;
  const auto name = has_port ? host.substr(0, colon) : host;
  const int default_port = ctx.ex.peer().secure ? 443 : 80;
  trace::set_server_address(ctx.span, name, has_port ? port : default_port);
  trace::set_client_address(ctx.span, ctx.ex.peer().ip);
}

void name_request_span(RequestContext& ctx) {
  if (!ctx.span.recording() || ctx.route == nullptr) return;
  const std::string& route = ctx.route->path_prefix;
  std::string name;
  name.reserve(ctx.method.size() + 1 + route.size());
  name.append(ctx.method).append(" ").append(route);
  ctx.span.set_name(name);
  ctx.span.set_string(trace::kHttpRoute, route);
}

namespace {
// The ids the route phase decided (RequestContext::Stamp) into the forwarded request,
// once: the client's fields of those names out of its head, ours into the fields
// added (ctx.to_upstream), where a second forward of the same request finds them.
void stamp_ids(RequestContext& ctx, RequestHeader& forwarded) {
  ctx.trace();  // a trace to start here starts now: the forward names it
  auto& stamp = ctx.stamp;
  if (stamp.request_id) {
    if (stamp.request_ids > 0) forwarded.erase("X-Request-Id");
    ctx.to_upstream.add("X-Request-Id", ctx.request_id);
    stamp.request_id = false;
  }
  if (stamp.started) {
    if (stamp.traceparents > 0) forwarded.erase("traceparent");
    if (stamp.tracestate) forwarded.erase("tracestate");
    ctx.to_upstream.add("traceparent",
                        std::string_view(stamp.traceparent.data(), stamp.traceparent.size()));
    stamp.started = false;
  }
}
}  // namespace

trace::Span start_upstream_span(RequestContext& ctx, RequestHeader& forwarded) {
  stamp_ids(ctx, forwarded);
  trace::Span up = ctx.span.child(trace::kSpanUpstream, trace::SpanKind::client);
  if (up.context().valid()) {
    // The upstream span is the parent the upstream sees, in place of the client's.
    trace::TraceParentText text;
    trace::write_traceparent(up.context(), text);
    forwarded.erase("traceparent");
    ctx.to_upstream.erase("traceparent");
    ctx.to_upstream.add_copy("traceparent", std::string_view(text.data(), text.size()));
  }
  return up;
}

void keep_span_ids(const RequestContext& ctx, store::StoredResponse& answer) {
  if (!ctx.span.context().valid()) return;
  answer.headers.push_back(
      {std::string(store::kSpanIdEntry), trace::to_hex(ctx.span.context().span_id)});
}

void link_to_executing(RequestContext& ctx, const store::StoredResponse& stored) {
  if (!ctx.span.recording()) return;
  const auto ids = store::executing_span(stored);
  if (!ids) return;
  if (const auto link = trace::context_from_hex(ids->trace_id, ids->span_id)) {
    ctx.span.add_link(*link);
  }
}

void end_request_span(RequestContext& ctx) {
  if (!ctx.span.recording()) return;
  trace::set_outcome(ctx.span, ops::to_string(ctx.outcome));
  if (!ctx.key_hash.empty()) trace::set_key_hash(ctx.span, ctx.key_hash.view());
  if (ctx.status != 0) ctx.span.set_http_status(static_cast<int>(ctx.status));
  ctx.span.end();
}

}  // namespace idemproxy::proxy
