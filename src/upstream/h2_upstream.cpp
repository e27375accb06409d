#include "codec/http2/callbacks.hpp"
#include "upstream/h2_link.hpp"

namespace idemproxy::upstream {
namespace h2 {

int UpstreamLink::on_header(const nghttp2_frame& frame, std::string_view name,
                            std::string_view value) {
  auto call = find(frame.hd.stream_id);
  if (!call) return 0;
  call->block_bytes += name.size() + value.size() + 32;
  if (call->block_bytes > kMaxHeadBytes) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  call->block.add(name, value);
  return 0;
}

int UpstreamLink::on_frame_recv(const nghttp2_frame& frame) {
  if (frame.hd.type == NGHTTP2_GOAWAY) {
    // RFC 9113 §6.8: streams up to last_stream_id complete; no new ones start here.
    // nghttp2 closes those above it with REFUSED_STREAM: they go again elsewhere.
    closed_to_new_ = true;
    return 0;
  }
  if (frame.hd.type == NGHTTP2_SETTINGS && (frame.hd.flags & NGHTTP2_FLAG_ACK) == 0) {
    // RFC 9113 §6.5.2: the streams the upstream takes at once; Registry::pick opens
    // another connection rather than go past it (nghttp2 would queue the rest). A frame
    // that does not name it leaves it as it was (§6.5.3): as the registry learned it.
    for (std::size_t i = 0; i < frame.settings.niv; ++i) {
      if (frame.settings.iv[i].settings_id != NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS) continue;
      const std::uint32_t announced = frame.settings.iv[i].value;
      auto registry = registry_.lock();
      remote_max =
          registry ? registry->limit_from(*this, announced, !settings_received_) : announced;
    }
    settings_received_ = true;
    if (settings_wait_ != nullptr) settings_wait_->cancel();
    return 0;
  }
  auto call = find(frame.hd.stream_id);
  if (!call) return 0;
  const bool end = (frame.hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
  if (frame.hd.type == NGHTTP2_HEADERS) {
    FieldBlock block = std::exchange(call->block, FieldBlock{});
    call->block_bytes = 0;
    const unsigned status = block.status();  // 0: the block is trailers
    if (status != 0 && status / 100 == 1) {
      call->interim.push_back(std::move(block));
    } else if (status != 0) {
      call->head.emplace(std::move(block));
    } else {
      call->trailers = std::move(block);
    }
  }
  if (end) {
    call->in_end = true;
    call->room.notify();  // a request waiting for window room: the answer is whole
  }
  call->news.notify();
  return 0;
}

int UpstreamLink::on_frame_send(const nghttp2_frame& frame) {
  if (frame.hd.type != NGHTTP2_HEADERS) return 0;
  if (auto call = find(frame.hd.stream_id)) call->headers_sent = true;
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
  if (stream_->tls() != nullptr) {
    auto [hec] = co_await stream_->async_handshake(ssl::stream_base::client, use_nothrow);
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
  codec::http2::set_peer_callbacks<UpstreamLink>(cbs);
  nghttp2_option* opt = nullptr;
  nghttp2_option_new(&opt);
  // An answer's window reopens as the session takes its bytes: a slow client holds
  // back its own stream only, and never fills this process's memory.
  nghttp2_option_set_no_auto_window_update(opt, 1);
  nghttp2_option_set_max_outbound_ack(opt, 1000);
  nghttp2_session_client_new3(&session_, cbs, this, opt, memory_.get());
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cbs);
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, kStreamWindow},
  };
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings));
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kConnectionWindow);
}

