#pragma once
// Header fields as nghttp2 takes them, built from a head the proxy holds.
#include <nghttp2/nghttp2.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "codec/http_names.hpp"

namespace idemproxy::codec::http2 {

/// Name-value pairs for one HEADERS frame: names lower-cased (RFC 9113 §8.2.1),
/// names and values copied into memory the list keeps from one use to the next, so
/// the head they came from may go before the frame is submitted.
///
/// A field whose value is new on every message (`fresh_per_message`) is sent "never
/// indexed" (RFC 7541 §6.2.3, NGHTTP2_NV_FLAG_NO_INDEX): entered in the encoder's
/// dynamic table it would only evict the entries later messages reuse, and every
/// search of the table walks the entries that share its name.
class NvList {
 public:
  void clear() {
    bytes_.clear();
    spans_.clear();
  }
  /// Adds a field; its name is lower-cased.
  void add(std::string_view name, std::string_view value);
  /// Whether a field of this (lower-case) name carries a value new on every message:
  /// the request ids and trace contexts the proxy stamps, and the idempotency key.
  static bool fresh_per_message(std::string_view lower_name);
  std::size_t size() const { return spans_.size(); }
  bool empty() const { return spans_.empty(); }
  /// The list for nghttp2 (which copies it when a frame is submitted); valid until
  /// the next add() or clear().
  const nghttp2_nv* data();

 private:
  struct Span {
    std::size_t name_at, name_size, value_at, value_size;
    std::uint8_t flags;
  };
  std::string bytes_;
  std::vector<Span> spans_;
  std::vector<nghttp2_nv> nv_;
};

}  // namespace idemproxy::codec::http2
