#include "trace/otlp_json.hpp"

#include <nlohmann/json.hpp>

namespace idemproxy::trace {
namespace {

using nlohmann::json;

// common.proto AnyValue: one of its fields names the type.
json any_value(const AttributeValue& v) {
  struct Visit {
    json operator()(const std::string& s) const { return {{"stringValue", s}}; }
    // int64 is a decimal string in the proto3 JSON mapping.
    json operator()(std::int64_t i) const { return {{"intValue", std::to_string(i)}}; }
    json operator()(bool b) const { return {{"boolValue", b}}; }
    json operator()(double d) const { return {{"doubleValue", d}}; }
  };
  return std::visit(Visit{}, v);
}

json key_value(std::string_view key, json value) {
  return {{"key", key}, {"value", std::move(value)}};
}

json span_json(const SpanData& s) {
  json out = {{"traceId", to_hex(s.context.trace_id)},
              {"spanId", to_hex(s.context.span_id)},
              {"name", s.name},
              {"kind", static_cast<int>(s.kind)},
              {"startTimeUnixNano", std::to_string(s.start_unix_nanos)},
              {"endTimeUnixNano", std::to_string(s.end_unix_nanos)}};
  // Empty lists and unset fields are left out, as the proto3 JSON mapping prints defaults.
  if (!s.attributes.empty()) {
    json attributes = json::array();
    for (const auto& a : s.attributes) attributes.push_back(key_value(a.key, any_value(a.value)));
    out["attributes"] = std::move(attributes);
  }
  if (is_valid(s.parent_span_id)) out["parentSpanId"] = to_hex(s.parent_span_id);
  if (!s.links.empty()) {
    json links = json::array();
    for (const auto& l : s.links) {
      links.push_back({{"traceId", to_hex(l.trace_id)}, {"spanId", to_hex(l.span_id)}});
    }
    out["links"] = std::move(links);
  }
  if (s.status != StatusCode::unset) {
    out["status"] = {{"code", static_cast<int>(s.status)}};
    if (!s.status_message.empty()) out["status"]["message"] = s.status_message;
  }
  return out;
}

}  // namespace

std::string encode_export(const Resource& resource,
                          const std::vector<std::unique_ptr<SpanData>>& spans) {
  json list = json::array();
  for (const auto& s : spans) list.push_back(span_json(*s));
  json scope = {{"name", resource.scope_name}};
  if (!resource.scope_version.empty()) scope["version"] = resource.scope_version;
  const json request = {
      {"resourceSpans",
       json::array(
           {{{"resource",
              {{"attributes",
                json::array({key_value("service.name", any_value(resource.service_name))})}}},
             {"scopeSpans",
              json::array({{{"scope", std::move(scope)}, {"spans", std::move(list)}}})}}})}};
  // Replace, not throw, on invalid UTF-8 (an attribute copied from a request).
  return request.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::uint64_t rejected_spans(const std::string& response_body) {
  const json body = json::parse(response_body, nullptr, false);
  if (!body.is_object()) return 0;
  const auto partial = body.find("partialSuccess");
  if (partial == body.end() || !partial->is_object()) return 0;
  const auto rejected = partial->find("rejectedSpans");
  if (rejected == partial->end()) return 0;
  // int64: a decimal string in JSON, though some receivers write a number.
  if (rejected->is_number_unsigned()) return rejected->get<std::uint64_t>();
  if (rejected->is_string()) {
    try {
      return std::stoull(rejected->get<std::string>());
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;
}

}  // namespace idemproxy::trace
