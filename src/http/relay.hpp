#pragma once
// Relays one message body from one stream to another as it arrives, in fixed-size
// chunks (Beast's relay pattern): pass-through uses it both ways, and the idempotent
// path for responses too large to store.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <optional>
#include <span>
#include <string_view>
#include <tuple>
#include <utility>

#include "http/chunk.hpp"
#include "http/headers.hpp"
#include "http/parse_buffered.hpp"
#include "http/stream.hpp"

namespace idemproxy::http {

enum class RelayError { none, read, write };

/// Beast reads at most capacity() - size() bytes of a flat_buffer per call (and at
/// least 512): a buffer that only ever held a header reads a body 512 bytes at a
/// time, a syscall and a write each. Bodies are read through this much room.
inline constexpr std::size_t kBodyReadSize = std::size_t{64} << 10;

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

/// A serialized head, in the memory of the fields it was written from: a client
/// connection's arena for its requests and answers, the heap for the rest.
using HeadBytes = std::basic_string<char, std::char_traits<char>, FieldsAllocator>;

/// A message head as Beast's serializer writes it: start line, fields in order, and
/// the blank line.
template <bool isRequest>
HeadBytes serialize_head(const Header<isRequest>& h) {
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

/// Writes a message held whole (a string body) as Beast's serializer would: its head
/// as it stands, then its body, but in one gathered write. The serializer's buffer
/// machinery cost about 4% of the proxy's CPU per fresh key (docs/PERFORMANCE.md).
/// A message marked chunked still goes through Beast, which encodes the chunks.
template <bool isRequest>
asio::awaitable<std::tuple<beast::error_code, std::size_t>> write_whole(
    Stream& out, const bhttp::message<isRequest, bhttp::string_body, Fields>& m) {
  if (m.chunked()) co_return co_await bhttp::async_write(out, m, use_nothrow);
  const HeadBytes head = serialize_head<isRequest>(m.base());
  const std::array<asio::const_buffer, 2> message{asio::buffer(head), asio::buffer(m.body())};
  co_return co_await asio::async_write(out, message, use_nothrow);
}

/// Sets the framing fields of a message the proxy relays, from what its parser
/// decided, never from the sender's text (RFC 9112 6.3: a message's framing is the
/// receiver's reading of it; a proxy that copied it would pass on "Content-Length:
/// 2, 2" or a second terminating chunk). A known length goes out as one
/// Content-Length (RFC 9110 8.6 lets a list of equal values become one); a chunked
/// body, or one the upstream ends by closing, goes out chunked to an HTTP/1.1 peer
/// (RFC 9112 7.1), with transfer codings before chunked kept. A message with no body
/// to relay (a HEAD answer, 204, 304) keeps its fields: they describe the resource.
template <bool isRequest, class Parser>
void set_relay_framing(Header<isRequest>& h, const Parser& p, bool chunk_allowed) {
  if (p.is_done() && !p.chunked() && !p.content_length()) return;
  if constexpr (!isRequest) {
    if (p.get().result() == bhttp::status::not_modified || p.get().result_int() == 204) return;
  }
  if (const auto length = p.content_length()) {
    h.erase(bhttp::field::transfer_encoding);
    h.set(bhttp::field::content_length, std::to_string(*length));
    return;
  }
  h.erase(bhttp::field::content_length);
  std::string codings;  // transfer codings other than chunked, in order
  for (const auto& f : h) {
    if (f.name() != bhttp::field::transfer_encoding) continue;
    for (const auto& coding : bhttp::token_list{f.value()}) {
      if (beast::iequals(coding, "chunked")) continue;
      if (!codings.empty()) codings += ", ";
      codings += coding;
    }
  }
  h.erase(bhttp::field::transfer_encoding);
  if (!chunk_allowed) {
    if (!codings.empty()) h.set(bhttp::field::transfer_encoding, codings);
    return;  // an HTTP/1.0 peer: the body ends when the connection closes
  }
  h.set(bhttp::field::transfer_encoding, codings.empty() ? "chunked" : codings + ", chunked");
}

/// Writes p's header (framed by set_relay_framing), then `prefix` (body bytes already
/// read from `in`), then the rest of the body as `in` delivers it. The proxy writes
/// the chunk framing itself: chunk extensions are never relayed, nor are a request's
/// trailer fields (RFC 9110 6.5.1: a recipient may discard trailers; merging them
/// into the head, as a buffered parser does, is what RFC 9110 6.5 forbids). A
/// response's trailers go on in the last chunk (trailers_after): gRPC's status
/// travels in them. A message whose whole
/// body has a length that fits one chunk (most API calls) goes out in one gathered
/// write: Beast's serializer machinery cost more than the rest of a pass-through
/// request's user-space work (docs/PERFORMANCE.md).
/// Each read from `in` gets `in_timeout`, and none ends after `in_deadline` when one
/// is given: a body trickled a byte at a time cannot hold both connections forever.
template <bool isRequest>
asio::awaitable<RelayError> relay(
    Stream& in, beast::flat_buffer& in_buffer,
    bhttp::parser<isRequest, bhttp::buffer_body, FieldsAllocator>& p, Stream& out,
    Duration in_timeout, Duration out_timeout, beast::error_code& error,
    std::string_view prefix = {},
    std::optional<std::chrono::steady_clock::time_point> in_deadline = std::nullopt) {
  Chunk chunk;
  const WideBodyRead room(in_buffer, p, isRequest);  // requests come from clients
  const bool chunked_out = p.get().chunked();
  const bool has_body = !p.is_done() || !prefix.empty();
  // The clock, read once between waits: a read served from the buffer did not wait,
  // so the write after it takes its deadline from the same reading.
  std::optional<std::chrono::steady_clock::time_point> reading;
  const auto now = [&] {
    if (!reading) reading = std::chrono::steady_clock::now();
    return *reading;
  };
  // Before each read: the body lands in chunk[filled..], under the read's deadline.
  // (Not a coroutine of its own: a frame per read would be an allocation per read.)
  const auto prepare_read = [&](std::size_t filled) {
    p.get().body().data = chunk.data() + filled;
    p.get().body().size = chunk.size() - filled;
    const auto by = now() + in_timeout;
    in.expires_at(in_deadline ? std::min(by, *in_deadline) : by);
  };
  const auto read_bytes = [&] { return chunk.size() - p.get().body().size; };
  HeadBytes head = serialize_head<isRequest>(p.get());
  const auto head_fields = static_cast<std::size_t>(std::distance(p.get().begin(), p.get().end()));
  if (prefix.empty() && !chunked_out &&
      (p.is_done() || p.content_length().value_or(chunk.size() + 1) <= chunk.size())) {
    std::size_t filled = 0;
    while (!p.is_done()) {
      prepare_read(filled);
      beast::error_code ec;
      if (!parse_buffered(in_buffer, p, ec)) {
        std::tie(ec, std::ignore) = co_await bhttp::async_read_some(in, in_buffer, p, use_nothrow);
        reading.reset();
      }
      if (ec && ec != bhttp::error::need_buffer) {
        error = ec;
        co_return RelayError::read;
      }
      filled = read_bytes();
    }
    const std::array<asio::const_buffer, 2> message{asio::buffer(head),
                                                    asio::buffer(chunk.data(), filled)};
    out.expires_at(now() + out_timeout);
    auto [ec, n] = co_await asio::async_write(out, message, use_nothrow);
    if (ec) {
      error = ec;
      co_return RelayError::write;
    }
    co_return RelayError::none;
  }
  std::string_view pending = prefix;
  char size_line[24];
  static constexpr std::string_view kCrlf = "\r\n";
  static constexpr std::string_view kLastChunk = "0\r\n\r\n";
  // A body framed by Content-Length (RFC 9112 6.2) has nothing for the parser to
  // find in it, only bytes to count: once the bytes buffered with its head are used
  // up, the rest is read straight into the chunk, and `direct` counts what is left.
  // Read through the parser, every byte was copied once more (from `in_buffer` into
  // the chunk) and each stream kept a second buffer warm: at 256 streams of 1 MiB
  // that copy cost 4 times as much as with few (docs/PERFORMANCE.md). The parser,
  // which no longer sees the body, is not asked about it again. Chunked bodies (and
  // bodies ended by closing) still go through the parser.
  std::optional<std::uint64_t> direct;
  const auto done = [&] { return direct ? *direct == 0 : p.is_done(); };
  for (;;) {
    std::string_view data;
    if (!pending.empty()) {
      data = std::exchange(pending, {});
    } else if (!done()) {
      prepare_read(0);
      beast::error_code ec;
      if (!direct && in_buffer.size() == 0 && !p.chunked()) {
        if (const auto left = p.content_length_remaining()) direct = *left;
      }
      if (direct) {
        std::size_t n = 0;
        std::tie(ec, n) = co_await in.async_read_some(
            asio::buffer(chunk.data(),
                         static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), *direct))),
            use_nothrow);
        reading.reset();
        if (ec == asio::error::eof) ec = bhttp::error::partial_message;  // as Beast says it
        if (ec) {
          error = ec;
          co_return RelayError::read;
        }
        *direct -= n;
        data = {chunk.data(), n};
      } else {
        if (!parse_buffered(in_buffer, p, ec)) {
          std::tie(ec, std::ignore) =
              co_await bhttp::async_read_some(in, in_buffer, p, use_nothrow);
          reading.reset();
        }
        if (ec && ec != bhttp::error::need_buffer) {
          error = ec;
          co_return RelayError::read;
        }
        data = {chunk.data(), read_bytes()};
        // A read may parse only framing (a chunk header): nothing to write yet.
        if (data.empty() && !p.is_done()) continue;
      }
    }
    const bool last = done();
    std::array<asio::const_buffer, 5> buffers;
    std::size_t count = 0;
    if (!head.empty()) buffers[count++] = asio::buffer(head);
    if (!data.empty() && chunked_out) {
      const int n = std::snprintf(size_line, sizeof size_line, "%zx\r\n", data.size());
      buffers[count++] = asio::buffer(size_line, static_cast<std::size_t>(n));
    }
    if (!data.empty()) buffers[count++] = asio::buffer(data);
    if (!data.empty() && chunked_out) buffers[count++] = asio::buffer(kCrlf);
    std::string last_chunk;
    if (last && chunked_out && has_body) {
      if constexpr (!isRequest) {
        for (const auto& [name, value] : trailers_after(p.get(), head_fields)) {
          last_chunk.append(name).append(": ").append(value).append("\r\n");
        }
      }
      if (last_chunk.empty()) {
        buffers[count++] = asio::buffer(kLastChunk);
      } else {
        last_chunk.insert(0, "0\r\n").append("\r\n");
        buffers[count++] = asio::buffer(last_chunk);
      }
    }
    out.expires_at(now() + out_timeout);
    auto [ec, n] = co_await asio::async_write(
        out, std::span<const asio::const_buffer>(buffers.data(), count), use_nothrow);
    reading.reset();
    if (ec) {
      error = ec;
      co_return RelayError::write;
    }
    head.clear();
    if (last) co_return RelayError::none;
  }
}

}  // namespace idemproxy::http
