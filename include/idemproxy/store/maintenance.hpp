#pragma once
// The maintenance role: what garbage collection (the in-process GC and `idemproxy
// gc`) and operators' decisions (purge, resolve) change in the store.
#include <cstdint>
#include <string>

#include "idemproxy/store/record.hpp"

namespace idemproxy::store {

/// Deleting, thinning and deciding records outside the request path.
class Maintenance {
 public:
  virtual ~Maintenance() = default;

  /// Deletes up to `limit` expired records that no live holder has, and their chunks
  /// with them; returns how many records. While another instance is deleting, returns 0.
  virtual Result<std::int64_t> delete_expired(int limit) = 0;
  /// Turns up to `limit` of `route`'s completed records whose answer is older than
  /// `ttl` into tombstones: the stored fields, body and chunks are dropped; the
  /// fingerprint, status and times stay until the record expires (after_expiry:
  /// reject). Returns how many. While another instance is at it, returns 0.
  virtual Result<std::int64_t> drop_answers(const std::string& route, Duration ttl, int limit) = 0;
  /// Deletes the chunks no record reads for another reason: a token that no longer
  /// holds its record (a takeover), a released or indeterminate record's, an answer
  /// completed without them. Reads the next `rows` of the chunks from where the last
  /// call stopped, and starts again at the first after the last, so that a call costs
  /// the same however many chunks are stored; returns how many it deleted. While
  /// another instance sweeps, returns 0. A chunk is never read after its record moved
  /// on, so this only gives their space back.
  virtual Result<std::int64_t> sweep_chunks(int rows) = 0;
  /// Deletes one record and its chunks, whatever its state (an operator's decision);
  /// false when there was none. Replay caches everywhere drop it (Watches::Watchers::purged).
  virtual Result<bool> purge(const RecordId& id) = 0;
  /// Operator decision: an indeterminate or stale record becomes released, so the
  /// next request with the key executes. False when there was no such record.
  virtual Result<bool> resolve(const RecordId& id) = 0;
};

}  // namespace idemproxy::store
