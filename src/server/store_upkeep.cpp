// The store's upkeep while the server runs: preparing it (migrations, with backoff,
// while /readyz says 503), then garbage collection and the records gauges.
#include "server/server_impl.hpp"

namespace idemproxy::http {
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
asio::awaitable<void> ProxyServer::Impl::collect_garbage() {
  asio::steady_timer timer(io);
  for (;;) {
    const auto settings = runtime.settings();
    const auto gc = settings->config.gc;
    if (gc.interval.count() <= 0) co_return;
    const auto tombstones = engine::tombstone_routes(settings->config.routes);
    timer.expires_after(gc.interval);
    co_await timer.async_wait(use_nothrow);
    if (runtime.draining) co_return;
    auto& store = runtime.record_store;
    // Filled in place: a non-trivially-destructible result would be a temporary in
    // the co_await expression, which GCC 12 destroys twice (docs/DEVELOPMENT.md).
    ops::Collected c;
    co_await runtime.blocking([&store, &gc, &tombstones, &c] {
      c = ops::collect_expired(store, gc.batch_size, gc.max_batches, tombstones);
      return true;
    });
    if (c.deleted > 0) {
      runtime.metrics.count_gc_deleted(static_cast<std::uint64_t>(c.deleted));
      spdlog::info("gc: deleted {} expired record(s)", c.deleted);
    }
    if (c.tombstoned > 0) {
      runtime.metrics.count_gc_tombstoned(static_cast<std::uint64_t>(c.tombstoned));
      spdlog::info("gc: kept {} tombstone(s): answers past ttl dropped", c.tombstoned);
    }
  }
}

// Every 10 s, the store's count of indeterminate records for the
// idemproxy_records_indeterminate gauge (migration 007's partial index makes it cheap).
// A failed count leaves the last figure; the store's errors are counted elsewhere.
asio::awaitable<void> ProxyServer::Impl::sample_records() {
  asio::steady_timer timer(io);
  auto& store = runtime.record_store;
  for (;;) {
    std::optional<std::int64_t> n;
    co_await runtime.blocking([&store, &n] {
      auto counted = store.count_indeterminate();
      if (counted.ok()) n = counted.value();
      return true;
    });
    if (n) runtime.metrics.set_indeterminate_records(*n);
    timer.expires_after(std::chrono::seconds{10});
    co_await timer.async_wait(use_nothrow);
    if (runtime.draining) co_return;
  }
}

std::optional<std::string> ProxyServer::Impl::try_prepare() {
  try {
    prepare_store();
    return std::nullopt;
  } catch (const std::exception& e) {
    return one_line(e.what());
  }
}

void ProxyServer::Impl::note_not_ready(int attempt, const std::string& error) {
  runtime.set_store_problem(error);
  spdlog::warn("store: not ready (attempt {}): {}; retrying in {} ms", attempt, error,
               backoff.count());
}

// Retries prepare_store on the database pool with backoff (250 ms doubling to 5 s),
// logging each try, so a proxy started before PostgreSQL becomes ready without a
// restart. The notification listener and GC start only once the store is prepared.
asio::awaitable<void> ProxyServer::Impl::prepare() {
  asio::steady_timer pause(io);
  for (int attempt = 2; prepare_store; ++attempt) {
    pause.expires_after(backoff);
    co_await pause.async_wait(use_nothrow);
    if (runtime.draining) co_return;
    auto run_once = [this]() -> asio::awaitable<std::optional<std::string>> {
      co_return try_prepare();
    };
    const auto on_pool = runtime.db_pool.get_executor();
    const auto error = co_await asio::co_spawn(on_pool, run_once(), asio::use_awaitable);
    if (!error) {
      spdlog::info("store: ready after {} attempts", attempt);
      break;
    }
    backoff = std::min(backoff * 2, std::chrono::milliseconds{5000});
    note_not_ready(attempt, *error);
  }
  runtime.set_store_problem("");
  runtime.store_prepared = true;
  store::Store::Watchers watchers;
  watchers.purged = [this](const store::RecordId& id) { runtime.coordinator.forget(id); };
  watchers.finished = [this](const store::RecordId& id) {
    runtime.coordinator.finished_elsewhere(id);
  };
  watchers.resumed = [this] { runtime.coordinator.announcements_resumed(); };
  runtime.record_store.watch(std::move(watchers));
  asio::co_spawn(io, sample_records(), log_exception);
  co_await collect_garbage();
}

}  // namespace idemproxy::http
