// Spans: structure, attributes, status, links; and the null path, which allocates nothing.
#include <gtest/gtest.h>

#include "alloc_counter.hpp"
#include "fake_sink.hpp"
#include "idemproxy/trace/tracer.hpp"

using namespace idemproxy::trace;
using idemproxy::trace::testing::CountAllocations;
using idemproxy::trace::testing::FakeSink;

namespace {

const AttributeValue* find(const SpanData& s, std::string_view key) {
  for (const auto& a : s.attributes) {
    if (a.key == key) return &a.value;
  }
  return nullptr;
}

}  // namespace

TEST(Span, ARequestSpanAndItsChildrenShareTheTraceAndNameTheirParent) {
  FakeSink sink;
  const Tracer tracer(&sink, 1.0);
  {
    Span request = tracer.start_request_span({"", "", ""}, "POST", "/v1/orders");
    set_protocol(request, "1.1");
    set_server_address(request, "api.example.com", 8080);
    set_client_address(request, "10.0.0.7");
    set_key_hash(request, "9f86d081884c7d65");
    { Span claim = request.child(kSpanStoreClaim); }  // ends at scope exit
    Span upstream = request.child(kSpanUpstream, SpanKind::client);
    upstream.set_http_status(201);
    upstream.end();
    upstream.end();  // a second end does nothing
    set_outcome(request, "executed");
    request.set_http_status(201);
  }
  ASSERT_EQ(sink.spans.size(), 3U);
  const SpanData& claim = *sink.spans[0];
  const SpanData& upstream = *sink.spans[1];
  const SpanData& request = *sink.spans[2];
  EXPECT_EQ(request.name, "POST /v1/orders");
  EXPECT_EQ(request.kind, SpanKind::server);
  EXPECT_EQ(claim.name, kSpanStoreClaim);
  EXPECT_EQ(claim.kind, SpanKind::internal);
  EXPECT_EQ(upstream.kind, SpanKind::client);
  for (const SpanData* child : {&claim, &upstream}) {
    EXPECT_EQ(child->context.trace_id, request.context.trace_id);
    EXPECT_EQ(child->parent_span_id, request.context.span_id);
    EXPECT_NE(child->context.span_id, request.context.span_id);
    EXPECT_GE(child->start_unix_nanos, request.start_unix_nanos);
    EXPECT_LE(child->end_unix_nanos, request.end_unix_nanos);
  }
  EXPECT_NE(claim.context.span_id, upstream.context.span_id);
  EXPECT_EQ(std::get<std::string>(*find(request, kHttpRequestMethod)), "POST");
  EXPECT_EQ(std::get<std::string>(*find(request, kHttpRoute)), "/v1/orders");
  EXPECT_EQ(std::get<std::string>(*find(request, kNetworkProtocolName)), "http");
  EXPECT_EQ(std::get<std::string>(*find(request, kNetworkProtocolVersion)), "1.1");
  EXPECT_EQ(std::get<std::string>(*find(request, kServerAddress)), "api.example.com");
  EXPECT_EQ(std::get<std::int64_t>(*find(request, kServerPort)), 8080);
  EXPECT_EQ(std::get<std::string>(*find(request, kClientAddress)), "10.0.0.7");
  EXPECT_EQ(std::get<std::string>(*find(request, kIdempotencyKeyHash)), "9f86d081884c7d65");
  EXPECT_EQ(std::get<std::string>(*find(request, kIdempotencyOutcome)), "executed");
  EXPECT_EQ(std::get<std::int64_t>(*find(request, kHttpResponseStatusCode)), 201);
  EXPECT_EQ(request.status, StatusCode::unset);
}

TEST(Span, WithoutARouteTheNameIsTheMethod) {
  FakeSink sink;
  const Tracer tracer(&sink, 1.0);
  tracer.start_request_span({"", "", ""}, "GET", "").end();
  ASSERT_EQ(sink.spans.size(), 1U);
  EXPECT_EQ(sink.spans[0]->name, "GET");
  EXPECT_EQ(find(*sink.spans[0], kHttpRoute), nullptr);
}

