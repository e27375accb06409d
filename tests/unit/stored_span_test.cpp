// The executing request's span ids, as a stored response keeps them for a replay's link.
#include <gtest/gtest.h>

#include "idemproxy/store/store.hpp"

using namespace idemproxy::store;

TEST(StoredSpan, ARecordWithBothIdsYieldsThem) {
  const StoredResponse stored{201,
                              {{"Content-Type", "application/json"},
                               {std::string(kTraceIdEntry), "4bf92f3577b34da6a3ce929d0e0e4736"},
                               {std::string(kSpanIdEntry), "00f067aa0ba902b7"}},
                              "{}"};
  const auto span = executing_span(stored);
  ASSERT_TRUE(span);
  EXPECT_EQ(span->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(span->span_id, "00f067aa0ba902b7");
}

// Records written before spans were recorded keep a trace id only; older ones nothing.
TEST(StoredSpan, ARecordWithoutTheSpanIdYieldsNone) {
  const StoredResponse trace_only{
      201, {{std::string(kTraceIdEntry), "4bf92f3577b34da6a3ce929d0e0e4736"}}, "{}"};
  EXPECT_FALSE(executing_span(trace_only));
  EXPECT_FALSE(executing_span(StoredResponse{200, {{"Content-Type", "text/plain"}}, "ok"}));
  const StoredResponse empty_span{201,
                                  {{std::string(kTraceIdEntry), "4bf92f3577b34da6a3ce929d0e0e4736"},
                                   {std::string(kSpanIdEntry), ""}},
                                  "{}"};
  EXPECT_FALSE(executing_span(empty_span));
}
