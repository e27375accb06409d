#pragma once
// The fields a proxy adds to a message it sends on, kept beside the head it edits.
#include <algorithm>
#include <array>
#include <boost/container/small_vector.hpp>
#include <cstddef>
#include <forward_list>
#include <span>
#include <string>
#include <string_view>

#include "http/fields.hpp"

namespace idemproxy::http {

/// A field the proxy adds to a message: to a prepared answer per request (X-Request-Id,
/// Link), or to a request it forwards (ExtraFields).
struct ExtraField {
  std::string_view name;  // as HTTP/1.1 writes it; the HTTP/2 codecs lower-case it
  std::string_view value;
};

/// Fields added to a head on its way on (X-Forwarded-*, the framing the codec read,
/// X-Request-Id, traceparent), held beside the head instead of inserted into Beast's
/// field tree, where each insert cost ~400 instructions (an arena block and a
/// red-black tree insert by case-insensitive compares): five or six a pass-through
/// request. The codec that writes the head writes these after its own fields, in
/// the order added (http/head_bytes.hpp; the HTTP/2 upstream's field list). Names are
/// the proxy's own and outlive the head (literals).
class ExtraFields {
 public:
  ExtraFields() = default;
  // Its fields may view its own bytes: it stays where it was made.
  ExtraFields(const ExtraFields&) = delete;
  ExtraFields& operator=(const ExtraFields&) = delete;

  /// Adds `name: value`, viewing `value`: it must live until the head is sent (a
  /// literal, the peer's address, a value in the head, one kept by the request).
  void add(std::string_view name, std::string_view value) { fields_.push_back({name, value}); }
  /// Adds `name: value` with a copy of `value`.
  void add_copy(std::string_view name, std::string_view value) { add(name, keep(value)); }
  /// Removes the fields added under `name` (any case).
  void erase(std::string_view name) {
    const auto named = [name](const ExtraField& f) { return same_name(f.name, name); };
    fields_.erase(std::remove_if(fields_.begin(), fields_.end(), named), fields_.end());
  }
  /// The value first added under `name` (any case); nullptr when none was.
  const std::string_view* find(std::string_view name) const {
    for (const auto& f : fields_)
      if (same_name(f.name, name)) return &f.value;
    return nullptr;
  }
  std::span<const ExtraField> fields() const { return {fields_.data(), fields_.size()}; }
  auto begin() const { return fields_.begin(); }
  auto end() const { return fields_.end(); }

 private:
  // A copy in the object's own bytes while they last (a length, a traceparent, a
  // token), else in a string of its own; neither moves once written.
  std::string_view keep(std::string_view value) {
    if (value.size() <= text_.size() - text_used_) {
      char* at = text_.data() + text_used_;
      value.copy(at, value.size());
      text_used_ += value.size();
      return {at, value.size()};
    }
    return spilled_.emplace_front(value);
  }

  boost::container::small_vector<ExtraField, 8> fields_;
  std::array<char, 96> text_{};
  std::size_t text_used_ = 0;
  std::forward_list<std::string> spilled_;
};

}  // namespace idemproxy::http
