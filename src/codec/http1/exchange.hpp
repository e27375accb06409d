#pragma once
// One HTTP/1.1 request on a client connection and its answer (RFC 9112): the head
// read and checked, the body read with backpressure (straight from the socket when
// Content-Length frames it), the answer framed and written, the head together with
// the first body bytes.
#include <array>
#include <atomic>
#include <optional>
#include <span>
#include <vector>

#include "codec/http1/body_frames.hpp"
#include "codec/http1/request_head.hpp"
#include "codec/http_names.hpp"
#include "http/chunk.hpp"
#include "http/client_connection.hpp"
#include "http/exchange.hpp"
#include "http/fields.hpp"
#include "http/head_bytes.hpp"

namespace idemproxy::codec::http1 {

class Exchange final : public http::Exchange {
 public:
  /// `settings`: the configuration the connection holds, which was in force when
  /// `service` gave `settings_version`; take_head() takes the one in force then, when
  /// that changed.
  Exchange(ClientConnection& conn, std::shared_ptr<const Settings> settings,
           std::uint64_t settings_version, const Service& service);

  /// The request head is read in up to three steps, so that one that arrives whole
  /// costs no coroutine frame: the connection's loop awaits the request's first bytes
  /// in its own frame, take_head() reads a head that is whole, and only a head still
  /// arriving is awaited in read_head()'s. Each step's bool: false when the client left
  /// or stayed silent (there is nothing to answer); a malformed head sets head_error().
  ///
  /// Whether the request's first bytes must be awaited (none are buffered), under a
  /// deadline of server.idle_timeout from `last_end`; if so, the connection reads them
  /// into its buffer and hands the read's error to arrived().
  bool awaits_request(TimePoint last_end);
  void arrived(const beast::error_code& ec);
  /// Reads the head when it is whole in the buffer (or refuses it: past
  /// server.max_header_size, or the first read's error); none when more must be read.
  std::optional<bool> take_head();
  /// Reads the rest of the head, up to server.header_timeout from its first bytes (a
  /// client trickling bytes cannot hold the connection longer).
  asio::awaitable<bool> read_head();
  /// Whether the connection may read another request after this one.
  bool reusable() const;
  /// Hands the request's configuration, and the service's version it was in force at,
  /// back to the connection for its next request.
  std::shared_ptr<const Settings> release_settings(std::uint64_t& version) {
    version = settings_version_;
    return std::move(facts_.settings);
  }
  /// Whether the connection should close by lingering (RFC 9112 9.6): the client may
  /// still be sending a body this exchange did not read.
  bool linger() const { return !body_done() || facts_.head_error.has_value(); }

  RequestHeader& head() override { return *head_; }
  const RequestFacts& facts() const override { return facts_; }
  KeptStrings& kept() override { return *kept_; }
  void* request_room(std::size_t size, std::size_t align) override {
    return size <= room_.size() && align <= alignof(std::max_align_t) ? room_.data() : nullptr;
  }
  bool answered() const override { return answered_; }
  bool accepts_trailers() const override { return accepts_trailers_; }
  FieldsAllocator fields_allocator() override { return conn_.fields_allocator(); }
  void body_limit(std::uint64_t limit) override;
  asio::awaitable<BodyPiece> read_body(std::size_t max, std::optional<TimePoint> deadline) override;
  std::optional<BodyPiece> read_body_now(std::size_t max) override;
  bool expects_continue() const override { return expects_continue_ && !body_done(); }
  asio::awaitable<bool> send_continue() override;
  bool body_done() const override;
  bool take_buffered_body(std::string& body) override;
  asio::awaitable<bool> send_interim(ResponseHeader& head) override;
  asio::awaitable<bool> send_head(ResponseHeader& head, Framing framing) override;
  std::optional<bool> send_head_now(ResponseHeader& head, Framing framing) override;
  asio::awaitable<bool> send_body(std::string_view data, bool last, Trailers trailers) override;
  std::optional<bool> send_body_now(std::string_view data, bool last, Trailers trailers) override;
  std::optional<bool> start_prepared(const PreparedAnswer& answer,
                                     std::span<const ExtraField> extra) override;
  asio::awaitable<bool> finish_prepared() override;
  void reset() override;

