#pragma once
// Group commit's statements: claims and completions that queued together, in one
// statement and one commit. The array forms run on plain PostgreSQL; the VALUES forms
// (claim_rows_sql, complete_rows_sql) on Citus, one shard's records at a time.
#include <string>

#include "store/pg/statements_parts.hpp"

namespace idemproxy::store::pg {

// clang-format off
// The parts of the multi-row claim: its input, one row per record from the arrays
// $1-$9, $11 and `quota` ($10, retake, is shared by the batch; each quota is an
// array's text, NULL without one); the INSERT, in (scope, key) order; and its answer,
// the claimed rows and then the live rows of the others. `extra` puts columns in
// front of the answer's (kClaimCompleteMany's). The live rows are looked up only for
// the members left unclaimed (an anti-join of the input with `claimed` first): the
// statement's snapshot does not see the rows it inserted, so looking up every member
// and dropping the claimed ones after cost a primary-key descent per claim for nothing.
#define IDEMPROXY_CLAIM_MANY_INPUT(quota)                                                     \
  "input AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[],"           \
  "  $5::text[], $6::text[], $7::bigint[], $8::bigint[], $9::text[], $11::bigint[], "        \
  quota "::text[])"                                                                          \
  "  WITH ORDINALITY AS i(in_scope, in_key, in_fingerprint, in_route, in_method, in_target," \
  "  in_lease_ms, in_ttl_ms, in_key_id, in_nonce, in_quota, in_n))"
#define IDEMPROXY_CLAIM_MANY_INSERT                                                            \
  " claimed AS ("                                                                              \
  " INSERT INTO idempotency_records AS r"                                                      \
  "  (scope, key, fingerprint, state, token, route, method, target, created_at, locked_until," \
  "   expires_at, key_id, claim_nonce, quota)"                                                 \
  " SELECT in_scope, in_key, in_fingerprint, 'in_flight', "                                    \
  "nextval('idempotency_fencing_token_seq'),"                                                  \
  "  in_route, in_method, in_target, now(), now() + in_lease_ms * interval '1 millisecond',"   \
  "  now() + in_ttl_ms * interval '1 millisecond', in_key_id, in_nonce, in_quota::bigint[]"    \
  "  FROM input"                                                                               \
  " ORDER BY in_scope COLLATE \"C\", in_key COLLATE \"C\""                                     \
  IDEMPROXY_CLAIM_TAKEOVER IDEMPROXY_RETAKE_STALE("$10")                                       \
  " RETURNING r.*)"
#define IDEMPROXY_CLAIM_MANY_ANSWER(extra)                                                 \
  " SELECT " extra IDEMPROXY_OWN_CLAIM_COLUMNS ", in_n FROM claimed"                        \
  "  JOIN input ON scope = in_scope AND key = in_key"                                      \
  " UNION ALL"                                                                             \
  " SELECT " extra "false, " IDEMPROXY_RECORD_COLUMNS                                      \
  ", false, in_n FROM input JOIN idempotency_records ON scope = in_scope AND key = in_key" \
  "  WHERE NOT EXISTS (SELECT 1 FROM claimed c WHERE c.scope = in_scope AND c.key = in_key)"

// The parts of the multi-row completion: its input, from the arrays $a-$h, named
// `cte`; the rows it completes, locked in (scope, key) order; and the UPDATE.
#define IDEMPROXY_COMPLETE_MANY_INPUT(cte, a, b, c, d, e, f, g, h, j)                           \
  cte " AS (SELECT * FROM unnest(" a "::text[], " b "::text[], " c "::bigint[], " d "::int[],"  \
  "  " e "::bytea[], " f "::bytea[], " g "::bigint[], " h "::text[], " j "::bigint[])"          \
  "  WITH ORDINALITY AS i(in_scope, in_key, in_token, in_status, in_headers, in_body,"          \
  "  in_ttl_ms, in_key_id, in_answer_ms, in_n))"
#define IDEMPROXY_COMPLETE_MANY_LOCKED(cte)                                                     \
  " locked AS (SELECT scope AS l_scope, key AS l_key FROM idempotency_records"                  \
  "  JOIN " cte " ON scope = in_scope AND key = in_key"                                         \
  "  WHERE token = in_token AND state = 'in_flight'"                                            \
  "  ORDER BY scope COLLATE \"C\", key COLLATE \"C\" FOR UPDATE OF idempotency_records)"
#define IDEMPROXY_COMPLETE_MANY_UPDATE(cte)                                                     \
  " UPDATE idempotency_records SET state = 'completed', status = in_status,"                    \
  "  headers = in_headers, body = in_body, completed_at = now(), locked_until = NULL,"          \
  "  key_id = in_key_id, expires_at = now() + in_ttl_ms * interval '1 millisecond',"            \
  "  replay_until = now() + in_answer_ms * interval '1 millisecond'"                             \
  " FROM locked JOIN " cte " ON l_scope = in_scope AND l_key = in_key"                          \
  " WHERE scope = l_scope AND key = l_key AND token = in_token AND state = 'in_flight'"         \
  " RETURNING " IDEMPROXY_MS("expires_at") " AS exp_ms, watched, in_n"
// clang-format on

// The multi-row forms, for group commit on plain PostgreSQL (GroupCommit::run_many).
// Each parameter is an array with one element per record; $10 (retake) is shared by
// the batch. Rows come back in any order and carry in_n, the 1-based position of
// their record in the arrays. A record missing from the answer saw a concurrent claim
// commit after the statement's snapshot, or its scope is at a cap of its quota ($12);
// the caller runs kClaim for it. Keys must be
// distinct (ON CONFLICT DO UPDATE cannot touch a row twice). Rows are inserted, and
// so locked, in (scope, key) order, as kCompleteMany locks them, so concurrent
// batches take their locks in one order.
inline constexpr Statement kClaimMany{
    "idemproxy_claim_many",
    "WITH " IDEMPROXY_CLAIM_MANY_INPUT(
        "$12") "," IDEMPROXY_CLAIM_MANY_INSERT IDEMPROXY_CLAIM_MANY_ANSWER("")};

// $5 and $6 (headers, body) are NULL for an answer too large to keep.
inline constexpr Statement kCompleteMany{
    "idemproxy_complete_many",
    "WITH " IDEMPROXY_COMPLETE_MANY_INPUT("input", "$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8",
                                          "$9") "," IDEMPROXY_COMPLETE_MANY_LOCKED("input")
        IDEMPROXY_COMPLETE_MANY_UPDATE("input")};

// A batch's claims and completions in one statement, so one round trip and one commit
// (one WAL flush) where kClaimMany and kCompleteMany took two of each. The claims
// take kClaimMany's parameters ($1-$11, and their quotas as $21), the completions
// kCompleteMany's as $12-$20.
// Each row says which it answers (completion) and carries in_n, its record's position
// in its own arrays; exp_ms comes first, as in every completion's answer. A key must
// not be both claimed and completed here: one statement cannot change a row twice
// (PostgreSQL refuses it, "ON CONFLICT DO UPDATE command cannot affect row a second
// time"), so GroupCommit::run_batch keeps such a batch apart. The claims' rows are
// read with the statement's snapshot, which the completions' changes do not enter.
inline constexpr Statement kClaimCompleteMany{
    "idemproxy_claim_complete_many",
    "WITH " IDEMPROXY_CLAIM_MANY_INPUT("$21") "," IDEMPROXY_CLAIM_MANY_INSERT
    "," IDEMPROXY_COMPLETE_MANY_INPUT("done_input", "$12", "$13", "$14", "$15", "$16", "$17",
                                      "$18", "$19", "$20") "," IDEMPROXY_COMPLETE_MANY_LOCKED("done_input")
    ", completed AS (" IDEMPROXY_COMPLETE_MANY_UPDATE("done_input") ")"
    " SELECT exp_ms, watched, true AS completion, NULL::boolean AS claimed,"
    "  NULL::text AS fingerprint, NULL::text AS state, NULL::bigint AS token,"
    "  NULL::text AS route, NULL::text AS method, NULL::text AS target,"
    "  NULL::bigint AS created_ms, NULL::bigint AS locked_ms, NULL::bigint AS expires_ms,"
    "  NULL::boolean AS expired, NULL::boolean AS stale, NULL::int AS status,"
    "  NULL::bytea AS headers, NULL::bytea AS body, NULL::text AS key_id,"
    "  NULL::bigint AS store_now_ms, NULL::bigint AS completed_ms, NULL::bigint AS replay_ms,"
    "  NULL::int AS chunks, NULL::bigint AS body_length, NULL::bytea AS body_digest,"
    "  NULL::boolean AS took_over,"
    "  in_n FROM completed"
    " UNION ALL" IDEMPROXY_CLAIM_MANY_ANSWER("NULL::bigint, NULL::boolean, false, ")};

// The claim of n records in one statement, for group commit on Citus when every key
// falls in one shard: a multi-row INSERT … VALUES there is one router query on one
// worker (an array, as kClaimMany takes, is not). Ten parameters per record, cast
// because a multi-row VALUES list does not take its types from the target columns
// ($1 scope, $2 key, $3 fingerprint, $4 route, $5 method, $6 target, $7 lease ms,
// $8 TTL ms, $9 key id, $10 nonce, then $11 … for the next record), and last the
// shared retake setting. Returns the claimed rows with their scope and key; a record
// missing from the answer found a live row and runs kClaimRouted on its own.
inline std::string claim_rows_sql(int n) {
  std::string sql =
      "INSERT INTO idempotency_records AS r"
      "  (scope, key, fingerprint, state, token, route, method, target, created_at, "
      "locked_until, expires_at, key_id, claim_nonce) VALUES ";
  for (int i = 0; i < n; ++i) {
    auto p = [&](int k, const char* type) {
      return "$" + std::to_string(i * 10 + k) + "::" + type;
    };
    sql += (i == 0 ? "(" : ", (") + p(1, "text") + ", " + p(2, "text") + ", " + p(3, "text") +
           ", 'in_flight', nextval('idempotency_fencing_token_seq'), " + p(4, "text") + ", " +
           p(5, "text") + ", " + p(6, "text") + ", now(), now() + " + p(7, "bigint") +
           " * interval '1 millisecond', now() + " + p(8, "bigint") +
           " * interval '1 millisecond', " + p(9, "text") + ", " + p(10, "bigint") + ")";
  }
  const std::string retake = "$" + std::to_string(n * 10 + 1) + "::boolean";
  return sql + IDEMPROXY_CLAIM_TAKEOVER "  OR (" + retake +
         " AND r.state IN ('in_flight', 'indeterminate') AND r.locked_until <= "
         "EXCLUDED.created_at) RETURNING " IDEMPROXY_OWN_CLAIM_COLUMNS
         ", scope AS in_scope, key AS in_key";
}

// The completion of n records in one statement, for group commit on Citus when every
// key falls in one shard: an UPDATE … FROM (VALUES …) that Citus routes to that
// shard's worker because the keys are repeated as a list it can prune by. Nine
// parameters per record ($1 scope, $2 key, $3 token, $4 status, $5 headers, $6 body,
// $7 TTL ms, $8 key id, $9 the answer's retention ms, then $10 … for the next). The expiry is
// computed in VALUES, where Citus evaluates now() on the coordinator (it refuses now() next to a
// column in an UPDATE). Returns exp_ms first, as kComplete; a record missing from the answer is no
// longer held by its token (fenced).
inline std::string complete_rows_sql(int n) {
  std::string values, keys;
  for (int i = 0; i < n; ++i) {
    auto p = [&](int k, const char* type) { return "$" + std::to_string(i * 9 + k) + "::" + type; };
    values += (i == 0 ? "(" : ", (") + p(1, "text") + ", " + p(2, "text") + ", " + p(3, "bigint") +
              ", " + p(4, "int") + ", " + p(5, "bytea") + ", " + p(6, "bytea") + ", now() + " +
              p(7, "bigint") + " * interval '1 millisecond', " + p(8, "text") + ", now() + " +
              p(9, "bigint") + " * interval '1 millisecond')";
    keys += (i == 0 ? "" : ", ") + p(2, "text");
  }
  return "UPDATE idempotency_records AS t SET state = 'completed', status = v.status,"
         " headers = v.headers, body = v.body, completed_at = now(), locked_until = NULL,"
         " key_id = v.key_id, expires_at = v.expires_at, replay_until = v.replay_until"
         " FROM (VALUES " +
         values +
         ") AS v(scope, key, token, status, headers, body, expires_at, key_id, replay_until)"
         " WHERE t.scope = v.scope AND t.key = v.key AND t.token = v.token"
         " AND t.state = 'in_flight' AND t.key IN (" +
         keys + ") RETURNING " IDEMPROXY_MS("t.expires_at") " AS exp_ms, t.watched,"
         " t.scope AS in_scope, t.key AS in_key";
}

#undef IDEMPROXY_CLAIM_MANY_INPUT
#undef IDEMPROXY_CLAIM_MANY_INSERT
#undef IDEMPROXY_CLAIM_MANY_ANSWER
#undef IDEMPROXY_COMPLETE_MANY_INPUT
#undef IDEMPROXY_COMPLETE_MANY_LOCKED
#undef IDEMPROXY_COMPLETE_MANY_UPDATE

}  // namespace idemproxy::store::pg
