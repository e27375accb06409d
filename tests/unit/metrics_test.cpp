#include "idemproxy/ops/metrics.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

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

namespace {
// The value of the line of `text` that starts with `series` and a space, or -1.
double series_value(const std::string& text, const std::string& series) {
  const auto at = text.find(series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 1));
}

std::string total(const std::string& route, const char* outcome) {
  return "idemproxy_requests_total{route=\"" + route + "\",outcome=\"" + outcome + "\"}";
}
}  // namespace

TEST(Metrics, RequestsCountedFromManyThreadsAreEachCountedOnce) {
  idemproxy::ops::Metrics m({}, 30);
  constexpr int kThreads = 4, kEach = 24000;  // 1,000 of each pair a thread
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&m, t] {
      // More pairs than a thread keeps at hand, in turn, so lookups miss too.
      for (int i = 0; i < kEach; ++i) {
        m.count_request("route" + std::to_string(i % 12),
                        (i / 12) % 2 ? Outcome::replayed : Outcome::executed, t == 0 ? 0.002 : 100);
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto text = m.render();
  double all = 0;
  for (int r = 0; r < 12; ++r) {
    for (const char* outcome : {"executed", "replayed"}) {
      const auto n = series_value(text, total("route" + std::to_string(r), outcome));
      EXPECT_EQ(n, kThreads * kEach / 24) << r << " " << outcome;
      all += n;
      const std::string labels = "{route=\"route" + std::to_string(r) + "\",outcome=\"" + outcome;
      // A request past every bound counts in +Inf and the count, in no bucket.
      EXPECT_EQ(series_value(
                    text, "idemproxy_request_duration_seconds_bucket" + labels + "\",le=\"+Inf\"}"),
                n);
      EXPECT_EQ(series_value(text, "idemproxy_request_duration_seconds_count" + labels + "\"}"), n);
      EXPECT_EQ(series_value(
                    text, "idemproxy_request_duration_seconds_bucket" + labels + "\",le=\"30\"}"),
                n / kThreads);
      const double sum = n / kThreads * 0.002 + n / kThreads * (kThreads - 1) * 100;
      EXPECT_NEAR(series_value(text, "idemproxy_request_duration_seconds_sum" + labels + "\"}"),
                  sum, sum * 1e-5);  // as rendered: six significant digits
    }
  }
  EXPECT_EQ(all, kThreads * kEach);
  std::size_t snapshot = 0;
  const auto stats = m.snapshot();
  for (const auto& r : stats.at("requests")) snapshot += r["count"].get<std::size_t>();
  EXPECT_EQ(snapshot, std::size_t{kThreads * kEach});
}

TEST(Metrics, InstancesOnOneThreadCountApart) {
  auto first = std::make_unique<idemproxy::ops::Metrics>();
  first->count_request("orders", Outcome::executed);
  idemproxy::ops::Metrics second;
  second.count_request("orders", Outcome::executed);
  second.count_request("orders", Outcome::executed);
  EXPECT_EQ(series_value(first->render(), total("orders", "executed")), 1);
  EXPECT_EQ(series_value(second.render(), total("orders", "executed")), 2);
  // One made where an ended one was (the allocator's next block of that size, often
  // the same address) starts from nothing: a thread's recent lookups are not its own.
  first.reset();
  auto third = std::make_unique<idemproxy::ops::Metrics>();
  third->count_request("orders", Outcome::executed);
  EXPECT_EQ(series_value(third->render(), total("orders", "executed")), 1);
  EXPECT_EQ(series_value(second.render(), total("orders", "executed")), 2);
}

TEST(Metrics, UpstreamAndStoreDurationsObservedFromManyThreadsAreEachCounted) {
  idemproxy::ops::Metrics m({}, 30);
  constexpr int kThreads = 4, kEach = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&m] {
      for (int i = 0; i < kEach; ++i) {
        m.observe_upstream(i % 2 ? 0.004 : 45);  // past every bound half the time
        m.observe_store(0.0005);
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto text = m.render();
  const double n = kThreads * kEach;
  const std::string up = "idemproxy_upstream_duration_seconds";
  EXPECT_EQ(series_value(text, up + "_count"), n) << text;
  EXPECT_EQ(series_value(text, up + "_bucket{le=\"+Inf\"}"), n);
  EXPECT_EQ(series_value(text, up + "_bucket{le=\"0.0025\"}"), 0);
  EXPECT_EQ(series_value(text, up + "_bucket{le=\"0.005\"}"), n / 2);
  EXPECT_EQ(series_value(text, up + "_bucket{le=\"30\"}"), n / 2);
  EXPECT_NEAR(series_value(text, up + "_sum"), n / 2 * (0.004 + 45), n * 45 * 1e-5);
  const std::string store = "idemproxy_store_duration_seconds";
  EXPECT_EQ(series_value(text, store + "_bucket{le=\"0.001\"}"), n);
  EXPECT_EQ(series_value(text, store + "_count"), n);
}
