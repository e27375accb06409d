#pragma once
// Every SQL statement the PostgreSQL store runs, by name, grouped by what they serve.
// Each is prepared once per connection (kAll). Times travel as epoch milliseconds.
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
#include "store/pg/statements_batches.hpp"
#include "store/pg/statements_chunks.hpp"
#include "store/pg/statements_claims.hpp"
#include "store/pg/statements_maintenance.hpp"
#include "store/pg/statements_parts.hpp"
#include "store/pg/statements_views.hpp"
#include "store/pg/statements_watches.hpp"

namespace idemproxy::store::pg {

inline constexpr Statement kAll[] = {kClaim,
                                     kClaimRouted,
                                     kComplete,
                                     kClaimMany,
                                     kCompleteMany,
                                     kClaimCompleteMany,
                                     kRelease,
                                     kRenew,
                                     kStartStream,
                                     kMarkIndeterminate,
                                     kResolve,
                                     kFind,
                                     kList,
                                     kPurge,
                                     kDeleteExpired,
                                     kDropAnswers,
                                     kPing,
                                     kWatch,
                                     kAnnounce,
                                     kWithdraw,
                                     kIndeterminate,
                                     kQuotaUsage,
                                     kNearestQuota,
                                     kCountsQuotas,
                                     kQuotaCounted,
                                     kKeyPresent,
                                     kNearestQuotaCounted,
                                     kReadChunks,
                                     kCompleteChunked,
                                     kPurgeChunks,
                                     kDeleteChunksOf,
                                     kSweepLock,
                                     kSweepBound,
                                     kSweepRange,
                                     kSweepTail};

}  // namespace idemproxy::store::pg
