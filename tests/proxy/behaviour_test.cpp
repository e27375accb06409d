// The behaviour table (SPEC.md, "Behaviour"), row by row, over both codecs, in this
// process: the real codecs and phases on loopback, the memory store, an upstream that
// counts what it executes. What end-to-end processes test against real peers runs
// here in milliseconds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../captured_stdout.hpp"
#include "idemproxy/ops/logging.hpp"
#include "world.hpp"

namespace idemproxy::testing::behaviour_test {
namespace {

const char* kConfig = R"(store: {memory: {}}
defaults: {max_body: 64KiB}
routes:
  - {name: required, path_prefix: /v1/required, key_required: true}
  - {name: waits, path_prefix: /v1/waits, on_concurrent: wait, lease: 5s}
  - {name: orders, path_prefix: /v1/orders}
  - {name: off, path_prefix: /status, enabled: false}
)";

class Behaviour : public ::testing::TestWithParam<Codec> {
 protected:
  World world{kConfig};
  Reply send(const Request& r) { return world.send(GetParam(), r); }
};

TEST_P(Behaviour, AMethodOrRouteNotCoveredIsForwardedUnchanged) {
  const auto get = send({"GET", "/v1/orders/7", {}, "", {}});
  EXPECT_EQ(get.status, 201);
  const auto off = send(json_post("off-1", "/status"));
  EXPECT_EQ(off.status, 201);
  EXPECT_EQ(world.executions(), 2);
  EXPECT_EQ(world.executions("off-1"), 1);
  EXPECT_EQ(off.field("Idempotent-Replayed"), "");
}

TEST_P(Behaviour, NoKeyOnAnOptionalRouteIsForwardedAndNothingStored) {
  send({"POST", "/v1/orders", {}, "{}", {}});
  send({"POST", "/v1/orders", {}, "{}", {}});
  EXPECT_EQ(world.executions(""), 2);
}

TEST_P(Behaviour, NoKeyOnARequiredRouteIs400AndNotForwarded) {
  const auto r = send({"POST", "/v1/required", {}, "{}", {}});
  EXPECT_EQ(r.status, 400);
  EXPECT_TRUE(problem_type(r).ends_with("/missing-key")) << r.body;
  EXPECT_EQ(r.field("Content-Type"), "application/problem+json");
  EXPECT_EQ(world.executions(), 0);
}

TEST_P(Behaviour, UnusableKeysAre400AndNotForwarded) {
  for (const std::string& bad : {std::string(), std::string(256, 'k'), std::string("\"open")}) {
    const auto r = send(json_post(bad));
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_TRUE(problem_type(r).ends_with("/bad-key")) << r.body;
  }
  EXPECT_EQ(world.executions(), 0);
}

TEST_P(Behaviour, TheFirstRequestExecutesOnceAndRetriesReplayItsAnswer) {
  const auto first = send(json_post("k-1"));
  const auto again = send(json_post("k-1"));
  EXPECT_EQ(first.status, 201);
  EXPECT_EQ(again.status, 201);
  EXPECT_EQ(again.body, first.body);
  EXPECT_EQ(again.field("Idempotent-Replayed"), "true");
  EXPECT_EQ(first.field("Idempotent-Replayed"), "");
  EXPECT_NE(again.field("Idempotency-Key-Expires"), "");
  EXPECT_EQ(world.executions("k-1"), 1);
}

// A replay over HTTP/1.1 gathers the head its codec laid out at the first replay and
// kept with the cached answer; over HTTP/2 the fields go as they are, nothing kept.
TEST_P(Behaviour, AReplayOverHttp1GathersTheHeadItsCodecKeptWithTheAnswer) {
  send(json_post("form-1"));
  EXPECT_EQ(send(json_post("form-1")).field("Idempotent-Replayed"), "true");
  const auto entry = world.runtime().coordinator.cached(engine::RoutePolicy{}, {"", "form-1"});
  ASSERT_NE(entry, nullptr);
  const auto form = entry->layout->made.codec_form.get([] { return std::string("none kept"); });
  if (GetParam() == Codec::http1) {
    EXPECT_TRUE(form.starts_with("HTTP/1.1 201 Created\r\n")) << form;
    EXPECT_NE(form.find("Idempotent-Replayed: true\r\n"), std::string::npos) << form;
  } else {
    EXPECT_EQ(form, "none kept");
  }
}

TEST_P(Behaviour, TheSameRequestInOtherJsonBytesReplaysToo) {
  send(json_post("k-json", "/v1/orders", R"({"a":1,"b":2})"));
  const auto again = send(json_post("k-json", "/v1/orders", R"({ "b": 2, "a": 1 })"));
  EXPECT_EQ(again.field("Idempotent-Replayed"), "true");
  EXPECT_EQ(world.executions("k-json"), 1);
}

TEST_P(Behaviour, AnotherBodyUnderTheSameKeyIs422) {
  send(json_post("k-2", "/v1/orders", R"({"a":1})"));
  const auto other = send(json_post("k-2", "/v1/orders", R"({"a":2})"));
  EXPECT_EQ(other.status, 422);
  EXPECT_TRUE(problem_type(other).ends_with("/key-mismatch")) << other.body;
  EXPECT_EQ(world.executions("k-2"), 1);
}

TEST_P(Behaviour, ASecondRequestWhileTheFirstRunsIs409WithRetryAfter) {
  world.answer = [](const StringRequest&) {
    UpstreamAnswer a;
    a.delay = std::chrono::milliseconds{300};
    return a;
  };
  const auto replies = world.send_all(GetParam(), {json_post("k-3"), json_post("k-3")});
  const bool first_won = replies[0].status == 201;
  const auto& loser = first_won ? replies[1] : replies[0];
  EXPECT_EQ(loser.status, 409);
  EXPECT_TRUE(problem_type(loser).ends_with("/request-in-flight")) << loser.body;
  EXPECT_NE(loser.field("Retry-After"), "");
  EXPECT_EQ(world.executions("k-3"), 1);
}

TEST_P(Behaviour, WithOnConcurrentWaitTheSecondGetsTheFirstsAnswer) {
  world.answer = [](const StringRequest&) {
    UpstreamAnswer a;
    a.delay = std::chrono::milliseconds{300};
    return a;
  };
  const auto replies =
      world.send_all(GetParam(), {json_post("k-4", "/v1/waits"), json_post("k-4", "/v1/waits")});
  EXPECT_EQ(replies[0].status, 201);
  EXPECT_EQ(replies[1].status, 201);
  EXPECT_EQ(replies[0].body, replies[1].body);
  EXPECT_EQ(world.executions("k-4"), 1);
}

TEST_P(Behaviour, AnAnswerNotStoredReleasesTheClaimSoARetryExecutesAgain) {
  world.answer = [](const StringRequest&) {
    UpstreamAnswer a;
    a.status = 503;
    return a;
  };
  EXPECT_EQ(send(json_post("k-5")).status, 503);
  EXPECT_EQ(send(json_post("k-5")).status, 503);
  EXPECT_EQ(world.executions("k-5"), 2);
}

// RFC 9110 8.6 and RFC 9112 6.1: no Content-Length or Transfer-Encoding in a 204
// (nor a 1xx), whatever the upstream sent with it: an HTTP/2 client's nghttp2 refuses
// a 204 whose content-length is not 0 (curl: exit 92), and an HTTP/1.1 client got the
// fields as sent. Relayed, executed under a key, and replayed.
TEST_P(Behaviour, A204CarriesNoFramingFieldsWhateverTheUpstreamSent) {
  for (const bool chunked : {false, true}) {
    world.answer = [chunked](const StringRequest&) {
      UpstreamAnswer a;
      a.status = 204;
      a.fields = {{"ETag", "\"v1\""}};
      a.body = "hello";  // with Content-Length: 5, which a 204 never has
      if (chunked) a.stream = {{std::chrono::milliseconds{0}, "hello"}};
      return a;
    };
    const std::string key = chunked ? "k-204-chunked" : "k-204";
    for (const auto& r : {send({"GET", "/v1/orders/204", {}, "", {}}), send(json_post(key)),
                          send(json_post(key))}) {
      EXPECT_EQ(r.status, 204) << chunked;
      EXPECT_FALSE(r.reset || r.closed) << chunked;  // nghttp2 resets a malformed answer
      EXPECT_EQ(r.field("Content-Length"), "") << chunked;
      EXPECT_EQ(r.field("Transfer-Encoding"), "") << chunked;
      EXPECT_EQ(r.field("ETag"), "\"v1\"") << chunked;
      EXPECT_EQ(r.body, "");
    }
    EXPECT_EQ(world.executions(key), 1);
  }
}

// A length the answer keeps without a body to frame (a 304's, a HEAD answer's) goes
// once, as one number: Beast's parser lets `5, 5` and a second equal field through,
// which nghttp2 refuses (curl over HTTP/2: exit 92).
TEST_P(Behaviour, AKeptContentLengthGoesOnceAsOneNumber) {
  for (const std::string given : {"5, 5", "5"}) {
    world.answer = [&given](const StringRequest& req) {
      UpstreamAnswer a;
      a.status = req.method() == bhttp::verb::head ? 200 : 304;
      a.fields = {{"ETag", "\"v1\""}, {"Content-Length", given}};
      a.body = "hello";  // and the World's own Content-Length: 5 after them
      return a;
    };
    for (const char* method : {"GET", "HEAD"}) {
      const auto r = send({method, "/v1/orders/kept", {}, "", {}});
      EXPECT_EQ(r.status, std::string(method) == "HEAD" ? 200 : 304) << given;
      EXPECT_FALSE(r.reset || r.closed) << given << " " << method;
      const auto lengths = std::count_if(r.fields.begin(), r.fields.end(), [](const Field& f) {
        return beast::iequals(f.first, "content-length");
      });
      EXPECT_EQ(lengths, 1) << given << " " << method;
      EXPECT_EQ(r.field("Content-Length"), "5") << given << " " << method;
      EXPECT_EQ(r.body, "");
    }
  }
}

TEST_P(Behaviour, AnUnreachableUpstreamIs502AndReleasesTheClaim) {
  world.stop_upstream();
  const auto r = send(json_post("k-6"));
  EXPECT_EQ(r.status, 502);
  EXPECT_TRUE(problem_type(r).ends_with("/upstream-unreachable")) << r.body;
  const auto again = send(json_post("k-6"));
  EXPECT_EQ(again.status, 502);  // not in flight, not replayed: released
}

TEST_P(Behaviour, ABodyOverMaxBodyIs413AndNotForwarded) {
  const auto r = send(json_post("k-7", "/v1/orders", std::string(70 * 1024, 'x')));
  EXPECT_EQ(r.status, 413);
  EXPECT_TRUE(problem_type(r).ends_with("/body-too-large")) << r.body;
  EXPECT_EQ(world.executions(), 0);
}

TEST_P(Behaviour, TrailersAreStoredAndReplayedAsTrailers) {
  world.answer = [](const StringRequest&) {
    UpstreamAnswer a;
    a.trailers = {{"X-Checksum", "abc"}};
    return a;
  };
  Request r = json_post("k-8");
  r.fields.emplace_back("TE", "trailers");  // HTTP/1.1 clients take trailers only when they say so
  const auto first = send(r);
  const auto again = send(r);
  EXPECT_EQ(again.field("Idempotent-Replayed"), "true");
  ASSERT_EQ(again.trailers.size(), 1U);
  EXPECT_EQ(again.trailers[0].second, "abc");
  EXPECT_EQ(first.trailers, again.trailers);
  EXPECT_EQ(again.field("X-Checksum"), "");  // never a header field
}

// gRPC's trailers-only answer (a status and no message: one HEADERS frame with
// END_STREAM) is replayed as it went out the first time: no trailers apart from the
// head, and the proxy's fields beside the status, where grpcio reads them as
// trailing metadata.
TEST_P(Behaviour, AGrpcTrailersOnlyAnswerIsReplayedTrailersOnly) {
  world.answer = [](const StringRequest&) {
    UpstreamAnswer a;
    a.status = 200;
    a.fields = {{"Content-Type", "application/grpc"},
                {"grpc-status", "5"},
                {"grpc-message", "order%207%20not%20found"},
                {"x-why", "no such order"}};
    a.body.clear();
    return a;
  };
  const Request call{
      "POST",
      "/v1/orders/Get",
      {{"Idempotency-Key", "grpc-1"}, {"Content-Type", "application/grpc"}, {"TE", "trailers"}},
      std::string("\0\0\0\0\x01"
                  "7",
                  6),
      {}};
  const Reply first = send(call);
  const Reply replay = send(call);
  EXPECT_EQ(world.executions("grpc-1"), 1);
  for (const Reply* r : {&first, &replay}) {
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->field("grpc-status"), "5");
    EXPECT_EQ(r->field("x-why"), "no such order");
    EXPECT_NE(r->field("x-request-id"), "");
    EXPECT_NE(r->field("idempotency-key-expires"), "");
    EXPECT_TRUE(r->trailers.empty()) << r->trailers.front().first;
    EXPECT_TRUE(r->body.empty());
    // One HEADERS frame that ends the stream, not a head and an empty DATA frame.
    EXPECT_EQ(r->head_ended, GetParam() == Codec::http2);
  }
  EXPECT_EQ(first.field("idempotent-replayed"), "");
  EXPECT_EQ(replay.field("idempotent-replayed"), "true");
}

