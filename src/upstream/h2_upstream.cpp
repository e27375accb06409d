#include "upstream/h2_upstream.hpp"

#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/local/stream_protocol.hpp>
#include <cstring>
#include <deque>
#include <sstream>

#include "http/fields.hpp"
#include "http/signal.hpp"
#include "http/tls.hpp"
#include "idemproxy/engine/grpc_status.hpp"
#include "proxy/problem.hpp"

namespace idemproxy::http {
namespace h2 {

using Pipe = asio::local::stream_protocol::socket;

namespace {

// Per-stream flow-control window (SETTINGS_INITIAL_WINDOW_SIZE) toward the upstream.
constexpr std::uint32_t kStreamWindow = 128 * 1024;
// Request bytes a stream holds here before the bridge stops reading the request.
constexpr std::size_t kOutHighWater = std::size_t{256} * 1024;

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
  std::string out;
  http::lower_case(name, out);
  return out;
}

void append_chunk(std::string& to, std::string_view data) {
  char size[20];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  to.append(size, static_cast<std::size_t>(n));
  to.append(data);
  to.append("\r\n");
}

constexpr std::int32_t kConnectionWindow = 1 << 20;
constexpr std::size_t kWriteBatch = std::size_t{64} * 1024;
constexpr std::size_t kMaxHeadBytes = std::size_t{1} << 20;
// Request bodies up to this size are kept while their stream runs, so a stream the
// upstream refuses unprocessed (GOAWAY, REFUSED_STREAM) can go again.
constexpr std::size_t kResendBody = std::size_t{1} << 20;

using Fields = std::vector<std::pair<std::string, std::string>>;

/// Wakes every waiting coroutine once it is opened; opening is for good.
class Latch {
 public:
  explicit Latch(const asio::any_io_executor& ex)
      : timer_(ex, std::chrono::steady_clock::time_point::max()) {}
  void open() {
    open_ = true;
    timer_.cancel();
  }
  asio::awaitable<void> wait() {
    while (!open_) co_await timer_.async_wait(use_nothrow);
  }

 private:
  asio::steady_timer timer_;
  bool open_ = false;
};

// Answers a request that never reached the upstream (no connection could carry
// it, or the upstream refused its stream unprocessed, RFC 9113 §8.7): a 502 the
// session takes for the upstream's, so the claim is released and a retry runs it.
asio::awaitable<void> not_sent(Pipe& pipe, const std::string& why) {
  spdlog::info("upstream HTTP/2: a request was not sent: {}", why);
  auto res = problem_response({ProblemKind::upstream_unreachable,
                               "the request was not sent: " + why, std::nullopt, std::nullopt});
  res.keep_alive(false);
  res.prepare_payload();
  std::ostringstream bytes;
  bytes << res;
  const std::string out = bytes.str();
  co_await asio::async_write(pipe, asio::buffer(out), use_nothrow);
}

}  // namespace

/// One request on its way up and its answer on its way back.
struct Call {
  explicit Call(const asio::any_io_executor& ex) : room(ex), news(ex) {}

  std::int32_t id = -1;
  std::string out;  // request body bytes not yet taken by nghttp2
  std::size_t out_at = 0;
  bool out_end = false;
  bool out_deferred = false;
  Signal room;  // nghttp2 took request bytes, or the stream closed

  Fields block;  // the header block being received
  std::size_t block_bytes = 0;
  std::deque<std::pair<unsigned, Fields>> interim;  // 1xx answers not yet passed on
  std::optional<std::pair<unsigned, Fields>> head;  // the final answer's head
  bool head_taken = false;
  std::string in;  // answer body bytes not yet written to the session
  bool in_end = false;
  Fields trailers;
  bool closed = false;
  std::uint32_t close_code = 0;
  Signal news;  // a head, body bytes, the end, or the close
};

class UpstreamLink;

/// A request as sent on a stream: its fields, and its body while it is small enough
/// to send again (kResendBody).
struct Outgoing {
  Fields fields;
  std::string body;
  bool resendable = true;
  bool head_request = false;
  bool keep_alive = true;
  /// The client takes trailers (te: trailers; every gRPC call): the answer goes on
  /// chunked even when it has a content-length, which cannot carry them.
  bool trailers = false;
};

/// The upstream's HTTP/2 connections, shared by H2Upstream and by the links, which
/// hand a request to another link when theirs can no longer carry it.
struct Registry : std::enable_shared_from_this<Registry> {
  Registry(asio::any_io_executor executor, const config::UpstreamConfig& upstream,
           ssl::context* context, bool per_link_strands)
      : ex(std::move(executor)), config(upstream), tls(context), strands(per_link_strands) {}

