#include "idemproxy/store/migrations.hpp"

#include <pqxx/pqxx>

namespace idemproxy::store {
namespace {
// Arbitrary but fixed: every idemproxy instance serialises migrations on it.
constexpr long long kMigrationLock = 0x1de4'0001;
}  // namespace

std::vector<std::string> apply_migrations(const std::string& dsn) {
  pqxx::connection conn(dsn);
  {
    pqxx::nontransaction tx(conn);
    tx.exec("SELECT pg_advisory_lock(" + std::to_string(kMigrationLock) + ")");
  }
  std::vector<std::string> applied;
  try {
    {
      pqxx::work tx(conn);
      tx.exec(
          "CREATE TABLE IF NOT EXISTS idemproxy_schema_migrations ("
          " name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())");
      tx.commit();
    }
    for (const auto& m : embedded_migrations()) {
      pqxx::work tx(conn);
      const auto done =
          tx.exec_params("SELECT 1 FROM idemproxy_schema_migrations WHERE name = $1", m.name);
      if (!done.empty()) continue;
      tx.exec(m.sql);
      tx.exec_params("INSERT INTO idemproxy_schema_migrations (name) VALUES ($1)", m.name);
      tx.commit();
      applied.push_back(m.name);
    }
  } catch (...) {
    pqxx::nontransaction tx(conn);
    tx.exec("SELECT pg_advisory_unlock(" + std::to_string(kMigrationLock) + ")");
    throw;
  }
  pqxx::nontransaction tx(conn);
  tx.exec("SELECT pg_advisory_unlock(" + std::to_string(kMigrationLock) + ")");
  return applied;
}

}  // namespace idemproxy::store