TEST_P(Behaviour, ACallerLooksUpItsOwnKeyAndNothingOfAnothersScope) {
  World scoped(R"(store: {memory: {}}
routes:
  - {name: orders, path_prefix: /v1/orders, scope_header: X-Tenant}
)");
  const auto lookup = [&](const std::string& tenant) {
    const Request r{"GET",
                    "/.well-known/idempotency/outcome?path=%2Fv1%2Forders",
                    {{"Idempotency-Key", "look-1"}, {"X-Tenant", tenant}},
                    "",
                    {}};
    const Reply reply = scoped.send(GetParam(), r);
    EXPECT_EQ(reply.status, 200) << reply.body;
    EXPECT_EQ(reply.field("cache-control"), "no-store");
    return nlohmann::json::parse(reply.body, nullptr, false);
  };
  EXPECT_EQ(lookup("acme").value("state", ""), "unknown");
  Request call = json_post("look-1");
  call.fields.emplace_back("X-Tenant", "acme");
  const Reply first = scoped.send(GetParam(), call);
  ASSERT_EQ(first.status, 201);
  const auto mine = lookup("acme");
  EXPECT_EQ(mine.value("state", ""), "completed");
  EXPECT_EQ(mine.value("status", 0), 201);
  EXPECT_TRUE(mine.value("replays", false));
  EXPECT_FALSE(mine.contains("body"));
  EXPECT_EQ(mine.dump().find(first.body), std::string::npos);  // never the answer
  const auto theirs = lookup("globex");
  EXPECT_EQ(theirs.value("state", ""), "unknown");
  EXPECT_FALSE(theirs.value("replays", true));
  EXPECT_EQ(scoped.executions("look-1"), 1);
}

