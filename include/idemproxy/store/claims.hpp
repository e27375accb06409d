#pragma once
// The request path's role: claim a key, then complete, renew, release or abandon the
// claim under its fencing token. The engine depends on this alone (and on watches.hpp
// for waiting).
#include <cstdint>
#include <functional>
#include <string_view>

#include "idemproxy/common/small_function.hpp"
#include "idemproxy/store/record.hpp"

namespace idemproxy::store {

/// Claims and what their holder does with them. Implementations are thread-safe and
/// may block; the proxy calls them from its database pool, never from an I/O thread
/// (except claim_async and complete_async on a store that queues_calls()).
class Claims {
 public:
  virtual ~Claims() = default;

  /// Atomically claims `id` unless a live record holds it. A released record, an
  /// expired one that no live holder has (an in-flight record is live until its
  /// lease runs out, whatever its TTL), or, with retake_stale, one whose lease ran
  /// out is claimed anew under a new token.
  virtual Result<ClaimResult> claim(const ClaimRequest& request) = 0;
  /// Stores the response and starts its retention; only the holder of `token` may.
  /// Returns the record's expiry (its tombstone's, when one follows). A response in
  /// chunks (StoredResponse::chunks) completes only when exactly that many chunks of
  /// `token` are stored, numbered 1 to chunks; otherwise it is fenced and the record
  /// stays in flight.
  virtual Result<TimePoint> complete(const RecordId& id, std::int64_t token,
                                     const StoredResponse& response, Retention keep) = 0;
  /// Records the head of the answer the holder of `token` has begun to stream: its
  /// status and fields (`head`'s body is not read), which a request waiting for the
  /// key on another instance attaches to the stream with (Record::streaming). The
  /// record's watchers are told (Watchers::finished), as for a finish. Fenced when
  /// `token` no longer holds the record in flight.
  virtual Result<Done> start_stream(const RecordId& id, std::int64_t token,
                                    const StoredResponse& head) = 0;
  /// Stores chunk `seq` (1, 2, …) of the answer the holder of `token` streams, before
  /// the record completes; durable when it returns. Storing a seq again keeps the
  /// longer bytes (the first of equal ones): a chunk may be stored while it fills,
  /// for a retry on another instance that follows the stream. Not fenced: chunks of a token that no
  /// longer holds the record are never read (read_chunks takes the token), and garbage collection
  /// deletes them.
  virtual Result<Done> append(const RecordId& id, std::int64_t token, std::int32_t seq,
                              std::string_view bytes) = 0;

  /// claim() and complete() answered through a callback instead of a blocked
  /// thread. A store that queues them (queues_calls()) returns at once and calls
  /// `done` later, on a thread of its own or on the caller's event loop
  /// (common::Reactor), so the caller may be an I/O thread; the arguments must stay
  /// alive until `done` is called. Otherwise `done` is called
  /// here, after the blocking call.
  /// Room for the coordinator's callback, which wraps its caller's (48 bytes): no heap.
  using ClaimDone = SmallFunction<void(Result<ClaimResult>), 64>;
  using CompleteDone = std::function<void(Result<TimePoint>)>;
  // Sinks, which the overrides keep:
  // NOLINTBEGIN(performance-unnecessary-value-param)
  virtual void claim_async(const ClaimRequest& request, ClaimDone done) { done(claim(request)); }
  virtual void complete_async(const RecordId& id, std::int64_t token,
                              const StoredResponse& response, Retention keep, CompleteDone done) {
    done(complete(id, token, response, keep));
  }
  /// append() answered through a callback, as complete_async: a store that queues
  /// calls stores the chunks of many streams in one transaction (group commit). `id`
  /// and `bytes` are read before it returns: a store that keeps the call copies them
  /// (PgStore copies the chunk into its batch), so the caller's buffer may move on
  /// while the chunk commits. `announce`: the record's watchers on
  /// other instances are told once the chunk is durable (Watchers::finished), as
  /// when the record finishes; a store that cannot announce ignores it.
  using AppendDone = std::function<void(Result<Done>)>;
  virtual void append_async(const RecordId& id, std::int64_t token, std::int32_t seq,
                            std::string_view bytes, bool /*announce*/, AppendDone done) {
    done(append(id, token, seq, bytes));
  }
  // NOLINTEND(performance-unnecessary-value-param)
  /// Whether claim_async, complete_async and append_async return without blocking.
  virtual bool queues_calls() const { return false; }

  /// Extends the holder's lease to now + `lease` (its heartbeat while the upstream
  /// works); returns the new end. Fenced when `token` no longer holds the record.
  virtual Result<TimePoint> renew(const RecordId& id, std::int64_t token, Duration lease) = 0;
  /// Gives the claim up so a retry executes again; only the holder of `token` may.
  virtual Result<Done> release(const RecordId& id, std::int64_t token) = 0;
  /// Records that the upstream got the request but the outcome is unknown; only the
  /// holder of `token` may. The record keeps its lease and TTL.
  virtual Result<Done> mark_indeterminate(const RecordId& id, std::int64_t token) = 0;
};

}  // namespace idemproxy::store
