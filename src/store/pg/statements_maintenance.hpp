#pragma once
// The maintenance statements (store/maintenance.hpp): an operator's resolve and
// purge, and garbage collection in bounded batches, one instance at a time.
#include "store/pg/statements_parts.hpp"

namespace idemproxy::store::pg {

inline constexpr Statement kResolve{
    "idemproxy_resolve",
    "UPDATE idempotency_records SET state = 'released', locked_until = NULL"
    " WHERE scope = $1 AND key = $2"
    " AND (state = 'indeterminate' OR (state = 'in_flight' AND locked_until <= now()))"};

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
    " AND (state NOT IN ('in_flight', 'indeterminate') OR locked_until <= now())"
    " RETURNING scope, key"};

// Tombstones (after_expiry: reject): a route's completed records whose replay window
// has ended (replay_until; the route's ttl, $2 ms, for records completed before it
// was kept) lose their stored fields and body, in bounded batches, and
// keep their fingerprint, status and times until they expire. One instance at a time,
// as kDeleteExpired; the outer WHERE repeats the test for a row changed meanwhile.
// Whether a completed record's replay window has ended. A replay_until before its
// completion was left by an older binary's takeover (before migration 010, claims did
// not clear it) and counts as none, as RowCodec reads it. Spelled without COALESCE,
// which Citus refuses around a stable function (timestamptz + interval).
#define IDEMPROXY_ANSWER_ENDED                                    \
  "(replay_until >= completed_at AND replay_until <= now()"       \
  " OR (replay_until IS NULL OR replay_until < completed_at) AND" \
  " completed_at <= now() - $2::bigint * interval '1 millisecond')"
inline constexpr Statement kDropAnswers{
    "idemproxy_drop_answers",
    "WITH gc_lock AS (SELECT pg_try_advisory_xact_lock(484558603) AS held),"
    " doomed AS (SELECT scope, key FROM idempotency_records"
    "  WHERE route = $1 AND state = 'completed' AND (body IS NOT NULL OR chunks IS NOT NULL)"
    "  AND " IDEMPROXY_ANSWER_ENDED
    " LIMIT $3)"
    " UPDATE idempotency_records SET headers = NULL, body = NULL, chunks = NULL,"
    " body_length = NULL, body_digest = NULL WHERE (SELECT held FROM gc_lock)"
    " AND (scope, key) IN (SELECT scope, key FROM doomed) AND state = 'completed'"
    " AND route = $1 AND " IDEMPROXY_ANSWER_ENDED " RETURNING scope, key"};
#undef IDEMPROXY_ANSWER_ENDED

}  // namespace idemproxy::store::pg
