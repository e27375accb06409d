#pragma once
// One request stream of an HTTP/2 client connection and its answer (RFC 9113 §8.1):
// the exchange the proxy serves. Its head is built from the decoded fields, its body
// handed on as it arrives, its answer written as HEADERS, DATA (without a copy: the
// frames point into the answer's own memory) and trailers. It lives in its
// connection's pool, and everything here runs on the connection's executor.
#include <nghttp2/nghttp2.h>

#include <array>
#include <cstdint>
#include <string>

#include "codec/http2/nv.hpp"
#include "codec/http_names.hpp"
#include "http/exchange.hpp"
#include "http/signal.hpp"

namespace idemproxy::codec::http2 {

class Connection;

class Stream final : public http::Exchange {
 public:
  Stream(Connection& conn, const asio::any_io_executor& ex);

  // ---- The connection's side.
  /// Readies the stream (new or from the pool) for stream `id`.
  void open(std::int32_t id, std::shared_ptr<const Settings> settings);
  std::int32_t id() const { return id_; }
  /// A field of the request's head (`trailers`: of its trailer section, counted
  /// against the same limits and dropped).
  void on_field(std::string_view name, std::string_view value, bool trailers);
  /// The request's head is whole: RFC 9113 §8.3.1's rules are checked.
  void on_head_end(bool end_stream);
  void on_data(const std::uint8_t* data, std::size_t size);
  void on_end_stream();
  void on_close(std::uint32_t code);
  /// nghttp2's data source: how much of the answer's body the next DATA frame takes.
  ssize_t next_data(std::size_t room, std::uint32_t* flags);
  /// nghttp2 sends `size` bytes of the body as one DATA frame (NGHTTP2_DATA_FLAG_NO_COPY).
  void take_data(const std::uint8_t* frame_head, std::size_t size);
  /// `size` bytes that take_data() handed out reached the socket.
  void flushed(std::size_t size);
  /// The connection is gone: everything in flight is dropped.
  void abandon();
  /// The proxy is done with the exchange.
  void served();
  bool serving() const { return serving_; }
  bool closed() const { return closed_; }
  /// Whether the stream may return to the pool: served, closed, nothing in flight.
  bool recyclable() const { return !serving_ && closed_ && in_flight_ == 0; }
  /// The answer is whole but the request is not: when (for the lingering reset).
  TimePoint answered_early_at() const { return answered_early_at_; }
  void clear_answered_early() { answered_early_at_ = {}; }
  /// The answer waits for the client's window: since when nothing moved.
  TimePoint stalled_since() const { return stalled_since_; }
  /// A last piece copied and handed over (send_last_now) that the client's window has
  /// held back for longer than `timeout` since `now - timeout`: the watchdog resets it,
  /// as wait_written() would have.
  bool handed_over_stalled(TimePoint now, std::chrono::nanoseconds timeout) const {
    return handed_at_ != TimePoint{} && !closed_ && !eof_taken_ && now - handed_at_ > timeout;
  }
  void clear_handed_over() { handed_at_ = {}; }

  // ---- The exchange.
  RequestHeader& head() override { return *head_; }
  const RequestFacts& facts() const override { return facts_; }
  KeptStrings& kept() override { return *kept_; }
  bool answered() const override { return answered_; }
  bool accepts_trailers() const override { return true; }
  FieldsAllocator fields_allocator() override;
  void body_limit(std::uint64_t limit) override { limit_ = limit; }
  asio::awaitable<BodyPiece> read_body(std::size_t max, std::optional<TimePoint> deadline) override;
  bool take_buffered_body(std::string& body) override;
  bool expects_continue() const override {
    return expects_continue_ && received_ == 0 && !end_stream_;
  }
  asio::awaitable<bool> send_continue() override;
  bool body_done() const override { return end_stream_ && in_[fill_].empty(); }
  bool full_duplex() const override { return true; }
  void drop_body() override;
  asio::awaitable<bool> send_interim(ResponseHeader& head) override;
  asio::awaitable<bool> send_head(ResponseHeader& head, Framing framing) override;
  asio::awaitable<bool> send_body(std::string_view data, bool last, Trailers trailers) override;
  std::optional<bool> start_prepared(const PreparedAnswer& answer,
                                     std::span<const ExtraField> extra) override;
  asio::awaitable<bool> finish_prepared() override;
  void reset() override;

