#pragma once
// PostgreSQL store: a pool of connections, statements prepared once per connection,
// reconnection after the server restarts, and group commit for claims and
// completions. The parts live in src/store/pg/.
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "idemproxy/store/sealer.hpp"
#include "idemproxy/store/store.hpp"

namespace idemproxy::store {

struct PgOptions {
  std::string dsn;
  int pool_size = 8;
  Duration statement_timeout = std::chrono::seconds{5};
  /// Through a transaction-pooling PgBouncer: no prepared statements and no session
  /// settings (set statement_timeout on the role instead).
  bool transaction_pooling = false;
  /// store.encryption: seals fingerprints, stored headers and bodies. Records sealed
  /// under a key the ring lacks, or altered, read as StoreErrc::unreadable.
  std::shared_ptr<const Sealer> sealer{};
  /// Group commit: claims and completions that arrive while every connection is
  /// busy run together, up to this many in one transaction and one commit. Each
  /// caller gets its answer only after that commit. 1 commits each on its own.
  int batch_max = 64;
  /// store.postgres.citus: idempotency_records is distributed by Citus (routed
  /// statements; claims batched per shard). Unset: whether the database has the citus
  /// extension.
  std::optional<bool> citus{};
  /// store.postgres.batch_wait: how long a batch may wait for company before it runs,
  /// while the lane's last batch had company (so one request alone never waits).
  std::chrono::microseconds batch_wait{0};
  /// store.postgres.defer_chunk_flush: a streamed answer's chunk batches commit without
  /// waiting for the WAL's flush (plain PostgreSQL; Write::FlushLater), and the
  /// completion's durable commit flushes them. A crash of PostgreSQL while a stream
  /// flows can then lose chunks it had taken: the completion, which counts them, is
  /// refused and the record ends indeterminate instead of replayable.
  bool defer_chunk_flush = false;
};

/// Why a route's quota keeps the proxy unready: the database counts no usage (migration
/// 011 was not applied, as with serve --no-migrate).
inline constexpr const char* kQuotaUncounted =
    "a route's quota needs migration 011 (sql/011_quotas.sql), which counts each tenant's "
    "usage: run idemproxy migrate, or remove the quota";

class PgStore final : public Store {
 public:
  explicit PgStore(PgOptions options);
  ~PgStore() override;

  Result<ClaimResult> claim(const ClaimRequest& request) override;
  Result<TimePoint> complete(const RecordId& id, std::int64_t token, const StoredResponse& response,
                             Retention keep) override;
  /// Claims and completions join group commit and return at once; `done` is called
  /// on the caller's event loop when it named one (common::Reactor) and the batch was
  /// sent there, otherwise on the runner thread that ran the batch.
  void claim_async(const ClaimRequest& request, ClaimDone done) override;
  void complete_async(const RecordId& id, std::int64_t token, const StoredResponse& response,
                      Retention keep, CompleteDone done) override;
  /// Chunks join a group commit of their own (every stream's chunks queued while a
  /// batch runs go in the next, binary, one commit); `done` on its runner thread.
  Result<Done> append(const RecordId& id, std::int64_t token, std::int32_t seq,
                      std::string_view bytes) override;
  void append_async(const RecordId& id, std::int64_t token, std::int32_t seq,
                    std::string_view bytes, bool announce, AppendDone done) override;
  Result<Done> start_stream(const RecordId& id, std::int64_t token,
                            const StoredResponse& head) override;
  Result<std::vector<Chunk>> read_chunks(const RecordId& id, std::int64_t token, std::int32_t from,
                                         int limit) override;
  bool queues_calls() const override;
  Result<TimePoint> renew(const RecordId& id, std::int64_t token, Duration lease) override;
  Result<Done> release(const RecordId& id, std::int64_t token) override;
  Result<Done> mark_indeterminate(const RecordId& id, std::int64_t token) override;
  Result<bool> resolve(const RecordId& id) override;
  Result<std::optional<Record>> find(const RecordId& id) override;
  Result<std::vector<Record>> list(std::optional<RecordState> state, int limit) override;
  Result<bool> purge(const RecordId& id) override;
  Result<std::int64_t> delete_expired(int limit) override;
  Result<std::int64_t> sweep_chunks(int rows) override;
  Result<std::int64_t> drop_answers(const std::string& route, Duration ttl, int limit) override;
  Result<Done> ping() override;
  Result<std::int64_t> count_indeterminate() override;
  Result<std::vector<ScopeUsage>> nearest_quota(int limit) override;
  /// Whether migration 011's triggers are here (exact), or this is Citus (counted before
  /// each claim, approximate: docs/SCALING.md).
  Result<bool> counts_quotas() override;
  /// Pool and group-commit figures, as metric samples.
  std::vector<Sample> stats() override;
  /// Group-commit counters since start.
  struct BatchStats {
    std::int64_t batches = 0;     // transactions run for claims and completions
    std::int64_t operations = 0;  // claims and completions they carried
    std::int64_t fallbacks = 0;   // batches that failed and ran again one statement each
    std::int64_t multi_row = 0;   // multi-row statements that carried a batch
    std::int64_t on_loop = 0;     // batches sent and read on an I/O thread's event loop
    int queued = 0;               // waiting for a connection now
  };
  BatchStats batch_stats();
  /// Completions with more stored bytes than this are not batched: in an array they
  /// would travel as hex text.
  static constexpr std::size_t kBatchedBodyMax = std::size_t{64} << 10;
  /// LISTENs on its own connection (not through a transaction-pooling PgBouncer,
  /// where sessions do not last: then purges and finishes elsewhere are not seen).
  void watch(Watchers watchers) override;
  bool announces_finishes() const override;
  Result<bool> watch_record(const RecordId& id) override;

 private:
  struct Impl;  // src/store/pg/: pool, group commit, row codec, notification listener
  struct ClaimCall;
  struct CompleteCall;
  std::unique_ptr<Impl> impl_;
};

}  // namespace idemproxy::store