  asio::any_io_executor ex;
  const config::UpstreamConfig& config;
  ssl::context* tls;
  bool strands;
  std::mutex mu;
  std::vector<std::shared_ptr<UpstreamLink>> links;

  /// A link with room for another stream (upstream.http2_max_streams), or a new one
  /// (on `established`'s executor when given); its bridge count already includes
  /// the caller.
  std::shared_ptr<UpstreamLink> pick(const http::Stream* established);
};

/// One HTTP/2 connection to the upstream and the bridges that use it. Everything
/// runs on its executor (a strand with several I/O threads).
class UpstreamLink : public std::enable_shared_from_this<UpstreamLink> {
 public:
  UpstreamLink(asio::any_io_executor ex, const config::UpstreamConfig& config, ssl::context* tls,
               std::weak_ptr<Registry> registry)
      : ex_(std::move(ex)),
        config_(config),
        tls_(tls),
        registry_(std::move(registry)),
        ready_(ex_),
        writable_(ex_) {}
  ~UpstreamLink() {
    if (session_ != nullptr) nghttp2_session_del(session_);
  }
  UpstreamLink(const UpstreamLink&) = delete;
  UpstreamLink& operator=(const UpstreamLink&) = delete;

  const asio::any_io_executor& executor() const { return ex_; }
  /// No new bridges: the connection failed, or the upstream sent GOAWAY.
  bool closed_to_new() const { return closed_to_new_.load(); }
  std::atomic<std::size_t> bridges{0};

  asio::awaitable<std::pair<beast::error_code, std::optional<tcp::socket>>> open_bridge(
      asio::any_io_executor near_ex, std::unique_ptr<http::Stream> established);
  /// Sends again, on this connection, a request another refused unprocessed.
  asio::awaitable<void> resend(Pipe& pipe, Outgoing& request);
  /// Carries one request read by another link's bridge (that link is closing), then
  /// asks its session to close the socket pair.
  asio::awaitable<void> carry(Pipe& pipe, beast::flat_buffer& buffer,
                              RequestParser<bhttp::buffer_body>& parser);

  // nghttp2's callbacks.
  int on_header(const nghttp2_frame& frame, std::string_view name, std::string_view value);
  int on_frame_recv(const nghttp2_frame& frame);
  int on_data(std::int32_t id, const std::uint8_t* data, std::size_t size);
  int on_stream_close(std::int32_t id, std::uint32_t code);
  ssize_t read_body(std::int32_t id, std::uint8_t* buf, std::size_t size, std::uint32_t* flags);

 private:
  /// Connects (or adopts `established`) once; every caller waits for the outcome.
  asio::awaitable<beast::error_code> ready(std::unique_ptr<http::Stream> established);
  asio::awaitable<beast::error_code> connect();
  void start_session();
  asio::awaitable<void> read_loop();
  asio::awaitable<void> write_loop();
  asio::awaitable<void> bridge(std::shared_ptr<Pipe> pipe);
  asio::awaitable<bool> exchange(Pipe& pipe, beast::flat_buffer& buffer,
                                 RequestParser<bhttp::buffer_body>& parser, bool last);
  /// Submits a request's HEADERS (its body, if any, comes from the Call).
  std::shared_ptr<Call> start_call(const Outgoing& request, bool has_body);
  /// Writes a call's answer to the session as HTTP/1.1; false: the pair must close.
  asio::awaitable<bool> relay_answer(Pipe& pipe, std::shared_ptr<Call> call, Outgoing& request);
  void fail(const char* why);
  std::shared_ptr<Call> find(std::int32_t id) const {
    const auto it = calls_.find(id);
    return it == calls_.end() ? nullptr : it->second;
  }
  void wake_writer() { writable_.notify(); }

