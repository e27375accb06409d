#pragma once
// Which Citus shard, and which worker, holds a key, so group commit can batch per
// worker: a batch that stays on one worker commits once there, while one that spans
// workers takes a two-phase commit (docs/SCALING.md, measured there).
#include <cstdint>
#include <string_view>
#include <vector>

namespace idemproxy::store::pg {

/// PostgreSQL's hash_bytes (src/common/hashfn.c, Bob Jenkins' lookup3), which
/// hashtext() applies to a text value under a deterministic collation, and Citus's
/// worker_hash() to a text distribution column: the value Citus places rows by.
std::int32_t citus_hash(std::string_view text);

/// The shards of idempotency_records: each one's hash range (pg_dist_shard) and the
/// worker that holds it (pg_dist_placement's group id).
class ShardMap {
 public:
  struct Shard {
    std::int32_t min = 0, max = 0;
    int worker = -1;
  };
  ShardMap() = default;
  explicit ShardMap(std::vector<Shard> shards);

  /// The index of the shard whose range holds `key`'s hash; -1 when none does (an
  /// empty or stale map: the caller then runs the call on its own).
  int shard_of(std::string_view key) const;
  /// The worker holding `key`'s shard; -1 when no shard holds it.
  int worker_of(std::string_view key) const;
  std::size_t size() const { return shards_.size(); }

 private:
  std::vector<Shard> shards_;
};

}  // namespace idemproxy::store::pg