 private:
  /// Checks what the parser accepts but RFC 9112 refuses, once the head is parsed.
  void check_head(const HeadFacts& facts);
  /// Writes `buffers` under server.read_timeout; false (and the connection broken) on failure.
  template <class Buffers>
  asio::awaitable<bool> write(const Buffers& buffers);
  /// write() in two steps, so that an answer the socket takes at once costs no
  /// coroutine frame: write_now() sends what the socket takes now and gives the
  /// outcome when that ended the write (true: all sent; false: failed, the connection
  /// broken), nothing when the rest must be awaited by write_rest().
  template <class Buffers>
  std::optional<bool> write_now(beast::buffers_suffix<Buffers>& rest);
  template <class Buffers>
  asio::awaitable<bool> write_rest(beast::buffers_suffix<Buffers>& rest);
  void deadline_for_read(std::optional<TimePoint> deadline);
  /// send_head()'s steps: whether the answer has no body, and its head laid out in
  /// pending_ (the framing and connection fields decided).
  bool bodiless(const ResponseHeader& head, Framing framing) const;
  void hold_head(ResponseHeader& head, Framing framing, bool bodiless);
  /// read_head()'s steps: a read's error, and the head parsed once it is whole.
  bool read_failed(const beast::error_code& ec);
  std::optional<bool> parse_whole();
  // Up to `max` of the body bytes framed by Content-Length left, from the connection's
  // buffer, where they stay valid until the exchange ends; the rest is read direct.
  std::string_view take_from_buffer(std::size_t max);

  ClientConnection& conn_;
  const Service& service_;
  std::uint64_t settings_version_ = 0;  // the service's, for facts_.settings (0: none)
  RequestHeader* head_ = nullptr;
  KeptStrings* kept_ = nullptr;
  RequestFacts facts_;
  bool answered_ = false;
  RequestHeader head_storage_;
  /// The service's state for this request (request_room): in the connection's frame,
  /// where a request that waits would take a frame of about this size from the heap.
  alignas(std::max_align_t) std::array<std::byte, http::kRequestRoom> room_;
  /// A chunked body's parser (Beast's, given a head that says only chunked): its
  /// trailer fields go to its own head, never to the request's.
  std::optional<RequestParser<bhttp::buffer_body>> chunked_;
  std::optional<Chunk> chunk_;
  /// A body framed by Content-Length (RFC 9112 6.2) is handed on from the buffer as
  /// far as it came with the head, then read straight into the chunk: `left_` counts
  /// what is left.
  std::uint64_t left_ = 0;
  std::uint64_t limit_ = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t read_ = 0;  // body bytes read so far
  unsigned version_ = 11;
  bool head_request_ = false;
  bool accepts_trailers_ = false;
  bool client_keep_alive_ = true;
  bool expects_continue_ = false;
  bool keep_ = true;          // the answer said keep-alive
  bool broken_ = false;       // a write failed, or reset(): the connection closes
  bool chunked_out_ = false;  // the answer's body goes out chunked
  bool trailers_out_ = false;
  std::optional<HeadBytes> pending_;  // a final head waiting for the first body bytes
  beast::error_code first_read_;      // the error of the read awaits_request() asked for
  std::size_t searched_ = 0;          // how far the buffer was searched for the head's end
  /// A replay start_prepared() began and finish_prepared() ends: what the socket has
  /// yet to take of the gathered bytes (and the body, when not among them), or, for an
  /// answer with no head laid out for this exchange, the answer and its extra fields,
  /// sent whole from a head built then.
  struct PreparedRest {
    std::optional<HeadBytes> gathered;
    std::array<asio::const_buffer, 2> buffers;
    std::optional<beast::buffers_suffix<std::span<const asio::const_buffer>>> rest;
    PreparedAnswer answer;
    std::vector<ExtraField> extra;
  };
  std::optional<PreparedRest> prepared_;
  /// A body piece send_body_now() began and send_body() ends: its frames (with the last
  /// chunk and its trailer fields), and what the socket has yet to take of them.
  struct PieceRest {
    explicit PieceRest(bool chunked) : frames(chunked) {}
    BodyFrames frames;
    std::optional<HeadBytes> last_chunk;
    std::optional<beast::buffers_suffix<std::span<const asio::const_buffer>>> rest;
    bool last = false;
  };
  std::optional<PieceRest> piece_;
  /// The piece's outcome, once it went or failed: the answer ends with its last one.
  bool piece_sent(bool sent);
};

}  // namespace idemproxy::codec::http1