// The connection is gone: its streams fail (a stream that may have been processed
// is never sent again; StreamCall::resend sends only refused ones).
void UpstreamLink::fail(const char* why) {
  if (state_ == State::failed) return;
  state_ = State::failed;
  closed_to_new_ = true;
  spdlog::info("upstream HTTP/2 connection to {} ended: {}", config_.url, why);
  auto calls = std::move(calls_);
  calls_.clear();
  for (auto& [id, call] : calls) {
    call->closed = true;
    // A request whose HEADERS never left was not processed (RFC 9113 §8.7): it may
    // go again on another connection, as a refused stream does.
    call->close_code = call->headers_sent ? NGHTTP2_CANCEL : NGHTTP2_REFUSED_STREAM;
    call->news.notify();
    call->room.notify();
  }
  beast::error_code ec;
  if (stream_) stream_->socket().close(ec);
  if (settings_wait_ != nullptr) settings_wait_->cancel();
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
      asio::co_spawn(
          ex_, [self]() -> asio::awaitable<void> { co_await self->idle_loop(); }, asio::detached);
      // No stream starts before the upstream's SETTINGS (its connection preface,
      // RFC 9113 §3.4): until then its SETTINGS_MAX_CONCURRENT_STREAMS and initial
      // window are unknown, and a burst sent blind can be refused whole. One round
      // trip per connection, bounded by upstream.connect_timeout.
      asio::steady_timer timer(ex_);
      timer.expires_after(config_.connect_timeout);
      while (!settings_received_ && state_ == State::ready) {
        settings_wait_ = &timer;
        auto [ec] = co_await timer.async_wait(use_nothrow);
        settings_wait_ = nullptr;
        if (!ec) {
          fail("no SETTINGS from the upstream within upstream.connect_timeout");
          connect_error_ = beast::error::timeout;
        }
      }
    }
    ready_.notify();
  }
  co_await ready_.wait();
  if (state_ == State::ready) co_return beast::error_code{};
  co_return connect_error_ ? connect_error_ : beast::error_code(asio::error::connection_aborted);
}

asio::awaitable<void> UpstreamLink::idle_loop() {
  const Duration idle = config_.idle_timeout;
  asio::steady_timer timer(ex_);
  while (state_ == State::ready) {
    // Checked twice per period: a link is closed after between one and one and a
    // half idle periods without a stream.
    timer.expires_after(idle / 2);
    co_await timer.async_wait(use_nothrow);
    if (state_ != State::ready) co_return;
    auto registry = registry_.lock();
    if (!registry || !registry->close_if_idle(*this, idle)) continue;
    spdlog::debug("upstream HTTP/2 connection to {} idle for {} s: closed", config_.url,
                  std::chrono::duration_cast<std::chrono::seconds>(idle).count());
    // RFC 9113 §6.8: GOAWAY with NO_ERROR, then the close once it is written
    // (write_loop ends the session when nghttp2 wants neither to read nor write).
    nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR);
    wake_writer();
    co_return;
  }
}

std::size_t Registry::room(const UpstreamLink& link) const {
  return std::min<std::size_t>(config.http2_max_streams, link.remote_max.load());
}

bool Registry::close_if_idle(UpstreamLink& link, Duration idle) {
  std::lock_guard lock(mu);
  if (link.streams.load() != 0 || link.closed_to_new()) return false;
  const auto idle_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(idle).count();
  if (now_ns() - link.last_release.load() < idle_ns) return false;
  link.close_to_new();
  std::erase_if(links, [&](const auto& l) { return l.get() == &link; });
  return true;
}

std::shared_ptr<UpstreamLink> Registry::pick(const http::Stream* established,
                                             const UpstreamLink* besides) {
  std::lock_guard lock(mu);
  std::erase_if(links, [](const auto& l) { return l->closed_to_new(); });
  std::shared_ptr<UpstreamLink> chosen;
  if (!established) {
    for (const auto& l : links) {
      if (l.get() != besides && l->streams.load() < room(*l)) {
        chosen = l;
        break;
      }
    }
  }
  if (!chosen) {
    const bool own = !established && strands;
    auto link_ex = established ? const_cast<http::Stream*>(established)->get_executor()
                   : own       ? asio::any_io_executor(asio::make_strand(ex))
                               : ex;
    // The links know the registry weakly: it goes first when the proxy stops.
    chosen = std::make_shared<UpstreamLink>(link_ex, config, tls, weak_from_this(),
                                            own || (established && strands));
    chosen->last_release = now_ns();
    chosen->remote_max = learned_max.load();
    links.push_back(chosen);
  }
  ++chosen->streams;
  return chosen;
}

}  // namespace h2

H2Upstream::H2Upstream(asio::any_io_executor ex, const config::UpstreamConfig& config,
                       ssl::context* tls, bool strands)
    : registry_(std::make_shared<h2::Registry>(std::move(ex), config, tls, strands)) {}

H2Upstream::~H2Upstream() = default;

asio::awaitable<std::pair<beast::error_code, UpstreamCallPtr>> H2Upstream::open_call(
    std::unique_ptr<Stream> established) {
  UpstreamCallPtr call(new h2::StreamCall(registry_));
  const beast::error_code ec =
      co_await static_cast<h2::StreamCall&>(*call).open(std::move(established));
  if (ec) call.reset();
  co_return std::make_pair(ec, std::move(call));
}

}  // namespace idemproxy::upstream
