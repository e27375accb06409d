// The real exporter, over HTTP, to tests/otlp/receiver.js: a receiver that decodes
// each export with the OpenTelemetry JS project's own OTLP message definitions. What
// it decoded is what a tracing backend would show. Then receivers that are slow,
// down, hanging or failing: the producer's calls return at once, drops are counted.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "idemproxy/store/store.hpp"
#include "idemproxy/trace/tracing.hpp"
#include "receiver.hpp"
#include "trace/otlp_exporter.hpp"

using namespace idemproxy;
using namespace idemproxy::trace;
using namespace std::chrono_literals;
using idemproxy::trace::testing::closed_port;
using idemproxy::trace::testing::Receiver;
using nlohmann::json;
using ops::SpanDrop;

namespace {

const json* span_named(const json& spans, const std::string& name, std::size_t nth = 0) {
  for (const auto& s : spans) {
    if (s["name"] == name && nth-- == 0) return &s;
  }
  return nullptr;
}

// One request's spans as the proxy will make them; returns the server span's ids.
SpanContext executed_request(const Tracer& tracer, std::string_view incoming_trace) {
  Span request = tracer.start_request_span({incoming_trace, "", ""}, "POST", "/v1/orders");
  set_protocol(request, "1.1");
  set_server_address(request, "api.example.com", 8080);
  set_client_address(request, "10.1.2.3");
  set_key_hash(request, "9f86d081884c7d65");
  { Span claim = request.child(kSpanStoreClaim); }
  {
    Span upstream = request.child(kSpanUpstream, SpanKind::client);
    upstream.set_http_status(201);
  }
  { Span complete = request.child(kSpanStoreComplete); }
  set_outcome(request, "executed");
  request.set_http_status(201);
  return request.context();
}

}  // namespace

