#include "idemproxy/http/proxy_server.hpp"

#include "server/server_impl.hpp"

namespace idemproxy::http {

void ProxyServer::Impl::bind(tcp::acceptor& acceptor, const config::Endpoint& at,
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

asio::awaitable<void> ProxyServer::Impl::accept_clients() {
  for (;;) {
    // Named, not a temporary: GCC 12 destroys temporaries in co_await expressions twice.
    // A strand per connection with several I/O threads; with one, it is pure cost.
    const asio::any_io_executor ex = threads > 1 ? asio::any_io_executor(asio::make_strand(io))
                                                 : asio::any_io_executor(io.get_executor());
    auto [ec, socket] = co_await proxy_acceptor.async_accept(ex, use_nothrow);
    if (ec) {
      if (!proxy_acceptor.is_open()) co_return;
      if (const auto n = accept_error_log.admit()) {
        spdlog::warn("accept failed: {} ({} since the last such line)", ec.message(), n);
      }
      asio::steady_timer pause(io, std::chrono::milliseconds{50});  // e.g. out of descriptors
      co_await pause.async_wait(use_nothrow);
      continue;
    }
    beast::error_code ignored;
    const std::size_t limit =
        std::min(runtime.settings()->config.server.max_connections, connection_cap);
    // At the limit, an idle connection (waiting for its next request) makes room for
    // a new client, as nginx reuses idle keep-alive connections; its close takes a
    // moment, and the reserve in connection_capacity covers the overlap.
    bool refuse = false;
    if (tracker.size() >= limit) {
      if (tracker.reclaim_idle(1) == 0) {
        refuse = true;
      } else if (const auto n = reclaim_log.admit()) {
        spdlog::warn(
            "{} client connections open (server.max_connections or the open-files "
            "limit): closing idle ones for new clients ({} since the last such line)",
            limit, n);
      }
    }
    if (refuse) {
      // At the limit with nothing idle: refuse at once rather than queue work we
      // cannot serve.
      runtime.metrics.count_refused_connection();
      if (const auto n = refused_log.admit()) {
        spdlog::warn(
            "connection refused: {} client connections open (server.max_connections "
            "or the open-files limit); {} refused since the last such line",
            limit, n);
      }
      socket.close(ignored);
      continue;
    }
    socket.set_option(tcp::no_delay(true), ignored);
    auto conn = std::make_shared<ClientConnection>(std::move(socket), tls.get());
    asio::co_spawn(conn->stream.get_executor(), serve_client(conn, frontend, tracker),
                   log_exception);
  }
}

asio::awaitable<void> ProxyServer::Impl::accept_admin() {
  for (;;) {
    const auto strand = asio::make_strand(io);
    auto [ec, socket] = co_await admin_acceptor.async_accept(strand, use_nothrow);
    if (ec) {
      if (!admin_acceptor.is_open()) co_return;
      continue;
    }
    auto ex = socket.get_executor();
    asio::co_spawn(ex, serve_admin(std::move(socket), runtime), log_exception);
  }
}

std::optional<std::string> ProxyServer::Impl::reload() {
  const auto current = runtime.settings();
  try {
    config::Config next = config::load_config(current->config.path);
    for (const auto& w : next.warnings) spdlog::warn("reload: {}", w);
    const auto changed = config::restart_only_changes(current->config, next);
    if (!changed.empty()) {
      std::string names;
      for (const auto& n : changed) names += (names.empty() ? "" : ", ") + n;
      spdlog::warn(
          "reload: {} changed, which takes effect only after a restart; keeping the running "
          "values of every restart-only key",
          names);
      config::keep_restart_only(next, current->config);
    }
    if (tracing != nullptr) tracing->reload(next.tracing);
    runtime.replace_settings(make_settings(std::move(next)));
    runtime.metrics.count_reload(true);
    spdlog::info("reload: configuration reloaded from {}", current->config.path);
    return std::nullopt;
  } catch (const std::exception& e) {
    runtime.metrics.count_reload(false);
    spdlog::error("reload rejected, the previous configuration stays in force: {}", e.what());
    return std::string(e.what());
  }
}

asio::awaitable<void> ProxyServer::Impl::drain() {
  const auto timeout = runtime.settings()->config.server.drain_timeout;
  spdlog::info("draining: no new connections; waiting up to {} ms for {} connection(s)",
               timeout.count(), tracker.size());
  runtime.draining = true;
  beast::error_code ignored;
  proxy_acceptor.close(ignored);
  tracker.close_idle();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  asio::steady_timer tick(io);
  while (tracker.size() > 0 && std::chrono::steady_clock::now() < deadline) {
    tick.expires_after(std::chrono::milliseconds{20});
    co_await tick.async_wait(use_nothrow);
    tracker.close_idle();  // connections that finished a request since
  }
  if (tracker.size() > 0) {
    spdlog::warn(
        "drain timeout: {} connection(s) still busy; their claims are left to their leases",
        tracker.size());
  }
  admin_acceptor.close(ignored);
  io.stop();
}

asio::awaitable<void> ProxyServer::Impl::handle_signals() {
  for (;;) {
    auto [ec, signo] = co_await signals.async_wait(use_nothrow);
    if (ec) co_return;
    if (signo == SIGHUP) {
      reload();
      continue;
    }
    spdlog::info("received {}, shutting down", signo == SIGTERM ? "SIGTERM" : "SIGINT");
    co_await drain();
    co_return;
  }
}

ProxyServer::ProxyServer(config::Config config, store::Store& store, ops::Metrics& metrics,
                         std::function<void()> prepare_store, trace::Tracing* tracing)
    : impl_(std::make_unique<Impl>(std::move(config), store, metrics, std::move(prepare_store),
                                   tracing)) {}

ProxyServer::~ProxyServer() = default;

void ProxyServer::start() {
  // The first try runs here, before the listeners open: with PostgreSQL up, the
  // store is ready before the first request. Later tries run in prepare().
  if (impl_->prepare_store) {
    if (const auto error = impl_->try_prepare()) {
      impl_->note_not_ready(1, *error);
    } else {
      impl_->prepare_store = nullptr;
    }
  }
  const auto settings = impl_->runtime.settings();
  impl_->bind(impl_->proxy_acceptor, settings->config.listen, "proxy");
  impl_->bind(impl_->admin_acceptor, settings->config.admin_listen, "admin");
}

int ProxyServer::run() {
  auto& s = *impl_;
  // The acceptors are not thread-safe, and drain closes them: everything that
  // touches them runs on one strand (TSan found the race with server.threads > 1).
  asio::co_spawn(s.control, s.accept_clients(), log_exception);
  asio::co_spawn(s.control, s.accept_admin(), log_exception);
  asio::co_spawn(s.control, s.handle_signals(), log_exception);
  asio::co_spawn(s.control, s.prepare(), log_exception);  // then the notification listener and GC
  // Leases are at least 1s and renewed at a third of it: a 100 ms beat is on time.
  asio::co_spawn(s.control, renew_leases(s.runtime, std::chrono::milliseconds{100}), log_exception);
  std::vector<std::thread> extra;
  for (int i = 1; i < s.threads; ++i) extra.emplace_back([&s] { s.io.run(); });
  s.io.run();
  // Frames still here were cut off by the drain timeout (or a stop): their claims are
  // left to their leases, never abandoned as they are destroyed (ClaimPermit).
  s.runtime.leave_claims_to_leases();
  for (auto& t : extra) t.join();
  s.runtime.wait_for_queued_calls();  // their answers go to `io`, which must outlive them
  if (const auto pending = s.runtime.completions.pending(); pending > 0) {
    spdlog::error("{} completion(s) could not be written before exit; their records stay in flight",
                  pending);
  }
  s.runtime.record_store.watch({});  // its callbacks use the cache, about to go
  s.runtime.db_pool.stop();          // abandons completion retries still waiting for the store
  s.runtime.db_pool.join();
  // The last requests' spans are queued: exported within a bound, or dropped (counted).
  if (s.tracing != nullptr) s.tracing->shutdown(std::chrono::seconds{2});
  spdlog::info("stopped");
  return 0;
}

}  // namespace idemproxy::http
