// The running server, put together from its parts: the client listener
// (client_acceptor), the admin listener (admin), the store's upkeep (store_upkeep),
// reload and the gauges (reload). What stays here is their order: start, the run
// loop, signals, the drain, and what must go in order at exit.
#include "idemproxy/server/proxy_server.hpp"

#include <spdlog/spdlog.h>

#include <csignal>
#include <thread>

#include "http/io_reactor.hpp"
#include "proxy/policy_document.hpp"
#include "server/admin.hpp"
#include "server/client_acceptor.hpp"
#include "server/listener.hpp"
#include "server/reload.hpp"
#include "server/store_upkeep.hpp"

namespace idemproxy::server {
namespace {

// Database-pool threads. With PostgreSQL: one per connection, plus room for a full
// batch of blocking calls to queue for the next free connection (claims and
// completions of requests skip this pool: PgStore queues them itself, see
// Runtime::queued; background completion retries and releases still wait here).
int db_threads(const config::StoreConfig& store) {
  if (store.kind != config::StoreConfig::Kind::postgres) return 1;
  return store.pool_size + (store.batch_max > 1 ? store.batch_max : 0);
}

}  // namespace

struct ProxyServer::Impl {
  Impl(const config::Config& config, store::Store& store, ops::Metrics& metrics,
       std::function<void()> prepare, trace::Tracing* traces)
      : tracing(traces),
        threads(config.server.threads),
        io(threads),
        runtime(io, proxy::make_settings(config), store, metrics, db_threads(config.store)),
        clients(io, threads, runtime, config),
        admin(io),
        upkeep(io, runtime, std::move(prepare)),
        signals(io, SIGINT, SIGTERM, SIGHUP) {
    runtime.reload = [this] { return reload_config(runtime, tracing); };
    if (tracing != nullptr) runtime.tracer = &tracing->tracer();
    publish_gauges(runtime);
  }

  asio::awaitable<void> handle_signals();
  asio::awaitable<void> drain();

  trace::Tracing* tracing;  // null: no spans
  int threads;
  asio::io_context io;
  /// The I/O threads' loop as the store sees it (common/reactor.hpp): PostgreSQL's
  /// group commit sends and reads its batches there.
  http::IoReactor reactor{io};
  ServerRuntime runtime;
  ClientAcceptor clients;
  tcp::acceptor admin;
  StoreUpkeep upkeep;
  asio::signal_set signals;
  asio::strand<asio::io_context::executor_type> control{asio::make_strand(io)};
};

asio::awaitable<void> ProxyServer::Impl::drain() {
  runtime.draining = true;
  const auto busy = co_await clients.drain(runtime.settings()->config.server.drain_timeout);
  if (busy > 0) {
    spdlog::warn(
        "drain timeout: {} connection(s) still busy; their claims are left to their leases", busy);
  }
  beast::error_code ignored;
  admin.close(ignored);
  io.stop();
}

asio::awaitable<void> ProxyServer::Impl::handle_signals() {
  for (;;) {
    auto [ec, signo] = co_await signals.async_wait(use_nothrow);
    if (ec) co_return;
    if (signo == SIGHUP) {
      runtime.reload();
      continue;
    }
    spdlog::info("received {}, shutting down", signo == SIGTERM ? "SIGTERM" : "SIGINT");
    co_await drain();
    co_return;
  }
}

ProxyServer::ProxyServer(const config::Config& config, store::Store& store, ops::Metrics& metrics,
                         std::function<void()> prepare_store, trace::Tracing* tracing)
    : impl_(std::make_unique<Impl>(config, store, metrics, std::move(prepare_store), tracing)) {}

ProxyServer::~ProxyServer() = default;

void ProxyServer::start() {
  // The first try runs here, before the listeners open; later ones in run().
  impl_->upkeep.try_now();
  const auto settings = impl_->runtime.settings();
  impl_->clients.bind(settings->config.listen);
  listen_on(impl_->io, impl_->admin, settings->config.admin_listen, "admin");
}

int ProxyServer::run() {
  auto& s = *impl_;
  // The acceptors are not thread-safe, and drain closes them: everything that
  // touches them runs on one strand (TSan found the race with server.threads > 1).
  asio::co_spawn(s.control, s.clients.accept(), log_exception);
  asio::co_spawn(s.control, accept_admin(s.io, s.admin, s.runtime), log_exception);
  asio::co_spawn(s.control, s.handle_signals(), log_exception);
  asio::co_spawn(s.control, s.upkeep.run(), log_exception);  // then the watchers and GC
  // Leases are at least 1s and renewed at a third of it: a 100 ms beat is on time.
  asio::co_spawn(s.control, proxy::renew_leases(s.runtime, std::chrono::milliseconds{100}),
                 log_exception);
  std::vector<std::thread> extra;
  const auto serve_io = [&s] {
    const common::Reactor::Current loop(&s.reactor);
    s.io.run();
  };
  for (int i = 1; i < s.threads; ++i) extra.emplace_back(serve_io);
  serve_io();
  // Frames still here were cut off by the drain timeout (or a stop): their claims are
  // left to their leases, never abandoned as they are destroyed (ClaimPermit).
  s.runtime.leave_claims_to_leases();
  for (auto& t : extra) t.join();
  s.reactor.stop();  // a batch the loop still owed an answer goes to the store's threads
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

}  // namespace idemproxy::server
