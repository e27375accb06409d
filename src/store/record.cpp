#include "idemproxy/store/record.hpp"

namespace idemproxy::store {

std::string_view to_string(RecordState state) {
  switch (state) {
    case RecordState::in_flight:
      return "in_flight";
    case RecordState::completed:
      return "completed";
    case RecordState::released:
      return "released";
    case RecordState::indeterminate:
      return "indeterminate";
  }
  return "unknown";
}

std::optional<RecordState> parse_state(std::string_view text) {
  if (text == "in_flight") return RecordState::in_flight;
  if (text == "completed") return RecordState::completed;
  if (text == "released") return RecordState::released;
  if (text == "indeterminate") return RecordState::indeterminate;
  return std::nullopt;
}

std::optional<ExecutingSpan> executing_span(const StoredResponse& stored) {
  ExecutingSpan span;
  for (const auto& h : stored.headers) {
    if (h.name == kTraceIdEntry) span.trace_id = h.value;
    if (h.name == kSpanIdEntry) span.span_id = h.value;
  }
  if (span.trace_id.empty() || span.span_id.empty()) return std::nullopt;
  return span;
}

std::string encode_headers(const std::vector<Header>& headers) {
  std::string out;
  for (const auto& h : headers) {
    out += h.name;
    out += ": ";
    out += h.value;
    out += "\r\n";
  }
  return out;
}

std::vector<Header> decode_headers(std::string_view block) {
  std::vector<Header> out;
  while (!block.empty()) {
    const auto eol = block.find("\r\n");
    const std::string_view line = block.substr(0, eol);
    const auto colon = line.find(": ");
    if (colon != std::string_view::npos) {
      out.push_back({std::string(line.substr(0, colon)), std::string(line.substr(colon + 2))});
    }
    if (eol == std::string_view::npos) break;
    block.remove_prefix(eol + 2);
  }
  return out;
}

}  // namespace idemproxy::store
