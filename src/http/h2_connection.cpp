#include "http/h2_connection.hpp"

#include <openssl/ssl.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "http/h2_detail.hpp"
#include "idemproxy/engine/grpc_status.hpp"

namespace idemproxy::http {
namespace h2 {
namespace {

// RFC 9113 §6.5.2 bounds, and nghttp2's guards against the known floods.
constexpr std::uint32_t kMaxConcurrentStreams = 128;
constexpr std::int32_t kConnectionWindow = 1 << 20;
// Sessions a connection may keep serving, counting those whose streams the client
// reset while their exchange goes on (rapid reset, CVE-2023-44487): past it the
// connection ends with ENHANCE_YOUR_CALM.
constexpr std::size_t kMaxBridged = std::size_t{2} * kMaxConcurrentStreams;
constexpr std::size_t kWriteBatch = std::size_t{64} * 1024;

Connection& self(void* user) { return *static_cast<Connection*>(user); }

int begin_headers_cb(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  return self(user).on_begin_headers(frame->hd.stream_id);
}

int header_cb(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
              std::size_t namelen, const std::uint8_t* value, std::size_t valuelen, std::uint8_t,
              void* user) {
  return self(user).on_header(*frame, {reinterpret_cast<const char*>(name), namelen},
                              {reinterpret_cast<const char*>(value), valuelen});
}

int frame_recv_cb(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  return self(user).on_frame_recv(*frame);
}

int frame_send_cb(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  return self(user).on_frame_send(*frame);
}

int data_cb(nghttp2_session*, std::uint8_t, std::int32_t id, const std::uint8_t* data,
            std::size_t size, void* user) {
  return self(user).on_data(id, data, size);
}

int stream_close_cb(nghttp2_session*, std::int32_t id, std::uint32_t code, void* user) {
  return self(user).on_stream_close(id, code);
}

ssize_t answer_source_cb(nghttp2_session*, std::int32_t id, std::uint8_t* buf, std::size_t size,
                         std::uint32_t* flags, nghttp2_data_source*, void* user) {
  return self(user).read_answer(id, buf, size, flags);
}

}  // namespace

bool connection_specific(std::string_view name, std::string_view connection) {
  // RFC 9113 §8.2.2: connection-specific fields are not sent over HTTP/2, nor is
  // anything the Connection field names.
  static constexpr std::string_view kFields[] = {"connection", "keep-alive", "proxy-connection",
                                                 "transfer-encoding", "upgrade"};
  for (auto f : kFields) {
    if (beast::iequals(name, f)) return true;
  }
  for (std::size_t at = 0; at < connection.size();) {
    auto end = connection.find(',', at);
    if (end == std::string_view::npos) end = connection.size();
    auto token = connection.substr(at, end - at);
    while (!token.empty() && (token.front() == ' ' || token.front() == '\t'))
      token.remove_prefix(1);
    while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
    if (!token.empty() && beast::iequals(name, token)) return true;
    at = end + 1;
  }
  return false;
}

nghttp2_nv nv(const std::string& name, const std::string& value) {
  return {reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), name.size(),
          value.size(), NGHTTP2_NV_FLAG_NONE};
}

std::vector<nghttp2_nv> nv_list(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::vector<nghttp2_nv> nva;
  nva.reserve(fields.size());
  for (const auto& [name, value] : fields) nva.push_back(nv(name, value));
  return nva;
}

std::string lower_case(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower;
}

void append_chunk(std::string& to, std::string_view data) {
  char size[20];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  to.append(size, static_cast<std::size_t>(n));
  to.append(data);
  to.append("\r\n");
}

Connection::Connection(std::shared_ptr<ClientConnection> conn, Runtime& rt)
    : conn_(std::move(conn)),
      rt_(rt),
      writable_(conn_->stream.get_executor()),
      tasks_done_(conn_->stream.get_executor()),
      quiet_since_(std::chrono::steady_clock::now()),
      tick_(conn_->stream.get_executor()),
      linger_(conn_->stream.get_executor()) {
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, begin_headers_cb);
  nghttp2_session_callbacks_set_on_header_callback(cbs, header_cb);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, frame_recv_cb);
  nghttp2_session_callbacks_set_on_frame_send_callback(cbs, frame_send_cb);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, data_cb);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, stream_close_cb);
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  // Windows open as the bridge passes bytes on, so a stream whose session is not
  // reading (a slow upstream) holds back only its own client.
  nghttp2_option_set_no_auto_window_update(opt, 1);
  // SETTINGS and PING floods: at most this many ACKs queued, and SETTINGS entries.
  nghttp2_option_set_max_outbound_ack(opt, 1000);
  nghttp2_option_set_max_settings(opt, 32);
  // Rapid reset: a burst of 1000 resets, then 33 a second (nghttp2's own default).
  nghttp2_option_set_stream_reset_rate_limit(opt, 1000, 33);
  // CONTINUATION flood (CVE-2024-27316 class): at most 8 per header block.
  nghttp2_option_set_max_continuations(opt, 8);
  nghttp2_session_server_new2(&session_, cbs, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
}

