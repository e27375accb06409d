#pragma once
// What every session shares: settings (swapped on reload), the store and the
// coordinator in front of it, the database pool, the upstream pool and metrics.
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "http/beast.hpp"
#include "http/completion_retrier.hpp"
#include "http/headers.hpp"
#include "http/lease_renewals.hpp"
#include "http/upstream_pool.hpp"
#include "idemproxy/config/config.hpp"
#include "idemproxy/engine/coordinator.hpp"
#include "idemproxy/engine/lease_schedule.hpp"
#include "idemproxy/ops/metrics.hpp"

namespace idemproxy::http {

/// A consistent snapshot of configuration and the route table built from it.
struct Settings {
  explicit Settings(config::Config c) : config(std::move(c)), routes(config.routes) {}
  config::Config config;
  engine::RouteTable routes;
};

class Runtime {
 public:
  Runtime(asio::io_context& io, std::shared_ptr<const Settings> settings, store::Store& store,
          ops::Metrics& metrics, int db_threads)
      : record_store(store),
        metrics(metrics),
        db_pool(static_cast<std::size_t>(db_threads)),
        upstream(io.get_executor(), settings->config.upstream, settings->config.server.threads > 1),
        completions(coordinator, db_pool, std::size_t{64} << 20),
        cache(settings->config.replay_cache_bytes),
        coordinator(store, cache, metrics, coordinator_hooks()),
        settings_(std::move(settings)) {}

  std::shared_ptr<const Settings> settings() const {
    std::lock_guard lock(mu_);
    return settings_;
  }
  void replace_settings(std::shared_ptr<const Settings> s) {
    std::lock_guard lock(mu_);
    settings_ = std::move(s);
  }

  /// Runs a blocking call (a store call) on the database pool and resumes the
  /// calling coroutine on its own executor: libpq never blocks an I/O thread.
  // Only trivially destructible values may appear as temporaries inside a co_await
  // expression: GCC 12 destroys such temporaries twice. Hence `fn` should capture
  // by reference, and the initiation below captures only `this`.
  template <class F>
  asio::awaitable<std::invoke_result_t<F&>> blocking(F fn) {
    using R = std::invoke_result_t<F&>;
    co_return co_await asio::async_initiate<decltype(asio::use_awaitable), void(R)>(
        [this](auto handler, F work) {
          auto io = asio::get_associated_executor(handler);
          asio::post(db_pool, [this, handler = std::move(handler), work = std::move(work),
                               guard = asio::make_work_guard(io)]() mutable {
            const auto started = std::chrono::steady_clock::now();
            R result = work();
            metrics.observe_store(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
            auto ex = guard.get_executor();
            asio::post(ex, [handler = std::move(handler), result = std::move(result)]() mutable {
              std::move(handler)(std::move(result));
            });
          });
        },
        asio::use_awaitable, std::move(fn));
  }

  store::Store& record_store;
  ops::Metrics& metrics;
  asio::thread_pool db_pool;
  UpstreamPool upstream;
  engine::LeaseSchedule leases;  // renew_leases() is started with the server
  CompletionRetrier completions;
  engine::ReplayCache cache;
  engine::Coordinator coordinator;
  std::atomic<bool> draining{false};
  /// False until the store is prepared (migrations applied): the proxy starts, and
  /// keeps retrying, while PostgreSQL is still unreachable. /readyz reads it.
  std::atomic<bool> store_prepared{false};
  void set_store_problem(std::string detail) {
    std::lock_guard lock(mu_);
    store_problem_ = std::move(detail);
  }
  std::string store_problem() const {
    std::lock_guard lock(mu_);
    return store_problem_;
  }
  /// Reloads the config file (SIGHUP and POST /admin/reload); returns the error, if any.
  std::function<std::optional<std::string>()> reload;

 private:
  engine::Coordinator::Hooks coordinator_hooks() {
    engine::Coordinator::Hooks hooks;
    hooks.prepare_replay = prepare_replay_head;
    hooks.retry_completion = [this](const store::RecordId& id, std::int64_t token,
                                    const engine::RoutePolicy& route,
                                    const store::StoredResponse& answer) {
      return completions.retry(id, token, route, answer);
    };
    return hooks;
  }

  mutable std::mutex mu_;
  std::shared_ptr<const Settings> settings_;
  std::string store_problem_ = "not prepared yet";
};

}  // namespace idemproxy::http
