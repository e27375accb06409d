// Prints a pgbench script that runs idemproxy's own claim and complete statements
// (src/store/pg/statements.hpp, the exact text), each in its own transaction, as one
// keyed request does. Parameters become pgbench variables, named apart from the
// claim's columns (which \gset also sets); bench/run.sh passes the string ones with -D.
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "store/pg/statements.hpp"

namespace {

std::string bind(std::string sql, const std::vector<std::pair<int, std::string>>& values) {
  for (const auto& [n, value] : values) {  // highest first: $10 before $1
    const std::string name = "$" + std::to_string(n);
    for (auto at = sql.find(name); at != std::string::npos; at = sql.find(name, at)) {
      sql.replace(at, name.size(), value);
      at += value.size();
    }
  }
  return sql;
}

}  // namespace

int main() {
  using idemproxy::store::pg::kClaim;
  using idemproxy::store::pg::kComplete;
  std::cout << "-- idemproxy's claim and complete statements, one transaction each\n"
            << "\\set k random(1, 4000000000000000000)\n"
            << bind(kClaim.sql, {{12, "NULL"},
                                 {11, ":k"},
                                 {10, "NULL"},
                                 {9, ":retake"},
                                 {8, ":ttl_ms"},
                                 {7, ":lease_ms"},
                                 {6, ":target"},
                                 {5, ":method"},
                                 {4, ":route"},
                                 {3, ":fp"},
                                 {2, ":k"},
                                 {1, ":scope"}})
            << " \\gset\n"
            << bind(kComplete.sql, {{9, ":ttl_ms"},
                                    {8, "NULL"},
                                    {7, ":ttl_ms"},
                                    {6, ":resp_body"},
                                    {5, ":resp_headers"},
                                    {4, ":resp_status"},
                                    {3, ":token"},
                                    {2, ":k"},
                                    {1, ":scope"}})
            << ";\n";
}