  asio::any_io_executor ex_;
  const config::UpstreamConfig& config_;
  ssl::context* tls_;
  std::weak_ptr<Registry> registry_;
  std::unique_ptr<http::Stream> stream_;
  nghttp2_session* session_ = nullptr;
  enum class State { fresh, connecting, ready, failed } state_ = State::fresh;
  beast::error_code connect_error_;
  Latch ready_;
  Signal writable_;
  std::atomic<bool> closed_to_new_{false};
  std::map<std::int32_t, std::shared_ptr<Call>> calls_;
};

namespace {

UpstreamLink& link_of(void* user) { return *static_cast<UpstreamLink*>(user); }

int header_cb(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
              std::size_t namelen, const std::uint8_t* value, std::size_t valuelen, std::uint8_t,
              void* user) {
  return link_of(user).on_header(*frame, {reinterpret_cast<const char*>(name), namelen},
                                 {reinterpret_cast<const char*>(value), valuelen});
}

int frame_recv_cb(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  return link_of(user).on_frame_recv(*frame);
}

int data_cb(nghttp2_session*, std::uint8_t, std::int32_t id, const std::uint8_t* data,
            std::size_t size, void* user) {
  return link_of(user).on_data(id, data, size);
}

int stream_close_cb(nghttp2_session*, std::int32_t id, std::uint32_t code, void* user) {
  return link_of(user).on_stream_close(id, code);
}

ssize_t body_source_cb(nghttp2_session*, std::int32_t id, std::uint8_t* buf, std::size_t size,
                       std::uint32_t* flags, nghttp2_data_source*, void* user) {
  return link_of(user).read_body(id, buf, size, flags);
}

}  // namespace

int UpstreamLink::on_header(const nghttp2_frame& frame, std::string_view name,
                            std::string_view value) {
  auto call = find(frame.hd.stream_id);
  if (!call) return 0;
  call->block_bytes += name.size() + value.size() + 32;
  if (call->block_bytes > kMaxHeadBytes) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  call->block.emplace_back(name, value);
  return 0;
}

int UpstreamLink::on_frame_recv(const nghttp2_frame& frame) {
  if (frame.hd.type == NGHTTP2_GOAWAY) {
    // RFC 9113 §6.8: streams up to last_stream_id complete; no new ones start here.
    closed_to_new_ = true;
    return 0;
  }
  auto call = find(frame.hd.stream_id);
  if (!call) return 0;
  const bool end = (frame.hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
  if (frame.hd.type == NGHTTP2_HEADERS) {
    Fields block = std::move(call->block);
    call->block.clear();
    call->block_bytes = 0;
    unsigned status = 0;
    if (!block.empty() && block.front().first == ":status") {
      // nghttp2 has checked that :status is three digits (RFC 9113 §8.3.2).
      status = static_cast<unsigned>(std::stoi(block.front().second));
      block.erase(block.begin());
    }
    if (status != 0 && status / 100 == 1) {
      call->interim.emplace_back(status, std::move(block));
    } else if (status != 0) {
      call->head.emplace(status, std::move(block));
    } else {
      call->trailers = std::move(block);
    }
  }
  if (end) call->in_end = true;
  call->news.notify();
  return 0;
}

int UpstreamLink::on_data(std::int32_t id, const std::uint8_t* data, std::size_t size) {
  // The connection's window reopens at once; a stream's as the session takes its bytes.
  nghttp2_session_consume_connection(session_, size);
  auto call = find(id);
  if (!call) {
    nghttp2_session_consume_stream(session_, id, size);
    return 0;
  }
  call->in.append(reinterpret_cast<const char*>(data), size);
  call->news.notify();
  return 0;
}

int UpstreamLink::on_stream_close(std::int32_t id, std::uint32_t code) {
  const auto it = calls_.find(id);
  if (it == calls_.end()) return 0;
  auto call = it->second;
  calls_.erase(it);
  call->closed = true;
  call->close_code = code;
  call->news.notify();
  call->room.notify();
  return 0;
}

ssize_t UpstreamLink::read_body(std::int32_t id, std::uint8_t* buf, std::size_t size,
                                std::uint32_t* flags) {
  auto call = find(id);
  if (!call) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  const std::size_t ready = call->out.size() - call->out_at;
  if (ready == 0) {
    if (call->out_end) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      return 0;
    }
    call->out_deferred = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  const std::size_t n = std::min(size, ready);
  std::memcpy(buf, call->out.data() + call->out_at, n);
  call->out_at += n;
  if (call->out_at == call->out.size()) {
    call->out.clear();
    call->out_at = 0;
    if (call->out_end) *flags |= NGHTTP2_DATA_FLAG_EOF;
  }
  call->room.notify();
  return static_cast<ssize_t>(n);
}

asio::awaitable<beast::error_code> UpstreamLink::connect() {
  stream_ = tls_ != nullptr ? std::make_unique<http::Stream>(ex_, *tls_)
                            : std::make_unique<http::Stream>(ex_);
  prepare_upstream_tls(*stream_, config_);
  tcp::resolver resolver(ex_);
  auto [rec, endpoints] = co_await resolver.async_resolve(config_.host, config_.port, use_nothrow);
  if (rec) co_return rec;
  stream_->expires_after(config_.connect_timeout);
  auto [cec, ep] = co_await stream_->transport().async_connect(endpoints, use_nothrow);
  if (cec) co_return cec;
  beast::error_code ignored;
  stream_->socket().set_option(tcp::no_delay(true), ignored);
  if (auto* tls = stream_->tls()) {
    auto [hec] = co_await tls->async_handshake(ssl::stream_base::client, use_nothrow);
    if (hec) co_return hec;
    if (!alpn_chose_h2(*stream_)) {
      spdlog::warn("upstream {}: ALPN did not choose h2 (upstream.protocol h2)", config_.url);
      co_return asio::error::operation_not_supported;
    }
  }
  stream_->expires_never();
  co_return beast::error_code{};
}

void UpstreamLink::start_session() {
  nghttp2_session_callbacks* cbs = nullptr;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_header_callback(cbs, header_cb);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, frame_recv_cb);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, data_cb);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, stream_close_cb);
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  // An answer's window reopens as the session takes its bytes: a slow client holds
  // back its own stream only, and never fills this process's memory.
  nghttp2_option_set_no_auto_window_update(opt, 1);
  nghttp2_option_set_max_outbound_ack(opt, 1000);
  nghttp2_session_client_new2(&session_, cbs, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, kStreamWindow},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kConnectionWindow);
}

