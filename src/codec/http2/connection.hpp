#pragma once
// One HTTP/2 client connection (RFC 9113): libnghttp2 does the framing, HPACK and
// flow control; each request stream is an Exchange the proxy serves directly. The
// shape is nghttpx's (src/shrpx_http2_upstream.cc): streams owned by the connection,
// windows given back only as the proxy takes request bytes
// (nghttp2_option_set_no_auto_window_update, nghttp2_session_consume), DATA written
// from the answer's own memory (NGHTTP2_DATA_FLAG_NO_COPY), and one flush per turn
// of the event loop into one gathered write, never from inside a callback.
// Everything here runs on the connection's executor (a strand with several I/O
// threads), so nothing is locked.
#include <nghttp2/nghttp2.h>

#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <string_view>
#include <vector>

#include "codec/http2/flood_guard.hpp"
#include "codec/http2/session_memory.hpp"
#include "codec/http2/stream.hpp"
#include "codec/http_names.hpp"
#include "http/client_connection.hpp"
#include "http/exchange.hpp"
#include "http/signal.hpp"

namespace idemproxy::codec::http2 {

/// RFC 9113 §3.4: the client connection preface; a connection that starts with it is
/// HTTP/2 with prior knowledge (§3.3).
inline constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The server's budget of streams served at once, over all connections: each may hold
/// an upstream connection, so they count against server.max_connections.
class StreamSlots {
 public:
  /// Takes a slot for one more concurrent stream; false when none is free.
  virtual bool reserve() = 0;
  virtual void release() = 0;

 protected:
  ~StreamSlots() = default;
};

/// A budget without bound: every stream gets a slot.
StreamSlots& unbounded_slots();

/// Serves one HTTP/2 connection, chosen by its preface (h2c) or by ALPN (h2); bytes
/// already read stay in conn->buffer. Returns when the connection and all its
/// streams are done.
asio::awaitable<void> serve(std::shared_ptr<ClientConnection> conn, Service& service,
                            StreamSlots& slots);

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  /// Streams a client may open at once (SETTINGS_MAX_CONCURRENT_STREAMS).
  static constexpr std::uint32_t kMaxConcurrentStreams = 128;
  /// A stream's receive window (SETTINGS_INITIAL_WINDOW_SIZE): the request bytes it
  /// may hold here before the proxy takes them.
  static constexpr std::uint32_t kStreamWindow = 64 * 1024;
  /// The connection's: bounds what all its streams together hold (1 MiB).
  static constexpr std::int32_t kConnectionWindow = 1 << 20;

  Connection(std::shared_ptr<ClientConnection> conn, Service& service, StreamSlots& slots);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  asio::awaitable<void> run();

  // For the streams.
  nghttp2_session* session() { return session_; }
  ClientConnection& client() { return *conn_; }
  Service& service() { return service_; }
  const Settings& settings() const { return *settings_; }
  void wake_writer() { writable_.notify(); }
  /// Adds a DATA frame to the pending write: its head copied, its payload in place.
  void queue_data(Stream& s, const std::uint8_t* frame_head, const char* data, std::size_t size);
  /// A stream may have become free (served, closed, flushed).
  void maybe_recycle(Stream& s);

  // nghttp2's callbacks (connection.cpp).
  int on_begin_headers(std::int32_t id);
  int on_header(const nghttp2_frame& frame, std::string_view name, std::string_view value);
  int on_frame_recv(const nghttp2_frame& frame);
  int on_frame_send(const nghttp2_frame& frame);
  int on_data(std::int32_t id, const std::uint8_t* data, std::size_t size);
  int on_stream_close(std::int32_t id, std::uint32_t code);

 private:
  struct Piece {
    std::size_t at = 0;  // in bytes_, when copied
    std::size_t size = 0;
    const char* data = nullptr;  // in place (a stream's answer), or null: copied
    Stream* stream = nullptr;
  };

  asio::awaitable<void> read_loop();
  asio::awaitable<void> write_loop();
  asio::awaitable<void> watchdog();
  void add_copy(const std::uint8_t* data, std::size_t size);
  void start_streams();
  void start(Stream& s);
  void finish_after_eof();
  void go_away(std::uint32_t code);
  void note_quiet();
  Stream* find(std::int32_t id) const;
  Stream& take_stream(std::int32_t id);

  std::shared_ptr<ClientConnection> conn_;
  Service& service_;
  StreamSlots& slots_;
  std::shared_ptr<const Settings> settings_;         // the connection's limits, from its start
  std::shared_ptr<const Settings> stream_settings_;  // what new streams start with
  std::uint64_t streams_version_ = 0;                // the service's, when that was read
  SessionMemory memory_;                             // nghttp2's, from the connection's arena
  nghttp2_session* session_ = nullptr;
  FloodGuard guard_;
  std::vector<std::unique_ptr<Stream>> streams_;  // every stream object this connection made
  std::vector<Stream*> spare_;                    // ready for another stream
  std::vector<Stream*> live_;                     // open, served, or with bytes in flight
  std::vector<Stream*> starting_;                 // heads completed during mem_recv
  std::size_t serving_ = 0;                       // streams the proxy is serving
  std::size_t reserved_ = 0;                      // stream slots taken from the server's budget
  std::string bytes_;                             // the pending write's copied frames
  std::vector<Piece> pieces_;
  std::size_t borrowed_ = 0;  // the pending write's bytes in place
  std::vector<asio::const_buffer> buffers_;
  Signal writable_;
  Signal tasks_done_;
  std::size_t tasks_ = 0;
  bool closing_ = false;         // the socket failed or timed out: stop at once
  bool goaway_ = false;          // a GOAWAY was submitted
  bool finished_ = false;        // run() is done with the socket
  bool discarding_ = false;      // the session ended: bytes read are dropped
  bool reading_ = false;         // read_loop() runs
  bool flood_ = false;           // a limit of FloodGuard's was passed during mem_recv
  bool read_lingering_ = false;  // bytes came during run()'s current lingering wait
  std::chrono::steady_clock::time_point write_since_{};  // a write is under way since
  std::chrono::steady_clock::time_point quiet_since_;    // no streams since
  asio::steady_timer tick_;
  asio::steady_timer linger_;  // run() waits on it for the client to close
};

}  // namespace idemproxy::codec::http2
