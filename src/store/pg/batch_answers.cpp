// Group commit: each member of a batch gets its own row of the statement's answer.
#include <map>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "store/pg/group_commit.hpp"

namespace idemproxy::store::pg {

// Gives every member `rows`, and its own row by in_n, the 1-based position of its
// record in its statement's arrays: in `members`' order, or in `completions`' for the
// rows that say they answer a completion (kClaimCompleteMany). A member with no row
// gets -1.
void GroupCommit::give_rows(const pqxx::result& rows, const std::vector<Pending*>& members,
                            const std::vector<Pending*>* completions) {
  const auto columns = std::make_shared<SharedColumns>();
  for (Pending* p : members) p->answer = Answer{rows, -1, false, columns};
  if (completions != nullptr) {
    for (Pending* p : *completions) p->answer = Answer{rows, -1, false, columns};
  }
  const auto in_n = rows.column_number("in_n");
  const auto completion = completions != nullptr ? rows.column_number("completion") : 0;
  for (int i = 0; i < static_cast<int>(rows.size()); ++i) {
    const auto& group =
        completions != nullptr && rows[i][completion].as<bool>() ? *completions : members;
    const auto n = rows[i][in_n].as<std::size_t>();
    if (n >= 1 && n <= group.size()) group[n - 1]->answer.value().row = i;
  }
}
// Gives each member its row of `rows`, found by scope and key (in_scope, in_key); a
// member with no row gets -1.
void GroupCommit::hand_out(const std::vector<Pending*>& members, const pqxx::result& rows) {
  std::map<std::pair<std::string_view, std::string_view>, Pending*> by_id;
  const auto columns = std::make_shared<SharedColumns>();
  for (Pending* p : members) {
    p->answer = Answer{rows, -1, false, columns};
    by_id.emplace(std::pair<std::string_view, std::string_view>{p->id.scope, p->id.key}, p);
  }
  const auto scope = rows.column_number("in_scope");
  const auto key = rows.column_number("in_key");
  for (int i = 0; i < static_cast<int>(rows.size()); ++i) {
    const auto row = rows[i];
    const std::pair<std::string_view, std::string_view> id{{row[scope].c_str(), row[scope].size()},
                                                           {row[key].c_str(), row[key].size()}};
    const auto at = by_id.find(id);
    if (at != by_id.end()) at->second->answer.value().row = i;
  }
}
}  // namespace idemproxy::store::pg
