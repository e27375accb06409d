#pragma once
// The request path's statements (store/claims.hpp): a claim, single or routed (Citus),
// and what its holder does with it, each fenced on the claim's token.
#include "store/pg/statements_parts.hpp"

namespace idemproxy::store::pg {

// Claims (scope, key) in one statement and one round trip, on plain PostgreSQL: the
// claimed row, or else the live row unchanged (claimed false).
// Every column is named, so bench/ can run this exact text under pgbench (\gset).
// Zero rows means a concurrent claim committed after this statement's snapshot:
// the caller runs it again and then sees that row. took_over tells whether the
// claim took over a vanished holder's live record (a lease takeover).
inline constexpr Statement kClaim{
    "idemproxy_claim", "WITH claimed AS (" IDEMPROXY_CLAIM_INSERT
                       " RETURNING r.*)"
                       " SELECT " IDEMPROXY_OWN_CLAIM_COLUMNS
                       " FROM claimed"
                       " UNION ALL"
                       " SELECT false, " IDEMPROXY_RECORD_COLUMNS
                       ", false FROM idempotency_records"
                       "  WHERE scope = $1 AND key = $2 AND NOT EXISTS (SELECT 1 FROM claimed)"};

// The claim on Citus: the INSERT alone, one single-shard router query. Citus plans a
// data-modifying CTE as separate subplans run in turn, so kClaim's lookup of the
// live row cannot share its statement; when this returns no row, the caller reads
// the live row with kFind (a second round trip, for duplicates only).
inline constexpr Statement kClaimRouted{
    "idemproxy_claim_routed", IDEMPROXY_CLAIM_INSERT " RETURNING " IDEMPROXY_OWN_CLAIM_COLUMNS};

// After a claim with a quota came back with no row: the scope's usage, and whether
// the key is there now. A key still absent, with the scope at a cap, was refused by
// the quota's trigger (sql/011_quotas.sql); otherwise a concurrent claim went first.
inline constexpr Statement kQuotaUsage{
    "idemproxy_quota_usage",
    "SELECT records, bytes, in_flight,"
    " EXISTS (SELECT 1 FROM idempotency_records WHERE scope = $1 AND key = $2) AS present"
    " FROM idempotency_usage WHERE scope = $1"};

// On Citus, before a claim with a quota: the scope's usage counted from its records,
// which span workers (one fan-out read; the primary key's scope prefix on each shard),
// and whether the key is there (routed). Not in the claim's transaction: claims of
// one scope made at once may each see room, so the cap is approximate there
// (docs/SCALING.md says by how much).
inline constexpr Statement kQuotaCounted{
    "idemproxy_quota_counted", "SELECT " IDEMPROXY_USAGE_COUNTED
                               " FROM idempotency_records WHERE scope = $1 AND quota IS NOT NULL"};
inline constexpr Statement kKeyPresent{
    "idemproxy_key_present",
    "SELECT EXISTS (SELECT 1 FROM idempotency_records WHERE scope = $1 AND key = $2)"};

// Completion fences on the token. $7 is the record's retention in ms (its tombstone's
// with after_expiry: reject), $9 its answer's (the replay window). watched: another instance's
// request waits for this record (kWatch); the caller then announces the finish (kAnnounce).
inline constexpr Statement kComplete{
    "idemproxy_complete",
    "UPDATE idempotency_records SET state = 'completed', status = $4,"
    " headers = $5, body = $6, completed_at = now(), locked_until = NULL, key_id = $8,"
    " expires_at = now() + $7::bigint * interval '1 millisecond',"
    " replay_until = now() + $9::bigint * interval '1 millisecond'"
    " WHERE scope = $1 AND key = $2 AND token = $3 AND state = 'in_flight'"
    " RETURNING " IDEMPROXY_MS("expires_at") " AS exp_ms, watched"};

// The head of the answer its holder has begun to stream ($4 status, $5 headers as
// stored), for retries on other instances that attach to it (Record::streaming). A
// completion overwrites both; a takeover clears them.
inline constexpr Statement kStartStream{
    "idemproxy_start_stream",
    "UPDATE idempotency_records SET status = $4, headers = $5"
    " WHERE scope = $1 AND key = $2 AND token = $3 AND state = 'in_flight' RETURNING watched"};

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

}  // namespace idemproxy::store::pg
