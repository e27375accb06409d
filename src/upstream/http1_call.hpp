#pragma once
// The HTTP/1.1 side of an upstream exchange: one request and its answer on a pooled
// connection (UpstreamCall). The request goes out with its head and first body bytes
// in one write, chunked when its length is unknown. The answer's head is parsed in one
// pass once it is buffered whole (codec/http1/response_head.hpp); a body framed by
// Content-Length or by the close is read straight into the relay's chunk, and a
// chunked one through Beast's parser, handed to the proxy a piece at a time.
#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "codec/http1/body_frames.hpp"
#include "codec/http1/response_head.hpp"
#include "http/beast.hpp"
#include "http/chunk.hpp"
#include "http/fields.hpp"
#include "http/head_bytes.hpp"
#include "http/stream.hpp"
#include "upstream/call.hpp"

namespace idemproxy::upstream {

struct UpstreamConnection {
  UpstreamConnection(asio::any_io_executor ex, ssl::context* tls)
      : stream(tls ? Stream(std::move(ex), *tls) : Stream(std::move(ex))) {}
  /// A socket already connected (the tests hand it one end of a pair).
  explicit UpstreamConnection(tcp::socket connected) : stream(std::move(connected)) {}
  Stream stream;
  beast::flat_buffer buffer;
  bool reused = false;
  /// While it waits in the pool, a cleartext connection has a read queued on its
  /// socket, as nginx's keep-alive cache has a read handler: the upstream closing it,
  /// or sending what nobody asked for, ends that read and marks it dead; taking it
  /// back cancels the read. Shared with the read's handler, which may run after.
  struct Idle {
    std::atomic<bool> dead{false};
    char byte = 0;
  };
  std::shared_ptr<Idle> idle;
};

/// Where a call's connection comes from and goes back to (the pool; a fake in tests).
class ConnectionHome {
 public:
  virtual ~ConnectionHome() = default;
  /// Keeps a connection whose answer was read whole, for reuse: one the call found
  /// able to carry another (Http1Call::finish: nothing past the answer).
  virtual void give_back(std::unique_ptr<UpstreamConnection> conn) = 0;
  /// A new connection, for a request whose first write failed on a reused one.
  virtual asio::awaitable<std::pair<beast::error_code, std::unique_ptr<UpstreamConnection>>>
  fresh() = 0;
};

/// A chunked answer's body is read by Beast's parser, given a head that says only
/// that it is chunked.
using ChunkParser = ResponseParser<bhttp::buffer_body>;
/// Destroys a parser made by read_head and returns its memory to where its fields'
/// memory comes from (a client connection's arena, or the heap).
struct DeleteParser {
  void operator()(ChunkParser* parser) const noexcept {
    ArenaAllocator<ChunkParser> memory(parser->get().get_allocator());
    parser->~ChunkParser();
    memory.deallocate(parser, 1);
  }
};
using ChunkParserPtr = std::unique_ptr<ChunkParser, DeleteParser>;

/// The room an answer's body is read through (see widen_for_body).
inline constexpr std::size_t kBodyReadSize = std::size_t{64} << 10;

class Http1Call final : public UpstreamCall {
 public:
  Http1Call(ConnectionHome& home, std::unique_ptr<UpstreamConnection> conn)
      : home_(home), conn_(std::move(conn)) {}
  /// A call in `memory` (making it allocates nothing that could throw once the memory
  /// is taken: the members are moved in).
  static UpstreamCallPtr make(FieldsAllocator memory, ConnectionHome& home,
                              std::unique_ptr<UpstreamConnection> conn);
  void destroy() noexcept override;

  asio::awaitable<beast::error_code> send_head(RequestHeader& head, const ExtraFields& extra,
                                               RequestFraming framing, TimePoint until) override;
  std::optional<beast::error_code> send_head_now(RequestHeader& head, const ExtraFields& extra,
                                                 RequestFraming framing) override;
  asio::awaitable<beast::error_code> send_body(std::string_view data, bool last,
                                               TimePoint until) override;
  std::optional<beast::error_code> send_body_now(std::string_view data, bool last) override;
  asio::awaitable<beast::error_code> read_head(bool head_request,
                                               std::optional<std::uint64_t> body_limit,
                                               FieldsAllocator fields, TimePoint until) override;
  ResponseHeader& head() override { return *head_; }
  Framing framing() const override;
  asio::awaitable<AnswerPiece> read_body(TimePoint until) override;

  /// The upstream stopped taking the request (reset its connection, or shut its
  /// reading side) after some of it went: it may have answered without reading the
  /// rest (RFC 9112 9.6: a server may answer before a request's body ends, then close),
  /// and it may have acted on what it read. The rest is not sent, and the answer, or
  /// the connection's end, tells the outcome.
  bool answered_early() const override { return stopped_; }
  bool reached_upstream() const override { return out_ > 0; }

  /// The connection, while the call holds it (the tests read what is left in it).
  UpstreamConnection* connection() { return conn_.get(); }

