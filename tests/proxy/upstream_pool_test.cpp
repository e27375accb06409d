// The HTTP/1.1 upstream pool's keep-alive connections (upstream/pool.cpp): one kept
// alive is reused, and one the upstream closed while it sat idle is not, though the
// answer before it said nothing of closing. Both codecs on the client's side, a
// covered route and a pass-through request on the upstream's.
#include <gtest/gtest.h>

#include "world.hpp"

namespace idemproxy::testing::upstream_pool_test {
namespace {

const char* kConfig = R"(store: {memory: {}}
routes:
  - {name: orders, path_prefix: /v1/orders}
)";

// Three requests in turn: two keyed ones, a GET between them.
std::vector<Request> three() {
  return {{"POST", "/v1/orders", {{"Idempotency-Key", "pool-1"}}, R"({"a":1})", {}},
          {"GET", "/v1/orders/1", {}, "", {}},
          {"POST", "/v1/orders", {{"Idempotency-Key", "pool-2"}}, R"({"a":2})", {}}};
}

class UpstreamPool : public ::testing::TestWithParam<Codec> {
 protected:
  World world{kConfig};
};

TEST_P(UpstreamPool, AConnectionKeptAliveCarriesTheNextRequest) {
  for (const auto& request : three()) {
    EXPECT_EQ(world.send(GetParam(), request).status, 201);
  }
  EXPECT_EQ(world.executions(), 3);
  EXPECT_EQ(world.upstream_connections(), 1);
}

// Without the check before reuse, the second request went out on the closed
// connection and came back 502 (the upstream's end read as a failed answer).
TEST_P(UpstreamPool, AConnectionTheUpstreamClosedWhileIdleIsNotReused) {
  world.answer = [](const StringRequest&) {
    UpstreamAnswer a;
    a.close_after = true;
    return a;
  };
  for (const auto& request : three()) {
    const auto reply = world.send(GetParam(), request);
    EXPECT_EQ(reply.status, 201) << request.method << " " << request.path << ": " << reply.body;
  }
  EXPECT_EQ(world.executions(), 3);
  EXPECT_EQ(world.upstream_connections(), 3);
}

// An idle connection on which the upstream sends an answer nobody asked for is not
// reused: had it carried the next request, that request would have been given the
// stray 200 for its own answer. The request after waits until the bytes came.
TEST_P(UpstreamPool, AConnectionTheUpstreamSpokeOnWhileIdleIsNotReused) {
  int answered = 0;
  world.answer = [&answered](const StringRequest&) {
    UpstreamAnswer a;
    a.body = R"({"id":)" + std::to_string(++answered) + "}";
    if (answered == 1) a.unasked = "HTTP/1.1 200 X\r\nContent-Length: 9\r\n\r\n{\"id\":99}";
    return a;
  };
  auto requests = three();
  requests[1].start_after = std::chrono::milliseconds(150);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto reply = world.send(GetParam(), requests[i]);
    EXPECT_EQ(reply.status, 201) << requests[i].method << " " << requests[i].path;
    EXPECT_EQ(reply.body, R"({"id":)" + std::to_string(i + 1) + "}");
  }
  EXPECT_EQ(world.executions(), 3);
  EXPECT_EQ(world.upstream_connections(), 2);
}

// The upstream answers the first request on a connection and closes the connection
// when the next one arrives, before a byte of an answer (a keep-alive timeout firing
// as the request came; the FIN in flight as the pool hands the connection out). A
// request that can go again (no body, a method a repeat cannot harm, no key) goes once
// more on a new connection; any other gets the upstream's failure: it may have run.
TEST_P(UpstreamPool, ARequestAKeptAliveConnectionEndedUnansweredGoesAgainOnlyWhenHarmless) {
  struct Case {
    Request second;
    unsigned status;
    int executions;
  };
  const std::vector<Case> cases = {
      {{"GET", "/v1/orders/1", {}, "", {}}, 201, 3},
      {{"HEAD", "/v1/orders/1", {}, "", {}}, 201, 3},
      {{"DELETE", "/v1/orders/1", {}, "", {}}, 201, 3},
      {{"POST", "/v1/orders/1", {}, "", {}}, 502, 2},   // no key, but not harmless
      {{"PUT", "/v1/orders/1", {}, "{}", {}}, 502, 2},  // a body: not kept to send again
      {json_post("pool-keyed"), 502, 2},                // under a key: never again
  };
  for (const auto& c : cases) {
    World w{kConfig};
    int answered = 0;
    w.answer = [&answered](const StringRequest&) {
      UpstreamAnswer a;
      a.hang_up = ++answered == 2;
      return a;
    };
    EXPECT_EQ(w.send(GetParam(), {"GET", "/v1/orders/0", {}, "", {}}).status, 201);
    const auto reply = w.send(GetParam(), c.second);
    EXPECT_EQ(reply.status, c.status) << c.second.method << ": " << reply.body;
    EXPECT_EQ(w.executions(), c.executions) << c.second.method;
    EXPECT_EQ(w.upstream_connections(), c.executions == 3 ? 2 : 1) << c.second.method;
    if (c.status == 502) {
      EXPECT_EQ(problem_type(reply), "https://idemproxy.dev/problems/upstream-failed");
    }
  }
}

// On a connection that was new, the same end is the answer's failure: nothing says the
// upstream did not read the request and fail on it.
TEST_P(UpstreamPool, ARequestANewConnectionEndedUnansweredDoesNotGoAgain) {
  world.answer = [](const StringRequest&) {
    UpstreamAnswer a;
    a.hang_up = true;
    return a;
  };
  const auto reply = world.send(GetParam(), {"GET", "/v1/orders/1", {}, "", {}});
  EXPECT_EQ(reply.status, 502) << reply.body;
  EXPECT_EQ(world.executions(), 1);
  EXPECT_EQ(world.upstream_connections(), 1);
}

INSTANTIATE_TEST_SUITE_P(BothCodecs, UpstreamPool, ::testing::Values(Codec::http1, Codec::http2),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace idemproxy::testing::upstream_pool_test
