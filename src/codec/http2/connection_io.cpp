// The HTTP/2 connection's socket side: reading into nghttp2, one gathered write per
// turn, the watchdog, and the end of the connection.
#include <spdlog/spdlog.h>

#include <span>

#include "codec/http2/connection.hpp"

namespace idemproxy::codec::http2 {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kWriteBatch = std::size_t{256} * 1024;

}  // namespace

asio::awaitable<void> Connection::read_loop() {
  auto& buffer = conn_->buffer;
  for (;;) {
    if (buffer.size() > 0 && !discarding_) {
      const auto* data = static_cast<const std::uint8_t*>(buffer.data().data());
      const auto used = nghttp2_session_mem_recv(session_, data, buffer.size());
      if (used < 0) {
        // A connection error nghttp2 did not answer itself (a flood of SETTINGS or
        // PING ACKs, too many CONTINUATIONs, a broken preface): end the session with
        // a GOAWAY, which the writer sends before it stops.
        const auto error = static_cast<int>(used);
        spdlog::info("HTTP/2 client {}: {}; closing", conn_->peer.ip, nghttp2_strerror(error));
        const bool flood = error == NGHTTP2_ERR_FLOODED || error == NGHTTP2_ERR_TOO_MANY_SETTINGS ||
                           error == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS;
        if (nghttp2_session_terminate_session(
                session_, flood ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR) != 0) {
          closing_ = true;
        }
        goaway_ = true;
        discarding_ = true;
      } else if (flood_ ||
                 guard_.outbound_flood(nghttp2_session_get_outbound_queue_size(session_))) {
        spdlog::info("HTTP/2 client {}: {}; closing", conn_->peer.ip,
                     flood_ ? guard_.why() : "too many frames queued for a client not reading");
        go_away(NGHTTP2_ENHANCE_YOUR_CALM);
        discarding_ = true;
      } else {
        start_streams();
      }
      wake_writer();
    }
    // After the session ended, what still arrives is read and dropped until the
    // client closes: closing on unread bytes would send a reset, which can destroy
    // the GOAWAY before the client reads it (as in RFC 9112 §9.6 for HTTP/1.1).
    buffer.consume(buffer.size());
    if (closing_) break;
    auto [ec, n] =
        co_await conn_->stream.async_read_some(buffer.prepare(std::size_t{16} * 1024), use_nothrow);
    if (ec == asio::error::eof && !discarding_) {
      // The client sent all it will (a half-close): streams with their whole request
      // are still answered, as an HTTP/1.1 client that half-closes is; the others
      // can never complete.
      finish_after_eof();
      break;
    }
    if (ec) {
      closing_ = true;
      wake_writer();
      break;
    }
    buffer.commit(n);
    if (finished_) read_lingering_ = true;
  }
  reading_ = false;
  linger_.cancel();
}

void Connection::finish_after_eof() {
  for (Stream* s : live_) {
    if (!s->closed() && !s->body_done()) {
      nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s->id(), NGHTTP2_CANCEL);
    }
  }
  go_away(NGHTTP2_NO_ERROR);
}

asio::awaitable<void> Connection::write_loop() {
  for (;;) {
    bytes_.clear();
    pieces_.clear();
    borrowed_ = 0;
    while (!closing_ && bytes_.size() + borrowed_ < kWriteBatch) {
      const std::uint8_t* data = nullptr;
      // DATA frames come through send_data_cb (queue_data) during this call.
      const auto n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) {
        closing_ = true;
        break;
      }
      if (n == 0) break;
      add_copy(data, static_cast<std::size_t>(n));
    }
    if (!pieces_.empty()) {
      buffers_.clear();
      for (const auto& p : pieces_) {
        const char* data = p.data != nullptr ? p.data : bytes_.data() + p.at;
        buffers_.push_back(asio::const_buffer(data, p.size));
      }
      beast::error_code ec;
      if (!closing_) {
        write_since_ = Clock::now();
        // A view, not the vector: the write keeps a copy of the sequence it is given.
        const std::span<const asio::const_buffer> out(buffers_);
        std::tie(ec, std::ignore) = co_await asio::async_write(conn_->stream, out, use_nothrow);
        write_since_ = {};
      }
      guard_.flushed();
      // The answers' bytes are out (or never will be): their senders may go on.
      for (const auto& p : pieces_) {
        if (p.stream == nullptr) continue;
        p.stream->flushed(p.size);
        maybe_recycle(*p.stream);
      }
      if (ec) closing_ = true;
      if (!closing_) continue;
    }
    if (closing_) co_return;
    if (nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0) {
      co_return;
    }
    co_await writable_.wait();
  }
}

