#pragma once
// Group commit for a streamed answer's chunks (Claims::append_async): the chunks of
// every stream that arrive while a batch runs go together in the next one, as one
// multi-row INSERT with binary parameters and one commit.
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "store/pg/group_commit.hpp"
#include "store/pg/pool.hpp"

namespace idemproxy::store::pg {

/// One chunk waiting for its batch, stored as it will be (sealed under encryption).
struct PendingChunk {
  RecordId id;
  long long token = 0;
  int seq = 0;
  std::string stored;
  /// The record's watchers are told once it commits (Claims::append_async).
  bool announce = false;
  Result<Done> answer{StoreError{StoreErrc::unavailable, "not run"}};
  /// Called once `answer` is final, on the runner thread, without the lock. It may
  /// end the PendingChunk's life.
  std::function<void()> finished;
};

class ChunkCommit {
 public:
  /// `key_id`: the key the chunks are sealed under (nullptr: in the clear).
  ChunkCommit(Pool& pool, const PgOptions& options, const char* key_id)
      : pool_(pool),
        key_id_(key_id),
        flush_later_(options.defer_chunk_flush),
        runners_(std::max(kLaneBatches, options.pool_size / 4)) {}

  /// Queues `chunk` and returns; a runner stores it with the others queued, and calls
  /// chunk.finished once the batch committed (or failed: then every member's answer
  /// is the error, and nothing of the batch is stored).
  void submit(PendingChunk& chunk);

  struct Stats {
    std::int64_t batches = 0;  // transactions that stored chunks
    std::int64_t chunks = 0;   // chunks they stored
    std::int64_t bytes = 0;    // bytes of those chunks, as stored
  };
  Stats stats();

  /// At most this many chunks, and about this many bytes, go in one batch.
  static constexpr std::size_t kBatchChunks = 64;
  static constexpr std::size_t kBatchBytes = std::size_t{8} << 20;
  /// At most this many batches of one lane commit at once, each on its own
  /// connection: one's commit waits on the WAL's flush while the next inserts.
  static constexpr int kLaneBatches = 2;

 private:
  struct Lane {
    std::deque<PendingChunk*> queue;
    int running = 0;  // batches committing, kLaneBatches at most
  };
  void drain(Lane& lane);
  Result<Done> run(const std::vector<PendingChunk*>& batch);

  Pool& pool_;
  const char* key_id_;
  bool flush_later_;  // PgOptions::defer_chunk_flush
  std::mutex mu_;
  std::map<int, Lane> lanes_;  // -1 on plain PostgreSQL; a Citus worker's group id
  Stats stats_;
  Runners runners_;  // last: its threads finish what is queued before the rest goes
};

}  // namespace idemproxy::store::pg