 private:
  /// The answer's head into nv_: :status, the fields HTTP/2 carries, the length.
  void head_fields(unsigned status, const Fields* fields, std::span<const Header> stored,
                   std::span<const ExtraField> extra, Framing framing);
  /// Submits the final head with or without a body to follow.
  bool submit_head(bool with_body);
  /// Gives the client's window back for the piece read last.
  void release_view();
  /// Waits until the body handed to send_body() is written (or the stream is gone).
  asio::awaitable<bool> wait_written();
  /// The answer's last piece and its trailers, when small and within the client's
  /// windows: copied into the stream's own buffers and handed to the session, so that
  /// nothing waits for its write (true: handed over; false: the stream is gone). None:
  /// send_body() sends it and waits.
  std::optional<bool> send_last_now(std::string_view data, Trailers trailers);
  /// Gives the session the body's next piece (viewed, not copied) and the trailers to
  /// follow a last one (laid out now, those allowed in trailers), and wakes the writer.
  void hand_to_session(std::string_view data, bool last, Trailers trailers);
  /// The answer is whole (and, when the request is not, since when).
  void mark_answered(TimePoint now);

  /// Returns up to `size` received bytes' worth of window to the client.
  void give_back(std::uint64_t size);

  Connection& conn_;
  std::int32_t id_ = 0;
  RequestHeader* head_ = nullptr;
  KeptStrings* kept_ = nullptr;
  RequestFacts facts_;
  bool answered_ = false;
  KeptStrings kept_storage_;
  RequestHeader head_storage_;
  std::string authority_, scheme_, path_;
  std::size_t header_bytes_ = 0;
  std::size_t field_count_ = 0;
  std::size_t cookies_ = 0;
  bool saw_host_ = false;
  bool saw_expect_ = false;  // the first expect field was read into expects_continue_
  bool over_limit_ = false;  // the head passed a limit: its fields are dropped
  bool head_request_ = false;
  bool expects_continue_ = false;

  // The request body: DATA arrives into in_[fill_]; the piece read_body() handed out
  // is in_[1 - fill_] (view_ bytes), whose window is given back at the next read.
  std::array<std::string, 2> in_;
  std::size_t fill_ = 0;
  std::size_t view_ = 0;
  std::uint64_t received_ = 0;
  std::uint64_t consumed_ = 0;  // window given back
  std::uint64_t delivered_ = 0;
  std::uint64_t limit_ = std::numeric_limits<std::uint64_t>::max();
  bool end_stream_ = false;
  bool discarding_ = false;  // served: what the client still sends is dropped
  Signal body_ready_;

  // The answer.
  NvList nv_;
  std::array<char, 24> digits_{};
  bool head_pending_ = false;  // a final head waits in nv_ for the first body bytes
  /// A replay's body and trailers, between start_prepared() (its head in nv_) and
  /// finish_prepared().
  std::string_view prepared_body_;
  Trailers prepared_trailers_;
  bool submitted_ = false;  // the final HEADERS are submitted
  bool deferred_ = false;   // nghttp2 waits for resume_data
  std::string_view out_;    // the body handed to send_body(), not yet all taken
  std::size_t out_at_ = 0;
  bool out_last_ = false;
  bool eof_taken_ = false;
  bool out_trailers_ = false;  // trailers follow the body: trailers_nv_ (maybe none kept)
  NvList trailers_nv_;
  std::string out_copy_;       // a last piece send_last_now() copied; out_ views it
  TimePoint handed_at_{};      // when send_last_now() handed it over
  std::size_t in_flight_ = 0;  // body bytes in a write not yet done
  Signal progress_;
  TimePoint stalled_since_{};
  TimePoint answered_early_at_{};

  std::uint32_t close_code_ = 0;
  bool closed_ = false;
  bool serving_ = false;
};

}  // namespace idemproxy::codec::http2
