#pragma once
// A short text of bounded length held inside its owner: no heap, whatever the
// library's small-string limit (15 bytes in libstdc++, less than a key's 16-digit hash
// or a trace id's 32). For texts whose length the program fixes, such as hashes and
// trace ids.
#include <array>
#include <cstring>
#include <string_view>

namespace idemproxy {

template <std::size_t N>
class InlineString {
 public:
  InlineString() = default;
  explicit InlineString(std::string_view s) { assign(s); }

  /// Holds `s`; a text longer than N is not held at all (empty), never cut short, so
  /// what is held is always a whole value.
  void assign(std::string_view s) {
    size_ = s.size() <= N ? s.size() : 0;
    // An empty view may have no data at all (a default string_view): memcpy's source
    // must not be null, even for no bytes.
    if (size_ != 0) std::memcpy(data_.data(), s.data(), size_);
  }
  std::string_view view() const { return {data_.data(), size_}; }
  bool empty() const { return size_ == 0; }
  friend bool operator==(const InlineString& a, std::string_view b) { return a.view() == b; }

 private:
  std::array<char, N> data_{};
  std::size_t size_ = 0;
};

}  // namespace idemproxy
