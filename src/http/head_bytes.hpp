#pragma once
// A message head as HTTP/1.1 writes it, serialized without Beast's serializer.
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

/// A message head as Beast's serializer writes it: start line, fields in order, and
/// the blank line; `added` after the head's own fields. (Beast's serializer machinery
/// cost about 4% of the proxy's CPU per fresh key: docs/PERFORMANCE.md.)
template <bool isRequest>
HeadBytes serialize_head(const bhttp::header<isRequest, Fields>& h,
                         std::span<const ExtraField> added = {}) {
  HeadBytes out(h.get_allocator());
  out.reserve(Arena::kLargest - 1);  // with its terminator, the arena's largest block
  const auto version = [&] {
    out += "HTTP/";
    out += static_cast<char>('0' + h.version() / 10);
    out += '.';
    out += static_cast<char>('0' + h.version() % 10);
  };
  if constexpr (isRequest) {
    out += h.method_string();
    out += ' ';
    out += h.target();
    out += ' ';
    version();
  } else {
    version();
    out += ' ';
    char status[4] = {static_cast<char>('0' + h.result_int() / 100 % 10),
                      static_cast<char>('0' + h.result_int() / 10 % 10),
                      static_cast<char>('0' + h.result_int() % 10), ' '};
    out.append(status, 4);
    const auto reason = h.reason();
    out += reason.empty() ? bhttp::obsolete_reason(h.result()) : reason;
  }
  out += "\r\n";
  for (const auto& f : h) append_field(out, f.name_string(), f.value());
  for (const auto& f : added) append_field(out, f.name, f.value);
  out += "\r\n";
  return out;
}

}  // namespace idemproxy::http
