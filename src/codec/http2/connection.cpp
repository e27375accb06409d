#include "codec/http2/connection.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "codec/http2/callbacks.hpp"

namespace idemproxy::codec::http2 {
namespace {

using Clock = std::chrono::steady_clock;

// Requests a connection may keep running, counting those whose streams the client
// reset while the proxy still serves them (rapid reset, CVE-2023-44487): past it the
// connection ends with ENHANCE_YOUR_CALM.
constexpr std::size_t kMaxServing = std::size_t{2} * Connection::kMaxConcurrentStreams;

Connection& self(void* user) { return *static_cast<Connection*>(user); }

int begin_headers_cb(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  return self(user).on_begin_headers(frame->hd.stream_id);
}

int send_data_cb(nghttp2_session*, nghttp2_frame* frame, const std::uint8_t* frame_head,
                 std::size_t length, nghttp2_data_source* source, void*) {
  // No padding is ever asked for (no select_padding callback): the payload is all data.
  static_cast<Stream*>(source->ptr)->take_data(frame_head, length);
  (void)frame;
  return 0;
}

}  // namespace

Connection::Connection(std::shared_ptr<ClientConnection> conn, Service& service, StreamSlots& slots)
    : conn_(std::move(conn)),
      service_(service),
      slots_(slots),
      settings_(service.settings()),
      memory_(conn_->arena),
      writable_(conn_->stream.get_executor()),
      tasks_done_(conn_->stream.get_executor()),
      quiet_since_(Clock::now()),
      tick_(conn_->stream.get_executor()),
      linger_(conn_->stream.get_executor()) {
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, begin_headers_cb);
  set_peer_callbacks<Connection>(cbs);
  nghttp2_session_callbacks_set_send_data_callback(cbs, send_data_cb);
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  // Windows open as the proxy takes request bytes (Stream::read_body), so a stream
  // whose upstream is slow holds back only its own client.
  nghttp2_option_set_no_auto_window_update(opt, 1);
  // SETTINGS and PING floods: at most this many ACKs queued, and SETTINGS entries.
  nghttp2_option_set_max_outbound_ack(opt, 1000);
  nghttp2_option_set_max_settings(opt, 32);
  // Rapid reset: a burst of 1000 resets, then 33 a second (nghttp2's own default).
  nghttp2_option_set_stream_reset_rate_limit(opt, 1000, 33);
  // CONTINUATION flood (CVE-2024-27316 class): at most 8 per header block.
  nghttp2_option_set_max_continuations(opt, 8);
  nghttp2_session_server_new3(&session_, cbs, this, opt, memory_.get());
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
}

Connection::~Connection() { nghttp2_session_del(session_); }

Stream* Connection::find(std::int32_t id) const {
  return static_cast<Stream*>(nghttp2_session_get_stream_user_data(session_, id));
}

// A connection with no stream open and no request running is idle, as an HTTP/1.1
// connection between requests: drain, and a new client at server.max_connections,
// may close it (the listener cancels its read).
void Connection::note_quiet() {
  if (finished_ || !live_.empty()) return;
  quiet_since_ = Clock::now();
  conn_->idle = true;
}

Stream& Connection::take_stream(std::int32_t id) {
  if (spare_.empty()) {
    streams_.push_back(std::make_unique<Stream>(*this, conn_->stream.get_executor()));
    spare_.push_back(streams_.back().get());
  }
  Stream* s = spare_.back();
  spare_.pop_back();
  // The configuration in force now, kept while the service's version stays: a copy
  // for each stream, without settings()'s lock.
  service_.keep_current(stream_settings_, streams_version_);
  s->open(id, stream_settings_);
  live_.push_back(s);
  return *s;
}

void Connection::maybe_recycle(Stream& s) {
  if (!s.recyclable()) return;
  const auto at = std::find(live_.begin(), live_.end(), &s);
  if (at == live_.end()) return;
  live_.erase(at);
  spare_.push_back(&s);
  if (reserved_ > 0 && reserved_ >= live_.size()) {
    --reserved_;
    slots_.release();
  }
  note_quiet();
}

int Connection::on_begin_headers(std::int32_t id) {
  service_.metrics().count_http2_stream();
  conn_->idle = false;
  Stream& s = take_stream(id);
  nghttp2_session_set_stream_user_data(session_, id, &s);
  return 0;
}

int Connection::on_header(const nghttp2_frame& frame, std::string_view name,
                          std::string_view value) {
  if (auto* s = find(frame.hd.stream_id)) {
    s->on_field(name, value, frame.headers.cat != NGHTTP2_HCAT_REQUEST);
  }
  return 0;
}

