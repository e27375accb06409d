#include "idemproxy/ops/metrics.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

using idemproxy::ops::Outcome;

TEST(MetricsReference, EveryOutcomeIsDocumented) {
  std::ifstream in(IDEMPROXY_SOURCE_DIR "/docs/METRICS.md");
  ASSERT_TRUE(in);
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::set<std::string> names;
  for (int i = 0; i <= static_cast<int>(Outcome::shadow_would_reject); ++i) {
    const std::string name = idemproxy::ops::to_string(static_cast<Outcome>(i));
    EXPECT_NE(name, "unknown");
    EXPECT_TRUE(names.insert(name).second) << "duplicate outcome name " << name;
    EXPECT_NE(doc.find("| `" + name + "` |"), std::string::npos) << name << " is undocumented";
  }
}

TEST(Metrics, RenderEscapesRouteLabels) {
  idemproxy::ops::Metrics m;
  m.count_request("we\"ird\\route", Outcome::replayed);
  const auto text = m.render();
  EXPECT_NE(text.find(R"(route="we\"ird\\route",outcome="replayed"} 1)"), std::string::npos)
      << text;
}

TEST(Metrics, LatencyBucketsReachTheLongestRequest) {
  using idemproxy::ops::latency_buckets;
  const auto thirty = latency_buckets(30);
  EXPECT_EQ(thirty.front(), 0.001);
  EXPECT_EQ(std::vector<double>(thirty.end() - 3, thirty.end()), (std::vector<double>{10, 15, 30}));
  const auto odd = latency_buckets(45);
  EXPECT_EQ(std::vector<double>(odd.end() - 3, odd.end()), (std::vector<double>{15, 30, 45}));
  EXPECT_EQ(latency_buckets(2).back(), 10);  // never fewer than the standard ones
}

TEST(Metrics, RequestDurationsAreCumulativeByRouteAndOutcome) {
  idemproxy::ops::Metrics m({"1.2.3", "v1.2.3-4-gabc"}, 30);
  m.count_request("orders", Outcome::executed, 0.004);
  m.count_request("orders", Outcome::executed, 20);
  const auto text = m.render();
  for (
      const char* line :
      {R"(idemproxy_request_duration_seconds_bucket{route="orders",outcome="executed",le="0.0025"} 0)",
       R"(idemproxy_request_duration_seconds_bucket{route="orders",outcome="executed",le="0.005"} 1)",
       R"(idemproxy_request_duration_seconds_bucket{route="orders",outcome="executed",le="15"} 1)",
       R"(idemproxy_request_duration_seconds_bucket{route="orders",outcome="executed",le="30"} 2)",
       R"(idemproxy_request_duration_seconds_count{route="orders",outcome="executed"} 2)",
       R"(idemproxy_requests_total{route="orders",outcome="executed"} 2)",
       R"(idemproxy_build_info{version="1.2.3",revision="v1.2.3-4-gabc"} 1)"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
}
