#pragma once
// W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` a
// request carries is forwarded to the upstream as it is, and one is started when it
// is absent or invalid. idemproxy records no spans of its own; its log lines carry
// the trace id.
#include <optional>
#include <string>
#include <string_view>

namespace idemproxy::http {

struct TraceParent {
  std::string trace_id;   // 32 lowercase hex digits, not all zero
  std::string parent_id;  // 16 lowercase hex digits, not all zero
  std::string flags;      // 2 hex digits; bit 0 is "sampled"
  std::string header;     // the header value to forward
};

/// Parses a traceparent value (Trace Context section 3.2). Version 00 must be exactly
/// 55 characters; a later version may append "-..." fields, which are kept as sent
/// (3.2.4: parse what version 00 defines). Version ff, upper-case hex, all-zero ids
/// and a missing dash are invalid.
std::optional<TraceParent> parse_traceparent(std::string_view value);

/// A new trace: random ids, flags 01 (sampled: the caller, idemproxy, records the
/// trace id in its logs). Section 3.3 lets a vendor restart the trace when the
/// incoming traceparent is absent or cannot be parsed.
TraceParent start_trace();

}  // namespace idemproxy::http
