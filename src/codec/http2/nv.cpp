#include "codec/http2/nv.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>

namespace idemproxy::codec::http2 {
namespace {

// Room for a usual head at the first add(), instead of growing to it by doubling
// (a list is made per request on the upstream side and per stream on the client's).
constexpr std::size_t kFirstBytes = 512;
constexpr std::size_t kFirstFields = 16;

// RFC 9113 §8.2.1. A field name is an ASCII token: no locale's tolower() applies.
// Eight bytes at a time: a byte of 'A' to 'Z' gets 0x20 added (its high bit and
// that of its neighbours untouched, so no carry crosses a byte), the rest one by one.
void copy_lower(char* out, std::string_view name) {
  constexpr std::uint64_t kOnes = 0x0101010101010101u;
  std::size_t i = 0;
  for (; i + 8 <= name.size(); i += 8) {
    std::uint64_t w;
    std::memcpy(&w, name.data() + i, 8);
    const std::uint64_t low7 = w & (0x7f * kOnes);
    const std::uint64_t above_z = low7 + (0x80 - 'Z' - 1) * kOnes;  // high bit: > 'Z'
    const std::uint64_t from_a = low7 + (0x80 - 'A') * kOnes;       // high bit: >= 'A'
    const std::uint64_t upper = (from_a & ~above_z & ~w) & (0x80 * kOnes);
    w |= upper >> 2;  // 0x80 >> 2 is 0x20
    std::memcpy(out + i, &w, 8);
  }
  for (; i < name.size(); ++i) {
    const char c = name[i];
    out[i] = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  }
}

std::uint8_t flags_for(std::string_view lower_name) {
  return NvList::fresh_per_message(lower_name) ? std::uint8_t{NGHTTP2_NV_FLAG_NO_INDEX}
                                               : std::uint8_t{NGHTTP2_NV_FLAG_NONE};
}

}  // namespace

bool NvList::fresh_per_message(std::string_view lower_name) {
  return lower_name == "x-request-id" || lower_name == "traceparent" ||
         lower_name == "idempotency-key";
}

void NvList::first_use() {
  bytes_ = std::make_unique_for_overwrite<char[]>(kFirstBytes);
  capacity_ = kFirstBytes;
  spans_.reserve(kFirstFields);
}

char* NvList::room(std::size_t n) {
  if (used_ + n > capacity_) {
    const std::size_t capacity = std::max(capacity_ * 2, used_ + n);
    auto bigger = std::make_unique_for_overwrite<char[]>(capacity);
    if (used_ > 0) std::memcpy(bigger.get(), bytes_.get(), used_);
    bytes_ = std::move(bigger);
    capacity_ = capacity;
  }
  char* at = bytes_.get() + used_;
  used_ += n;
  return at;
}

void NvList::add(std::string_view name, std::string_view value) {
  if (spans_.capacity() == 0) first_use();
  const std::size_t name_at = used_;
  char* const lower = room(name.size() + value.size());
  copy_lower(lower, name);
  if (!value.empty()) std::memcpy(lower + name.size(), value.data(), value.size());
  spans_.push_back(
      {nullptr, nullptr, static_cast<std::uint32_t>(name_at),
       static_cast<std::uint32_t>(name_at + name.size()), static_cast<std::uint32_t>(name.size()),
       static_cast<std::uint32_t>(value.size()), flags_for(std::string_view(lower, name.size()))});
}

void NvList::add_lasting(std::string_view name, std::string_view value) {
  for (const char c : name) {
    if (c >= 'A' && c <= 'Z') return add(name, value);
  }
  if (spans_.capacity() == 0) first_use();
  spans_.push_back({name.data(), value.data(), 0, 0, static_cast<std::uint32_t>(name.size()),
                    static_cast<std::uint32_t>(value.size()), flags_for(name)});
}

const nghttp2_nv* NvList::data() {
  nv_.resize(spans_.size());
  for (std::size_t i = 0; i < spans_.size(); ++i) {
    const Span& s = spans_[i];
    const char* name = s.name != nullptr ? s.name : bytes_.get() + s.name_at;
    const char* value = s.name != nullptr ? s.value : bytes_.get() + s.value_at;
    // nghttp2 takes non-const pointers, and copies what they point to.
    nv_[i] = {reinterpret_cast<std::uint8_t*>(const_cast<char*>(name)),
              reinterpret_cast<std::uint8_t*>(const_cast<char*>(value)), s.name_size, s.value_size,
              s.flags};
  }
  return nv_.data();
}

}  // namespace idemproxy::codec::http2
