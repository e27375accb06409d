// Per-tenant quotas (a route's `quota`), over both codecs, in this process: the real
// codecs and phases on the memory store, which counts usage as PostgreSQL's triggers
// do (the store contract holds both to it).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "world.hpp"

namespace idemproxy::testing::quota_test {
namespace {

using namespace std::chrono_literals;

const char* kConfig = R"(store: {memory: {}}
routes:
  - {name: stored, path_prefix: /v1/stored, scope_header: X-Tenant, quota: {records: 3}}
  - {name: running, path_prefix: /v1/running, scope_header: X-Tenant, quota: {in_flight: 2}}
  - {name: free, path_prefix: /v1/free, scope_header: X-Tenant}
  - {name: watched, path_prefix: /v1/watched, scope_header: X-Tenant, mode: shadow,
     quota: {records: 1}}
)";

Request keyed(std::string key, std::string tenant, std::string path = "/v1/stored") {
  return {"POST",
          std::move(path),
          {{"Idempotency-Key", std::move(key)},
           {"X-Tenant", std::move(tenant)},
           {"Content-Type", "application/json"}},
          R"({"a":1})",
          {}};
}

nlohmann::json problem(const Reply& r) { return nlohmann::json::parse(r.body, nullptr, false); }

class Quota : public ::testing::TestWithParam<Codec> {
 protected:
  Reply send(const Request& r) { return world.send(GetParam(), r); }
  /// idemproxy_requests_total for `route` and `outcome`, as /metrics renders it.
  std::string counted(const std::string& route, const std::string& outcome) {
    const std::string text = world.metrics().render();
    const std::string series =
        "idemproxy_requests_total{route=\"" + route + "\",outcome=\"" + outcome + "\"} ";
    const auto at = text.find(series);
    if (at == std::string::npos) return "absent";
    return text.substr(at + series.size(), text.find('\n', at) - at - series.size());
  }

  SystemClock clock;
  store::MemoryStore memory{clock};
  World world{kConfig, &memory};
};

TEST_P(Quota, ANewKeyPastTheRecordsCapIsRefusedWith429AndStoredKeysStillReplay) {
  for (const char* key : {"k1", "k2", "k3"}) ASSERT_EQ(send(keyed(key, "acme")).status, 201);
  const Reply over = send(keyed("k4", "acme"));
  EXPECT_EQ(over.status, 429);
  EXPECT_EQ(over.field("Content-Type"), "application/problem+json");
  EXPECT_EQ(problem(over).value("type", ""), "https://idemproxy.dev/problems/quota-exceeded");
  EXPECT_NE(problem(over).value("detail", "").find("quota.records: 3"), std::string::npos)
      << over.body;
  EXPECT_EQ(over.field("Retry-After"), "");  // records free up only as they expire
  EXPECT_EQ(world.executions("k4"), 0);      // never forwarded
  // A stored key replays; another tenant stores its own three.
  const Reply replay = send(keyed("k1", "acme"));
  EXPECT_EQ(replay.status, 201);
  EXPECT_EQ(replay.field("Idempotent-Replayed"), "true");
  EXPECT_EQ(send(keyed("k4", "globex")).status, 201);
  // A route without a quota is not limited by this tenant's usage elsewhere.
  EXPECT_EQ(send(keyed("k9", "acme", "/v1/free")).status, 201);
  EXPECT_EQ(counted("stored", "quota_exceeded"), "1");
  EXPECT_EQ(counted("stored", "replayed"), "1");
  // Refusals are labelled by route, never by tenant.
  EXPECT_EQ(world.metrics().render().find("acme"), std::string::npos);
}

TEST_P(Quota, ThePurgedRecordsPlaceIsGivenBack) {
  for (const char* key : {"k1", "k2", "k3"}) ASSERT_EQ(send(keyed(key, "acme")).status, 201);
  ASSERT_EQ(send(keyed("k4", "acme")).status, 429);
  ASSERT_TRUE(memory.purge({"acme", "k2"}).value());
  EXPECT_EQ(send(keyed("k4", "acme")).status, 201);
  EXPECT_EQ(world.executions("k4"), 1);
}

TEST_P(Quota, TheInFlightCapRefusesWithRetryAfterUntilARequestFinishes) {
  world.answer = [](const StringRequest&) {
    UpstreamAnswer a;
    a.delay = 300ms;
    return a;
  };
  std::vector<Request> three;
  for (const char* key : {"r1", "r2", "r3"}) three.push_back(keyed(key, "acme", "/v1/running"));
  const std::vector<Reply> replies = world.send_all(GetParam(), three);
  int stored = 0;
  for (const Reply& r : replies) {
    if (r.status == 201) {
      ++stored;
    } else {
      EXPECT_EQ(r.status, 429);
      EXPECT_EQ(r.field("Retry-After"), "1");
      EXPECT_NE(problem(r).value("detail", "").find("quota.in_flight: 2"), std::string::npos)
          << r.body;
    }
  }
  EXPECT_EQ(stored, 2);
  EXPECT_EQ(world.executions(), 2);
  // Both finished: the next key runs, and none of the three is in flight.
  EXPECT_EQ(send(keyed("r4", "acme", "/v1/running")).status, 201);
}

// A gRPC caller is refused as gRPC refuses: a trailers-only answer with
// RESOURCE_EXHAUSTED, never problem+json.
TEST_P(Quota, AGrpcCallPastTheCapGetsResourceExhausted) {
  if (GetParam() != Codec::http2) GTEST_SKIP() << "gRPC runs over HTTP/2";
  const auto call = [](const std::string& key) {
    return Request{"POST",
                   "/v1/stored/Create",
                   {{"Idempotency-Key", key},
                    {"X-Tenant", "acme"},
                    {"Content-Type", "application/grpc"},
                    {"TE", "trailers"}},
                   std::string("\0\0\0\0\x01"
                               "7",
                               6),
                   {}};
  };
  world.answer = [](const StringRequest&) {
    UpstreamAnswer a;
    a.status = 200;
    a.fields = {{"Content-Type", "application/grpc"}, {"grpc-status", "0"}};
    a.body.clear();
    return a;
  };
  for (const char* key : {"g1", "g2", "g3"}) ASSERT_EQ(send(call(key)).field("grpc-status"), "0");
  const Reply over = send(call("g4"));
  EXPECT_EQ(over.status, 200);
  EXPECT_EQ(over.field("grpc-status"), "8");  // RESOURCE_EXHAUSTED
  EXPECT_EQ(over.field("grpc-message").rfind("quota-exceeded: ", 0), 0u)
      << over.field("grpc-message");
  EXPECT_EQ(world.executions("g4"), 0);
}

// Shadow mode forwards everything, past a quota too, and counts what enforce would
// have refused.
TEST_P(Quota, ShadowModeForwardsPastTheCapAndCountsTheRefusal) {
  ASSERT_EQ(send(keyed("s1", "acme", "/v1/watched")).status, 201);
  const Reply past = send(keyed("s2", "acme", "/v1/watched"));
  EXPECT_EQ(past.status, 201);
  EXPECT_EQ(world.executions("s2"), 1);
  EXPECT_EQ(counted("watched", "shadow_would_reject"), "1");
}

INSTANTIATE_TEST_SUITE_P(BothCodecs, Quota, ::testing::Values(Codec::http1, Codec::http2),
                         [](const auto& info) { return to_string(info.param); });

}  // namespace
}  // namespace idemproxy::testing::quota_test
