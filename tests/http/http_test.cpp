// The http library's pure parts, linked as the proxy links them: request-target
// normalisation (RFC 3986 and RFC 9112 cases), the one map from the coordinator's
// refusals to problem+json responses, the replay head serialized once, and the
// runtime's count of store calls it queued.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "codec/http1/prepared_head.hpp"
#include "http/problem.hpp"
#include "http/request_target.hpp"
#include "http/trace_context.hpp"
#include "idemproxy/common/clock.hpp"
#include "idemproxy/common/handoff.hpp"
#include "idemproxy/store/memory_store.hpp"
#include "proxy/policy_document.hpp"
#include "proxy/replay.hpp"
#include "server/server_runtime.hpp"

using namespace idemproxy;
using namespace idemproxy::http;
using namespace std::chrono_literals;

namespace {

RequestTarget normalized(std::string_view target, TargetRules rules = {}) {
  RequestTarget out;
  const auto error = normalize_target(target, rules, out);
  EXPECT_EQ(error, std::nullopt) << target;
  return out;
}

std::string without_dot_segments(std::string path) {
  remove_dot_segments(path);
  return path;
}

}  // namespace

TEST(RequestTarget, EverySpellingOfAProtectedPathRoutesAlike) {
  for (const char* spelling : {"/v1/orders", "//v1//orders", "/v1/./orders", "/v1/x/../orders",
                               "/v1/%6frders", "/v1/orders;x=1", "http://shop.example/v1/orders"}) {
    EXPECT_EQ(normalized(spelling).route_path, "/v1/orders") << spelling;
  }
  EXPECT_EQ(normalized("http://shop.example:8080/v1/orders?a=1").authority, "shop.example:8080");
  EXPECT_EQ(normalized("/v1/orders?a=/../b").forward, "/v1/orders?a=/../b");  // query as sent
}

TEST(RequestTarget, EncodedSlashesAndNulAreRefusedUnlessKept) {
  for (const char* bad : {"/v1%2Forders", "/v1%5corders", "/v1/orders%00", "/v1\\orders"}) {
    RequestTarget out;
    EXPECT_TRUE(normalize_target(bad, {}, out)) << bad;
  }
  EXPECT_EQ(normalized("/v1%2Forders", {true, false}).forward, "/v1%2Forders");
}

// A connection normalises each request's target into the same RequestTarget: nothing
// of one target may remain in the next (an authority, a longer path, a query).
TEST(RequestTarget, AReusedResultHoldsOnlyTheLatestTarget) {
  RequestTarget reused;
  for (const char* target : {"http://shop.example/v1/orders/12345678901234567890/capture?x=1",
                             "/v1/a/..;/b", "*", "/v1//orders/./12/../13", "/"}) {
    ASSERT_EQ(normalize_target(target, {}, reused), std::nullopt) << target;
    const RequestTarget fresh = normalized(target);
    EXPECT_EQ(reused.forward, fresh.forward) << target;
    EXPECT_EQ(reused.route_path, fresh.route_path) << target;
    EXPECT_EQ(reused.authority, fresh.authority) << target;
  }
  EXPECT_EQ(normalized("/v1/a/..;/b").route_path, "/v1/b");
  EXPECT_EQ(normalized("/v1//orders/./12/../13").forward, "/v1/orders/13");
}

// A path already normal is copied as sent (no escape, backslash, parameter, dot
// segment or, merging, empty segment); a path with any of them is normalised as before,
// whichever character the scan meets first.
TEST(RequestTarget, APathAlreadyNormalIsCopiedAndAnyOtherStillNormalised) {
  EXPECT_EQ(normalized("/v1/orders.json?a=%2F..//").forward, "/v1/orders.json?a=%2F..//");
  EXPECT_EQ(normalized("/v1/orders.json?a=1").route_path, "/v1/orders.json");
  EXPECT_EQ(normalized("/.well-known/x").route_path, "/.well-known/x");
  EXPECT_EQ(normalized("/a/b/.").route_path, "/a/b/");
  EXPECT_EQ(normalized("/a/b/..").route_path, "/a/");
  EXPECT_EQ(normalized("/a//b", {false, false}).forward, "/a//b");
  EXPECT_EQ(normalized("/a//b").forward, "/a/b");
  EXPECT_EQ(normalized("/a\\b", {true, false}).forward, "/a\\b");
  EXPECT_EQ(normalized("/a;p/b").forward, "/a;p/b");
  EXPECT_EQ(normalized("/a;p/b").route_path, "/a/b");
  EXPECT_EQ(normalized("/%7Ea").forward, "/~a");
  EXPECT_EQ(normalized("http://h.example").forward, "/");
  EXPECT_EQ(normalized("http://h.example?q").forward, "/?q");
}