 private:
  /// Writes `buffers` (the head, when still pending, and body bytes): once more on a
  /// new connection when the first write fails on a reused one, which the upstream
  /// may have closed as it was taken (nothing of the request reached it). In two
  /// steps, so that a write the socket takes at once costs no coroutine frame:
  /// write_now() sends what the socket takes now (`rest` is what is left) and gives
  /// the outcome when that ended the write; otherwise write_rest() goes on, given
  /// what write_now() failed with, if anything.
  using Rest = beast::buffers_suffix<std::span<const asio::const_buffer>>;
  std::optional<beast::error_code> write_now(Rest& rest, beast::error_code& ec);
  /// The frames of one body write: the head when still held, the piece, the end.
  void lay_out(codec::http1::BodyFrames& frames, std::string_view data, bool last) const;
  /// send_head()'s first step: the head laid out in head_bytes_, its te field dropped.
  void hold_head(RequestHeader& head, const ExtraFields& extra, RequestFraming framing);
  /// http::sent_at_once on the connection, counting what it took in `out_`.
  bool sent_at_once(Rest& rest, beast::error_code& ec);
  asio::awaitable<beast::error_code> write_rest(std::span<const asio::const_buffer> buffers,
                                                Rest& rest, beast::error_code ec, TimePoint until);
  /// Whether the write failed on a kept-alive connection the upstream had closed as it
  /// was taken: the first write, and the connection took none of it. (One that took
  /// some may have reached an upstream that read the head and answered early.)
  bool stale(const beast::error_code& ec) const {
    return ec && !written_ && conn_->reused && out_ == 0;
  }
  /// Writes the rest, and watches for an answer that comes before its end meanwhile:
  /// true when one came (the write stopped, `ec` says nothing), false when the write
  /// ended (with `ec`).
  asio::awaitable<bool> write_or_answer(Rest& rest, beast::error_code& ec);
  /// Whether the connection holds the start of a final answer, or its end (a peek).
  bool answer_waiting();
  /// Whether the connection's buffer holds the start of a final answer (a TLS watch
  /// read it).
  bool answer_read() const;
  /// A TLS write that takes the request to this much or more is watched: less always
  /// fits in the socket's buffers and the upstream's (Linux's default receive buffer
  /// alone is 128 KiB), so it ends without the upstream reading, and pays no watch.
  static constexpr std::size_t kTlsWatchFrom = std::size_t{64} * 1024;
  static constexpr std::size_t kTlsRecord =
      std::size_t{16} * 1024;  // a TLS record's most plaintext
  /// The write ended with `ec`: the head goes with it when it went.
  beast::error_code written(beast::error_code ec);
  /// A new connection for the request, in place of the one it had (none of the request
  /// has gone on it yet).
  asio::awaitable<beast::error_code> take_fresh();
  /// Sends the request (a head alone: resendable) once more on a new connection.
  asio::awaitable<beast::error_code> resend(TimePoint until);
  /// Whether the connection's buffer holds a whole head (`head_size` gets its
  /// length; `searched`: how much of the buffer holds no head's end): an error when
  /// it holds more than 64 KiB without one (header_limit), none when a read must
  /// bring more. No coroutine frame of its own: most heads come in one read.
  std::optional<beast::error_code> head_buffered(std::size_t& searched,
                                                 std::size_t& head_size) const;
  /// How the final answer's body is read, from its head; body_limit when its length
  /// is past `body_limit` (as Beast's parser refused it).
  beast::error_code start_body(bool head_request, std::optional<std::uint64_t> body_limit);
  /// A body framed by its length or by the close is read raw: the bytes buffered with
  /// its head first (take_buffered: false when there are none; `ec` says what they
  /// came to), then straight from the socket into the chunk, at most raw_room() at a
  /// time (`filled` bytes of the chunk hold what came before); took_raw() counts what
  /// a read brought.
  std::size_t raw_room(std::size_t filled) const;
  bool take_buffered(char* room, std::size_t& filled, beast::error_code& ec);
  beast::error_code took_raw(beast::error_code ec, std::size_t n, std::size_t& filled);
  /// The answer was read whole: the connection goes back while it can carry another.
  void finish();
  bool body_done() const;
  /// Reads the trailer section Beast's parser stopped at (LastChunk) from the buffer.
  beast::error_code read_trailer_section();

  FieldsAllocator memory_;
  ConnectionHome& home_;
  std::unique_ptr<UpstreamConnection> conn_;
  std::optional<ResponseHeader> head_;  // the head read last
  codec::http1::AnswerFacts facts_;     // what it said
  /// How the final answer's body is framed (RFC 9112 6.3): none, by its length
  /// (`left_` counts what is still to come), chunked (read by `chunks_`), or by the
  /// close (`left_` is the room under the body limit).
  enum class Body : std::uint8_t { none, length, chunked, to_close } body_ = Body::none;
  std::uint64_t left_ = 0;
  ChunkParserPtr chunks_;
  bool closed_ = false;  // a body framed by the close has come to it
  /// The request head, until the first write, or until the answer's first head when
  /// the request is resendable (it may go again, on a new connection).
  std::optional<HeadBytes> head_bytes_;
  /// A body piece send_body_now() began and send_body() ends: how much of its frames
  /// the socket took, and what that write failed with. send_body() lays the frames out
  /// again: kept here, they made the call too large for its arena block.
  struct PieceRest {
    std::size_t taken = 0;
    beast::error_code ec;
  };
  std::optional<PieceRest> piece_;
  bool resendable_ = false;     // RequestFraming::resendable, until a head came
  bool chunked_ = false;        // the request body goes chunked
  bool written_ = false;        // a write went out on this connection
  std::size_t out_ = 0;         // the bytes of this request the connection took
  bool stopped_ = false;        // answered_early(): nothing more is sent
  std::optional<Chunk> chunk_;  // the answer's body is read into it
  /// Beast's parser stops at a chunked answer's last chunk (its callback fails the
  /// parse there), and the trailer section is read by the proxy's own parser
  /// (codec/http1/trailer_section.hpp).
  struct LastChunk {
    void operator()(std::uint64_t size, beast::string_view, beast::error_code& ec) {
      if (size != 0) return;
      reached = true;
      ec = bhttp::error::end_of_chunk;
    }
    bool reached = false;
  };
  LastChunk last_chunk_;
  bool trailers_read_ = false;  // the trailer section was read: the body is done
  std::vector<Header> trailers_;
  bool ended_ = false;
};

}  // namespace idemproxy::upstream
