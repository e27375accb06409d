#pragma once
// The OTLP/HTTP JSON encoding of an ExportTraceServiceRequest
// (opentelemetry-proto, docs/specification.md "JSON Protobuf Encoding"): the proto3
// JSON mapping with lowerCamelCase names, except that traceId, spanId and
// parentSpanId are hex strings, not base64; enums are integers; 64-bit integers are
// decimal strings.
#include <memory>
#include <string>
#include <vector>

#include "idemproxy/trace/span.hpp"

namespace idemproxy::trace {

/// Who exported: resource attribute service.name, and the instrumentation scope.
struct Resource {
  std::string service_name = "idemproxy";
  std::string scope_name = "idemproxy";
  std::string scope_version;
};

/// One export request: one resourceSpans, one scopeSpans holding every span.
std::string encode_export(const Resource& resource,
                          const std::vector<std::unique_ptr<SpanData>>& spans);

/// The rejected span count of an ExportTraceServiceResponse's partialSuccess; 0 when
/// the body is empty, not JSON, or reports none.
std::uint64_t rejected_spans(const std::string& response_body);

}  // namespace idemproxy::trace
