// Group commit on plain PostgreSQL: a batch's claims as one multi-row statement over
// arrays (kClaimMany), its completions as another (kCompleteMany), or both as one
// (kClaimCompleteMany). The design and its measurements: group_commit.cpp.
#include <string>
#include <vector>

#include "store/pg/group_commit.hpp"

namespace idemproxy::store::pg {

// Runs `members` as one multi-row statement; false when it failed (nothing changed)
// or the connection turned out to be a Citus coordinator.
// Claims must have distinct keys and one retake setting.
bool GroupCommit::run_many(const std::vector<Pending*>& members, int worker) {
  const bool claims = members.front()->claim != nullptr;
  if (worker >= 0) return claims ? run_worker_claims(members) : run_worker_completions(members);
  const std::vector<pqxx::binarystring> a =
      binarystrings(claims ? claim_arrays(members) : completion_arrays(members));
  bool routed = false;
  const Result<pqxx::result> rows =
      run_plain(routed, [&](Connection& c, pqxx::transaction_base& tx) {
        if (claims) {
          return c.exec(tx, kClaimMany, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8],
                        members.front()->claim->req.retake_stale, a[9], a[10]);
        }
        pqxx::result r =
            c.exec(tx, kCompleteMany, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]);
        announce_watched(c, tx, r, members, false);
        return r;
      });
  if (routed) return false;  // each runs alone, routed
  if (!batch_succeeded(rows.ok(), members.size(), claims ? "claims" : "completions")) return false;
  give_rows(rows.value(), members);
  return true;
}

// `claims` (one retake setting, distinct keys) and `completions` (none of those keys)
// as one statement, kClaimCompleteMany: one round trip and one commit for the batch.
// False when it failed (nothing changed) or the connection is a Citus coordinator.
bool GroupCommit::run_together(const std::vector<Pending*>& claims,
                               const std::vector<Pending*>& completions) {
  const std::vector<pqxx::binarystring> a = binarystrings(claim_arrays(claims));
  const std::vector<pqxx::binarystring> d = binarystrings(completion_arrays(completions));
  bool routed = false;
  const Result<pqxx::result> rows =
      run_plain(routed, [&](Connection& c, pqxx::transaction_base& tx) {
        pqxx::result r = c.exec(tx, kClaimCompleteMany, a[0], a[1], a[2], a[3], a[4], a[5], a[6],
                                a[7], a[8], claims.front()->claim->req.retake_stale, a[9], d[0],
                                d[1], d[2], d[3], d[4], d[5], d[6], d[7], d[8], a[10]);
        announce_watched(c, tx, r, completions, true);
        return r;
      });
  if (routed) return false;  // each runs alone, routed
  if (!batch_succeeded(rows.ok(), claims.size() + completions.size(), "claims and completions")) {
    return false;
  }
  give_rows(rows.value(), claims, &completions);
  return true;
}
// Runs `statement` in a Write on a pooled connection to plain PostgreSQL. On a
// Citus coordinator it runs nothing and sets `routed`: the first connection decides,
// since before it the pool cannot know it is on Citus.
Result<pqxx::result> GroupCommit::run_plain(bool& routed, const PlainStatement& statement) {
  return pool_.with_connection<pqxx::result>([&](Connection& c) -> Result<pqxx::result> {
    if (c.distributed()) {
      routed = true;
      return StoreError{StoreErrc::unavailable, "Citus: no multi-row statements"};
    }
    Write w(c);
    pqxx::result r = statement(c, w.tx());
    w.commit();
    return r;
  });
}

// kClaimMany's arrays for `members`: $1-$9, then $11 (the nonces), then the quotas,
// in binary (array_binary.hpp).
GroupCommit::Arrays GroupCommit::claim_arrays(const std::vector<Pending*>& members) {
  using Of = ArrayBinary::Of;
  std::vector<ArrayBinary> columns =
      arrays_of({Of::text, Of::text, Of::text, Of::text, Of::text, Of::text, Of::int8, Of::int8,
                 Of::text, Of::int8, Of::text},
                members.size());
  for (const Pending* p : members) {
    const ClaimParams& cl = *p->claim;
    const ClaimRequest& r = cl.req;
    columns[0].add(r.id.scope);
    columns[1].add(r.id.key);
    columns[2].add(cl.fingerprint());
    columns[3].add(r.route);
    columns[4].add(r.method);
    columns[5].add(r.target);
    columns[6].add(static_cast<long long>(r.lease.count()));
    columns[7].add(static_cast<long long>(r.ttl.count()));
    columns[8].add(cl.key_id);
    columns[9].add(cl.nonce);
    columns[10].add_or_null(cl.quota);
  }
  return done(columns);
}

// kCompleteMany's arrays for `members`, in binary.
GroupCommit::Arrays GroupCommit::completion_arrays(const std::vector<Pending*>& members) {
  using Of = ArrayBinary::Of;
  std::vector<ArrayBinary> columns = arrays_of(
      {Of::text, Of::text, Of::int8, Of::int4, Of::bytea, Of::bytea, Of::int8, Of::text, Of::int8},
      members.size());
  for (const Pending* p : members) {
    const CompleteParams& co = *p->complete;
    columns[0].add(co.id.scope);
    columns[1].add(co.id.key);
    columns[2].add(co.token);
    columns[3].add(co.status);
    columns[4].add_or_null(co.body ? co.headers : std::nullopt);
    co.body ? columns[5].add(*co.body) : columns[5].add_null();
    columns[6].add(co.ttl_ms);
    columns[7].add(co.key_id);
    columns[8].add(co.answer_ms);
  }
  return done(columns);
}

GroupCommit::Arrays GroupCommit::done(std::vector<ArrayBinary>& columns) {
  Arrays out;
  out.reserve(columns.size());
  for (auto& col : columns) out.push_back(std::move(col).bytes());
  return out;
}

std::vector<pqxx::binarystring> GroupCommit::binarystrings(const Arrays& arrays) {
  std::vector<pqxx::binarystring> out;
  out.reserve(arrays.size());
  for (const auto& a : arrays) out.emplace_back(a.data(), a.size());
  return out;
}

// Announces the completions in `rows` that another instance's request watches
// (kAnnounce, watched_ids), after their statement committed.
void GroupCommit::announce_watched(Connection& c, pqxx::transaction_base& tx,
                                   const pqxx::result& rows, const std::vector<Pending*>& members,
                                   bool mixed) {
  c.announce(tx, kDoneChannel, watched_ids(rows, Columns(rows), members, mixed));
}

// The completions in `rows` (their in_n indexes `members`) that another instance's
// request watches. `mixed`: the rows answer claims too (kClaimCompleteMany), and say
// which they answer.
std::vector<const RecordId*> GroupCommit::watched_ids(const pqxx::result& rows, const Columns& at,
                                                      const std::vector<Pending*>& members,
                                                      bool mixed) {
  const int watched_at = Columns::required(at.watched, "watched");
  const int in_n = Columns::required(at.in_n, "in_n");
  const int completion = mixed ? Columns::required(at.completion, "completion") : 0;
  std::vector<const RecordId*> watched;
  for (const auto& row : rows) {
    if (mixed && !row[completion].as<bool>()) continue;
    if (row[watched_at].as<bool>())
      watched.push_back(&members[row[in_n].as<std::size_t>() - 1]->id);
  }
  return watched;
}
}  // namespace idemproxy::store::pg
