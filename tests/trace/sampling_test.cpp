// Ids and the sampling decision: parent-based, with a ratio for roots.
#include <gtest/gtest.h>

#include <set>

#include "fake_sink.hpp"
#include "idemproxy/trace/tracer.hpp"

using namespace idemproxy::trace;
using idemproxy::trace::testing::FakeSink;

namespace {

constexpr std::string_view kTrace = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr std::string_view kParent = "00f067aa0ba902b7";

}  // namespace

TEST(TraceIds, ParseOnlyLowercaseHexOfTheRightLengthNotAllZero) {
  const auto id = parse_trace_id(kTrace);
  ASSERT_TRUE(id);
  EXPECT_EQ(to_hex(*id), kTrace);
  EXPECT_EQ((*id)[0], 0x4b);
  EXPECT_FALSE(parse_trace_id("4BF92F3577B34DA6A3CE929D0E0E4736"));  // 3.2.2.3: lowercase
  EXPECT_FALSE(parse_trace_id(kTrace.substr(1)));
  EXPECT_FALSE(parse_trace_id(std::string(32, '0')));
  EXPECT_FALSE(parse_trace_id("4bf92f3577b34da6a3ce929d0e0e473g"));
  EXPECT_TRUE(parse_span_id(kParent));
  EXPECT_FALSE(parse_span_id(std::string(16, '0')));
  EXPECT_FALSE(context_from_hex(kTrace, "xyz"));
  EXPECT_TRUE(context_from_hex(kTrace, kParent)->valid());
}

TEST(TraceIds, RandomIdsAreNonZeroAndDistinct) {
  std::set<std::string> traces;
  std::set<std::string> spans;
  for (int i = 0; i < 10000; ++i) {
    const auto t = random_trace_id();
    const auto s = random_span_id();
    EXPECT_TRUE(is_valid(t));
    EXPECT_TRUE(is_valid(s));
    traces.insert(to_hex(t));
    spans.insert(to_hex(s));
  }
  EXPECT_EQ(traces.size(), 10000U);
  EXPECT_EQ(spans.size(), 10000U);
}

TEST(TraceIds, TraceparentIsVersion00WithTheSampledFlag) {
  SpanContext c{*parse_trace_id(kTrace), *parse_span_id(kParent), true};
  TraceParentText text{};
  write_traceparent(c, text);
  EXPECT_EQ(std::string_view(text.data(), text.size()),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  c.sampled = false;
  write_traceparent(c, text);
  EXPECT_EQ(std::string_view(text.data(), text.size()).substr(52), "-00");
}

TEST(Sampling, RatioDecidesRootsByTheirTraceIdAlone) {
  int sampled = 0;
  constexpr int kRoots = 40000;
  for (int i = 0; i < kRoots; ++i) {
    const auto id = random_trace_id();
    const bool at_quarter = sampled_by_ratio(id, 0.25);
    EXPECT_EQ(at_quarter, sampled_by_ratio(id, 0.25));  // every process agrees
    if (at_quarter) {
      EXPECT_TRUE(sampled_by_ratio(id, 0.5));  // a higher ratio keeps it
    }
    EXPECT_TRUE(sampled_by_ratio(id, 1.0));
    EXPECT_FALSE(sampled_by_ratio(id, 0.0));
    sampled += at_quarter ? 1 : 0;
  }
  // 0.25 of 40000 is 10000, standard deviation about 87: 5 sigma either side.
  EXPECT_NEAR(sampled, kRoots / 4, 450);
}

TEST(Sampling, ASampledParentIsAlwaysFollowed) {
  FakeSink sink;
  const Tracer tracer(&sink, 0.0);  // no root would be sampled
  Span span = tracer.start_request_span({kTrace, kParent, "01"}, "POST", "/v1/orders");
  ASSERT_TRUE(span.recording());
  EXPECT_EQ(to_hex(span.context().trace_id), kTrace);
  EXPECT_NE(to_hex(span.context().span_id), kParent);  // a span of its own
  EXPECT_TRUE(span.context().sampled);
  span.end();
  ASSERT_EQ(sink.spans.size(), 1U);
  EXPECT_EQ(to_hex(sink.spans[0]->parent_span_id), kParent);
  // Bit 0 decides; other flag bits are not "sampled".
  EXPECT_TRUE(tracer.start_request_span({kTrace, kParent, "03"}, "GET", "").recording());
}

TEST(Sampling, AnUnsampledParentIsNeverRecordedButKeepsItsTrace) {
  FakeSink sink;
  const Tracer tracer(&sink, 1.0);
  Span span = tracer.start_request_span({kTrace, kParent, "00"}, "POST", "/v1/orders");
  EXPECT_FALSE(span.recording());
  ASSERT_TRUE(span.context().valid());  // ids to forward all the same
  EXPECT_EQ(to_hex(span.context().trace_id), kTrace);
  EXPECT_FALSE(span.context().sampled);
  EXPECT_FALSE(tracer.start_request_span({kTrace, kParent, "02"}, "GET", "").recording());
  Span child = span.child(kSpanUpstream, SpanKind::client);
  EXPECT_FALSE(child.recording());
  EXPECT_EQ(child.context().trace_id, span.context().trace_id);
  span.end();
  EXPECT_TRUE(sink.spans.empty());
}

TEST(Sampling, RootsFollowTheRatioInTheTraceTheProxyStarted) {
  FakeSink sink;
  Tracer tracer(&sink, 1.0);
  Span root = tracer.start_request_span({kTrace, "", ""}, "POST", "/v1/orders");
  ASSERT_TRUE(root.recording());
  EXPECT_EQ(to_hex(root.context().trace_id), kTrace);  // the id already in the logs
  // No usable traceparent at all: a new trace.
  Span fresh = tracer.start_request_span({"", "", ""}, "POST", "");
  ASSERT_TRUE(fresh.recording());
  EXPECT_NE(to_hex(fresh.context().trace_id), kTrace);
  root.end();
  fresh.end();
  ASSERT_EQ(sink.spans.size(), 2U);
  EXPECT_FALSE(is_valid(sink.spans[0]->parent_span_id));
  // An invalid parent id makes it a root too, in the given trace.
  EXPECT_EQ(to_hex(tracer.start_request_span({kTrace, "zz", "01"}, "GET", "").context().trace_id),
            kTrace);
  ASSERT_EQ(sink.spans.size(), 3U);
  EXPECT_FALSE(is_valid(sink.spans[2]->parent_span_id));
  // A reload to 0: new roots are no longer recorded; sampled parents still are.
  tracer.set_sample_ratio(0.0);
  EXPECT_EQ(tracer.sample_ratio(), 0.0);
  EXPECT_FALSE(tracer.start_request_span({kTrace, "", ""}, "POST", "").recording());
  EXPECT_TRUE(tracer.start_request_span({kTrace, kParent, "01"}, "POST", "").recording());
}
