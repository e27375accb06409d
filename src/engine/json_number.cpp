#include "engine/json_number.hpp"

namespace idemproxy::engine {

void append_decimal(std::string& out, const std::string& d, std::int64_t scale) {
  const auto k = static_cast<std::int64_t>(d.size());
  const std::int64_t n = k + scale;  // the decimal point's place in d
  if (k <= n && n <= 15) {
    out += d;
    out.append(static_cast<std::size_t>(n - k), '0');
    out += ".0";
  } else if (0 < n && n <= 15) {
    out.append(d, 0, static_cast<std::size_t>(n));
    out += '.';
    out.append(d, static_cast<std::size_t>(n));
  } else if (-4 < n && n <= 0) {
    out += "0.";
    out.append(static_cast<std::size_t>(-n), '0');
    out += d;
  } else {
    out += d[0];
    if (k > 1) {
      out += '.';
      out.append(d, 1);
    }
    out += 'e';
    std::int64_t x = n - 1;
    out += x < 0 ? '-' : '+';
    if (x < 0) x = -x;
    if (x < 10) out += '0';
    out += std::to_string(x);
  }
}

}  // namespace idemproxy::engine
