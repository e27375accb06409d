#pragma once
// Every SQL statement the PostgreSQL store runs, by name. Each is prepared once
// per connection. Times travel as epoch milliseconds.
//
// The same statements run on plain PostgreSQL and on Citus (idempotency_records
// distributed by key; docs/SCALING.md), except the claim, which has a routed form,
// and the multi-row forms, which Citus would not route to one shard. So each
// statement keeps to what Citus runs as one single-shard router query:
// - one table, filtered by `key = $n` (the distribution column), no data-modifying CTE;
// - RETURNING and ON CONFLICT DO UPDATE use IMMUTABLE functions only. Citus evaluates
//   now() and nextval() in VALUES, SET and WHERE on the coordinator, so the
//   coordinator's clock stays the one clock and the fencing sequence the one
//   sequence; RETURNING converts times with IDEMPROXY_MS, which is immutable, where
//   extract(epoch from timestamptz) is only stable.
// - NOTIFY is a statement of its own (kAnnounce), sent to the coordinator, where the
//   listeners are; inside a routed statement it would fire on a worker.
#include <string>

namespace idemproxy::store::pg {

struct Statement {
  const char* name;
  const char* sql;
};

// Epoch milliseconds of a timestamptz, with immutable functions only.
#define IDEMPROXY_MS(t) "(extract(epoch from (" t ") - 'epoch'::timestamptz) * 1000)::bigint"

// clang-format off
#define IDEMPROXY_RECORD_COLUMNS                                                        \
  "fingerprint, state, token, route, method, target, "                                  \
  IDEMPROXY_MS("created_at") " AS created_ms, "                                         \
  IDEMPROXY_MS("coalesce(locked_until, created_at)") " AS locked_ms, "                  \
  IDEMPROXY_MS("expires_at") " AS expires_ms, expires_at <= now() AS expired, "         \
  "(state = 'in_flight' AND locked_until <= now()) AS stale, status, headers, body, "   \
  "key_id, (extract(epoch from now()) * 1000)::bigint AS store_now_ms, "               \
  IDEMPROXY_MS("coalesce(completed_at, created_at)") " AS completed_ms"

// A row the claim just wrote: its clock is its created_at (now() when it ran), and it
// is neither expired nor stale. Immutable functions only, for RETURNING on Citus.
#define IDEMPROXY_CLAIMED_COLUMNS                                                       \
  "true AS claimed, fingerprint, state, token, route, method, target, "                 \
  IDEMPROXY_MS("created_at") " AS created_ms, "                                         \
  IDEMPROXY_MS("locked_until") " AS locked_ms, "                                        \
  IDEMPROXY_MS("expires_at") " AS expires_ms, false AS expired, false AS stale, "       \
  "status, headers, body, key_id, "                                                     \
  IDEMPROXY_MS("created_at") " AS store_now_ms, "                                       \
  IDEMPROXY_MS("created_at") " AS completed_ms, taken_over AS took_over"
// clang-format on

// How a claim takes over an existing row: when it was released; when it has expired
// and no live holder has it (an in-flight row's TTL says nothing about its holder,
// which renews its lease while it waits on the upstream: only a lease that ran out
// frees it); when it is this very claim, sent again because the answer to the first
// send was lost with its connection (the same claim_nonce; docs/RELIABILITY.md); or
// (with the retake parameter that follows) its lease ran out. Shared by every claim
// form, so single, routed and batched claims decide alike. Times compare with
// EXCLUDED.created_at, the claim's now(): Citus refuses now() here. taken_over
// records whether a live holder was replaced (a lease takeover).
#define IDEMPROXY_CLAIM_TAKEOVER                                                                \
  " ON CONFLICT (scope, key) DO UPDATE SET"                                                     \
  "  fingerprint = EXCLUDED.fingerprint, state = 'in_flight', token = EXCLUDED.token,"          \
  "  route = EXCLUDED.route, method = EXCLUDED.method, target = EXCLUDED.target,"               \
  "  created_at = EXCLUDED.created_at, locked_until = EXCLUDED.locked_until,"                   \
  "  expires_at = EXCLUDED.expires_at, completed_at = NULL, status = NULL, headers = NULL,"     \
  "  body = NULL, key_id = EXCLUDED.key_id, watched = false,"                                   \
  "  claim_nonce = EXCLUDED.claim_nonce, taken_over = CASE"                                     \
  "  WHEN r.claim_nonce = EXCLUDED.claim_nonce THEN r.taken_over"                               \
  "  ELSE r.state IN ('in_flight', 'indeterminate') END"                                        \
  " WHERE r.state = 'released' OR (r.expires_at <= EXCLUDED.created_at AND"                     \
  "  (r.state NOT IN ('in_flight', 'indeterminate') OR r.locked_until <= EXCLUDED.created_at))" \
  "  OR (r.state = 'in_flight' AND r.claim_nonce = EXCLUDED.claim_nonce)"

#define IDEMPROXY_RETAKE_STALE(param) \
  "  OR (" param                      \
  " AND r.state IN ('in_flight', 'indeterminate') AND r.locked_until <= EXCLUDED.created_at)"

// The single-row claim of (scope, key). The row is inserted, or taken over when it
// was released, has expired, or (with $9, on_stale: retake) its lease ran out while
// in flight or indeterminate. $10 is the id of the key that sealed the fingerprint
// (NULL when stored in the clear); $11 the claim's nonce, random per claim.
#define IDEMPROXY_CLAIM_INSERT                                                                     \
  "INSERT INTO idempotency_records AS r"                                                           \
  "  (scope, key, fingerprint, state, token, route, method, target, created_at, locked_until,"     \
  "   expires_at, key_id, claim_nonce)"                                                            \
  " VALUES ($1, $2, $3, 'in_flight', nextval('idempotency_fencing_token_seq'), $4, $5, $6, now()," \
  "  now() + $7::bigint * interval '1 millisecond', now() + $8::bigint * interval '1 "             \
  "millisecond', $10, $11)" IDEMPROXY_CLAIM_TAKEOVER IDEMPROXY_RETAKE_STALE("$9")

// Claims (scope, key) in one statement and one round trip, on plain PostgreSQL: the
// claimed row, or else the live row unchanged (claimed false).
// Every column is named, so bench/ can run this exact text under pgbench (\gset).
// Zero rows means a concurrent claim committed after this statement's snapshot:
// the caller runs it again and then sees that row. took_over tells whether the
// claim took over a vanished holder's live record (a lease takeover).
inline constexpr Statement kClaim{
    "idemproxy_claim", "WITH claimed AS (" IDEMPROXY_CLAIM_INSERT
                       " RETURNING r.*)"
                       " SELECT true AS claimed, " IDEMPROXY_RECORD_COLUMNS
                       ", taken_over AS took_over FROM claimed"
                       " UNION ALL"
                       " SELECT false, " IDEMPROXY_RECORD_COLUMNS
                       ", false FROM idempotency_records"
                       "  WHERE scope = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM claimed)"};

// The claim on Citus: the INSERT alone, one single-shard router query. Citus plans a
// data-modifying CTE as separate subplans run in turn, so kClaim's lookup of the
// live row cannot share its statement; when this returns no row, the caller reads
// the live row with kFind (a second round trip, for duplicates only).
inline constexpr Statement kClaimRouted{
    "idemproxy_claim_routed", IDEMPROXY_CLAIM_INSERT " RETURNING " IDEMPROXY_CLAIMED_COLUMNS};

// Completion fences on the token. watched: another instance's request waits for
// this record (kWatch); the caller then announces the finish (kAnnounce).
inline constexpr Statement kComplete{
    "idemproxy_complete",
    "UPDATE idempotency_records SET state = 'completed', status = $4,"
    " headers = $5, body = $6, completed_at = now(), locked_until = NULL, key_id = $8,"
    " expires_at = now() + $7::bigint * interval '1 millisecond'"
    " WHERE scope = $1 AND key = $2 AND token = $3 AND state = 'in_flight'"
    " RETURNING " IDEMPROXY_MS("expires_at") " AS exp_ms, watched"};

// clang-format off
// The parts of the multi-row claim: its input, one row per record from the arrays
// $1-$9 and $11 ($10, retake, is shared by the batch); the INSERT, in (scope, key)
// order; and its answer, the claimed rows and then the live rows of the others.
// `extra` puts columns in front of the answer's (kClaimCompleteMany's).
#define IDEMPROXY_CLAIM_MANY_INPUT                                                           \
  "input AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[],"           \
  "  $5::text[], $6::text[], $7::bigint[], $8::bigint[], $9::text[], $11::bigint[])"         \
  "  WITH ORDINALITY AS i(in_scope, in_key, in_fingerprint, in_route, in_method, in_target," \
  "  in_lease_ms, in_ttl_ms, in_key_id, in_nonce, in_n))"
#define IDEMPROXY_CLAIM_MANY_INSERT                                                            \
  " claimed AS ("                                                                              \
  " INSERT INTO idempotency_records AS r"                                                      \
  "  (scope, key, fingerprint, state, token, route, method, target, created_at, locked_until," \
  "   expires_at, key_id, claim_nonce)"                                                        \
  " SELECT in_scope, in_key, in_fingerprint, 'in_flight', "                                    \
  "nextval('idempotency_fencing_token_seq'),"                                                  \
  "  in_route, in_method, in_target, now(), now() + in_lease_ms * interval '1 millisecond',"   \
  "  now() + in_ttl_ms * interval '1 millisecond', in_key_id, in_nonce FROM input"             \
  " ORDER BY in_scope, in_key" IDEMPROXY_CLAIM_TAKEOVER IDEMPROXY_RETAKE_STALE("$10")          \
  " RETURNING r.*)"
#define IDEMPROXY_CLAIM_MANY_ANSWER(extra)                                                 \
  " SELECT " extra "true AS claimed, " IDEMPROXY_RECORD_COLUMNS                            \
  ", taken_over AS took_over, in_n FROM claimed"                                           \
  "  JOIN input ON scope = in_scope AND key = in_key"                                      \
  " UNION ALL"                                                                             \
  " SELECT " extra "false, " IDEMPROXY_RECORD_COLUMNS                                      \
  ", false, in_n FROM idempotency_records JOIN input ON scope = in_scope AND key = in_key" \
  "  WHERE NOT EXISTS (SELECT 1 FROM claimed c"                                            \
  "   WHERE c.scope = idempotency_records.scope AND c.key = idempotency_records.key)"

// The parts of the multi-row completion: its input, from the arrays $a-$h, named
// `cte`; the rows it completes, locked in (scope, key) order; and the UPDATE.
#define IDEMPROXY_COMPLETE_MANY_INPUT(cte, a, b, c, d, e, f, g, h)                              \
  cte " AS (SELECT * FROM unnest(" a "::text[], " b "::text[], " c "::bigint[], " d "::int[],"  \
  "  " e "::bytea[], " f "::bytea[], " g "::bigint[], " h "::text[]) WITH ORDINALITY"           \
  "  AS i(in_scope, in_key, in_token, in_status, in_headers, in_body, in_ttl_ms, in_key_id,"    \
  "  in_n))"
#define IDEMPROXY_COMPLETE_MANY_LOCKED(cte)                                                     \
  " locked AS (SELECT scope AS l_scope, key AS l_key FROM idempotency_records"                  \
  "  JOIN " cte " ON scope = in_scope AND key = in_key"                                         \
  "  WHERE token = in_token AND state = 'in_flight'"                                            \
  "  ORDER BY scope, key FOR UPDATE OF idempotency_records)"
#define IDEMPROXY_COMPLETE_MANY_UPDATE(cte)                                                     \
  " UPDATE idempotency_records SET state = 'completed', status = in_status,"                    \
  "  headers = in_headers, body = in_body, completed_at = now(), locked_until = NULL,"          \
  "  key_id = in_key_id, expires_at = now() + in_ttl_ms * interval '1 millisecond'"             \
  " FROM locked JOIN " cte " ON l_scope = in_scope AND l_key = in_key"                          \
  " WHERE scope = l_scope AND key = l_key AND token = in_token AND state = 'in_flight'"         \
  " RETURNING " IDEMPROXY_MS("expires_at") " AS exp_ms, watched, in_n"
// clang-format on

// The multi-row forms, for group commit on plain PostgreSQL (GroupCommit::run_many).
// Each parameter is an array with one element per record; $10 (retake) is shared by
// the batch. Rows come back in any order and carry in_n, the 1-based position of
// their record in the arrays. A record missing from the answer saw a concurrent claim
// commit after the statement's snapshot; the caller runs kClaim for it. Keys must be
// distinct (ON CONFLICT DO UPDATE cannot touch a row twice). Rows are inserted, and
// so locked, in (scope, key) order, as kCompleteMany locks them, so concurrent
// batches take their locks in one order.
inline constexpr Statement kClaimMany{
    "idemproxy_claim_many", "WITH " IDEMPROXY_CLAIM_MANY_INPUT
                            "," IDEMPROXY_CLAIM_MANY_INSERT IDEMPROXY_CLAIM_MANY_ANSWER("")};

// $5 and $6 (headers, body) are NULL for an answer too large to keep.
inline constexpr Statement kCompleteMany{
    "idemproxy_complete_many",
    "WITH " IDEMPROXY_COMPLETE_MANY_INPUT("input", "$1", "$2", "$3", "$4", "$5", "$6", "$7",
                                          "$8") "," IDEMPROXY_COMPLETE_MANY_LOCKED("input")
        IDEMPROXY_COMPLETE_MANY_UPDATE("input")};

// A batch's claims and completions in one statement, so one round trip and one commit
// (one WAL flush) where kClaimMany and kCompleteMany took two of each. The claims
// take kClaimMany's parameters ($1-$11), the completions kCompleteMany's as $12-$19.
// Each row says which it answers (completion) and carries in_n, its record's position
// in its own arrays; exp_ms comes first, as in every completion's answer. A key must
// not be both claimed and completed here: one statement cannot change a row twice
// (PostgreSQL refuses it, "ON CONFLICT DO UPDATE command cannot affect row a second
// time"), so GroupCommit::run_batch keeps such a batch apart. The claims' rows are
// read with the statement's snapshot, which the completions' changes do not enter.
inline constexpr Statement kClaimCompleteMany{
    "idemproxy_claim_complete_many",
    "WITH " IDEMPROXY_CLAIM_MANY_INPUT "," IDEMPROXY_CLAIM_MANY_INSERT
    "," IDEMPROXY_COMPLETE_MANY_INPUT("done_input", "$12", "$13", "$14", "$15", "$16", "$17",
                                      "$18", "$19") "," IDEMPROXY_COMPLETE_MANY_LOCKED("done_input")
    ", completed AS (" IDEMPROXY_COMPLETE_MANY_UPDATE("done_input") ")"
    " SELECT exp_ms, watched, true AS completion, NULL::boolean AS claimed,"
    "  NULL::text AS fingerprint, NULL::text AS state, NULL::bigint AS token,"
    "  NULL::text AS route, NULL::text AS method, NULL::text AS target,"
    "  NULL::bigint AS created_ms, NULL::bigint AS locked_ms, NULL::bigint AS expires_ms,"
    "  NULL::boolean AS expired, NULL::boolean AS stale, NULL::int AS status,"
    "  NULL::bytea AS headers, NULL::bytea AS body, NULL::text AS key_id,"
    "  NULL::bigint AS store_now_ms, NULL::bigint AS completed_ms, NULL::boolean AS took_over,"
    "  in_n FROM completed"
    " UNION ALL" IDEMPROXY_CLAIM_MANY_ANSWER("NULL::bigint, NULL::boolean, false, ")};

// Withdraws a claim whose answer was lost with its connection, when sending it again
// could not learn its fate either: the request was answered without reaching the
// upstream, so the claim, if it committed, only blocks the client's retry until its
// lease runs out. It is found by its nonce, so it never touches a later claim.
inline constexpr Statement kWithdraw{
    "idemproxy_withdraw",
    "UPDATE idempotency_records SET state = 'released', locked_until = NULL"
    " WHERE scope = $1 AND key = $2 AND claim_nonce = $3 AND state = 'in_flight'"
    " RETURNING watched"};

inline constexpr Statement kRelease{
    "idemproxy_release",
    "UPDATE idempotency_records SET state = 'released', locked_until = NULL"
    " WHERE scope = $1 AND key = $2 AND token = $3 AND state = 'in_flight' RETURNING watched"};

// The holder's heartbeat: extends its lease while it waits on the upstream.
inline constexpr Statement kRenew{
    "idemproxy_renew",
    "UPDATE idempotency_records SET locked_until = now() + $4::bigint * interval '1 millisecond'"
    " WHERE scope = $1 AND key = $2 AND token = $3 AND state = 'in_flight'"
    " RETURNING " IDEMPROXY_MS("locked_until")};

inline constexpr Statement kMarkIndeterminate{
    "idemproxy_mark_indeterminate",
    "UPDATE idempotency_records SET state = 'indeterminate'"
    " WHERE scope = $1 AND key = $2 AND token = $3 AND state = 'in_flight' RETURNING watched"};

// A request waiting (on_concurrent: wait) for a record in flight on another instance
// marks it watched, so its finish is announced (kAnnounce). No row: it finished
// already, and the waiter claims again at once.
inline constexpr Statement kWatch{"idemproxy_watch",
                                  "UPDATE idempotency_records SET watched = true"
                                  " WHERE scope = $1 AND key = $2 AND state = 'in_flight'"};

// Tells every listening instance about records, once this commits: channel
// idemproxy_done (a watched record finished) or idemproxy_purge (deleted); payload
// scope '\n' key. $2 and $3 are arrays, one element per record. A finish is
// announced only for watched records, so an unwatched commit never takes NOTIFY's
// database-wide commit lock. Sent after the change commits: a process that dies in
// between leaves its waiters to their fallback re-check.
inline constexpr const char* kDoneChannel = "idemproxy_done";
inline constexpr const char* kPurgeChannel = "idemproxy_purge";
inline constexpr Statement kAnnounce{
    "idemproxy_announce",
    "SELECT pg_notify($1, s || E'\\n' || k) FROM unnest($2::text[], $3::text[]) AS a(s, k)"};

inline constexpr Statement kResolve{
    "idemproxy_resolve",
    "UPDATE idempotency_records SET state = 'released', locked_until = NULL"
    " WHERE scope = $1 AND key = $2"
    " AND (state = 'indeterminate' OR (state = 'in_flight' AND locked_until <= now()))"};

inline constexpr Statement kFind{"idemproxy_find",
                                 "SELECT false AS claimed, " IDEMPROXY_RECORD_COLUMNS
                                 " FROM idempotency_records WHERE scope = $1 AND key = $2"};

// Newest first; headers and bodies are not read. $1 = '' means any state.
inline constexpr Statement kList{
    "idemproxy_list",
    "SELECT false AS claimed, fingerprint, state, token, route, method, target,"
    " (extract(epoch from created_at) * 1000)::bigint AS created_ms,"
    " (extract(epoch from coalesce(locked_until, created_at)) * 1000)::bigint AS locked_ms,"
    " (extract(epoch from expires_at) * 1000)::bigint AS expires_ms, expires_at <= now() AS "
    "expired,"
    " (state = 'in_flight' AND locked_until <= now()) AS stale, status, NULL::bytea AS headers,"
    " NULL::bytea AS body, key_id,"
    " (extract(epoch from now()) * 1000)::bigint AS store_now_ms, scope, key"
    " FROM idempotency_records WHERE ($1 = '' OR state = $1) ORDER BY created_at DESC LIMIT $2"};

// Deletes one record; PgStore::purge announces it (kAnnounce, idemproxy_purge) in
// the same transaction, so replay caches everywhere drop it once it commits.
inline constexpr Statement kPurge{"idemproxy_purge",
                                  "DELETE FROM idempotency_records WHERE scope = $1 AND key = $2"};

// Deletes a bounded batch; rows under a live lease are left to their holder. The
// transaction-scoped advisory lock lets one instance at a time delete (the others
// delete nothing), and needs no session state, so it works through PgBouncer. On
// Citus the lock is the coordinator's, the batch is chosen across every shard, and
// the deletion runs on each shard in parallel. The outer WHERE repeats the test: a
// row claimed again after the batch was chosen is re-checked and kept.
inline constexpr Statement kDeleteExpired{
    "idemproxy_delete_expired",
    "WITH gc_lock AS (SELECT pg_try_advisory_xact_lock(484558602) AS held),"
    " doomed AS (SELECT scope, key FROM idempotency_records"
    "  WHERE expires_at <= now()"
    "  AND (state NOT IN ('in_flight', 'indeterminate') OR locked_until <= now()) LIMIT $1)"
    " DELETE FROM idempotency_records WHERE (SELECT held FROM gc_lock)"
    " AND (scope, key) IN (SELECT scope, key FROM doomed) AND expires_at <= now()"
    " AND (state NOT IN ('in_flight', 'indeterminate') OR locked_until <= now())"};

// Tombstones (after_expiry: reject): a route's completed records whose answer is older
// than its ttl ($2 ms) lose their stored fields and body, in bounded batches, and
// keep their fingerprint, status and times until they expire. One instance at a time,
// as kDeleteExpired; the outer WHERE repeats the test for a row changed meanwhile.
inline constexpr Statement kDropAnswers{
    "idemproxy_drop_answers",
    "WITH gc_lock AS (SELECT pg_try_advisory_xact_lock(484558603) AS held),"
    " doomed AS (SELECT scope, key FROM idempotency_records"
    "  WHERE route = $1 AND state = 'completed' AND body IS NOT NULL"
    "  AND completed_at <= now() - $2::bigint * interval '1 millisecond' LIMIT $3)"
    " UPDATE idempotency_records SET headers = NULL, body = NULL WHERE (SELECT held FROM gc_lock)"
    " AND (scope, key) IN (SELECT scope, key FROM doomed) AND state = 'completed'"
    " AND route = $1 AND completed_at <= now() - $2::bigint * interval '1 millisecond'"};

inline constexpr Statement kPing{"idemproxy_ping", "SELECT 1"};

// Reads the partial index of migration 007 only.
inline constexpr Statement kIndeterminate{
    "idemproxy_count_indeterminate",
    "SELECT count(*) FROM idempotency_records WHERE state = 'indeterminate'"};

inline constexpr Statement kAll[] = {
    kClaim,    kClaimRouted,   kComplete,          kClaimMany, kCompleteMany, kClaimCompleteMany,
    kRelease,  kRenew,         kMarkIndeterminate, kResolve,   kFind,         kList,
    kPurge,    kDeleteExpired, kDropAnswers,       kPing,      kWatch,        kAnnounce,
    kWithdraw, kIndeterminate};

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
         "EXCLUDED.created_at) RETURNING " IDEMPROXY_CLAIMED_COLUMNS
         ", scope AS in_scope, key AS in_key";
}

