#include "upstream/pool.hpp"

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>

#include "http/tls.hpp"

namespace idemproxy::upstream {
namespace {

// A pooled connection the upstream has closed reads as EOF; one still open would
// block. Checking before reuse avoids sending a request into a dead socket. TLS
// connections only: a cleartext one is watched by its idle read (watch_idle).
bool still_open(tcp::socket& socket) {
  char byte = 0;  // one syscall: no toggling of the socket's blocking mode
  const auto n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

// Queues the idle read. After a read that drained the socket (http/draining_read.hpp)
// the reactor queues it without a system call, and it ends only on an event: bytes or
// the upstream's end, either of which makes the connection unusable.
void watch_idle(UpstreamConnection& conn) {
  if (!conn.idle) conn.idle = std::make_shared<UpstreamConnection::Idle>();
  auto idle = conn.idle;
  conn.stream.socket().async_read_some(asio::buffer(&idle->byte, 1),
                                       [idle](const beast::error_code& ec, std::size_t) {
                                         if (ec != asio::error::operation_aborted)
                                           idle->dead = true;
                                       });
}

// Whether a pooled connection can carry a request: its idle read, cancelled, saw
// nothing (no system call), or a TLS connection's peek finds it open.
bool usable(UpstreamConnection& conn) {
  if (!conn.idle) return still_open(conn.stream.socket());
  if (conn.idle->dead) return false;
  beast::error_code ignored;
  conn.stream.socket().cancel(ignored);
  return !conn.idle->dead;
}

}  // namespace

UpstreamPool::UpstreamPool(asio::any_io_executor ex, const config::UpstreamConfig& config,
                           bool strands)
    : ex_(std::move(ex)), config_(config), strands_(strands) {
  using Protocol = config::UpstreamConfig::Protocol;
  if (config_.tls.enabled) {
    tls_ = make_upstream_tls(config_.tls);
    if (config_.protocol != Protocol::http1) {
      offer_upstream_alpn(*tls_, config_.protocol == Protocol::automatic);
    }
    if (config_.tls.insecure_skip_verify) {
      spdlog::warn(
          "upstream.tls.insecure_skip_verify: the certificate of {} is NOT verified; "
          "anyone on the path can read and answer requests",
          config_.url);
    }
  }
  if (config_.protocol != Protocol::http1) {
    h2_ = std::make_unique<H2Upstream>(ex_, config_, tls_.get(), strands_);
  }
}

UpstreamPool::~UpstreamPool() = default;

bool UpstreamPool::over_h2() const {
  using Protocol = config::UpstreamConfig::Protocol;
  return h2_ && (config_.protocol != Protocol::automatic || auto_h2_);
}

asio::awaitable<std::pair<beast::error_code, UpstreamCallPtr>> UpstreamPool::open_call(
    FieldsAllocator memory) {
  using Result = std::pair<beast::error_code, UpstreamCallPtr>;
  if (over_h2()) co_return co_await h2_->open_call();
  if (auto call = open_call_now(memory)) co_return Result{beast::error_code{}, std::move(call)};
  std::unique_ptr<Stream> h2;
  auto [ec, conn] = co_await connect(h2);
  if (h2) co_return co_await h2_->open_call(std::move(h2));
  if (ec) co_return Result{ec, nullptr};
  co_return Result{ec, Http1Call::make(memory, *this, std::move(conn))};
}

UpstreamCallPtr UpstreamPool::open_call_now(FieldsAllocator memory) {
  if (over_h2()) return nullptr;
  auto idle = take_idle();
  return idle ? Http1Call::make(memory, *this, std::move(idle)) : nullptr;
}

std::unique_ptr<UpstreamConnection> UpstreamPool::take_idle() {
  for (;;) {
    std::unique_ptr<UpstreamConnection> conn;
    {
      std::lock_guard lock(mu_);
      if (idle_.empty()) return nullptr;
      conn = std::move(idle_.back());
      idle_.pop_back();
    }
    if (usable(*conn)) {
      conn->reused = true;
      return conn;
    }
  }
}

asio::awaitable<std::pair<beast::error_code, std::unique_ptr<UpstreamConnection>>>
UpstreamPool::connect(std::unique_ptr<Stream>& h2) {
  using Result = std::pair<beast::error_code, std::unique_ptr<UpstreamConnection>>;
  // Each connection has its own strand: Beast's timeout handler and the socket's
  // completions must not run concurrently when several I/O threads run.
  const asio::any_io_executor ex = strands_ ? asio::any_io_executor(asio::make_strand(ex_)) : ex_;
  auto conn = std::make_unique<UpstreamConnection>(ex, tls_.get());
  prepare_upstream_tls(conn->stream, config_);
  tcp::resolver resolver(ex_);
  auto [rec, endpoints] = co_await resolver.async_resolve(config_.host, config_.port, use_nothrow);
  if (rec) co_return Result{rec, nullptr};
  conn->stream.expires_after(config_.connect_timeout);
  auto [cec, ep] = co_await conn->stream.transport().async_connect(endpoints, use_nothrow);
  if (cec) co_return Result{cec, nullptr};
  beast::error_code ignored;
  conn->stream.socket().set_option(tcp::no_delay(true), ignored);
  if (conn->stream.tls() != nullptr) {
    auto [hec] = co_await conn->stream.async_handshake(ssl::stream_base::client, use_nothrow);
    if (hec) co_return Result{hec, nullptr};
  }
  if (h2_ && alpn_chose_h2(conn->stream)) {
    // auto: the upstream speaks HTTP/2; this connection becomes the first shared one.
    auto_h2_ = true;
    conn->stream.expires_never();
    h2 = std::make_unique<Stream>(std::move(conn->stream));
    co_return Result{beast::error_code{}, nullptr};
  }
  co_return Result{beast::error_code{}, std::move(conn)};
}

void UpstreamPool::give_back(std::unique_ptr<UpstreamConnection> conn) {
  if (!conn) return;
  // With one I/O thread every owner runs where the last did: its timer wait can stay.
  if (strands_) {
    conn->stream.expires_never();
  } else {
    conn->stream.expires_never_on_one_thread();
  }
  std::lock_guard lock(mu_);
  if (idle_.size() >= config_.max_idle_connections) return;
  if (conn->stream.tls() == nullptr) watch_idle(*conn);
  idle_.push_back(std::move(conn));
}

asio::awaitable<std::pair<beast::error_code, std::unique_ptr<UpstreamConnection>>>
UpstreamPool::fresh() {
  std::unique_ptr<Stream> h2;
  auto [ec, conn] = co_await connect(h2);
  // auto: ALPN chose h2 on the new connection, which an HTTP/1.1 call cannot use; it
  // becomes the first shared HTTP/2 connection for the calls after this one.
  if (h2) {
    co_await h2_->open_call(std::move(h2));
    co_return std::make_pair(beast::error_code(asio::error::connection_aborted), nullptr);
  }
  co_return std::make_pair(ec, std::move(conn));
}

}  // namespace idemproxy::upstream
