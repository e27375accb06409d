#pragma once
// Garbage collection: expired records deleted, and answers past their route's ttl
// dropped where the route keeps tombstones, in bounded batches through the store's
// maintenance role.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "idemproxy/store/maintenance.hpp"

namespace idemproxy::ops {

/// What one collection did.
struct Collected {
  std::int64_t deleted = 0;
  std::int64_t tombstoned = 0;       // answers dropped, their records kept as tombstones
  std::int64_t swept = 0;            // chunks no record reads, deleted
  std::optional<std::string> error;  // the store failed after `deleted`
};

/// A route whose records become tombstones (after_expiry: reject) once their answer
/// is older than `ttl` (engine::tombstone_routes lists them from the route policies).
struct TombstoneRoute {
  std::string name;
  Duration ttl{};
};

/// Deletes expired records in batches of `batch_size` until a batch comes back short
/// or `max_batches` ran (the in-process GC and `idemproxy gc`). Then, for each of
/// `tombstones`, drops the answers older than its ttl, in the same batches. Then
/// sweeps one page of kSweepPages × `batch_size` chunks for orphans.
inline constexpr int kSweepPages = 10;
Collected collect_expired(store::Maintenance& store, int batch_size, int max_batches,
                          const std::vector<TombstoneRoute>& tombstones = {});

}  // namespace idemproxy::ops
