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

  /// Deletes up to `limit` expired records that no live holder has; returns how
  /// many. While another instance is deleting, returns 0. Also deletes the chunks no
  /// record reads any longer: those of a token that no longer holds its record, of an
  /// answer dropped or never completed, or of a record gone. Tombstones and takeovers
  /// leave them to it; a chunk is never read after its record moved on.
  virtual Result<std::int64_t> delete_expired(int limit) = 0;
  /// Turns up to `limit` of `route`'s completed records whose answer is older than
  /// `ttl` into tombstones: the stored fields and body are dropped; the fingerprint,
  /// status and times stay until the record expires (after_expiry: reject). Returns
  /// how many. While another instance is at it, returns 0.
  virtual Result<std::int64_t> drop_answers(const std::string& route, Duration ttl, int limit) = 0;
  /// Deletes one record and its chunks, whatever its state (an operator's decision);
  /// false when there was none. Replay caches everywhere drop it (Watches::Watchers::purged).
  virtual Result<bool> purge(const RecordId& id) = 0;
  /// Operator decision: an indeterminate or stale record becomes released, so the
  /// next request with the key executes. False when there was no such record.
  virtual Result<bool> resolve(const RecordId& id) = 0;
};

}  // namespace idemproxy::store
