// The one-shot verbs: check-config, policy, migrate, gc, keys show|purge.
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>

#include "cli/cli.hpp"
#include "idemproxy/config/config.hpp"
#include "idemproxy/ops/gc.hpp"
#include "idemproxy/ops/records.hpp"
#include "idemproxy/store/migrations.hpp"
#include "idemproxy/store/pg_store.hpp"
#include "proxy/policy_document.hpp"

namespace idemproxy::cli {
namespace {

config::Config load_or_exit(const Args& args) { return config::load_config(args.config); }

// The one-shot verbs act on the durable store only.
store::PgStore open_pg(const config::Config& c) {
  if (c.store.kind != config::StoreConfig::Kind::postgres) {
    throw UsageError(
        "this command needs store.postgres; the memory store lives inside one process");
  }
  return store::PgStore(pg_options(c, 1));
}

}  // namespace

store::PgOptions pg_options(const config::Config& c, int pool_size) {
  store::PgOptions o{c.store.dsn,
                     pool_size,
                     c.store.statement_timeout,
                     c.store.transaction_pooling,
                     nullptr,
                     c.store.batch_max,
                     c.store.citus,
                     c.store.batch_wait,
                     c.store.defer_chunk_flush};
  if (!c.store.encryption_key_file.empty()) {
    o.sealer =
        std::make_shared<const store::Sealer>(store::read_key_file(c.store.encryption_key_file));
  }
  return o;
}

int check_config(const Args& args) {
  const auto c = load_or_exit(args);
  for (const auto& w : c.warnings) std::cerr << "warning: " << w << "\n";
  std::cout << args.config << ": ok (" << c.routes.size() << " route"
            << (c.routes.size() == 1 ? "" : "s") << ", upstream " << c.upstream.url << ")\n";
  return kOk;
}

int print_policy(const Args& args) {
  const auto published = proxy::publish_policy(load_or_exit(args));
  std::cout << (args.html ? published.html : published.json);
  return kOk;
}

int migrate(const Args& args) {
  const auto c = load_or_exit(args);
  if (c.store.kind != config::StoreConfig::Kind::postgres) {
    std::cout << "memory store: nothing to migrate\n";
    return kOk;
  }
  const auto applied = store::apply_migrations(c.store.dsn, c.store.citus);
  for (const auto& name : applied) std::cout << "applied " << name << "\n";
  std::cout << (applied.empty() ? "schema is up to date\n" : "migrations complete\n");
  return kOk;
}

int gc(const Args& args) {
  const auto config = load_or_exit(args);
  auto pg = open_pg(config);
  // Until a batch comes back short: max_batches only bounds one in-process run.
  const ops::Collected c = ops::collect_expired(pg, 1000, std::numeric_limits<int>::max(),
                                                engine::tombstone_routes(config.routes));
  const std::int64_t total = c.deleted;
  if (c.error) {
    std::cerr << "gc failed after deleting " << total << ": " << *c.error << "\n";
    return kRuntimeError;
  }
  std::cout << "deleted " << total << " expired record" << (total == 1 ? "" : "s") << "\n";
  if (c.tombstoned > 0) {
    std::cout << "kept " << c.tombstoned << " tombstone" << (c.tombstoned == 1 ? "" : "s")
              << " (answers past ttl dropped)\n";
  }
  if (c.swept > 0) {
    std::cout << "deleted " << c.swept << " chunk" << (c.swept == 1 ? "" : "s")
              << " no record reads\n";
  }
  return kOk;
}

namespace {
// Prints an operator action's JSON: stdout on success, stderr otherwise.
int report(const ops::RecordAction& action) {
  if (action.status == ops::RecordAction::Status::ok) {
    std::cout << action.body.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return kOk;
  }
  std::cerr << action.body.value("error", std::string("failed")) << "\n";
  return kRuntimeError;
}
}  // namespace

int keys_show(const Args& args) {
  auto pg = open_pg(load_or_exit(args));
  return report(ops::show_record(pg, {args.scope, *args.key}));
}

int keys_purge(const Args& args) {
  auto pg = open_pg(load_or_exit(args));
  return report(ops::purge_record(pg, {args.scope, *args.key}, "the CLI"));
}

int keys_resolve(const Args& args) {
  auto pg = open_pg(load_or_exit(args));
  return report(ops::resolve_record(pg, {args.scope, *args.key}, "the CLI"));
}

int keys_list(const Args& args) {
  auto pg = open_pg(load_or_exit(args));
  return report(ops::list_records(pg, args.state, args.limit));
}

}  // namespace idemproxy::cli
