#pragma once
// The store's upkeep while the server runs: preparing it (migrations, with backoff,
// while /readyz says 503), then its watchers, garbage collection and the records
// gauge.
#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "server/http_names.hpp"
#include "server/server_runtime.hpp"

namespace idemproxy::server {

class StoreUpkeep {
 public:
  /// `prepare` readies the store and throws while it cannot; empty: nothing to do.
  StoreUpkeep(asio::io_context& io, ServerRuntime& runtime, std::function<void()> prepare)
      : io_(io), runtime_(runtime), prepare_(std::move(prepare)) {}

  /// The first try, on the calling thread, before the listeners open: with
  /// PostgreSQL up, the store is ready before the first request.
  void try_now();
  /// Later tries on the database pool with backoff (250 ms doubling to 5 s); once the
  /// store is prepared, its watchers, the records gauge, and GC until the drain.
  asio::awaitable<void> run();

 private:
  std::optional<std::string> try_prepare();
  void note_not_ready(int attempt, const std::string& error);
  asio::awaitable<void> collect_garbage();
  asio::awaitable<void> sample_records();

  asio::io_context& io_;
  ServerRuntime& runtime_;
  std::function<void()> prepare_;  // empty once the store is prepared
  std::chrono::milliseconds backoff_{250};
};

}  // namespace idemproxy::server
