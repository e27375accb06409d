#pragma once
// The operators' statements (store/views.hpp): nothing here changes a record.
#include "store/pg/statements_parts.hpp"

namespace idemproxy::store::pg {

inline constexpr Statement kFind{"idemproxy_find",
                                 "SELECT false AS claimed, " IDEMPROXY_RECORD_COLUMNS
                                 " FROM idempotency_records WHERE scope = $1 AND key = $2"};

// Newest first; headers and bodies are not read. $1 = '' means any state. A stored
// body is shown as an empty one (NULL, as in a record, when none was kept), so a
// listing tells a replayable answer from a status kept alone without reading it.
inline constexpr Statement kList{
    "idemproxy_list",
    "SELECT false AS claimed, fingerprint, state, token, route, method, target,"
    " (extract(epoch from created_at) * 1000)::bigint AS created_ms,"
    " (extract(epoch from coalesce(locked_until, created_at)) * 1000)::bigint AS locked_ms,"
    " (extract(epoch from expires_at) * 1000)::bigint AS expires_ms, expires_at <= now() AS "
    "expired,"
    " (state = 'in_flight' AND locked_until <= now()) AS stale, status, NULL::bytea AS headers,"
    " CASE WHEN body IS NULL AND chunks IS NULL THEN NULL ELSE ''::bytea END AS body, key_id,"
    " (extract(epoch from now()) * 1000)::bigint AS store_now_ms,"
    " (extract(epoch from coalesce(completed_at, created_at)) * 1000)::bigint AS completed_ms,"
    " chunks, body_length, scope, key"
    " FROM idempotency_records WHERE ($1 = '' OR state = $1) ORDER BY created_at DESC LIMIT $2"};

// The scopes nearest their caps: the largest share of any cap first.
inline constexpr Statement kNearestQuota{
    "idemproxy_nearest_quota",
    "SELECT scope, records, bytes, in_flight, quota[1] AS cap_records, quota[2] AS cap_bytes,"
    " quota[3] AS cap_in_flight FROM idempotency_usage" IDEMPROXY_FULLEST_FIRST(
        "quota[1]", "quota[2]", "quota[3]") " LIMIT $1"};

// The same from the records, on Citus (no idempotency_usage there): grouped across
// workers; the caps shown are the largest its records carry.
inline constexpr Statement kNearestQuotaCounted{
    "idemproxy_nearest_quota_counted",
    "SELECT scope, records, bytes, in_flight, cap_records, cap_bytes, cap_in_flight FROM ("
    " SELECT scope, " IDEMPROXY_USAGE_COUNTED
    ", max(quota[1]) AS cap_records,"
    " max(quota[2]) AS cap_bytes, max(quota[3]) AS cap_in_flight"
    " FROM idempotency_records WHERE quota IS NOT NULL GROUP BY scope) u" IDEMPROXY_FULLEST_FIRST(
        "cap_records", "cap_bytes", "cap_in_flight") " LIMIT $1"};

// Whether this database counts quotas: migration 011's triggers (exact), or Citus,
// where the store counts a scope's records before each claim (approximate).
inline constexpr Statement kCountsQuotas{
    "idemproxy_counts_quotas",
    "SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = 'idempotency_quota_admit'"
    " AND tgrelid = 'idempotency_records'::regclass)"
    " OR EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus')"};

inline constexpr Statement kPing{"idemproxy_ping", "SELECT 1"};

// Reads the partial index of migration 007 only.
inline constexpr Statement kIndeterminate{
    "idemproxy_count_indeterminate",
    "SELECT count(*) FROM idempotency_records WHERE state = 'indeterminate'"};

}  // namespace idemproxy::store::pg