Connection::~Connection() { nghttp2_session_del(session_); }

// A connection with no stream open and no request running is idle, as an HTTP/1.1
// connection between requests: drain, and a new client at server.max_connections,
// may close it (SessionTracker cancels its read).
void Connection::note_quiet() {
  if (finished_ || !streams_.empty() || bridged_.size() > 0) return;
  quiet_since_ = std::chrono::steady_clock::now();
  conn_->idle = true;
}

std::shared_ptr<Stream> Connection::find(std::int32_t id) const {
  const auto it = streams_.find(id);
  return it == streams_.end() ? nullptr : it->second;
}

int Connection::on_begin_headers(std::int32_t id) {
  rt_.metrics.count_http2_stream();
  conn_->idle = false;
  streams_[id] = std::make_shared<Stream>(conn_->stream.get_executor(), id);
  return 0;
}

int Connection::on_header(const nghttp2_frame& frame, std::string_view name,
                          std::string_view value) {
  auto s = find(frame.hd.stream_id);
  if (!s) return 0;
  const auto& server = rt_.settings()->config.server;
  s->header_bytes += name.size() + value.size() + 32;
  ++s->field_count;
  // Known before any limit: a gRPC client is refused with a gRPC status.
  if (name == "content-type") s->grpc = engine::is_grpc_content_type(value);
  if (frame.headers.cat != NGHTTP2_HCAT_REQUEST) {
    // Trailers of the request: counted against the same limits, not forwarded.
    if (s->header_bytes > server.max_header_size) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    return 0;
  }
  // Past a limit the head is answered 431 (HPACK can expand a small frame into a
  // large list; the fields past the limit are counted, never stored).
  if (s->header_bytes > server.max_header_size || s->field_count > server.max_header_fields) {
    s->fields.clear();
    return 0;
  }
  if (name == ":method") {
    s->method = value;
  } else if (name == ":path") {
    s->path = value;
  } else if (name == ":authority") {
    s->authority = value;
  } else if (name.starts_with(':')) {
    // :scheme; nghttp2 has checked the set of pseudo-fields (RFC 9113 §8.3.1).
  } else {
    if (name == "content-length") s->has_content_length = true;
    s->fields.emplace_back(name, value);
  }
  return 0;
}