TEST(RequestTarget, AnAuthorityTakesExactlyRfc3986sHostAndPortCharacters) {
  EXPECT_TRUE(valid_authority("shop.example:8080"));
  EXPECT_TRUE(valid_authority("[::1]:80"));
  EXPECT_TRUE(valid_authority("a-b_c~d%41!$&'()*+,;="));
  EXPECT_FALSE(valid_authority(""));
  for (const char bad : std::string_view("/?#@ \\\"<>^`{|}\x7f\x80\xff", 17)) {
    EXPECT_FALSE(valid_authority(std::string("h") + bad)) << static_cast<int>(bad);
  }
}

TEST(RemoveDotSegments, Rfc3986Examples) {
  // RFC 3986 5.2.4's worked examples.
  EXPECT_EQ(without_dot_segments("/a/b/c/./../../g"), "/a/g");
  EXPECT_EQ(without_dot_segments("mid/content=5/../6"), "mid/6");
  EXPECT_EQ(without_dot_segments("/../x"), "/x");
  EXPECT_EQ(without_dot_segments("/a/.."), "/");
}

TEST(Problems, EveryRefusalMapsToItsDocumentedProblem) {
  struct Case {
    engine::Refusal why;
    unsigned status;
    const char* slug;
  };
  const Case cases[] = {
      {engine::Refusal::key_mismatch, 422, "key-mismatch"},
      {engine::Refusal::request_in_flight, 409, "request-in-flight"},
      {engine::Refusal::outcome_unknown, 409, "outcome-unknown"},
      {engine::Refusal::outcome_indeterminate, 409, "outcome-indeterminate"},
      {engine::Refusal::store_unavailable, 503, "store-unavailable"},
      {engine::Refusal::response_not_stored, 409, "response-not-stored"},
      {engine::Refusal::record_unreadable, 500, "record-unreadable"},
  };
  for (const Case& c : cases) {
    const ProxyError e = refusal_error(c.why, "why it was refused", 1);
    const StringResponse res = problem_response(e);
    EXPECT_EQ(res.result_int(), c.status) << c.slug;
    EXPECT_EQ(res[bhttp::field::content_type], "application/problem+json");
    EXPECT_EQ(res[bhttp::field::retry_after], "1");
    const auto body = nlohmann::json::parse(res.body());
    EXPECT_NE(body["type"].get<std::string>().find(c.slug), std::string::npos) << res.body();
    EXPECT_EQ(body["detail"], "why it was refused");
    EXPECT_EQ(body["status"], c.status);
  }
}

// The replay's fields are the proxy's; its HTTP/1.1 head is the HTTP/1.1 codec's,
// laid out from them without the per-request lines.
TEST(ReplayHead, IsSerializedByTheHttp1CodecWithoutThePerRequestLines) {
  engine::ReplayCache::Entry e;
  e.response = {201, {{"Content-Type", "application/json"}}, R"({"id":1})"};
  e.expires_at = TimePoint{std::chrono::seconds{1'700'000'000}};
  proxy::prepare_replay(e);
  const auto& layout = proxy::replay_layout(e);
  const auto head = codec::http1::prepared_head(201, layout.fields, e.response.body.size(), false);
  EXPECT_EQ(head.rfind("HTTP/1.1 201 Created\r\n", 0), 0u) << head;
  EXPECT_NE(head.find("Idempotent-Replayed: true\r\n"), std::string::npos);
  EXPECT_NE(head.find("Content-Length: 8\r\n"), std::string::npos);
  EXPECT_EQ(head.find("Connection"), std::string::npos);
  EXPECT_NE(head.substr(head.size() - 2), "\r\n\r\n");  // the blank line comes later
  // Made once: a second replay gets the same layout, not another.
  EXPECT_EQ(&proxy::replay_layout(e), &proxy::replay_layout(e));
  // Built per request: no Content-Length for a 204, and an answer with trailers goes
  // chunked to an HTTP/1.1 client that takes them, or without them.
  EXPECT_TRUE(codec::http1::prepared_head(204, {}, 0, false).empty());
  engine::ReplayCache::Entry grpc;
  grpc.response = {
      200, {{"content-type", "application/grpc"}}, "msg", true, {{"grpc-status", "0"}}};
  proxy::prepare_replay(grpc);
  const auto& with_trailers = proxy::replay_layout(grpc);
  EXPECT_TRUE(codec::http1::prepared_head(200, with_trailers.fields, 3, true).empty());
  ASSERT_EQ(with_trailers.fields.size(), 3U);
  EXPECT_EQ(with_trailers.fields[1].name, "Idempotent-Replayed");
}

// The layout waits for the first replay: caching an answer lays nothing out, and
// replays on several threads at once share the one layout made, and the one form
// the codec kept with it.
TEST(ReplayHead, IsLaidOutAtTheFirstReplayOnceWhateverTheThreads) {
  engine::ReplayCache::Entry e;
  e.response = {201, {{"Content-Type", "application/json"}}, R"({"id":1})"};
  proxy::prepare_replay(e);
  EXPECT_TRUE(e.layout->made.fields.empty());
  const auto shared = std::make_shared<const engine::ReplayCache::Entry>(std::move(e));
  std::vector<const engine::ReplayCache::Entry::Layout*> seen(8);
  std::vector<std::string_view> forms(seen.size());
  std::atomic<int> made{0};
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&, i] {
      seen[i] = &proxy::replay_layout(*shared);
      forms[i] = seen[i]->codec_form.get([&] {
        ++made;
        return codec::http1::prepared_head(201, seen[i]->fields, 8, false);
      });
    });
  }
  for (auto& t : threads) t.join();
  for (const auto* s : seen) EXPECT_EQ(s, seen.front());
  for (const auto form : forms) EXPECT_EQ(form.data(), forms.front().data());
  EXPECT_EQ(made.load(), 1);
  EXPECT_EQ(seen.front()->fields.size(), 3U);
  EXPECT_NE(forms.front().find("Idempotent-Replayed: true"), std::string::npos);
}

