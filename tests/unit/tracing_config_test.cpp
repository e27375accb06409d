// The tracing section: off without an endpoint, every key validated with its place,
// and only sample_ratio reloadable.
#include <gtest/gtest.h>

#include "idemproxy/config/config.hpp"

using namespace idemproxy::config;
using namespace std::chrono_literals;

namespace {

const std::string kBase =
    "upstream: {url: 'http://127.0.0.1:3000'}\nstore: {memory: {}}\n"
    "routes: [{name: any, path_prefix: /any}]\n";

Config parse(const std::string& tracing) {
  return parse_config(kBase + tracing, "test.yaml",
                      [](const std::string&) -> std::optional<std::string> { return "k-123"; });
}

// "LINE:COL: message"
std::string error_of(const std::string& tracing) {
  try {
    parse(tracing);
  } catch (const ConfigError& e) {
    return std::string(e.what()).substr(std::string("test.yaml:").size());
  }
  ADD_FAILURE() << "no error for:\n" << tracing;
  return "";
}

}  // namespace

TEST(TracingConfig, OffWithoutAnEndpoint) {
  EXPECT_FALSE(parse("").tracing.enabled());
  EXPECT_FALSE(parse("tracing: {service_name: x}\n").tracing.enabled());
  EXPECT_FALSE(parse("tracing: {otlp_endpoint: ''}\n").tracing.enabled());
  const auto defaults = parse("").tracing;
  EXPECT_EQ(defaults.service_name, "idemproxy");
  EXPECT_EQ(defaults.sample_ratio, 1.0);
  EXPECT_EQ(defaults.timeout, 10s);
  EXPECT_EQ(defaults.batch_delay, 5s);
  EXPECT_EQ(defaults.max_queue, 2048U);
  EXPECT_EQ(defaults.max_batch, 512U);
}

TEST(TracingConfig, EveryKeyIsRead) {
  const auto t = parse(
                     "tracing:\n"
                     "  otlp_endpoint: http://collector:4318/v1/traces\n"
                     "  service_name: payments-proxy\n"
                     "  sample_ratio: 0.25\n"
                     "  headers: {X-Api-Key: '${KEY}', x-tenant: blue}\n"
                     "  timeout: 2s\n"
                     "  batch_delay: 500ms\n"
                     "  max_queue: 100\n"
                     "  max_batch: 10\n")
                     .tracing;
  EXPECT_TRUE(t.enabled());
  EXPECT_FALSE(t.tls);
  EXPECT_EQ(t.host, "collector");
  EXPECT_EQ(t.port, "4318");
  EXPECT_EQ(t.target, "/v1/traces");
  EXPECT_EQ(t.service_name, "payments-proxy");
  EXPECT_EQ(t.sample_ratio, 0.25);
  EXPECT_EQ(t.headers,
            (std::map<std::string, std::string>{{"X-Api-Key", "k-123"}, {"x-tenant", "blue"}}));
  EXPECT_EQ(t.timeout, 2s);
  EXPECT_EQ(t.batch_delay, 500ms);
  EXPECT_EQ(t.max_queue, 100U);
  EXPECT_EQ(t.max_batch, 10U);
}

TEST(TracingConfig, EndpointsOverHttpsAndIpv6) {
  const auto s = parse("tracing: {otlp_endpoint: 'https://otlp.example.com/v1/traces'}\n").tracing;
  EXPECT_TRUE(s.tls);
  EXPECT_EQ(s.port, "443");
  const auto v6 = parse("tracing: {otlp_endpoint: 'http://[::1]:4318/v1/traces?x=1'}\n").tracing;
  EXPECT_EQ(v6.host, "::1");
  EXPECT_EQ(v6.target, "/v1/traces?x=1");
  // No path: accepted as given, with a warning naming the usual one.
  const auto bare = parse("tracing: {otlp_endpoint: 'http://c:4318'}\n");
  EXPECT_EQ(bare.tracing.target, "/");
  ASSERT_EQ(bare.warnings.size(), 1U);
  EXPECT_NE(bare.warnings[0].find("/v1/traces"), std::string::npos);
}

TEST(TracingConfig, MistakesAreErrorsWithTheirPlace) {
  EXPECT_EQ(error_of("tracing: {otlp_endpint: http://c:4318/v1/traces}\n").substr(0, 4), "4:11");
  EXPECT_NE(error_of("tracing: {otlp_endpoint: 'grpc://c:4317'}\n").find("http:// or https://"),
            std::string::npos);
  EXPECT_NE(error_of("tracing: {otlp_endpoint: 'not a url'}\n").find("not a valid URL"),
            std::string::npos);
  EXPECT_NE(error_of("tracing: {otlp_endpoint: 'http://u:p@c:4318/v1/traces'}\n").find("headers"),
            std::string::npos);
  for (const char* ratio : {"1.5", "-0.1", "half", "nan", "0.5x", "''"}) {
    const std::string e = error_of(std::string("tracing: {sample_ratio: ") + ratio + "}\n");
    EXPECT_EQ(e.rfind("4:25: tracing.sample_ratio must be a number from 0 to 1", 0), 0U) << e;
  }
  EXPECT_EQ(parse("tracing: {sample_ratio: 0}\n").tracing.sample_ratio, 0.0);
  EXPECT_NE(error_of("tracing: {headers: [a, b]}\n").find("mapping"), std::string::npos);
  EXPECT_NE(error_of("tracing: {headers: {'bad name': x}}\n").find("RFC 9110"), std::string::npos);
  EXPECT_NE(
      error_of("tracing: {headers: {content-type: text/plain}}\n").find("set by the exporter"),
      std::string::npos);
  EXPECT_NE(error_of("tracing: {headers: {A: \"x\\r\\ny: z\"}}\n").find("CR, LF"),
            std::string::npos);
  EXPECT_NE(error_of("tracing: {headers: {a: 1, A: 2}}\n").find("given twice"), std::string::npos);
  EXPECT_NE(error_of("tracing: {timeout: 0s}\n").find("longer than 0"), std::string::npos);
  EXPECT_NE(error_of("tracing: {batch_delay: soon}\n").find("tracing.batch_delay"),
            std::string::npos);
  EXPECT_NE(error_of("tracing: {max_queue: 10, max_batch: 20}\n").find("must not exceed"),
            std::string::npos);
  EXPECT_NE(error_of("tracing: [a]\n").find("tracing must be a mapping"), std::string::npos);
}

// sample_ratio applies on reload; the exporter's keys wait for a restart.
TEST(TracingConfig, OnlyTheSampleRatioIsReloadable) {
  const Config running = parse(
      "tracing: {otlp_endpoint: 'http://a:4318/v1/traces', sample_ratio: 1, headers: {k: v}}\n");
  Config next = parse(
      "tracing: {otlp_endpoint: 'https://b/v1/traces', sample_ratio: 0.5, service_name: s,\n"
      "          headers: {k: w}, max_queue: 4096}\n");
  EXPECT_EQ(restart_only_changes(running, next),
            (std::vector<std::string>{"tracing.otlp_endpoint", "tracing.service_name",
                                      "tracing.headers", "tracing.max_queue"}));
  keep_restart_only(next, running);
  EXPECT_TRUE(restart_only_changes(running, next).empty());
  EXPECT_EQ(next.tracing.host, "a");
  EXPECT_FALSE(next.tracing.tls);
  EXPECT_EQ(next.tracing.target, "/v1/traces");
  EXPECT_EQ(next.tracing.headers.at("k"), "v");
  EXPECT_EQ(next.tracing.sample_ratio, 0.5);
}
