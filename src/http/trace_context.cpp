#include "http/trace_context.hpp"

#include <algorithm>
#include <cstdint>
#include <random>

namespace idemproxy::http {
namespace {

bool lower_hex(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool all_zero(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == '0'; });
}

}  // namespace

void random_hex(char* out, std::size_t digits) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::uint64_t bits = 0;
  for (std::size_t i = 0; i < digits; ++i, bits >>= 4) {
    if (i % 16 == 0) bits = rng();
    out[i] = kHex[bits & 0xf];
  }
}

std::optional<TraceParent> parse_traceparent(std::string_view v) {
  // version "-" trace-id "-" parent-id "-" trace-flags: 2+1+32+1+16+1+2 = 55
  constexpr std::size_t kLength = 55;
  if (v.size() < kLength || v[2] != '-' || v[35] != '-' || v[52] != '-') return std::nullopt;
  const auto version = v.substr(0, 2);
  const auto trace_id = v.substr(3, 32);
  const auto parent_id = v.substr(36, 16);
  const auto flags = v.substr(53, 2);
  if (!lower_hex(version) || version == "ff") return std::nullopt;        // 3.2.2.1
  if (version == "00" && v.size() != kLength) return std::nullopt;        // 3.2.2.1
  if (v.size() > kLength && v[kLength] != '-') return std::nullopt;       // 3.2.4
  if (!lower_hex(trace_id) || all_zero(trace_id)) return std::nullopt;    // 3.2.2.3
  if (!lower_hex(parent_id) || all_zero(parent_id)) return std::nullopt;  // 3.2.2.4
  if (!lower_hex(flags)) return std::nullopt;                             // 3.2.2.5
  return TraceParent{trace_id, parent_id, flags, v};
}

TraceParent start_trace(StartedTrace& header) {
  // "00-" trace-id "-" parent-id "-01", as section 3.2 lays version 00 out.
  char* at = header.data();
  at = std::copy_n("00-", 3, at);
  random_hex(at, 32);
  at = std::copy_n("-", 1, at + 32);
  random_hex(at, 16);
  std::copy_n("-01", 3, at + 16);
  const std::string_view v(header.data(), header.size());
  return TraceParent{v.substr(3, 32), v.substr(36, 16), v.substr(53, 2), v};
}

}  // namespace idemproxy::http
