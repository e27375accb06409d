#pragma once
// Schema migrations from sql/, compiled into the binary.
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
std::vector<std::string> apply_migrations(const std::string& dsn);

}  // namespace idemproxy::store
