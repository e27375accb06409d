#include "upstream/relay.hpp"

#include <array>
#include <cstdio>
#include <span>

#include "http/chunk.hpp"
#include "http/fields.hpp"
#include "http/head_bytes.hpp"
#include "http/parse_buffered.hpp"

namespace idemproxy::http {
namespace {

constexpr std::string_view kCrlf = "\r\n";
constexpr std::string_view kLastChunk = "0\r\n\r\n";

// Beast reads at most capacity() - size() bytes of a flat_buffer per call (and at
// least 512): a buffer that only ever held a head reads a body 512 bytes at a time,
// a syscall and a write each. While a body is large or of unknown length, the
// upstream connection's buffer gets kBodyReadSize of room, and keeps it.
void widen_for_body(beast::flat_buffer& buffer, const StreamingParser& p) {
  if (!p.is_done() && (p.chunked() || p.content_length().value_or(0) > 4096)) {
    buffer.reserve(kBodyReadSize);
  }
}

}  // namespace

void frame_request(RequestHeader& head, const Exchange& from) {
  std::string codings;  // transfer codings other than chunked, in order
  for (const auto& f : head) {
    if (f.name() != bhttp::field::transfer_encoding) continue;
    for (const auto& coding : bhttp::token_list{f.value()}) {
      if (beast::iequals(coding, "chunked")) continue;
      if (!codings.empty()) codings += ", ";
      codings += coding;
    }
  }
  head.erase(bhttp::field::transfer_encoding);
  head.erase(bhttp::field::content_length);
  if (const auto length = from.content_length()) {
    head.set(bhttp::field::content_length, std::to_string(*length));
  } else if (from.has_body()) {
    head.set(bhttp::field::transfer_encoding, codings.empty() ? "chunked" : codings + ", chunked");
  }
}

asio::awaitable<RelayError> send_request(UpstreamConnection& to, RequestHeader& head,
                                         Exchange& from, Duration timeout,
                                         std::optional<Exchange::TimePoint> deadline,
                                         BodyPiece::Error& read_error,
                                         beast::error_code& write_error) {
  HeadBytes bytes = serialize_head(head);
  const bool chunked = !from.content_length() && from.has_body();  // as frame_request framed it
  bool end = !from.has_body() || from.body_done();
  std::string_view data;
  char size_line[24];
  for (;;) {
    if (!end) {
      const BodyPiece piece = co_await from.read_body(Chunk::kSize, deadline);
      if (piece.error != BodyPiece::Error::none) {
        read_error = piece.error;
        co_return RelayError::read;
      }
      data = piece.data;
      end = piece.end;
    }
    std::array<asio::const_buffer, 5> buffers;
    std::size_t count = 0;
    if (!bytes.empty()) buffers[count++] = asio::buffer(bytes);
    if (!data.empty() && chunked) {
      const int n = std::snprintf(size_line, sizeof size_line, "%zx\r\n", data.size());
      buffers[count++] = asio::buffer(size_line, static_cast<std::size_t>(n));
    }
    if (!data.empty()) buffers[count++] = asio::buffer(data);
    if (!data.empty() && chunked) buffers[count++] = asio::buffer(kCrlf);
    if (end && chunked) buffers[count++] = asio::buffer(kLastChunk);
    if (count > 0) {
      to.stream.expires_after(timeout);
      auto [ec, n] = co_await asio::async_write(
          to.stream, std::span<const asio::const_buffer>(buffers.data(), count), use_nothrow);
      if (ec) {
        write_error = ec;
        co_return RelayError::write;
      }
    }
    bytes.clear();
    data = {};
    if (end) co_return RelayError::none;
  }
}

asio::awaitable<RelayError> relay_answer(UpstreamConnection& from, StreamingParser& p,
                                         std::string_view prefix, bool head_request, Exchange& to,
                                         Duration timeout, beast::error_code& error,
                                         const std::function<void()>& answer_read) {
  auto& head = p.get().base();
  const unsigned status = head.result_int();
  // A message with no body to relay keeps its fields: they describe the resource.
  if (head_request || status / 100 == 1 || status == 204 || status == 304) {
    answer_read();
    const Framing none = Framing::none();
    const bool sent = co_await to.send_head(head, none);
    co_return sent ? RelayError::none : RelayError::write;
  }
  // Only a chunked answer has trailers to tell apart from its head.
  std::optional<FieldMark> head_fields;
  if (p.chunked()) head_fields.emplace(head);
  Chunk chunk;
  widen_for_body(from.buffer, p);
  // The clock, read once between waits: a read served from the buffer did not wait.
  std::optional<std::chrono::steady_clock::time_point> reading;
  const auto prepare_read = [&](std::size_t filled) {
    p.get().body().data = chunk.data() + filled;
    p.get().body().size = chunk.size() - filled;
    if (!reading) reading = std::chrono::steady_clock::now();
    from.stream.expires_at(*reading + timeout);
  };
  // Most API answers: a length that fits one chunk, read whole, then written with
  // the head in one gathered write.
  if (prefix.empty() && !p.chunked() &&
      (p.is_done() || p.content_length().value_or(chunk.size() + 1) <= chunk.size())) {
    std::size_t filled = 0;
    while (!p.is_done()) {
      prepare_read(filled);
      if (!parse_buffered(from.buffer, p, error)) {
        std::tie(error, std::ignore) =
            co_await bhttp::async_read_some(from.stream, from.buffer, p, use_nothrow);
        reading.reset();
      }
      if (error == bhttp::error::need_buffer) error = {};
      if (error) co_return RelayError::read;
      filled = chunk.size() - p.get().body().size;
    }
    answer_read();
    const Framing whole = Framing::of(filled);
    if (!co_await to.send_head(head, whole)) co_return RelayError::write;
    const std::string_view body(chunk.data(), filled);
    const Trailers none_after;
    const bool sent = co_await to.send_body(body, true, none_after);
    co_return sent ? RelayError::none : RelayError::write;
  }
  const Framing framing =
      p.content_length() ? Framing::of(*p.content_length()) : Framing::unknown(p.chunked());
  if (!co_await to.send_head(head, framing)) co_return RelayError::write;
  std::string_view pending = prefix;
  // A body framed by Content-Length (RFC 9112 6.2) has nothing for the parser to find
  // in it, only bytes to count: once the bytes buffered with its head are used up,
  // the rest is read straight into the chunk, and `direct` counts what is left.
  std::optional<std::uint64_t> direct;
  const auto done = [&] { return direct ? *direct == 0 : p.is_done(); };
  for (;;) {
    std::string_view data;
    if (!pending.empty()) {
      data = std::exchange(pending, {});
    } else if (!done()) {
      prepare_read(0);
      if (!direct && from.buffer.size() == 0 && !p.chunked()) {
        if (const auto left = p.content_length_remaining()) direct = *left;
      }
      if (direct) {
        std::size_t n = 0;
        std::tie(error, n) = co_await from.stream.async_read_some(
            asio::buffer(chunk.data(),
                         static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), *direct))),
            use_nothrow);
        reading.reset();
        if (error == asio::error::eof) error = bhttp::error::partial_message;  // as Beast says it
        if (error) co_return RelayError::read;
        *direct -= n;
        data = {chunk.data(), n};
      } else {
        if (!parse_buffered(from.buffer, p, error)) {
          std::tie(error, std::ignore) =
              co_await bhttp::async_read_some(from.stream, from.buffer, p, use_nothrow);
          reading.reset();
        }
        if (error == bhttp::error::need_buffer) error = {};
        if (error) co_return RelayError::read;
        data = {chunk.data(), chunk.size() - p.get().body().size};
        // A read may parse only framing (a chunk header): nothing to write yet.
        if (data.empty() && !p.is_done()) continue;
      }
    }
    const bool last = done();
    std::vector<store::Header> trailers;
    if (last && head_fields) trailers = head_fields->added(p.get());
    if (last) answer_read();
    const Trailers sent_after = trailers;
    if (!co_await to.send_body(data, last, sent_after)) co_return RelayError::write;
    if (last) co_return RelayError::none;
  }
}

}  // namespace idemproxy::http
