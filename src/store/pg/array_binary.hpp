#pragma once
// PostgreSQL's binary form of a one-dimensional array (array_recv), for the batch
// statements' parameters: no element is quoted or escaped here, and the server parses
// no text (array_in) and decodes no hex (a bytea element travels as its bytes).
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <pqxx/binarystring>
#include <string>
#include <string_view>
#include <vector>

namespace idemproxy::store::pg {

class ArrayBinary {
 public:
  /// The element types the batch statements take, by their pg_type OIDs: array_recv
  /// refuses elements of any type but the parameter's own ("wrong element type").
  enum class Of : std::uint32_t { bytea = 17, int8 = 20, int4 = 23, text = 25 };

  /// `elements`: how many it will hold, for its buffer to be taken once (a text or
  /// bytea element counted at 64 bytes; a longer one grows it).
  explicit ArrayBinary(Of element, std::size_t elements = 0) : element_(element) {
    out_.reserve(kHeader + elements * (4 + width(element)));
    out_.resize(kHeader);
  }

  /// A text or bytea element: its bytes as they are.
  void add(std::string_view bytes) {
    put32(static_cast<std::uint32_t>(bytes.size()));
    out_.append(bytes);
    ++n_;
  }
  void add(const char* text) { text ? add(std::string_view(text)) : add_null(); }
  void add_or_null(const std::optional<std::string>& bytes) { bytes ? add(*bytes) : add_null(); }
  /// An int8 element (bigint).
  void add(long long n) {
    put32(8);
    put32(static_cast<std::uint32_t>(static_cast<std::uint64_t>(n) >> 32));
    put32(static_cast<std::uint32_t>(static_cast<std::uint64_t>(n)));
    ++n_;
  }
  /// An int4 element (int).
  void add(int n) {
    put32(4);
    put32(static_cast<std::uint32_t>(n));
    ++n_;
  }
  void add_null() {
    put32(0xFFFFFFFFU);  // length -1
    nulls_ = true;
    ++n_;
  }

  /// The array, sent as a binary parameter through libpqxx (a copy of bytes()).
  pqxx::binarystring done() && {
    const std::string wire = std::move(*this).bytes();
    return pqxx::binarystring(wire.data(), wire.size());
  }
  /// The array's wire form: dimensions, a null flag, the element type, then (for a
  /// non-empty array) its length and lower bound 1, written into the room the
  /// constructor kept in front of the elements. The buffer itself, not a copy: libpq's
  /// own calls send it as it is.
  std::string bytes() && {
    put_at(0, n_ > 0 ? 1 : 0);
    put_at(4, nulls_ ? 1 : 0);
    put_at(8, static_cast<std::uint32_t>(element_));
    if (n_ > 0) {
      put_at(12, n_);
      put_at(16, 1);
    } else {
      out_.resize(12);  // no dimension: no length, no lower bound
    }
    return std::move(out_);
  }

 private:
  static constexpr std::size_t kHeader = 20;  // ndim, flags, type, length, lower bound
  static constexpr std::size_t width(Of element) {
    return element == Of::int8 ? 8 : element == Of::int4 ? 4 : 64;
  }
  // Big-endian, as the wire form has every integer.
  void put_at(std::size_t at, std::uint32_t v) {
    for (std::size_t i = 0; i < 4; ++i) out_[at + i] = static_cast<char>(v >> (24 - 8 * i));
  }
  void put32(std::uint32_t v) {
    out_.resize(out_.size() + 4);
    put_at(out_.size() - 4, v);
  }

  Of element_;
  std::string out_;
  std::uint32_t n_ = 0;
  bool nulls_ = false;
};

/// One array per column, of these element types, each for `members` elements: a
/// batch's parameters.
inline std::vector<ArrayBinary> arrays_of(std::initializer_list<ArrayBinary::Of> elements,
                                          std::size_t members) {
  std::vector<ArrayBinary> out;
  out.reserve(elements.size());
  for (auto of : elements) out.emplace_back(of, members);
  return out;
}

}  // namespace idemproxy::store::pg
