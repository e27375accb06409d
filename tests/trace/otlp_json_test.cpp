// The OTLP/HTTP JSON body: the shape opentelemetry-proto's JSON encoding prescribes.
#include "trace/otlp_json.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "idemproxy/trace/tracer.hpp"

using namespace idemproxy::trace;
using nlohmann::json;

namespace {

std::unique_ptr<SpanData> span_data() {
  auto s = std::make_unique<SpanData>();
  s->context = *context_from_hex("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
  s->parent_span_id = *parse_span_id("a1b2c3d4e5f60718");
  s->name = "POST /v1/orders";
  s->kind = SpanKind::server;
  s->start_unix_nanos = 1700000000123456789ULL;
  s->end_unix_nanos = 1700000000223456789ULL;
  s->attributes = {{"http.request.method", std::string("POST")},
                   {"http.response.status_code", std::int64_t{503}},
                   {"retried", true},
                   {"ratio", 0.5}};
  s->links = {*context_from_hex("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")};
  s->status = StatusCode::error;
  s->status_message = "upstream unavailable";
  return s;
}

}  // namespace

TEST(OtlpJson, OneResourceOneScopeAndTheSpansInProtoJsonForm) {
  std::vector<std::unique_ptr<SpanData>> spans;
  spans.push_back(span_data());
  auto root = std::make_unique<SpanData>();
  root->context = *context_from_hex("4bf92f3577b34da6a3ce929d0e0e4736", "1111111111111111");
  root->name = "GET";
  spans.push_back(std::move(root));
  const json body = json::parse(encode_export({"payments", "idemproxy", "0.1.0"}, spans));

  ASSERT_EQ(body["resourceSpans"].size(), 1U);
  const json& rs = body["resourceSpans"][0];
  EXPECT_EQ(rs["resource"]["attributes"],
            json::parse(R"([{"key":"service.name","value":{"stringValue":"payments"}}])"));
  ASSERT_EQ(rs["scopeSpans"].size(), 1U);
  EXPECT_EQ(rs["scopeSpans"][0]["scope"], json::parse(R"({"name":"idemproxy","version":"0.1.0"})"));
  const json& s = rs["scopeSpans"][0]["spans"][0];
  // Ids in lowercase hex (not base64, as proto3 JSON would write bytes).
  EXPECT_EQ(s["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(s["spanId"], "00f067aa0ba902b7");
  EXPECT_EQ(s["parentSpanId"], "a1b2c3d4e5f60718");
  EXPECT_EQ(s["name"], "POST /v1/orders");
  EXPECT_EQ(s["kind"], 2);  // SPAN_KIND_SERVER, an integer
  // fixed64 and int64 as decimal strings.
  EXPECT_EQ(s["startTimeUnixNano"], "1700000000123456789");
  EXPECT_EQ(s["endTimeUnixNano"], "1700000000223456789");
  EXPECT_EQ(s["attributes"], json::parse(R"([
    {"key":"http.request.method","value":{"stringValue":"POST"}},
    {"key":"http.response.status_code","value":{"intValue":"503"}},
    {"key":"retried","value":{"boolValue":true}},
    {"key":"ratio","value":{"doubleValue":0.5}}])"));
  EXPECT_EQ(s["links"], json::parse(R"([{"traceId":"0af7651916cd43dd8448eb211c80319c",
                                         "spanId":"b7ad6b7169203331"}])"));
  EXPECT_EQ(s["status"], json::parse(R"({"code":2,"message":"upstream unavailable"})"));
  // A root without attributes or status: those fields are left out, not empty.
  const json& r = rs["scopeSpans"][0]["spans"][1];
  EXPECT_FALSE(r.contains("parentSpanId"));
  EXPECT_FALSE(r.contains("attributes"));
  EXPECT_FALSE(r.contains("links"));
  EXPECT_FALSE(r.contains("status"));
  EXPECT_EQ(r["kind"], 1);  // SPAN_KIND_INTERNAL
}

TEST(OtlpJson, InvalidUtf8InAnAttributeIsReplacedNotThrown) {
  std::vector<std::unique_ptr<SpanData>> spans;
  spans.push_back(span_data());
  spans[0]->attributes = {{"client.address", std::string("\xff\xfe")}};
  const json body = json::parse(encode_export({}, spans));
  EXPECT_EQ(body["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"][0]["value"]
                ["stringValue"],
            "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(OtlpJson, PartialSuccessCountsRejectedSpans) {
  EXPECT_EQ(rejected_spans(""), 0U);
  EXPECT_EQ(rejected_spans("{}"), 0U);
  EXPECT_EQ(rejected_spans("not json"), 0U);
  EXPECT_EQ(rejected_spans(R"({"partialSuccess":{}})"), 0U);
  EXPECT_EQ(rejected_spans(R"({"partialSuccess":{"rejectedSpans":"3","errorMessage":"x"}})"), 3U);
  EXPECT_EQ(rejected_spans(R"({"partialSuccess":{"rejectedSpans":4}})"), 4U);
}
