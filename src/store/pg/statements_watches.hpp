#pragma once
// The waiters' statements (store/watches.hpp): a waiter marks a record watched, and
// finishes and purges are announced on two channels.
#include "store/pg/statements_parts.hpp"

namespace idemproxy::store::pg {

// A request waiting (on_concurrent: wait) for a record in flight on another instance
// marks it watched, so its finish is announced (kAnnounce), and says so on
// kWatchChannel. No row: it finished already, and the waiter claims again at once;
// streaming: its answer began to stream (kStartStream) since the waiter looked, and
// the waiter looks again at once to attach to it.
inline constexpr Statement kWatch{"idemproxy_watch",
                                  "UPDATE idempotency_records SET watched = true"
                                  " WHERE scope = $1 AND key = $2 AND state = 'in_flight'"
                                  " RETURNING status IS NOT NULL AS streaming"};

// Tells every listening instance about records, once this commits: channel
// idemproxy_done (a watched record finished) or idemproxy_purge (deleted); payload
// scope '\n' key. $2 and $3 are arrays, one element per record. A finish is
// announced only for watched records, so an unwatched commit never takes NOTIFY's
// database-wide commit lock. Sent after the change commits: a process that dies in
// between leaves its waiters to their fallback re-check.
inline constexpr const char* kDoneChannel = "idemproxy_done";
inline constexpr const char* kPurgeChannel = "idemproxy_purge";
// A waiter marked a record watched (kWatch): the instance whose answer streams for
// it announces its chunks on kDoneChannel from then on (Watchers::watched).
inline constexpr const char* kWatchChannel = "idemproxy_watch";
inline constexpr Statement kAnnounce{
    "idemproxy_announce",
    "SELECT pg_notify($1, s || E'\\n' || k) FROM unnest($2::text[], $3::text[]) AS a(s, k)"};

}  // namespace idemproxy::store::pg