TEST(OtlpReceiver, DecodesTheRequestTreeTheReplayLinkTheAttributesAndTheServiceName) {
  const Receiver receiver;
  config::TracingConfig cfg;
  cfg.otlp_endpoint = receiver.endpoint();
  cfg.host = "127.0.0.1";
  cfg.port = std::to_string(receiver.port());
  cfg.target = "/v1/traces";
  cfg.service_name = "payments-proxy";
  cfg.headers = {{"X-Api-Key", "s3cret"}};
  cfg.batch_delay = 100ms;
  ops::Metrics metrics;
  Tracing tracing(cfg, metrics, "0.1.0");

  const SpanContext executed =
      executed_request(tracing.tracer(), "4bf92f3577b34da6a3ce929d0e0e4736");
  // What the record keeps, and the replay that links to it.
  const store::StoredResponse stored{
      201,
      {{std::string(store::kTraceIdEntry), to_hex(executed.trace_id)},
       {std::string(store::kSpanIdEntry), to_hex(executed.span_id)}},
      "{}"};
  {
    Span replay = tracing.tracer().start_request_span(
        {"0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", "01"}, "POST", "/v1/orders");
    const auto ids = store::executing_span(stored);
    ASSERT_TRUE(ids);
    replay.add_link(*context_from_hex(ids->trace_id, ids->span_id));
    set_outcome(replay, "replayed");
    replay.set_double("idempotency.age_seconds", 1.5);
    replay.set_bool("idempotency.from_cache", true);
    replay.set_http_status(201);
  }
  {
    Span failed = tracing.tracer().start_request_span({"", "", ""}, "PATCH", "/v1/orders");
    failed.set_http_status(503);
  }
  tracing.shutdown(5s);

  const json got = receiver.received();
  ASSERT_TRUE(got["errors"].empty()) << got["errors"].dump(2);
  ASSERT_GE(got["exports"].get<int>(), 1);
  // The executed request and its three children, the replay, the failed request.
  EXPECT_EQ(metrics.spans_exported(), 6U);
  const json& spans = got["spans"];
  ASSERT_EQ(spans.size(), 6U) << spans.dump(2);
  for (const auto& r : got["resources"]) EXPECT_EQ(r["service.name"], "payments-proxy");
  for (const auto& s : got["scopes"]) {
    EXPECT_EQ(s["name"], "idemproxy");
    EXPECT_EQ(s["version"], "0.1.0");
  }
  for (const auto& h : got["headers"]) {
    EXPECT_EQ(h["x-api-key"], "s3cret");
    EXPECT_EQ(h["content-type"], "application/json");
    EXPECT_EQ(h["user-agent"], "idemproxy/0.1.0");
  }

  // The executed request: a server span, root of the trace the proxy started, with
  // its three children.
  const json* request = span_named(spans, "POST /v1/orders", 0);
  ASSERT_NE(request, nullptr);
  EXPECT_EQ((*request)["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ((*request)["spanId"], to_hex(executed.span_id));
  EXPECT_EQ((*request)["parentSpanId"], "");
  EXPECT_EQ((*request)["kind"], 2);
  EXPECT_EQ((*request)["attributes"],
            json::parse(R"({"http.request.method": "POST", "http.route": "/v1/orders",
              "network.protocol.name": "http", "network.protocol.version": "1.1",
              "server.address": "api.example.com", "server.port": 8080,
              "client.address": "10.1.2.3", "idempotency.key_hash": "9f86d081884c7d65",
              "idempotency.outcome": "executed", "http.response.status_code": 201})"));
  EXPECT_EQ((*request)["status"]["code"], 0);
  EXPECT_LT(std::stoull((*request)["startTimeUnixNano"].get<std::string>()),
            std::stoull((*request)["endTimeUnixNano"].get<std::string>()));
  for (const auto& [name, kind] :
       {std::pair{std::string(kSpanStoreClaim), 1}, std::pair{std::string(kSpanUpstream), 3},
        std::pair{std::string(kSpanStoreComplete), 1}}) {
    const json* child = span_named(spans, name);
    ASSERT_NE(child, nullptr) << name;
    EXPECT_EQ((*child)["traceId"], (*request)["traceId"]) << name;
    EXPECT_EQ((*child)["parentSpanId"], (*request)["spanId"]) << name;
    EXPECT_EQ((*child)["kind"], kind) << name;
  }
  EXPECT_EQ(
      (*span_named(spans, std::string(kSpanUpstream)))["attributes"]["http.response.status_code"],
      201);

  // The replay: in its client's trace, under its client's span, linked to the request
  // that executed.
  const json* replay = span_named(spans, "POST /v1/orders", 1);
  ASSERT_NE(replay, nullptr);
  EXPECT_EQ((*replay)["traceId"], "0af7651916cd43dd8448eb211c80319c");
  EXPECT_EQ((*replay)["parentSpanId"], "b7ad6b7169203331");
  EXPECT_EQ((*replay)["links"], json::array({{{"traceId", "4bf92f3577b34da6a3ce929d0e0e4736"},
                                              {"spanId", to_hex(executed.span_id)}}}));
  EXPECT_EQ((*replay)["attributes"]["idempotency.outcome"], "replayed");
  EXPECT_EQ((*replay)["attributes"]["idempotency.age_seconds"], 1.5);
  EXPECT_EQ((*replay)["attributes"]["idempotency.from_cache"], true);

  // A 5xx answer marks the server span failed (status code 2, ERROR).
  const json* failed = span_named(spans, "PATCH /v1/orders");
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ((*failed)["status"]["code"], 2);
  EXPECT_EQ((*failed)["attributes"]["error.type"], "503");
}

// The receiver's check is not a formality: what the OTLP JSON encoding does not allow
// is refused, and a well-formed body is accepted.
TEST(OtlpReceiver, RefusesWhatTheMessageDefinitionsDoNotAllow) {
  const Receiver receiver;
  config::TracingConfig cfg;
  cfg.host = "127.0.0.1";
  cfg.port = std::to_string(receiver.port());
  cfg.target = "/v1/traces";
  OtlpHttpClient client(cfg, "idemproxy/test");
  const auto post = [&](const std::string& span) {
    return client
        .post(
            R"({"resourceSpans":[{"scopeSpans":[{"scope":{"name":"t"},"spans":[)" + span + "]}]}]}",
            5s, [] { return false; })
        .status;
  };
  const std::string ids =
      R"("traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"00f067aa0ba902b7")";
  EXPECT_EQ(post("{" + ids + R"(,"name":"ok","kind":2,"startTimeUnixNano":"1"})"), 200);
  // Ids in base64, as plain proto3 JSON would write bytes.
  EXPECT_EQ(post(R"({"traceId":"S/kvNXezTaajzpKdDg5HNg==","spanId":"APBnqgupArc=","name":"b64"})"),
            400);
  EXPECT_EQ(post("{" + ids + R"(,"name":"x","spanKind":2})"), 400);  // no such field
  EXPECT_EQ(post("{" + ids + R"(,"name":"x","kind":"SPAN_KIND_SERVER"})"),
            400);  // enums are integers
  EXPECT_EQ(post("{" + ids + R"(,"name":"x","attributes":[{"key":"n","value":{"intValue":503}}]})"),
            400);  // int64 is a string
  const json got = receiver.received();
  EXPECT_EQ(got["exports"], 1);
  EXPECT_EQ(got["errors"].size(), 4U);
}

// https://: the receiver's certificate is verified (the system trust store, which
// SSL_CERT_FILE replaces here) against the endpoint's host name, sent as SNI.
TEST(OtlpReceiver, ExportsOverHttpsToAVerifiedReceiverOnly) {
  const std::string dir = ::testing::TempDir() + "otlp-tls-" + std::to_string(getpid());
  const std::string cmd =
      "mkdir -p " + dir +
      " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
      "-nodes -subj /CN=localhost -addext subjectAltName=DNS:localhost -days 1 -keyout " +
      dir + "/key.pem -out " + dir + "/cert.pem 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const Receiver receiver(dir + "/cert.pem", dir + "/key.pem");
  config::TracingConfig cfg;
  cfg.tls = true;
  cfg.host = "localhost";
  cfg.port = std::to_string(receiver.port());
  cfg.target = "/v1/traces";
  const std::string body = "{}";  // an export of nothing
  const auto never = [] { return false; };
  {
    // The system trust store does not know this certificate: no export.
    OtlpHttpClient untrusting(cfg, "idemproxy/test");
    const PostResult refused = untrusting.post(body, 5s, never);
    EXPECT_EQ(refused.status, 0);
    EXPECT_NE(refused.error.find("certificate verify failed"), std::string::npos) << refused.error;
  }
  setenv("SSL_CERT_FILE", (dir + "/cert.pem").c_str(), 1);
  OtlpHttpClient trusting(cfg, "idemproxy/test");
  unsetenv("SSL_CERT_FILE");
  const PostResult ok = trusting.post(body, 5s, never);
  EXPECT_EQ(ok.status, 200) << ok.error;
  // A name the certificate does not carry is refused even by a client that trusts it.
  cfg.host = "127.0.0.1";
  setenv("SSL_CERT_FILE", (dir + "/cert.pem").c_str(), 1);
  OtlpHttpClient wrong_name(cfg, "idemproxy/test");
  unsetenv("SSL_CERT_FILE");
  EXPECT_EQ(wrong_name.post(body, 5s, never).status, 0);
  std::filesystem::remove_all(dir);
}

namespace {

// A real HTTP exporter to `endpoint` with short bounds, so a failing receiver shows
// within a test's time: 3 attempts, 20 ms backoff, `timeout` per attempt.
std::unique_ptr<OtlpExporter> exporter_to(const std::string& port, Duration timeout,
                                          ops::Metrics& metrics) {
  config::TracingConfig cfg;
  cfg.otlp_endpoint = "http://127.0.0.1:" + port + "/v1/traces";
  cfg.host = "127.0.0.1";
  cfg.port = port;
  cfg.target = "/v1/traces";
  auto client = std::make_shared<OtlpHttpClient>(cfg, "idemproxy/test");
  OtlpExporter::Options o;
  o.max_queue = 64;
  o.max_batch = 16;
  o.batch_delay = 20ms;
  o.timeout = timeout;
  o.max_attempts = 3;
  o.backoff_initial = 20ms;
  o.backoff_max = 20ms;
  return std::make_unique<OtlpExporter>(
      o, metrics,
      [client](const std::string& body, Duration t, const std::function<bool()>& abandon) {
        return client->post(body, t, abandon);
      });
}

// 5000 requests' spans (a server span and an upstream child each) offered by this
// thread, as I/O threads do: returns how long the producer took.
Duration produce(OtlpExporter& exporter) {
  const Tracer tracer(&exporter.queue(), 1.0);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5000; ++i) {
    Span request = tracer.start_request_span({"", "", ""}, "POST", "/v1/orders");
    Span upstream = request.child(kSpanUpstream, SpanKind::client);
  }
  return std::chrono::duration_cast<Duration>(std::chrono::steady_clock::now() - start);
}

void expect_everything_dropped(ops::Metrics& metrics, OtlpExporter& exporter) {
  exporter.shutdown(3s);
  const auto dropped = metrics.spans_dropped(SpanDrop::queue_full) +
                       metrics.spans_dropped(SpanDrop::export_failed) +
                       metrics.spans_dropped(SpanDrop::shutdown);
  EXPECT_EQ(metrics.spans_exported(), 0U);
  EXPECT_EQ(dropped, 10000U);
  EXPECT_GT(metrics.spans_dropped(SpanDrop::queue_full), 9000U);   // the queue holds 64
  EXPECT_GE(metrics.spans_dropped(SpanDrop::export_failed), 16U);  // a batch was tried and lost
}

}  // namespace