// The completion of n records in one statement, for group commit on Citus when every
// key falls in one shard: an UPDATE … FROM (VALUES …) that Citus routes to that
// shard's worker because the keys are repeated as a list it can prune by. Eight
// parameters per record ($1 scope, $2 key, $3 token, $4 status, $5 headers, $6 body,
// $7 TTL ms, $8 key id, then $9 … for the next). The expiry is computed in VALUES,
// where Citus evaluates now() on the coordinator (it refuses now() next to a column
// in an UPDATE). Returns exp_ms first, as kComplete; a record missing from the answer
// is no longer held by its token (fenced).
inline std::string complete_rows_sql(int n) {
  std::string values, keys;
  for (int i = 0; i < n; ++i) {
    auto p = [&](int k, const char* type) { return "$" + std::to_string(i * 8 + k) + "::" + type; };
    values += (i == 0 ? "(" : ", (") + p(1, "text") + ", " + p(2, "text") + ", " + p(3, "bigint") +
              ", " + p(4, "int") + ", " + p(5, "bytea") + ", " + p(6, "bytea") + ", now() + " +
              p(7, "bigint") + " * interval '1 millisecond', " + p(8, "text") + ")";
    keys += (i == 0 ? "" : ", ") + p(2, "text");
  }
  return "UPDATE idempotency_records AS t SET state = 'completed', status = v.status,"
         " headers = v.headers, body = v.body, completed_at = now(), locked_until = NULL,"
         " key_id = v.key_id, expires_at = v.expires_at FROM (VALUES " +
         values +
         ") AS v(scope, key, token, status, headers, body, expires_at, key_id)"
         " WHERE t.scope = v.scope AND t.key = v.key AND t.token = v.token"
         " AND t.state = 'in_flight' AND t.key IN (" +
         keys + ") RETURNING " IDEMPROXY_MS("t.expires_at") " AS exp_ms, t.watched,"
         " t.scope AS in_scope, t.key AS in_key";
}

#undef IDEMPROXY_MS
#undef IDEMPROXY_RECORD_COLUMNS
#undef IDEMPROXY_CLAIMED_COLUMNS
#undef IDEMPROXY_CLAIM_TAKEOVER
#undef IDEMPROXY_RETAKE_STALE
#undef IDEMPROXY_CLAIM_INSERT
#undef IDEMPROXY_CLAIM_MANY_INPUT
#undef IDEMPROXY_CLAIM_MANY_INSERT
#undef IDEMPROXY_CLAIM_MANY_ANSWER
#undef IDEMPROXY_COMPLETE_MANY_INPUT
#undef IDEMPROXY_COMPLETE_MANY_LOCKED
#undef IDEMPROXY_COMPLETE_MANY_UPDATE

}  // namespace idemproxy::store::pg
