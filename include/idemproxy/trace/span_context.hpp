#pragma once
// W3C Trace Context identifiers (https://www.w3.org/TR/trace-context/ section 3.2):
// a 16-byte trace id, an 8-byte span id and the sampled flag, held by value so a
// span's ids cost no allocation and are readable while it runs.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "idemproxy/common/hex.hpp"

namespace idemproxy::trace {

using TraceId = std::array<std::uint8_t, 16>;
using SpanId = std::array<std::uint8_t, 8>;

/// True when any byte is set: all-zero ids are invalid (Trace Context 3.2.2.3, 3.2.2.4).
template <std::size_t N>
bool is_valid(const std::array<std::uint8_t, N>& id) {
  for (const auto b : id) {
    if (b != 0) return true;
  }
  return false;
}

/// Lowercase hex, as traceparent and OTLP JSON spell ids.
template <std::size_t N>
std::string to_hex(const std::array<std::uint8_t, N>& id) {
  std::string out(2 * N, '0');
  hex_into({reinterpret_cast<const char*>(id.data()), N}, out.data());
  return out;
}

/// The id `hex` spells: exactly 2*N lowercase hex digits (3.2.2.3 forbids upper case),
/// not all zero; anything else is nullopt.
std::optional<TraceId> parse_trace_id(std::string_view hex);
std::optional<SpanId> parse_span_id(std::string_view hex);

struct SpanContext {
  TraceId trace_id{};
  SpanId span_id{};
  bool sampled = false;
  /// False for the null span's context (tracing off): it has no ids to forward.
  bool valid() const { return is_valid(trace_id) && is_valid(span_id); }
};

/// A span to link to, from the hex ids a record keeps; nullopt when either is malformed.
std::optional<SpanContext> context_from_hex(std::string_view trace_id, std::string_view span_id);

/// The traceparent a request forwards: "00-" trace-id "-" span-id "-" flags (3.2,
/// version 00; flags 01 when sampled, 00 otherwise).
using TraceParentText = std::array<char, 55>;
void write_traceparent(const SpanContext& context, TraceParentText& out);

}  // namespace idemproxy::trace
