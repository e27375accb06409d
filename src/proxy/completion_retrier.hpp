#pragma once
// Completions that could not be written (store unreachable) are retried in the
// background rather than dropped. The client already has its answer; until the
// completion lands, retries see the key in flight. A completion that can never be
// written leaves the record in flight: it is never completed with a wrong body.
// A streamed answer whose chunks the store failed to take hands them over with its
// completion: they are appended first, in order, then the record completed.
// Every byte held for the store is counted against one budget per instance
// (server.max_unstored): the answers retried here, and the chunks a stream holds
// while the store fails (reserve()).
#include <atomic>
#include <cstddef>
#include <vector>

#include "http/beast.hpp"
#include "idemproxy/engine/coordinator.hpp"
#include "idemproxy/store/claims.hpp"
#include "proxy/http_names.hpp"

namespace idemproxy::proxy {

class CompletionRetrier {
 public:
  /// `coordinator` may be constructed after this; it is used only once retry() runs.
  CompletionRetrier(engine::Coordinator& coordinator, store::Claims& claims,
                    asio::thread_pool& db_pool, std::size_t max_pending_bytes)
      : coordinator_(coordinator),
        claims_(claims),
        db_pool_(db_pool),
        max_pending_bytes_(max_pending_bytes) {}

  /// Starts retrying; false (and nothing retried) when the pending budget is spent.
  /// `kept`: the answer in the form its record keeps (engine::Engine::keep).
  bool retry(store::RecordId id, std::int64_t token, engine::RoutePolicy route,
             engine::KeptAnswer kept) {
    return retry(std::move(id), token, std::move(route), std::move(kept), {}, 0);
  }
  /// The same for a streamed answer: `unstored`, its chunks the store has not taken
  /// yet, go first. `reserved` bytes of the budget (reserve()) pass to the retry;
  /// it takes what more it needs. False: nothing retried, and `reserved` released.
  bool retry(store::RecordId id, std::int64_t token, engine::RoutePolicy route,
             engine::KeptAnswer kept, std::vector<store::Chunk> unstored, std::size_t reserved);

  /// Takes `bytes` of the budget for a stream's chunks held in memory; false (and
  /// nothing taken) when that would spend it.
  bool reserve(std::size_t bytes);
  void release(std::size_t bytes) { pending_bytes_.fetch_sub(bytes); }

  std::size_t pending() const { return pending_.load(); }

 private:
  asio::awaitable<void> run(store::RecordId id, std::int64_t token, engine::RoutePolicy route,
                            engine::KeptAnswer kept, std::vector<store::Chunk> unstored,
                            std::size_t bytes);

  engine::Coordinator& coordinator_;
  store::Claims& claims_;
  asio::thread_pool& db_pool_;
  std::size_t max_pending_bytes_;
  std::atomic<std::size_t> pending_{0};
  std::atomic<std::size_t> pending_bytes_{0};
};

}  // namespace idemproxy::proxy
