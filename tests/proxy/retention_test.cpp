// The upstream sets one answer's retention (Idempotency-Policy: max-age=N), over both
// codecs, in this process: the real codecs and phases, the memory store on a clock
// the test moves. The replay cache is off here: it keeps time on this process's
// monotonic clock, which the test cannot move (the coordinator's tests cover it).
#include <gtest/gtest.h>

#include <thread>

#include "../unit/faulty_store.hpp"
#include "proxy/forward.hpp"
#include "world.hpp"

namespace idemproxy::testing::retention_test {
namespace {

using namespace std::chrono_literals;

const char* kConfig = R"(store: {memory: {}}
replay_cache: {max_bytes: 0}
defaults: {ttl: 1h, max_ttl: 6h}
routes:
  - {name: once, path_prefix: /v1/once, after_expiry: reject, tombstone_ttl: 24h}
  - {name: short, path_prefix: /v1/short, max_ttl: 1h}
  - {name: orders, path_prefix: /v1/orders}
)";

class Retention : public ::testing::TestWithParam<Codec> {
 protected:
  // The upstream answers with this Idempotency-Policy (none when empty); `streamed`:
  // in pieces, so the proxy relays the head before it records the answer.
  void upstream_says(std::string policy, bool streamed = false) {
    world.answer = [policy = std::move(policy), streamed](const StringRequest&) {
      UpstreamAnswer a;
      if (!policy.empty()) a.fields.emplace_back("Idempotency-Policy", policy);
      if (streamed) a.stream = {{0ms, R"({"id":)"}, {20ms, "1}"}};
      return a;
    };
  }
  Reply send(const Request& r) { return world.send(GetParam(), r); }

