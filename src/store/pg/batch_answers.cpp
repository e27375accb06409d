// Group commit: a batch's members by the statement they go in, each member's own row
// of the statement's answer, and what settles after it.
#include <algorithm>
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
const Columns& GroupCommit::give_rows(const pqxx::result& rows,
                                      const std::vector<Pending*>& members,
                                      const std::vector<Pending*>* completions) {
  const auto columns = std::make_shared<SharedColumns>();
  for (Pending* p : members) p->answer = Answer{rows, -1, columns};
  if (completions != nullptr) {
    for (Pending* p : *completions) p->answer = Answer{rows, -1, columns};
  }
  const Columns& at = columns->of(rows);
  const int in_n = Columns::required(at.in_n, "in_n");
  const int completion =
      completions != nullptr ? Columns::required(at.completion, "completion") : 0;
  for (int i = 0; i < static_cast<int>(rows.size()); ++i) {
    const auto& group =
        completions != nullptr && rows[i][completion].as<bool>() ? *completions : members;
    const auto n = rows[i][in_n].as<std::size_t>();
    if (n >= 1 && n <= group.size()) group[n - 1]->answer.value().row = i;
  }
  return at;
}
// Gives each member its row of `rows`, found by scope and key (in_scope, in_key); a
// member with no row gets -1.
void GroupCommit::hand_out(const std::vector<Pending*>& members, const pqxx::result& rows) {
  std::map<std::pair<std::string_view, std::string_view>, Pending*> by_id;
  const auto columns = std::make_shared<SharedColumns>();
  for (Pending* p : members) {
    p->answer = Answer{rows, -1, columns};
    by_id.emplace(std::pair<std::string_view, std::string_view>{p->id.scope, p->id.key}, p);
  }
  const Columns& at = columns->of(rows);
  const int scope = Columns::required(at.in_scope, "in_scope");
  const int key = Columns::required(at.in_key, "in_key");
  for (int i = 0; i < static_cast<int>(rows.size()); ++i) {
    const auto row = rows[i];
    const std::pair<std::string_view, std::string_view> id{{row[scope].c_str(), row[scope].size()},
                                                           {row[key].c_str(), row[key].size()}};
    const auto at = by_id.find(id);
    if (at != by_id.end()) at->second->answer.value().row = i;
  }
}

GroupCommit::Split GroupCommit::split(const std::vector<Pending*>& batch, int worker) {
  // Claims by retake setting, each key once; completions; later claims of a key,
  // each with the first claim of its key.
  Split s;
  std::map<std::pair<std::string_view, std::string_view>, const Pending*> first_claims;
  for (Pending* p : batch) {
    if (!p->claim) {
      s.completions.push_back(p);
    } else if (auto [at, fresh] = first_claims.try_emplace({p->id.scope, p->id.key}, p); fresh) {
      s.claims[p->claim->req.retake_stale ? 1 : 0].push_back(p);
    } else {
      s.repeats.emplace_back(p, at->second);
    }
  }
  // On plain PostgreSQL, the claims (when they share one retake setting) and the
  // completions go as one statement, unless a key is in both: one statement must not
  // change a row twice. One commit per batch where there were two.
  s.together = worker < 0 && !s.completions.empty() && s.claims[0].empty() != s.claims[1].empty() &&
               std::none_of(s.completions.begin(), s.completions.end(), [&](const Pending* p) {
                 return first_claims.count({p->id.scope, p->id.key}) > 0;
               });
  return s;
}

bool GroupCommit::unsettled(const Split& s) {
  if (!s.repeats.empty()) return true;
  for (const auto* group : {&s.claims[0], &s.claims[1]}) {
    for (const Pending* p : *group) {
      if (p->answer.ok() && p->answer.value().row < 0) return true;
    }
  }
  return false;
}

void GroupCommit::settle(Split& s) {
  // A claim that saw no row (a concurrent claim committed after the statement's
  // snapshot) runs on its own, and then sees that claim.
  for (auto* group : {&s.claims[0], &s.claims[1]}) {
    for (Pending* p : *group) {
      if (p->answer.ok() && p->answer.value().row < 0) run_alone(*p);
    }
  }
  // A later claim of a key gets what the first left: never a second claim.
  for (auto [p, first] : s.repeats) {
    if (first->answer.ok() && first->answer.value().row >= 0) {
      p->answer = first->answer;
      p->answer.value().first_claim = first->claim->req;
    } else {
      run_alone(*p);
    }
  }
}

}  // namespace idemproxy::store::pg
