#pragma once
// Relays one message body from one stream to another as it arrives, in fixed-size
// chunks (Beast's relay pattern): pass-through uses it both ways, and the idempotent
// path for responses too large to store.
#include <array>
#include <string_view>

#include "http/stream.hpp"

namespace idemproxy::http {

enum class RelayError { none, read, write };

/// Beast reads at most capacity() - size() bytes of a flat_buffer per call (and at
/// least 512): a buffer that only ever held a header reads a body 512 bytes at a
/// time, a syscall and a write each. Bodies are read through this much room.
inline constexpr std::size_t kBodyReadSize = 64 * 1024;

/// Gives `buffer` kBodyReadSize of room while the body `p` is about to read is large
/// or of unknown length (small bodies arrive with their head). With `narrow_after`
/// (a client's buffer, so idle keep-alive connections stay small) the room is given
/// back when this goes out of scope; an upstream connection's buffer keeps it.
class WideBodyRead {
 public:
  template <class Parser>
  WideBodyRead(beast::flat_buffer& buffer, const Parser& p, bool narrow_after) : buffer_(buffer) {
    const bool wide = !p.is_done() && (p.chunked() || p.content_length().value_or(0) > 4096);
    if (wide) buffer_.reserve(kBodyReadSize);
    narrow_ = wide && narrow_after;
  }
  ~WideBodyRead() {
    if (narrow_) buffer_.shrink_to_fit();
  }
  WideBodyRead(const WideBodyRead&) = delete;
  WideBodyRead& operator=(const WideBodyRead&) = delete;

 private:
  beast::flat_buffer& buffer_;
  bool narrow_ = false;
};

/// A message head as Beast's serializer writes it: start line, fields in order, and
/// the blank line.
template <bool isRequest>
std::string serialize_head(const bhttp::header<isRequest>& h) {
  std::string out;
  out.reserve(512);
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
    out += std::to_string(h.result_int());
    out += ' ';
    const auto reason = h.reason();
    out += reason.empty() ? bhttp::obsolete_reason(h.result()) : reason;
  }
  out += "\r\n";
  for (const auto& f : h) {
    out += f.name_string();
    out += ": ";
    out += f.value();
    out += "\r\n";
  }
  out += "\r\n";
  return out;
}

/// Writes p's header, then `prefix` (body bytes already read from `in`), then the
/// rest of the body as `in` delivers it. A message whose whole body has a length
/// that fits one chunk (most API calls) goes out in one gathered write of a head
/// serialized here: Beast's serializer machinery cost more than the rest of a
/// pass-through request's user-space work (docs/PERFORMANCE.md).
template <bool isRequest>
asio::awaitable<RelayError> relay(Stream& in, beast::flat_buffer& in_buffer,
                                  bhttp::parser<isRequest, bhttp::buffer_body>& p, Stream& out,
                                  Duration in_timeout, Duration out_timeout,
                                  beast::error_code& error, std::string_view prefix = {}) {
  std::array<char, 16 * 1024> chunk;
  bhttp::serializer<isRequest, bhttp::buffer_body> sr{p.get()};
  const WideBodyRead room(in_buffer, p, isRequest);  // requests come from clients
  if (prefix.empty() && !p.chunked() &&
      (p.is_done() || p.content_length().value_or(chunk.size() + 1) <= chunk.size())) {
    p.get().body().data = chunk.data();
    p.get().body().size = chunk.size();
    while (!p.is_done()) {
      in.expires_after(in_timeout);
      auto [ec, n] = co_await bhttp::async_read_some(in, in_buffer, p, use_nothrow);
      if (ec) {
        error = ec;
        co_return RelayError::read;
      }
    }
    const std::string head = serialize_head<isRequest>(p.get());
    const std::array<asio::const_buffer, 2> message{
        asio::buffer(head), asio::buffer(chunk.data(), chunk.size() - p.get().body().size)};
    out.expires_after(out_timeout);
    auto [ec, n] = co_await asio::async_write(out, message, use_nothrow);
    if (ec) {
      error = ec;
      co_return RelayError::write;
    }
    co_return RelayError::none;
  }
  bool prefix_sent = prefix.empty();
  do {
    if (!prefix_sent) {
      prefix_sent = true;
      p.get().body().data = const_cast<char*>(prefix.data());  // only read by the serializer
      p.get().body().size = prefix.size();
      p.get().body().more = !p.is_done();
    } else if (!p.is_done()) {
      p.get().body().data = chunk.data();
      p.get().body().size = chunk.size();
      in.expires_after(in_timeout);
      auto [ec, n] = co_await bhttp::async_read_some(in, in_buffer, p, use_nothrow);
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ec) {
        error = ec;
        co_return RelayError::read;
      }
      p.get().body().size = chunk.size() - p.get().body().size;
      p.get().body().data = chunk.data();
      p.get().body().more = !p.is_done();
      // A read may parse only framing (a chunk header). An empty buffer must not
      // reach a chunked serializer: it would write the zero-size terminating chunk.
      if (p.get().body().size == 0 && !p.is_done()) continue;
    } else {
      p.get().body().data = nullptr;
      p.get().body().size = 0;
      p.get().body().more = false;  // defaults to true: the serializer would wait
    }
    out.expires_after(out_timeout);
    auto [ec, n] = co_await bhttp::async_write(out, sr, use_nothrow);
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec) {
      error = ec;
      co_return RelayError::write;
    }
  } while (!p.is_done() && !sr.is_done());
  co_return RelayError::none;
}

}  // namespace idemproxy::http
