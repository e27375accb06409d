#include "codec/http2/nv.hpp"

#include <cstddef>

namespace idemproxy::codec::http2 {

namespace {

// Room for a usual head at the first add(), instead of growing to it by doubling
// (a list is made per request on the upstream side and per stream on the client's).
constexpr std::size_t kFirstBytes = 512;
constexpr std::size_t kFirstFields = 16;

}  // namespace

bool NvList::fresh_per_message(std::string_view lower_name) {
  return lower_name == "x-request-id" || lower_name == "traceparent" ||
         lower_name == "idempotency-key";
}

void NvList::add(std::string_view name, std::string_view value) {
  if (spans_.capacity() == 0) {
    bytes_.reserve(kFirstBytes);
    spans_.reserve(kFirstFields);
  }
  const std::size_t name_at = bytes_.size();
  bytes_.append(name);
  // RFC 9113 §8.2.1. A field name is an ASCII token: no locale's tolower() applies,
  // and the name is copied whole before it is lowered, not a character at a time.
  for (auto it = bytes_.begin() + static_cast<std::ptrdiff_t>(name_at); it != bytes_.end(); ++it) {
    if (*it >= 'A' && *it <= 'Z') *it = static_cast<char>(*it - 'A' + 'a');
  }
  const std::size_t value_at = bytes_.size();
  bytes_.append(value);
  const std::string_view lowered(bytes_.data() + name_at, name.size());
  spans_.push_back({name_at, name.size(), value_at, value.size(),
                    fresh_per_message(lowered) ? std::uint8_t{NGHTTP2_NV_FLAG_NO_INDEX}
                                               : std::uint8_t{NGHTTP2_NV_FLAG_NONE}});
}

const nghttp2_nv* NvList::data() {
  nv_.clear();
  nv_.reserve(spans_.size());
  auto* base = reinterpret_cast<std::uint8_t*>(bytes_.data());
  for (const auto& s : spans_) {
    nv_.push_back({base + s.name_at, base + s.value_at, s.name_size, s.value_size, s.flags});
  }
  return nv_.data();
}

}  // namespace idemproxy::codec::http2
