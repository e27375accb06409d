#include "proxy/completion_retrier.hpp"

#include <spdlog/spdlog.h>

namespace idemproxy::proxy {

bool CompletionRetrier::reserve(std::size_t bytes) {
  if (pending_bytes_.fetch_add(bytes) + bytes > max_pending_bytes_) {
    pending_bytes_.fetch_sub(bytes);
    return false;
  }
  return true;
}

bool CompletionRetrier::retry(store::RecordId id, std::int64_t token, engine::RoutePolicy route,
                              engine::KeptAnswer kept, std::vector<store::Chunk> unstored,
                              std::size_t reserved) {
  std::size_t bytes = kept.answer.body.size() + 1024;
  for (const store::Chunk& chunk : unstored) bytes += chunk.bytes.size();
  if (bytes > reserved && !reserve(bytes - reserved)) {
    release(reserved);
    return false;
  }
  bytes = std::max(bytes, reserved);
  ++pending_;
  asio::co_spawn(
      db_pool_.get_executor(),
      run(std::move(id), token, std::move(route), std::move(kept), std::move(unstored), bytes),
      asio::detached);
  return true;
}

asio::awaitable<void> CompletionRetrier::run(store::RecordId id, std::int64_t token,
                                             engine::RoutePolicy route, engine::KeptAnswer kept,
                                             std::vector<store::Chunk> unstored,
                                             std::size_t bytes) {
  // Retry for as long as the record can matter: until its TTL would end.
  const auto deadline = std::chrono::steady_clock::now() + route.ttl;
  Duration backoff{100};
  // Named first: GCC 12 may destroy a temporary inside a co_await expression twice.
  const auto ex = co_await asio::this_coro::executor;
  asio::steady_timer timer(ex);
  engine::Finish finish = engine::Finish::store_failed;
  std::size_t appended = 0;
  while (finish == engine::Finish::store_failed && std::chrono::steady_clock::now() < deadline) {
    timer.expires_after(backoff);
    co_await timer.async_wait(use_nothrow);
    backoff = std::min(backoff * 2, Duration{5000});
    // Already on the database pool: the store calls may block here.
    // Appends are not fenced (a chunk of a token that lost the record is never read):
    // the completion after them is.
    while (appended < unstored.size() &&
           claims_.append(id, token, unstored[appended].seq, unstored[appended].bytes).ok()) {
      ++appended;
    }
    if (appended == unstored.size()) finish = coordinator_.finish_later(id, token, kept);
  }
  if (finish == engine::Finish::store_failed) {
    spdlog::error("a completion was never written; the record stays in flight");
  } else {
    spdlog::info("a delayed completion was written ({})",
                 finish == engine::Finish::fenced ? "fenced: another holder took over" : "ok");
    coordinator_.completed_later(id);
  }
  release(bytes);
  --pending_;
}

}  // namespace idemproxy::proxy
