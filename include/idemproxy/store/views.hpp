#pragma once
// The operators' role: what the admin API, the CLI, readiness and the metrics read
// from the store. Nothing here changes a record.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "idemproxy/store/record.hpp"

namespace idemproxy::store {

/// Records as they are now, and the store's own health and figures.
class Views {
 public:
  virtual ~Views() = default;

  /// The record of `id`, whole (its stored answer too), or nothing.
  virtual Result<std::optional<Record>> find(const RecordId& id) = 0;
  /// The chunks of `id`'s streamed answer stored under `token`, in order from seq
  /// `from`, at most `limit` of them; empty past the last. A replay pages through them.
  virtual Result<std::vector<Chunk>> read_chunks(const RecordId& id, std::int64_t token,
                                                 std::int32_t from, int limit) = 0;
  /// The most recently created records, newest first, optionally in one state.
  /// Stored headers and bodies are not loaded.
  virtual Result<std::vector<Record>> list(std::optional<RecordState> state, int limit) = 0;
  /// How many records are indeterminate now (an operator must decide each one).
  virtual Result<std::int64_t> count_indeterminate() = 0;
  /// One scope's usage, beside the caps its latest admitted claim carried.
  struct ScopeUsage {
    std::string scope;
    Usage usage;
    Quota quota;
  };
  /// The scopes nearest their caps, the largest share of any cap first, at most
  /// `limit` (the admin API's quota view). Scopes claimed under no quota are absent.
  virtual Result<std::vector<ScopeUsage>> nearest_quota(int limit) = 0;
  /// Whether this store counts usage and refuses claims over a quota (ClaimRequest::
  /// quota): exactly on one PostgreSQL, within claims made at once on Citus. With a quota
  /// on one that does not (migration 011 not applied), serve stays unready.
  virtual Result<bool> counts_quotas() = 0;
  /// Whether the store answers (readiness).
  virtual Result<Done> ping() = 0;

  /// A figure the store reports about itself (pool, batching), rendered as a metric.
  struct Sample {
    const char* name;  // with its labels
    const char* help;
    double value = 0;
    bool counter = false;  // a total since start; otherwise a gauge
  };
  virtual std::vector<Sample> stats() { return {}; }
};

}  // namespace idemproxy::store
