#pragma once
// How a body goes out in HTTP/1.1, both ways (a request to the upstream, an answer to a
// client): one gathered write per piece, with the chunk framing of RFC 9112 §7.1 when
// the message is chunked.
#include <array>
#include <charconv>
#include <cstddef>
#include <span>
#include <string_view>

#include "codec/http_names.hpp"
#include "http/beast.hpp"

namespace idemproxy::codec::http1 {

/// The buffers of one write: bytes held back (a head), then a body piece, framed as a
/// chunk when `chunked`, then the last chunk. Points into itself and into the bytes it
/// is given, so it stays where it is made (in the writer, until the write ends).
class BodyFrames {
 public:
  static constexpr std::string_view kLastChunk = "0\r\n\r\n";

  explicit BodyFrames(bool chunked) : chunked_(chunked) {}
  BodyFrames(const BodyFrames&) = delete;
  BodyFrames& operator=(const BodyFrames&) = delete;

  /// Bytes that go out as they are, before the piece (a head not yet written).
  void add_bytes(std::string_view bytes) {
    if (!bytes.empty()) buffers_[count_++] = asio::buffer(bytes);
  }
  /// A piece of the body; nothing when it is empty (an empty chunk would end it).
  void add_piece(std::string_view data) {
    if (data.empty()) return;
    if (chunked_) {
      char* end =
          std::to_chars(size_line_, size_line_ + sizeof size_line_ - 2, data.size(), 16).ptr;
      *end++ = '\r';
      *end++ = '\n';
      buffers_[count_++] = asio::buffer(size_line_, static_cast<std::size_t>(end - size_line_));
    }
    buffers_[count_++] = asio::buffer(data);
    if (chunked_) buffers_[count_++] = asio::buffer(kCrlf);
  }
  /// The end of a chunked body: `last_chunk` is "0\r\n", any trailer fields, "\r\n".
  /// Nothing for a body framed by its length or by the close.
  void add_end(std::string_view last_chunk = kLastChunk) {
    if (chunked_) buffers_[count_++] = asio::buffer(last_chunk);
  }

  bool empty() const { return count_ == 0; }
  std::span<const asio::const_buffer> buffers() const { return {buffers_.data(), count_}; }

 private:
  static constexpr std::string_view kCrlf = "\r\n";
  bool chunked_;
  std::array<asio::const_buffer, 5> buffers_;
  std::size_t count_ = 0;
  char size_line_[24] = {};
};

}  // namespace idemproxy::codec::http1
