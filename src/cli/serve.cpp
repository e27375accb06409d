#include <spdlog/spdlog.h>

#include <algorithm>
#include <stdexcept>
#include <string_view>

#include "cli/cli.hpp"
#include "idemproxy/config/config.hpp"
#include "idemproxy/ops/logging.hpp"
#include "idemproxy/server/proxy_server.hpp"
#include "idemproxy/store/memory_store.hpp"
#include "idemproxy/store/migrations.hpp"
#include "idemproxy/store/pg_store.hpp"

namespace idemproxy::cli {
namespace {

// Whether this binary was optimised by a training load's profile (scripts/pgo.sh), and
// which: named when the proxy starts.
#ifdef IDEMPROXY_PGO_ID
constexpr std::string_view kBuild = "profile-guided build, profile " IDEMPROXY_PGO_ID;
#else
constexpr std::string_view kBuild = "built without a profile";
#endif

}  // namespace

int serve(const Args& args) {
  const config::Config cfg = config::load_config(args.config);
  ops::configure_logging(cfg.log_level, cfg.log_format);
  ops::configure_access_log(
      cfg.log_access_buffer,
      std::chrono::duration_cast<std::chrono::milliseconds>(cfg.log_access_flush));
  for (const auto& w : cfg.warnings) spdlog::warn("config: {}", w);
  ops::Metrics metrics({IDEMPROXY_PROJECT_VERSION, IDEMPROXY_BUILD_REVISION},
                       std::chrono::duration<double>(cfg.upstream.timeout).count());
  SystemClock clock;
  std::unique_ptr<store::Store> store;
  std::function<void()> prepare;
  if (cfg.store.kind == config::StoreConfig::Kind::memory) {
    spdlog::warn("store: memory (single instance, not durable; for local development only)");
    store = std::make_unique<store::MemoryStore>(clock);
  } else {
    if (!args.no_migrate) {
      // Applied by the server, retried until PostgreSQL answers (/readyz says 503).
      prepare = [dsn = cfg.store.dsn, citus = cfg.store.citus] {
        for (const auto& name : store::apply_migrations(dsn, citus)) {
          spdlog::info("migration applied: {}", name);
        }
      };
    }
    // A quota the database cannot count (migration 011 not applied) keeps the proxy
    // unready, saying why.
    if (std::any_of(cfg.routes.begin(), cfg.routes.end(),
                    [](const engine::RoutePolicy& r) { return r.quota.any(); })) {
      prepare = [migrate = std::move(prepare), &store] {
        if (migrate) migrate();
        const auto counts = store->counts_quotas();
        if (!counts.ok()) throw std::runtime_error(counts.error().detail);
        if (!counts.value()) throw std::runtime_error(store::kQuotaUncounted);
      };
    }
    auto options = pg_options(cfg, cfg.store.pool_size);
    if (options.sealer) {
      spdlog::info("store.encryption: sealing records with key \"{}\"",
                   options.sealer->current_id());
    }
    store = std::make_unique<store::PgStore>(std::move(options));
  }
  trace::Tracing tracing(cfg.tracing, metrics, IDEMPROXY_PROJECT_VERSION);
  if (!cfg.tracing.otlp_endpoint.empty()) {
    spdlog::info("tracing: exporting spans to {} (sample_ratio {})", cfg.tracing.otlp_endpoint,
                 cfg.tracing.sample_ratio);
  }
  server::ProxyServer server(cfg, *store, metrics, std::move(prepare), &tracing);
  server.start();
  spdlog::info("idemproxy {} protecting {} with {} route(s) ({})", IDEMPROXY_VERSION,
               cfg.upstream.url, cfg.routes.size(), kBuild);
  const int code = server.run();
  ops::flush_access_log();
  return code;
}

}  // namespace idemproxy::cli