int Connection::on_frame_recv(const nghttp2_frame& frame) {
  const bool end = (frame.hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
  switch (frame.hd.type) {
    case NGHTTP2_HEADERS: {
      auto s = find(frame.hd.stream_id);
      if (!s) return 0;
      if (frame.headers.cat == NGHTTP2_HCAT_REQUEST) {
        s->has_body = !end;
        starting_.push_back(s);
      }
      if (end) {
        s->body_end = true;
        s->body_ready.notify();
      }
      return 0;
    }
    case NGHTTP2_DATA:
      if (end) {
        if (auto s = find(frame.hd.stream_id)) {
          s->body_end = true;
          s->body_ready.notify();
        }
      }
      return 0;
    default:
      return 0;
  }
}

int Connection::on_frame_send(const nghttp2_frame& frame) {
  if (frame.hd.type == NGHTTP2_GOAWAY && frame.goaway.error_code != NGHTTP2_NO_ERROR) {
    rt_.metrics.count_http2_goaway(frame.goaway.error_code);
  }
  // RFC 9113 §8.1: a complete answer may come before the whole request (a 400, a
  // 413). The rest of the body is then taken and dropped for up to 2 s, as an
  // HTTP/1.1 lingering close does, before RST_STREAM NO_ERROR tells the client to
  // stop: clients (curl 7.88) report a reset that comes while they still send as a
  // failure, answer or not.
  if ((frame.hd.type == NGHTTP2_DATA || frame.hd.type == NGHTTP2_HEADERS) &&
      (frame.hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
    if (auto s = find(frame.hd.stream_id); s && !s->body_end) {
      s->answered_at = std::chrono::steady_clock::now();
    }
  }
  return 0;
}

void Connection::reset_stalled_streams(std::chrono::steady_clock::time_point now) {
  const auto send_timeout = rt_.settings()->config.server.read_timeout;
  for (const auto& [id, s] : streams_) {
    // A client that opens no window for an answer (a zero window held forever)
    // gets the stream reset after server.read_timeout without progress, as an
    // HTTP/1.1 client that stops reading gets its connection closed.
    if (s->answered && s->out.size() > s->out_at && now - s->sent_at > send_timeout) {
      spdlog::info("HTTP/2 client {}: stream {} took no answer bytes for {} ms: reset",
                   conn_->peer_ip, id,
                   std::chrono::duration_cast<std::chrono::milliseconds>(send_timeout).count());
      nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
      s->sent_at = now;
      wake_writer();
      continue;
    }
    if (!s->body_end && s->answered_at != std::chrono::steady_clock::time_point{} &&
        now - s->answered_at > std::chrono::seconds{2}) {
      nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_NO_ERROR);
      s->answered_at = {};
      wake_writer();
    }
  }
}

int Connection::on_data(std::int32_t id, const std::uint8_t* data, std::size_t size) {
  // The connection's window reopens at once; each stream's only as its bytes move on.
  nghttp2_session_consume_connection(session_, size);
  auto s = find(id);
  if (!s || s->sink_gone || (s->answered && !s->pipe)) {
    nghttp2_session_consume_stream(session_, id, size);
    return 0;
  }
  s->body.append(reinterpret_cast<const char*>(data), size);
  s->body_ready.notify();
  return 0;
}

// A stream is over: the bridge's coroutines wake and stop, and the session serving
// it sees its client go, as with an HTTP/1.1 disconnect.
void Connection::end(Stream& s) {
  s.closed = true;
  s.body.clear();
  if (s.pipe) {
    beast::error_code ec;
    s.pipe->close(ec);
  }
  s.body_ready.notify();
  s.room.notify();
}

int Connection::on_stream_close(std::int32_t id, std::uint32_t code) {
  const auto it = streams_.find(id);
  if (it == streams_.end()) return 0;
  auto s = it->second;
  streams_.erase(it);
  end(*s);
  note_quiet();
  if (code != NGHTTP2_NO_ERROR)
    spdlog::debug("HTTP/2 stream {} closed: {}", id, nghttp2_http2_strerror(code));
  return 0;
}

ssize_t Connection::read_answer(std::int32_t id, std::uint8_t* buf, std::size_t size,
                                std::uint32_t* flags) {
  auto s = find(id);
  if (!s) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  const std::size_t ready = s->out.size() - s->out_at;
  if (ready == 0) {
    if (s->out_end) {
      end_answer(*s, flags);
      return 0;
    }
    s->out_deferred = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  const std::size_t n = std::min(size, ready);
  std::memcpy(buf, s->out.data() + s->out_at, n);
  s->out_at += n;
  s->sent_at = std::chrono::steady_clock::now();
  if (s->out_at == s->out.size()) {
    s->out.clear();
    s->out_at = 0;
    if (s->out_end) end_answer(*s, flags);
  }
  s->room.notify();
  return static_cast<ssize_t>(n);
}

void Connection::end_answer(Stream& s, std::uint32_t* flags) {
  *flags |= NGHTTP2_DATA_FLAG_EOF;
  if (s.trailers.empty()) return;
  // RFC 9113 §8.1: trailers are a HEADERS frame that ends the stream after the DATA.
  *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
  std::vector<std::pair<std::string, std::string>> owned;
  owned.reserve(s.trailers.size());
  for (const auto& [name, value] : s.trailers) owned.emplace_back(lower_case(name), value);
  const auto nva = nv_list(owned);
  nghttp2_submit_trailer(session_, s.id, nva.data(), nva.size());
}

void Connection::submit_head(Stream& s, unsigned status, const Fields& fields, bool final,
                             bool has_body) {
  if (s.closed) return;
  std::vector<std::pair<std::string, std::string>> owned;
  owned.reserve(16);
  owned.emplace_back(":status", std::to_string(status));
  const auto connection = fields[bhttp::field::connection];
  for (const auto& f : fields) {
    if (connection_specific(f.name_string(), connection)) continue;
    owned.emplace_back(lower_case(f.name_string()), std::string(f.value()));
  }
  const auto nva = nv_list(owned);
  if (!final) {
    nghttp2_submit_headers(session_, NGHTTP2_FLAG_NONE, s.id, nullptr, nva.data(), nva.size(),
                           nullptr);
  } else {
    nghttp2_data_provider body{};
    body.read_callback = answer_source_cb;
    nghttp2_submit_response(session_, s.id, nva.data(), nva.size(), has_body ? &body : nullptr);
    s.answered = true;
    s.sent_at = std::chrono::steady_clock::now();
  }
  wake_writer();
}

void Connection::respond(Stream& s, const StringResponse& response) {
  s.out = response.body();
  s.out_end = true;
  submit_head(s, response.result_int(), response.base(), true, !s.out.empty());
}

void Connection::refuse(Stream& s, const ProxyError& error) {
  respond(s, s.grpc ? grpc_refusal(error, 11, true) : problem_response(error, 11, true));
}

void Connection::answer_more(Stream& s) {
  if (s.closed) return;
  if (s.out_deferred) {
    s.out_deferred = false;
    nghttp2_session_resume_data(session_, s.id);
  }
  wake_writer();
}

void Connection::consumed(Stream& s, std::size_t size) {
  if (s.closed || size == 0) return;
  nghttp2_session_consume_stream(session_, s.id, size);
  wake_writer();
}

void Connection::reset(Stream& s, std::uint32_t code) {
  if (s.closed) return;
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, s.id, code);
  wake_writer();
}

template <class Task>
void Connection::spawn(Task task) {
  ++tasks_;
  asio::co_spawn(conn_->stream.get_executor(), std::move(task),
                 [self = shared_from_this()](const std::exception_ptr& e) {
                   log_exception(e);
                   if (--self->tasks_ == 0) self->tasks_done_.notify();
                   self->note_quiet();
                 });
}

// Streams whose head completed inside nghttp2_session_mem_recv start here, after it
// returns: a coroutine started inside a callback could re-enter the session.
void Connection::start_streams() {
  auto starting = std::move(starting_);
  starting_.clear();
  for (auto& s : starting) {
    if (!s->closed) start(s);
  }
}

void Connection::start(const std::shared_ptr<Stream>& s) {
  const auto& server = rt_.settings()->config.server;
  if (s->header_bytes > server.max_header_size || s->field_count > server.max_header_fields) {
    const std::string what = s->field_count > server.max_header_fields
                                 ? "more than " + std::to_string(server.max_header_fields) +
                                       " header fields (server.max_header_fields)"
                                 : "the header list exceeds server.max_header_size (" +
                                       std::to_string(server.max_header_size) + " bytes)";
    rt_.metrics.count_request("-", ops::Outcome::bad_request);
    refuse(*s, {ProblemKind::header_too_large, what, std::nullopt, std::nullopt});
    return;
  }
  if (s->method == "CONNECT") {
    s->invalid = "CONNECT is not served";
  } else if (s->authority.empty()) {
    for (const auto& [name, value] : s->fields) {
      if (name == "host") s->authority = value;
    }
    if (s->authority.empty()) s->invalid = "the request has neither :authority nor Host";
  } else {
    for (const auto& [name, value] : s->fields) {
      // RFC 9113 §8.3.1: a Host that differs from :authority makes the request malformed.
      if (name == "host" && value != s->authority) s->invalid = "Host differs from :authority";
    }
  }
  if (!s->invalid.empty()) {
    rt_.metrics.count_request("-", ops::Outcome::bad_request);
    refuse(*s, {ProblemKind::malformed_request, s->invalid, std::nullopt, std::nullopt});
    return;
  }
  if (bridged_.size() >= kMaxBridged) {
    spdlog::warn("HTTP/2 client {} keeps {} requests running (streams reset early?): closing",
                 conn_->peer_ip, bridged_.size());
    nghttp2_session_terminate_session(session_, NGHTTP2_ENHANCE_YOUR_CALM);
    wake_writer();
    return;
  }
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0) {
    spdlog::warn("HTTP/2 stream {}: socketpair failed: {}", s->id, std::strerror(errno));
    rt_.metrics.count_request("-", ops::Outcome::bad_request);
    refuse(*s, {ProblemKind::internal, "out of file descriptors", 1, std::nullopt});
    return;
  }
  const auto ex = conn_->stream.get_executor();
  beast::error_code ec;
  tcp::socket near(ex);
  near.assign(tcp::v4(), fds[0], ec);
  s->pipe.emplace(ex);
  s->pipe->assign(asio::local::stream_protocol(), fds[1], ec);
  auto session = std::make_shared<ClientConnection>(std::move(near), nullptr);
  session->secure = conn_->secure;
  session->h2_stream = true;
  session->peer_ip = conn_->peer_ip;
  session->peer_subject = conn_->peer_subject;
  auto self = shared_from_this();
  spawn(serve_connection(std::move(session), rt_, bridged_));
  spawn(feed(self, s));
  spawn(answer(self, s));
}

