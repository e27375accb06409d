// Streamed answers on a covered route, over both codecs, in this process: recorded
// once they end and replayed whole; upstream.timeout bounds only the head, so a
// stream may outlast it; a gap past upstream.read_timeout, or an upstream that cuts
// the stream, ends the client's stream as an error and leaves the record
// indeterminate. (When each piece reaches the client is the pump's tests' to show.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "world.hpp"

namespace idemproxy::testing {
namespace {

using namespace std::chrono_literals;

const char* kConfig = R"(store: {memory: {}}
routes:
  - {name: events, path_prefix: /v1/events}
)";

Request keyed(std::string key) {
  return {"POST",
          "/v1/events",
          {{"Idempotency-Key", std::move(key)}, {"Content-Type", "application/json"}},
          "{}",
          {}};
}

UpstreamAnswer events(std::vector<std::pair<std::chrono::milliseconds, std::string>> pieces,
                      bool cut = false) {
  UpstreamAnswer a;
  a.status = 200;
  a.fields = {{"Content-Type", "text/event-stream"}};
  a.stream = std::move(pieces);
  a.cut = cut;
  return a;
}

std::string problem_type(const Reply& r) {
  return nlohmann::json::parse(r.body, nullptr, false).value("type", std::string());
}

class Streaming : public ::testing::TestWithParam<Codec> {
 protected:
  Reply send(World& world, const Request& r) { return world.send(GetParam(), r); }
  // A stream that broke off reaches the client as one: never as a whole answer.
  static bool broken_off(const Reply& r) { return r.closed || r.reset; }
};

TEST_P(Streaming, AStreamIsRecordedOnceItEndsAndReplayedWhole) {
  World world(kConfig);
  world.answer = [](const StringRequest&) {
    return events({{0ms, "data: 1\n\n"}, {20ms, "data: 2\n\n"}, {20ms, "data: 3\n\n"}});
  };
  const Reply first = send(world, keyed("s-1"));
  const Reply again = send(world, keyed("s-1"));
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.body, "data: 1\n\ndata: 2\n\ndata: 3\n\n");
  EXPECT_NE(first.field("Idempotency-Key-Expires"), "");
  EXPECT_EQ(first.field("Idempotent-Replayed"), "");
  EXPECT_EQ(again.field("Idempotent-Replayed"), "true");
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(again.field("Content-Type"), "text/event-stream");
  EXPECT_EQ(world.executions("s-1"), 1);
}

TEST_P(Streaming, AStreamMayOutlastUpstreamTimeoutWhichBoundsOnlyTheHead) {
  World world(kConfig, nullptr, "timeout: 200ms, read_timeout: 2s");
  world.answer = [](const StringRequest&) {
    return events({{0ms, "a"}, {150ms, "b"}, {150ms, "c"}, {150ms, "d"}});
  };
  const Reply first = send(world, keyed("s-2"));
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.body, "abcd");
  EXPECT_FALSE(broken_off(first));
  EXPECT_EQ(send(world, keyed("s-2")).field("Idempotent-Replayed"), "true");
}

TEST_P(Streaming, AGapPastReadTimeoutBreaksTheStreamOffAndTheRecordIsIndeterminate) {
  World world(kConfig, nullptr, "timeout: 5s, read_timeout: 100ms");
  world.answer = [](const StringRequest&) { return events({{0ms, "a"}, {400ms, "b"}}); };
  const Reply first = send(world, keyed("s-3"));
  EXPECT_TRUE(broken_off(first)) << first.status << " " << first.body;
  const Reply retry = send(world, keyed("s-3"));
  EXPECT_EQ(retry.status, 409);
  EXPECT_TRUE(problem_type(retry).ends_with("/outcome-indeterminate")) << retry.body;
  EXPECT_EQ(world.executions("s-3"), 1);
}

TEST_P(Streaming, AStreamTheUpstreamCutsEndsAsAnErrorAndIsNeverReplayed) {
  World world(kConfig);
  world.answer = [](const StringRequest&) {
    return events({{0ms, "a"}, {10ms, "b"}}, /*cut=*/true);
  };
  const Reply first = send(world, keyed("s-4"));
  EXPECT_TRUE(broken_off(first)) << first.status << " " << first.body;
  const Reply retry = send(world, keyed("s-4"));
  EXPECT_EQ(retry.status, 409);
  EXPECT_TRUE(problem_type(retry).ends_with("/outcome-indeterminate")) << retry.body;
  EXPECT_EQ(world.executions("s-4"), 1);
}

TEST_P(Streaming, AStreamOverMaxResponseSizeReachesItsClientWholeAndIsNotReplayed) {
  World world(kConfig, nullptr, "timeout: 5s, max_response_size: 8");
  world.answer = [](const StringRequest&) {
    return events({{0ms, "0123"}, {10ms, "4567"}, {10ms, "89ab"}});
  };
  const Reply first = send(world, keyed("s-5"));
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.body, "0123456789ab");  // never truncated
  const Reply retry = send(world, keyed("s-5"));
  EXPECT_EQ(retry.status, 409);
  EXPECT_TRUE(problem_type(retry).ends_with("/response-not-stored")) << retry.body;
  EXPECT_EQ(world.executions("s-5"), 1);
}

INSTANTIATE_TEST_SUITE_P(BothCodecs, Streaming, ::testing::Values(Codec::http1, Codec::http2),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace idemproxy::testing