// W3C Trace Context, section 3.2 (the examples are the specification's own).
TEST(TraceContext, ParsesVersion00AndKeepsLaterVersionsAsSent) {
  const auto t = parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(t->parent_id, "00f067aa0ba902b7");
  EXPECT_EQ(t->flags, "01");
  const std::string later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x";
  ASSERT_TRUE(parse_traceparent(later));
  EXPECT_EQ(parse_traceparent(later)->header, later);
}

TEST(TraceContext, RejectsWhatTheSpecificationCallsInvalid) {
  for (const char* bad : {
           "",
           "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",   // upper case
           "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // version ff
           "00-00000000000000000000000000000000-00f067aa0ba902b7-01",   // zero trace id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",   // zero parent id
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",  // 00 with more
           "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  // no dash after
           "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",   // flags not hex
           "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
       }) {
    EXPECT_FALSE(parse_traceparent(bad)) << bad;
  }
}

TEST(TraceContext, StartedTracesAreValidAndDistinct) {
  StartedTrace ha{};
  StartedTrace hb{};
  const auto a = start_trace(ha);
  const auto b = start_trace(hb);
  ASSERT_TRUE(parse_traceparent(a.header)) << a.header;
  EXPECT_EQ(parse_traceparent(a.header)->trace_id, a.trace_id);
  EXPECT_NE(a.trace_id, b.trace_id);
  EXPECT_EQ(a.header.substr(0, 3), "00-");
  EXPECT_EQ(a.header.substr(53), "01");
}

// Every length is filled with lower-case hex digits, each of the sixteen turning up
// in every position, whole words of 16 digits or a word's remainder alike.
TEST(TraceContext, RandomHexFillsEveryDigitOfAnyLength) {
  for (std::size_t n = 0; n <= 40; ++n) {
    std::string s(n + 1, '#');
    random_hex(s.data(), n);
    EXPECT_EQ(s.back(), '#') << n;  // nothing written past the end
    s.pop_back();
    EXPECT_EQ(s.find_first_not_of("0123456789abcdef"), std::string::npos) << s;
  }
  std::vector<std::set<char>> seen(21);
  for (int round = 0; round < 2000; ++round) {
    std::string s(21, ' ');
    random_hex(s.data(), s.size());
    for (std::size_t i = 0; i < s.size(); ++i) seen[i].insert(s[i]);
  }
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i].size(), 16U) << i;
}

TEST(TraceContext, ReplaysNeverSendTheStoredTraceId) {
  store::StoredResponse stored{
      201,
      {{"Content-Type", "application/json"}, {std::string(store::kTraceIdEntry), "abc"}},
      "{}"};
  EXPECT_EQ(proxy::original_trace_id(stored), "abc");
  engine::ReplayCache::Entry e;
  e.response = stored;
  proxy::prepare_replay(e);
  const auto& layout = proxy::replay_layout(e);
  for (const auto& f : layout.fields) EXPECT_NE(f.name, store::kTraceIdEntry);
  const auto head = codec::http1::prepared_head(201, layout.fields, 2, false);
  EXPECT_EQ(head.find(store::kTraceIdEntry), std::string::npos);
  EXPECT_NE(head.find("Content-Type: application/json"), std::string::npos);
}

