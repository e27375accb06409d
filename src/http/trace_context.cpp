#include "http/trace_context.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
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

// Sixteen hex digits of `bits`, eight at a time: a 32-bit half's nibbles spread one to
// a byte, then each byte n turned into '0' + n, or 'a' + n - 10 past nine, all eight
// at once (no byte carries into the next: n + 0x36 + 39 < 256).
void hex16(std::uint64_t bits, char* out) {
  for (std::size_t half = 0; half < 2; ++half, bits >>= 32) {
    std::uint64_t x = bits & 0xffffffffU;
    x = (x | (x << 16)) & 0x0000ffff0000ffffULL;
    x = (x | (x << 8)) & 0x00ff00ff00ff00ffULL;
    x = (x | (x << 4)) & 0x0f0f0f0f0f0f0f0fULL;
    const std::uint64_t letters = ((x + 0x0606060606060606ULL) >> 4) & 0x0101010101010101ULL;
    x += 0x3030303030303030ULL + letters * ('a' - '0' - 10);
    std::memcpy(out + 8 * half, &x, 8);
  }
}

// SplitMix64 (Steele, Lea and Flood, 2014) over a per-thread state seeded once from
// std::random_device: ids that must not collide, not secrets (as mt19937_64, which it
// replaces, they are not). Its state is trivially constructed, so a call pays no
// thread_local guard, and a number takes a few instructions rather than a twister's.
std::uint64_t next_random() {
  thread_local std::uint64_t state = 0;
  if (state == 0) {
    std::random_device seed;
    state = (std::uint64_t{seed()} << 32 | seed()) | 1;
  }
  std::uint64_t z = state += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

void random_hex(char* out, std::size_t digits) {
  std::size_t i = 0;
  for (; i + 16 <= digits; i += 16) hex16(next_random(), out + i);
  if (i < digits) {
    char rest[16];
    hex16(next_random(), rest);
    std::memcpy(out + i, rest, digits - i);
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
