#include "server/client_acceptor.hpp"

#include <spdlog/spdlog.h>

#include "server/listener.hpp"

namespace idemproxy::server {

void listen_on(asio::io_context& io, tcp::acceptor& acceptor, const config::Endpoint& at,
               const char* what) {
  try {
    tcp::resolver resolver(io);
    const auto endpoint = resolver.resolve(at.host, std::to_string(at.port))->endpoint();
    acceptor.open(endpoint.protocol());
    acceptor.set_option(asio::socket_base::reuse_address(true));
    acceptor.bind(endpoint);
    acceptor.listen(asio::socket_base::max_listen_connections);
    const auto bound = acceptor.local_endpoint();
    spdlog::info("{} listening on {}:{}", what, bound.address().to_string(), bound.port());
  } catch (const boost::system::system_error& e) {
    // Not e.what(): it ends in the Boost header and line that threw. The code's
    // message ("Address already in use") is what an operator acts on.
    throw std::runtime_error(std::string("cannot listen on ") + at.host + ":" +
                             std::to_string(at.port) + " (" + what + "): " + e.code().message());
  }
}

ClientAcceptor::ClientAcceptor(asio::io_context& io, int threads, proxy::Runtime& runtime,
                               const config::Config& config)
    : io_(io), threads_(threads), runtime_(runtime), acceptor_(io) {
  cap_ = connection_capacity(config);
  if (cap_ < config.server.max_connections) {
    spdlog::warn(
        "server.max_connections is {}, but the open-files limit carries {} client "
        "connections (each may need an upstream connection, and a reserve stays free): "
        "serving at most {}; raise `ulimit -n` to serve more",
        config.server.max_connections, cap_, cap_);
  }
  if (config.tls.enabled()) {
    tls_ = make_server_tls(config.tls);
    offer_h2(*tls_, &http2_on_);
  }
}

bool ClientAcceptor::make_room() {
  const std::size_t limit = connection_limit(runtime_, cap_);
  if (tracker_.size() < limit) return true;
  // At the limit, an idle connection (waiting for its next request) makes room for a
  // new client, as nginx reuses idle keep-alive connections; its close takes a
  // moment, and the reserve in connection_capacity covers the overlap.
  if (tracker_.reclaim_idle(1) > 0) {
    if (const auto n = reclaim_log_.admit()) {
      spdlog::warn(
          "{} client connections open (server.max_connections or the open-files "
          "limit): closing idle ones for new clients ({} since the last such line)",
          limit, n);
    }
    return true;
  }
  // At the limit with nothing idle: refused at once rather than queue work we cannot
  // serve.
  runtime_.metrics.count_refused_connection();
  if (const auto n = refused_log_.admit()) {
    spdlog::warn(
        "connection refused: {} client connections open (server.max_connections "
        "or the open-files limit); {} refused since the last such line",
        limit, n);
  }
  return false;
}

asio::awaitable<void> ClientAcceptor::accept() {
  for (;;) {
    // Named, not a temporary: GCC 12 destroys temporaries in co_await expressions twice.
    // A strand per connection with several I/O threads; with one, it is pure cost.
    const asio::any_io_executor ex = threads_ > 1 ? asio::any_io_executor(asio::make_strand(io_))
                                                  : asio::any_io_executor(io_.get_executor());
    auto [ec, socket] = co_await acceptor_.async_accept(ex, use_nothrow);
    if (ec) {
      if (!acceptor_.is_open()) co_return;
      if (const auto n = accept_error_log_.admit()) {
        spdlog::warn("accept failed: {} ({} since the last such line)", ec.message(), n);
      }
      asio::steady_timer pause(io_, std::chrono::milliseconds{50});  // e.g. out of descriptors
      co_await pause.async_wait(use_nothrow);
      continue;
    }
    beast::error_code ignored;
    if (!make_room()) {
      socket.close(ignored);
      continue;
    }
    socket.set_option(tcp::no_delay(true), ignored);
    auto conn = std::make_shared<ClientConnection>(std::move(socket), tls_.get());
    asio::co_spawn(conn->stream.get_executor(), serve_client(conn, service_, tracker_, streams_),
                   log_exception);
  }
}

asio::awaitable<std::size_t> ClientAcceptor::drain(std::chrono::milliseconds timeout) {
  spdlog::info("draining: no new connections; waiting up to {} ms for {} connection(s)",
               timeout.count(), tracker_.size());
  beast::error_code ignored;
  acceptor_.close(ignored);
  tracker_.close_idle();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  asio::steady_timer tick(io_);
  while (tracker_.size() > 0 && std::chrono::steady_clock::now() < deadline) {
    tick.expires_after(std::chrono::milliseconds{20});
    co_await tick.async_wait(use_nothrow);
    tracker_.close_idle();  // connections that finished a request since
  }
  co_return tracker_.size();
}

}  // namespace idemproxy::server
