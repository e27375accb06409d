#include "codec/http2/nv.hpp"

#include <cctype>

namespace idemproxy::codec::http2 {

void NvList::add(std::string_view name, std::string_view value) {
  const std::size_t name_at = bytes_.size();
  for (const char c : name) {
    bytes_ += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
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
