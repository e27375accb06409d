#pragma once
// Header fields as nghttp2 takes them, built from a head the proxy holds.
#include <nghttp2/nghttp2.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "codec/http_names.hpp"

namespace idemproxy::codec::http2 {

/// Name-value pairs for one HEADERS frame: names lower-cased (RFC 9113 §8.2.1),
/// names and values copied into memory the list keeps from one use to the next, so
/// the head they came from may go before the frame is submitted.
class NvList {
 public:
  void clear() {
    bytes_.clear();
    spans_.clear();
  }
  /// Adds a field; its name is lower-cased.
  void add(std::string_view name, std::string_view value);
  std::size_t size() const { return spans_.size(); }
  bool empty() const { return spans_.empty(); }
  /// The list for nghttp2 (which copies it when a frame is submitted); valid until
  /// the next add() or clear().
  const nghttp2_nv* data();

 private:
  struct Span {
    std::size_t name_at, name_size, value_at, value_size;
  };
  std::string bytes_;
  std::vector<Span> spans_;
  std::vector<nghttp2_nv> nv_;
};

}  // namespace idemproxy::codec::http2