asio::awaitable<void> Connection::watchdog() {
  while (!finished_) {
    tick_.expires_after(std::chrono::seconds{1});
    co_await tick_.async_wait(use_nothrow);
    if (finished_) co_return;
    const auto& server = settings_->config.server;
    const auto now = Clock::now();
    for (Stream* s : live_) {
      // RFC 9113 §8.1: a complete answer may come before the whole request (a 400, a
      // 413). The rest of the body is taken and dropped for up to 2 s, as an HTTP/1.1
      // lingering close does, before RST_STREAM NO_ERROR tells the client to stop:
      // clients (curl 7.88) report a reset that comes while they still send as a
      // failure, answer or not.
      const auto early = s->answered_early_at();
      if (!s->closed() && early != Clock::time_point{} && !s->body_done() &&
          now - early > std::chrono::seconds{2}) {
        nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s->id(), NGHTTP2_NO_ERROR);
        s->clear_answered_early();
        wake_writer();
      }
      // A small last piece handed over without a wait (Stream::send_last_now) that a
      // window held back past server.read_timeout: reset, as an awaited one would be.
      if (s->handed_over_stalled(now, server.read_timeout)) {
        nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s->id(), NGHTTP2_CANCEL);
        s->clear_handed_over();
        wake_writer();
      }
    }
    const bool quiet = live_.empty() && now - quiet_since_ > server.idle_timeout;
    if (!goaway_ && (service_.draining() || quiet)) go_away(NGHTTP2_NO_ERROR);
    // A client that stops reading holds a write open; as with HTTP/1.1, read_timeout.
    if (write_since_ != Clock::time_point{} && now - write_since_ > server.read_timeout) {
      spdlog::info("HTTP/2 client {} stopped reading: closing", conn_->peer.ip);
      closing_ = true;
      beast::error_code ec;
      conn_->stream.socket().close(ec);
    }
  }
}

asio::awaitable<void> Connection::run() {
  const auto& server = settings_->config.server;
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, kMaxConcurrentStreams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, kStreamWindow},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<std::uint32_t>(server.max_header_size)},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kConnectionWindow);
  conn_->stream.expires_never();
  conn_->idle = true;  // until its first stream
  reading_ = true;
  const auto on_end = [self = shared_from_this()](const std::exception_ptr&) {
    if (--self->tasks_ == 0) self->tasks_done_.notify();
  };
  tasks_ += 2;
  asio::co_spawn(conn_->stream.get_executor(), read_loop(), on_end);
  asio::co_spawn(conn_->stream.get_executor(), watchdog(), on_end);
  co_await write_loop();
  finished_ = true;
  conn_->idle = false;
  discarding_ = true;
  beast::error_code ec;
  conn_->stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (reading_ && !closing_) {
    // A lingering close, as nginx's: until 2 s pass with nothing read, 10 s at most.
    // Closing while the client still sends resets the connection, and a reset can
    // destroy the GOAWAY before the client reads it (a flooding client under load,
    // still sending 2 s after it, lost it).
    const auto most = std::chrono::steady_clock::now() + std::chrono::seconds{10};
    do {
      read_lingering_ = false;
      linger_.expires_after(std::chrono::seconds{2});
      co_await linger_.async_wait(use_nothrow);
    } while (reading_ && read_lingering_ && std::chrono::steady_clock::now() < most);
  }
  conn_->stream.socket().close(ec);
  tick_.cancel();
  // Streams still open end with the connection: the requests being served see their
  // client go, as with an HTTP/1.1 disconnect, and finish what they started (an
  // exchange under way completes and is recorded).
  for (Stream* s : live_) s->abandon();
  while (tasks_ > 0) co_await tasks_done_.wait();
  while (reserved_ > 0) {
    --reserved_;
    slots_.release();
  }
}

StreamSlots& unbounded_slots() {
  struct Unbounded final : StreamSlots {
    bool reserve() override { return true; }
    void release() override {}
  };
  static Unbounded slots;
  return slots;
}

asio::awaitable<void> serve(std::shared_ptr<ClientConnection> conn, Service& service,
                            StreamSlots& slots) {
  service.metrics().count_http2_connection();
  auto c = std::make_shared<Connection>(std::move(conn), service, slots);
  co_await c->run();
}

}  // namespace idemproxy::codec::http2
