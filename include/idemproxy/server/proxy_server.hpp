#pragma once
// The running proxy: the client listener, the admin listener, signals and drain.
#include <functional>
#include <memory>

#include "idemproxy/config/config.hpp"
#include "idemproxy/ops/metrics.hpp"
#include "idemproxy/store/store.hpp"
#include "idemproxy/trace/tracing.hpp"

namespace idemproxy::server {

class ProxyServer {
 public:
  /// `prepare_store` readies the store (applies migrations) and throws while it
  /// cannot. The server runs it on the database pool, with backoff, until it
  /// succeeds: it serves (and answers /healthz) meanwhile, and /readyz says 503.
  /// `tracing` (tracing: as configured; it must outlive the server) gets a server
  /// span per request; a reload applies its sample_ratio, and run() flushes it at exit.
  ProxyServer(const config::Config& config, store::Store& store, ops::Metrics& metrics,
              std::function<void()> prepare_store = {}, trace::Tracing* tracing = nullptr);
  ~ProxyServer();
  ProxyServer(const ProxyServer&) = delete;
  ProxyServer& operator=(const ProxyServer&) = delete;

  /// Binds both listeners; throws std::runtime_error when one cannot be bound.
  void start();
  /// Serves until SIGTERM or SIGINT, then drains; SIGHUP reloads the config file.
  /// Returns the process exit code.
  int run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idemproxy::server