asio::awaitable<void> Connection::read_loop() {
  auto& buffer = conn_->buffer;
  for (;;) {
    if (buffer.size() > 0 && !discarding_) {
      const auto* data = static_cast<const std::uint8_t*>(buffer.data().data());
      const auto used = nghttp2_session_mem_recv(session_, data, buffer.size());
      start_streams();
      wake_writer();
      if (used < 0) {
        // A connection error nghttp2 did not answer itself (a flood of SETTINGS or
        // PING ACKs, too many CONTINUATIONs, a broken preface): end the session with
        // a GOAWAY, which the writer sends before it stops.
        const auto error = static_cast<int>(used);
        spdlog::info("HTTP/2 client {}: {}; closing", conn_->peer_ip, nghttp2_strerror(error));
        const bool flood = error == NGHTTP2_ERR_FLOODED || error == NGHTTP2_ERR_TOO_MANY_SETTINGS ||
                           error == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS;
        if (nghttp2_session_terminate_session(
                session_, flood ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR) != 0) {
          closing_ = true;
        }
        discarding_ = true;
      }
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
  }
  reading_ = false;
  linger_.cancel();
}

void Connection::finish_after_eof() {
  for (const auto& [id, s] : streams_) {
    if (!s->body_end) nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
  }
  if (!goaway_) {
    goaway_ = true;
    nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                          nullptr, 0);
  }
  wake_writer();
}

