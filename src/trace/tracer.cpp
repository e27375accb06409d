// Parent-based sampling and the request's server span.
#include "idemproxy/trace/tracer.hpp"

#include <string>

namespace idemproxy::trace {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

void Tracer::set_sample_ratio(double ratio) {
  ratio_.store(ratio < 0 ? 0 : (ratio > 1 ? 1 : ratio), std::memory_order_relaxed);
}

double Tracer::sample_ratio() const { return ratio_.load(std::memory_order_relaxed); }

Span Tracer::start_request_span_on(const Incoming& incoming, std::string_view method,
                                   std::string_view route) const {
  SpanContext context;
  SpanId parent{};
  const auto trace_id = parse_trace_id(incoming.trace_id);
  const auto parent_id = parse_span_id(incoming.parent_id);
  // Bit 0 of trace-flags is "sampled" (Trace Context 3.2.2.5): the low hex digit's.
  const int low = incoming.flags.size() == 2 ? hex_value(incoming.flags[1]) : -1;
  if (trace_id && parent_id && low >= 0) {
    // A remote parent: follow its decision.
    context.trace_id = *trace_id;
    context.sampled = (low & 1) != 0;
    parent = *parent_id;
  } else {
    // A root: in the trace the proxy started (its id is already in the logs), or a new one.
    context.trace_id = trace_id ? *trace_id : random_trace_id();
    context.sampled = sampled_by_ratio(context.trace_id, sample_ratio());
  }
  context.span_id = random_span_id();
  if (!context.sampled) return Span{context};
  auto data = std::make_unique<SpanData>();
  data->context = context;
  data->parent_span_id = parent;
  data->kind = SpanKind::server;
  data->start_unix_nanos = unix_nanos_now();
  data->name.reserve(method.size() + 1 + route.size());
  data->name.append(method);
  if (!route.empty()) data->name.append(" ").append(route);
  Span span{std::move(data), *sink_};
  span.set_string(kHttpRequestMethod, method);
  if (!route.empty()) span.set_string(kHttpRoute, route);
  return span;
}

void set_protocol(Span& span, std::string_view version) {
  span.set_string(kNetworkProtocolName, "http");
  span.set_string(kNetworkProtocolVersion, version);
}

void set_server_address(Span& span, std::string_view host, int port) {
  span.set_string(kServerAddress, host);
  if (port > 0) span.set_int(kServerPort, port);
}

void set_client_address(Span& span, std::string_view address) {
  span.set_string(kClientAddress, address);
}

void set_outcome(Span& span, std::string_view outcome) {
  span.set_string(kIdempotencyOutcome, outcome);
}

void set_key_hash(Span& span, std::string_view hash) { span.set_string(kIdempotencyKeyHash, hash); }

}  // namespace idemproxy::trace
