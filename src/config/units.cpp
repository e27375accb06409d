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
  using namespace std::chrono;
  if (unit == "ms") return milliseconds{n};
  if (unit == "s") return seconds{n};
  if (unit == "m") return minutes{n};
  if (unit == "h") return hours{n};
  if (unit == "d") return hours{24 * n};
  throw std::invalid_argument("invalid duration \"" + text +
                              "\" (expected a number and ms, s, m, h or d, e.g. 30s)");
}

std::size_t parse_size(const std::string& text) {
  auto [n, unit] = split_number(text, "size");
  if (unit.empty() || unit == "B") return n;
  if (unit == "KiB") return n << 10;
  if (unit == "MiB") return n << 20;
  if (unit == "GiB") return n << 30;
  throw std::invalid_argument("invalid size \"" + text +
                              "\" (expected a number and B, KiB, MiB or GiB, e.g. 1MiB)");
}

}  // namespace idemproxy::config
