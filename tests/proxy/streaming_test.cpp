// Streamed answers on a covered route, over both codecs, in this process: recorded
// once they end and replayed whole; upstream.timeout bounds only the head, so a
// stream may outlast it; a gap past upstream.read_timeout, or an upstream that cuts
// the stream, ends the client's stream as an error and leaves the record
// indeterminate. (When each piece reaches the client is the pump's tests' to show.)
#include <gtest/gtest.h>

#include <thread>

#include "../unit/faulty_store.hpp"
#include "proxy/phases.hpp"
#include "proxy/stream_store.hpp"
#include "stream_requests.hpp"
#include "world.hpp"

namespace idemproxy::testing::streaming_test {
namespace {

using namespace std::chrono_literals;

const char* kConfig = R"(store: {memory: {}}
routes:
  - {name: events, path_prefix: /v1/events}
)";

const char* kWaiting = R"(store: {memory: {}}
routes:
  - {name: events, path_prefix: /v1/events, on_concurrent: wait, lease: 1s}
)";

// `n` pieces of `size` bytes, the first all 'a', the next 'b' and so on, `gap` apart.
std::vector<std::pair<std::chrono::milliseconds, std::string>> pieces(
    int n, std::size_t size, std::chrono::milliseconds gap = std::chrono::milliseconds{1}) {
  std::vector<std::pair<std::chrono::milliseconds, std::string>> out;
  for (int i = 0; i < n; ++i) out.emplace_back(gap, std::string(size, static_cast<char>('a' + i)));
  return out;
}