// The connection is gone: its streams fail. Its bridges stay: a request that comes
// on one goes by another connection (bridge()), so none is lost to the race
// between the pool's reuse of a socket pair and this.
void UpstreamLink::fail(const char* why) {
  if (state_ == State::failed) return;
  state_ = State::failed;
  closed_to_new_ = true;
  spdlog::info("upstream HTTP/2 connection to {} ended: {}", config_.url, why);
  auto calls = std::move(calls_);
  calls_.clear();
  for (auto& [id, call] : calls) {
    call->closed = true;
    call->close_code = NGHTTP2_CANCEL;
    call->news.notify();
    call->room.notify();
  }
  beast::error_code ec;
  if (stream_) stream_->socket().close(ec);
  wake_writer();
}

asio::awaitable<void> UpstreamLink::read_loop() {
  beast::flat_buffer buffer;
  while (state_ == State::ready) {
    auto [ec, n] =
        co_await stream_->async_read_some(buffer.prepare(std::size_t{16} * 1024), use_nothrow);
    if (ec) {
      fail(ec == asio::error::eof ? "the upstream closed it" : "read failed");
      co_return;
    }
    buffer.commit(n);
    const auto used = nghttp2_session_mem_recv(
        session_, static_cast<const std::uint8_t*>(buffer.data().data()), buffer.size());
    buffer.consume(buffer.size());
    if (used < 0) {
      nghttp2_session_terminate_session(session_, NGHTTP2_PROTOCOL_ERROR);
      wake_writer();
      fail(nghttp2_strerror(static_cast<int>(used)));
      co_return;
    }
    wake_writer();
  }
}

