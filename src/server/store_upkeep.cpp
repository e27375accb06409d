#include "server/store_upkeep.hpp"

#include <spdlog/spdlog.h>

#include "idemproxy/ops/gc.hpp"
#include "proxy/remote_feed.hpp"
#include "server/listener.hpp"

namespace idemproxy::server {
namespace {

// libpq's messages span lines ("...refused\n\tIs the server running..."): one log line.
std::string one_line(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const bool space = c == '\n' || c == '\t' || c == ' ';
    if (!space) {
      out += c;
    } else if (!out.empty() && out.back() != ' ') {
      out += ' ';
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace

// Deletes expired records in bounded batches, every gc.interval, off the I/O threads.
asio::awaitable<void> StoreUpkeep::collect_garbage() {
  asio::steady_timer timer(io_);
  for (;;) {
    const auto settings = runtime_.settings();
    const auto gc = settings->config.gc;
    if (gc.interval.count() <= 0) co_return;
    const auto tombstones = engine::tombstone_routes(settings->config.routes);
    timer.expires_after(gc.interval);
    co_await timer.async_wait(use_nothrow);
    if (runtime_.draining) co_return;
    auto& store = runtime_.record_store;
    // Filled in place: a non-trivially-destructible result would be a temporary in
    // the co_await expression, which GCC 12 destroys twice (docs/DEVELOPMENT.md).
    ops::Collected c;
    co_await runtime_.blocking([&store, &gc, &tombstones, &c] {
      c = ops::collect_expired(store, gc.batch_size, gc.max_batches, tombstones);
      return true;
    });
    if (c.deleted > 0) {
      runtime_.metrics.count_gc_deleted(static_cast<std::uint64_t>(c.deleted));
      spdlog::info("gc: deleted {} expired record(s)", c.deleted);
    }
    if (c.tombstoned > 0) {
      runtime_.metrics.count_gc_tombstoned(static_cast<std::uint64_t>(c.tombstoned));
      spdlog::info("gc: kept {} tombstone(s): answers past ttl dropped", c.tombstoned);
    }
    if (c.swept > 0) {
      runtime_.metrics.count_gc_swept(static_cast<std::uint64_t>(c.swept));
      spdlog::info("gc: deleted {} chunk(s) that no record reads", c.swept);
    }
  }
}

// Every 10 s, the store's count of indeterminate records for the
// idemproxy_records_indeterminate gauge (migration 007's partial index makes it cheap).
// A failed count leaves the last figure; the store's errors are counted elsewhere.
asio::awaitable<void> StoreUpkeep::sample_records() {
  asio::steady_timer timer(io_);
  auto& store = runtime_.record_store;
  for (;;) {
    std::optional<std::int64_t> n;
    co_await runtime_.blocking([&store, &n] {
      auto counted = store.count_indeterminate();
      if (counted.ok()) n = counted.value();
      return true;
    });
    if (n) runtime_.metrics.set_indeterminate_records(*n);
    timer.expires_after(std::chrono::seconds{10});
    co_await timer.async_wait(use_nothrow);
    if (runtime_.draining) co_return;
  }
}

void StoreUpkeep::try_now() {
  if (!prepare_) return;
  if (const auto error = try_prepare()) {
    note_not_ready(1, *error);
  } else {
    prepare_ = nullptr;
  }
}

std::optional<std::string> StoreUpkeep::try_prepare() {
  try {
    prepare_();
    return std::nullopt;
  } catch (const std::exception& e) {
    return one_line(e.what());
  }
}

void StoreUpkeep::note_not_ready(int attempt, const std::string& error) {
  runtime_.set_store_problem(error);
  spdlog::warn("store: not ready (attempt {}): {}; retrying in {} ms", attempt, error,
               backoff_.count());
}

// Retries prepare_ on the database pool with backoff (250 ms doubling to 5 s),
// logging each try, so a proxy started before PostgreSQL becomes ready without a
// restart. The notification listener and GC start only once the store is prepared.
asio::awaitable<void> StoreUpkeep::run() {
  asio::steady_timer pause(io_);
  for (int attempt = 2; prepare_; ++attempt) {
    pause.expires_after(backoff_);
    co_await pause.async_wait(use_nothrow);
    if (runtime_.draining) co_return;
    auto run_once = [this]() -> asio::awaitable<std::optional<std::string>> {
      co_return try_prepare();
    };
    const auto on_pool = runtime_.db_pool.get_executor();
    const auto error = co_await asio::co_spawn(on_pool, run_once(), asio::use_awaitable);
    if (!error) {
      spdlog::info("store: ready after {} attempts", attempt);
      break;
    }
    backoff_ = std::min(backoff_ * 2, std::chrono::milliseconds{5000});
    note_not_ready(attempt, *error);
  }
  runtime_.set_store_problem("");
  runtime_.store_prepared = true;
  runtime_.record_store.watch(proxy::announcement_watchers(runtime_));
  asio::co_spawn(io_, sample_records(), log_exception);
  co_await collect_garbage();
}

}  // namespace idemproxy::server