asio::awaitable<void> Connection::write_loop() {
  std::string batch;
  for (;;) {
    batch.clear();
    while (!closing_ && batch.size() < kWriteBatch) {
      const std::uint8_t* data = nullptr;
      const auto n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) {
        closing_ = true;
        break;
      }
      if (n == 0) break;
      batch.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
    }
    if (!batch.empty() && !closing_) {
      write_since_ = std::chrono::steady_clock::now();
      auto [ec, n] = co_await asio::async_write(conn_->stream, asio::buffer(batch), use_nothrow);
      write_since_ = {};
      if (ec) closing_ = true;
      continue;
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
    const auto& server = rt_.settings()->config.server;
    const auto now = std::chrono::steady_clock::now();
    reset_stalled_streams(now);
    const bool quiet =
        streams_.empty() && bridged_.size() == 0 && now - quiet_since_ > server.idle_timeout;
    if (!goaway_ && (rt_.draining || quiet)) {
      // RFC 9113 §6.8: streams up to the last one processed still complete.
      goaway_ = true;
      nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                            nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                            nullptr, 0);
      wake_writer();
    }
    // A client that stops reading holds a write open; as with HTTP/1.1, read_timeout.
    if (write_since_ != std::chrono::steady_clock::time_point{} &&
        now - write_since_ > server.read_timeout) {
      spdlog::info("HTTP/2 client {} stopped reading: closing", conn_->peer_ip);
      closing_ = true;
      beast::error_code ec;
      conn_->stream.socket().close(ec);
    }
  }
}