namespace {

// A ServerRuntime in front of a memory store, for Runtime::queued's tests; `server`
// is the config's server section ("" for its defaults).
struct QueuedRuntime {
  explicit QueuedRuntime(const std::string& server = "")
      : runtime(io,
                proxy::make_settings(config::parse_config(
                    "upstream: {url: 'http://127.0.0.1:9'}\nstore: {memory: {}}\n" + server +
                        "routes: [{name: any, path_prefix: /any}]\n",
                    "test.yaml", [](const std::string&) { return std::nullopt; })),
                store, metrics, 1) {}
  asio::io_context io;
  SystemClock clock;
  store::MemoryStore store{clock};
  ops::Metrics metrics;
  server::ServerRuntime runtime;
};

}  // namespace

// Runtime::queued counts the calls it hands a queuing store, and the server waits
// for that count to reach zero before its io_context goes. A store that throws
// before taking a call never answers it: counted in, it would hold shutdown forever.
TEST(RuntimeQueued, AStartThatThrowsIsNotWaitedForAndAnAnsweredOneIsCountedOut) {
  QueuedRuntime queuing;
  asio::io_context& io = queuing.io;
  server::ServerRuntime& runtime = queuing.runtime;
  bool threw = false;
  int answer = 0;
  std::thread answerer;
  std::thread* answering = &answerer;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        try {
          co_await runtime.queued<int>(
              [](const std::function<void(int)>&) { throw std::runtime_error("not taken"); });
        } catch (const std::runtime_error&) {
          threw = true;
        }
        EXPECT_EQ(runtime.queued_calls(), 0);
        // Answered from a thread of the store's own, as group commit's runners do.
        answer = co_await runtime.queued<int>([answering](std::function<void(int)> done) {
          *answering = std::thread([done = std::move(done)] { done(7); });
        });
      },
      asio::detached);
  io.run();
  answerer.join();
  EXPECT_TRUE(threw);
  EXPECT_EQ(answer, 7);
  EXPECT_EQ(runtime.queued_calls(), 0);
  runtime.wait_for_queued_calls();  // returns at once
}

// A group-commit batch answers its members under a common::Handoff: Runtime::queued
// defers each answer to it, and delivers them when it closes, one post per I/O
// thread, each resumed on its own executor (here a strand per caller, as with
// server.threads 2). Until then none resumes, and shutdown still waits for them.
TEST(RuntimeQueued, ABatchsAnswersLeaveTogetherWhenItsHandoffCloses) {
  QueuedRuntime queuing("server: {threads: 2}\n");
  asio::io_context& io = queuing.io;
  server::ServerRuntime& runtime = queuing.runtime;
  constexpr int kCallers = 6;
  std::mutex mu;
  std::condition_variable all_queued;
  std::vector<std::pair<int, std::function<void(int)>>> pending;  // the "store's" queue
  std::atomic<int> resumed{0}, on_own_strand{0};
  std::vector<int> answers(kCallers, -1);
  for (int i = 0; i < kCallers; ++i) {
    const auto strand = asio::make_strand(io);
    asio::co_spawn(
        strand,
        [&, i, strand]() -> asio::awaitable<void> {
          answers[i] = co_await runtime.queued<int>([&](std::function<void(int)> done) {
            std::lock_guard lock(mu);
            pending.emplace_back(i, std::move(done));
            all_queued.notify_one();
          });
          if (strand.running_in_this_thread()) ++on_own_strand;
          ++resumed;
        },
        asio::detached);
  }
  std::vector<std::thread> io_threads;
  auto work = asio::make_work_guard(io);
  for (int t = 0; t < 2; ++t) io_threads.emplace_back([&io] { io.run(); });
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(all_queued.wait_for(lock, 5s, [&] { return pending.size() == kCallers; }));
  }
  std::thread runner([&] {  // the batch's runner: a thread of the store's own
    common::Handoff batch;
    for (auto& [caller, done] : pending) done(100 + caller);
    pending.clear();  // as a store lets go of its callbacks (each holds its caller's work)
    std::this_thread::sleep_for(100ms);  // time enough for a posted answer to run
    EXPECT_EQ(resumed.load(), 0) << "an answer left before its batch's handoff closed";
    EXPECT_EQ(runtime.queued_calls(), kCallers) << "shutdown would not wait for them";
  });
  runner.join();
  runtime.wait_for_queued_calls();
  for (int i = 0; i < 500 && resumed.load() < kCallers; ++i) std::this_thread::sleep_for(10ms);
  work.reset();
  for (auto& t : io_threads) t.join();
  EXPECT_EQ(resumed.load(), kCallers);
  EXPECT_EQ(on_own_strand.load(), kCallers);
  for (int i = 0; i < kCallers; ++i) EXPECT_EQ(answers[i], 100 + i);
}
