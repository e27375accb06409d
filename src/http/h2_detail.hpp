#pragma once
// The pieces of one HTTP/2 connection: its streams and the nghttp2 session that
// drives them. Everything here runs on the connection's executor (a strand with
// several I/O threads), so nothing is locked.
#include <nghttp2/nghttp2.h>

#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "http/request_context.hpp"
#include "http/session.hpp"

namespace idemproxy::http::h2 {

/// Wakes one waiting coroutine; a notify() before the wait() is not lost.
class Signal {
 public:
  explicit Signal(const asio::any_io_executor& ex)
      : timer_(ex, std::chrono::steady_clock::time_point::max()) {}
  void notify() {
    pending_ = true;
    timer_.cancel();
  }
  asio::awaitable<void> wait() {
    while (!pending_) co_await timer_.async_wait(use_nothrow);
    pending_ = false;
  }

 private:
  asio::steady_timer timer_;
  bool pending_ = false;
};

using Pipe = asio::local::stream_protocol::socket;

/// Per-stream flow-control window (SETTINGS_INITIAL_WINDOW_SIZE): what a client may
/// send on a stream before the bridge has passed it on. It bounds the body bytes a
/// stream holds here.
inline constexpr std::uint32_t kStreamWindow = 128 * 1024;
/// Response bytes a stream holds here before the bridge stops reading its answer.
inline constexpr std::size_t kOutHighWater = std::size_t{256} * 1024;

/// RFC 9113 §8.2.2: connection-specific fields, and those the Connection field
/// names, are not sent over HTTP/2.
bool connection_specific(std::string_view name, std::string_view connection);
/// A name-value pair for nghttp2 that points into `name` and `value`.
nghttp2_nv nv(const std::string& name, const std::string& value);
/// nv() for each field, in order; the strings must outlive the list.
std::vector<nghttp2_nv> nv_list(const std::vector<std::pair<std::string, std::string>>& fields);
/// A field name as HTTP/2 sends it: lower case (RFC 9113 §8.2.1).
std::string lower_case(std::string_view name);
/// Appends one HTTP/1.1 chunk (RFC 9112 §7.1) holding `data` to `to`.
void append_chunk(std::string& to, std::string_view data);

/// One request stream: its head as received, the body on its way to the bridge, the
/// answer on its way to nghttp2.
struct Stream {
  Stream(const asio::any_io_executor& ex, std::int32_t stream_id)
      : id(stream_id), body_ready(ex), room(ex) {}

  std::int32_t id;
  std::string method, authority, path;
  std::vector<std::pair<std::string, std::string>> fields;  // regular fields, in order
  std::size_t header_bytes = 0;  // as SETTINGS_MAX_HEADER_LIST_SIZE counts (RFC 9113 §6.5.2)
  std::size_t field_count = 0;
  std::string invalid;  // why the head cannot be served (400), when it cannot
  bool has_content_length = false;
  bool grpc = false;     // content-type application/grpc…: refusals are gRPC statuses
  bool has_body = true;  // false when HEADERS ended the stream

  std::string body;  // received, not yet written to the bridge
  bool body_end = false;
  bool sink_gone = false;  // the bridge stopped reading: later DATA is discarded
  Signal body_ready;

  std::string out;  // the answer's body, not yet taken by nghttp2
  std::size_t out_at = 0;
  bool out_end = false;
  bool out_deferred = false;                                  // nghttp2 waits for resume_data()
  std::vector<std::pair<std::string, std::string>> trailers;  // sent after the last DATA
  Signal room;

  bool answered = false;                                // a final response was submitted
  std::chrono::steady_clock::time_point answered_at{};  // answered whole, request unfinished
  std::chrono::steady_clock::time_point sent_at{};      // the answer last made progress
  bool closed = false;       // nghttp2 closed the stream: finished or reset
  std::optional<Pipe> pipe;  // the proxy's end of the bridge
};

/// One HTTP/2 client connection.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<ClientConnection> conn, Runtime& rt);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  asio::awaitable<void> run();

