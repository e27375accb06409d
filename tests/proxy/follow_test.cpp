// A retry on another instance following a stream from the store (attach.cpp, follow;
// issue 44), in this process: two proxies over one store, as two instances over one
// database, each listening to the store's announcements.
#include <gtest/gtest.h>

#include <thread>

#include "stream_requests.hpp"
#include "world.hpp"

namespace idemproxy::testing::follow_test {
namespace {

using namespace std::chrono_literals;

class Following : public ::testing::TestWithParam<Codec> {};

// Two proxies over one store, as two instances over one database, each listening to
// the store's announcements; leases of 5 s. The holder relays `pieces`; `after` into
// it, a retry with the same key goes to the other, which follows the stream from the
// store (attach.cpp, follow).
struct FollowedElsewhere {
  Reply first, followed;
  std::chrono::steady_clock::duration lag;  // from the holder's reply's end to the follower's
  int executions_elsewhere = -1;
  std::uint64_t attached = 0;  // retries attached on the follower's instance
};
FollowedElsewhere follow_from_elsewhere(
    Codec codec, const std::string& key,
    const std::vector<std::pair<std::chrono::milliseconds, std::string>>& pieces, bool cut,
    std::chrono::milliseconds after) {
  const char* config = R"(store: {memory: {}}
routes:
  - {name: events, path_prefix: /v1/events, on_concurrent: wait, lease: 5s}
)";
  SystemClock clock;
  store::MemoryStore shared(clock);
  World holder(config, &shared);
  World other(config, &shared);
  holder.listen();
  other.listen();
  holder.answer = [&pieces, cut](const StringRequest&) { return events(pieces, cut); };
  FollowedElsewhere out;
  std::chrono::steady_clock::time_point first_ended;
  std::thread holding([&] {
    out.first = holder.send(codec, keyed(key));
    first_ended = std::chrono::steady_clock::now();
  });
  std::this_thread::sleep_for(after);
  out.followed = other.send(codec, keyed(key));
  const auto followed_ended = std::chrono::steady_clock::now();
  holding.join();
  out.lag = followed_ended - first_ended;
  EXPECT_EQ(holder.executions(key), 1);
  out.executions_elsewhere = other.executions(key);
  out.attached = other.metrics().attached();
  return out;
}

// A retry on another instance follows the stream from the store, woken by the
// holder's announced appends: it gets the same bytes and ends as the holder's client
// does. Woken only by its lease's clock instead (no announcements), it would end
// seconds after the holder; waiting for the finish instead of following, it would
// not count as attached.
TEST_P(Following, ARetryOnAnotherInstanceFollowsTheStreamFromTheStore) {
  const auto r = follow_from_elsewhere(GetParam(), "s-13",
                                       {{0ms, "data: 1\n\n"},
                                        {500ms, "data: 2\n\n"},
                                        {500ms, "data: 3\n\n"},
                                        {500ms, "data: 4\n\n"}},
                                       false, 200ms);
  EXPECT_EQ(r.first.body, "data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n");
  EXPECT_EQ(r.followed.status, 200) << r.followed.body;
  EXPECT_EQ(r.followed.body, r.first.body);
  EXPECT_FALSE(broken_off(r.followed));
  EXPECT_EQ(r.followed.field("Idempotent-Replayed"), "true");
  EXPECT_EQ(r.followed.field("Content-Type"), "text/event-stream");
  EXPECT_LT(r.lag, 1s);
  EXPECT_EQ(r.executions_elsewhere, 0);
  EXPECT_EQ(r.attached, 1U);
}

// The holder's stream breaks off: the retry following it from another instance is cut
// too, never handed part of it as whole.
TEST_P(Following, ARetryFollowingFromAnotherInstanceIsCutWhenTheStreamBreaksOff) {
  const auto r = follow_from_elsewhere(GetParam(), "s-14", {{0ms, "a"}, {400ms, "b"}}, true, 150ms);
  EXPECT_TRUE(broken_off(r.first));
  EXPECT_TRUE(broken_off(r.followed)) << r.followed.status << " " << r.followed.body;
  EXPECT_LT(r.lag, 1s);
  EXPECT_EQ(r.executions_elsewhere, 0);
  EXPECT_EQ(r.attached, 1U);
}

INSTANTIATE_TEST_SUITE_P(BothCodecs, Following, ::testing::Values(Codec::http1, Codec::http2),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace idemproxy::testing::follow_test