// HTTP semantic conventions, "Status": 4xx is the client's error on a server span.
TEST(Span, HttpStatusMarksServerSpansFailedOn5xxAndClientSpansOn4xx) {
  FakeSink sink;
  const Tracer tracer(&sink, 1.0);
  Span server = tracer.start_request_span({"", "", ""}, "POST", "/a");
  Span client404 = server.child(kSpanUpstream, SpanKind::client);
  client404.set_http_status(404);
  client404.end();
  server.set_http_status(404);
  EXPECT_TRUE(server.recording());
  server.end();
  Span server503 = tracer.start_request_span({"", "", ""}, "POST", "/a");
  server503.set_http_status(503);
  server503.end();
  Span unreachable = tracer.start_request_span({"", "", ""}, "POST", "/a");
  unreachable.set_error("upstream unreachable");
  unreachable.end();
  ASSERT_EQ(sink.spans.size(), 4U);
  EXPECT_EQ(sink.spans[0]->status, StatusCode::error);
  EXPECT_EQ(std::get<std::string>(*find(*sink.spans[0], kErrorType)), "404");
  EXPECT_EQ(sink.spans[1]->status, StatusCode::unset);
  EXPECT_EQ(find(*sink.spans[1], kErrorType), nullptr);
  EXPECT_EQ(sink.spans[2]->status, StatusCode::error);
  EXPECT_EQ(sink.spans[3]->status, StatusCode::error);
  EXPECT_EQ(sink.spans[3]->status_message, "upstream unreachable");
}

TEST(Span, AttributesOfEveryTypeAndLinks) {
  FakeSink sink;
  const Tracer tracer(&sink, 1.0);
  Span span = tracer.start_request_span({"", "", ""}, "POST", "/a");
  span.set_int("n", -7);
  span.set_bool("b", false);
  span.set_double("d", 0.5);
  span.set_string("s", "one");
  span.set_string("s", "two");  // replaces
  const auto executed = context_from_hex("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
  span.add_link(*executed);
  const SpanContext ids = span.context();
  Span moved = std::move(span);
  EXPECT_FALSE(span.recording());  // NOLINT(bugprone-use-after-move): the moved-from is inert
  moved.end();
  ASSERT_EQ(sink.spans.size(), 1U);
  const SpanData& s = *sink.spans[0];
  EXPECT_EQ(s.context.span_id, ids.span_id);
  EXPECT_EQ(std::get<std::int64_t>(*find(s, "n")), -7);
  EXPECT_EQ(std::get<bool>(*find(s, "b")), false);
  EXPECT_EQ(std::get<double>(*find(s, "d")), 0.5);
  EXPECT_EQ(std::get<std::string>(*find(s, "s")), "two");
  ASSERT_EQ(s.links.size(), 1U);
  EXPECT_EQ(to_hex(s.links[0].trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(to_hex(s.links[0].span_id), "00f067aa0ba902b7");
}

// Tracing off: a request's whole life of span calls allocates nothing and records
// nothing; its context has no ids, so the proxy forwards the traceparent as today.
TEST(NullTracer, ARequestsSpanCallsAllocateNothing) {
  const Tracer off;
  ASSERT_FALSE(off.enabled());
  std::size_t allocations = 0;
  {
    const CountAllocations counter;
    Span span = off.start_request_span(
        {"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", "01"}, "POST", "/v1/orders");
    set_protocol(span, "2");
    set_server_address(span, "api.example.com", 443);
    set_client_address(span, "10.0.0.7");
    set_key_hash(span, "9f86d081884c7d65");
    { Span claim = span.child(kSpanStoreClaim); }
    Span upstream = span.child(kSpanUpstream, SpanKind::client);
    upstream.set_http_status(503);
    upstream.set_error("reset");
    upstream.end();
    span.add_link(SpanContext{});
    set_outcome(span, "replayed");
    span.set_http_status(200);
    EXPECT_FALSE(span.recording());
    EXPECT_FALSE(span.context().valid());
    EXPECT_FALSE(upstream.context().valid());
    span.end();
    allocations = counter.count();
  }
  EXPECT_EQ(allocations, 0U);
}

// Tracing on, trace not sampled: ids to forward, still no allocation.
TEST(NullTracer, AnUnsampledRequestAllocatesNothingEither) {
  FakeSink sink;
  const Tracer tracer(&sink, 0.0);
  random_span_id();  // the thread's generator is made once per thread, before counting
  std::size_t allocations = 0;
  {
    const CountAllocations counter;
    Span span = tracer.start_request_span({"4bf92f3577b34da6a3ce929d0e0e4736", "", ""}, "POST",
                                          "/v1/orders");
    Span upstream = span.child(kSpanUpstream, SpanKind::client);
    set_outcome(span, "executed");
    upstream.set_http_status(201);
    EXPECT_TRUE(upstream.context().valid());
    allocations = counter.count();
  }
  EXPECT_EQ(allocations, 0U);
  EXPECT_TRUE(sink.spans.empty());
}
