#include "idemproxy/store/migrations.hpp"

#include <pqxx/pqxx>

namespace idemproxy::store {
namespace {
// Arbitrary but fixed: every idemproxy instance serialises migrations on it.
constexpr long long kMigrationLock = 0x1de4'0001;
}  // namespace

std::vector<std::string> apply_migrations(const std::string& dsn) {
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
  tx.commit();
  return applied;
}

}  // namespace idemproxy::store
