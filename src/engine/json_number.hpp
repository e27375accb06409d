#pragma once
// The decimal layout of a JSON number in canonical form (canonical_json.cpp).
#include <cstdint>
#include <string>

namespace idemproxy::engine {

/// Appends D * 10^scale (`digits` = D, no leading or trailing zeros) as nlohmann's
/// dump() lays out a double: dtoa_impl::format_buffer with min_exp -4 and max_exp 15.
void append_decimal(std::string& out, const std::string& digits, std::int64_t scale);

}  // namespace idemproxy::engine