  // nghttp2's callbacks (h2_connection.cpp).
  int on_begin_headers(std::int32_t id);
  int on_header(const nghttp2_frame& frame, std::string_view name, std::string_view value);
  int on_frame_recv(const nghttp2_frame& frame);
  int on_frame_send(const nghttp2_frame& frame);
  int on_data(std::int32_t id, const std::uint8_t* data, std::size_t size);
  int on_stream_close(std::int32_t id, std::uint32_t code);
  ssize_t read_answer(std::int32_t id, std::uint8_t* buf, std::size_t size, std::uint32_t* flags);
  /// The answer's body is all out: the stream ends, with the trailers when it has any.
  void end_answer(Stream& s, std::uint32_t* flags);

  // For the bridge (h2_bridge.cpp).
  Runtime& runtime() { return rt_; }
  const ClientConnection& client() const { return *conn_; }
  /// Submits a response head: 1xx (final = false) or the final one, whose body then
  /// comes from s.out (none when !has_body).
  void submit_head(Stream& s, unsigned status, const Fields& fields, bool final, bool has_body);
  /// Answers a stream without the bridge (a head that cannot be served).
  void respond(Stream& s, const StringResponse& response);
  /// respond() with a refusal: problem+json, or a gRPC status for a gRPC call.
  void refuse(Stream& s, const ProxyError& error);
  /// Tells nghttp2 that s.out grew or ended.
  void answer_more(Stream& s);
  /// Returns `size` bytes of the stream's window to the client.
  void consumed(Stream& s, std::size_t size);
  void reset(Stream& s, std::uint32_t code);
  SessionTracker& bridged() { return bridged_; }

 private:
  asio::awaitable<void> read_loop();
  asio::awaitable<void> write_loop();
  asio::awaitable<void> watchdog();
  void start_streams();
  void finish_after_eof();
  void reset_stalled_streams(std::chrono::steady_clock::time_point now);
  void start(const std::shared_ptr<Stream>& s);
  void end(Stream& s);
  template <class Task>
  void spawn(Task task);
  void wake_writer() { writable_.notify(); }
  void note_quiet();
  std::shared_ptr<Stream> find(std::int32_t id) const;

  std::shared_ptr<ClientConnection> conn_;
  Runtime& rt_;
  nghttp2_session* session_ = nullptr;
  std::map<std::int32_t, std::shared_ptr<Stream>> streams_;
  std::vector<std::shared_ptr<Stream>> starting_;  // heads completed during mem_recv
  SessionTracker bridged_;                         // the streams' sessions
  Signal writable_;
  Signal tasks_done_;
  std::size_t tasks_ = 0;
  bool closing_ = false;     // the socket failed or timed out: stop at once
  bool goaway_ = false;      // a graceful GOAWAY was submitted
  bool finished_ = false;    // run() is done with the socket
  bool discarding_ = false;  // the session ended: bytes read are dropped
  bool reading_ = false;     // read_loop() runs
  std::chrono::steady_clock::time_point write_since_{};  // a write is under way since
  std::chrono::steady_clock::time_point quiet_since_;    // no streams since
  asio::steady_timer tick_;
  asio::steady_timer linger_;  // run() waits on it for the client to close, up to 2 s
};

/// The bridge of one stream: writes its request, as HTTP/1.1, to the session
/// serving it, and the body as it arrives.
asio::awaitable<void> feed(std::shared_ptr<Connection> c, std::shared_ptr<Stream> s);
/// The bridge's other half: reads the session's HTTP/1.1 answer and hands it to nghttp2.
asio::awaitable<void> answer(std::shared_ptr<Connection> c, std::shared_ptr<Stream> s);
/// The HTTP/1.1 request head the bridge writes for a stream.
std::string request_head(const Stream& s);

}  // namespace idemproxy::http::h2