// 10000 spans in well under the time one export attempt takes: the producer never
// waits for the receiver.
TEST(OtlpReceiver, AReceiverAnswering503OnlyCausesCountedDrops) {
  const Receiver receiver;
  receiver.answer({{"answer", "status"}, {"status", 503}});
  ops::Metrics metrics;
  auto exporter = exporter_to(std::to_string(receiver.port()), 2s, metrics);
  EXPECT_LT(produce(*exporter), 1s);
  std::this_thread::sleep_for(300ms);  // the exporter tries its batch three times
  expect_everything_dropped(metrics, *exporter);
  EXPECT_GE(receiver.received()["attempts"].get<int>(), 3);  // retried: 503 is retryable
}

TEST(OtlpReceiver, ASlowReceiverOnlyCausesCountedDrops) {
  const Receiver receiver;
  receiver.answer({{"answer", "slow"}, {"delay_ms", 3000}});
  ops::Metrics metrics;
  auto exporter = exporter_to(std::to_string(receiver.port()), 200ms, metrics);
  EXPECT_LT(produce(*exporter), 1s);
  std::this_thread::sleep_for(900ms);  // three attempts time out
  expect_everything_dropped(metrics, *exporter);
}

TEST(OtlpReceiver, AReceiverThatNeverAnswersOnlyCausesCountedDrops) {
  const Receiver receiver;
  receiver.answer({{"answer", "hang"}});
  ops::Metrics metrics;
  auto exporter = exporter_to(std::to_string(receiver.port()), 200ms, metrics);
  EXPECT_LT(produce(*exporter), 1s);
  std::this_thread::sleep_for(900ms);
  expect_everything_dropped(metrics, *exporter);
}

TEST(OtlpReceiver, AReceiverThatIsDownOnlyCausesCountedDrops) {
  ops::Metrics metrics;
  auto exporter = exporter_to(std::to_string(closed_port()), 2s, metrics);
  EXPECT_LT(produce(*exporter), 1s);
  std::this_thread::sleep_for(300ms);
  expect_everything_dropped(metrics, *exporter);
}
