#pragma once
// A message head as HTTP/1.1 writes it, serialized without Beast's serializer.
#include <algorithm>
#include <array>
#include <cstring>
#include <span>
#include <string>

#include "http/beast.hpp"
#include "http/extra_fields.hpp"

namespace idemproxy::http {

/// A serialized head, in the memory of the fields it was written from: a client
/// connection's arena for its requests and answers, the heap for the rest.
using HeadBytes = std::basic_string<char, std::char_traits<char>, FieldsAllocator>;

/// Appends a field line ("Name: value\r\n").
inline void append_field(HeadBytes& out, std::string_view name, std::string_view value) {
  out += name;
  out += ": ";
  out += value;
  out += "\r\n";
}

namespace head_detail {
// Copies `s` to `at` and returns the end of the copy.
inline char* put(char* at, std::string_view s) {
  std::memcpy(at, s.data(), s.size());
  return at + s.size();
}
inline char* put_field(char* at, std::string_view name, std::string_view value) {
  at = put(at, name);
  at = put(at, ": ");
  at = put(at, value);
  return put(at, "\r\n");
}
}  // namespace head_detail

/// A message head as Beast's serializer writes it: start line, fields in order, and
/// the blank line; `added` after the head's own fields. Its size is counted first and
/// its pieces copied into place, where appending each piece checked and moved the
/// string's end: 1,470 instructions a pass-through request for its two heads. (Beast's
/// serializer machinery cost about 4% of the proxy's CPU per fresh key:
/// docs/PERFORMANCE.md.)
template <bool isRequest>
HeadBytes serialize_head(const bhttp::header<isRequest, Fields>& h,
                         std::span<const ExtraField> added = {}) {
  using head_detail::put;
  using head_detail::put_field;
  constexpr std::size_t kLine = 4;        // ": " and CRLF
  std::string_view first, second, third;  // the start line's three parts
  std::array<char, 8> version = {'H', 'T', 'T', 'P', '/', '1', '.', '1'};
  version[5] = static_cast<char>('0' + h.version() / 10 % 10);
  version[7] = static_cast<char>('0' + h.version() % 10);
  std::array<char, 3> status{};
  if constexpr (isRequest) {
    first = h.method_string();
    second = h.target();
    third = std::string_view(version.data(), version.size());
  } else {
    first = std::string_view(version.data(), version.size());
    status = {static_cast<char>('0' + h.result_int() / 100 % 10),
              static_cast<char>('0' + h.result_int() / 10 % 10),
              static_cast<char>('0' + h.result_int() % 10)};
    second = std::string_view(status.data(), status.size());
    third = h.reason();
    if (third.empty()) third = bhttp::obsolete_reason(h.result());
  }
  std::size_t size = first.size() + 1 + second.size() + 1 + third.size() + 2 + 2;
  for (const auto& f : h) size += f.name_string().size() + f.value().size() + kLine;
  for (const auto& f : added) size += f.name.size() + f.value.size() + kLine;
  HeadBytes out(h.get_allocator());
  // With its terminator, at least the arena's largest block: the one a connection's
  // heads take in turn.
  out.reserve(std::max(size, Arena::kLargest - 1));
  out.resize(size);
  char* at = out.data();
  at = put(at, first);
  *at++ = ' ';
  at = put(at, second);
  *at++ = ' ';
  at = put(at, third);
  at = put(at, "\r\n");
  for (const auto& f : h) at = put_field(at, f.name_string(), f.value());
  for (const auto& f : added) at = put_field(at, f.name, f.value);
  put(at, "\r\n");
  return out;
}

}  // namespace idemproxy::http
