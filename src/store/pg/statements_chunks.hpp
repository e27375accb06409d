#pragma once
// A streamed answer's chunks (sql/012_streamed_answers.sql): appended while it
// streams, counted when the record completes, read in pages by a replay, and deleted
// once no record reads them. Each statement that names a key is a router query on
// Citus: the chunks are co-located with their records.
#include <string>

#include "store/pg/statements_parts.hpp"

namespace idemproxy::store::pg {

// `n` chunks in one statement, their parameters in binary (no hex doubling of the
// bytes): $1 the id of the key that sealed them (NULL in the clear), then per chunk
// scope, key, token, seq and bytes, no two with the same seq of one token. A chunk
// stored already keeps the longer bytes: one stored while it filled, for a retry
// that follows the stream from another instance, grows; one stored again keeps its
// first. Sealed bytes are as long as the plain ones and a constant.
inline std::string append_rows_sql(int n) {
  std::string sql =
      "INSERT INTO idempotency_chunks (scope, key, token, seq, bytes, key_id) VALUES ";
  for (int i = 0; i < n; ++i) {
    const int p = 2 + i * 5;
    if (i > 0) sql += ", ";
    sql += "($" + std::to_string(p) + "::text, $" + std::to_string(p + 1) + "::text, $" +
           std::to_string(p + 2) + "::bigint, $" + std::to_string(p + 3) + "::int, $" +
           std::to_string(p + 4) + "::bytea, $1::text)";
  }
  return sql +
         " ON CONFLICT (scope, key, token, seq) DO UPDATE SET bytes = EXCLUDED.bytes,"
         " key_id = EXCLUDED.key_id"
         " WHERE octet_length(EXCLUDED.bytes) > octet_length(idempotency_chunks.bytes)";
}

// A page of chunks: $3 the token, $4 the first seq, $5 at most how many.
inline constexpr Statement kReadChunks{
    "idemproxy_read_chunks",
    "SELECT seq, bytes, key_id FROM idempotency_chunks"
    " WHERE scope = $1 AND key = $2 AND token = $3 AND seq >= $4 ORDER BY seq LIMIT $5"};

// A completion in chunks: as kComplete, with $6 the number of chunks, $10 the body's
// length and $11 its digest, and only when the token's chunks are exactly 1..$6 (the
// subquery is on the same shard). No row: fenced, or a chunk is missing.
inline constexpr Statement kCompleteChunked{
    "idemproxy_complete_chunked",
    "UPDATE idempotency_records SET state = 'completed', status = $4,"
    " headers = $5, body = NULL, chunks = $6, body_length = $10, body_digest = $11,"
    " completed_at = now(), locked_until = NULL, key_id = $8,"
    " expires_at = now() + $7::bigint * interval '1 millisecond',"
    " replay_until = now() + $9::bigint * interval '1 millisecond'"
    " WHERE scope = $1 AND key = $2 AND token = $3 AND state = 'in_flight'"
    " AND (SELECT count(*) = $6 AND min(seq) = 1 AND max(seq) = $6 FROM idempotency_chunks c"
    " WHERE c.scope = $1 AND c.key = $2 AND c.token = $3)"
    " RETURNING " IDEMPROXY_MS("expires_at") " AS exp_ms, watched"};

// An operator's purge takes the record's chunks with it, in the same transaction.
inline constexpr Statement kPurgeChunks{
    "idemproxy_purge_chunks", "DELETE FROM idempotency_chunks WHERE scope = $1 AND key = $2"};

// The chunks of the records garbage collection just deleted or tombstoned ($1, $2:
// their scopes and keys), in the transaction that did it (PgStore::delete_expired,
// drop_answers): an index range of the primary key per record, on Citus on each
// shard beside its records. Every token's: once a record is gone or its answer
// dropped, none of its chunks is read again.
inline constexpr Statement kDeleteChunksOf{"idemproxy_delete_chunks_of",
                                           "DELETE FROM idempotency_chunks WHERE (scope, key) IN"
                                           " (SELECT * FROM unnest($1::text[], $2::text[]))"};

// The chunks no record reads for other reasons (another token's after a takeover, a
// released or indeterminate record's, an answer completed without them) are swept a
// page at a time, in primary-key order from where the last page ended (PgStore keeps
// the place, and starts again from the top at the end of the table), so that each
// collection reads a bounded part of the table rather than all of it. One instance
// at a time: the page runs in the transaction that took kSweepLock.
// kSweepBound finds the page's last row ($5 rows past its first, $1-$4);
// kSweepRange deletes the orphans from $1-$4 up to it ($5-$8), kSweepTail those from
// $1-$4 to the end of the table when fewer rows were left. Citus runs each on every
// shard in parallel, the record beside its chunks.
inline constexpr Statement kSweepLock{"idemproxy_sweep_lock",
                                      "SELECT pg_try_advisory_xact_lock(484558604)"};
inline constexpr Statement kSweepBound{
    "idemproxy_sweep_bound",
    "SELECT scope, key, token, seq FROM idempotency_chunks"
    " WHERE (scope, key, token, seq) >= ($1::text, $2::text, $3::bigint, $4::int)"
    " ORDER BY scope, key, token, seq OFFSET $5 LIMIT 1"};
#define IDEMPROXY_SWEEP_ORPHANS                                                  \
  " AND NOT EXISTS (SELECT 1 FROM idempotency_records r WHERE r.scope = c.scope" \
  " AND r.key = c.key AND r.token = c.token"                                     \
  " AND (r.state = 'in_flight' OR (r.state = 'completed' AND r.chunks IS NOT NULL)))"
inline constexpr Statement kSweepRange{
    "idemproxy_sweep_range",
    "DELETE FROM idempotency_chunks c"
    " WHERE (c.scope, c.key, c.token, c.seq) >= ($1::text, $2::text, $3::bigint, $4::int)"
    " AND (c.scope, c.key, c.token, c.seq) <= ($5::text, $6::text, $7::bigint, "
    "$8::int)" IDEMPROXY_SWEEP_ORPHANS};
inline constexpr Statement kSweepTail{"idemproxy_sweep_tail",
                                      "DELETE FROM idempotency_chunks c"
                                      " WHERE (c.scope, c.key, c.token, c.seq) >= ($1::text, "
                                      "$2::text, $3::bigint, $4::int)" IDEMPROXY_SWEEP_ORPHANS};
#undef IDEMPROXY_SWEEP_ORPHANS

}  // namespace idemproxy::store::pg
