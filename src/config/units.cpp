#include <cctype>
#include <charconv>
#include <stdexcept>

#include "idemproxy/config/config.hpp"

namespace idemproxy::config {
namespace {

// Splits "30s" into 30 and "s"; the number must be a non-negative integer.
std::pair<std::uint64_t, std::string> split_number(const std::string& text, const char* what) {
  std::uint64_t number = 0;
  const char* begin = text.data();
  const char* end = begin + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, number);
  if (ec != std::errc{} || ptr == begin) {
    throw std::invalid_argument(std::string("invalid ") + what + " \"" + text + "\"");
  }
  return {number, std::string(ptr, end)};
}

}  // namespace

Duration parse_duration(const std::string& text) {
  auto [n, unit] = split_number(text, "duration");
  std::uint64_t unit_ms = 0;
  if (unit == "ms") unit_ms = 1;
  if (unit == "s") unit_ms = 1000;
  if (unit == "m") unit_ms = 60'000;
  if (unit == "h") unit_ms = 3'600'000;
  if (unit == "d") unit_ms = 86'400'000;
  if (unit_ms == 0) {
    throw std::invalid_argument("invalid duration \"" + text +
                                "\" (expected a number and ms, s, m, h or d, e.g. 30s)");
  }
  // A century is far past any TTL or timeout anyone means, and keeps every later sum
  // of a duration and a clock reading (a deadline, PostgreSQL's interval) in range.
  constexpr std::uint64_t kMaxMs = 36'500ULL * 86'400'000;
  if (n > kMaxMs / unit_ms) {
    throw std::invalid_argument("duration \"" + text + "\" is too long (at most 36500d)");
  }
  return Duration{static_cast<Duration::rep>(n * unit_ms)};
}

std::size_t parse_size(const std::string& text) {
  auto [n, unit] = split_number(text, "size");
  unsigned shift = 64;
  if (unit.empty() || unit == "B") shift = 0;
  if (unit == "KiB") shift = 10;
  if (unit == "MiB") shift = 20;
  if (unit == "GiB") shift = 30;
  if (shift == 64) {
    throw std::invalid_argument("invalid size \"" + text +
                                "\" (expected a number and B, KiB, MiB or GiB, e.g. 1MiB)");
  }
  // 1 TiB: past any body or buffer this process could hold, and far from overflow.
  constexpr std::uint64_t kMaxBytes = 1ULL << 40;
  if (n > (kMaxBytes >> shift)) {
    throw std::invalid_argument("size \"" + text + "\" is too large (at most 1024GiB)");
  }
  return static_cast<std::size_t>(n << shift);
}

}  // namespace idemproxy::config
