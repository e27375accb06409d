#pragma once
// The pieces the statements share: the Statement type, the record's columns as
// every answer carries them, and the claim's INSERT with its takeover clause, so
// single, routed and batched claims decide alike. The macros stay defined: each
// statements_*.hpp expands them where it defines its statements (IDEMPROXY_ names
// clash with nothing else).

namespace idemproxy::store::pg {

struct Statement {
  const char* name;
  const char* sql;
};

// Epoch milliseconds of a timestamptz, with immutable functions only.
#define IDEMPROXY_MS(t) "(extract(epoch from (" t ") - 'epoch'::timestamptz) * 1000)::bigint"

// clang-format off
// A scope's usage counted from its records (on Citus, where no idempotency_usage row
// counts it), as migration 011's idempotency_quota_share adds it up: the records, their
// stored answers' bytes (headers and body, as stored; a body in chunks by its length)
// and those in flight.
#define IDEMPROXY_USAGE_COUNTED                                                           \
  "count(*) AS records, coalesce(sum(coalesce(octet_length(headers), 0)"                  \
  " + coalesce(octet_length(body), 0)"                                                    \
  " + CASE WHEN chunks IS NULL THEN 0 ELSE coalesce(body_length, 0) END), 0)::bigint AS bytes,"\
  " count(*) FILTER (WHERE state = 'in_flight') AS in_flight"

// Fullest first: the largest share of a cap any of records, bytes or in_flight uses.
#define IDEMPROXY_FULLEST_FIRST(records_cap, bytes_cap, in_flight_cap)                    \
  " ORDER BY greatest(records::float8 / nullif(" records_cap ", 0),"                      \
  " bytes::float8 / nullif(" bytes_cap ", 0), in_flight::float8 / nullif(" in_flight_cap \
  ", 0)) DESC NULLS LAST, scope"

#define IDEMPROXY_RECORD_COLUMNS                                                        \
  "fingerprint, state, token, route, method, target, "                                  \
  IDEMPROXY_MS("created_at") " AS created_ms, "                                         \
  IDEMPROXY_MS("coalesce(locked_until, created_at)") " AS locked_ms, "                  \
  IDEMPROXY_MS("expires_at") " AS expires_ms, expires_at <= now() AS expired, "         \
  "(state = 'in_flight' AND locked_until <= now()) AS stale, status, headers, body, "   \
  "key_id, (extract(epoch from now()) * 1000)::bigint AS store_now_ms, "               \
  IDEMPROXY_MS("coalesce(completed_at, created_at)") " AS completed_ms, "             \
  IDEMPROXY_MS("replay_until") " AS replay_ms, chunks, body_length, body_digest"

// What a claim answers for a row it wrote: its holder needs the token and the lease,
// nothing it sent (pg_store.cpp; a later claim of the key in the same batch is given
// the record from the first's request). The other columns are NULL, typed to stand
// beside IDEMPROXY_RECORD_COLUMNS in a UNION: PostgreSQL formats and libpq parses
// four values of the row where there were fifteen. Immutable functions only, for
// RETURNING on Citus.
#define IDEMPROXY_OWN_CLAIM_COLUMNS                                                     \
  "true AS claimed, NULL::text AS fingerprint, NULL::text AS state, token,"             \
  " NULL::text AS route, NULL::text AS method, NULL::text AS target,"                   \
  " NULL::bigint AS created_ms, " IDEMPROXY_MS("locked_until") " AS locked_ms,"         \
  " NULL::bigint AS expires_ms, NULL::boolean AS expired, NULL::boolean AS stale,"      \
  " NULL::int AS status, NULL::bytea AS headers, NULL::bytea AS body,"                  \
  " NULL::text AS key_id, NULL::bigint AS store_now_ms, NULL::bigint AS completed_ms,"  \
  " NULL::bigint AS replay_ms, NULL::int AS chunks, NULL::bigint AS body_length,"       \
  " NULL::bytea AS body_digest, taken_over AS took_over"
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
#define IDEMPROXY_CLAIM_TAKEOVER                                                                  \
  " ON CONFLICT (scope, key) DO UPDATE SET"                                                       \
  "  fingerprint = EXCLUDED.fingerprint, state = 'in_flight', token = EXCLUDED.token,"            \
  "  route = EXCLUDED.route, method = EXCLUDED.method, target = EXCLUDED.target,"                 \
  "  created_at = EXCLUDED.created_at, locked_until = EXCLUDED.locked_until,"                     \
  "  expires_at = EXCLUDED.expires_at, completed_at = NULL, status = NULL, headers = NULL,"       \
  "  body = NULL, key_id = EXCLUDED.key_id, watched = false, replay_until = NULL, chunks = NULL," \
  "  body_length = NULL, body_digest = NULL,"                                                     \
  "  claim_nonce = EXCLUDED.claim_nonce, taken_over = CASE"                                       \
  "  WHEN r.claim_nonce = EXCLUDED.claim_nonce THEN r.taken_over"                                 \
  "  ELSE r.state IN ('in_flight', 'indeterminate') END"                                          \
  " WHERE r.state = 'released' OR (r.expires_at <= EXCLUDED.created_at AND"                       \
  "  (r.state NOT IN ('in_flight', 'indeterminate') OR r.locked_until <= EXCLUDED.created_at))"   \
  "  OR (r.state = 'in_flight' AND r.claim_nonce = EXCLUDED.claim_nonce)"

#define IDEMPROXY_RETAKE_STALE(param) \
  "  OR (" param                      \
  " AND r.state IN ('in_flight', 'indeterminate') AND r.locked_until <= EXCLUDED.created_at)"

// The single-row claim of (scope, key). The row is inserted, or taken over when it
// was released, has expired, or (with $9, on_stale: retake) its lease ran out while
// in flight or indeterminate. $10 is the id of the key that sealed the fingerprint
// (NULL when stored in the clear); $11 the claim's nonce, random per claim; $12 the
// route's quota ({records, bytes, in_flight}, NULL without one: sql/011_quotas.sql),
// whose trigger skips the row of a new key at a cap (no row comes back).
#define IDEMPROXY_CLAIM_INSERT                                                                     \
  "INSERT INTO idempotency_records AS r"                                                           \
  "  (scope, key, fingerprint, state, token, route, method, target, created_at, locked_until,"     \
  "   expires_at, key_id, claim_nonce, quota)"                                                     \
  " VALUES ($1, $2, $3, 'in_flight', nextval('idempotency_fencing_token_seq'), $4, $5, $6, now()," \
  "  now() + $7::bigint * interval '1 millisecond', now() + $8::bigint * interval '1 "             \
  "millisecond', $10, $11, $12::bigint[])" IDEMPROXY_CLAIM_TAKEOVER IDEMPROXY_RETAKE_STALE("$9")

}  // namespace idemproxy::store::pg