  FakeClock clock;
  store::MemoryStore memory{clock};
  World world{kConfig, &memory};
};

TEST_P(Retention, AShorterMaxAgeEndsTheReplaysSoonerAndNeverReachesTheClient) {
  upstream_says("max-age=600");
  const Reply first = send(json_post("short-1"));
  ASSERT_EQ(first.status, 201);
  EXPECT_EQ(first.field("Idempotency-Policy"), "");
  EXPECT_EQ(first.field("Idempotency-Key-Expires"), proxy::http_date(clock.now() + 10min));
  clock.advance(10min - 1s);
  const Reply replay = send(json_post("short-1"));
  EXPECT_EQ(replay.field("Idempotent-Replayed"), "true");
  EXPECT_EQ(replay.field("Idempotency-Policy"), "");
  EXPECT_EQ(replay.field("Idempotency-Key-Expires"), first.field("Idempotency-Key-Expires"));
  clock.advance(1s);
  const Reply again = send(json_post("short-1"));  // its own window ended, not the route's hour
  EXPECT_EQ(again.field("Idempotent-Replayed"), "");
  EXPECT_EQ(world.executions("short-1"), 2);
}

TEST_P(Retention, ALongerMaxAgeIsBoundedByMaxTtl) {
  upstream_says("max-age=86400");
  const Reply first = send(json_post("long-1"));
  EXPECT_EQ(first.field("Idempotency-Key-Expires"), proxy::http_date(clock.now() + 6h));
  clock.advance(6h - 1s);
  EXPECT_EQ(send(json_post("long-1")).field("Idempotent-Replayed"), "true");
  clock.advance(1s);
  send(json_post("long-1"));
  EXPECT_EQ(world.executions("long-1"), 2);
  // A route whose max_ttl is its ttl: max-age may only shorten it.
  const Reply bounded = send(json_post("long-2", "/v1/short"));
  EXPECT_EQ(bounded.field("Idempotency-Key-Expires"), proxy::http_date(clock.now() + 1h));
}

TEST_P(Retention, AStreamedAnswerIsKeptForItsMaxAgeToo) {
  upstream_says("max-age=60", true);
  const Reply first = send(json_post("stream-1"));
  ASSERT_EQ(first.status, 201);
  EXPECT_EQ(first.body, R"({"id":1})");
  EXPECT_EQ(first.field("Idempotency-Policy"), "");
  clock.advance(59s);
  const Reply replay = send(json_post("stream-1"));
  EXPECT_EQ(replay.field("Idempotent-Replayed"), "true");
  EXPECT_EQ(replay.body, first.body);
  clock.advance(1s);
  send(json_post("stream-1"));
  EXPECT_EQ(world.executions("stream-1"), 2);
}

TEST_P(Retention, WithAfterExpiryRejectTheTombstoneStartsAtTheShorterExpiry) {
  upstream_says("max-age=600");
  send(json_post("once-1", "/v1/once"));
  clock.advance(10min);
  const Reply late = send(json_post("once-1", "/v1/once"));
  EXPECT_EQ(late.status, 409);
  EXPECT_TRUE(problem_type(late).ends_with("/expired")) << late.body;
  clock.advance(24h - 10min - 1s);  // the tombstone lasts as the route says
  EXPECT_EQ(send(json_post("once-1", "/v1/once")).status, 409);
  clock.advance(1s);
  EXPECT_EQ(send(json_post("once-1", "/v1/once")).status, 201);
  EXPECT_EQ(world.executions("once-1"), 2);
}

TEST_P(Retention, MaxAgeWithNoStoreStoresNothing) {
  upstream_says("max-age=600, no-store");
  const Reply first = send(json_post("none-1"));
  EXPECT_EQ(first.field("Idempotency-Key-Expires"), "");
  EXPECT_EQ(first.field("Idempotency-Policy"), "");
  send(json_post("none-1"));
  EXPECT_EQ(world.executions("none-1"), 2);
}

TEST_P(Retention, AMalformedValueIsIgnoredAndTheRoutesTtlHolds) {
  for (const char* bad : {"max-age=soon", "max-age=-5", "max_age=5"}) {
    const std::string key = std::string("bad-") + bad;
    upstream_says(bad);
    const Reply first = send(json_post(key));
    ASSERT_EQ(first.status, 201) << bad;
    EXPECT_EQ(first.field("Idempotency-Policy"), "") << bad;
    EXPECT_EQ(first.field("Idempotency-Key-Expires"), proxy::http_date(clock.now() + 1h)) << bad;
    EXPECT_EQ(send(json_post(key)).field("Idempotent-Replayed"), "true") << bad;
    EXPECT_EQ(world.executions(key), 1) << bad;
  }
}

// A completion the store failed is written later by the background retry, in the
// form its record keeps, which no longer carries the upstream's Idempotency-Policy:
// the retention it asked for travels beside it, so the record written late still
// ends at the answer's max-age, not at the route's ttl.
TEST_P(Retention, ACompletionTheStoreFailedIsWrittenLaterForItsMaxAge) {
  FaultyStore store(clock);
  World faulty{kConfig, &store};
  faulty.answer = [](const StringRequest&) {
    UpstreamAnswer a;
    a.fields.emplace_back("Idempotency-Policy", "max-age=600");
    return a;
  };
  store.completes_fail = true;
  const Reply first = faulty.send(GetParam(), json_post("later-1"));
  ASSERT_EQ(first.status, 201);
  store.completes_fail = false;
  Reply again;
  for (int i = 0; i < 150 && again.field("Idempotent-Replayed") != "true"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds{20});
    again = faulty.send(GetParam(), json_post("later-1"));
  }
  ASSERT_EQ(again.field("Idempotent-Replayed"), "true") << again.status << " " << again.body;
  EXPECT_EQ(again.field("Idempotency-Policy"), "");
  EXPECT_EQ(again.field("Idempotency-Key-Expires"), proxy::http_date(clock.now() + 10min));
  clock.advance(10min);
  EXPECT_EQ(faulty.send(GetParam(), json_post("later-1")).field("Idempotent-Replayed"), "");
  EXPECT_EQ(faulty.executions("later-1"), 2);
}

INSTANTIATE_TEST_SUITE_P(BothCodecs, Retention, ::testing::Values(Codec::http1, Codec::http2),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace idemproxy::testing::retention_test