asio::awaitable<void> UpstreamLink::write_loop() {
  std::string batch;
  while (state_ == State::ready) {
    batch.clear();
    while (batch.size() < kWriteBatch) {
      const std::uint8_t* data = nullptr;
      const auto n = nghttp2_session_mem_send(session_, &data);
      if (n <= 0) break;
      batch.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
    }
    if (!batch.empty()) {
      auto [ec, n] = co_await asio::async_write(*stream_, asio::buffer(batch), use_nothrow);
      if (ec) fail("write failed");
      continue;
    }
    if (nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0) {
      fail("the session ended");
      co_return;
    }
    co_await writable_.wait();
  }
}

asio::awaitable<beast::error_code> UpstreamLink::ready(std::unique_ptr<http::Stream> established) {
  if (state_ == State::fresh) {
    state_ = State::connecting;
    if (established) {
      stream_ = std::move(established);
    } else {
      connect_error_ = co_await connect();
    }
    if (connect_error_) {
      state_ = State::failed;
      closed_to_new_ = true;
    } else {
      state_ = State::ready;
      start_session();
      auto self = shared_from_this();
      asio::co_spawn(
          ex_, [self]() -> asio::awaitable<void> { co_await self->read_loop(); }, asio::detached);
      asio::co_spawn(
          ex_, [self]() -> asio::awaitable<void> { co_await self->write_loop(); }, asio::detached);
    }
    ready_.open();
  }
  co_await ready_.wait();
  if (state_ == State::ready) co_return beast::error_code{};
  co_return connect_error_ ? connect_error_ : beast::error_code(asio::error::connection_aborted);
}

asio::awaitable<std::pair<beast::error_code, std::optional<tcp::socket>>> UpstreamLink::open_bridge(
    asio::any_io_executor near_ex, std::unique_ptr<http::Stream> established) {
  using Result = std::pair<beast::error_code, std::optional<tcp::socket>>;
  if (auto ec = co_await ready(std::move(established))) co_return Result{ec, std::nullopt};
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0) {
    co_return Result{beast::error_code(errno, boost::system::system_category()), std::nullopt};
  }
  beast::error_code ec;
  tcp::socket near(near_ex);
  near.assign(tcp::v4(), fds[0], ec);
  auto pipe = std::make_shared<Pipe>(ex_);
  pipe->assign(asio::local::stream_protocol(), fds[1], ec);
  ++bridges;
  asio::co_spawn(
      ex_,
      [self = shared_from_this(), pipe]() -> asio::awaitable<void> { co_await self->bridge(pipe); },
      [self = shared_from_this()](const std::exception_ptr& e) {
        --self->bridges;
        if (e) {
          try {
            std::rethrow_exception(e);
          } catch (const std::exception& x) {
            spdlog::error("upstream HTTP/2 bridge: {}", x.what());
          }
        }
      });
  co_return Result{beast::error_code{}, std::move(near)};
}

