// Group commit on Citus: a batch holds the keys of one worker (its lane), and goes as
// statements Citus runs on that worker alone. The design and its measurements:
// group_commit.cpp.
#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "idemproxy/common/hex.hpp"
#include "store/pg/group_commit.hpp"

namespace idemproxy::store::pg {

// The claims of one Citus worker as one multi-row INSERT … VALUES (claim_rows_sql):
// one task per shard, all on that worker, run in turn on one connection to it
// (citus.multi_shard_modify_mode = sequential), and one commit there, with no
// two-phase commit. Rows come back for the records claimed; the others found a live
// row.
bool GroupCommit::run_worker_claims(const std::vector<Pending*>& members) {
  std::vector<std::string> numbers;  // the parameters' text that is not already held
  numbers.reserve(members.size() * 3 + 1);
  std::vector<const char*> params;
  params.reserve(members.size() * 10 + 1);
  for (const Pending* p : in_key_order(members)) {
    const ClaimParams& cl = *p->claim;
    const ClaimRequest& r = cl.req;
    numbers.push_back(std::to_string(r.lease.count()));
    const char* lease = numbers.back().c_str();
    numbers.push_back(std::to_string(r.ttl.count()));
    const char* ttl = numbers.back().c_str();
    numbers.push_back(std::to_string(cl.nonce));
    params.insert(params.end(), {r.id.scope.c_str(), r.id.key.c_str(), cl.fingerprint().c_str(),
                                 r.route.c_str(), r.method.c_str(), r.target.c_str(), lease, ttl,
                                 cl.key_id, numbers.back().c_str()});
  }
  params.push_back(members.front()->claim->req.retake_stale ? "true" : "false");
  bool plain = false;
  const Result<pqxx::result> rows =
      pool_.with_connection<pqxx::result>([&](Connection& c) -> Result<pqxx::result> {
        if (!c.distributed()) {
          plain = true;
          return StoreError{StoreErrc::unavailable, "not on Citus"};
        }
        Write w(c);
        pqxx::result r = c.exec_rows(w.tx(), "idemproxy_claim_rows", claim_rows_sql,
                                     static_cast<int>(members.size()), params);
        w.commit();
        return r;
      });
  if (plain || !batch_succeeded(rows.ok(), members.size(), "claims")) return false;
  hand_out(members, rows.value());
  return true;
}

// The completions of one Citus worker: one UPDATE … FROM (VALUES …) per shard
// (complete_rows_sql, a router query each), in one transaction, so one commit on the
// worker; then the announcement of the watched ones, as kCompleteMany's.
bool GroupCommit::run_worker_completions(const std::vector<Pending*>& members) {
  std::map<int, std::vector<Pending*>> by_shard;  // in shard order, as Citus runs tasks
  for (Pending* p : in_key_order(members)) by_shard[pool_.shard_of(p->id.key)].push_back(p);
  bool plain = false;
  const Result<Done> done = pool_.with_connection<Done>([&](Connection& c) -> Result<Done> {
    if (!c.distributed()) {
      plain = true;
      return StoreError{StoreErrc::unavailable, "not on Citus"};
    }
    Write w(c, true);
    pqxx::transaction_base& tx = w.tx();
    std::vector<const RecordId*> watched;
    for (const auto& [shard, group] : by_shard) {
      std::vector<std::string> texts;
      // Handed out before the commit: if it fails, each member runs again on its own.
      hand_out(group, c.exec_rows(tx, "idemproxy_complete_rows", complete_rows_sql,
                                  static_cast<int>(group.size()), completion_params(group, texts)));
      for (const Pending* p : group) {
        const Answer& a = p->answer.value();
        if (a.row >= 0 && a.rows[a.row]["watched"].as<bool>()) watched.push_back(&p->id);
      }
    }
    c.announce(tx, kDoneChannel, watched);
    w.commit();
    return Done{};
  });
  return !plain && batch_succeeded(done.ok(), members.size(), "completions");
}

// complete_rows_sql's parameters for `members`, pointing into `texts` for what the
// members do not hold as text already.
std::vector<const char*> GroupCommit::completion_params(const std::vector<Pending*>& members,
                                                        std::vector<std::string>& texts) {
  texts.reserve(texts.size() + members.size() * 6);  // never moves, so no pointer dangles
  std::vector<const char*> params;
  params.reserve(members.size() * 9);
  auto text = [&](std::string t) {
    texts.push_back(std::move(t));
    return texts.back().c_str();
  };
  for (const Pending* p : members) {
    const CompleteParams& co = *p->complete;
    const char* token = text(std::to_string(co.token));
    const char* status = text(std::to_string(co.status));
    // bytea in its text form; NULL for an answer too large to keep.
    const char* headers = co.body ? text("\\x" + to_hex(co.headers.value_or(""))) : nullptr;
    const char* body = co.body ? text("\\x" + to_hex(*co.body)) : nullptr;
    const char* ttl = text(std::to_string(co.ttl_ms));
    const char* answer = text(std::to_string(co.answer_ms));
    params.insert(params.end(), {co.id.scope.c_str(), co.id.key.c_str(), token, status, headers,
                                 body, ttl, co.key_id, answer});
  }
  return params;
}

// `members` sorted by scope and key: concurrent batches then lock the rows they share
// in one order, as kClaimMany's ORDER BY does on plain PostgreSQL. A deadlock would
// still be safe (the batch fails and its members run on their own), only slower.
std::vector<Pending*> GroupCommit::in_key_order(std::vector<Pending*> members) {
  std::sort(members.begin(), members.end(), [](const Pending* a, const Pending* b) {
    return std::tie(a->id.scope, a->id.key) < std::tie(b->id.scope, b->id.key);
  });
  return members;
}
}  // namespace idemproxy::store::pg