int Connection::on_frame_recv(const nghttp2_frame& frame) {
  if (!guard_.on_inbound(frame)) flood_ = true;
  const bool end = (frame.hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
  if (frame.hd.type != NGHTTP2_HEADERS && frame.hd.type != NGHTTP2_DATA) return 0;
  auto* s = find(frame.hd.stream_id);
  if (s == nullptr) return 0;
  if (frame.hd.type == NGHTTP2_HEADERS && frame.headers.cat == NGHTTP2_HCAT_REQUEST) {
    s->on_head_end(end);
    starting_.push_back(s);
    return 0;
  }
  if (end) s->on_end_stream();
  return 0;
}

int Connection::on_frame_send(const nghttp2_frame& frame) {
  guard_.on_outbound(frame);
  if (frame.hd.type == NGHTTP2_GOAWAY && frame.goaway.error_code != NGHTTP2_NO_ERROR) {
    service_.metrics().count_http2_goaway(frame.goaway.error_code);
  }
  return 0;
}

int Connection::on_data(std::int32_t id, const std::uint8_t* data, std::size_t size) {
  if (auto* s = find(id)) {
    s->on_data(data, size);
  } else {
    nghttp2_session_consume(session_, id, size);
  }
  return 0;
}

int Connection::on_stream_close(std::int32_t id, std::uint32_t code) {
  auto* s = find(id);
  if (s == nullptr) return 0;
  s->on_close(code);
  if (code != NGHTTP2_NO_ERROR) {
    spdlog::debug("HTTP/2 stream {} closed: {}", id, nghttp2_http2_strerror(code));
  }
  maybe_recycle(*s);
  return 0;
}

void Connection::add_copy(const std::uint8_t* data, std::size_t size) {
  if (!pieces_.empty() && pieces_.back().data == nullptr) {
    pieces_.back().size += size;  // adjoins the copy before it
  } else {
    pieces_.push_back({bytes_.size(), size, nullptr, nullptr});
  }
  bytes_.append(reinterpret_cast<const char*>(data), size);
}

void Connection::queue_data(Stream& s, const std::uint8_t* frame_head, const char* data,
                            std::size_t size) {
  add_copy(frame_head, 9);  // RFC 9113 §4.1: the frame header is 9 octets
  if (size > 0) pieces_.push_back({0, size, data, &s});
  borrowed_ += size;
}

// Streams whose head completed inside nghttp2_session_mem_recv start here, after it
// returns: a coroutine started inside a callback could re-enter the session.
void Connection::start_streams() {
  auto starting = std::move(starting_);
  starting_.clear();
  for (Stream* s : starting) {
    if (!s->closed()) start(*s);
  }
}

void Connection::start(Stream& s) {
  if (serving_ >= kMaxServing) {
    spdlog::warn("HTTP/2 client {} keeps {} requests running (streams reset early?): closing",
                 conn_->peer.ip, serving_);
    go_away(NGHTTP2_ENHANCE_YOUR_CALM);
    nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s.id(), NGHTTP2_REFUSED_STREAM);
    s.served();
    return;
  }
  // Each open stream beyond the first may hold an upstream connection: it takes a
  // slot of server.max_connections, or is refused unprocessed (RFC 9113 §8.7: the
  // client may send it again).
  if (live_.size() > reserved_ + 1) {
    if (!slots_.reserve()) {
      nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s.id(), NGHTTP2_REFUSED_STREAM);
      s.served();
      return;
    }
    ++reserved_;
  }
  ++serving_;
  ++tasks_;
  // The service's own coroutine is spawned: no frame of the connection's around it.
  asio::co_spawn(conn_->stream.get_executor(), service_.serve(s),
                 [self = shared_from_this(), &s](const std::exception_ptr& e) {
                   if (e) {
                     try {
                       std::rethrow_exception(e);
                     } catch (const std::exception& x) {
                       spdlog::error("HTTP/2 stream ended by an unexpected error: {}", x.what());
                     }
                   }
                   s.served();
                   --self->serving_;
                   self->maybe_recycle(s);
                   if (--self->tasks_ == 0) self->tasks_done_.notify();
                 });
}

void Connection::go_away(std::uint32_t code) {
  if (code == NGHTTP2_NO_ERROR) {
    if (goaway_) return;
    // RFC 9113 §6.8: streams up to the last one processed still complete.
    nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(session_), code, nullptr, 0);
  } else {
    nghttp2_session_terminate_session(session_, code);
  }
  goaway_ = true;
  wake_writer();
}

}  // namespace idemproxy::codec::http2