// Serves one socket pair: each HTTP/1.1 request read from it becomes a stream, and
// its answer is written back, until the pool closes the pair or a request asks to.
asio::awaitable<void> UpstreamLink::bridge(std::shared_ptr<Pipe> pipe) {
  beast::flat_buffer buffer;
  for (;;) {
    RequestParser<bhttp::buffer_body> parser;
    parser.header_limit(kMaxHeadBytes);
    parser.body_limit(boost::none);
    auto [ec, n] = co_await bhttp::async_read_header(*pipe, buffer, parser, use_nothrow);
    if (ec) break;
    if (state_ == State::ready && !closed_to_new_) {
      if (!co_await exchange(*pipe, buffer, parser, false)) break;
      continue;
    }
    // This connection takes no new streams (the upstream sent GOAWAY, or it is
    // gone): another carries the request, and the socket pair ends after it.
    auto registry = registry_.lock();
    auto other = registry ? registry->pick(nullptr) : nullptr;
    if (!other) {
      co_await not_sent(*pipe, "the proxy is stopping");
      break;
    }
    co_await asio::co_spawn(other->executor(), other->carry(*pipe, buffer, parser),
                            asio::use_awaitable);
    --other->bridges;
    break;
  }
  beast::error_code ec;
  pipe->close(ec);
}

asio::awaitable<void> UpstreamLink::carry(Pipe& pipe, beast::flat_buffer& buffer,
                                          RequestParser<bhttp::buffer_body>& parser) {
  if (auto ec = co_await ready(nullptr)) {
    co_await not_sent(pipe, "cannot connect to the upstream: " + ec.message());
    co_return;
  }
  co_await exchange(pipe, buffer, parser, true);
}

asio::awaitable<bool> UpstreamLink::exchange(Pipe& pipe, beast::flat_buffer& buffer,
                                             RequestParser<bhttp::buffer_body>& parser, bool last) {
  auto& req = parser.get();
  Outgoing request;
  request.head_request = req.method() == bhttp::verb::head;
  request.keep_alive = req.keep_alive() && !last;
  // RFC 9113 §8.3.1: the request line and Host become pseudo-header fields.
  Fields& owned = request.fields;
  owned.reserve(16);
  owned.emplace_back(":method", std::string(req.method_string()));
  owned.emplace_back(":scheme", tls_ != nullptr ? "https" : "http");
  owned.emplace_back(":authority", std::string(req[bhttp::field::host]));
  owned.emplace_back(":path", std::string(req.target()));
  // gRPC servers require "te: trailers" (the gRPC HTTP/2 protocol); an HTTP/1.1 hop
  // drops it as hop-by-hop, so it is restored here, as nginx's grpc_pass does.
  const auto content_type = req[bhttp::field::content_type];
  request.trailers = engine::is_grpc_content_type(content_type);
  if (request.trailers) owned.emplace_back("te", "trailers");
  const auto connection = req[bhttp::field::connection];
  for (const auto& f : req.base()) {
    const auto name = f.name_string();
    if (connection_specific(name, connection) || beast::iequals(name, "host")) continue;
    // te is connection-specific too, but "trailers" may (and for gRPC must) pass.
    if (beast::iequals(name, "te") &&
        (!beast::iequals(f.value(), "trailers") || engine::is_grpc_content_type(content_type))) {
      continue;
    }
    if (beast::iequals(name, "te")) request.trailers = true;
    owned.emplace_back(lower_case(name), std::string(f.value()));
  }
  auto call = start_call(request, !parser.is_done());
  if (!call) {
    co_await not_sent(pipe, "cannot start a stream");
    co_return false;
  }

  // The request body, as the session writes it, within the stream's window. A copy
  // is kept, up to kResendBody, in case the stream is refused unprocessed.
  std::array<char, std::size_t{16} * 1024> scratch;
  while (!parser.is_done() && !call->closed) {
    while (!call->closed && call->out.size() - call->out_at > kOutHighWater) {
      co_await call->room.wait();
    }
    if (call->closed) break;
    req.body().data = scratch.data();
    req.body().size = scratch.size();
    auto [rec, got] = co_await bhttp::async_read_some(pipe, buffer, parser, use_nothrow);
    if (rec && rec != bhttp::error::need_buffer) {
      if (!call->closed)
        nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, call->id, NGHTTP2_CANCEL);
      wake_writer();
      co_return false;
    }
    const std::string_view piece(scratch.data(), scratch.size() - req.body().size);
    call->out.append(piece);
    if (request.resendable && request.body.size() + piece.size() <= kResendBody) {
      request.body.append(piece);
    } else {
      request.resendable = false;
      request.body.clear();
    }
    if (parser.is_done()) call->out_end = true;
    if (call->out_deferred && !call->closed) {
      call->out_deferred = false;
      nghttp2_session_resume_data(session_, call->id);
    }
    wake_writer();
  }
  // Only a request read whole can go again.
  request.resendable = request.resendable && parser.is_done();
  co_return co_await relay_answer(pipe, call, request);
}

