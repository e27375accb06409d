#include "idemproxy/store/migrations.hpp"

#include <pqxx/pqxx>
#include <stdexcept>

namespace idemproxy::store {
namespace {
// Arbitrary but fixed: every idemproxy instance serialises migrations on it.
constexpr long long kMigrationLock = 0x1de4'0001;
}  // namespace

std::vector<std::string> apply_migrations(const std::string& dsn, std::optional<bool> citus) {
  // One transaction under a transaction-scoped advisory lock: instances starting at
  // once apply each migration exactly once, and it works through PgBouncer too.
  pqxx::connection conn(dsn);
  pqxx::work tx(conn);
  tx.exec("SELECT pg_advisory_xact_lock(" + std::to_string(kMigrationLock) + ")");
  tx.exec(
      "CREATE TABLE IF NOT EXISTS idemproxy_schema_migrations ("
      " name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())");
  std::vector<std::string> applied;
  for (const auto& m : embedded_migrations()) {
    if (!tx.exec_params("SELECT 1 FROM idemproxy_schema_migrations WHERE name = $1", m.name)
             .empty()) {
      continue;
    }
    tx.exec(m.sql);
    tx.exec_params("INSERT INTO idemproxy_schema_migrations (name) VALUES ($1)", m.name);
    applied.push_back(m.name);
  }
  const bool has_citus =
      tx.exec("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')")[0][0]
          .as<bool>();
  if (citus.value_or(false) && !has_citus) {
    throw std::runtime_error(
        "store.postgres.citus is true, but this database has no citus extension (run CREATE "
        "EXTENSION citus on the coordinator, with citus in shared_preload_libraries)");
  }
  // Hashed on key, not scope: an empty scope is common and would put every record on
  // one shard. The primary key (scope, key) includes the distribution column, as
  // Citus requires of a unique constraint.
  if (citus.value_or(has_citus) && tx.exec("SELECT 1 FROM pg_dist_partition"
                                           " WHERE logicalrelid = 'idempotency_records'::regclass")
                                       .empty()) {
    tx.exec("SELECT create_distributed_table('idempotency_records', 'key')");
    applied.emplace_back("citus: idempotency_records distributed by key");
  }
  // A streamed answer's chunks live on their record's shard (co-located, by key), so
  // every chunk statement is routed to one worker.
  if (citus.value_or(has_citus) && tx.exec("SELECT 1 FROM pg_dist_partition"
                                           " WHERE logicalrelid = 'idempotency_chunks'::regclass")
                                       .empty()) {
    tx.exec(
        "SELECT create_distributed_table('idempotency_chunks', 'key',"
        " colocate_with => 'idempotency_records')");
    applied.emplace_back("citus: idempotency_chunks distributed by key, beside their records");
  }
  tx.commit();
  return applied;
}

}  // namespace idemproxy::store
