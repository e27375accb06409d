// Trace and span ids: parsing, printing, random generation, and the ratio sampler.
#include <algorithm>
#include <cmath>
#include <random>

#include "idemproxy/trace/tracer.hpp"

namespace idemproxy::trace {
namespace {

int lower_hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

template <std::size_t N>
std::optional<std::array<std::uint8_t, N>> parse_id(std::string_view hex) {
  if (hex.size() != 2 * N) return std::nullopt;
  std::array<std::uint8_t, N> id{};
  for (std::size_t i = 0; i < N; ++i) {
    const int hi = lower_hex_digit(hex[2 * i]);
    const int lo = lower_hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    id[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  if (!is_valid(id)) return std::nullopt;
  return id;
}

template <std::size_t N>
std::array<std::uint8_t, N> random_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::array<std::uint8_t, N> id{};
  do {
    for (std::size_t i = 0; i < N; i += 8) {
      std::uint64_t bits = rng();
      for (std::size_t j = i; j < std::min(N, i + 8); ++j, bits >>= 8) {
        id[j] = static_cast<std::uint8_t>(bits);
      }
    }
  } while (!is_valid(id));
  return id;
}

template <std::size_t N>
char* write_hex(const std::array<std::uint8_t, N>& id, char* out) {
  hex_into({reinterpret_cast<const char*>(id.data()), N}, out);
  return out + 2 * N;
}

}  // namespace

std::optional<TraceId> parse_trace_id(std::string_view hex) { return parse_id<16>(hex); }
std::optional<SpanId> parse_span_id(std::string_view hex) { return parse_id<8>(hex); }

std::optional<SpanContext> context_from_hex(std::string_view trace_id, std::string_view span_id) {
  const auto t = parse_trace_id(trace_id);
  const auto s = parse_span_id(span_id);
  if (!t || !s) return std::nullopt;
  return SpanContext{*t, *s, true};
}

void write_traceparent(const SpanContext& context, TraceParentText& out) {
  char* at = std::copy_n("00-", 3, out.data());
  at = write_hex(context.trace_id, at);
  *at++ = '-';
  at = write_hex(context.span_id, at);
  std::copy_n(context.sampled ? "-01" : "-00", 3, at);
}

TraceId random_trace_id() { return random_id<16>(); }
SpanId random_span_id() { return random_id<8>(); }

bool sampled_by_ratio(const TraceId& trace_id, double ratio) {
  if (ratio >= 1) return true;
  if (ratio <= 0) return false;
  std::uint64_t random_part = 0;  // bytes 9 to 15, big-endian: the low 56 bits
  for (std::size_t i = 9; i < 16; ++i) random_part = (random_part << 8) | trace_id[i];
  const double threshold = std::ldexp(ratio, 56);
  return static_cast<double>(random_part) < threshold;
}

}  // namespace idemproxy::trace