std::shared_ptr<Call> UpstreamLink::start_call(const Outgoing& request, bool has_body) {
  const auto nva = nv_list(request.fields);
  auto call = std::make_shared<Call>(ex_);
  nghttp2_data_provider body{};
  body.read_callback = body_source_cb;
  call->out_end = !has_body;
  call->id = nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(),
                                    has_body ? &body : nullptr, nullptr);
  if (call->id < 0) {
    spdlog::info("upstream HTTP/2: cannot start a stream: {}", nghttp2_strerror(call->id));
    return nullptr;
  }
  calls_[call->id] = call;
  wake_writer();
  return call;
}

asio::awaitable<void> UpstreamLink::resend(Pipe& pipe, Outgoing& request) {
  if (auto ec = co_await ready(nullptr)) {
    co_await not_sent(pipe, "cannot connect to the upstream: " + ec.message());
    co_return;
  }
  request.keep_alive = false;  // the socket pair belongs to the other connection
  request.resendable = false;  // once
  auto call = start_call(request, !request.body.empty());
  if (!call) {
    co_await not_sent(pipe, "cannot start a stream");
    co_return;
  }
  call->out = std::move(request.body);
  call->out_end = true;
  co_await relay_answer(pipe, call, request);
}

asio::awaitable<bool> UpstreamLink::relay_answer(Pipe& pipe, std::shared_ptr<Call> call,
                                                 Outgoing& request) {
  const bool head_request = request.head_request;
  const bool keep_alive = request.keep_alive;
  // The answer: interim heads, the final head, the body, the trailers.
  std::string pending;
  bool chunked = false;
  for (;;) {
    while (!call->closed && call->interim.empty() && (!call->head || call->head_taken) &&
           call->in.empty() && !call->in_end) {
      co_await call->news.wait();
    }
    if (call->in_end && !call->head) co_return false;  // nghttp2 allows no such stream
    while (!call->interim.empty()) {
      auto& [status, fields] = call->interim.front();
      pending.append("HTTP/1.1 ").append(std::to_string(status)).append(" \r\n");
      for (const auto& [name, value] : fields) pending.append(name + ": " + value + "\r\n");
      pending.append("\r\n");
      call->interim.pop_front();
    }
    if (call->head && !call->head_taken) {
      call->head_taken = true;
      const auto& [status, fields] = *call->head;
      const bool bodiless = head_request || status == 204 || status == 304;
      const bool has_length = std::any_of(
          fields.begin(), fields.end(), [](const auto& f) { return f.first == "content-length"; });
      // No content-length (RFC 9113 §8.1.1: DATA frames delimit the body), or a
      // client that takes trailers (an HTTP/2 answer may end with trailers whatever
      // its content-length; in HTTP/1.1 only chunked coding carries them, RFC 9112
      // §7.1.2): chunked, without the content-length (RFC 9112 §6.1).
      chunked = !bodiless && (!has_length || request.trailers);
      pending.append("HTTP/1.1 ").append(std::to_string(status)).append(" \r\n");
      for (const auto& [name, value] : fields) {
        if (chunked && name == "content-length") continue;
        pending.append(name).append(": ").append(value).append("\r\n");
      }
      if (chunked) pending.append("transfer-encoding: chunked\r\n");
      if (!keep_alive) pending.append("connection: close\r\n");
      pending.append("\r\n");
    }
    std::size_t taken = 0;
    if (call->head_taken && !call->in.empty()) {
      taken = call->in.size();
      if (chunked) {
        append_chunk(pending, call->in);
      } else {
        pending.append(call->in);
      }
      call->in.clear();
    }
    const bool whole = call->head_taken && call->in_end;
    if (whole && chunked) {
      pending.append("0\r\n");
      for (const auto& [name, value] : call->trailers) {
        pending.append(name).append(": ").append(value).append("\r\n");
      }
      pending.append("\r\n");
    }
    if (!pending.empty()) {
      auto [ec, n] = co_await asio::async_write(pipe, asio::buffer(pending), use_nothrow);
      if (ec) {
        // The session went (its client left, or it timed out): the stream stops.
        if (!call->closed) {
          nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, call->id, NGHTTP2_CANCEL);
          wake_writer();
        }
        co_return false;
      }
      pending.clear();
      if (taken > 0 && !call->closed) {
        nghttp2_session_consume_stream(session_, call->id, taken);
        wake_writer();
      }
    }
    if (whole) co_return keep_alive;
    if (call->closed && !call->head && call->close_code == NGHTTP2_REFUSED_STREAM) {
      // RFC 9113 §8.7: a refused stream (or one past a GOAWAY's last stream) was
      // not processed, so it may go again, on another connection: once, when its
      // whole body is at hand. Otherwise the session gets a 502 that releases the
      // claim (not_sent).
      auto registry = request.resendable ? registry_.lock() : nullptr;
      auto other = registry ? registry->pick(nullptr) : nullptr;
      if (!other) {
        co_await not_sent(pipe, "the upstream refused the stream");
        co_return false;
      }
      spdlog::info("upstream HTTP/2 stream {} refused unprocessed: sent again", call->id);
      co_await asio::co_spawn(other->executor(), other->resend(pipe, request), asio::use_awaitable);
      --other->bridges;
      co_return false;
    }
    if (call->closed && call->in.empty() && !call->in_end) {
      // Reset, or the connection failed, before the answer was whole: the session
      // sees the connection end, and never takes a cut body for a whole one.
      spdlog::info("upstream HTTP/2 stream {} ended before its answer: {}", call->id,
                   nghttp2_http2_strerror(call->close_code));
      co_return false;
    }
  }
}

