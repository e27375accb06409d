#pragma once
// Completions that could not be written (store unreachable) are retried in the
// background rather than dropped. The client already has its answer; until the
// completion lands, retries see the key in flight. A completion that can never be
// written leaves the record in flight: it is never completed with a wrong body.
#include <atomic>
#include <cstddef>

#include "http/beast.hpp"
#include "idemproxy/engine/coordinator.hpp"
#include "proxy/http_names.hpp"

namespace idemproxy::proxy {

class CompletionRetrier {
 public:
  /// `coordinator` may be constructed after this; it is used only once retry() runs.
  CompletionRetrier(engine::Coordinator& coordinator, asio::thread_pool& db_pool,
                    std::size_t max_pending_bytes)
      : coordinator_(coordinator), db_pool_(db_pool), max_pending_bytes_(max_pending_bytes) {}

  /// Starts retrying; false (and nothing retried) when the pending budget is spent.
  bool retry(store::RecordId id, std::int64_t token, engine::RoutePolicy route,
             store::StoredResponse answer);
  std::size_t pending() const { return pending_.load(); }

 private:
  asio::awaitable<void> run(store::RecordId id, std::int64_t token, engine::RoutePolicy route,
                            store::StoredResponse answer, std::size_t bytes);

  engine::Coordinator& coordinator_;
  asio::thread_pool& db_pool_;
  std::size_t max_pending_bytes_;
  std::atomic<std::size_t> pending_{0};
  std::atomic<std::size_t> pending_bytes_{0};
};

}  // namespace idemproxy::proxy
