#include "idemproxy/http/proxy_server.hpp"

#include <spdlog/spdlog.h>

#include <csignal>
#include <thread>

#include "http/tls.hpp"
#include "idemproxy/ops/gc.hpp"
#include "idemproxy/ops/records.hpp"
#include "proxy/policy_document.hpp"
#include "proxy/serve.hpp"
#include "server/admin.hpp"
#include "server/fd_limit.hpp"
#include "server/listener.hpp"
#include "server/session_tracker.hpp"

namespace idemproxy::http {

namespace {

// Database-pool threads. With PostgreSQL: one per connection, plus room for a full
// batch of blocking calls to queue for the next free connection (claims and
// completions of requests skip this pool: PgStore queues them itself, see
// Runtime::queued; background completion retries and releases still wait here).
int db_threads(const config::StoreConfig& store) {
  if (store.kind != config::StoreConfig::Kind::postgres) return 1;
  return store.pool_size + (store.batch_max > 1 ? store.batch_max : 0);
}

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

}  // namespace

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

void ProxyServer::Impl::bind(tcp::acceptor& acceptor, const config::Endpoint& at,
                             const char* what) {
  try {
    tcp::resolver resolver(io);
    const auto endpoint = resolver.resolve(at.host, std::to_string(at.port))->endpoint();
    acceptor.open(endpoint.protocol());
    acceptor.set_option(asio::socket_base::reuse_address(true));
    acceptor.bind(endpoint);
    acceptor.listen(asio::socket_base::max_listen_connections);
    const auto bound = acceptor.local_endpoint();
    spdlog::info("{} listening on {}:{}", what, bound.address().to_string(), bound.port());
  } catch (const boost::system::system_error& e) {
    // Not e.what(): it ends in the Boost header and line that threw. The code's
    // message ("Address already in use") is what an operator acts on.
    throw std::runtime_error(std::string("cannot listen on ") + at.host + ":" +
                             std::to_string(at.port) + " (" + what + "): " + e.code().message());
  }
}

asio::awaitable<void> ProxyServer::Impl::accept_clients() {
  for (;;) {
    // Named, not a temporary: GCC 12 destroys temporaries in co_await expressions twice.
    // A strand per connection with several I/O threads; with one, it is pure cost.
    const asio::any_io_executor ex = threads > 1 ? asio::any_io_executor(asio::make_strand(io))
                                                 : asio::any_io_executor(io.get_executor());
    auto [ec, socket] = co_await proxy_acceptor.async_accept(ex, use_nothrow);
    if (ec) {
      if (!proxy_acceptor.is_open()) co_return;
      if (const auto n = accept_error_log.admit()) {
        spdlog::warn("accept failed: {} ({} since the last such line)", ec.message(), n);
      }
      asio::steady_timer pause(io, std::chrono::milliseconds{50});  // e.g. out of descriptors
      co_await pause.async_wait(use_nothrow);
      continue;
    }
    beast::error_code ignored;
    const std::size_t limit =
        std::min(runtime.settings()->config.server.max_connections, connection_cap);
    // At the limit, an idle connection (waiting for its next request) makes room for
    // a new client, as nginx reuses idle keep-alive connections; its close takes a
    // moment, and the reserve in connection_capacity covers the overlap.
    bool refuse = false;
    if (tracker.size() >= limit) {
      if (tracker.reclaim_idle(1) == 0) {
        refuse = true;
      } else if (const auto n = reclaim_log.admit()) {
        spdlog::warn(
            "{} client connections open (server.max_connections or the open-files "
            "limit): closing idle ones for new clients ({} since the last such line)",
            limit, n);
      }
    }
    if (refuse) {
      // At the limit with nothing idle: refuse at once rather than queue work we
      // cannot serve.
      runtime.metrics.count_refused_connection();
      if (const auto n = refused_log.admit()) {
        spdlog::warn(
            "connection refused: {} client connections open (server.max_connections "
            "or the open-files limit); {} refused since the last such line",
            limit, n);
      }
      socket.close(ignored);
      continue;
    }
    socket.set_option(tcp::no_delay(true), ignored);
    auto conn = std::make_shared<ClientConnection>(std::move(socket), tls.get());
    asio::co_spawn(conn->stream.get_executor(), serve_client(conn, frontend, tracker),
                   log_exception);
  }
}

asio::awaitable<void> ProxyServer::Impl::accept_admin() {
  for (;;) {
    const auto strand = asio::make_strand(io);
    auto [ec, socket] = co_await admin_acceptor.async_accept(strand, use_nothrow);
    if (ec) {
      if (!admin_acceptor.is_open()) co_return;
      continue;
    }
    auto ex = socket.get_executor();
    asio::co_spawn(ex, serve_admin(std::move(socket), runtime), log_exception);
  }
}

std::optional<std::string> ProxyServer::Impl::reload() {
  const auto current = runtime.settings();
  try {
    config::Config next = config::load_config(current->config.path);
    for (const auto& w : next.warnings) spdlog::warn("reload: {}", w);
    const auto changed = config::restart_only_changes(current->config, next);
    if (!changed.empty()) {
      std::string names;
      for (const auto& n : changed) names += (names.empty() ? "" : ", ") + n;
      spdlog::warn(
          "reload: {} changed, which takes effect only after a restart; keeping the running "
          "values of every restart-only key",
          names);
      config::keep_restart_only(next, current->config);
    }
    if (tracing != nullptr) tracing->reload(next.tracing);
    runtime.replace_settings(make_settings(std::move(next)));
    runtime.metrics.count_reload(true);
    spdlog::info("reload: configuration reloaded from {}", current->config.path);
    return std::nullopt;
  } catch (const std::exception& e) {
    runtime.metrics.count_reload(false);
    spdlog::error("reload rejected, the previous configuration stays in force: {}", e.what());
    return std::string(e.what());
  }
}

asio::awaitable<void> ProxyServer::Impl::drain() {
  const auto timeout = runtime.settings()->config.server.drain_timeout;
  spdlog::info("draining: no new connections; waiting up to {} ms for {} connection(s)",
               timeout.count(), tracker.size());
  runtime.draining = true;
  beast::error_code ignored;
  proxy_acceptor.close(ignored);
  tracker.close_idle();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  asio::steady_timer tick(io);
  while (tracker.size() > 0 && std::chrono::steady_clock::now() < deadline) {
    tick.expires_after(std::chrono::milliseconds{20});
    co_await tick.async_wait(use_nothrow);
    tracker.close_idle();  // connections that finished a request since
  }
  if (tracker.size() > 0) {
    spdlog::warn(
        "drain timeout: {} connection(s) still busy; their claims are left to their leases",
        tracker.size());
  }
  admin_acceptor.close(ignored);
  io.stop();
}

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
    // the co_await expression, which GCC 12 destroys twice (README, Development).
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

asio::awaitable<void> ProxyServer::Impl::handle_signals() {
  for (;;) {
    auto [ec, signo] = co_await signals.async_wait(use_nothrow);
    if (ec) co_return;
    if (signo == SIGHUP) {
      reload();
      continue;
    }
    spdlog::info("received {}, shutting down", signo == SIGTERM ? "SIGTERM" : "SIGINT");
    co_await drain();
    co_return;
  }
}

ProxyServer::ProxyServer(config::Config config, store::Store& store, ops::Metrics& metrics,
                         std::function<void()> prepare_store, trace::Tracing* tracing)
    : impl_(std::make_unique<Impl>(std::move(config), store, metrics, std::move(prepare_store),
                                   tracing)) {}

ProxyServer::~ProxyServer() = default;

void ProxyServer::start() {
  // The first try runs here, before the listeners open: with PostgreSQL up, the
  // store is ready before the first request. Later tries run in prepare().
  if (impl_->prepare_store) {
    if (const auto error = impl_->try_prepare()) {
      impl_->note_not_ready(1, *error);
    } else {
      impl_->prepare_store = nullptr;
    }
  }
  const auto settings = impl_->runtime.settings();
  impl_->bind(impl_->proxy_acceptor, settings->config.listen, "proxy");
  impl_->bind(impl_->admin_acceptor, settings->config.admin_listen, "admin");
}

int ProxyServer::run() {
  auto& s = *impl_;
  // The acceptors are not thread-safe, and drain closes them: everything that
  // touches them runs on one strand (TSan found the race with server.threads > 1).
  asio::co_spawn(s.control, s.accept_clients(), log_exception);
  asio::co_spawn(s.control, s.accept_admin(), log_exception);
  asio::co_spawn(s.control, s.handle_signals(), log_exception);
  asio::co_spawn(s.control, s.prepare(), log_exception);  // then the notification listener and GC
  // Leases are at least 1s and renewed at a third of it: a 100 ms beat is on time.
  asio::co_spawn(s.control, renew_leases(s.runtime, std::chrono::milliseconds{100}), log_exception);
  std::vector<std::thread> extra;
  for (int i = 1; i < s.threads; ++i) extra.emplace_back([&s] { s.io.run(); });
  s.io.run();
  for (auto& t : extra) t.join();
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

}  // namespace idemproxy::http
