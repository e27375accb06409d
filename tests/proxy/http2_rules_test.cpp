// RFC 9113's request rules in the HTTP/2 codec, before any phase, and the field
// rules of a hop: each case here was once a way past the proxy (the socket-pair bridge
// turned the stream into HTTP/1.1 text, where these meant something else).
#include <gtest/gtest.h>

#include "world.hpp"

namespace idemproxy::testing::http2_rules_test {
namespace {

const char* kConfig = R"(store: {memory: {}}
routes:
  - {name: orders, path_prefix: /v1/orders}
)";

Request keyed(std::string key, std::string path = "/v1/orders") {
  return {"POST", std::move(path), {{"idempotency-key", std::move(key)}}, R"({"a":1})", {}};
}

// RFC 9113 §8.3.1: :path is origin-form (or "*" for OPTIONS). An absolute URI there
// named another authority than :authority, which the bridge then took for Host.
TEST(Http2Rules, AnAbsolutePathIsMalformedAndNothingIsForwarded) {
  World world(kConfig);
  for (const std::string_view path :
       {"http://evil.example/v1/orders", "http://evil.example/pt/x"}) {
    Request r = keyed("abs-" + std::string(path.substr(path.size() - 2)));
    r.fields.emplace_back(":path", std::string(path));
    r.fields.emplace_back(":scheme", "foo");
    const auto reply = world.send(Codec::http2, r);
    EXPECT_EQ(reply.status, 400) << path;
  }
  Request star = keyed("star");
  star.fields.emplace_back(":path", "*");
  const auto starred = world.send(Codec::http2, star);  // * is for OPTIONS only
  EXPECT_TRUE(starred.status == 400 || (starred.reset && starred.status == 0));
  EXPECT_EQ(world.executions(), 0);
}

TEST(Http2Rules, ASchemeOtherThanHttpOrHttpsIsMalformed) {
  World world(kConfig);
  Request r = keyed("scheme");
  r.fields.emplace_back(":scheme", "foo");
  EXPECT_EQ(world.send(Codec::http2, r).status, 400);
  EXPECT_EQ(world.executions(), 0);
}

TEST(Http2Rules, AHostThatDiffersFromAuthorityIsMalformed) {
  World world(kConfig);
  Request r = keyed("host");
  r.fields.emplace_back("host", "evil.example");
  EXPECT_EQ(world.send(Codec::http2, r).status, 400);
  EXPECT_EQ(world.executions(), 0);
}

// RFC 9113 §8.1.1: DATA that disagrees with content-length makes the request malformed,
// a stream error; nothing of it may reach the upstream as a whole request. The bridge
// wrote the first content-length bytes out as a complete HTTP/1.1 request.
TEST(Http2Rules, ABodyLongerThanItsContentLengthIsNeverExecuted) {
  World world(kConfig);
  for (const std::string_view path : {"/v1/orders", "/pt/x"}) {
    Request r = keyed("long", std::string(path));
    r.fields.emplace_back("content-length", "7");
    r.body = R"({"a":1})" + std::string(52, ' ');
    r.data_frames = {7, 52};
    const auto reply = world.send(Codec::http2, r);
    EXPECT_TRUE(reply.reset) << path;
    EXPECT_EQ(reply.status, 0U) << path;
  }
  EXPECT_EQ(world.executions(), 0);
  // Nothing was stored: the same key executes when it comes whole.
  EXPECT_EQ(world.send(Codec::http2, keyed("long")).status, 201);
  EXPECT_EQ(world.executions("long"), 1);
}

TEST(Http2Rules, ABodyShorterThanItsContentLengthIsNeverExecuted) {
  World world(kConfig);
  for (const std::string_view path : {"/v1/orders", "/pt/x"}) {
    Request r = keyed("short", std::string(path));
    r.fields.emplace_back("content-length", "70");
    r.data_frames = {7};
    const auto reply = world.send(Codec::http2, r);
    EXPECT_TRUE(reply.reset || reply.status == 400) << path;
  }
  EXPECT_EQ(world.executions(), 0);
}

// No field from a client or an upstream chooses what becomes a trailer: the made-up
// Idemproxy-Trailers field the bridge obeyed is an ordinary field now.
TEST(Http2Rules, NoFieldChoosesWhatBecomesATrailer) {
  World world(kConfig);
  world.answer = [](const StringRequest&) {
    UpstreamAnswer a;
    a.fields = {{"Content-Type", "application/json"},
                {"Idemproxy-Trailers", "content-type, x-secret"},
                {"X-Secret", "s"}};
    return a;
  };
  for (int i = 0; i < 2; ++i) {  // executed, then replayed
    Request r = keyed("steer");
    r.fields.emplace_back("idemproxy-trailers", "x-client");
    const auto reply = world.send(Codec::http2, r);
    EXPECT_EQ(reply.status, 201);
    EXPECT_TRUE(reply.trailers.empty());
    EXPECT_EQ(reply.field("x-secret"), "s");
    EXPECT_EQ(reply.field("content-type"), "application/json");
  }
  EXPECT_EQ(world.executions("steer"), 1);
}

// RFC 7541 §6.2.3: a field whose value is new on every answer (the request id) is sent
// "never indexed", so it does not churn the client's dynamic table; fields that repeat
// are indexed as before. Executed, replayed from the cache, and passed through.
// A replay's stored fields go by view when their names are lower-case (an HTTP/2
// upstream's), copied and lowered otherwise: both reach the client whole.
TEST(Http2Rules, AnAnswersRequestIdIsNeverIndexedAndItsOtherFieldsAre) {
  World world(kConfig);
  world.answer = [](const StringRequest&) {
    UpstreamAnswer a;
    a.fields = {{"content-type", "application/json"}, {"X-Mixed-Case", "kept"}};
    return a;
  };
  std::vector<Request> requests = {keyed("index"), keyed("index"), keyed("index", "/pt/x")};
  requests[2].fields.clear();
  for (const auto& r : requests) {
    const auto reply = world.send(Codec::http2, r);
    EXPECT_EQ(reply.status, 201) << r.path;
    EXPECT_NE(reply.field("x-request-id"), "");
    EXPECT_EQ(reply.field("content-type"), "application/json");
    EXPECT_EQ(reply.field("x-mixed-case"), "kept");
    EXPECT_EQ(reply.never_indexed, std::vector<std::string>{"x-request-id"}) << r.path;
  }
  EXPECT_EQ(world.executions("index"), 1);
}

}  // namespace
}  // namespace idemproxy::testing::http2_rules_test
