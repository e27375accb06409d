#pragma once
// W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` a
// request carries is forwarded to the upstream as it is, and one is started when it
// is absent or invalid. idemproxy records no spans of its own; its log lines carry
// the trace id.
#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace idemproxy::http {

/// The parts of a traceparent value, as views into it (no copies: a request's
/// trace costs no allocation).
struct TraceParent {
  std::string_view trace_id;   // 32 lowercase hex digits, not all zero
  std::string_view parent_id;  // 16 lowercase hex digits, not all zero
  std::string_view flags;      // 2 hex digits; bit 0 is "sampled"
  std::string_view header;     // the header value to forward
};

/// Parses a traceparent value (Trace Context section 3.2). Version 00 must be exactly
/// 55 characters; a later version may append "-..." fields, which are kept as sent
/// (3.2.4: parse what version 00 defines). Version ff, upper-case hex, all-zero ids
/// and a missing dash are invalid. The result views `value`, which must outlive it.
std::optional<TraceParent> parse_traceparent(std::string_view value);

/// Writes `digits` random lowercase hex digits to `out`, from a per-thread generator
/// (trace ids, span ids, and the request ids the proxy makes).
void random_hex(char* out, std::size_t digits);

/// A started trace's traceparent: version 00, 55 characters.
using StartedTrace = std::array<char, 55>;

/// A new trace, written into `header`: random ids, flags 01 (sampled: the caller,
/// idemproxy, records the trace id in its logs). Section 3.3 lets a vendor restart
/// the trace when the incoming traceparent is absent or cannot be parsed. The result
/// views `header`.
TraceParent start_trace(StartedTrace& header);

}  // namespace idemproxy::http