// What the proxy reads of every request's fields (one walk over them): the upstream
// gets exactly one X-Request-Id (a sane one as sent, the first of several, else the
// proxy's), one traceparent, no tracestate without the traceparent it belonged to, and
// never a client's fencing token, however the names are spelled.
TEST_P(Behaviour, TheUpstreamGetsOneRequestIdOneTraceAndNoClientsFencingToken) {
  // HTTP/2 names are lower case (RFC 9113 8.2.1); HTTP/1.1's any case (RFC 9110 5.1).
  const bool lower = GetParam() == Codec::http2;
  const auto spelled = [lower](const char* name) {
    std::string s(name);
    if (lower) std::transform(s.begin(), s.end(), s.begin(), ::tolower);
    return s;
  };
  const auto upstream_got = [&](std::vector<Field> sent) {
    Request r = json_post("ids-" + std::to_string(world.executions()));
    for (auto& f : sent) r.fields.emplace_back(spelled(f.first.c_str()), std::move(f.second));
    const Reply reply = send(r);
    EXPECT_EQ(reply.status, 201);
    const auto& got = world.last_request();
    EXPECT_EQ(got.count("x-request-id"), 1U);
    EXPECT_EQ(got.count("traceparent"), 1U);
    EXPECT_EQ(got.count("tracestate"), 0U);
    EXPECT_EQ(got.count("idempotency-fencing-token"), 0U);
    EXPECT_EQ(reply.field("x-request-id"), got["x-request-id"]);
    return std::string(got["x-request-id"]);
  };
  EXPECT_EQ(upstream_got({{"x-REQUEST-id", "rid-1"}}), "rid-1");
  EXPECT_EQ(upstream_got({{"X-Request-Id", "first"}, {"X-Request-Id", "second"}}), "first");
  for (const std::string& bad : {std::string(129, 'a'), std::string("a b")}) {
    const auto made = upstream_got({{"X-Request-Id", bad}});
    EXPECT_EQ(made.size(), 32U);
    EXPECT_EQ(made.find_first_not_of("0123456789abcdef"), std::string::npos) << made;
  }
  const auto made = upstream_got({{"TraceState", "congo=t61"}, {"Idempotency-Fencing-TOKEN", "9"}});
  EXPECT_EQ(made.size(), 32U);
  EXPECT_EQ(world.last_request()["traceparent"].substr(0, 3), "00-");
}

