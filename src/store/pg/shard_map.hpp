#pragma once
// Which Citus shard holds a key, so group commit can batch claims per shard: a
// multi-row INSERT whose keys share a shard is one router query on one worker, while
// one that spans shards is several tasks, and across workers a two-phase commit
// (docs/SCALING.md, measured there).
#include <cstdint>
#include <string_view>
#include <vector>

namespace idemproxy::store::pg {

/// PostgreSQL's hash_bytes (src/common/hashfn.c, Bob Jenkins' lookup3), which
/// hashtext() applies to a text value under a deterministic collation, and Citus's
/// worker_hash() to a text distribution column: the value Citus places rows by.
std::int32_t citus_hash(std::string_view text);

/// The hash ranges of idempotency_records' shards (pg_dist_shard), in order.
class ShardMap {
 public:
  ShardMap() = default;
  /// `ranges`: each shard's [min, max] hash, as pg_dist_shard lists them.
  explicit ShardMap(std::vector<std::pair<std::int32_t, std::int32_t>> ranges);

  /// The index of the shard whose range holds `key`'s hash; -1 when none does (an
  /// empty or stale map: the caller then runs the claim on its own).
  int shard_of(std::string_view key) const;
  std::size_t size() const { return ranges_.size(); }

 private:
  std::vector<std::pair<std::int32_t, std::int32_t>> ranges_;
};

}  // namespace idemproxy::store::pg