std::shared_ptr<UpstreamLink> Registry::pick(const http::Stream* established) {
  std::lock_guard lock(mu);
  std::erase_if(links, [](const auto& l) { return l->closed_to_new(); });
  std::shared_ptr<UpstreamLink> chosen;
  if (!established) {
    for (const auto& l : links) {
      if (l->bridges.load() < config.http2_max_streams) {
        chosen = l;
        break;
      }
    }
  }
  if (!chosen) {
    auto link_ex = established ? const_cast<http::Stream*>(established)->get_executor()
                   : strands   ? asio::any_io_executor(asio::make_strand(ex))
                               : ex;
    // The links know the registry weakly: it goes first when the proxy stops.
    chosen = std::make_shared<UpstreamLink>(link_ex, config, tls, weak_from_this());
    links.push_back(chosen);
  }
  ++chosen->bridges;
  return chosen;
}

}  // namespace h2

H2Upstream::H2Upstream(asio::any_io_executor ex, const config::UpstreamConfig& config,
                       ssl::context* tls, bool strands)
    : registry_(std::make_shared<h2::Registry>(std::move(ex), config, tls, strands)) {}

H2Upstream::~H2Upstream() = default;

asio::awaitable<std::pair<beast::error_code, std::optional<tcp::socket>>> H2Upstream::open(
    asio::any_io_executor ex, std::unique_ptr<Stream> established) {
  auto chosen = registry_->pick(established.get());
  auto result = co_await asio::co_spawn(
      chosen->executor(), chosen->open_bridge(ex, std::move(established)), asio::use_awaitable);
  --chosen->bridges;
  co_return result;
}

}  // namespace idemproxy::http
