#include "codec/http2/nv.hpp"

#include <cstddef>

namespace idemproxy::codec::http2 {

void NvList::add(std::string_view name, std::string_view value) {
  const std::size_t name_at = bytes_.size();
  bytes_.append(name);
  // RFC 9113 §8.2.1. A field name is an ASCII token: no locale's tolower() applies,
  // and the name is copied whole before it is lowered, not a character at a time.
  for (auto it = bytes_.begin() + static_cast<std::ptrdiff_t>(name_at); it != bytes_.end(); ++it) {
    if (*it >= 'A' && *it <= 'Z') *it = static_cast<char>(*it - 'A' + 'a');
  }
  const std::size_t value_at = bytes_.size();
  bytes_.append(value);
  spans_.push_back({name_at, name.size(), value_at, value.size()});
}

const nghttp2_nv* NvList::data() {
  nv_.clear();
  auto* base = reinterpret_cast<std::uint8_t*>(bytes_.data());
  for (const auto& s : spans_) {
    nv_.push_back(
        {base + s.name_at, base + s.value_at, s.name_size, s.value_size, NGHTTP2_NV_FLAG_NONE});
  }
  return nv_.data();
}

}  // namespace idemproxy::codec::http2
