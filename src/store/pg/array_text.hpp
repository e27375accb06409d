#pragma once
// PostgreSQL's text form of an array, for the statements that take one element per
// record (the multi-row forms and kAnnounce).
#include <optional>
#include <string>
#include <string_view>

#include "idemproxy/common/hex.hpp"

namespace idemproxy::store::pg {

// PostgreSQL's text form of an array; std::nullopt elements are NULL.
class ArrayText {
 public:
  void add(std::string_view text) {
    next();
    out_ += '"';
    for (char ch : text) {
      if (ch == '"' || ch == '\\') out_ += '\\';
      out_ += ch;
    }
    out_ += '"';
  }
  void add(long long n) {
    next();
    out_ += std::to_string(n);
  }
  void add(const char* text) { text ? add(std::string_view(text)) : add_null(); }
  void add(const std::optional<std::string>& bytes, bool bytea) {
    if (!bytes) return add_null();
    bytea ? add("\\x" + to_hex(*bytes)) : add(*bytes);
  }
  void add_null() {
    next();
    out_ += "NULL";
  }
  std::string done() && { return std::move(out_) + '}'; }

 private:
  void next() {
    if (out_.size() > 1) out_ += ',';
  }
  std::string out_ = "{";
};

}  // namespace idemproxy::store::pg
