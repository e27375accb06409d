#pragma once
// Every SQL statement the PostgreSQL store runs, by name. Each is prepared once
// per connection. Times travel as epoch milliseconds.
namespace idemproxy::store::pg {

struct Statement {
  const char* name;
  const char* sql;
};

#define IDEMPROXY_RECORD_COLUMNS                                              \
  "fingerprint, state, token, route, method, target, "                        \
  "(extract(epoch from created_at) * 1000)::bigint AS created_ms, "                   \
  "(extract(epoch from coalesce(locked_until, created_at)) * 1000)::bigint AS locked_ms, " \
  "(extract(epoch from expires_at) * 1000)::bigint AS expires_ms, "                    \
  "expires_at <= now() AS expired, "                                                     \
  "(state = 'in_flight' AND locked_until <= now()) AS stale, status, headers, body, key_id"

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
    "WITH previous AS (SELECT state IN ('in_flight', 'indeterminate') AND expires_at > now()"
    "  AS live FROM idempotency_records WHERE scope = $1 AND key = $2),"
    " claimed AS ("
    " INSERT INTO idempotency_records AS r"
    "  (scope, key, fingerprint, state, token, route, method, target, created_at, locked_until,"
    "   expires_at, key_id)"
    " VALUES ($1, $2, $3, 'in_flight', nextval('idempotency_fencing_token_seq'), $4, $5, $6, now(),"
    "  now() + $7::bigint * interval '1 millisecond', now() + $8::bigint * interval '1 "
    "millisecond', $10)"
    " ON CONFLICT (scope, key) DO UPDATE SET"
    "  fingerprint = EXCLUDED.fingerprint, state = 'in_flight', token = EXCLUDED.token,"
    "  route = EXCLUDED.route, method = EXCLUDED.method, target = EXCLUDED.target,"
    "  created_at = now(), locked_until = EXCLUDED.locked_until, expires_at = EXCLUDED.expires_at,"
    "  completed_at = NULL, status = NULL, headers = NULL, body = NULL, key_id = EXCLUDED.key_id"
    " WHERE r.state = 'released' OR r.expires_at <= now()"
    "  OR ($9 AND r.state IN ('in_flight', 'indeterminate') AND r.locked_until <= now())"
    " RETURNING r.*)"
    " SELECT true AS claimed, " IDEMPROXY_RECORD_COLUMNS
    ", coalesce((SELECT live FROM previous), false) AS took_over FROM claimed"
    " UNION ALL"
    " SELECT false, " IDEMPROXY_RECORD_COLUMNS
    ", false FROM idempotency_records"
    "  WHERE scope = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM claimed)"};

inline constexpr Statement kComplete{
    "idemproxy_complete",
    "UPDATE idempotency_records SET state = 'completed', status = $4, headers = $5, body = $6,"
    " completed_at = now(), locked_until = NULL, key_id = $8,"
    " expires_at = now() + $7::bigint * interval '1 millisecond'"
    " WHERE scope = $1 AND key = $2 AND token = $3 AND state = 'in_flight'"
    " RETURNING (extract(epoch from expires_at) * 1000)::bigint"};

inline constexpr Statement kRelease{
    "idemproxy_release",
    "UPDATE idempotency_records SET state = 'released', locked_until = NULL"
    " WHERE scope = $1 AND key = $2 AND token = $3 AND state = 'in_flight'"};

inline constexpr Statement kMarkIndeterminate{
    "idemproxy_mark_indeterminate",
    "UPDATE idempotency_records SET state = 'indeterminate'"
    " WHERE scope = $1 AND key = $2 AND token = $3 AND state = 'in_flight'"};

inline constexpr Statement kResolve{
    "idemproxy_resolve",
    "UPDATE idempotency_records SET state = 'released', locked_until = NULL"
    " WHERE scope = $1 AND key = $2"
    " AND (state = 'indeterminate' OR (state = 'in_flight' AND locked_until <= now()))"};

inline constexpr Statement kFind{"idemproxy_find",
                                 "SELECT false, " IDEMPROXY_RECORD_COLUMNS
                                 " FROM idempotency_records WHERE scope = $1 AND key = $2"};

// Newest first; headers and bodies are not read. $1 = '' means any state.
inline constexpr Statement kList{
    "idemproxy_list",
    "SELECT false, fingerprint, state, token, route, method, target,"
    " (extract(epoch from created_at) * 1000)::bigint,"
    " (extract(epoch from coalesce(locked_until, created_at)) * 1000)::bigint,"
    " (extract(epoch from expires_at) * 1000)::bigint, expires_at <= now(),"
    " (state = 'in_flight' AND locked_until <= now()), status, NULL::bytea, NULL::bytea, key_id, scope, key"
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

inline constexpr Statement kAll[] = {kClaim, kComplete, kRelease, kMarkIndeterminate, kResolve,
                                     kFind,  kList,     kPurge,   kDeleteExpired,     kPing};

#undef IDEMPROXY_RECORD_COLUMNS

}  // namespace idemproxy::store::pg
