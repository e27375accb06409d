#pragma once
// Header fields as nghttp2 takes them, built from a head the proxy holds.
#include <nghttp2/nghttp2.h>

#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "codec/http_names.hpp"

namespace idemproxy::codec::http2 {

/// Name-value pairs for one HEADERS frame: names lower-cased (RFC 9113 §8.2.1).
/// add() copies a field into memory the list keeps from one use to the next, so the
/// head it came from may go before the frame is submitted; add_lasting() takes a field
/// whose memory outlives the submission (a cached answer's) by view when its name is
/// lower-case already. nghttp2 copies the list when a frame is submitted.
///
/// A field whose value is new on every message (`fresh_per_message`) is sent "never
/// indexed" (RFC 7541 §6.2.3, NGHTTP2_NV_FLAG_NO_INDEX): entered in the encoder's
/// dynamic table it would only evict the entries later messages reuse, and every
/// search of the table walks the entries that share its name.
class NvList {
 public:
  void clear() {
    used_ = 0;
    spans_.clear();
  }
  /// Adds a field, copied; its name is lower-cased.
  void add(std::string_view name, std::string_view value);
  /// Adds a field whose name and value stay until the list has been submitted: by
  /// view when the name is lower-case, else copied as add() does.
  void add_lasting(std::string_view name, std::string_view value);
  /// Whether a field of this (lower-case) name carries a value new on every message:
  /// the request ids and trace contexts the proxy stamps, and the idempotency key.
  static bool fresh_per_message(std::string_view lower_name);
  std::size_t size() const { return spans_.size(); }
  bool empty() const { return spans_.empty(); }
  /// The list for nghttp2 (which copies it when a frame is submitted); valid until
  /// the next add() or clear().
  const nghttp2_nv* data();

 private:
  /// A field: a copy at offsets into bytes_ (name null), or a view (name and value).
  struct Span {
    const char* name;
    const char* value;
    std::uint32_t name_at, value_at, name_size, value_size;
    std::uint8_t flags;
  };
  void first_use();
  char* room(std::size_t n);  // n more bytes at the end of bytes_; may move them
  std::unique_ptr<char[]> bytes_;
  std::size_t used_ = 0, capacity_ = 0;
  std::vector<Span> spans_;
  std::vector<nghttp2_nv> nv_;
};

}  // namespace idemproxy::codec::http2