asio::awaitable<void> Connection::run() {
  const auto& server = rt_.settings()->config.server;
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
  spawn(read_loop());
  spawn(watchdog());
  co_await write_loop();
  finished_ = true;
  conn_->idle = false;
  discarding_ = true;
  beast::error_code ec;
  conn_->stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (reading_ && !closing_) {
    linger_.expires_after(std::chrono::seconds{2});
    co_await linger_.async_wait(use_nothrow);
  }
  conn_->stream.socket().close(ec);
  tick_.cancel();
  // Streams still open end with the connection; their sessions finish what they
  // started (an exchange under way completes and is recorded), then stop.
  for (auto& [id, s] : streams_) end(*s);
  streams_.clear();
  while (tasks_ > 0) co_await tasks_done_.wait();
}

}  // namespace h2

asio::awaitable<void> serve_h2(std::shared_ptr<ClientConnection> conn, Runtime& rt) {
  rt.metrics.count_http2_connection();
  auto c = std::make_shared<h2::Connection>(std::move(conn), rt);
  co_await c->run();
}

namespace {

int select_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in,
                unsigned int inlen, void* arg) {
  const auto* rt = static_cast<const Runtime*>(arg);
  static constexpr unsigned char kH2[] = {2, 'h', '2'};
  static constexpr unsigned char kH1[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  unsigned char* chosen = nullptr;
  if (rt->settings()->config.server.http2 &&
      SSL_select_next_proto(&chosen, outlen, kH2, sizeof kH2, in, inlen) ==
          OPENSSL_NPN_NEGOTIATED) {
    *out = chosen;
    return SSL_TLSEXT_ERR_OK;
  }
  if (SSL_select_next_proto(&chosen, outlen, kH1, sizeof kH1, in, inlen) ==
      OPENSSL_NPN_NEGOTIATED) {
    *out = chosen;
    return SSL_TLSEXT_ERR_OK;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

}  // namespace

void offer_h2(ssl::context& tls, Runtime& rt) {
  SSL_CTX_set_alpn_select_cb(tls.native_handle(), select_alpn, &rt);
}

bool alpn_chose_h2(Stream& stream) {
  if (stream.tls() == nullptr) return false;
  const unsigned char* data = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(stream.tls()->native_handle(), &data, &len);
  return len == 2 && std::memcmp(data, "h2", 2) == 0;
}

}  // namespace idemproxy::http
