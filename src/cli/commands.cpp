// The one-shot verbs: check-config, migrate, gc, keys show|purge.
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/cli.hpp"
#include "idemproxy/config/config.hpp"
#include "idemproxy/store/migrations.hpp"
#include "idemproxy/store/pg_store.hpp"

namespace idemproxy::cli {
namespace {

config::Config load_or_exit(const Args& args) { return config::load_config(args.config); }

// The one-shot verbs act on the durable store only.
store::PgStore open_pg(const config::Config& c) {
  if (c.store.kind != config::StoreConfig::Kind::postgres) {
    throw UsageError(
        "this command needs store.postgres; the memory store lives inside one process");
  }
  return store::PgStore({c.store.dsn, 1, c.store.statement_timeout, c.store.transaction_pooling});
}

std::string iso8601(TimePoint t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

int check_config(const Args& args) {
  const auto c = load_or_exit(args);
  std::cout << args.config << ": ok (" << c.routes.size() << " route"
            << (c.routes.size() == 1 ? "" : "s") << ", upstream " << c.upstream.url << ")\n";
  return kOk;
}

int migrate(const Args& args) {
  const auto c = load_or_exit(args);
  if (c.store.kind != config::StoreConfig::Kind::postgres) {
    std::cout << "memory store: nothing to migrate\n";
    return kOk;
  }
  const auto applied = store::apply_migrations(c.store.dsn);
  for (const auto& name : applied) std::cout << "applied " << name << "\n";
  std::cout << (applied.empty() ? "schema is up to date\n" : "migrations complete\n");
  return kOk;
}

int gc(const Args& args) {
  auto pg = open_pg(load_or_exit(args));
  std::int64_t total = 0;
  for (;;) {
    auto batch = pg.delete_expired(1000);
    if (!batch.ok()) {
      std::cerr << "gc failed after deleting " << total << ": " << batch.error().detail << "\n";
      return kRuntimeError;
    }
    total += batch.value();
    if (batch.value() < 1000) break;
  }
  std::cout << "deleted " << total << " expired record" << (total == 1 ? "" : "s") << "\n";
  return kOk;
}

int keys_show(const Args& args) {
  auto pg = open_pg(load_or_exit(args));
  auto found = pg.find({args.scope, *args.key});
  if (!found.ok()) {
    std::cerr << "store error: " << found.error().detail << "\n";
    return kRuntimeError;
  }
  if (!found.value()) {
    std::cerr << "no record for key \"" << *args.key << "\" in scope \"" << args.scope << "\"\n";
    return kRuntimeError;
  }
  const auto& r = *found.value();
  nlohmann::json out = {{"scope", r.id.scope},
                        {"key", r.id.key},
                        {"state", store::to_string(r.state)},
                        {"expired", r.expired},
                        {"fingerprint", r.fingerprint},
                        {"fencing_token", r.token},
                        {"route", r.route},
                        {"method", r.method},
                        {"target", r.target},
                        {"created_at", iso8601(r.created_at)},
                        {"expires_at", iso8601(r.expires_at)}};
  if (r.state == store::RecordState::in_flight || r.state == store::RecordState::indeterminate) {
    out["locked_until"] = iso8601(r.locked_until);
    out["stale"] = r.stale;
  }
  if (r.response) {
    nlohmann::json headers = nlohmann::json::array();
    for (const auto& h : r.response->headers) headers.push_back({h.name, h.value});
    out["response"] = {{"status", r.response->status},
                       {"headers", headers},
                       {"body_bytes", r.response->body.size()}};
  }
  std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  return kOk;
}

int keys_purge(const Args& args) {
  auto pg = open_pg(load_or_exit(args));
  auto purged = pg.purge({args.scope, *args.key});
  if (!purged.ok()) {
    std::cerr << "store error: " << purged.error().detail << "\n";
    return kRuntimeError;
  }
  if (!purged.value()) {
    std::cerr << "no record for key \"" << *args.key << "\" in scope \"" << args.scope << "\"\n";
    return kRuntimeError;
  }
  std::cout << "purged key \"" << *args.key << "\" in scope \"" << args.scope << "\"\n";
  return kOk;
}

int keys_resolve(const Args& args) {
  auto pg = open_pg(load_or_exit(args));
  auto resolved = pg.resolve({args.scope, *args.key});
  if (!resolved.ok()) {
    std::cerr << "store error: " << resolved.error().detail << "\n";
    return kRuntimeError;
  }
  if (!resolved.value()) {
    std::cerr << "no indeterminate or stale record for key \"" << *args.key << "\" in scope \""
              << args.scope << "\"\n";
    return kRuntimeError;
  }
  std::cout << "resolved key \"" << *args.key << "\" in scope \"" << args.scope
            << "\": released, the next request with it executes\n";
  return kOk;
}

}  // namespace idemproxy::cli
