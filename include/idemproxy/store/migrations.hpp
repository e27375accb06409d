#pragma once
// Schema migrations from sql/, compiled into the binary.
#include <optional>
#include <string>
#include <vector>

namespace idemproxy::store {

struct Migration {
  std::string name;
  std::string sql;
};

const std::vector<Migration>& embedded_migrations();

/// Applies every migration not yet recorded, under an advisory lock so several
/// instances starting at once apply each exactly once. Returns the names applied.
/// Throws on failure: migrations run at start-up, where exceptions belong.
/// On Citus (`citus` true, or unset and the database has the citus extension) it
/// then distributes idempotency_records by key, once (docs/SCALING.md).
std::vector<std::string> apply_migrations(const std::string& dsn,
                                          std::optional<bool> citus = std::nullopt);

}  // namespace idemproxy::store