// A body larger than a socket's buffers both ways: the part the socket takes at once
// goes in one send (http/try_io.hpp), the rest as the peer reads, intact.
TEST_P(Behaviour, ABodyLargerThanTheSocketsBuffersCrossesIntactBothWays) {
  // (The test upstream reads bodies up to Beast's 1 MiB default.)
  std::string request(900 << 10, '\0'), answer(5 << 20, '\0');
  for (std::size_t i = 0; i < request.size(); ++i) request[i] = static_cast<char>('a' + i % 23);
  for (std::size_t i = 0; i < answer.size(); ++i) answer[i] = static_cast<char>('A' + i % 19);
  world.answer = [&](const StringRequest&) {
    UpstreamAnswer a;
    a.status = 200;
    a.body = answer;
    return a;
  };
  const Reply r = send({"POST", "/status/upload", {}, request, {}});
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(world.last_request().body().size(), request.size());
  EXPECT_TRUE(world.last_request().body() == request);
  EXPECT_EQ(r.body.size(), answer.size());
  EXPECT_TRUE(r.body == answer);
}

// The access line names the target as routed (normalized) or, when the proxy refused
// it before it could be normalized, as the client sent it.
TEST_P(Behaviour, TheAccessLogNamesTheTargetAsRoutedOrAsSentWhenRefused) {
  ops::configure_logging("info", "text");
  const std::string out = captured_stdout([&] {
    EXPECT_EQ(send(json_post("log-1", "/v1//orders/./a")).status, 201);
    EXPECT_EQ(send({"GET", "/v1/%zz", {}, "", {}}).status, 400);
  });
  ops::configure_logging("warn", "text");
  EXPECT_NE(out.find("[access] POST /v1/orders/a route=orders outcome=executed"), std::string::npos)
      << out;
  EXPECT_NE(out.find("[access] GET /v1/%zz route=- outcome=bad_request status=400"),
            std::string::npos)
      << out;
}

