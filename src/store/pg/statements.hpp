#pragma once
// Every SQL statement the PostgreSQL store runs, by name. Each is prepared once
// per connection. Times travel as epoch milliseconds.
namespace idemproxy::store::pg {

struct Statement {
  const char* name;
  const char* sql;
};

#define IDEMPROXY_RECORD_COLUMNS                                                              \
  "fingerprint, state, token, route, method, target, "                                        \
  "(extract(epoch from created_at) * 1000)::bigint AS created_ms, "                           \
  "(extract(epoch from coalesce(locked_until, created_at)) * 1000)::bigint AS locked_ms, "    \
  "(extract(epoch from expires_at) * 1000)::bigint AS expires_ms, "                           \
  "expires_at <= now() AS expired, "                                                          \
  "(state = 'in_flight' AND locked_until <= now()) AS stale, status, headers, body, key_id, " \
  "(extract(epoch from now()) * 1000)::bigint AS store_now_ms"

// How a claim takes over an existing row: when it was released; when it has expired
// and no live holder has it (an in-flight row's TTL says nothing about its holder,
// which renews its lease while it waits on the upstream: only a lease that ran out
// frees it); or (with the retake parameter that follows) its lease ran out. Shared
// by kClaim and kClaimMany, so single and batched claims decide alike.
#define IDEMPROXY_CLAIM_TAKEOVER                                                                  \
  " ON CONFLICT (scope, key) DO UPDATE SET"                                                       \
  "  fingerprint = EXCLUDED.fingerprint, state = 'in_flight', token = EXCLUDED.token,"            \
  "  route = EXCLUDED.route, method = EXCLUDED.method, target = EXCLUDED.target,"                 \
  "  created_at = now(), locked_until = EXCLUDED.locked_until, expires_at = EXCLUDED.expires_at," \
  "  completed_at = NULL, status = NULL, headers = NULL, body = NULL, key_id = EXCLUDED.key_id,"  \
  "  watched = false"                                                                             \
  " WHERE r.state = 'released' OR (r.expires_at <= now() AND"                                     \
  "  (r.state NOT IN ('in_flight', 'indeterminate') OR r.locked_until <= now()))"

// Claims (scope, key) in one statement. The row is taken over when it was released,
// has expired, or (with $9, on_stale: retake) its lease ran out while in flight or
// indeterminate; otherwise the live row is returned unchanged.
// Every column is named, so bench/ can run this exact text under pgbench (\gset).
// Zero rows means a concurrent claim committed after this statement's snapshot:
// the caller runs it again and then sees that row. The last column tells whether the
// claim took over a vanished holder's live record (a lease takeover). $10 is the id
// of the key that sealed the fingerprint (NULL when stored in the clear).
inline constexpr Statement kClaim{
    "idemproxy_claim",
    "WITH previous AS (SELECT state IN ('in_flight', 'indeterminate')"
    "  AS live FROM idempotency_records WHERE scope = $1 AND key = $2),"
    " claimed AS ("
    " INSERT INTO idempotency_records AS r"
    "  (scope, key, fingerprint, state, token, route, method, target, created_at, locked_until,"
    "   expires_at, key_id)"
    " VALUES ($1, $2, $3, 'in_flight', nextval('idempotency_fencing_token_seq'), $4, $5, $6, now(),"
    "  now() + $7::bigint * interval '1 millisecond', now() + $8::bigint * interval '1 "
    "millisecond', $10)" IDEMPROXY_CLAIM_TAKEOVER
    "  OR ($9 AND r.state IN ('in_flight', 'indeterminate') AND r.locked_until <= now())"
    " RETURNING r.*)"
    " SELECT true AS claimed, " IDEMPROXY_RECORD_COLUMNS
    ", coalesce((SELECT live FROM previous), false) AS took_over FROM claimed"
    " UNION ALL"
    " SELECT false, " IDEMPROXY_RECORD_COLUMNS
    ", false FROM idempotency_records"
    "  WHERE scope = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM claimed)"};

// A finished record that another instance's request waits for (watched, see kWatch)
// tells it on channel idemproxy_done (payload scope '\n' key) once this commits.
// CASE evaluates pg_notify only for watched rows: an unwatched commit queues nothing
// and so never takes NOTIFY's database-wide commit lock.
#define IDEMPROXY_NOTIFY_IF_WATCHED \
  "CASE WHEN watched THEN pg_notify('idemproxy_done', scope || E'\\n' || key)::text END"

inline constexpr Statement kComplete{
    "idemproxy_complete",
    "WITH done AS (UPDATE idempotency_records SET state = 'completed', status = $4,"
    " headers = $5, body = $6, completed_at = now(), locked_until = NULL, key_id = $8,"
    " expires_at = now() + $7::bigint * interval '1 millisecond'"
    " WHERE scope = $1 AND key = $2 AND token = $3 AND state = 'in_flight'"
    " RETURNING scope, key, watched, (extract(epoch from expires_at) * 1000)::bigint AS exp_ms)"
    " SELECT exp_ms, " IDEMPROXY_NOTIFY_IF_WATCHED " FROM done"};

// The multi-row forms, for group commit (PgStore::run_batch). Each parameter is an
// array with one element per record; $10 (retake) is shared by the batch. Rows come
// back in any order and carry in_n, the 1-based position of their record in the
// arrays. A record missing from the answer saw a concurrent claim commit after the
// statement's snapshot; the caller runs kClaim for it. Keys must be distinct
// (ON CONFLICT DO UPDATE cannot touch a row twice). Rows are inserted, and so
// locked, in (scope, key) order, as kCompleteMany locks them, so concurrent batches
// take their locks in one order.
inline constexpr Statement kClaimMany{
    "idemproxy_claim_many",
    "WITH input AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[],"
    "  $5::text[], $6::text[], $7::bigint[], $8::bigint[], $9::text[]) WITH ORDINALITY"
    "  AS i(in_scope, in_key, in_fingerprint, in_route, in_method, in_target, in_lease_ms,"
    "  in_ttl_ms, in_key_id, in_n)),"
    " previous AS (SELECT scope AS p_scope, key AS p_key,"
    "  state IN ('in_flight', 'indeterminate') AS live"
    "  FROM idempotency_records JOIN input ON scope = in_scope AND key = in_key),"
    " claimed AS ("
    " INSERT INTO idempotency_records AS r"
    "  (scope, key, fingerprint, state, token, route, method, target, created_at, locked_until,"
    "   expires_at, key_id)"
    " SELECT in_scope, in_key, in_fingerprint, 'in_flight', "
    "nextval('idempotency_fencing_token_seq'),"
    "  in_route, in_method, in_target, now(), now() + in_lease_ms * interval '1 millisecond',"
    "  now() + in_ttl_ms * interval '1 millisecond', in_key_id FROM input ORDER BY in_scope, "
    "in_key" IDEMPROXY_CLAIM_TAKEOVER
    "  OR ($10 AND r.state IN ('in_flight', 'indeterminate') AND r.locked_until <= now())"
    " RETURNING r.*)"
    " SELECT true AS claimed, " IDEMPROXY_RECORD_COLUMNS
    ", coalesce(live, false) AS took_over, in_n FROM claimed"
    "  JOIN input ON scope = in_scope AND key = in_key"
    "  LEFT JOIN previous ON p_scope = scope AND p_key = key"
    " UNION ALL"
    " SELECT false, " IDEMPROXY_RECORD_COLUMNS
    ", false, in_n FROM idempotency_records JOIN input ON scope = in_scope AND key = in_key"
    "  WHERE NOT EXISTS (SELECT 1 FROM claimed c"
    "   WHERE c.scope = idempotency_records.scope AND c.key = idempotency_records.key)"};

// $5 and $6 (headers, body) are NULL for an answer too large to keep.
inline constexpr Statement kCompleteMany{
    "idemproxy_complete_many",
    "WITH input AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::int[],"
    "  $5::bytea[], $6::bytea[], $7::bigint[], $8::text[]) WITH ORDINALITY"
    "  AS i(in_scope, in_key, in_token, in_status, in_headers, in_body, in_ttl_ms, in_key_id, "
    "in_n)),"
    " locked AS (SELECT scope AS l_scope, key AS l_key FROM idempotency_records"
    "  JOIN input ON scope = in_scope AND key = in_key"
    "  WHERE token = in_token AND state = 'in_flight'"
    "  ORDER BY scope, key FOR UPDATE OF idempotency_records)"
    " , done AS (UPDATE idempotency_records SET state = 'completed', status = in_status,"
    "  headers = in_headers, body = in_body, completed_at = now(), locked_until = NULL,"
    "  key_id = in_key_id, expires_at = now() + in_ttl_ms * interval '1 millisecond'"
    " FROM locked JOIN input ON l_scope = in_scope AND l_key = in_key"
    " WHERE scope = l_scope AND key = l_key AND token = in_token AND state = 'in_flight'"
    " RETURNING scope, key, watched, (extract(epoch from expires_at) * 1000)::bigint AS exp_ms,"
    "  in_n)"
    " SELECT exp_ms, in_n, " IDEMPROXY_NOTIFY_IF_WATCHED " FROM done"};

inline constexpr Statement kRelease{
    "idemproxy_release",
    "WITH done AS (UPDATE idempotency_records SET state = 'released', locked_until = NULL"
    " WHERE scope = $1 AND key = $2 AND token = $3 AND state = 'in_flight'"
    " RETURNING scope, key, watched)"
    " SELECT " IDEMPROXY_NOTIFY_IF_WATCHED " FROM done"};

// The holder's heartbeat: extends its lease while it waits on the upstream.
inline constexpr Statement kRenew{
    "idemproxy_renew",
    "UPDATE idempotency_records SET locked_until = now() + $4::bigint * interval '1 millisecond'"
    " WHERE scope = $1 AND key = $2 AND token = $3 AND state = 'in_flight'"
    " RETURNING (extract(epoch from locked_until) * 1000)::bigint"};

inline constexpr Statement kMarkIndeterminate{
    "idemproxy_mark_indeterminate",
    "WITH done AS (UPDATE idempotency_records SET state = 'indeterminate'"
    " WHERE scope = $1 AND key = $2 AND token = $3 AND state = 'in_flight'"
    " RETURNING scope, key, watched)"
    " SELECT " IDEMPROXY_NOTIFY_IF_WATCHED " FROM done"};

// A request waiting (on_concurrent: wait) for a record in flight on another instance
// marks it watched, so its finish is announced (IDEMPROXY_NOTIFY_IF_WATCHED). No row:
// it finished already, and the waiter claims again at once.
inline constexpr Statement kWatch{"idemproxy_watch",
                                  "UPDATE idempotency_records SET watched = true"
                                  " WHERE scope = $1 AND key = $2 AND state = 'in_flight'"};

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

// Deletes one record and tells every listening instance (channel idemproxy_purge,
// payload scope '\n' key) once the deletion commits, so replay caches drop it.
inline constexpr Statement kPurge{
    "idemproxy_purge",
    "WITH purged AS (DELETE FROM idempotency_records WHERE scope = $1 AND key = $2"
    " RETURNING scope, key)"
    " SELECT pg_notify('idemproxy_purge', scope || E'\\n' || key) FROM purged"};

// Deletes a bounded batch; rows under a live lease are left to their holder. The
// transaction-scoped advisory lock lets one instance at a time delete (the others
// delete nothing), and needs no session state, so it works through PgBouncer.
inline constexpr Statement kDeleteExpired{
    "idemproxy_delete_expired",
    "WITH gc_lock AS (SELECT pg_try_advisory_xact_lock(484558602) AS held)"
    " DELETE FROM idempotency_records WHERE (SELECT held FROM gc_lock) AND (scope, key) IN ("
    " SELECT scope, key FROM idempotency_records"
    " WHERE expires_at <= now()"
    "  AND (state NOT IN ('in_flight', 'indeterminate') OR locked_until <= now())"
    " LIMIT $1 FOR UPDATE SKIP LOCKED)"};

inline constexpr Statement kPing{"idemproxy_ping", "SELECT 1"};

inline constexpr Statement kAll[] = {
    kClaim,   kComplete, kClaimMany, kCompleteMany, kRelease,       kRenew, kMarkIndeterminate,
    kResolve, kFind,     kList,      kPurge,        kDeleteExpired, kPing,  kWatch};

#undef IDEMPROXY_RECORD_COLUMNS
#undef IDEMPROXY_CLAIM_TAKEOVER
#undef IDEMPROXY_NOTIFY_IF_WATCHED

}  // namespace idemproxy::store::pg
