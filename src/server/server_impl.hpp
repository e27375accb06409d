#pragma once
// The running server's state (ProxyServer::Impl), shared by its two halves:
// proxy_server.cpp (listeners, reload, drain, signals, the run loop) and
// store_upkeep.cpp (preparing the store, GC and record sampling).

#include <spdlog/spdlog.h>

#include <csignal>
#include <thread>

#include "http/tls.hpp"
#include "idemproxy/http/proxy_server.hpp"
#include "idemproxy/ops/gc.hpp"
#include "idemproxy/ops/records.hpp"
#include "proxy/policy_document.hpp"
#include "proxy/serve.hpp"
#include "server/admin.hpp"
#include "server/fd_limit.hpp"
#include "server/listener.hpp"
#include "server/session_tracker.hpp"

namespace idemproxy::http {

// Database-pool threads. With PostgreSQL: one per connection, plus room for a full
// batch of blocking calls to queue for the next free connection (claims and
// completions of requests skip this pool: PgStore queues them itself, see
// Runtime::queued; background completion retries and releases still wait here).
inline int db_threads(const config::StoreConfig& store) {
  if (store.kind != config::StoreConfig::Kind::postgres) return 1;
  return store.pool_size + (store.batch_max > 1 ? store.batch_max : 0);
}

// The service the codecs get: the proxy, with the server's connection limit for
// HTTP/2 streams.
class Frontend final : public ProxyService {
 public:
  Frontend(Runtime& rt, SessionTracker& tracker, const std::size_t& cap)
      : ProxyService(rt), tracker_(tracker), cap_(cap) {}
  bool reserve_stream() override {
    return tracker_.reserve_stream(std::min(rt_.settings()->config.server.max_connections, cap_));
  }
  void release_stream() override { tracker_.release_stream(); }

 private:
  SessionTracker& tracker_;
  const std::size_t& cap_;
};

struct ProxyServer::Impl {
  Impl(config::Config config, store::Store& store, ops::Metrics& metrics,
       std::function<void()> prepare, trace::Tracing* traces)
      : prepare_store(std::move(prepare)),
        tracing(traces),
        threads(config.server.threads),
        io(threads),
        runtime(io, make_settings(config), store, metrics, db_threads(config.store)),
        proxy_acceptor(io),
        admin_acceptor(io),
        signals(io, SIGINT, SIGTERM, SIGHUP) {
    runtime.reload = [this] { return reload(); };
    if (tracing != nullptr) runtime.tracer = &tracing->tracer();
    connection_cap = connection_capacity(config);
    if (connection_cap < config.server.max_connections) {
      spdlog::warn(
          "server.max_connections is {}, but the open-files limit carries {} client "
          "connections (each may need an upstream connection, and a reserve stays free): "
          "serving at most {}; raise `ulimit -n` to serve more",
          config.server.max_connections, connection_cap, connection_cap);
    }
    if (config.tls.enabled()) {
      tls = make_server_tls(config.tls);
      offer_h2(*tls, &http2_on);
    }
    runtime.metrics.set_gauges([this] {
      std::vector<ops::GaugeSample> samples;
      for (const auto& s : runtime.record_store.stats()) {
        samples.push_back({s.name, s.help, s.value, s.counter ? "counter" : "gauge"});
      }
      const std::vector<ops::GaugeSample> own{
          {"idemproxy_replay_cache_bytes", "Bytes held by the replay cache.",
           static_cast<double>(runtime.cache.bytes())},
          {"idemproxy_replay_cache_max_bytes", "The replay cache's bound (replay_cache.max_bytes).",
           static_cast<double>(runtime.cache.max_bytes())},
          {"idemproxy_replay_cache_entries", "Completed records held by the replay cache.",
           static_cast<double>(runtime.cache.size())},
          {"idemproxy_waiting_keys",
           "Keys held by this process that have requests waiting on them (on_concurrent: wait).",
           static_cast<double>(runtime.coordinator.waiting_keys())},
          {"idemproxy_completions_pending",
           "Completions waiting for the store to come back, retried in the background.",
           static_cast<double>(runtime.completions.pending())}};
      samples.insert(samples.end(), own.begin(), own.end());
      return samples;
    });
  }

  void bind(tcp::acceptor& acceptor, const config::Endpoint& at, const char* what);
  asio::awaitable<void> accept_clients();
  asio::awaitable<void> accept_admin();
  asio::awaitable<void> handle_signals();
  asio::awaitable<void> drain();
  asio::awaitable<void> collect_garbage();
  asio::awaitable<void> sample_records();
  std::optional<std::string> try_prepare();
  void note_not_ready(int attempt, const std::string& error);
  asio::awaitable<void> prepare();
  std::optional<std::string> reload();

  std::function<void()> prepare_store;  // empty once the store is prepared
  trace::Tracing* tracing;              // null: no spans
  std::chrono::milliseconds backoff{250};
  int threads;
  asio::io_context io;
  Runtime runtime;
  tcp::acceptor proxy_acceptor;
  tcp::acceptor admin_acceptor;
  asio::signal_set signals;
  asio::strand<asio::io_context::executor_type> control{asio::make_strand(io)};
  SessionTracker tracker;
  std::unique_ptr<ssl::context> tls;  // downstream termination (tls.cert_file)
  std::size_t connection_cap = 0;     // what the open-files limit carries
  Frontend frontend{runtime, tracker, connection_cap};
  /// ALPN offers h2 while server.http2 is on (it may change on reload).
  std::function<bool()> http2_on = [this] { return runtime.settings()->config.server.http2; };
  LogLimiter refused_log;
  LogLimiter reclaim_log;
  LogLimiter accept_error_log;
};

}  // namespace idemproxy::http