// RFC 9110 10.1.1: a keyed request that expects 100-continue is told to send its body
// before the proxy reads it; the upstream gets the request without Expect, once.
TEST_P(Behaviour, AKeyedRequestThatExpectsContinueIsToldToSendItsBody) {
  auto request = json_post("expect-1");
  request.fields.emplace_back("Expect", "100-continue");
  const auto r = send(request);
  EXPECT_EQ(r.status, 201);
  // This HTTP/2 client's DATA comes with its HEADERS: a body already there is not asked for.
  EXPECT_EQ(r.interim,
            GetParam() == Codec::http1 ? std::vector<unsigned>{100} : std::vector<unsigned>{});
  EXPECT_EQ(world.executions("expect-1"), 1);
  EXPECT_EQ(world.last_request().count("Expect"), 0U);
  EXPECT_EQ(world.last_request().body(), R"({"a":1})");
}

// A cached replay larger than the socket's buffers: what the socket takes at once
// goes in one send with no coroutine frame, and the rest is awaited as the client reads.
TEST_P(Behaviour, ACachedReplayLargerThanTheSocketsBuffersReachesTheClientWhole) {
  std::string answer(250 << 10, '\0');  // kept whole (a chunk is 256 KiB), so cached
  for (std::size_t i = 0; i < answer.size(); ++i) answer[i] = static_cast<char>('A' + i % 19);
  world.answer = [&](const StringRequest&) {
    UpstreamAnswer a;
    a.status = 201;
    a.body = answer;
    return a;
  };
  const auto first = send(json_post("big-1"));
  ASSERT_EQ(first.status, 201);
  ASSERT_NE(world.runtime().coordinator.cached(engine::RoutePolicy{}, {"", "big-1"}), nullptr);
  world.client_send_buffer = 8192;
  const auto retry = json_post("big-1");
  for (int i = 0; i < 2; ++i) {  // the head laid out at the first replay, gathered at the next
    const auto again = send(retry);
    EXPECT_EQ(again.status, 201);
    EXPECT_EQ(again.field("Idempotent-Replayed"), "true");
    EXPECT_EQ(again.body.size(), answer.size());
    EXPECT_TRUE(again.body == answer);
  }
  EXPECT_EQ(world.executions("big-1"), 1);
}

INSTANTIATE_TEST_SUITE_P(BothCodecs, Behaviour, ::testing::Values(Codec::http1, Codec::http2),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace idemproxy::testing::behaviour_test