// The holder streams kLatePieces pieces of 200,000 bytes, then "the end" 800 ms later;
// a retry with the same key comes 500 ms in, when chunk 1 has left the window: the
// pieces fill more chunks than the window holds (kAppendsInFlight committing, one
// filling), so the next full chunk waited for chunk 1's append. (The test's HTTP/2
// client takes about 300 ms to read those 1.4 MB, where nghttp with the same 64 KiB
// windows reads 4 MB through the proxy in 50 ms.)
constexpr int kLatePieces =
    static_cast<int>((proxy::kAppendsInFlight + 1) * proxy::kChunkBytes / 200'000) + 1;
constexpr std::size_t kLateBody = kLatePieces * std::size_t{200'000} + 7;  // + "the end"
std::vector<Reply> late_retry(World& world, Codec codec, const std::string& key) {
  world.answer = [](const StringRequest&) {
    auto body = pieces(kLatePieces, 200'000);
    body.emplace_back(800ms, "the end");
    return events(body);
  };
  Request retry = keyed(key);
  retry.start_after = 500ms;
  return world.send_all(codec, {keyed(key), retry});
}

class Streaming : public ::testing::TestWithParam<Codec> {
 protected:
  Reply send(World& world, const Request& r) { return world.send(GetParam(), r); }
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
  // Its duration is observed once (the replay is no stream of the upstream's): 40 ms
  // or more, from its head to its end.
  const std::string metrics = world.metrics().render();
  EXPECT_NE(metrics.find("idemproxy_stream_duration_seconds_count 1\n"), std::string::npos);
  EXPECT_NE(metrics.find("idemproxy_stream_duration_seconds_bucket{le=\"0.025\"} 0\n"),
            std::string::npos)
      << metrics;
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

TEST_P(Streaming, AStreamOverMaxStoredAnswerReachesItsClientWholeAndIsNotReplayed) {
  World world(R"(store: {memory: {}}
routes:
  - {name: events, path_prefix: /v1/events, max_stored_answer: 8}
)");
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

// Past 256 KiB a stream is stored in chunks as it flows, not held whole: here 1 MB in
// four appends (256 KiB each, the last shorter), and a retry replays every byte from
// them. upstream.max_response_size (16 bytes here) no longer caps what a stream keeps.
TEST_P(Streaming, ALargeStreamIsStoredInChunksAsItFlowsAndReplayedWhole) {
  SystemClock clock;
  FaultyStore store(clock);
  World world(kConfig, &store, "timeout: 5s, max_response_size: 16");
  auto body = pieces(5, 200'000);
  world.answer = [&](const StringRequest&) { return events(body); };
  const Reply first = send(world, keyed("s-6"));
  ASSERT_EQ(first.body.size(), 1'000'000U);
  EXPECT_EQ(store.appends.load(), 4);
  const auto record = store.find({"", "s-6"}).value();
  ASSERT_TRUE(record && record->response);
  EXPECT_EQ(record->response->chunks, 4);
  EXPECT_EQ(record->response->body_length, 1'000'000);
  EXPECT_TRUE(record->response->body.empty());
  const Reply again = send(world, keyed("s-6"));
  EXPECT_EQ(again.field("Idempotent-Replayed"), "true");
  EXPECT_EQ(again.body, first.body);
  EXPECT_FALSE(broken_off(again));
  EXPECT_EQ(world.executions("s-6"), 1);
}

// A replay reads its chunks kReplayPage at a time: an answer of two pages and a chunk
// comes back whole from three reads, and a chunk missing from the second page cuts the
// replay there, never handing it on as whole.
TEST_P(Streaming, AReplayOfManyPagesIsWholeAndAChunkMissingFromALaterPageCutsIt) {
  SystemClock clock;
  FaultyStore store(clock);
  World world(kConfig, &store);
  const int chunks = 2 * proxy::idempotent::kReplayPage + 1;
  auto body = pieces(chunks, proxy::kChunkBytes, 0ms);
  world.answer = [&](const StringRequest&) { return events(body); };
  const Reply first = send(world, keyed("s-14"));
  ASSERT_EQ(first.body.size(), static_cast<std::size_t>(chunks) * proxy::kChunkBytes);
  const auto record = store.find({"", "s-14"}).value();
  ASSERT_TRUE(record && record->response);
  EXPECT_EQ(record->response->chunks, chunks);
  const int reads = store.chunk_reads.load();
  const Reply again = send(world, keyed("s-14"));
  EXPECT_EQ(again.field("Idempotent-Replayed"), "true");
  EXPECT_TRUE(again.body == first.body);
  EXPECT_FALSE(broken_off(again));
  EXPECT_EQ(store.chunk_reads.load() - reads, 3);
  store.chunk_lost = proxy::idempotent::kReplayPage + 2;
  const Reply broken = send(world, keyed("s-14"));
  EXPECT_TRUE(broken_off(broken));
  EXPECT_LT(broken.body.size(), first.body.size());
  EXPECT_EQ(world.executions("s-14"), 1);
}

// The stream is read on while its chunks commit: up to kAppendsInFlight (four)
// appends in flight, and no more before it waits for the store. Here no append comes
// back until the test releases them; the stream has eight full chunks ready at once.
TEST_P(Streaming, ChunksAreAppendedWhileTheStreamFlowsFourInFlightAtMost) {
  SystemClock clock;
  FaultyStore store(clock);
  store.hold_appends = true;
  World world(kConfig, &store);
  auto body = pieces(8, 256 << 10, 0ms);
  body.emplace_back(0ms, "end");
  world.answer = [&](const StringRequest&) { return events(body); };
  std::size_t in_flight = 0;
  std::thread store_side([&] {
    const auto give_up = std::chrono::steady_clock::now() + 5s;
    while (store.held_appends() < proxy::kAppendsInFlight &&
           std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(5ms);
    std::this_thread::sleep_for(200ms);  // a fifth would have come by now
    in_flight = store.held_appends();
    store.release_appends();
  });
  const Reply first = send(world, keyed("s-12"));
  store_side.join();
  static_assert(proxy::kAppendsInFlight == 4);
  EXPECT_EQ(in_flight, 4U);
  ASSERT_EQ(first.body.size(), (8U << 18) + 3);
  const auto record = store.find({"", "s-12"}).value();
  ASSERT_TRUE(record && record->response);
  EXPECT_EQ(record->response->chunks, 9);
  const Reply again = send(world, keyed("s-12"));
  EXPECT_EQ(again.field("Idempotent-Replayed"), "true");
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(world.executions("s-12"), 1);
}

// A stream that ends within 256 KiB keeps the record's own row: no chunk is appended.
TEST_P(Streaming, AShortStreamKeepsTheOneRowPath) {
  SystemClock clock;
  FaultyStore store(clock);
  World world(kConfig, &store);
  world.answer = [](const StringRequest&) {
    return events({{0ms, "data: 1\n\n"}, {5ms, "data: 2\n\n"}});
  };
  EXPECT_EQ(send(world, keyed("s-7")).status, 200);
  EXPECT_EQ(store.appends.load(), 0);
  EXPECT_EQ(store.find({"", "s-7"}).value()->response->body, "data: 1\n\ndata: 2\n\n");
}

// The store fails mid-stream: the client still gets its whole stream; the record
// keeps the status alone, so a retry is told it executed (never handed part of it).
// The store fails every append while the answer streams: the client still gets all
// of it, and its chunks are held, then handed with the completion to the background
// retry. Meanwhile a retry is told the key is in flight; once the store takes
// appends again, the record completes and a retry is replayed the whole answer.
TEST_P(Streaming, AStoreThatFailsMidStreamStillStreamsAndKeepsTheAnswerOnceItReturns) {
  SystemClock clock;
  FaultyStore store(clock);
  store.appends_fail = true;
  World world(kConfig, &store);
  auto body = pieces(4, 100'000);
  world.answer = [&](const StringRequest&) { return events(body); };
  const Reply first = send(world, keyed("s-8"));
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.body.size(), 400'000U);
  EXPECT_FALSE(broken_off(first));
  EXPECT_GE(store.appends.load(), 1);
  const Reply during = send(world, keyed("s-8"));
  EXPECT_EQ(during.status, 409);
  EXPECT_TRUE(problem_type(during).ends_with("/request-in-flight")) << during.body;
  store.appends_fail = false;
  Reply again;
  for (int i = 0; i < 100 && again.status != 200; ++i) {
    std::this_thread::sleep_for(20ms);
    again = send(world, keyed("s-8"));
  }
  EXPECT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(again.field("Idempotent-Replayed"), "true");
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(world.executions("s-8"), 1);
}

// What a failing store has not taken is held within server.max_unstored: past it the
// body is given up, the client still gets all of it, and the record keeps the status.
TEST_P(Streaming, ChunksTheStoreCannotTakeAreHeldOnlyWithinMaxUnstored) {
  SystemClock clock;
  FaultyStore store(clock);
  store.appends_fail = true;
  World world(std::string(kConfig) + "server: {max_unstored: 1MiB}\n", &store);
  auto body = pieces(10, 200'000);
  world.answer = [&](const StringRequest&) { return events(body); };
  const Reply first = send(world, keyed("s-9"));
  EXPECT_EQ(first.status, 200);
  EXPECT_EQ(first.body.size(), 2'000'000U);
  EXPECT_FALSE(broken_off(first));
  store.appends_fail = false;
  const Reply retry = send(world, keyed("s-9"));
  EXPECT_EQ(retry.status, 409);
  EXPECT_TRUE(problem_type(retry).ends_with("/response-not-stored")) << retry.body;
  EXPECT_EQ(world.executions("s-9"), 1);
}

// Two requests with one key, the second while the first's answer streams
// (on_concurrent: wait): the second attaches to the stream and gets the same bytes,
// from the first piece on, instead of waiting for the end. Here the stream outlasts
// the waiter's lease (1s): a retry that waited for the end would be refused (409).
TEST_P(Streaming, AConcurrentRetryAttachesToTheStreamAndEndsWithIt) {
  World world(kWaiting);
  world.answer = [](const StringRequest&) {
    return events({{0ms, "data: 1\n\n"},
                   {500ms, "data: 2\n\n"},
                   {500ms, "data: 3\n\n"},
                   {500ms, "data: 4\n\n"}});
  };
  Request retry = keyed("s-9");
  retry.start_after = 100ms;
  const auto replies = world.send_all(GetParam(), {keyed("s-9"), retry});
  EXPECT_EQ(replies[0].body, "data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n");
  EXPECT_EQ(replies[1].status, 200) << replies[1].body;
  EXPECT_EQ(replies[1].body, replies[0].body);
  EXPECT_FALSE(broken_off(replies[1]));
  EXPECT_EQ(replies[1].field("Idempotent-Replayed"), "true");
  EXPECT_EQ(replies[1].field("Content-Type"), "text/event-stream");
  EXPECT_NE(replies[1].field("Idempotency-Key-Expires"), "");
  EXPECT_EQ(replies[0].field("Idempotent-Replayed"), "");
  EXPECT_EQ(world.metrics().attached(), 1U);
  EXPECT_EQ(world.executions("s-9"), 1);
}

// An upstream that dedupes too may say Idempotent-Replayed itself: its first client
// gets that as sent, and a retry attached to the stream gets the proxy's one field,
// not the upstream's beside it ("true, true" to a client that joins them).
TEST_P(Streaming, ARetryAttachedToAStreamGetsOneIdempotentReplayedField) {
  World world(kWaiting);
  world.answer = [](const StringRequest&) {
    UpstreamAnswer a = events({{0ms, "data: 1\n\n"}, {500ms, "data: 2\n\n"}});
    a.fields.emplace_back("Idempotent-Replayed", "true");
    return a;
  };
  Request retry = keyed("s-10");
  retry.start_after = 100ms;
  const auto replies = world.send_all(GetParam(), {keyed("s-10"), retry});
  const auto named = [](const Reply& r) {
    return std::count_if(r.fields.begin(), r.fields.end(), [](const auto& f) {
      return beast::iequals(f.first, "idempotent-replayed");
    });
  };
  EXPECT_EQ(replies[0].field("Idempotent-Replayed"), "true");
  EXPECT_EQ(named(replies[0]), 1);
  EXPECT_EQ(replies[1].body, replies[0].body);
  EXPECT_EQ(named(replies[1]), 1);
  EXPECT_EQ(world.metrics().attached(), 1U);
  EXPECT_EQ(world.executions("s-10"), 1);
}

// A retry that attaches once chunks are stored reads them from the store (they left
// the stream's window), then the window, then what follows.
TEST_P(Streaming, ALateRetryReadsTheStoredChunksThenFollowsTheStream) {
  SystemClock clock;
  FaultyStore store(clock);
  World world(kWaiting, &store);
  const auto replies = late_retry(world, GetParam(), "s-10");
  ASSERT_EQ(replies[0].body.size(), kLateBody);
  // The full chunks before the retry came, the rest at the end.
  EXPECT_EQ(store.appends.load(), (kLateBody + proxy::kChunkBytes - 1) / proxy::kChunkBytes);
  EXPECT_GE(store.chunk_reads.load(), 1);
  EXPECT_EQ(replies[1].body.size(), replies[0].body.size());
  EXPECT_TRUE(replies[1].body == replies[0].body);
  EXPECT_FALSE(broken_off(replies[1]));
  EXPECT_EQ(world.metrics().attached(), 1U);
  EXPECT_EQ(world.executions("s-10"), 1);
}

// A chunk the late retry needs is missing from the store: its stream is cut (and
// counted as an upstream error), never left as if the client had gone.
TEST_P(Streaming, ALateRetryMissingAStoredChunkIsCut) {
  SystemClock clock;
  FaultyStore store(clock);
  store.chunk_lost = 1;
  World world(kWaiting, &store);
  const auto replies = late_retry(world, GetParam(), "s-13");
  ASSERT_EQ(replies[0].body.size(), kLateBody);
  EXPECT_TRUE(broken_off(replies[1]));
  EXPECT_TRUE(replies[1].body.empty());
  const std::string metrics = world.metrics().render();
  EXPECT_NE(metrics.find("{route=\"events\",outcome=\"upstream_error\"} 1\n"), std::string::npos)
      << metrics;
  EXPECT_EQ(world.executions("s-13"), 1);
}

// The stream breaks off: the attached retry is cut too, never handed part of it as
// whole.
TEST_P(Streaming, ARetryAttachedToAStreamThatBreaksOffIsCutToo) {
  World world(kWaiting);
  world.answer = [](const StringRequest&) {
    return events({{0ms, "a"}, {300ms, "b"}}, /*cut=*/true);
  };
  Request retry = keyed("s-11");
  retry.start_after = 100ms;
  const auto replies = world.send_all(GetParam(), {keyed("s-11"), retry});
  EXPECT_TRUE(broken_off(replies[0]));
  EXPECT_TRUE(broken_off(replies[1])) << replies[1].status << " " << replies[1].body;
  EXPECT_EQ(world.metrics().attached(), 1U);
  EXPECT_EQ(world.executions("s-11"), 1);
}

// on_concurrent: reject still answers 409 while the stream flows.
TEST_P(Streaming, OnConcurrentRejectStillRefusesWhileTheStreamFlows) {
  World world(kConfig);
  world.answer = [](const StringRequest&) { return events({{0ms, "a"}, {300ms, "b"}}); };
  Request retry = keyed("s-12");
  retry.start_after = 100ms;
  const auto replies = world.send_all(GetParam(), {keyed("s-12"), retry});
  EXPECT_EQ(replies[0].body, "ab");
  EXPECT_EQ(replies[1].status, 409);
  EXPECT_TRUE(problem_type(replies[1]).ends_with("/request-in-flight")) << replies[1].body;
  EXPECT_EQ(world.metrics().attached(), 0U);
}

INSTANTIATE_TEST_SUITE_P(BothCodecs, Streaming, ::testing::Values(Codec::http1, Codec::http2),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace idemproxy::testing::streaming_test
